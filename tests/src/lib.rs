//! Helpers for end-to-end tests of the `jobcast` binary. The tests run the
//! real binary (built by `cargo build --release --bins`, which
//! `scripts/test.sh` does first) on real and hand-made inputs.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use jobcast_ingest::event::Event;
use jobcast_ingest::{Format, open};

pub mod kafka;
pub mod serve;
pub mod slurm;
pub mod tansu;

/// The canonical events of the bundled Google 2011 excerpt.
pub fn excerpt_events() -> Vec<Event> {
    let dir = repo().join("tests/data/google2011-excerpt");
    open(Format::Google2011, &dir)
        .expect("the bundled excerpt opens")
        .map(|e| e.expect("the bundled excerpt is clean"))
        .collect()
}

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_owned()
}

/// `../shared/data/NAME`. The tests that need it are ignored by default
/// (`scripts/test.sh` runs them where the shared traces exist), and fail
/// without it when run: they never pass without their data.
pub fn shared_data(name: &str) -> PathBuf {
    let dir = repo().join("../shared/data").join(name);
    assert!(
        dir.exists(),
        "{} not found: the shared traces sit beside the repository (../shared/data)",
        dir.display()
    );
    dir
}

/// The `jobcast` binary next to this test's own executable
/// (`target/release/deps/<test>` → `target/release/jobcast`).
pub fn jobcast_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .map(|dir| dir.join(format!("jobcast{}", std::env::consts::EXE_SUFFIX)))
        .expect("test executable lives in target/<profile>/deps");
    assert!(
        bin.is_file(),
        "{} not found: build it first with `cargo build --release --bins` (scripts/test.sh does)",
        bin.display()
    );
    bin
}

/// Run `jobcast ARGS` and return its output, whatever its exit status.
pub fn jobcast(args: &[&str]) -> Output {
    Command::new(jobcast_bin())
        .args(args)
        .env("JOBCAST_LOG", "warn")
        .output()
        .expect("jobcast runs")
}

/// Run `jobcast ARGS`, insisting that it succeeds; its stdout.
pub fn jobcast_ok(args: &[&str]) -> String {
    let out = jobcast(args);
    assert!(
        out.status.success(),
        "jobcast {args:?} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("stdout is UTF-8")
}

/// `jobcast convert --format FORMAT --input INPUT --output OUT`, which
/// must succeed; its summary.
pub fn convert(format: &str, input: &Path, out: &Path) -> String {
    jobcast_ok(&[
        "convert",
        "--format",
        format,
        "--input",
        input.to_str().expect("UTF-8 path"),
        "--output",
        out.to_str().expect("UTF-8 path"),
    ])
}

/// `jobcast generate FLAGS` into `trace.jsonl` in a new temporary directory,
/// which must succeed: the directory and the trace's path.
pub fn generated_trace(flags: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let trace = dir.path().join("trace.jsonl");
    let mut args = vec!["generate"];
    args.extend(flags.split_whitespace());
    args.extend(["--output", trace.to_str().expect("UTF-8 path")]);
    jobcast_ok(&args);
    (dir, trace)
}

/// `simulate --trace TRACE --format jsonl --policy POLICY REST…`, as
/// arguments.
pub fn simulate_args<'a>(trace: &'a str, policy: &'a str, rest: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "simulate", "--trace", trace, "--format", "jsonl", "--policy", policy,
    ];
    args.extend_from_slice(rest);
    args
}

