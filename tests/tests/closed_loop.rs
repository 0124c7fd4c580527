//! The closed loop through Kafka: `jobcast simulate --via-kafka` as the
//! downstream scheduler of a `jobcast serve` (a separate process, on a mock
//! cluster hosted by this test) must schedule every job exactly as the
//! in-process simulation from an empty history does, for each policy.

use std::path::Path;
use std::time::Instant;

use jobcast_ingest::kafka::Topics;
use jobcast_tests::kafka::Cluster;
use jobcast_tests::serve::Serve;
use jobcast_tests::{generated_trace, jobcast, simulate_args};
use serde_json::Value;

/// About 100 simulated jobs (the second half of 240) on a few recurring
/// families, so that the history matters: thin jobs, wide ones of up to 40
/// tasks, and some DAGs.
const WORKLOAD: &str = "--seed 11 --jobs 200 --slots 20 --families 8 --max-width 40 \
                        --dag-fraction 0.1";

/// The service as the simulator needs it: `policy` driving, no shadow
/// policies, and every other engine setting at its default, which is also
/// `jobcast simulate`'s (thin limit 3, adaptive sampling, seed 0, default
/// history and queues). The rest makes each round trip short: a batch is
/// processed as soon as it is read, commits are not fsynced, outputs are
/// sent at once, and an empty fetch (which the mock broker holds for its
/// full wait) waits 5 ms.
fn serve_config(dir: &Path, policy: &str) -> String {
    let path = dir.join("serve.toml");
    let text = format!(
        r#"
[consumer]
batch_linger_ms = 0

[storage]
sync = false

[kafka.client]
"fetch.wait.max.ms" = "1"
"linger.ms" = "0"

[engine]
policy = "{policy}"
shadow = []
"#
    );
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

/// Every job's (id, JCT, final queue, final phase), from `simulate --json`.
fn outcomes(json: &str) -> Vec<(u64, u64, u64, String)> {
    let v: Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"));
    v["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| {
            (
                j["job_id"].as_u64().unwrap(),
                j["jct_us"].as_u64().unwrap(),
                j["queue"].as_u64().unwrap(),
                j["phase"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Every job's final estimate of its mean task runtime (µs), if it had one.
fn estimates(json: &str) -> Vec<Option<f64>> {
    let v: Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"));
    v["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| j["estimated_mean_task_runtime_us"].as_f64())
        .collect()
}

#[test]
fn the_loop_through_kafka_schedules_exactly_as_the_in_process_simulation() {
    let (dir, trace) = generated_trace(WORKLOAD);
    let trace = trace.to_str().unwrap();
    let topics = Topics::default();

    for policy in ["slearn", "3sigma"] {
        let started = Instant::now();
        // Several input partitions: the simulator writes to partition 0 only,
        // and the service's merge must not wait for the others.
        let cluster = Cluster::new(&topics, 4);
        let brokers = cluster.brokers();
        let state = dir.path().join(format!("state-{policy}"));
        let config = serve_config(dir.path(), policy);
        let serve = Serve::start(&brokers, &state, &["--config", &config]);

        let run = |extra: &[&str]| {
            let mut args = simulate_args(trace, policy, &["--json"]);
            args.extend_from_slice(extra);
            let out = jobcast(&args);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "jobcast {args:?} failed:\n{stderr}");
            for line in stderr.lines().filter(|l| l.starts_with("closed loop:")) {
                eprintln!("{policy}: {line}");
            }
            String::from_utf8(out.stdout).expect("stdout is UTF-8")
        };
        let via_kafka: [&str; 5] = [
            "--via-kafka",
            "--brokers",
            &brokers,
            "-X",
            "fetch.wait.max.ms=1",
        ];
        let looped = run(&via_kafka);
        let in_process = run(&["--cold-start"]);

        // A simulation of another policy stops at the service's first
        // decision, naming both.
        let other = if policy == "slearn" {
            "3sigma"
        } else {
            "slearn"
        };
        let mismatched = jobcast(&simulate_args(trace, other, &via_kafka));
        let stderr = String::from_utf8_lossy(&mismatched.stderr);
        assert!(
            !mismatched.status.success(),
            "{policy} vs {other}: {stderr}"
        );
        assert!(
            stderr.contains(&format!(
                "decisions of policy {policy}, but the simulation is of {other}"
            )),
            "{stderr}"
        );
        serve.terminate();

        let (looped_estimates, expected_estimates) = (estimates(&looped), estimates(&in_process));
        let looped = outcomes(&looped);
        let expected = outcomes(&in_process);
        assert_eq!(looped.len(), expected.len(), "{policy}: job counts");
        for (got, want) in looped.iter().zip(&expected) {
            assert_eq!(got, want, "{policy}: (job, JCT µs, queue, phase)");
        }
        // Estimates cross Kafka as JSON text, in whole µs: equal to the
        // µs.
        for ((got, want), job) in looped_estimates
            .iter()
            .zip(&expected_estimates)
            .zip(&expected)
        {
            match (got, want) {
                (Some(g), Some(w)) => assert!(
                    (g - w).abs() <= 0.5 + 1e-9 * w.abs(),
                    "{policy}: job {} estimated {g} µs, in process {w} µs",
                    job.0
                ),
                _ => assert_eq!(got, want, "{policy}: job {} estimate", job.0),
            }
        }
        // Worth comparing: the history and the queues made a difference.
        assert!(expected.len() >= 60, "{policy}: {} jobs", expected.len());
        let queues: std::collections::BTreeSet<u64> = expected.iter().map(|o| o.2).collect();
        assert!(
            queues.len() >= 2,
            "{policy}: every job in queues {queues:?}"
        );
        let jcts: std::collections::BTreeSet<u64> = expected.iter().map(|o| o.1).collect();
        assert!(
            jcts.len() > expected.len() / 2,
            "{policy}: few distinct JCTs"
        );
        let estimated = expected.iter().filter(|o| o.3 == "estimated").count();
        assert!(estimated > 0, "{policy}: no job placed by an estimate");
        eprintln!(
            "{policy}: {} jobs equal in {:.1} s",
            expected.len(),
            started.elapsed().as_secs_f64()
        );
    }
}
