//! `jobcast bench deadlines`: Teylo et al.'s scheduler of bags of tasks
//! with deadlines on hibernating spot VMs (§IV), on a trace's bags, with
//! maps drawn from jobcast's runtime estimates at a quantile and run
//! against the truth ([`jobcast_replay::deadlines`]).
//!
//! Method, as §IV: each bag's tasks with their runtimes and memory from the
//! trace; the VM catalogue of Table VI, the trace's runtimes taken as the
//! baseline core's; the deadline `D` the shortest, in steps of an hour,
//! at which Algorithms 1 and 2 give valid maps on the true runtimes
//! (`VM_timelimit` 0.5). The strategies at that `D`:
//!
//! - `no_hibernation`: the primary map, no spot VM hibernating;
//! - `proposal`: one spot VM, chosen at random among those with work
//!   left, hibernates a tenth of `D` after the start for 15 % of `D`, and
//!   the scheduler waits until `start_bkp` (the paper: 2 h after the start
//!   for 3 h, with deadlines of 16 to 40 h; the bags here are shorter, so
//!   the hibernation is set by their deadline);
//! - `proposal_migration`: the same for 1,000 h, so the tasks migrate;
//! - `immediate_migration`: the short hibernation, migrating at once;
//! - `on_demand`: Algorithm 1 with on-demand VMs only;
//! - `proposal_true_runtimes`: `proposal` on maps drawn from the true
//!   runtimes (the paper's assumption), the yardstick of the estimates.
//!
//! Every strategy but the last draws its maps from jobcast's estimate: a
//! quantile of the job's mean task runtime, from the policy run on the
//! workload as `jobcast evaluate` runs it (history from the trace's first
//! half, quantiles calibrated on it). jobcast estimates jobs, not tasks,
//! so every task of a bag is planned at the same runtime. The quantile is
//! the highest, up to `--quantile`, whose maps are valid at `D`: a level
//! that says the deadline cannot be met would otherwise spread the bag
//! one task per VM (Algorithm 1 buys the fastest VM for each task that
//! fits no other); when none is valid, the median.
//!
//! With `--availability`, each spot VM instead hibernates through the
//! outages of a measured spot market (SkyPilot's availability traces),
//! `--availability-runs` times per bag, as §IV-B did with price peaks.
//!
//! The quantile trade-off also carries each level's maps out by dispatch
//! ([`run_dispatched`]): the map's VMs boot at the start and each free
//! core takes the next task, which is how a bag-of-tasks runtime that
//! pulls work would use maps drawn from one runtime for every task.
//!
//! It also carries the bag out elastically ([`run_elastic`]), with the
//! same hibernation: a first fleet drawn at `--elastic-start` of the
//! level's runtime (a pilot), each VM that would open a new slot stopped
//! when the others can end the bag by the occupation limit without it,
//! and VMs bought when they cannot, all on the bag's runtime as its ended
//! tasks show it (`jobcast_predictor::deadlines::fleet`, the fleet the
//! service runs live). Through measured outages, each spot VM it buys is
//! bought in the first market with capacity then, and hibernates with
//! that market; on demand when none has any.
//!
//! With `--spot-prices` (AWS's spot price history, one zone), the spot
//! prices are that history's instead of Table VI's: every bag starts at
//! the history's first change, its maps are drawn at the prices then, and
//! each spot slot is billed at the price in effect when it begins.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context as _;
use jobcast_ingest::Format;
use jobcast_predictor::deadlines::{
    Catalogue, Clock, Maps, SpotPrice, Task, Terms, shortest_deadline,
};
use jobcast_predictor::decision::{PolicyKind, Quantiles};
use jobcast_replay::deadlines::{
    Availability, Hibernation, Outcome, Response, one_hibernation, run, run_dispatched,
    run_elastic, write_tradeoff_plot,
};
use jobcast_replay::evaluate::{EvalConfig, run_policy};
use jobcast_replay::workload::{DEFAULT_MAX_WIDTH, Workload};
use serde::Serialize;