/// Run a SQL query over converted tables and parse its JSON rows.
pub fn sql_json(data: &Path, query: &str) -> Vec<serde_json::Value> {
    let out = jobcast_ok(&[
        "sql",
        "--data",
        data.to_str().expect("UTF-8 path"),
        "--format",
        "json",
        query,
    ]);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// A child process that is killed (SIGKILL) and reaped when dropped, so
/// that a test that fails leaves nothing of it running.
pub struct Running(pub std::process::Child);

impl std::ops::Deref for Running {
    type Target = std::process::Child;
    fn deref(&self) -> &std::process::Child {
        &self.0
    }
}

impl std::ops::DerefMut for Running {
    fn deref_mut(&mut self) -> &mut std::process::Child {
        &mut self.0
    }
}

impl Running {
    /// SIGTERM, and a clean exit (status 0) to it.
    pub fn terminate(&mut self) {
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(sent.success());
        let status = self.0.wait().expect("reaped");
        assert!(status.success(), "exited with {status} after SIGTERM");
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// A tiny trace (canonical JSON lines) that drives CloudCoaster's
/// controller (`engine.capacity`, on with [`CAPACITY_SETTINGS`]) through
/// a grow, a hold, a release and a hold again: four on-demand machines;
/// a job of 10 h that teaches the history; four like it, long by their
/// estimate, on all four machines (`l_r` = 1: grow by one); a transient VM
/// joins (hold: releasing it would push `l_r` over the threshold); a
/// second, launched 23 h before, joins (`l_r` = 4/6: release one, the old
/// one, near GCE's 24 h deadline); it leaves (hold). 16 events; the
/// decisions are [`CAPACITY_DECISIONS`].
pub fn capacity_trace(path: &Path) -> usize {
    const H: u64 = 3_600_000_000;
    let job = |id: u64, t: u64| {
        format!(
            r#"{{"v":1,"type":"job_submitted","time_us":{t},"job_id":{id},"user":"u","job_name":"nightly","logical_name":"nightly","scheduling_class":1,"priority":10,"cpu_request":0.01,"mem_request":0.01,"num_tasks":1}}"#
        )
    };
    let task = |id: u64, t: u64, kind: &str, machine: u64| {
        format!(
            r#"{{"v":1,"type":"task","time_us":{t},"job_id":{id},"task_index":0,"kind":"{kind}","machine_id":{machine}}}"#
        )
    };
    let machine = |id: u64, t: u64, kind: &str| {
        format!(r#"{{"v":1,"type":"machine","time_us":{t},"machine_id":{id},"kind":"{kind}"}}"#)
    };
    let vm = |id: u64, t: u64, launch: u64, kind: &str| {
        format!(
            r#"{{"v":1,"type":"machine","time_us":{t},"machine_id":{id},"kind":"{kind}","vm_type":"n1-highcpu-16","zone":"us-central1-c","preemptible":true,"launch_time_us":{launch}}}"#
        )
    };
    let mut lines: Vec<String> = (1..=4).map(|m| machine(m, 0, "add")).collect();
    lines.extend([
        job(10, 0),
        task(10, 0, "schedule", 1),
        task(10, 10 * H, "finish", 1),
        format!(
            r#"{{"v":1,"type":"job_ended","time_us":{t},"job_id":10,"outcome":"finish"}}"#,
            t = 10 * H
        ),
    ]);
    for id in 11..=14 {
        let t = 10 * H + id;
        lines.extend([job(id, t), task(id, t, "schedule", id - 10)]);
    }
    lines.extend([
        vm(5, 11 * H, 11 * H, "add"),
        vm(6, 25 * H, 2 * H, "add"),
        vm(6, 25 * H + 1_000_000, 2 * H, "remove"),
    ]);
    let mut file = std::fs::File::create(path).expect("creates the trace");
    for line in &lines {
        writeln!(file, "{line}").expect("writes the trace");
    }
    lines.len()
}

/// The settings [`capacity_trace`] is run with: a cutoff of an hour and
/// a budget of `⌊3⌋·2·0.5` = 3 transient servers.
pub const CAPACITY_SETTINGS: [&str; 3] = [
    "engine.capacity.enabled=true",
    "engine.capacity.long_cutoff_secs=3600",
    "engine.capacity.static_short_servers=2",
];

/// The decisions [`capacity_trace`] gives, in order: version, action,
/// servers, and the machine released.
pub const CAPACITY_DECISIONS: [(u64, &str, u64, Option<u64>); 4] = [
    (1, "grow", 1, None),
    (2, "hold", 0, None),
    (3, "shrink", 1, Some(6)),
    (4, "hold", 0, None),
];

/// Check `published` (the capacity topic's payloads, in order) against
/// [`CAPACITY_DECISIONS`]; the last decision, parsed.
pub fn check_capacity_decisions(published: &[Vec<u8>]) -> serde_json::Value {
    let decisions: Vec<serde_json::Value> = published
        .iter()
        .map(|p| serde_json::from_slice(p).expect("a capacity decision is JSON"))
        .collect();
    assert_eq!(decisions.len(), CAPACITY_DECISIONS.len(), "{decisions:?}");
    for (d, &(version, action, servers, released)) in decisions.iter().zip(&CAPACITY_DECISIONS) {
        assert_eq!(d["version"], version, "{d}");
        assert_eq!(d["action"], action, "{d}");
        assert_eq!(d["servers"], servers, "{d}");
        let release: Vec<u64> = d["release"]
            .as_array()
            .unwrap_or_else(|| panic!("no release list in {d}"))
            .iter()
            .map(|r| r["machine_id"].as_u64().unwrap())
            .collect();
        assert_eq!(release, released.into_iter().collect::<Vec<_>>(), "{d}");
    }
    assert_eq!(decisions[0]["long_load_ratio"], 1.0);
    assert_eq!(decisions[2]["transient_servers"], 2);
    decisions.last().expect("four decisions").clone()
}

/// A deadline job on a spot VM (canonical JSON lines): a job of the same
/// features ran 10 h; job 20 (4 tasks, 1 GB each, deadline 100 h after its
/// submission at 11 h) runs on VM 1, which hibernates at 12 h, resumes at
/// 13 h and hibernates again at 14 h for good; event time then reaches
/// the deadline's last second, past `start_bkp`, and the job is killed.
/// The events' count.
pub fn deadline_trace(path: &Path) -> usize {
    const H: u64 = 3_600_000_000;
    let job = |id: u64, t: u64, tasks: u32, extra: &str| {
        format!(
            r#"{{"v":1,"type":"job_submitted","time_us":{t},"job_id":{id},"user":"u","job_name":"nightly","logical_name":"nightly","scheduling_class":1,"priority":10,"cpu_request":1,"mem_request":1024,"num_tasks":{tasks}{extra}}}"#
        )
    };
    let task = |id: u64, index: u32, t: u64, kind: &str| {
        format!(
            r#"{{"v":1,"type":"task","time_us":{t},"job_id":{id},"task_index":{index},"kind":"{kind}","machine_id":1}}"#
        )
    };
    let machine = |id: u64, t: u64, kind: &str| {
        format!(r#"{{"v":1,"type":"machine","time_us":{t},"machine_id":{id},"kind":"{kind}"}}"#)
    };
    let ended = |id: u64, t: u64, outcome: &str| {
        format!(r#"{{"v":1,"type":"job_ended","time_us":{t},"job_id":{id},"outcome":"{outcome}"}}"#)
    };
    let deadline = 111 * H;
    let mut lines = vec![
        job(10, 0, 1, ""),
        task(10, 0, 0, "schedule"),
        task(10, 0, 10 * H, "finish"),
        ended(10, 10 * H, "finish"),
        format!(
            r#"{{"v":1,"type":"machine","time_us":{t},"machine_id":1,"kind":"add","vm_type":"c4.large","zone":"us-east-1a","preemptible":true,"launch_time_us":{t}}}"#,
            t = 10 * H
        ),
        job(20, 11 * H, 4, &format!(r#","deadline_us":{deadline}"#)),
    ];
    lines.extend((0..4).map(|i| task(20, i, 11 * H + 1_000_000, "schedule")));
    lines.extend([
        machine(1, 12 * H, "hibernate"),
        machine(1, 13 * H, "resume"),
        machine(1, 14 * H, "hibernate"),
        machine(2, deadline - 1_000_000, "add"),
        ended(20, deadline - 1_000_000, "kill"),
    ]);
    let mut file = std::fs::File::create(path).expect("creates the trace");
    for line in &lines {
        writeln!(file, "{line}").expect("writes the trace");
    }
    lines.len()
}

/// The settings [`deadline_trace`] is run with: deadlines on, and event
/// time free to leap (the trace jumps days).
pub const DEADLINE_SETTINGS: [&str; 2] = [
    "engine.deadlines.enabled=true",
    "engine.max_future_skew_secs=0",
];

/// The decisions topic's messages of kind `deadline`, parsed.
fn deadline_decisions(published: &[Vec<u8>]) -> Vec<serde_json::Value> {
    published
        .iter()
        .map(|p| serde_json::from_slice(p).expect("a deadline decision is JSON"))
        .collect()
}

/// Each decision's version and action, in order.
fn versions_and_actions(decisions: &[serde_json::Value]) -> Vec<(u64, &str)> {
    decisions
        .iter()
        .map(|d| {
            (
                d["version"].as_u64().unwrap(),
                d["action"].as_str().unwrap(),
            )
        })
        .collect()
}

/// Check `published` (the decisions topic's messages of kind `deadline`,
/// in order, as JSON) against what [`deadline_trace`] gives: plan, wait,
/// resume, wait, migrate, versions 1 to 5; the last, parsed.
pub fn check_deadline_decisions(published: &[Vec<u8>]) -> serde_json::Value {
    let decisions = deadline_decisions(published);
    assert_eq!(
        versions_and_actions(&decisions),
        [
            (1, "plan"),
            (2, "wait"),
            (3, "resume"),
            (4, "wait"),
            (5, "migrate")
        ],
        "{decisions:?}"
    );
    const H: u64 = 3_600_000_000;
    let plan = &decisions[0]["plan"];
    assert_eq!(plan["quantile"], "p90", "{plan}");
    assert_eq!(plan["valid"], true, "{plan}");
    let migrate = &decisions[4];
    let group = &migrate["recovery"];
    assert_eq!(group["tasks"], serde_json::json!([0, 1, 2, 3]), "{group}");
    assert_eq!(group["hibernated_us"], 14 * H, "{group}");
    assert_eq!(group["state"], "migrated", "{group}");
    let start = group["start_backup_us"].as_u64().unwrap();
    let runtime = group["runtime_us"].as_u64().unwrap();
    assert_eq!(start, 111 * H - runtime - 60_000_000, "{group}");
    assert_eq!(migrate["time_us"], 111 * H - 1_000_000, "{migrate}");
    migrate.clone()
}

/// A deadline job carried out by an elastic fleet
/// (`engine.deadlines.fleet = "elastic"`): 4 tasks of 50 GB, by a
/// deadline 10 h after submission, on a history of one 10 h job, get a
/// map of two VMs, each to run two tasks within the 5 h occupation limit.
/// Machines 11 and 12 (their types unsaid: they play the map's VMs in
/// order) start a task each; the one on 11 ends at 55 min, so 11 drains;
/// 12 hibernates at 60 min, so VMs are bought for the three tasks left;
/// machine 13 then takes one of them, playing the first VM bought, and
/// hibernates at 64 min, so the fleet grows again.
pub fn elastic_trace(path: &Path) -> usize {
    const H: u64 = 3_600_000_000;
    const MIN: u64 = 60_000_000;
    let task = |id: u64, index: u32, t: u64, kind: &str, machine: u64| {
        format!(
            r#"{{"v":1,"type":"task","time_us":{t},"job_id":{id},"task_index":{index},"kind":"{kind}","machine_id":{machine}}}"#
        )
    };
    let machine = |id: u64, t: u64, kind: &str| {
        format!(r#"{{"v":1,"type":"machine","time_us":{t},"machine_id":{id},"kind":"{kind}"}}"#)
    };
    let t0 = 11 * H;
    let lines = vec![
        r#"{"v":1,"type":"job_submitted","time_us":0,"job_id":10,"user":"u","job_name":"nightly","logical_name":"nightly","scheduling_class":1,"priority":10,"cpu_request":1,"mem_request":51200,"num_tasks":1}"#.to_owned(),
        task(10, 0, 0, "schedule", 1),
        task(10, 0, 10 * H, "finish", 1),
        format!(r#"{{"v":1,"type":"job_ended","time_us":{},"job_id":10,"outcome":"finish"}}"#, 10 * H),
        format!(
            r#"{{"v":1,"type":"job_submitted","time_us":{t0},"job_id":20,"user":"u","job_name":"nightly","logical_name":"nightly","scheduling_class":1,"priority":10,"cpu_request":1,"mem_request":51200,"num_tasks":4,"deadline_us":{}}}"#,
            t0 + 10 * H
        ),
        machine(11, t0, "add"),
        machine(12, t0, "add"),
        task(20, 0, t0 + MIN, "schedule", 11),
        task(20, 2, t0 + MIN, "schedule", 12),
        task(20, 0, t0 + 55 * MIN, "finish", 11),
        machine(12, t0 + 60 * MIN, "hibernate"),
        machine(13, t0 + 63 * MIN, "add"),
        task(20, 2, t0 + 63 * MIN, "schedule", 13),
        machine(13, t0 + 64 * MIN, "hibernate"),
    ];
    let mut file = std::fs::File::create(path).expect("creates the trace");
    for line in &lines {
        writeln!(file, "{line}").expect("writes the trace");
    }
    lines.len()
}

/// The settings [`elastic_trace`] is run with.
pub const ELASTIC_SETTINGS: [&str; 3] = [
    "engine.deadlines.enabled=true",
    "engine.deadlines.fleet=elastic",
    "engine.max_future_skew_secs=0",
];

/// Check `published` (the decisions topic's messages of kind `deadline`,
/// in order, as JSON) and the job's record at `GET /jobs/20` (`job`)
/// against what [`elastic_trace`] gives: plan, drain of machine 11, grow,
/// grow; machine 13 playing the VM bought (the record as of the last
/// decision).
pub fn check_elastic_decisions(published: &[Vec<u8>], job: &serde_json::Value) {
    let decisions = deadline_decisions(published);
    assert_eq!(
        versions_and_actions(&decisions),
        [(1, "plan"), (2, "drain"), (3, "grow"), (4, "grow")],
        "{decisions:?}"
    );
    assert_eq!(
        decisions[0]["plan"]["vms"].as_array().map(Vec::len),
        Some(2),
        "{:?}",
        decisions[0]
    );
    assert_eq!(
        decisions[1]["fleet"]["drain_machine_id"], 11,
        "{:?}",
        decisions[1]
    );
    let grow = &decisions[2]["fleet"];
    let bought = grow["buy"].as_array().expect("a grow buys");
    assert!(!bought.is_empty(), "{grow}");
    assert_eq!(grow["queued"], 3, "{grow}");
    let fleet = &job["deadline"]["fleet"];
    assert_eq!(fleet["vms"][0]["machine_id"], 11, "{fleet}");
    assert_eq!(fleet["vms"][0]["draining"], true, "{fleet}");
    assert_eq!(fleet["vms"][1]["hibernated"], true, "{fleet}");
    assert_eq!(fleet["vms"][2]["machine_id"], 13, "{fleet}");
    assert_eq!(fleet["vms"][2]["hibernated"], true, "{fleet}");
    assert_eq!(fleet["vms"][2]["vm_type"], bought[0]["vm_type"], "{fleet}");
    assert_eq!(fleet["queued"], 3, "{fleet}");
    assert_eq!(decisions[3]["fleet"]["queued"], 3, "{:?}", decisions[3]);
}

/// A tiny trace (canonical JSON lines) that places a task on a preemptible
/// VM, so that the service publishes a risk score (the bundled excerpt has
/// no transient VMs): a job runs 10 h, a VM starts at 9 h, and a job with
/// the same features is placed on it just after the first ended. 7 events.
pub fn risk_trace(path: &Path) {
    const H: u64 = 3_600_000_000;
    let job = |id: u64, t: u64| {
        format!(
            r#"{{"v":1,"type":"job_submitted","time_us":{t},"job_id":{id},"user":"u","job_name":"nightly","logical_name":"nightly","scheduling_class":1,"priority":10,"cpu_request":0.01,"mem_request":0.01,"num_tasks":1}}"#
        )
    };
    let placed = 10 * H + 1_000_000;
    let lines = [
        job(10, 0),
        r#"{"v":1,"type":"task","time_us":0,"job_id":10,"task_index":0,"kind":"schedule"}"#
            .to_owned(),
        format!(
            r#"{{"v":1,"type":"machine","time_us":{t},"machine_id":1,"kind":"add","vm_type":"n1-highcpu-16","zone":"us-central1-c","preemptible":true,"launch_time_us":{t}}}"#,
            t = 9 * H
        ),
        format!(
            r#"{{"v":1,"type":"task","time_us":{t},"job_id":10,"task_index":0,"kind":"finish"}}"#,
            t = 10 * H
        ),
        format!(
            r#"{{"v":1,"type":"job_ended","time_us":{t},"job_id":10,"outcome":"finish"}}"#,
            t = 10 * H
        ),
        job(11, placed),
        format!(
            r#"{{"v":1,"type":"task","time_us":{placed},"job_id":11,"task_index":0,"kind":"schedule","machine_id":1}}"#
        ),
    ];
    let mut file = std::fs::File::create(path).expect("creates the trace");
    for line in lines {
        writeln!(file, "{line}").expect("writes the trace");
    }
}
