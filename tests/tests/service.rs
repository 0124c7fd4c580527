//! The service pipeline against librdkafka's in-process mock cluster, with
//! RocksDB on disk: everything consumed is applied or dead-lettered, the
//! state is what applying the events in merged order gives, and a stop in
//! the middle followed by a restart ends in the same state as a run that
//! never stopped.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use jobcast_ingest::event::{Event, decode};
use jobcast_ingest::kafka::{KafkaSettings, Topics, headers};
use jobcast_predictor::engine::{Effects, Engine, JobRecord, Origin};
use jobcast_predictor::history::{HistoryKey, HistoryRecord};
use jobcast_scheduler_feed::config::ServeConfig;
use jobcast_scheduler_feed::service::{self, RunSummary, Service};
use jobcast_scheduler_feed::shared::Shared;
use jobcast_storage::state::{DECISIONS, HISTORY, JOBS, LOG, Records, StateStore, TASKS};
use jobcast_tests::kafka::{Cluster, decisions, messages};
use jobcast_tests::serve::{MOCK_SESSION, stored_state};
use jobcast_tests::{excerpt_events, jobcast, jobcast_ok};

const PARTITIONS: i32 = 4;

/// Messages that must all be dead-lettered, with the reason each gets.
fn bad_messages() -> Vec<(&'static [u8], &'static str)> {
    vec![
        (b"not json at all", "syntax"),
        (br#"{"v":1,"type":"task","time_us":5,"job_id":1"#, "syntax"),
        (br#"{"v":9,"type":"job_ended","time_us":5,"job_id":1,"outcome":"finish"}"#, "unsupported_version"),
        (br#"{"v":1,"type":"reboot","time_us":5}"#, "unknown_type"),
        (br#"{"v":1,"type":"job_ended","time_us":5,"outcome":"finish"}"#, "missing_field"),
        (br#"{"v":1,"type":"job_ended","time_us":"soon","job_id":1,"outcome":"finish"}"#, "invalid_field"),
        (
            br#"{"v":1,"type":"task","time_us":5,"job_id":18446744073709551000,"task_index":0,"kind":"finish"}"#,
            "unknown_job",
        ),
        (b"\xff\xfe\x00invalid utf-8", "syntax"),
    ]
}

fn config(brokers: &str, topics: &Topics, data: &Path) -> ServeConfig {
    let mut config = ServeConfig {
        kafka: KafkaSettings::new(brokers),
        topics: topics.clone(),
        ..ServeConfig::default()
    };
    config.storage.path = data.to_path_buf();
    config.storage.sync = false;
    // The group says up to where outputs are published: one per output.
    config.consumer.group = format!("{}.group", topics.decisions);
    // Small batches, so that a stop lands in the middle of the stream.
    config.consumer.batch_max_events = 64;
    // Every test restarts the service in its group: the mock's coordinator
    // holds each rebalance after the first for the session timeout less a
    // second (44 s at librdkafka's default), so a short session.
    for setting in MOCK_SESSION.iter().skip(1).step_by(2) {
        let (key, value) = setting.split_once('=').expect("key=value");
        config.kafka.client.insert(key.into(), value.into());
    }
    config
}

/// Run the service until it has committed `stop_at` messages (or all of
/// them), then stop it gracefully.
fn run_until(config: &ServeConfig, stop_at: u64) -> RunSummary {
    run_observed(config, stop_at).0
}

/// [`run_until`], with the service's shared state to look at afterwards.
fn run_observed(config: &ServeConfig, stop_at: u64) -> (RunSummary, Arc<Shared>) {
    let service = Service::start(config.clone()).expect("the service starts");
    let shared = service.shared().clone();
    let deadline = Instant::now() + Duration::from_secs(120);
    while shared.counters.committed.load(Ordering::Relaxed) < stop_at {
        if service.is_finished() {
            panic!("the service ended early: {:?}", service.join());
        }
        assert!(
            Instant::now() < deadline,
            "the service did not get through the input"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let summary = service.stop().expect("the service runs cleanly");
    (summary, shared)
}

fn input(events: &[Event]) -> Vec<(String, Vec<u8>)> {
    let mut messages = messages(events);
    // Bad messages spread through the stream.
    let step = messages.len() / (bad_messages().len() + 1);
    for (i, (payload, _)) in bad_messages().into_iter().enumerate() {
        messages.insert((i + 1) * step, (format!("bad{i}"), payload.to_vec()));
    }
    messages
}

/// A fresh store in a new temporary directory, and the configuration of a
/// run on it that reads `topics`: the directory, the store's path and that
/// configuration.
fn fresh(cluster: &Cluster, topics: &Topics) -> (tempfile::TempDir, PathBuf, ServeConfig) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state");
    let config = config(&cluster.brokers(), topics, &path);
    (dir, path, config)
}

#[test]
fn every_message_is_applied_or_dead_lettered_and_the_state_follows_event_time() {
    let topics = Topics::default();
    let cluster = Cluster::new(&topics, PARTITIONS);
    let events = excerpt_events();
    let messages = input(&events);
    cluster.produce(&topics.events, &messages);
    let (_dir, path, config) = fresh(&cluster, &topics);
    let summary = run_until(&config, messages.len() as u64);
    assert_eq!(summary.committed, messages.len() as u64);
    assert_eq!(summary.applied + summary.dead_lettered, summary.committed);

    // The reference: a fresh engine fed the input in (time, partition,
    // offset) order, skipping what it refuses.
    let mut ordered: Vec<(u64, i32, i64, Event)> = cluster
        .read_all(&topics.events, PARTITIONS)
        .into_iter()
        .filter_map(|m| {
            decode(&m.payload)
                .ok()
                .map(|e| (e.time_us(), m.partition, m.offset, e))
        })
        .collect();
    ordered.sort_by_key(|(t, p, o, _)| (*t, *p, *o));
    let mut engine = Engine::new(&config.engine).unwrap();
    let mut effects = Effects::default();
    let mut refused: BTreeMap<&str, u64> = BTreeMap::new();
    let mut jobs = BTreeSet::new();
    for (_, partition, offset, event) in &ordered {
        match engine.apply(Origin::new(*partition, *offset), event, &mut effects) {
            Ok(_) => {
                if let Event::JobSubmitted(j) = event {
                    jobs.insert(j.job_id);
                }
            }
            Err(r) => *refused.entry(r.reason).or_default() += 1,
        }
    }
    let undecodable = bad_messages()
        .iter()
        .filter(|(_, r)| *r != "unknown_job")
        .count() as u64;
    assert_eq!(summary.applied, engine.events());
    assert_eq!(
        summary.dead_lettered,
        undecodable + refused.values().sum::<u64>()
    );

    // Every bad message is in the dead-letter topic, bytes untouched, with
    // its reason and where it came from.
    let dead = cluster.read_all(&topics.dead_letter, 1);
    assert_eq!(dead.len() as u64, summary.dead_lettered);
    for (payload, reason) in bad_messages() {
        let letter = dead
            .iter()
            .find(|m| m.payload == payload)
            .unwrap_or_else(|| panic!("{:?} not dead-lettered", String::from_utf8_lossy(payload)));
        assert_eq!(letter.headers[headers::REASON], reason);
        assert!(!letter.headers[headers::ERROR].is_empty());
        assert_eq!(letter.headers[headers::SOURCE_TOPIC], topics.events);
        assert!(
            letter.headers[headers::SOURCE_OFFSET]
                .parse::<i64>()
                .is_ok()
        );
    }

    // Stored job records equal the reference engine's; every submitted job
    // has decisions, from version 1 on, rising (a refinement overtaken
    // while it waited for `engine.min_republish_ms` leaves a gap), all on
    // the decisions topic.
    let store = StateStore::open(&path, false).unwrap();
    let published = decisions(&cluster.brokers(), &topics.decisions);
    assert!(!jobs.is_empty());
    // Compared as the stored bytes: the same record always writes the same
    // bytes.
    let stored_bytes: BTreeMap<Vec<u8>, Vec<u8>> = store.dump(JOBS).unwrap().into_iter().collect();
    let mut with_estimate = 0;
    for &job_id in &jobs {
        assert!(
            store.job(job_id, JobRecord::from_bytes).unwrap().is_some(),
            "job {job_id}"
        );
        let reference = engine.job(job_id).expect("reference job").to_bytes();
        assert_eq!(
            stored_bytes[&job_id.to_be_bytes().to_vec()],
            reference,
            "job {job_id}"
        );
        let stored = store.decisions::<serde_json::Value>(job_id).unwrap();
        assert!(!stored.is_empty(), "job {job_id} has no decision");
        let mut previous = 0;
        for (i, d) in stored.iter().enumerate() {
            let version = d["version"].as_u64().unwrap();
            assert!(
                version > previous && (i > 0 || version == 1),
                "job {job_id}: v{version} after v{previous}"
            );
            previous = version;
            assert_eq!(published.get(&(job_id, version)), Some(d), "job {job_id}");
            // An estimate carries rising quantiles of the mean and the size.
            if !d["estimate"].is_null() {
                with_estimate += 1;
                for of in ["mean_task_runtime_us", "size_us"] {
                    let q = &d["estimate"]["quantiles"][of];
                    let q: Vec<f64> = ["p50", "p90", "p95", "p99"]
                        .map(|p| q[p].as_f64().unwrap_or_else(|| panic!("{p} of {of}: {d}")))
                        .to_vec();
                    assert!(q[0] > 0.0 && q.windows(2).all(|w| w[0] <= w[1]), "{d}");
                }
            }
        }
    }
    assert!(with_estimate > 0, "no decision had an estimate");
    // The stored 3Sigma history is the reference engine's: one record per
    // feature value it tracks plus the global one, equal byte for byte.
    let history: BTreeMap<Vec<u8>, Vec<u8>> = store.dump(HISTORY).unwrap().into_iter().collect();
    assert_eq!(history.len(), engine.history().tracked_values() + 1);
    let global = engine.history().record(HistoryKey::Global).unwrap();
    assert!(global.observed.unwrap() > 0);
    assert_eq!(history[&HistoryKey::Global.to_bytes()], global.to_bytes());
    assert_eq!(
        HistoryRecord::from_bytes(&history[&HistoryKey::Global.to_bytes()]).unwrap(),
        global
    );
    let finished = jobs
        .iter()
        .filter_map(|&id| store.job(id, JobRecord::from_bytes).unwrap())
        .filter(|r| r.actual_mean_task_runtime_us.is_some())
        .count();
    assert!(
        finished > 0,
        "some jobs finish within the excerpt and are scored"
    );
}

/// The excerpt, bad messages and all, in the input topic of a cluster with
/// a decisions topic for each of two runs to compare (run A's topics, run
/// B's, and the number of input messages).
fn excerpt_for_two_runs() -> (Cluster, Topics, Topics, u64) {
    let topics_a = Topics {
        decisions: "a.decisions".into(),
        ..Topics::default()
    };
    let cluster = Cluster::new(&topics_a, PARTITIONS);
    let mut topics_b = topics_a.clone();
    topics_b.decisions = "b.decisions".into();
    cluster
        .mock
        .create_topic(&topics_b.decisions, 1, 1)
        .unwrap();
    let messages = input(&excerpt_events());
    cluster.produce(&topics_a.events, &messages);
    (cluster, topics_a, topics_b, messages.len() as u64)
}

/// Run A of two: a fresh store that applies the whole input of `topics`
/// (`total` messages); its directory and the store's path.
fn whole_run(cluster: &Cluster, topics: &Topics, total: u64) -> (tempfile::TempDir, PathBuf) {
    let (dir, path, config) = fresh(cluster, topics);
    let whole = run_until(&config, total);
    assert_eq!(whole.committed, total);
    (dir, path)
}

/// The two runs stored the same state and published the same decisions.
fn assert_same_outcome(cluster: &Cluster, a: (&Path, &Topics), b: (&Path, &Topics)) {
    assert_eq!(stored_state(a.0), stored_state(b.0));
    assert_eq!(
        decisions(&cluster.brokers(), &a.1.decisions),
        decisions(&cluster.brokers(), &b.1.decisions)
    );
}

#[test]
fn a_stop_in_the_middle_and_a_restart_end_in_the_same_state_as_one_run() {
    let (cluster, topics_a, topics_b, total) = excerpt_for_two_runs();

    let (_a, path_a) = whole_run(&cluster, &topics_a, total);

    let (_b, path_b, config_b) = fresh(&cluster, &topics_b);
    let (first, shared) = run_observed(&config_b, total * 2 / 5);
    assert!(first.committed < total, "the first run stopped early");
    // A clean stop leaves nothing in RocksDB's memtables: the next start
    // has no write-ahead log to replay.
    let unflushed: Vec<_> = shared
        .store
        .family_sizes()
        .into_iter()
        .filter(|(_, size)| size.unflushed > 0)
        .collect();
    assert!(
        unflushed.is_empty(),
        "unflushed after a stop: {unflushed:?}"
    );
    drop(shared);
    // The stop took a snapshot of everything it had applied: the log
    // behind it is deleted, and the restart applies none of it.
    let store = StateStore::open(&path_b, false).unwrap();
    assert_eq!(store.dump(LOG).unwrap().len(), 0, "log left after a stop");
    assert_eq!(
        store.summary().unwrap().snapshot_seq,
        Some(first.committed),
        "a snapshot of every committed message"
    );
    drop(store);
    let second = run_until(&config_b, total - first.committed);
    assert_eq!(second.recovered_events, 0);
    assert_eq!(
        first.committed + second.committed,
        total,
        "nothing read twice"
    );

    assert_same_outcome(&cluster, (&path_a, &topics_a), (&path_b, &topics_b));
}

#[test]
fn a_restart_applies_only_the_log_after_the_latest_snapshot_and_ends_in_the_same_state() {
    let (cluster, topics_a, topics_b, total) = excerpt_for_two_runs();

    let (_a, path_a) = whole_run(&cluster, &topics_a, total);

    // A snapshot every 1,000 messages: a restart applies fewer than that
    // plus one batch (the snapshot goes with the batch that crosses the
    // mark), however much came before.
    let (_b, path_b, mut config_b) = fresh(&cluster, &topics_b);
    config_b.storage.snapshot_every_events = 1_000;
    // Clean stops leave the tail a crash would, for the restarts to apply.
    config_b.storage.snapshot_on_stop = false;
    let tail = config_b.storage.snapshot_every_events + config_b.consumer.batch_max_events as u64;
    let mut committed = 0;
    for share in [2, 3, 5] {
        let run = run_until(&config_b, total * share / 5 - committed);
        assert!(
            run.recovered_events < tail,
            "{} logged messages applied on start, more than the tail of {tail}",
            run.recovered_events
        );
        committed += run.committed;
        // What the log still holds is that tail.
        let store = StateStore::open(&path_b, false).unwrap();
        let logged = store.dump(LOG).unwrap().len() as u64;
        assert!(logged < tail, "{logged} messages logged after {committed}");
        assert!(!store.snapshot_chain().unwrap().is_empty());
    }
    assert_eq!(committed, total, "nothing read twice");
    assert_same_outcome(&cluster, (&path_a, &topics_a), (&path_b, &topics_b));

    // `jobcast admin info` says the same.
    let info: serde_json::Value = serde_json::from_str(&jobcast_ok(&[
        "admin",
        "info",
        "--data-dir",
        path_b.to_str().unwrap(),
        "--json",
    ]))
    .unwrap();
    let snapshot = info["snapshot_seq"].as_u64().expect("a snapshot");
    let next = info["next_log_seq"].as_u64().unwrap();
    assert!(next - snapshot < tail, "{info}");
    let offsets = info["offsets"][&topics_b.events].as_object().unwrap();
    let consumed: i64 = offsets.values().map(|o| o.as_i64().unwrap()).sum();
    assert_eq!(consumed as u64, total, "{info}");
    assert!(
        info["families"]["jobs"]["keys"].as_u64().unwrap() > 0,
        "{info}"
    );
    assert!(info["oldest_retained_job"].is_array(), "{info}");
}

#[test]
fn ended_jobs_expire_after_the_retention_window_and_change_no_prediction() {
    let (cluster, topics_a, topics_b, total) = excerpt_for_two_runs();
    let (_a, path_a) = whole_run(&cluster, &topics_a, total);

    // Most of the excerpt's jobs end in its first 2.4 hours, a few 6 hours
    // in, and the latest event applied is 13.2 hours in: a window of 12
    // hours cuts through them.
    let (_b, path_b, mut config_b) = fresh(&cluster, &topics_b);
    config_b.storage.retention_hours = 12;
    let (summary, shared) = run_observed(&config_b, total);
    assert_eq!(summary.committed, total);
    let expired = shared.counters.expired_jobs.load(Ordering::Relaxed);
    drop(shared);

    // Retention deletes records; it changes no decision.
    assert_eq!(
        decisions(&cluster.brokers(), &topics_a.decisions),
        decisions(&cluster.brokers(), &topics_b.decisions)
    );

    let state_a = stored_state(&path_a);
    let state_b = stored_state(&path_b);
    let jobs = |state: &BTreeMap<&str, Records>| -> BTreeMap<u64, (Vec<u8>, JobRecord)> {
        state[JOBS]
            .iter()
            .map(|(k, v)| {
                let id = u64::from_be_bytes(k[..8].try_into().unwrap());
                (id, (v.clone(), JobRecord::from_bytes(v).unwrap()))
            })
            .collect()
    };
    let (jobs_a, jobs_b) = (jobs(&state_a), jobs(&state_b));
    // What is kept is kept unchanged.
    for (id, (bytes, _)) in &jobs_b {
        assert_eq!(Some(bytes), jobs_a.get(id).map(|j| &j.0), "job {id}");
    }
    // What is gone ended before every ended job that is kept.
    let gone: Vec<&JobRecord> = jobs_a
        .iter()
        .filter(|(id, _)| !jobs_b.contains_key(id))
        .map(|(_, (_, r))| r)
        .collect();
    assert!(
        gone.iter().all(|r| r.end_us.is_some()),
        "a live job expired"
    );
    let last_gone = gone
        .iter()
        .filter_map(|r| r.end_us)
        .max()
        .expect("some jobs expired");
    let ended = |jobs: &BTreeMap<u64, (Vec<u8>, JobRecord)>| {
        jobs.values().filter(|(_, r)| r.end_us.is_some()).count()
    };
    let first_kept = jobs_b
        .values()
        .filter_map(|(_, r)| r.end_us)
        .min()
        .unwrap_or_else(|| {
            panic!(
                "no ended job kept: {} jobs ({} ended) without retention, {} ({} ended) with; {} expired, the last ended at {last_gone}",
                jobs_a.len(),
                ended(&jobs_a),
                jobs_b.len(),
                ended(&jobs_b),
                gone.len()
            )
        });
    assert!(last_gone < first_kept, "{last_gone} ≥ {first_kept}");
    assert_eq!(gone.len() as u64, expired, "every expired job counted once");
    // Their tasks and decisions went with them.
    let job_of = |key: &Vec<u8>| u64::from_be_bytes(key[..8].try_into().unwrap());
    for family in [TASKS, DECISIONS] {
        let left: BTreeSet<u64> = state_b[family].iter().map(|(k, _)| job_of(k)).collect();
        assert!(
            gone.iter().all(|r| !left.contains(&r.job_id)),
            "{family} of an expired job left"
        );
        let kept: Vec<_> = state_a[family]
            .iter()
            .filter(|(k, _)| jobs_b.contains_key(&job_of(k)))
            .collect();
        let b: Vec<_> = state_b[family].iter().collect();
        assert!(kept == b, "{family} of kept jobs differ");
    }
}

#[test]
fn a_merge_held_to_a_small_budget_pauses_partitions_and_decides_the_same() {
    let (cluster, topics_a, topics_b, total) = excerpt_for_two_runs();

    let (_a, path_a, config_a) = fresh(&cluster, &topics_a);
    let (roomy, shared) = run_observed(&config_a, total);
    assert_eq!(roomy.committed, total);
    assert_eq!(shared.counters.input_pauses.load(Ordering::Relaxed), 0);
    drop(shared); // closes the store

    // A budget of 2,000 events, 500 a partition: the excerpt's partitions
    // run unevenly enough in event time that partitions are paused and
    // resumed dozens of times, and the merged order, so every decision
    // and record, stays what it was.
    let (_b, path_b, mut tight) = fresh(&cluster, &topics_b);
    tight.consumer.max_buffered_events = 2000;
    // librdkafka starts fetching a resumed partition when its broker thread
    // next wakes, which may be when the fetch in flight returns: the broker
    // holds that open for up to this long when nothing new has come.
    tight
        .kafka
        .client
        .insert("fetch.wait.max.ms".into(), "10".into());
    let (summary, shared) = run_observed(&tight, total);
    assert_eq!(summary.committed, total);
    assert!(shared.counters.input_pauses.load(Ordering::Relaxed) > 0);
    drop(shared);

    assert_same_outcome(&cluster, (&path_a, &topics_a), (&path_b, &topics_b));
}

#[test]
fn a_store_built_with_another_engine_configuration_is_refused() {
    let (_cluster, _dir, config_a) = store_of_a_short_run();
    let (config_b, err) = another_engine_refused(&config_a);
    // The way out the error names: a rebuild, then a start with the new
    // configuration learns from the whole topic again.
    assert!(err.contains("jobcast admin rebuild"), "{err}");
    let committed = config_a.consumer.batch_max_events; // any positive amount
    jobcast_ok(&[
        "admin",
        "rebuild",
        "--data-dir",
        config_a.storage.path.to_str().unwrap(),
    ]);
    let rebuilt = run_until(&config_b, committed as u64);
    assert_eq!(rebuilt.recovered_events, 0);
    assert!(rebuilt.committed >= committed as u64);
}

/// The skew only decides how long an event far ahead waits for its
/// partition: an operator changes it on a store without a rebuild.
#[test]
fn a_store_is_recovered_with_another_skew() {
    let (_cluster, _dir, config_a) = store_of_a_short_run();
    let mut config_b = config_a.clone();
    config_b.engine.max_future_skew_secs = 3_600;
    let service = Service::start(config_b).expect("the service starts");
    if !service.wait_ready(Duration::from_secs(60)) {
        panic!("never ready: {:?}", service.stop());
    }
    let restarted = service.stop().expect("recovered with the new skew");
    assert_eq!(restarted.committed, 0, "nothing new to read");
    // Any other engine setting still needs a rebuild.
    another_engine_refused(&config_a);
}

/// `config` with another engine setting (`thin_limit`), and the error a run
/// of it stops with on the store `config` built, which must name the cause.
fn another_engine_refused(config: &ServeConfig) -> (ServeConfig, String) {
    let mut other = config.clone();
    other.engine.policies.thin_limit = 5;
    let store = Arc::new(StateStore::open(&config.storage.path, false).unwrap());
    let err = service::run(&other, Shared::new(store))
        .unwrap_err()
        .to_string();
    assert!(err.contains("another engine configuration"), "{err}");
    (other, err)
}

#[test]
fn a_store_of_an_older_layout_is_refused_naming_both_formats() {
    let (_cluster, _dir, config) = store_of_a_short_run();
    let store = Arc::new(StateStore::open(&config.storage.path, false).unwrap());
    // What a jobcast of store format 4 (job and task records as JSON) left
    // behind.
    let mut batch = store.batch();
    batch.set_meta("store_format", b"4");
    store.commit(batch).unwrap();
    let err = service::run(&config, Shared::new(store)).unwrap_err();
    let named = format!(
        "store format 4; this one reads {}",
        String::from_utf8_lossy(jobcast_storage::state::STORE_FORMAT)
    );
    assert!(err.to_string().contains(&named), "{err}");
}

#[test]
fn a_stored_offset_the_broker_does_not_hold_stops_the_service_instead_of_skipping() {
    let (_cluster, _dir, config) = store_of_a_short_run();
    let store = Arc::new(StateStore::open(&config.storage.path, false).unwrap());
    // The state says partition 0 was read up to offset 1,000,000: far past
    // what the broker holds, as after a topic was deleted and created
    // again. librdkafka would jump to an end; the service must not.
    let mut batch = store.batch();
    batch.set_offset(&config.topics.events, 0, 1_000_000);
    store.commit(batch).unwrap();
    let (err, shared) = stopped_at_start(config, store);
    // Named at the start: the partition, where the state is, where the
    // broker's partition ends, and the way out.
    assert!(
        err.contains("input partition 0 of")
            && err.contains("up to offset 1000000")
            && err.contains("ends at ")
            && err.contains("jobcast admin rebuild"),
        "{err}"
    );
    assert_eq!(shared.counters.committed.load(Ordering::Relaxed), 0);
}

/// Retention deleted input the state still needs: the mock cluster keeps
/// about 5 MB per partition and drops the oldest records beyond it, and
/// 8 MB arrive after the state was stored. The service stops at its
/// start, naming the partition, the offset the state is at and the first
/// one the broker still holds, instead of skipping what was deleted.
#[test]
fn input_deleted_by_retention_under_the_state_stops_the_service_naming_both_offsets() {
    let (cluster, _dir, config) = store_of_a_short_run();
    let store = Arc::new(StateStore::open(&config.storage.path, false).unwrap());
    let stored = store.offsets(&config.topics.events).unwrap();
    // 8 MB to every partition (the messages' keys spread them): 2 KB
    // payloads, never read.
    let filler: Vec<(String, Vec<u8>)> = (0..4_000 * PARTITIONS)
        .map(|i| (format!("filler-{i}"), vec![b'x'; 2_048]))
        .collect();
    cluster.produce(&config.topics.events, &filler);
    let low = cluster.low_watermarks(&config.topics.events, PARTITIONS);
    let gone: Vec<i32> = (0..PARTITIONS)
        .filter(|&p| low[p as usize] > stored.get(&p).copied().unwrap_or(0))
        .collect();
    assert!(
        !gone.is_empty(),
        "the mock cluster dropped nothing the state needs: {low:?} against {stored:?}"
    );
    let (err, shared) = stopped_at_start(config, store);
    eprintln!("{err}");
    let named = gone.iter().any(|&p| {
        err.contains(&format!("input partition {p} of"))
            && err.contains(&format!(
                "from offset {} on",
                stored.get(&p).copied().unwrap_or(0)
            ))
            && err.contains(&format!("only from {} on", low[p as usize]))
    });
    assert!(named && err.contains("jobcast admin"), "{err}");
    assert_eq!(shared.counters.committed.load(Ordering::Relaxed), 0);
}

#[test]
fn a_backup_wiped_and_restored_goes_on_to_the_same_state_and_decisions() {
    let (cluster, topics_a, topics_b, total) = excerpt_for_two_runs();
    let (_a, path_a) = whole_run(&cluster, &topics_a, total);

    let (dir_b, path_b, config_b) = fresh(&cluster, &topics_b);
    let first = run_until(&config_b, total * 2 / 5);
    let backup = dir_b.path().join("backup");
    let (backup_dir, data_dir) = (backup.to_str().unwrap(), path_b.to_str().unwrap());
    jobcast_ok(&[
        "admin",
        "backup",
        "--data-dir",
        data_dir,
        "--to",
        backup_dir,
    ]);
    let restore = [
        "admin",
        "restore",
        "--from",
        backup_dir,
        "--data-dir",
        data_dir,
    ];
    // The store goes on past the backup, then is lost.
    let second = run_until(&config_b, total / 5);
    assert!(first.committed + second.committed < total);
    std::fs::remove_dir_all(&path_b).unwrap();
    let out = jobcast_ok(&restore);
    assert!(out.contains("restored"), "{out}");
    // The restored store starts where the backup was taken (after the
    // first run's stop, which took a snapshot), and consumes again what
    // came after it.
    let third = run_until(&config_b, total - first.committed);
    assert_eq!(third.recovered_events, 0);
    assert_eq!(first.committed + third.committed, total);
    assert_same_outcome(&cluster, (&path_a, &topics_a), (&path_b, &topics_b));

    // A restore never lands on a store, unless told to set it aside.
    let refused = jobcast(&restore);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("holds a store: pass --replace"), "{stderr}");
    let out = jobcast_ok(&[&restore[..], &["--replace"][..]].concat());
    assert!(out.contains("the store it replaced is at"), "{out}");
}

#[test]
fn a_skipped_range_is_dead_lettered_unapplied_whenever_it_was_recorded_and_survives_a_rebuild() {
    let (cluster, topics_a, mut topics_b, total) = excerpt_for_two_runs();
    topics_b.dead_letter = "b.dead-letter".into();
    cluster
        .mock
        .create_topic(&topics_b.dead_letter, 1, 1)
        .unwrap();
    let path = |p: &Path| p.to_str().unwrap().to_owned();

    // Run B stops part-way; the operator skips the next three messages of
    // partition 0.
    let (_b, path_b, config_b) = fresh(&cluster, &topics_b);
    let first = run_until(&config_b, total * 2 / 5);
    let next = StateStore::open_read_only(&path_b)
        .unwrap()
        .offsets(&topics_b.events)
        .unwrap()[&0];
    let range = format!("{next}..{}", next + 3);
    let skip = |data: &Path, range: &str| {
        jobcast(&[
            "admin",
            "skip",
            "--data-dir",
            &path(data),
            "--topic",
            &topics_b.events,
            "--partition",
            "0",
            "--offsets",
            range,
            "--reason",
            "poison in test",
        ])
    };
    // Offsets already applied cannot be skipped.
    let back = skip(&path_b, &format!("{}..{next}", next - 1));
    assert!(!back.status.success());
    let stderr = String::from_utf8_lossy(&back.stderr);
    assert!(
        stderr.contains(&format!("consumed up to offset {next} already")),
        "{stderr}"
    );
    assert!(skip(&path_b, &range).status.success());
    let second = run_until(&config_b, total - first.committed);
    assert_eq!(first.committed + second.committed, total);
    let info = jobcast_ok(&["admin", "info", "--data-dir", &path(&path_b)]);
    assert!(
        info.contains(&format!(
            "skipped: offsets {range} of {} partition 0 (poison in test)",
            topics_b.events
        )),
        "{info}"
    );

    // The three are in the dead-letter topic as they were, with the
    // operator's reason; nothing else of partition 0 is.
    let source: BTreeMap<i64, Vec<u8>> = cluster
        .read_all(&topics_b.events, PARTITIONS)
        .into_iter()
        .filter(|m| m.partition == 0)
        .map(|m| (m.offset, m.payload))
        .collect();
    let skipped: Vec<_> = cluster
        .read_all(&topics_b.dead_letter, 1)
        .into_iter()
        .filter(|m| m.headers[headers::REASON] == "skipped")
        .collect();
    assert_eq!(skipped.len(), 3);
    for (letter, offset) in skipped.iter().zip(next..) {
        assert_eq!(letter.headers[headers::SOURCE_PARTITION], "0");
        assert_eq!(letter.headers[headers::SOURCE_OFFSET], offset.to_string());
        assert!(letter.headers[headers::ERROR].contains("poison in test"));
        assert_eq!(letter.payload, source[&offset]);
    }

    // Run A records the same skip before it starts: the same state.
    let (_a, path_a, config_a) = fresh(&cluster, &topics_a);
    drop(StateStore::open(&path_a, false).unwrap());
    assert!(skip(&path_a, &range).status.success());
    let whole = run_until(&config_a, total);
    assert_eq!(
        whole.dead_lettered,
        first.dead_lettered + second.dead_lettered
    );
    assert_eq!(stored_state(&path_a), stored_state(&path_b));

    // A rebuild sets the store aside, keeps its skips, and the next start
    // learns the same state again from the beginning of the topic.
    let out = jobcast_ok(&["admin", "rebuild", "--data-dir", &path(&path_b)]);
    assert!(out.contains("its 1 skips kept"), "{out}");
    let rebuilt = run_until(&config_b, total);
    assert_eq!(rebuilt.recovered_events, 0);
    assert_eq!(rebuilt.committed, total);
    assert_eq!(stored_state(&path_a), stored_state(&path_b));
}

#[test]
fn an_admin_command_that_changes_a_store_refuses_one_in_use() {
    let (_cluster, dir, config) = store_of_a_short_run();
    let service = Service::start(config.clone()).unwrap();
    let data = config.storage.path.to_str().unwrap();
    let to = dir.path().join("backup");
    for args in [
        vec!["admin", "rebuild", "--data-dir", data],
        vec![
            "admin",
            "backup",
            "--data-dir",
            data,
            "--to",
            to.to_str().unwrap(),
        ],
        vec![
            "admin",
            "skip",
            "--data-dir",
            data,
            "--partition",
            "0",
            "--offsets",
            "1000",
            "--reason",
            "x",
        ],
    ] {
        let out = jobcast(&args);
        assert!(!out.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("is in use by a running jobcast"),
            "{args:?}: {stderr}"
        );
    }
    service.stop().unwrap();
    assert!(!to.exists());
}

/// The store of a run over the excerpt's first 200 events, the cluster it
/// read them from, and the run's configuration.
/// Start the service on `store` and wait for it to stop by itself, as it
/// must: its error, and the state it shared.
fn stopped_at_start(config: ServeConfig, store: Arc<StateStore>) -> (String, Arc<Shared>) {
    let shared = Shared::new(store);
    let service = Service::start_with(config, shared.clone()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !service.is_finished() {
        if Instant::now() > deadline {
            let outcome = service.stop();
            panic!("the service went on past input the broker does not hold: {outcome:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    (service.join().unwrap_err().to_string(), shared)
}

fn store_of_a_short_run() -> (Cluster, tempfile::TempDir, ServeConfig) {
    let topics = Topics::default();
    let cluster = Cluster::new(&topics, PARTITIONS);
    let events = excerpt_events();
    let messages: Vec<(String, Vec<u8>)> = input(&events[..200]);
    cluster.produce(&topics.events, &messages);
    let (dir, _, config) = fresh(&cluster, &topics);
    run_until(&config, messages.len() as u64);
    (cluster, dir, config)
}
