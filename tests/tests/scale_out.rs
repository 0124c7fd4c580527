//! Several `jobcast serve` instances in one consumer group, on a real
//! broker process (tansu): they divide the input topic's partitions, one is
//! killed with SIGKILL mid-stream, the survivors take its partitions over,
//! and together they publish and store exactly what one instance alone
//! does: the same decisions, dead letters, history and prediction errors.

use std::path::PathBuf;
use std::time::Duration;

use jobcast_ingest::kafka::Topics;
use jobcast_tests::kafka::{dead_letters, decisions};
use jobcast_tests::serve::{
    SHORT_SESSION, Serve, Stored, assert_shared_state_after, restartable, wait_balanced,
};
use jobcast_tests::tansu::Tansu;

const PARTITIONS: i32 = 6;
const WAIT: Duration = Duration::from_secs(300);

#[test]
fn three_instances_with_one_killed_end_where_one_instance_ends() {
    let tansu = Tansu::start();
    let topics = Topics::default();
    tansu.create_topic(&topics.events, PARTITIONS);
    for topic in [
        "single.decisions",
        "single.dead-letter",
        "trio.decisions",
        "trio.dead-letter",
        &topics.risk,
    ] {
        tansu.create_topic(topic, 1);
    }
    let total = tansu.replay_excerpt(&topics.events);

    let dir = tempfile::tempdir().unwrap();
    let single_state = dir.path().join("single");
    let mut single = Serve::start(
        &tansu.brokers,
        &single_state,
        &[
            "--decisions-topic",
            "single.decisions",
            "--dead-letter-topic",
            "single.dead-letter",
            "--group",
            "single",
        ],
    );
    single.wait_stored_offsets(total, WAIT);
    single.terminate();

    let states: Vec<PathBuf> = (0..3)
        .map(|i| dir.path().join(format!("trio-{i}")))
        .collect();
    // Small batches (each synced to disk), so that the input lasts long
    // enough for the group to settle and an instance to die mid-stream
    // (batching does not change what is applied, or in which order).
    let config = dir.path().join("slow.toml");
    std::fs::write(&config, "[consumer]\nbatch_max_events = 50\n").unwrap();
    let mut flags = restartable("trio.decisions", "trio", SHORT_SESSION).to_vec();
    flags.extend([
        "--dead-letter-topic",
        "trio.dead-letter",
        "--config",
        config.to_str().unwrap(),
    ]);
    let mut trio: Vec<Serve> = states
        .iter()
        .map(|state| Serve::start_logging(&tansu.brokers, state, &flags, "info"))
        .collect();
    // A quarter of the way in, kill the instance that owns the most
    // partitions among those still behind: it has input to apply and
    // outputs to publish.
    let mut first = trio.remove(0);
    first.wait_stored_offsets(total / 4, WAIT);
    trio.insert(0, first);
    let owned: Vec<Vec<i64>> = trio.iter().map(Serve::owned_partitions).collect();
    let stored: Vec<u64> = trio
        .iter()
        .map(|s| s.metric("jobcast_input_committed_offset") as u64)
        .collect();
    let victim_index = (0..trio.len())
        .filter(|&i| !owned[i].is_empty() && stored[i] < total)
        .max_by_key(|&i| owned[i].len())
        .unwrap_or_else(|| panic!("no instance owns partitions mid-stream: {owned:?} {stored:?}"));
    let victim = trio.remove(victim_index);
    let victim_owned = owned[victim_index].clone();
    let stored = stored[victim_index];
    victim.kill();
    eprintln!("killed an instance owning {victim_owned:?} at {stored} of {total} offsets");

    for serve in &mut trio {
        serve.wait_stored_offsets(total, WAIT);
    }
    wait_balanced(&trio.iter().collect::<Vec<_>>(), PARTITIONS, WAIT);
    // Stopped together and at once: an instance that left the group
    // (SIGTERM) would hand its partitions to the other, whose store would
    // then hold them too.
    let logs: Vec<Vec<String>> = trio.iter().map(Serve::log).collect();
    for serve in trio {
        serve.kill();
    }
    let took_over = |p: i64| {
        logs.iter().flatten().any(|line| {
            line.contains("partitions changed hands; nothing replayed")
                && line.split_once("taken_over={").is_some_and(|(_, rest)| {
                    rest.split('}')
                        .next()
                        .unwrap_or("")
                        .split(", ")
                        .any(|q| q == p.to_string())
                })
        })
    };
    for &partition in &victim_owned {
        assert!(
            took_over(partition),
            "no survivor took partition {partition} over"
        );
    }
    // A takeover replays nothing: each survivor restored its state once,
    // when it started.
    for log in &logs {
        let restores = log
            .iter()
            .filter(|line| line.contains("predictor state restored"))
            .count();
        assert_eq!(restores, 1, "a survivor restored its state again");
    }

    assert_eq!(
        decisions(&tansu.brokers, "trio.decisions"),
        decisions(&tansu.brokers, "single.decisions")
    );
    let dead = dead_letters(&tansu.brokers, "single.dead-letter");
    assert!(!dead.is_empty());
    assert_eq!(dead_letters(&tansu.brokers, "trio.dead-letter"), dead);

    // Each survivor learnt what the single instance learnt; between them
    // they hold its records, but for what was final before the takeover,
    // which the victim's store holds. A final record may be in two
    // survivors' stores, the same in both (`Stored::SameTwiceAfter`).
    let survivors: Vec<&PathBuf> = (0..states.len())
        .filter(|&i| i != victim_index)
        .map(|i| &states[i])
        .collect();
    assert_shared_state_after(
        &single_state,
        &survivors.iter().map(|p| p.as_path()).collect::<Vec<_>>(),
        Stored::SameTwiceAfter(&states[victim_index]),
    );
}
