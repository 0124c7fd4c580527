//! `jobcast simulate`: one prediction policy driving the trace-driven
//! cluster simulation; a summary table, or JSON with every job. With
//! `--via-kafka` the policy runs in a live `jobcast serve` and the
//! simulator is its downstream scheduler (`jobcast_replay::closed_loop`).
//! With `--scheduler megha` the trace's tasks run instead on Megha's
//! federated clusters, under each of its configurations
//! (`jobcast_replay::megha`); with `--scheduler easy`, an HPC log's jobs
//! on its machine under EASY backfilling (`jobcast_replay::hpc`).

use std::time::Duration;

use anyhow::Context as _;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use jobcast_ingest::kafka::Topics;
use jobcast_replay::closed_loop::{self, ClosedLoopConfig, LoopSummary};
use jobcast_replay::evaluate::{PolicyKind, run_policy};
use jobcast_replay::hpc::backfill::StartAnswer;
use jobcast_replay::megha::{self, MeghaConfig, Scheduler, UserQueue};
use jobcast_replay::sim::SimReport;
use jobcast_replay::workload::Workload;
use jobcast_scheduler_feed::config::ConsumerConfig;
use serde_json::json;

use super::evaluate::Common;
use super::hpc;
use super::output::{print_json, print_out};
use jobcast_ingest::kafka_args::{KafkaArgs, TopicArgs};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    common: Common,
    /// The policy: slearn, 3sigma, 3sigma-tl, point, slearn-dag, 3sigma-dag,
    /// bayes, las, fifo or oracle.
    #[arg(long, required_unless_present = "scheduler")]
    policy: Option<PolicyKind>,
    /// A downstream scheduler to run the trace's tasks on instead of the
    /// GS queues: `megha` (federated clusters, against a centralised
    /// master and a sampler, with and without jobcast), `easy` or
    /// `conservative` (an HPC log's machine under FCFS with EASY or
    /// conservative backfilling, with each runtime predictor; `--format
    /// swf`).
    #[arg(
        long,
        value_parser = ["megha", "easy", "conservative"],
        conflicts_with_all = ["policy", "via_kafka"]
    )]
    scheduler: Option<String>,
    /// With `--scheduler easy|conservative`: answer jobcast's "when will
    /// my job start?" on one schedule played on the medians instead of
    /// the median over 32 played on sampled runtimes (the service's
    /// answer), 32 times faster on logs with long queues.
    #[arg(long, requires = "scheduler")]
    starts_on_medians: bool,
    #[command(flatten)]
    megha: MeghaArgs,
    /// Close the loop through Kafka: the policy runs in a `jobcast serve`
    /// (started with the same policy, settings and seed, on an empty state);
    /// the simulator sends it task and job events and schedules by the
    /// decisions it publishes. Implies --cold-start, since the service
    /// learns only from what it consumes.
    #[arg(long)]
    via_kafka: bool,
    #[command(flatten)]
    kafka: KafkaArgs,
    #[command(flatten)]
    topics: TopicArgs,
    /// The service's consumer group (with --via-kafka) [default: serve's,
    /// jobcast].
    #[arg(long, env = "JOBCAST_GROUP")]
    group: Option<String>,
    /// With --via-kafka, the longest wait (seconds) for the service to
    /// apply one simulated instant's events.
    #[arg(long, default_value_t = 30.0, value_parser = parse_secs)]
    catch_up_timeout: f64,
}

/// Megha's data centre (`--scheduler megha`).
#[derive(clap::Args)]
struct MeghaArgs {
    /// Workers (64 cores and 16 GB each, as the paper's).
    #[arg(long, default_value_t = 1_000)]
    workers: u32,
    /// Clusters, one Local Master each.
    #[arg(long, default_value_t = 10)]
    lms: u32,
    /// Global Masters.
    #[arg(long, default_value_t = 10)]
    gms: u32,
    /// Seconds between an LM's heartbeats.
    #[arg(long, default_value_t = 10.0, value_parser = parse_secs)]
    heartbeat_secs: f64,
    /// One-way message delay, milliseconds.
    #[arg(long, default_value_t = 0.5)]
    network_ms: f64,
    /// Sampling's reservations per task.
    #[arg(long, default_value_t = 2)]
    probes: u32,
    /// Arrivals come this many times faster than in the trace (the load
    /// grows by as much; runtimes stay).
    #[arg(long, default_value_t = 1.0)]
    arrival_speedup: f64,
    /// User queues with fairness: each one's share of the cores, comma
    /// separated (the paper's fairness runs: 0.1,0.25,0.15,0.5). Users are
    /// assigned queues by a hash of their name.
    #[arg(long, value_delimiter = ',')]
    queue_shares: Vec<f64>,
    /// The GM serving each queue, counting from 0 [default: queue i to GM
    /// i modulo --gms].
    #[arg(long, value_delimiter = ',', requires = "queue_shares")]
    queue_gms: Vec<u32>,
}