#[derive(clap::Args)]
pub struct DeadlinesArgs {
    /// The trace whose bags of tasks are scheduled (its first half is the
    /// history jobcast estimates from).
    #[arg(long)]
    trace: PathBuf,
    /// Its format.
    #[arg(long)]
    format: Format,
    /// The policy whose estimates draw the maps.
    #[arg(long, default_value = "3sigma")]
    policy: PolicyKind,
    /// The quantile of its estimate the maps plan each task at: p50, p90,
    /// p95 or p99.
    #[arg(long, default_value = "p90", value_parser = parse_quantile)]
    quantile: usize,
    /// Bags of at least this many tasks (the paper's had 31 to 103).
    #[arg(long, default_value_t = 20)]
    min_tasks: u32,
    /// Drop jobs with more tasks than this.
    #[arg(long, default_value_t = DEFAULT_MAX_WIDTH)]
    max_width: u32,
    /// Runtimes are multiplied by this, so that bags of minutes run as
    /// long as the paper's (7 to 120 h) against hour slots.
    #[arg(long, default_value_t = 60.0)]
    time_scale: f64,
    /// GB of memory per unit of the trace's request (Google's are
    /// normalised to its largest machine).
    #[arg(long, default_value_t = 64.0)]
    memory_gb_per_unit: f64,
    /// `VM_timelimit`: the share of `D` a primary VM may be busy.
    #[arg(long, default_value_t = 0.5)]
    time_limit: f64,
    /// Deadlines are searched in steps of this many hours.
    #[arg(long, default_value_t = 1.0)]
    deadline_step_hours: f64,
    /// ... up to this many.
    #[arg(long, default_value_t = 1000.0)]
    max_deadline_hours: f64,
    /// The deadline given is the shortest valid one plus this share of it
    /// (0: the paper's shortest, which leaves an estimate no room).
    #[arg(long, default_value_t = 0.0)]
    deadline_slack: f64,
    /// The §IV-A hibernation starts this share of the deadline after the
    /// job (the paper: 2 h of 16 to 40).
    #[arg(long, default_value_t = 0.1)]
    hibernate_at: f64,
    /// ... and lasts this share of it (the paper: 3 h, which its proposal
    /// waits out).
    #[arg(long, default_value_t = 0.15)]
    hibernate_for: f64,
    /// ... or this many (the proposal migrates).
    #[arg(long, default_value_t = 1000.0)]
    long_hibernation_hours: f64,
    /// SkyPilot spot availability traces (a directory of them): spot VMs
    /// hibernate through their markets' outages.
    #[arg(long)]
    availability: Option<PathBuf>,
    /// Runs per bag on the availability traces, each in markets and at a
    /// start drawn anew.
    #[arg(long, default_value_t = 10)]
    availability_runs: u64,
    /// AWS spot price history (`describe-spot-price-history` JSON, or its
    /// tab-separated archive): the catalogue's spot prices over time.
    #[arg(long, requires = "spot_zone")]
    spot_prices: Option<PathBuf>,
    /// The zone whose prices are read (a name such as `us-east-1a` or an
    /// ID such as `use1-az2`).
    #[arg(long, requires = "spot_prices")]
    spot_zone: Option<String>,
    /// The product whose prices are read.
    #[arg(long, default_value = "Linux/UNIX")]
    spot_product: String,
    /// The elastic fleet begins with the VMs of the maps drawn at this
    /// share of the estimate's runtime, and grows from what its first
    /// tasks show.
    #[arg(long, default_value_t = 0.5)]
    elastic_start: f64,
    /// Seed of the hibernating VM and of the availability draws.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print the report as JSON.
    #[arg(long)]
    pub(crate) json: bool,
    /// Draw deadline misses against cost across the quantiles
    /// (`deadline_tradeoff.svg`) in this directory.
    #[arg(long)]
    plots: Option<PathBuf>,
}

fn parse_quantile(s: &str) -> Result<usize, String> {
    Quantiles::index_of(s)
}

/// What the strategies did over every bag.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Summary {
    pub runs: usize,
    pub cost_usd: f64,
    /// The mean over runs, seconds of scaled time.
    pub makespan_s: f64,
    pub deadline_misses: usize,
    pub hibernations: u32,
    pub migrations: u32,
    pub vms_added: u32,
    pub vms_drained: u32,
    pub resumed: u32,
}

impl Summary {
    fn add(&mut self, o: &Outcome, clock: &Clock) {
        let n = self.runs as f64;
        let makespan_s = (o.makespan * clock.period_s) as f64;
        self.makespan_s = (self.makespan_s * n + makespan_s) / (n + 1.0);
        self.runs += 1;
        self.cost_usd += o.cost_usd;
        self.deadline_misses += usize::from(o.missed);
        self.hibernations += o.hibernations;
        self.migrations += o.migrations;
        self.vms_added += o.vms_added;
        self.vms_drained += o.vms_drained;
        self.resumed += o.resumed;
    }
}

