//! `jobcast demo`: the whole service on one machine with nothing to
//! install. librdkafka's in-process mock cluster is the Kafka, RocksDB
//! lives in a data directory, `serve` runs as it would in production, and a
//! trace (the bundled Google 2011 excerpt by default) is replayed into it.
//!
//! The mock cluster keeps only a bounded log per partition, so the replay
//! is paced against the service: it never runs more than a window of
//! events ahead of what the service has committed.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use jobcast_ingest::Format;
use jobcast_ingest::kafka::KafkaSettings;
use jobcast_predictor::decision::PolicyKind;
use jobcast_predictor::engine::{JobRecord, live_policies};
use jobcast_replay::kafka::{Outcome, ReplayOptions, Speed, replay};
use jobcast_scheduler_feed::config::{HttpToken, ServeConfig, TOKEN_VARIABLE};
use jobcast_scheduler_feed::shared::{Recent, Shared};
use rdkafka::mocking::MockCluster;

use jobcast_scheduler_feed::server;

use super::serve::shutdown_signal;

#[derive(clap::Args)]
pub struct Args {
    /// Run this many seconds, stopping the replay if it is not done and
    /// otherwise keeping the service and its HTTP API up until then
    /// (default: on a terminal, until Ctrl-C; otherwise until the trace is
    /// done).
    #[arg(long)]
    duration: Option<f64>,
    /// HTTP API and /metrics address while the demo runs (a host name is
    /// resolved: localhost:8080).
    #[arg(long, default_value = "127.0.0.1:8080", value_parser = resolve_address)]
    http: SocketAddr,
    /// The trace to replay (default: the bundled Google 2011 excerpt).
    #[arg(long, requires = "format")]
    trace: Option<PathBuf>,
    /// Its format: google2011, google2019, alibaba2018, gce-lifetimes, spot-traces,
    /// spot-hibernation, jsonl, tpch-dags, swf or sacct.
    #[arg(long, requires = "trace")]
    format: Option<Format>,
    /// `max`, or an event-time speed-up factor.
    #[arg(long, default_value = "max")]
    speed: Speed,
    /// The policy whose decisions are published.
    #[arg(long, default_value = "slearn")]
    policy: PolicyKind,
    /// RocksDB directory (default: a temporary one, removed at the end).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Partitions of the input topic. With one, a run repeats exactly, as
    /// `simulate` and `evaluate` do; with more, the service applies the
    /// partitions' events as their fetches arrive while the replay still
    /// writes them, so jobs of different partitions may end in another
    /// order from run to run, and the figures vary a little.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(i32).range(1..))]
    partitions: i32,
    /// Most events the replay may run ahead of the service.
    #[arg(long, default_value_t = 5_000)]
    window: u64,
}