fn megha(args: &Args) -> anyhow::Result<()> {
    let m = &args.megha;
    anyhow::ensure!(
        m.network_ms.is_finite() && m.network_ms >= 0.0,
        "--network-ms {}: must be 0 or more",
        m.network_ms
    );
    anyhow::ensure!(
        m.arrival_speedup.is_finite() && m.arrival_speedup >= 1.0,
        "--arrival-speedup {}: must be 1 or more",
        m.arrival_speedup
    );
    anyhow::ensure!(
        m.queue_gms.is_empty() || m.queue_gms.len() == m.queue_shares.len(),
        "--queue-gms names {} GMs for {} queues",
        m.queue_gms.len(),
        m.queue_shares.len()
    );
    let queues = m
        .queue_shares
        .iter()
        .enumerate()
        .map(|(i, &share)| UserQueue {
            share,
            gm: m
                .queue_gms
                .get(i)
                .copied()
                .unwrap_or(i as u32 % m.gms.max(1)),
        })
        .collect();
    let workload = args.common.workload()?;
    let history = args.common.config().history_for(&workload)?;
    let jobs = megha::speed_up_arrivals(&workload.jobs, m.arrival_speedup);
    let config = MeghaConfig {
        workers: m.workers,
        lms: m.lms,
        gms: m.gms,
        heartbeat_us: (m.heartbeat_secs * 1e6).round() as u64,
        network_us: (m.network_ms * 1e3).round() as u64,
        probes: m.probes,
        queues,
        seed: args.common.seed,
        ..MeghaConfig::default()
    };
    let bar = ProgressBar::with_draw_target(
        Some(Scheduler::ALL.len() as u64),
        ProgressDrawTarget::stderr(),
    );
    let mut runs = Vec::new();
    for scheduler in Scheduler::ALL {
        bar.set_message(scheduler.name());
        runs.push(megha::simulate(&jobs, &history, &config, scheduler)?);
        bar.inc(1);
    }
    bar.finish_and_clear();
    if args.common.json {
        let by_name: serde_json::Map<String, serde_json::Value> = runs
            .iter()
            .map(|r| Ok((r.scheduler.name().to_owned(), serde_json::to_value(r)?)))
            .collect::<Result<_, serde_json::Error>>()?;
        return print_json(&json!({
            "workers": config.workers,
            "lms": config.lms,
            "gms": config.gms,
            "heartbeat_secs": m.heartbeat_secs,
            "network_ms": m.network_ms,
            "arrival_speedup": m.arrival_speedup,
            "configurations": by_name,
        }));
    }
    let mut table = format!(
        "{} workers, {} clusters, {} GMs, heartbeat {} s\n{:<14} {:>7} {:>10} {:>10} {:>11} {:>10} {:>10} {:>8} {:>8}\n",
        config.workers,
        config.lms,
        config.gms,
        m.heartbeat_secs,
        "scheduler",
        "tasks",
        "alloc p50",
        "alloc p99",
        "alloc max",
        "avg JCT",
        "P50 JCT",
        "refused",
        "repart"
    );
    for r in &runs {
        table.push_str(&format!(
            "{:<14} {:>7} {:>8.1}ms {:>8.1}ms {:>9.1}ms {:>9.1}s {:>9.1}s {:>8} {:>8}\n",
            r.scheduler.name(),
            r.tasks,
            r.allocation_p50_ms,
            r.allocation_p99_ms,
            r.allocation_max_ms,
            r.avg_jct_s,
            r.p50_jct_s,
            r.inconsistencies,
            r.repartitions
        ));
    }
    if runs.iter().any(|r| !r.share_attainment.is_empty()) {
        table.push_str(
            "share attainment while waiting (queue: share → attained, tasks preempted, average JCT)\n",
        );
        for r in &runs {
            let queues: Vec<String> = r
                .share_attainment
                .iter()
                .map(|q| {
                    let got = q
                        .attainment
                        .map_or_else(|| "-".into(), |a| format!("{:.0} %", a * 100.0));
                    format!(
                        "{}: {:.0} % → {got}, {}, {:.0} s",
                        q.queue,
                        q.share * 100.0,
                        q.preempted,
                        q.avg_jct_s
                    )
                })
                .collect();
            table.push_str(&format!(
                "{:<14} {} (preemptions {} of {} tried, {:.0} s of work lost)\n",
                r.scheduler.name(),
                queues.join("; "),
                r.preemptions,
                r.preemption_attempts,
                r.preempted_work_s
            ));
        }
    }
    print_out(&table)
}

pub(crate) fn parse_secs(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs > 0.0 => Ok(secs),
        _ => Err(format!("expected a positive number of seconds, got `{s}`")),
    }
}