/// One bag.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BagRow {
    pub job_id: u64,
    pub tasks: usize,
    pub memory_gb: f64,
    pub mean_task_h: f64,
    pub max_task_h: f64,
    /// The quantile its maps are drawn at: the highest up to the one asked
    /// for whose maps are valid.
    pub planned_quantile: &'static str,
    /// The runtime every task is planned at, hours.
    pub planned_task_h: f64,
    pub deadline_h: f64,
    /// The maps drawn from the estimate are valid at `D`.
    pub planned_valid: bool,
    pub spot_vms: usize,
    pub on_demand_vms: usize,
}

/// Deadline misses and cost at one quantile of the estimates.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TradeOff {
    /// `p50` … `p99`; `true_mean` for every task at the true mean, `true`
    /// for the true runtimes.
    pub quantile: &'static str,
    pub proposal: Summary,
    /// Its cost over the true runtimes' maps', %.
    pub cost_vs_true_pct: f64,
    /// The same maps' VMs taking the bag's tasks by dispatch, no VM
    /// hibernating ([`run_dispatched`]), and its cost over the true
    /// runtimes' maps', %.
    pub dispatched: Summary,
    pub dispatched_cost_vs_true_pct: f64,
    /// An elastic fleet ([`run_elastic`]) from the maps drawn at
    /// `elastic_start` of the level's runtime, with the proposal's
    /// hibernation, and its cost over the true runtimes' maps', %.
    pub elastic: Summary,
    pub elastic_cost_vs_true_pct: f64,
    /// The same on the availability traces, when given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub elastic_availability: Option<Summary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub elastic_availability_cost_vs_true_pct: Option<f64>,
    /// The same on the availability traces, when given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub availability: Option<Summary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub availability_cost_vs_true_pct: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeadlinesReport {
    pub trace: PathBuf,
    pub deadline_slack: f64,
    pub policy: PolicyKind,
    pub quantile: &'static str,
    pub time_scale: f64,
    pub memory_gb_per_unit: f64,
    pub bags: Vec<BagRow>,
    /// Bags left out: no estimate, or no valid deadline by the maximum.
    pub skipped: BTreeMap<&'static str, usize>,
    /// §IV-A, by strategy.
    pub strategies: BTreeMap<&'static str, Summary>,
    /// The paper's comparisons, %.
    pub relative: BTreeMap<&'static str, f64>,
    /// On the availability traces, by strategy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub availability: Option<BTreeMap<&'static str, Summary>>,
    pub tradeoff: Vec<TradeOff>,
    /// The spot price history the catalogue was priced with, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spot_prices: Option<SpotPricing>,
}

/// Where the spot prices came from, when not from Table VI.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SpotPricing {
    pub file: PathBuf,
    pub zone: String,
    /// The catalogue's types the history prices; the others keep Table
    /// VI's spot price.
    pub types: Vec<String>,
    /// Price changes read for them.
    pub changes: usize,
    /// Every bag starts here: the history's first change, µs since the
    /// epoch.
    pub start_us: u64,
}

/// A bag ready to schedule: its true tasks, its deadline, and its maps
/// drawn at each quantile of the estimate (then every task at the true
/// mean, [`TRUE_MEAN`], and on the true runtimes, [`TRUE`]), with the
/// On-demand baseline's.
struct Bag {
    row: BagRow,
    truth: Vec<Task>,
    deadline: u64,
    maps: Vec<Maps>,
    /// The first fleet of the elastic runs at each level: maps drawn at
    /// `--elastic-start` of its runtime (for [`TRUE`], of the true mean),
    /// and that runtime, seconds.
    elastic: Vec<(Maps, f64)>,
    on_demand: Vec<Maps>,
}

/// The index in [`Bag::maps`] of the maps drawn with every task at the
/// bag's true mean runtime: a perfect estimate of the job.
const TRUE_MEAN: usize = Quantiles::NAMES.len();
/// The index of the maps drawn on the true runtimes.
const TRUE: usize = TRUE_MEAN + 1;
/// The names of the levels of [`Bag::maps`].
const LEVELS: [&str; TRUE + 1] = ["p50", "p90", "p95", "p99", "true_mean", "true"];

impl Bag {
    /// The level its maps are drawn at under the cap `level` (an index
    /// into [`LEVELS`]): the highest quantile up to it whose maps are
    /// valid, else the median; the truth's as they are.
    fn level(&self, cap: usize) -> usize {
        if cap >= TRUE_MEAN {
            return cap;
        }
        (0..=cap).rev().find(|&l| self.maps[l].valid()).unwrap_or(0)
    }
}

