//! `jobcast serve` as a child process: started with flags, found through
//! the address it prints, asked over HTTP, and stopped with a signal.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use jobcast_storage::state::{
    DEADLINES, DECISIONS, EXPIRY, HISTORY, JOBS, MACHINES, POLICIES, Records, STATE_FAMILIES,
    StateStore, TASKS,
};

use jobcast_scheduler_feed::config::TOKEN_VARIABLE;

use crate::jobcast_bin;

/// What `jobcast serve` logs when the group gives it partitions
/// (`partitions=[...]`), and at the end of every change of what it owns
/// (its records stored, its outputs published).
pub const ASSIGNED: &str = "partitions assigned to this instance";
pub const OWNS: &str = "this instance owns these partitions";

/// The partitions a log line lists as `partitions=[...]`.
pub fn logged_partitions(line: &str) -> Vec<i64> {
    let list = line
        .split_once("partitions=[")
        .and_then(|(_, rest)| rest.split_once(']'))
        .unwrap_or_else(|| panic!("no partitions in {line:?}"))
        .0;
    list.split(", ")
        .filter(|p| !p.is_empty())
        .map(|p| p.parse().unwrap_or_else(|_| panic!("no partition: {p:?}")))
        .collect()
}

pub struct Serve {
    child: Child,
    pub http: String,
    agent: ureq::Agent,
    /// The `Authorization` header its requests carry, if it wants one.
    token: Option<String>,
    log: Arc<Mutex<Vec<String>>>,
    /// Drains the child's stderr into `log` until it closes.
    reader: Option<JoinHandle<()>>,
}

impl Serve {
    /// Start `jobcast serve` on `brokers` with its state in `data` and any
    /// extra flags; returns once its HTTP address is known.
    pub fn start(brokers: &str, data: &Path, extra: &[&str]) -> Serve {
        Serve::start_logging(brokers, data, extra, "warn")
    }

    /// [`Serve::start`] with the log filter `JOBCAST_LOG=filter`; the log
    /// lines are kept ([`Serve::log`]).
    pub fn start_logging(brokers: &str, data: &Path, extra: &[&str], filter: &str) -> Serve {
        Serve::spawn(brokers, data, extra, filter, None, &[])
    }