/// The bundled excerpt, found next to the binary's source tree or in the
/// working directory.
fn bundled_excerpt() -> anyhow::Result<PathBuf> {
    let candidates = [
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/google2011-excerpt"),
        PathBuf::from("tests/data/google2011-excerpt"),
    ];
    candidates
        .into_iter()
        .find(|p| p.is_dir())
        .map(|p| p.canonicalize().unwrap_or(p))
        .context("the bundled Google 2011 excerpt (tests/data/google2011-excerpt) is not here; pass --trace and --format")
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let (trace_path, format) = match (&args.trace, args.format) {
        (Some(path), Some(format)) => (path.clone(), format),
        _ => (bundled_excerpt()?, Format::Google2011),
    };
    let temp = match &args.data_dir {
        Some(_) => None,
        None => Some(tempfile::tempdir().context("creating a data directory")?),
    };
    let data_dir = args
        .data_dir
        .clone()
        .unwrap_or_else(|| temp.as_ref().expect("set above").path().join("state"));

    let mock = MockCluster::new(1).context("starting the embedded Kafka (mock cluster)")?;
    let mut kafka = KafkaSettings::new(mock.bootstrap_servers());
    // The mock broker holds a fetch with no data for its whole wait (a real
    // one answers when data arrives): with the default 500 ms every
    // decision would wait that long (docs/performance.md, latency).
    kafka.client.insert("fetch.wait.max.ms".into(), "10".into());
    let mut config = ServeConfig {
        kafka,
        ..ServeConfig::default()
    };
    config.storage.path = data_dir.clone();
    config.storage.sync = false;
    config.http.address = args.http;
    config.http.token = std::env::var(TOKEN_VARIABLE).ok().map(HttpToken::new);
    config.engine.policy = args.policy;
    let t = &config.topics;
    mock.create_topic(&t.events, args.partitions, 1)?;
    for topic in t.outputs() {
        mock.create_topic(topic, 1, 1)?;
    }
    config.validate()?;
    let header = Header {
        brokers: config.kafka.brokers.clone(),
        partitions: args.partitions,
        state: data_dir.clone(),
        trace: format!("{} ({})", trace_path.display(), format.name()),
        speed: match args.speed {
            Speed::Max => "as fast as the service takes it".into(),
            Speed::Factor(f) => format!("{f}x event time"),
        },
        policy: args.policy,
        shadow: config.engine.shadow.len(),
        token: config.http.token.is_some(),
    };

    let runtime = tokio::runtime::Runtime::new()?;
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let settings = config.kafka.clone();
    let settings_for_letters = config.kafka.clone();
    let dead_letter_topic = config.topics.dead_letter.clone();
    let options = ReplayOptions {
        speed: args.speed,
        ..ReplayOptions::new(config.topics.events.clone())
    };
    let trace = jobcast_ingest::open(format, &trace_path)
        .with_context(|| format!("opening {}", trace_path.display()))?;
    // Rows of the trace that are no event, each class with its first
    // places (file:line), as `convert` reports them.
    let diagnostics = trace.diagnostics().clone();

    // The policies the service scores, in the order reports list them.
    let scored: Vec<PolicyKind> = live_policies()
        .into_iter()
        .filter(|k| *k == config.engine.policy || config.engine.shadow.contains(k))
        .collect();
    let (shared_tx, shared_rx) = std::sync::mpsc::channel::<(Arc<Shared>, SocketAddr)>();
    let serve_stop = stop.clone();
    let service = runtime.spawn(server::run(
        config,
        async move {
            tokio::select! {
                () = shutdown_signal() => {}
                () = wait_for(serve_stop) => {}
            }
        },
        move |listening| {
            let _ = shared_tx.send((listening.shared, listening.address));
        },
    ));
    let (shared, address) = match shared_rx.recv_timeout(Duration::from_secs(30)) {
        Ok(started) => started,
        // It ended before it listened (the address taken, the store
        // locked), dropping the sender: its own error says where and why.
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            return Err(match runtime.block_on(service)? {
                Err(e) => anyhow::Error::new(e).context("the service did not start"),
                Ok(_) => anyhow::anyhow!("the service stopped before it started"),
            });
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            anyhow::bail!("the service did not start within 30 s")
        }
    };
    eprint!("{}", header.show(address));

    // Set once the whole trace is delivered: how many events it held.
    let replayed_all = Arc::new(OnceLock::<u64>::new());
    let window = args.window;
    let replay_shared = shared.clone();
    let replay_stop = stop.clone();
    let replay_done = replayed_all.clone();
    let replayer = std::thread::spawn(move || {
        let gate = |produced: u64| loop {
            if replay_stop.load(Ordering::Relaxed) {
                return ControlFlow::Break(());
            }
            let committed = replay_shared.counters.committed.load(Ordering::Relaxed);
            if produced < committed + window {
                return ControlFlow::Continue(());
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let result = replay(&settings, &options, trace, &gate, |_| {});
        match &result {
            Ok(summary) if summary.outcome == Outcome::Complete => {
                let _ = replay_done.set(summary.delivered);
            }
            _ => replay_stop.store(true, Ordering::Relaxed),
        }
        result
    });

    let deadline = args.duration.map(Duration::from_secs_f64);
    // On a terminal the service stays up for the curls the header offers,
    // until Ctrl-C; a script (stdout not a terminal) gets its summary as
    // soon as the trace is done.
    let stay = deadline.is_none() && std::io::stdout().is_terminal();
    let mut last = (Instant::now(), 0u64);
    let mut said_done = false;
    loop {
        std::thread::sleep(Duration::from_millis(100));
        let committed = shared.counters.committed.load(Ordering::Relaxed);
        let caught_up = replayed_all.get().is_some_and(|&n| committed >= n);
        if last.0.elapsed() >= Duration::from_secs(1) && !(said_done && committed == last.1) {
            let rate = (committed - last.1) as f64 / last.0.elapsed().as_secs_f64();
            eprintln!("{}", status_line(&shared, &scored, rate));
            last = (Instant::now(), committed);
        }
        if caught_up && !said_done && (stay || deadline.is_some()) {
            let until = match deadline {
                Some(d) => format!(" until {:.0} s have passed", d.as_secs_f64()),
                None => "; Ctrl-C to stop".into(),
            };
            eprintln!("replay done; API still up at http://{address}{until}");
            if let Some(line) = example_job(&shared, args.policy) {
                eprintln!("  try: curl http://{address}/jobs/{line}");
            }
            said_done = true;
        }
        // With a duration, or on a terminal, the service stays up (and
        // answers HTTP) after the trace is done.
        let done = caught_up && deadline.is_none() && !stay;
        let out_of_time = deadline.is_some_and(|d| started.elapsed() >= d);
        if done || out_of_time || stop.load(Ordering::Relaxed) || service.is_finished() {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let replayed = replayer
        .join()
        .map_err(|_| anyhow::anyhow!("the replay thread panicked"))?;
    let summary = runtime.block_on(service)??;
    let replayed = replayed.context("replaying the trace")?;
    let skipped = diagnostics.skipped_total();
    if skipped > 0 {
        eprint!("\ninput: {}", diagnostics.summary());
    }
    // The dead-letter topic goes with the embedded Kafka: say what it held.
    if shared.counters.dead_lettered.load(Ordering::Relaxed) > 0 {
        match dead_letters(&settings_for_letters, &dead_letter_topic) {
            Ok(report) => eprint!("{report}"),
            Err(e) => eprintln!("\ndead letters: could not be read back: {e:#}"),
        }
    }
    crate::output::print_out(&final_report(
        &shared,
        &scored,
        (replayed.delivered, skipped),
        summary.applied,
        started.elapsed(),
    ))?;
    eprintln!(
        "\nThe state of this run {}. `jobcast serve` runs the same service on a real \
         Kafka (README, docs/operations.md).",
        match &args.data_dir {
            Some(dir) => format!("stays in {}", dir.display()),
            None => "was in a temporary directory, now removed (--data-dir keeps it)".into(),
        }
    );
    drop(temp);
    Ok(())
}

/// A job the driving `policy` estimated, and what it shows: one that
/// finished, so that its record holds each policy's error too, if there is
/// one; `None` if the policy has estimated no job yet.
fn example_job(shared: &Shared, policy: PolicyKind) -> Option<String> {
    let find = |keep: &dyn Fn(&JobRecord) -> bool| {
        let (found, _) = shared
            .store
            .jobs_page(None, 1, 100_000, JobRecord::from_bytes, keep)
            .ok()?;
        found.into_iter().next()
    };
    let name = policy.name();
    if let Some(job) = find(&|job| job.errors.contains_key(&policy)) {
        return Some(format!(
            "{}   a finished job {name} estimated: its decisions and each policy's error",
            job.job_id
        ));
    }
    find(&|job| job.estimates.contains_key(&policy))
        .map(|job| format!("{}   a job {name} estimated: its decisions", job.job_id))
}

/// Examples of each reason shown at the end of a demo.
const DEAD_LETTER_EXAMPLES: usize = 3;

/// What the dead-letter topic holds, as the demo ends: each reason class
/// with its count and first examples (the input's partition and offset,
/// why, and the event as it was sent).
fn dead_letters(settings: &KafkaSettings, topic: &str) -> anyhow::Result<String> {
    use jobcast_ingest::kafka::{headers, read_to_end};
    use rdkafka::Message;
    use rdkafka::consumer::BaseConsumer;
    use rdkafka::message::Headers;

    let mut config = settings.client_config();
    config
        .set("group.id", "jobcast-demo-dead-letters")
        .set("enable.auto.commit", "false");
    let consumer: BaseConsumer = config.create()?;
    let mut by_reason: std::collections::BTreeMap<String, (u64, Vec<String>)> = Default::default();
    let timeouts = (Duration::from_secs(5), Duration::from_secs(30));
    read_to_end(&consumer, topic, &mut Default::default(), timeouts, |m| {
        let header = |name: &str| {
            m.headers()
                .and_then(|h| h.iter().find(|h| h.key == name))
                .and_then(|h| h.value)
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .unwrap_or_default()
        };
        let (count, examples) = by_reason.entry(header(headers::REASON)).or_default();
        *count += 1;
        if examples.len() < DEAD_LETTER_EXAMPLES {
            let payload = String::from_utf8_lossy(m.payload().unwrap_or_default());
            let payload: String = payload.chars().take(200).collect();
            examples.push(format!(
                "partition {} offset {}: {}\n      {payload}",
                header(headers::SOURCE_PARTITION),
                header(headers::SOURCE_OFFSET),
                header(headers::ERROR),
            ));
        }
    })?;
    let mut out = String::from("\ndead letters, by reason (the first examples of each):\n");
    for (reason, (count, examples)) in by_reason {
        out.push_str(&format!("  {reason}: {count}\n"));
        for example in examples {
            out.push_str(&format!("    {example}\n"));
        }
    }
    Ok(out)
}

/// A `--http` address: `host:port`, the host's first address if it is a
/// name (`localhost:8080`).
fn resolve_address(text: &str) -> Result<SocketAddr, String> {
    use std::net::ToSocketAddrs;
    text.to_socket_addrs()
        .map_err(|e| format!("{text}: {e} (want host:port, as 127.0.0.1:8080)"))?
        .next()
        .ok_or_else(|| format!("{text}: resolves to no address"))
}

async fn wait_for(flag: Arc<AtomicBool>) {
    while !flag.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What runs where, and what to try while it does: the demo's first screen.
struct Header {
    brokers: String,
    partitions: i32,
    state: PathBuf,
    trace: String,
    speed: String,
    policy: PolicyKind,
    shadow: usize,
    /// Whether the API wants a token (`JOBCAST_HTTP_TOKEN`).
    token: bool,
}

impl Header {
    fn show(&self, http: SocketAddr) -> String {
        format!(
            "\njobcast demo: the streaming service on an embedded Kafka\n\
             \x20 Kafka        {brokers} (librdkafka's in-process mock cluster), input topic \
             jobcast.events with {partitions}\n\
             \x20 state        {state} (RocksDB)\n\
             \x20 HTTP API     http://{http}\n\
             \x20 input        {trace}, replayed {speed}\n\
             \x20 policies     {policy} decides; {shadow} policies run in shadow and are scored\n\
             \n\
             While it runs, try:\n\
             \x20 {curl} 'http://{http}/jobs?state=finished&limit=3'   finished jobs: each policy's estimate and error\n\
             \x20 {curl} http://{http}/jobs/<job id>                  a job with its decisions (an example follows)\n\
             \x20 {curl} http://{http}/policies                        each policy's error so far\n\
             \x20 {curl} http://{http}/metrics                         Prometheus metrics\n\
             Logs show warnings only (JOBCAST_LOG=info for more).\n\n",
            brokers = self.brokers,
            partitions = match self.partitions {
                1 => "1 partition".to_owned(),
                n => format!("{n} partitions"),
            },
            state = self.state.display(),
            trace = self.trace,
            speed = self.speed,
            policy = self.policy.name(),
            shadow = self.shadow,
            curl = if self.token {
                "curl -H \"Authorization: Bearer $JOBCAST_HTTP_TOKEN\""
            } else {
                "curl"
            },
        )
    }
}

/// One line a second: what the service is waiting for until it consumes,
/// then its throughput and results so far.
fn status_line(shared: &Shared, scored: &[PolicyKind], rate: f64) -> String {
    if !shared.assigned.load(Ordering::Relaxed) {
        return "waiting for the consumer group to give this instance its partitions \
                (a few seconds on a new group)"
            .into();
    }
    if !shared.recovered.load(Ordering::Relaxed) {
        return "recovering the state from the store".into();
    }
    let c = &shared.counters;
    let recent = shared.recent.lock().expect("not poisoned");
    let queues: Vec<String> = recent
        .decisions_by_queue
        .iter()
        .map(|(q, n)| format!("Q{q}:{n}"))
        .collect();
    let errors = error_columns(&recent, scored, 0.5);
    format!(
        "{:>8.0} ev/s | applied {} | dead {} | live jobs {} | decisions {} [{}] | P50 err {}",
        rate,
        c.applied.load(Ordering::Relaxed),
        c.dead_lettered.load(Ordering::Relaxed),
        c.live_jobs.load(Ordering::Relaxed),
        c.decisions.load(Ordering::Relaxed),
        queues.join(" "),
        errors,
    )
}

fn error_columns(recent: &Recent, scored: &[PolicyKind], q: f64) -> String {
    scored
        .iter()
        .filter_map(|p| {
            recent
                .error_quantile(p.name(), q)
                .map(|e| format!("{} {e:.0}%", p.name()))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The summary; `input` is the events replayed and the trace's rows that
/// were no event (skipped).
fn final_report(
    shared: &Shared,
    scored: &[PolicyKind],
    input: (u64, u64),
    applied: u64,
    elapsed: Duration,
) -> String {
    let (replayed, skipped) = input;
    let c = &shared.counters;
    let recent = shared.recent.lock().expect("not poisoned");
    let mut out = String::new();
    out.push_str("\njobcast demo: summary\n");
    out.push_str(&format!(
        "  input rows skipped  {skipped}\n  events replayed     {replayed}\n  events applied      {applied}\n  events held         {}\n  dead-lettered       {}\n  decisions           {}\n  elapsed             {:.1} s\n",
        c.held_events.load(Ordering::Relaxed),
        c.dead_lettered.load(Ordering::Relaxed),
        c.decisions.load(Ordering::Relaxed),
        elapsed.as_secs_f64(),
    ));
    out.push_str("  decisions by queue  ");
    let queues: Vec<String> = recent
        .decisions_by_queue
        .iter()
        .map(|(q, n)| format!("Q{q}: {n}"))
        .collect();
    out.push_str(&queues.join(", "));
    out.push_str(
        "\n\n  policy      N jobs   P50 error   P90 error   at or below P50/P90/P95/P99\n",
    );
    for policy in scored {
        let name = policy.name();
        let n = recent.errors_pct.get(name).map_or(0, |e| e.len());
        let p50 = recent.error_quantile(name, 0.5);
        let p90 = recent.error_quantile(name, 0.9);
        let show = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.1}%"));
        // Over the scored jobs that had quantiles: said when fewer.
        let coverage = recent
            .coverage_pct(name)
            .map_or("-".into(), |(c, covered)| {
                let over = if covered == n {
                    String::new()
                } else {
                    format!(" (N {covered})")
                };
                format!(
                    "{:.0}% / {:.0}% / {:.0}% / {:.0}%{over}",
                    c[0], c[1], c[2], c[3]
                )
            });
        out.push_str(&format!(
            "  {name:<12} {n:>5}   {:>9}   {:>9}   {coverage}\n",
            show(p50),
            show(p90)
        ));
    }
    out.push_str(&match recent.eta_accuracy() {
        Some((p50, p90, within, n)) => format!(
            "\n  ETA at a job's first decision, over {n} finished jobs: P50 error {p50:.1}%, \
             P90 error {p90:.1}%, {within:.0}% finished within the 80% interval\n"
        ),
        None => "\n  ETA: no job given one has finished yet\n".into(),
    });
    out.push_str(
        "\nWhat the numbers mean:\n\
         \x20 applied events changed the state; dead-lettered ones (malformed, or impossible\n\
         \x20 in the state they arrived in) went to jobcast.dead-letter with the reason;\n\
         \x20 held ones (among the applied) are more than a day ahead of every partition,\n\
         \x20 waiting for their partition or most partitions to vouch for them.\n\
         \x20 A decision tells the scheduler a job's queue (Q0 runs first); a job gets one on\n\
         \x20 arrival and a new one when its estimate changes (SLearn, once its pilot tasks end).\n\
         \x20 Each policy's error is |estimate - truth| / truth of a finished job's mean task\n\
         \x20 runtime, over its last 10,000 scored jobs. Every estimate also carries quantiles;\n\
         \x20 a calibrated P90 has 90% of the jobs at or below it.\n\
         \x20 A decision also says when the job should finish (its ETA), from the work queued\n\
         \x20 ahead of it and the CPUs of the machines up; the error is |ETA - actual| / actual\n\
         \x20 of the time from that decision to the job's end.\n\
         \x20 N jobs differ by policy: a policy is scored on the finished jobs it estimated, and\n\
         \x20 SLearn estimates only jobs wide enough to sample pilot tasks (thin ones go to Q0\n\
         \x20 unestimated); the history policies estimate every job at its submission.\n\
         \x20 On one input partition (the default) a run repeats these figures exactly; with\n\
         \x20 --partitions N they vary a little, as partitions are applied as they are read.\n",
    );
    out
}