/// Refuse a bad flag by name and value, before anything is read.
fn check_flags(args: &DeadlinesArgs) -> anyhow::Result<()> {
    let positive = [
        ("--time-scale", args.time_scale),
        ("--memory-gb-per-unit", args.memory_gb_per_unit),
        ("--deadline-step-hours", args.deadline_step_hours),
        ("--max-deadline-hours", args.max_deadline_hours),
        ("--hibernate-for", args.hibernate_for),
        ("--long-hibernation-hours", args.long_hibernation_hours),
        ("--elastic-start", args.elastic_start),
    ];
    for (flag, value) in positive {
        anyhow::ensure!(
            value.is_finite() && value > 0.0,
            "{flag} {value}: must be positive"
        );
    }
    for (flag, value) in [
        ("--deadline-slack", args.deadline_slack),
        ("--hibernate-at", args.hibernate_at),
    ] {
        anyhow::ensure!(
            value.is_finite() && value >= 0.0,
            "{flag} {value}: must be a share of the deadline, 0 or more"
        );
    }
    anyhow::ensure!(
        args.time_limit > 0.0 && args.time_limit <= 1.0,
        "--time-limit {}: must be in (0, 1]",
        args.time_limit
    );
    Ok(())
}

pub fn deadlines(args: &DeadlinesArgs) -> anyhow::Result<DeadlinesReport> {
    let started = Instant::now();
    let mut catalogue = Catalogue::teylo_2018();
    let clock = Clock::MINUTE_PERIODS_HOUR_SLOTS;
    check_flags(args)?;
    let spot_prices = match (&args.spot_prices, &args.spot_zone) {
        (Some(file), Some(zone)) => Some(price_catalogue(
            &mut catalogue,
            file,
            zone,
            &args.spot_product,
        )?),
        _ => None,
    };
    let start_us = spot_prices.as_ref().map_or(0, |p| p.start_us);
    // What the maps are drawn with: the prices when the bags start.
    let planned_catalogue = catalogue.priced_at(start_us);
    // What an elastic fleet buys with: the prices as they change.
    let terms = Terms {
        catalogue: &catalogue,
        clock: &clock,
        start_us,
    };
    let hours = |h: f64| clock.periods(h * 3600.0);
    let trace = jobcast_ingest::open(args.format, &args.trace)
        .with_context(|| format!("opening {} trace", args.format.name()))?;
    let workload = Workload::from_trace(trace, args.max_width)
        .with_context(|| format!("reading {}", args.trace.display()))?;
    let config = EvalConfig::default();
    let slots = config.slots_for(&workload)?;
    let report = run_policy(&workload, args.policy, &config, slots)?;
    let estimates: BTreeMap<u64, _> = report
        .jobs
        .iter()
        .filter_map(|j| Some((j.job_id, j.quantiles?)))
        .collect();
    eprintln!(
        "read {}: {} jobs, {} estimated by {} in {:.1} s",
        args.trace.display(),
        workload.jobs.len(),
        estimates.len(),
        args.policy,
        started.elapsed().as_secs_f64()
    );
    let mut skipped = BTreeMap::from([("no_estimate", 0), ("no_deadline", 0)]);
    let mut bags = Vec::new();
    for job in workload
        .jobs
        .iter()
        .filter(|j| j.width() >= args.min_tasks && j.job().stages.is_none())
    {
        let Some(quantiles) = estimates.get(&job.job_id()) else {
            *skipped.get_mut("no_estimate").expect("listed") += 1;
            continue;
        };
        let memory_gb = job.job().mem_request * args.memory_gb_per_unit;
        let truth: Vec<Task> = job
            .runtimes_us()
            .iter()
            .zip(0..)
            .map(|(&us, id)| Task {
                id,
                base_s: us as f64 / 1e6 * args.time_scale,
                memory_gb,
            })
            .collect();
        let levels = quantiles.mean_task_runtime_us.to_array();
        let uniform = |base_s: f64| {
            truth
                .iter()
                .map(|t| Task { base_s, ..*t })
                .collect::<Vec<_>>()
        };
        let planned = levels.map(|us| uniform(us / 1e6 * args.time_scale));
        // The best any estimate of the job can do: every task at the true
        // mean.
        let mean_s = truth.iter().map(|t| t.base_s).sum::<f64>() / truth.len() as f64;
        let true_mean = uniform(mean_s);
        let Some((shortest, _)) = shortest_deadline(
            &truth,
            &planned_catalogue,
            &clock,
            args.time_limit,
            hours(args.deadline_step_hours),
            hours(args.max_deadline_hours),
        ) else {
            *skipped.get_mut("no_deadline").expect("listed") += 1;
            continue;
        };
        let step = hours(args.deadline_step_hours).max(1);
        let deadline =
            ((shortest as f64 * (1.0 + args.deadline_slack) / step as f64).ceil() as u64) * step;
        let (maps, on_demand): (Vec<Maps>, Vec<Maps>) = planned
            .iter()
            .chain([&true_mean, &truth])
            .map(|tasks| {
                let draw = |spot| {
                    Maps::draw(
                        tasks,
                        &planned_catalogue,
                        &clock,
                        deadline,
                        args.time_limit,
                        spot,
                    )
                };
                (draw(true), draw(false))
            })
            .unzip();
        let level = (0..=args.quantile)
            .rev()
            .find(|&l| maps[l].valid())
            .unwrap_or(0);
        let chosen = &maps[level];
        let spot_vms = chosen
            .primary
            .vms
            .iter()
            .filter(|v| v.market == jobcast_predictor::deadlines::Market::Spot)
            .count();
        let h = |s: f64| s / 3600.0;
        let elastic = planned
            .iter()
            .map(|tasks| tasks[0].base_s)
            .chain([mean_s, mean_s])
            .map(|base_s| {
                let pilot = base_s * args.elastic_start;
                let tasks = uniform(pilot);
                let maps = Maps::draw(
                    &tasks,
                    &planned_catalogue,
                    &clock,
                    deadline,
                    args.time_limit,
                    true,
                );
                (maps, pilot)
            })
            .collect();
        bags.push(Bag {
            row: BagRow {
                job_id: job.job_id(),
                tasks: truth.len(),
                memory_gb,
                mean_task_h: h(truth.iter().map(|t| t.base_s).sum::<f64>() / truth.len() as f64),
                max_task_h: h(truth.iter().map(|t| t.base_s).fold(0.0, f64::max)),
                planned_quantile: Quantiles::NAMES[level],
                planned_task_h: h(planned[level][0].base_s),
                deadline_h: clock.hours(deadline),
                planned_valid: chosen.valid(),
                spot_vms,
                on_demand_vms: chosen.primary.vms.len() - spot_vms,
            },
            truth,
            deadline,
            maps,
            elastic,
            on_demand,
        });
    }
    anyhow::ensure!(
        !bags.is_empty(),
        "no bag of {} or more tasks with an estimate and a valid deadline in {}",
        args.min_tasks,
        args.trace.display()
    );
    let availability = args
        .availability
        .as_ref()
        .map(|path| -> anyhow::Result<Availability> {
            let trace = jobcast_ingest::open(Format::SpotHibernation, path)
                .with_context(|| format!("opening spot traces {}", path.display()))?;
            let events = trace
                .collect::<Result<Vec<_>, _>>()
                .with_context(|| format!("reading {}", path.display()))?;
            let a = Availability::from_events(events);
            anyhow::ensure!(!a.markets.is_empty(), "{}: no spot market", path.display());
            Ok(a)
        })
        .transpose()?;

    let long = hours(args.long_hibernation_hours);
    let share = |deadline: u64, x: f64| (deadline as f64 * x).round() as u64;
    let at = |bag: &Bag| share(bag.deadline, args.hibernate_at);
    let short = |bag: &Bag| share(bag.deadline, args.hibernate_for).max(1);
    let seed_of = |bag: &Bag| args.seed ^ bag.row.job_id;
    let mut strategies: BTreeMap<&'static str, Summary> = BTreeMap::new();
    let mut add = |name, o: Outcome| strategies.entry(name).or_default().add(&o, &clock);
    for bag in &bags {
        let level = bag.level(args.quantile);
        let (maps, truth_maps) = (&bag.maps[level], &bag.maps[TRUE]);
        let go = |maps: &Maps, h: &[Vec<Hibernation>], r| {
            run(maps, &bag.truth, &catalogue, &clock, h, r, start_us)
        };
        let one = |maps: &Maps, length| {
            one_hibernation(maps, seed_of(bag), at(bag), length).unwrap_or_default()
        };
        add("no_hibernation", go(maps, &[], Response::Wait));
        add("proposal", go(maps, &one(maps, short(bag)), Response::Wait));
        add(
            "proposal_migration",
            go(maps, &one(maps, long), Response::Wait),
        );
        add(
            "immediate_migration",
            go(maps, &one(maps, short(bag)), Response::Immediate),
        );
        add("on_demand", go(&bag.on_demand[level], &[], Response::Wait));
        add(
            "proposal_true_runtimes",
            go(truth_maps, &one(truth_maps, short(bag)), Response::Wait),
        );
    }
    let pct = |a: f64, b: f64| (a / b - 1.0) * 100.0;
    let s = |name: &str| &strategies[name];
    let mut relative = BTreeMap::from([
        (
            "immediate_migration_cost_over_proposal",
            pct(s("immediate_migration").cost_usd, s("proposal").cost_usd),
        ),
        (
            "immediate_migration_cost_vs_on_demand",
            pct(s("immediate_migration").cost_usd, s("on_demand").cost_usd),
        ),
        (
            "proposal_migration_cost_over_no_hibernation",
            pct(
                s("proposal_migration").cost_usd,
                s("no_hibernation").cost_usd,
            ),
        ),
        (
            "proposal_cost_vs_true_runtimes",
            pct(s("proposal").cost_usd, s("proposal_true_runtimes").cost_usd),
        ),
    ]);

    // §IV-B: hibernations from measured capacity.
    let measured = |level: usize| -> Option<BTreeMap<&'static str, Summary>> {
        let a = availability.as_ref()?;
        let mut out: BTreeMap<&'static str, Summary> = BTreeMap::new();
        for bag in &bags {
            let level = bag.level(level);
            let (maps, od) = (&bag.maps[level], &bag.on_demand[level]);
            for k in 0..args.availability_runs {
                let Some(h) =
                    a.hibernations(maps, &clock, bag.deadline, seed_of(bag).wrapping_add(k))
                else {
                    continue;
                };
                let go = |maps: &Maps, h: &[Vec<Hibernation>], r| {
                    run(maps, &bag.truth, &catalogue, &clock, h, r, start_us)
                };
                out.entry("proposal")
                    .or_default()
                    .add(&go(maps, &h, Response::Wait), &clock);
                out.entry("immediate_migration")
                    .or_default()
                    .add(&go(maps, &h, Response::Immediate), &clock);
                out.entry("on_demand")
                    .or_default()
                    .add(&go(od, &[], Response::Wait), &clock);
                let (pilot, pilot_s) = &bag.elastic[level];
                // The pilot's VMs draw their markets first, as the maps'
                // do; the VMs it buys draw theirs from the same job.
                if let Some(mut draw) = a.draw(&clock, bag.deadline, seed_of(bag).wrapping_add(k)) {
                    let h: Vec<Vec<Hibernation>> = pilot
                        .primary
                        .vms
                        .iter()
                        .map(|vm| draw.vm(vm.market))
                        .collect();
                    let o = run_elastic(pilot, &bag.truth, terms, &h, Some(&mut draw), *pilot_s);
                    out.entry("elastic").or_default().add(&o, &clock);
                }
            }
        }
        Some(out)
    };
    let availability_summary = measured(args.quantile);
    if let Some(a) = &availability_summary
        && let (Some(p), Some(i), Some(o)) = (
            a.get("proposal"),
            a.get("immediate_migration"),
            a.get("on_demand"),
        )
    {
        relative.extend([
            (
                "availability_proposal_makespan_vs_on_demand",
                pct(p.makespan_s, o.makespan_s),
            ),
            (
                "availability_proposal_makespan_vs_immediate_migration",
                pct(p.makespan_s, i.makespan_s),
            ),
            (
                "availability_immediate_migration_cost_over_proposal",
                pct(i.cost_usd, p.cost_usd),
            ),
            (
                "availability_on_demand_cost_over_proposal",
                pct(o.cost_usd, p.cost_usd),
            ),
        ]);
    }

    // Misses against cost across the quantiles.
    let true_proposal = s("proposal_true_runtimes").clone();
    let true_measured = measured(TRUE).and_then(|m| m.get("proposal").cloned());
    let mut tradeoff = Vec::new();
    for (level, &name) in LEVELS.iter().enumerate() {
        let mut proposal = Summary::default();
        for bag in &bags {
            let maps = &bag.maps[bag.level(level)];
            let h = one_hibernation(maps, seed_of(bag), at(bag), short(bag)).unwrap_or_default();
            proposal.add(
                &run(
                    maps,
                    &bag.truth,
                    &catalogue,
                    &clock,
                    &h,
                    Response::Wait,
                    start_us,
                ),
                &clock,
            );
        }
        let mut dispatched = Summary::default();
        for bag in &bags {
            let maps = &bag.maps[bag.level(level)];
            dispatched.add(
                &run_dispatched(maps, &bag.truth, &catalogue, &clock, start_us),
                &clock,
            );
        }
        let mut elastic = Summary::default();
        for bag in &bags {
            let (maps, pilot_s) = &bag.elastic[bag.level(level)];
            let h = one_hibernation(maps, seed_of(bag), at(bag), short(bag)).unwrap_or_default();
            elastic.add(
                &run_elastic(maps, &bag.truth, terms, &h, None, *pilot_s),
                &clock,
            );
        }
        let on_measured = measured(level);
        let elastic_availability = on_measured.as_ref().and_then(|m| m.get("elastic").cloned());
        let on_measured = on_measured.and_then(|m| m.get("proposal").cloned());
        tradeoff.push(TradeOff {
            quantile: name,
            cost_vs_true_pct: pct(proposal.cost_usd, true_proposal.cost_usd),
            proposal,
            dispatched_cost_vs_true_pct: pct(dispatched.cost_usd, true_proposal.cost_usd),
            dispatched,
            elastic_cost_vs_true_pct: pct(elastic.cost_usd, true_proposal.cost_usd),
            elastic,
            elastic_availability_cost_vs_true_pct: elastic_availability
                .as_ref()
                .zip(true_measured.as_ref())
                .map(|(m, t)| pct(m.cost_usd, t.cost_usd)),
            elastic_availability,
            availability_cost_vs_true_pct: on_measured
                .as_ref()
                .zip(true_measured.as_ref())
                .map(|(m, t)| pct(m.cost_usd, t.cost_usd)),
            availability: on_measured,
        });
    }
    if let Some(dir) = &args.plots {
        let line = |name: &str, of: &dyn Fn(&TradeOff) -> Option<(f64, &Summary)>| {
            let mut points: Vec<(String, f64, f64)> = Vec::new();
            for t in &tradeoff {
                let Some((cost_pct, s)) = of(t) else { continue };
                let missed_pct = s.deadline_misses as f64 / s.runs.max(1) as f64 * 100.0;
                // Quantiles whose maps are the same share one point.
                match points.last_mut() {
                    Some(last) if (last.1, last.2) == (cost_pct, missed_pct) => {
                        last.0 = format!("{} = {}", last.0, t.quantile);
                    }
                    _ => points.push((t.quantile.to_owned(), cost_pct, missed_pct)),
                }
            }
            (!points.is_empty()).then(|| (name.to_owned(), points))
        };
        let lines: Vec<_> = [
            line("one hibernation (§IV-A)", &|t| {
                Some((t.cost_vs_true_pct, &t.proposal))
            }),
            line("measured outages (§IV-B)", &|t| {
                Some((t.availability_cost_vs_true_pct?, t.availability.as_ref()?))
            }),
            line("dispatched, no hibernation", &|t| {
                Some((t.dispatched_cost_vs_true_pct, &t.dispatched))
            }),
            line("elastic, one hibernation", &|t| {
                Some((t.elastic_cost_vs_true_pct, &t.elastic))
            }),
            line("elastic, measured outages", &|t| {
                Some((
                    t.elastic_availability_cost_vs_true_pct?,
                    t.elastic_availability.as_ref()?,
                ))
            }),
        ]
        .into_iter()
        .flatten()
        .collect();
        let path = write_tradeoff_plot(dir, &lines).map_err(anyhow::Error::msg)?;
        eprintln!("wrote {}", path.display());
    }
    eprintln!(
        "jobcast bench deadlines: {} bags in {:.1} s",
        bags.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(DeadlinesReport {
        trace: args.trace.clone(),
        deadline_slack: args.deadline_slack,
        policy: args.policy,
        quantile: Quantiles::NAMES[args.quantile],
        time_scale: args.time_scale,
        memory_gb_per_unit: args.memory_gb_per_unit,
        bags: bags.into_iter().map(|b| b.row).collect(),
        skipped,
        strategies,
        relative,
        availability: availability_summary,
        tradeoff,
        spot_prices,
    })
}

