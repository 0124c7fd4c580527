//! `jobcast replay`: any supported trace → the service's input topic, in
//! event-time order, keyed by job id. Pacing, delivery accounting and resume
//! offsets are `jobcast_replay::kafka`'s; this module adds the flags, the
//! progress bar, Ctrl-C handling and the summary.

use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use jobcast_ingest::Format;
use jobcast_ingest::kafka::Topics;
use jobcast_replay::kafka::{Outcome, Progress, ReplayOptions, ReplaySummary, Speed, replay};

use super::output::print_json;
use jobcast_ingest::kafka_args::KafkaArgs;

#[derive(clap::Args)]
pub struct Args {
    /// The trace: a directory (google2011, google2019, alibaba2018,
    /// tpch-dags) or a file.
    #[arg(long)]
    trace: PathBuf,
    /// Trace format: google2011, google2019, alibaba2018, gce-lifetimes, spot-traces,
    /// spot-hibernation, jsonl, tpch-dags, swf or sacct.
    #[arg(long)]
    format: Format,
    /// Topic to produce into.
    #[arg(long, default_value_t = Topics::default().events)]
    topic: String,
    /// `max`, or an event-time speed-up factor: 1 replays in real time,
    /// 100 a hundred times faster.
    #[arg(long, default_value = "max")]
    speed: Speed,
    /// Produce at most this many events per second.
    #[arg(long, value_parser = parse_rate)]
    rate: Option<f64>,
    /// Start at this event offset: the 0-based position of a canonical event
    /// in the trace (not a Kafka offset, not a file line). A summary's
    /// "resume with" figure continues an interrupted replay.
    #[arg(long, default_value_t = 0)]
    from_event: u64,
    /// Replay at most this many events (those from --from-event on).
    #[arg(long)]
    max_events: Option<u64>,
    /// Create the topic first if it does not exist.
    #[arg(long)]
    create_topic: bool,
    /// Partitions of a topic created by --create-topic.
    #[arg(long, default_value_t = 4, requires = "create_topic",
          value_parser = clap::value_parser!(i32).range(1..))]
    partitions: i32,
    /// Print the summary as JSON on stdout.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    kafka: KafkaArgs,
}

fn parse_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(rate) if rate.is_finite() && rate > 0.0 => Ok(rate),
        _ => Err(format!(
            "expected a positive number of events per second, got `{s}`"
        )),
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let settings = args.kafka.settings()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    if args.create_topic {
        runtime
            .block_on(settings.ensure_topics(&[(&args.topic, args.partitions)]))
            .map_err(anyhow::Error::msg)?;
    }
    let interrupted = stop_on_ctrl_c(runtime)?;

    let trace = jobcast_ingest::open(args.format, &args.trace)
        .with_context(|| format!("opening {} trace", args.format.name()))?;
    let diagnostics = trace.diagnostics().clone();
    let input_bytes = trace.input_bytes();
    let bar = ProgressBar::new(input_bytes).with_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} {msg}",
        )
        .expect("static template is valid"),
    );
    let options = ReplayOptions {
        topic: args.topic.clone(),
        speed: args.speed,
        rate: args.rate,
        skip: args.from_event,
    };
    let gate = |_produced: u64| {
        if interrupted.load(Ordering::Relaxed) {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    };
    // The replay skips --from-event events itself: read that many more.
    let end = args
        .max_events
        .map_or(u64::MAX, |n| args.from_event.saturating_add(n));
    let trace = trace.take(usize::try_from(end).unwrap_or(usize::MAX));
    let result = replay(&settings, &options, trace, &gate, |p| {
        bar.set_position(diagnostics.bytes_read().min(input_bytes));
        bar.set_message(progress_message(p));
    });
    bar.finish_and_clear();
    if diagnostics.skipped_total() > 0 {
        eprint!("{}", diagnostics.summary());
    }

    let summary = match result {
        Ok(summary) => summary,
        Err(err) => {
            if let Some(summary) = err.summary() {
                report(summary, &args)?;
            }
            return Err(err).context("replaying the trace");
        }
    };
    report(&summary, &args)?;
    match summary.outcome {
        Outcome::Complete | Outcome::Stopped => Ok(()),
        Outcome::DeliveryFailed | Outcome::Aborted => anyhow::bail!(
            "{} of {} events were not delivered",
            summary.failed,
            summary.produced
        ),
    }
}

/// The first Ctrl-C ends the replay after flushing what was produced, so
/// the summary's resume offset is exact; a second one exits at once.
fn stop_on_ctrl_c(runtime: tokio::runtime::Runtime) -> anyhow::Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    let set = flag.clone();
    std::thread::Builder::new()
        .name("replay-signals".into())
        .spawn(move || {
            runtime.block_on(async {
                if tokio::signal::ctrl_c().await.is_ok() {
                    set.store(true, Ordering::Relaxed);
                    eprintln!("interrupted: flushing (Ctrl-C again to exit now)");
                }
                if tokio::signal::ctrl_c().await.is_ok() {
                    std::process::exit(130);
                }
            })
        })
        .context("starting the signal handler thread")?;
    Ok(flag)
}

fn progress_message(p: &Progress) -> String {
    let secs = p.elapsed.as_secs_f64();
    let rate = if secs > 0.0 {
        p.produced as f64 / secs
    } else {
        0.0
    };
    let event_time = p
        .event_time_us
        .map(|t| format!(", event time {:.0} s", t as f64 / 1e6))
        .unwrap_or_default();
    format!(
        "event {} | {} produced, {:.0} events/s{event_time}",
        p.next_event, p.produced, rate
    )
}

/// The summary on stderr, and as JSON on stdout with `--json`.
fn report(summary: &ReplaySummary, args: &Args) -> anyhow::Result<()> {
    eprintln!(
        "replayed {} of {} events ({} bytes) into {} in {:.1} s ({:.0} events/s)",
        summary.delivered,
        summary.produced,
        summary.bytes,
        summary.topic,
        summary.elapsed_secs,
        summary.events_per_sec
    );
    if summary.skipped > 0 || args.from_event > 0 {
        eprintln!("  skipped the first {} events", summary.skipped);
    }
    if summary.skipped < args.from_event {
        eprintln!(
            "  the trace has only {} events: nothing after --from-event {}",
            summary.skipped, args.from_event
        );
    }
    if let Some(failure) = &summary.first_failure {
        eprintln!(
            "  {} deliveries failed; the first, event {}: {}",
            summary.failed, failure.event, failure.error
        );
    }
    if summary.outcome != Outcome::Complete {
        eprintln!(
            "  resume with --from-event {} (events before it are delivered)",
            summary.resume_from
        );
    }
    if args.json {
        print_json(summary)?;
    }
    Ok(())
}