pub fn run(mut args: Args) -> anyhow::Result<()> {
    match args.scheduler.as_deref() {
        Some(hpc @ ("easy" | "conservative")) => {
            let scheduler = if hpc == "easy" {
                hpc::Scheduler::Easy
            } else {
                hpc::Scheduler::Conservative
            };
            let answer = if args.starts_on_medians {
                StartAnswer::Medians
            } else {
                StartAnswer::Sampled
            };
            return hpc::backfilling(&args.common, scheduler, answer);
        }
        Some(_) => return megha(&args),
        None => {}
    }
    let policy = args
        .policy
        .expect("clap requires --policy without --scheduler");
    args.common.cold_start |= args.via_kafka;
    let workload = args.common.workload()?;
    let config = args.common.config();
    let slots = config.slots_for(&workload)?;
    let report = if args.via_kafka {
        via_kafka(&args, policy, &workload, config.sim_config(slots))?
    } else {
        run_policy(&workload, policy, &config, slots)?
    };
    if args.common.json {
        let out = json!({
            "policy": report.policy,
            "slots": report.slots,
            "summary": report.summary,
            "history_jobs": config.history_jobs(&workload),
            "excluded": workload.excluded.counts,
            "split": workload.split,
            "jobs": report.jobs,
        });
        return print_json(&out);
    }
    let s = &report.summary;
    let opt = |v: Option<f64>| v.map_or_else(|| "-".into(), |x| format!("{x:.2}"));
    let rows = [
        ("policy", report.policy.name().to_owned()),
        ("slots", report.slots.to_string()),
        ("jobs", s.jobs.to_string()),
        ("avg JCT (s)", opt(s.avg_jct_s)),
        ("P50 JCT (s)", opt(s.p50_jct_s)),
        ("avg wait (s)", opt(s.avg_wait_s)),
        ("P50 error (%)", opt(s.p50_error_pct)),
        ("P90 error (%)", opt(s.p90_error_pct)),
        ("right queue (%)", opt(s.correct_queue_pct)),
        ("queue too high (%)", opt(s.too_high_queue_pct)),
        ("queue too low (%)", opt(s.too_low_queue_pct)),
        ("estimated jobs", s.estimated_jobs.to_string()),
        ("thin jobs", s.thin_jobs.to_string()),
        (
            "excluded jobs",
            workload.excluded.counts.total().to_string(),
        ),
    ];
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let table: String = rows
        .iter()
        .map(|(k, v)| format!("{k:<width$}  {v}\n"))
        .collect();
    print_out(&table)
}

/// The run with `jobcast serve` predicting, with a progress bar over the
/// simulated jobs and a summary of the exchange on stderr.
fn via_kafka(
    args: &Args,
    policy: PolicyKind,
    workload: &Workload,
    sim: jobcast_replay::sim::SimConfig,
) -> anyhow::Result<SimReport> {
    if policy == PolicyKind::Oracle {
        anyhow::bail!(
            "--via-kafka: the oracle needs true runtimes, which `jobcast serve` does not have"
        );
    }
    let config = ClosedLoopConfig {
        kafka: args.kafka.settings()?,
        topics: args.topics.apply(Topics::default()),
        group: args
            .group
            .clone()
            .unwrap_or_else(|| ConsumerConfig::default().group),
        catch_up_timeout: Duration::from_secs_f64(args.catch_up_timeout),
    };
    let bar = ProgressBar::with_draw_target(
        Some(workload.jobs.len() as u64),
        ProgressDrawTarget::stderr(),
    );
    if let Ok(style) =
        ProgressStyle::with_template("{bar:40} {human_pos}/{human_len} jobs (eta {eta}) {msg}")
    {
        bar.set_style(style);
    }
    let result = closed_loop::simulate(&workload.jobs, policy, &sim, &config, &mut |p| {
        bar.set_position(p.jobs_done);
        bar.set_message(format!(
            "instant {}, simulated time {:.0} s",
            p.instants,
            p.now_us as f64 / 1e6
        ));
    });
    bar.finish_and_clear();
    let (report, summary) = result.with_context(|| {
        format!(
            "simulating through Kafka (brokers {}, service group {}, topics {} and {})",
            config.kafka.brokers, config.group, config.topics.events, config.topics.decisions
        )
    })?;
    report_exchange(&summary);
    Ok(report)
}

fn report_exchange(s: &LoopSummary) {
    if s.prior_input_messages > 0 {
        eprintln!(
            "warning: the input topic held {} messages before this run: if the service read them, it did not start cold and its decisions differ from `jobcast simulate --cold-start`",
            s.prior_input_messages
        );
    }
    let per_instant_ms = if s.instants > 0 {
        s.elapsed_secs * 1e3 / s.instants as f64
    } else {
        0.0
    };
    eprintln!(
        "closed loop: {} instants, {} events sent, {} decisions applied ({} duplicates ignored) in {:.1} s ({per_instant_ms:.1} ms per instant)",
        s.instants, s.events, s.decisions, s.duplicates, s.elapsed_secs
    );
}