    /// [`Serve::start`] with these environment variables set (settings
    /// operators give it that way: `JOBCAST_KAFKA__CLIENT`, ...).
    pub fn start_with_env(
        brokers: &str,
        data: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Serve {
        Serve::spawn(brokers, data, extra, "warn", None, env)
    }

    /// [`Serve::start`] with its HTTP API behind `token`
    /// (`JOBCAST_HTTP_TOKEN`), which [`Serve::get`] then sends.
    pub fn start_with_token(brokers: &str, data: &Path, extra: &[&str], token: &str) -> Serve {
        Serve::spawn(brokers, data, extra, "warn", Some(token), &[])
    }

    fn spawn(
        brokers: &str,
        data: &Path,
        extra: &[&str],
        filter: &str,
        token: Option<&str>,
        env: &[(&str, &str)],
    ) -> Serve {
        let mut command = Command::new(jobcast_bin());
        command
            .args(["serve", "--brokers", brokers, "--http", "127.0.0.1:0"])
            .arg("--data-dir")
            .arg(data)
            .args(extra)
            .env("JOBCAST_LOG", filter)
            .env_remove(TOKEN_VARIABLE);
        if let Some(token) = token {
            command.env(TOKEN_VARIABLE, token);
        }
        command.envs(env.iter().copied());
        let mut child = command
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("jobcast serve starts");
        let stderr = child.stderr.take().expect("piped");
        let (tx, rx) = mpsc::channel();
        let log = Arc::new(Mutex::new(Vec::new()));
        let kept = log.clone();
        // Keep draining stderr so the child never blocks on a full pipe.
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(addr) = line.strip_prefix("jobcast serve: HTTP on ") {
                    let _ = tx.send(addr.to_owned());
                }
                eprintln!("[serve] {line}");
                kept.lock().expect("not poisoned").push(line);
            }
        });
        let http = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("jobcast serve printed its HTTP address");
        // Redirects are answers to check, not to follow.
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_global(Some(Duration::from_secs(10)))
            .build()
            .into();
        Serve {
            child,
            http,
            agent,
            token: token.map(|t| format!("Bearer {t}")),
            log,
            reader: Some(reader),
        }
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its peak resident set size since it started or since
    /// [`Serve::reset_peak_rss`], KiB.
    pub fn peak_rss_kib(&self) -> u64 {
        peak_rss_kib(self.pid())
    }

    /// Start measuring its peak resident set size afresh (Linux's
    /// `clear_refs` 5).
    pub fn reset_peak_rss(&self) {
        std::fs::write(format!("/proc/{}/clear_refs", self.pid()), "5")
            .expect("clear_refs of our own child");
    }

    /// Every line the service has logged so far.
    pub fn log(&self) -> Vec<String> {
        self.log.lock().expect("not poisoned").clone()
    }

    /// `GET path` (with the token it was started with): (status, body).
    pub fn get(&self, path: &str) -> (u16, String) {
        self.get_authorized(path, self.token.as_deref())
    }

    /// `GET path` with this `Authorization` header, or none.
    pub fn get_authorized(&self, path: &str, authorization: Option<&str>) -> (u16, String) {
        let (status, _, body) = self.request(path, authorization, &[]);
        (status, body)
    }

    /// `POST path`, empty, with this `Authorization` header, or none:
    /// (status, body).
    pub fn post_authorized(&self, path: &str, authorization: Option<&str>) -> (u16, String) {
        let mut request = self.agent.post(format!("{}{path}", self.http));
        if let Some(authorization) = authorization {
            request = request.header("Authorization", authorization);
        }
        let mut response = request.send_empty().expect("HTTP request");
        let status = response.status().as_u16();
        (status, response.body_mut().read_to_string().expect("body"))
    }

    /// `GET path` with its token and these headers: (status, the headers
    /// asked for, body). Redirects are not followed.
    pub fn get_headers(
        &self,
        path: &str,
        send: &[(&str, &str)],
        read: &[&str],
    ) -> (u16, Vec<Option<String>>, String) {
        let (status, headers, body) = self.request(path, self.token.as_deref(), send);
        let read = read
            .iter()
            .map(|name| {
                headers
                    .get(*name)
                    .map(|v| v.to_str().expect("ASCII header").to_owned())
            })
            .collect();
        (status, read, body)
    }

    fn request(
        &self,
        path: &str,
        authorization: Option<&str>,
        headers: &[(&str, &str)],
    ) -> (u16, ureq::http::HeaderMap, String) {
        let mut request = self.agent.get(format!("{}{path}", self.http));
        if let Some(authorization) = authorization {
            request = request.header("Authorization", authorization);
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let mut response = request.call().expect("HTTP request");
        let status = response.status().as_u16();
        let body = response.body_mut().read_to_string().expect("body");
        (status, response.headers().clone(), body)
    }

    /// Sum of a metric's samples over all label sets (0 if absent).
    pub fn metric(&self, name: &str) -> f64 {
        let (status, body) = self.get("/metrics");
        assert_eq!(status, 200);
        metric_sum(&body, name)
    }

    /// Wait until a line after the first `from` logged contains `pattern`;
    /// its index and the line.
    pub fn wait_logged(
        &mut self,
        pattern: &str,
        from: usize,
        timeout: Duration,
    ) -> (usize, String) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(found) = self
                .log()
                .into_iter()
                .enumerate()
                .skip(from)
                .find(|(_, line)| line.contains(pattern))
            {
                return found;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("jobcast serve exited early: {status}");
            }
            assert!(Instant::now() < deadline, "never logged {pattern:?}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Input messages consumed so far: applied plus dead-lettered.
    pub fn committed(&self) -> u64 {
        let (_, body) = self.get("/metrics");
        (metric_sum(&body, "jobcast_events_consumed_total")
            + metric_sum(&body, "jobcast_events_dead_lettered_total")) as u64
    }

    /// Wait until `n` input messages are consumed (applied or
    /// dead-lettered). Their state may not be stored yet: a test that
    /// reads the store after waits with [`Serve::wait_stored_offsets`].
    pub fn wait_consumed(&mut self, n: u64, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("jobcast serve exited early: {status}");
            }
            if self.committed() >= n {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "only {} of {n} committed",
                self.committed()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Wait until the input offsets stored with the state add up to `n`
    /// (every partition starts at 0): the whole input is applied, across
    /// restarts.
    pub fn wait_stored_offsets(&mut self, n: u64, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("jobcast serve exited early: {status}");
            }
            let stored = self.metric("jobcast_input_committed_offset") as u64;
            if stored >= n {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "only {stored} of {n} offsets stored"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The input partitions this instance owns (`/readyz`).
    pub fn owned_partitions(&self) -> Vec<i64> {
        let (_, body) = self.get("/readyz");
        let readyz: serde_json::Value = serde_json::from_str(&body).expect("/readyz is JSON");
        readyz["owned_partitions"]
            .as_array()
            .map(|a| a.iter().filter_map(serde_json::Value::as_i64).collect())
            .unwrap_or_default()
    }

    /// SIGTERM, and wait for a clean exit; every line it logged.
    pub fn terminate(mut self) -> Vec<String> {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill runs");
        assert!(sent.success());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                assert!(
                    status.success(),
                    "jobcast serve exited with {status} after SIGTERM"
                );
                if let Some(reader) = self.reader.take() {
                    reader.join().expect("the log reader does not panic");
                }
                return self.log();
            }
            assert!(Instant::now() < deadline, "jobcast serve ignored SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Wait until it exits by itself: how, and every line it logged.
    pub fn wait_exit(mut self, timeout: Duration) -> (std::process::ExitStatus, Vec<String>) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                if let Some(reader) = self.reader.take() {
                    reader.join().expect("the log reader does not panic");
                }
                return (status, self.log());
            }
            assert!(Instant::now() < deadline, "jobcast serve is still running");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL: no chance to finish anything. Every line it logged.
    pub fn kill(mut self) -> Vec<String> {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reaped");
        if let Some(reader) = self.reader.take() {
            reader.join().expect("the log reader does not panic");
        }
        self.log()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every record of the derived state (jobs, decisions, tasks, machines,
/// history, policies) of
/// the RocksDB store at `path`, by column family.
pub fn stored_state(path: &Path) -> BTreeMap<&'static str, Records> {
    let store = StateStore::open(path, false).expect("store opens");
    STATE_FAMILIES
        .iter()
        .map(|&family| (family, store.dump(family).expect("store reads")))
        .collect()
}

/// Sum of the samples of metric `name` in a Prometheus text exposition.
pub fn metric_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Kafka client flags of a service that a test stops or kills and starts
/// again in its group: a killed member stays in the group until its session
/// times out, and the mock cluster's coordinator holds every rebalance
/// after a group's first for the session timeout less a second (44 s at
/// librdkafka's default). 6 s is the shortest session a Kafka broker
/// accepts by default (`group.min.session.timeout.ms`).
pub const SHORT_SESSION: [&str; 4] = [
    "-X",
    "session.timeout.ms=6000",
    "-X",
    "heartbeat.interval.ms=500",
];

/// [`SHORT_SESSION`] for librdkafka's mock cluster, which takes any
/// session: 3 s makes each restart after a kill wait about 6 s less (the
/// dead member's session, then the hold of the rebalance), and heartbeats
/// every 500 ms still leave six a session.
pub const MOCK_SESSION: [&str; 4] = [
    "-X",
    "session.timeout.ms=3000",
    "-X",
    "heartbeat.interval.ms=500",
];

/// Flags of a `jobcast serve` that a test kills and restarts: its decisions
/// topic and group, and `session` ([`SHORT_SESSION`], or [`MOCK_SESSION`]
/// on the mock cluster).
pub fn restartable<'a>(
    decisions_topic: &'a str,
    group: &'a str,
    session: [&'a str; 4],
) -> [&'a str; 8] {
    let [x1, session, x2, heartbeat] = session;
    [
        "--decisions-topic",
        decisions_topic,
        "--group",
        group,
        x1,
        session,
        x2,
        heartbeat,
    ]
}

/// Assert that the stores at `a` and `b` hold the same offsets of
/// `events_topic` and the same derived state, family by family, and that
/// none of it is empty but the deadline plans (the workloads of these
/// tests have no deadline jobs).
pub fn assert_same_state(a: &Path, b: &Path, events_topic: &str) {
    let offsets = |path: &Path| {
        StateStore::open(path, false)
            .expect("store opens")
            .offsets(events_topic)
            .expect("offsets read")
    };
    assert_eq!(offsets(a), offsets(b));
    let (a, b) = (stored_state(a), stored_state(b));
    assert_eq!(a.len(), b.len());
    for (family, records) in &b {
        assert!(
            !records.is_empty() || *family == DEADLINES,
            "no {family} stored"
        );
        assert!(a[family] == *records, "the {family} records differ");
    }
}

/// A free port on loopback, for an instance whose URL must be known before
/// it starts.
pub fn free_port() -> u16 {
    free_ports(1)[0]
}

/// `n` distinct free ports on loopback, for instances whose URLs must be
/// known before they start.
///
/// The port is released before the instance binds it, so it must not be
/// one the kernel hands out meanwhile: `bind(0)` and outgoing connections
/// take theirs from `ip_local_port_range` (32768–60999 by default), and a
/// port from there was once chosen twice by two `bind(0)` calls in a row.
/// So ports are drawn at random below that range, each proven free by
/// binding it, and all held until all are chosen.
pub fn free_ports(n: usize) -> Vec<u16> {
    use std::hash::{BuildHasher, RandomState};
    const LOW: u64 = 20_000;
    const HIGH: u64 = 32_000;
    let seed = RandomState::new();
    let mut held = Vec::with_capacity(n);
    for attempt in 0u64.. {
        if held.len() == n {
            break;
        }
        assert!(attempt < 10_000, "no free port in {LOW}..{HIGH}");
        let port = (LOW + seed.hash_one(attempt) % (HIGH - LOW)) as u16;
        if let Ok(listener) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            held.push(listener);
        }
    }
    held.iter()
        .map(|listener| listener.local_addr().expect("bound").port())
        .collect()
}

/// Wait until `serves` own all `partitions` input partitions between them,
/// each at least one and no partition twice (a partition the group has
/// moved stays with its old owner until that one hears of it).
pub fn wait_balanced(serves: &[&Serve], partitions: i32, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        let owned: Vec<Vec<i64>> = serves.iter().map(|s| s.owned_partitions()).collect();
        let all: std::collections::BTreeSet<i64> = owned.iter().flatten().copied().collect();
        let owned_once = owned.iter().map(Vec::len).sum::<usize>() == all.len();
        if all.len() == partitions as usize && owned.iter().all(|o| !o.is_empty()) && owned_once {
            return;
        }
        assert!(Instant::now() < deadline, "partitions owned: {owned:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// How the records of instances that shared partitions may overlap.
#[derive(Clone, Copy)]
pub enum Stored<'a> {
    /// Each record in one store only.
    Once,
    /// A record may be in two stores, the same in both.
    SameTwice,
    /// A record may be in two stores, the same in both, and those final
    /// before the instances took partitions over from one that died are
    /// in its store, at the path: a new owner stores a partition's live
    /// records from the takeover on, so the records that were final before
    /// it (ended jobs', and the decisions made until then) are taken from
    /// there. Two stores may hold one: partitions that move between
    /// survivors again and again may have a give-up commit refused by the
    /// coordinator mid rebalance (`COMMITFAIL … generation id is not
    /// valid`), and the next owner then stores again, identical, the final
    /// records after the offset it starts from.
    SameTwiceAfter(&'a Path),
}

/// Assert that the instances whose stores are at `shared` learnt what the
/// single instance at `single` learnt (the same history and policy
/// errors, each of them), and hold its records between them, each record
/// in one store only.
pub fn assert_shared_state(single: &Path, shared: &[&Path]) {
    assert_shared_state_after(single, shared, Stored::Once);
}

/// [`assert_shared_state`], with records overlapping as `stored` says.
pub fn assert_shared_state_after(single: &Path, shared: &[&Path], stored: Stored<'_>) {
    let dump = |path: &Path, family: &str| {
        StateStore::open(path, false)
            .expect("store opens")
            .dump(family)
            .expect("store reads")
    };
    for family in [HISTORY, POLICIES] {
        let expected = dump(single, family);
        assert!(!expected.is_empty(), "no {family} stored");
        for path in shared {
            let records = dump(path, family);
            assert!(
                records == expected,
                "{}: {family} differs ({} records against {}; first different key {:?})",
                path.display(),
                records.len(),
                expected.len(),
                records
                    .iter()
                    .zip(&expected)
                    .find(|(r, e)| r != e)
                    .map(|(r, _)| &r.0)
            );
        }
    }
    for path in shared {
        assert_decisions_expire(path);
    }
    for family in [JOBS, DECISIONS, TASKS, MACHINES] {
        let mut union: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        for path in shared {
            for (key, value) in dump(path, family) {
                match union.insert(key.clone(), value.clone()) {
                    None => {}
                    Some(before)
                        if matches!(stored, Stored::SameTwice | Stored::SameTwiceAfter(_)) =>
                    {
                        assert!(
                            before == value,
                            "{family} record {key:?} stored differently by two instances"
                        )
                    }
                    Some(_) => panic!("{family} record {key:?} stored by two instances"),
                }
            }
        }
        if let Stored::SameTwiceAfter(previous) = stored {
            for (key, value) in dump(previous, family) {
                union.entry(key).or_insert(value);
            }
        }
        let expected: BTreeMap<Vec<u8>, Vec<u8>> = dump(single, family).into_iter().collect();
        assert!(!expected.is_empty(), "no {family} stored");
        let missing: Vec<&Vec<u8>> = expected
            .keys()
            .filter(|k| !union.contains_key(*k))
            .collect();
        let extra: Vec<&Vec<u8>> = union
            .keys()
            .filter(|k| !expected.contains_key(*k))
            .collect();
        let different: Vec<&Vec<u8>> = expected
            .iter()
            .filter(|(k, v)| union.get(*k).is_some_and(|u| u != *v))
            .map(|(k, _)| k)
            .collect();
        assert!(
            union == expected,
            "the instances' {family} records differ: {} missing (first {:?}), {} extra (first {:?}), {} different (first {:?})",
            missing.len(),
            missing.first(),
            extra.len(),
            extra.first(),
            different.len(),
            different.first()
        );
    }
}

/// Assert that the retention will delete every decision the store at
/// `path` holds: each decided job has its record (which the retention
/// indexes when it ends) or an entry in `expiry` (ended and indexed, or
/// live in a partition given up and awaiting its end). A decision with
/// neither would stay forever.
pub fn assert_decisions_expire(path: &Path) {
    let store = StateStore::open(path, false).expect("store opens");
    let job_id = |key: &[u8]| u64::from_be_bytes(key[..8].try_into().expect("a job id"));
    let records: BTreeSet<u64> = store
        .dump(JOBS)
        .expect("store reads")
        .iter()
        .map(|(k, _)| job_id(k))
        .collect();
    let indexed: BTreeSet<u64> = store
        .dump(EXPIRY)
        .expect("store reads")
        .iter()
        .map(|(k, _)| job_id(&k[8..]))
        .collect();
    let kept: Vec<u64> = store
        .dump(DECISIONS)
        .expect("store reads")
        .iter()
        .map(|(k, _)| job_id(k))
        .filter(|job| !records.contains(job) && !indexed.contains(job))
        .collect::<BTreeSet<u64>>()
        .into_iter()
        .collect();
    assert!(
        kept.is_empty(),
        "{}: decisions of {} jobs would never expire (first {:?})",
        path.display(),
        kept.len(),
        kept.first()
    );
}

/// Peak resident set size of `pid`, KiB.
pub fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse().ok())
        .expect("VmHWM in /proc/PID/status")
}