/// Give `catalogue` the spot price history of `zone` in `file`.
fn price_catalogue(
    catalogue: &mut Catalogue,
    file: &std::path::Path,
    zone: &str,
    product: &str,
) -> anyhow::Result<SpotPricing> {
    let (history, diagnostics) = jobcast_ingest::spot_prices::read(file, zone, product)
        .with_context(|| format!("reading spot prices {}", file.display()))?;
    if diagnostics.skipped_total() > 0 {
        eprintln!("{}: {}", file.display(), diagnostics.summary());
    }
    let series: BTreeMap<String, Vec<SpotPrice>> = history
        .by_type
        .into_iter()
        .map(|(name, changes)| {
            let changes = changes
                .into_iter()
                .map(|c| SpotPrice {
                    from_us: c.time_us,
                    usd_h: c.usd_h,
                })
                .collect();
            (name, changes)
        })
        .collect();
    let types = catalogue.set_spot_prices(&series);
    anyhow::ensure!(
        !types.is_empty(),
        "{}: no price in zone {zone} for a type of the catalogue",
        file.display()
    );
    let priced: Vec<&Vec<SpotPrice>> = types.iter().map(|t| &series[t]).collect();
    let start_us = priced
        .iter()
        .filter_map(|c| c.first())
        .map(|c| c.from_us)
        .min()
        .expect("every matched type has a change");
    Ok(SpotPricing {
        file: file.to_owned(),
        zone: zone.to_owned(),
        changes: priced.iter().map(|c| c.len()).sum(),
        types,
        start_us,
    })
}

impl fmt::Display for DeadlinesReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{}: {} bags, maps planned at {}'s {} (runtimes ×{}, {} GB per memory unit); skipped {:?}",
            self.trace.display(),
            self.bags.len(),
            self.policy,
            self.quantile,
            self.time_scale,
            self.memory_gb_per_unit,
            self.skipped
        )?;
        if let Some(p) = &self.spot_prices {
            writeln!(
                f,
                "spot prices of {} in {} ({} changes), from {}: {}",
                p.file.display(),
                p.zone,
                p.changes,
                chrono::DateTime::from_timestamp_micros(p.start_us as i64)
                    .map_or_else(|| p.start_us.to_string(), |t| t.to_rfc3339()),
                p.types.join(", ")
            )?;
        }
        writeln!(
            f,
            "{:>20} {:>6} {:>8} {:>8} {:>5} {:>8} {:>8} {:>6} {:>9}",
            "job", "tasks", "mean h", "max h", "at", "plan h", "D h", "valid", "spot/od"
        )?;
        for b in &self.bags {
            writeln!(
                f,
                "{:>20} {:>6} {:>8.2} {:>8.2} {:>5} {:>8.2} {:>8.1} {:>6} {:>5}/{}",
                b.job_id,
                b.tasks,
                b.mean_task_h,
                b.max_task_h,
                b.planned_quantile,
                b.planned_task_h,
                b.deadline_h,
                b.planned_valid,
                b.spot_vms,
                b.on_demand_vms
            )?;
        }
        let table =
            |f: &mut fmt::Formatter<'_>, title: &str, s: &BTreeMap<&'static str, Summary>| {
                writeln!(f, "{title}")?;
                writeln!(
                    f,
                    "{:<24} {:>6} {:>10} {:>12} {:>7} {:>6} {:>6}",
                    "strategy", "runs", "cost $", "makespan h", "missed", "hib", "migr"
                )?;
                for (name, x) in s {
                    writeln!(
                        f,
                        "{:<24} {:>6} {:>10.2} {:>12.2} {:>7} {:>6} {:>6}",
                        name,
                        x.runs,
                        x.cost_usd,
                        x.makespan_s / 3600.0,
                        x.deadline_misses,
                        x.hibernations,
                        x.migrations
                    )?;
                }
                Ok(())
            };
        table(f, "§IV-A: one spot VM hibernates", &self.strategies)?;
        if let Some(a) = &self.availability {
            table(f, "§IV-B: spot VMs hibernate through measured outages", a)?;
        }
        for (name, v) in &self.relative {
            writeln!(f, "{name}: {v:+.1} %")?;
        }
        writeln!(f, "quantile trade-off (proposal):")?;
        for t in &self.tradeoff {
            write!(
                f,
                "  {:<5} missed {:>3}/{:<4} cost ${:>9.2} ({:+.1} % vs true)",
                t.quantile,
                t.proposal.deadline_misses,
                t.proposal.runs,
                t.proposal.cost_usd,
                t.cost_vs_true_pct
            )?;
            write!(
                f,
                "; dispatched: missed {} cost ${:.2} ({:+.1} %)",
                t.dispatched.deadline_misses, t.dispatched.cost_usd, t.dispatched_cost_vs_true_pct
            )?;
            write!(
                f,
                "; elastic: missed {} cost ${:.2} ({:+.1} %, {} VMs added, {} drained, {} tasks resumed)",
                t.elastic.deadline_misses,
                t.elastic.cost_usd,
                t.elastic_cost_vs_true_pct,
                t.elastic.vms_added,
                t.elastic.vms_drained,
                t.elastic.resumed
            )?;
            if let (Some(a), Some(p)) = (&t.availability, t.availability_cost_vs_true_pct) {
                write!(
                    f,
                    "; measured outages: missed {}/{} cost ${:.2} ({p:+.1} %)",
                    a.deadline_misses, a.runs, a.cost_usd
                )?;
            }
            if let (Some(a), Some(p)) = (
                &t.elastic_availability,
                t.elastic_availability_cost_vs_true_pct,
            ) {
                write!(
                    f,
                    "; elastic on measured outages: missed {}/{} cost ${:.2} ({p:+.1} %)",
                    a.deadline_misses, a.runs, a.cost_usd
                )?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}
