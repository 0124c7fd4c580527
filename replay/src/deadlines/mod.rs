//! Teylo et al.'s maps carried out against the truth, with spot VMs that
//! hibernate ([`jobcast_predictor::deadlines`] draws the maps).
//!
//! Each VM of the primary map runs its cores' tasks in the map's order,
//! with their true runtimes: a task starts when its core is free, and no
//! earlier than the map planned (so that a map run on the runtimes it was
//! drawn on runs exactly as drawn, memory gaps included). A spot VM's
//! hibernation stops all its cores; what happens then is the strategy's
//! ([`Response`]):
//!
//! - [`Response::Wait`], the paper's proposal: wait, and if the VM has not
//!   resumed by `start_bkp` (Eq. 3, of the recovery group of the task it
//!   was running), migrate then;
//! - [`Response::Immediate`]: migrate as soon as it hibernates.
//!
//! A migration ends the spot VM and runs its unfinished tasks (a running
//! one from its start) on the recovery group's on-demand VMs, booted at
//! the migration, each task on the VM the backup map chose (a task the map
//! did not foresee in the group, because the truth moved the VM's tasks,
//! on the backup VM that can start it first), each at the earliest moment
//! a core and the memory are free. Spot VMs are billed for the time they
//! run (not while hibernated, as AWS bills since December 2017), every VM
//! in whole slots; the makespan is the end of the last task, and a job
//! whose makespan passes `D` has missed its deadline.
//!
//! [`dispatch`] carries the maps out the way a bag-of-tasks runtime that
//! pulls work would instead: by dispatch on the map's VMs, or elastically,
//! the fleet grown and drained as the bag's runtimes are learnt.
//!
//! Hibernations come from the paper's §IV-A scenarios ([`one_hibernation`]:
//! one spot VM chosen at random, from a given time for a given length) or
//! from measured spot availability ([`Availability`]: a spot VM is
//! hibernated while its market has no capacity).

mod dispatch;

pub use dispatch::{run_dispatched, run_elastic};

use std::collections::BTreeMap;

use jobcast_ingest::event::{Event, MachineKind};
use jobcast_predictor::deadlines::{Catalogue, Clock, Maps, Market, Task, Vm};
use jobcast_predictor::preemption::hints::hibernation_hint;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

/// A spot VM's hibernation, `[start, end)` in periods from the job's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hibernation {
    pub start: u64,
    pub end: u64,
}

/// What a strategy does when a spot VM hibernates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Response {
    /// Wait until `start_bkp`, then migrate (the proposal).
    Wait,
    /// Migrate at once (Immediate Migration).
    Immediate,
}

/// One run of one job.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Outcome {
    pub cost_usd: f64,
    /// Periods from the job's start to its last task's end.
    pub makespan: u64,
    pub missed: bool,
    /// Hibernations that hit a VM with work left.
    pub hibernations: u32,
    pub migrations: u32,
    /// VMs bought while the job ran ([`run_elastic`]).
    pub vms_added: u32,
    /// VMs that stopped taking tasks before the bag ran out.
    pub vms_drained: u32,
    /// Tasks that went on where a hibernation had stopped them, ending
    /// before their run started again elsewhere ([`run_elastic`]).
    pub resumed: u32,
}

/// Run `maps` on the `truth` (the bag's tasks with their true runtimes),
/// the primary map's VM `j` hibernating as `hibernations[j]` says (sorted,
/// disjoint; a VM past the end of the list never hibernates; on-demand VMs
/// never do). The job starts at `start_us` of event time: a spot slot is
/// billed at the price in effect when it begins (the catalogue's price
/// series, [`jobcast_predictor::deadlines::VmType::spot_at`]).
pub fn run(
    maps: &Maps,
    truth: &[Task],
    catalogue: &Catalogue,
    clock: &Clock,
    hibernations: &[Vec<Hibernation>],
    response: Response,
    start_us: u64,
) -> Outcome {
    let deadline = maps.primary.deadline;
    let mut outcome = Outcome::default();
    for (j, vm) in maps.primary.vms.iter().enumerate() {
        let vm_type = &catalogue.types[vm.kind];
        // Each task's run on the VM's own clock (which stops while it
        // hibernates), in the map's order per core.
        let mut order: Vec<_> = vm.placements.iter().collect();
        order.sort_by_key(|p| (p.core, p.start));
        let mut free: BTreeMap<u16, u64> = BTreeMap::new();
        let runs: Vec<(u32, u64, u64)> = order
            .iter()
            .map(|p| {
                let start = free.get(&p.core).copied().unwrap_or(0).max(p.start);
                let end = start + true_task(truth, p.task).periods_on(vm_type, clock);
                free.insert(p.core, end);
                (p.task, start, end)
            })
            .collect();
        let run_end = runs.iter().map(|r| r.2).max().unwrap_or(0);
        let none = Vec::new();
        let hibernating = match vm.market {
            Market::Spot => hibernations.get(j).unwrap_or(&none),
            Market::OnDemand => &none,
        };
        // The first `slots` slots of the VM's running time; a slot begins
        // later on the wall clock by the hibernations before it.
        let bill = |slots: u64| match vm.market {
            Market::OnDemand => clock.cost(slots, vm_type.on_demand_usd_h),
            Market::Spot => (0..slots)
                .map(|k| {
                    let mut wall = k * clock.slot_periods;
                    for h in hibernating {
                        if h.start > wall {
                            break;
                        }
                        wall += h.end - h.start;
                    }
                    let at = start_us + wall * clock.period_s * 1_000_000;
                    clock.cost(1, vm_type.spot_at(at).unwrap_or(vm_type.on_demand_usd_h))
                })
                .sum(),
        };
        // Periods the VM spent hibernated so far: its clock's lag.
        let mut paused = 0;
        let mut migrated = None;
        for h in hibernating {
            let at = h.start.saturating_sub(paused);
            if at >= run_end {
                break;
            }
            outcome.hibernations += 1;
            // The group of the running task with the earliest start_bkp,
            // else of the next task to start.
            let running = runs.iter().filter(|r| r.1 <= at && at < r.2);
            let next = runs.iter().filter(|r| r.1 > at).min_by_key(|r| r.1);
            let group = running
                .chain(next.filter(|_| !runs.iter().any(|r| r.1 <= at && at < r.2)))
                .filter_map(|r| maps.backup.group(j, r.0))
                .min_by_key(|g| g.start_backup)
                .expect("every task on a spot VM has a recovery group");
            let migrate_at = match response {
                Response::Immediate => Some(h.start),
                Response::Wait => {
                    let hint = hibernation_hint(
                        deadline as f64,
                        group.runtime as f64,
                        1.0,
                        h.start as f64,
                        Some(h.start as f64),
                    );
                    let tolerable = hint.tolerable_hibernation.unwrap_or(0.0).max(0.0) as u64;
                    (h.end - h.start > tolerable).then_some(h.start + tolerable)
                }
            };
            match migrate_at {
                Some(when) => {
                    migrated = Some((when, at, group));
                    break;
                }
                None => paused += h.end - h.start,
            }
        }
        match migrated {
            None => {
                outcome.cost_usd += bill(clock.slots(run_end));
                outcome.makespan = outcome.makespan.max(run_end + paused);
            }
            Some((when, ran, group)) => {
                outcome.migrations += 1;
                outcome.cost_usd += bill(clock.slots(ran));
                // Unfinished tasks, in the group's order (the map's
                // longest first), then any the map did not foresee.
                let mut left: Vec<u32> = runs.iter().filter(|r| r.2 > ran).map(|r| r.0).collect();
                left.sort_by_key(|id| {
                    group
                        .tasks
                        .iter()
                        .position(|t| t == id)
                        .unwrap_or(usize::MAX)
                });
                let boot = clock.periods(catalogue.boot_s as f64);
                let mut backups: Vec<Vm> = group
                    .backups
                    .iter()
                    .map(|b| Vm::new(b.kind, Market::OnDemand, boot))
                    .collect();
                for id in left {
                    let task = true_task(truth, id);
                    let planned = group
                        .backups
                        .iter()
                        .position(|b| b.placement_of(id).is_some());
                    let fit = |i: usize, backups: &[Vm]| {
                        let t = &catalogue.types[backups[i].kind];
                        let periods = task.periods_on(t, clock);
                        backups[i]
                            .earliest_start(t, task.memory_gb, periods)
                            .map(|(core, start)| (i, core, start, periods))
                    };
                    let placed = planned.and_then(|i| fit(i, &backups)).or_else(|| {
                        (0..backups.len())
                            .filter_map(|i| fit(i, &backups))
                            .min_by_key(|&(i, _, start, _)| (start, i))
                    });
                    let (i, core, start, periods) = placed.unwrap_or_else(|| {
                        // No backup VM has the memory: the type the
                        // primary map ran it on, on demand.
                        backups.push(Vm::new(vm.kind, Market::OnDemand, boot));
                        let periods = task.periods_on(vm_type, clock);
                        (backups.len() - 1, 0, boot, periods)
                    });
                    backups[i].place(task, core, start, periods, clock);
                }
                for b in &backups {
                    outcome.cost_usd += b.cost(catalogue, clock);
                    outcome.makespan = outcome.makespan.max(when + b.last_end());
                }
            }
        }
    }
    outcome.missed = outcome.makespan > deadline;
    outcome
}

/// Task `id` of the bag, with its true runtime.
fn true_task(truth: &[Task], id: u32) -> &Task {
    truth
        .iter()
        .find(|t| t.id == id)
        .expect("the maps place only the bag's tasks")
}

/// §IV-A: one spot VM of the primary map, chosen with `seed` among those
/// the map still has working at `at`, hibernates from `at` for `length`
/// periods; `None` when the map has no spot VM.
pub fn one_hibernation(
    maps: &Maps,
    seed: u64,
    at: u64,
    length: u64,
) -> Option<Vec<Vec<Hibernation>>> {
    let spot = |busy: bool| -> Vec<usize> {
        (0..maps.primary.vms.len())
            .filter(|&j| maps.primary.vms[j].market == Market::Spot)
            .filter(|&j| !busy || maps.primary.vms[j].last_end() > at)
            .collect()
    };
    let busy = spot(true);
    let spot = if busy.is_empty() { spot(false) } else { busy };
    if spot.is_empty() {
        return None;
    }
    let chosen = spot[ChaCha8Rng::seed_from_u64(seed).random_range(0..spot.len())];
    let mut all = vec![Vec::new(); maps.primary.vms.len()];
    all[chosen].push(Hibernation {
        start: at,
        end: at.saturating_add(length),
    });
    Some(all)
}

/// Measured spot capacity: per market (a zone and an instance type), the
/// span observed and the outages within it, µs.
#[derive(Debug, Clone, PartialEq)]
pub struct Availability {
    pub markets: Vec<MarketSeries>,
}

/// One market's availability series.
#[derive(Debug, Clone, PartialEq)]
pub struct MarketSeries {
    pub zone: String,
    pub vm_type: String,
    /// From its first capacity to its last, µs.
    pub span_us: (u64, u64),
    /// `[start, end)` without capacity, µs, sorted.
    pub outages_us: Vec<(u64, u64)>,
}

impl Availability {
    /// From a spot trace read for hibernation (`jobcast_ingest`'s
    /// `spot-hibernation` adapter: each VM is added at its market's first
    /// capacity, hibernates and resumes with it, and is removed at the
    /// trace's end), each VM's market: from its first capacity to its
    /// last, and the hibernations between.
    pub fn from_events(events: impl IntoIterator<Item = Event>) -> Availability {
        struct Open {
            added: u64,
            hibernated: Option<u64>,
            outages: Vec<(u64, u64)>,
        }
        let mut open: BTreeMap<u64, Open> = BTreeMap::new();
        let mut markets = Vec::new();
        for event in events {
            let Event::Machine(m) = event else { continue };
            let Some(vm) = &m.vm else { continue };
            match m.kind {
                MachineKind::Add => {
                    open.insert(
                        m.machine_id,
                        Open {
                            added: m.time_us,
                            hibernated: None,
                            outages: Vec::new(),
                        },
                    );
                }
                MachineKind::Hibernate => {
                    if let Some(o) = open.get_mut(&m.machine_id) {
                        o.hibernated.get_or_insert(m.time_us);
                    }
                }
                MachineKind::Resume => {
                    if let Some(o) = open.get_mut(&m.machine_id)
                        && let Some(since) = o.hibernated.take()
                    {
                        o.outages.push((since, m.time_us));
                    }
                }
                MachineKind::Remove => {
                    if let Some(o) = open.remove(&m.machine_id) {
                        // A VM still hibernated when the trace ends had its
                        // last capacity when it hibernated.
                        let last = o.hibernated.unwrap_or(m.time_us);
                        markets.push(MarketSeries {
                            zone: vm.zone.clone(),
                            vm_type: vm.vm_type.clone(),
                            span_us: (o.added, last),
                            outages_us: o.outages,
                        });
                    }
                }
                MachineKind::Update => {}
            }
        }
        markets.sort_by(|a, b| {
            (&a.zone, &a.vm_type, a.span_us).cmp(&(&b.zone, &b.vm_type, b.span_us))
        });
        Availability { markets }
    }

    /// Hibernations for each of `maps`' VMs over a job of `horizon`
    /// periods: each spot VM in a market drawn with `seed`, the job
    /// starting at a moment drawn in the markets' common span ([`Self::draw`]).
    /// `None` if no market's span holds the horizon.
    pub fn hibernations(
        &self,
        maps: &Maps,
        clock: &Clock,
        horizon: u64,
        seed: u64,
    ) -> Option<Vec<Vec<Hibernation>>> {
        let mut draw = self.draw(clock, horizon, seed)?;
        Some(
            maps.primary
                .vms
                .iter()
                .map(|vm| draw.vm(vm.market))
                .collect(),
        )
    }

    /// The markets a job of `horizon` periods meets, drawn with `seed`:
    /// it starts at a moment drawn in the markets' common span, and each
    /// spot VM then takes a market of its own ([`MarketDraw::vm`]). `None`
    /// if no market's span holds the horizon.
    pub fn draw(&self, clock: &Clock, horizon: u64, seed: u64) -> Option<MarketDraw<'_>> {
        let period_us = clock.period_s * 1_000_000;
        let horizon_us = horizon * period_us;
        let usable: Vec<&MarketSeries> = self
            .markets
            .iter()
            .filter(|m| m.span_us.1 - m.span_us.0 > horizon_us)
            .collect();
        if usable.is_empty() {
            return None;
        }
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let from = usable.iter().map(|m| m.span_us.0).max()?;
        let to = usable.iter().map(|m| m.span_us.1).min()?;
        let start_us = if to > from + horizon_us {
            rng.random_range(from..to - horizon_us)
        } else {
            // No common span holds the job: each market from its own start.
            from
        };
        Some(MarketDraw {
            usable,
            rng,
            start_us,
            horizon_us,
            period_us,
        })
    }
}

/// The spot markets one job meets: each VM it buys draws one.
pub struct MarketDraw<'a> {
    usable: Vec<&'a MarketSeries>,
    rng: ChaCha8Rng,
    /// The job's start, µs of the markets' time.
    start_us: u64,
    horizon_us: u64,
    period_us: u64,
}

impl MarketDraw<'_> {
    /// The hibernations, in periods from the job's start, of a VM bought
    /// on `market`: a spot VM hibernates through each outage of a market
    /// drawn for it (from the job's start if its market has no capacity
    /// then); an on-demand VM never does (a market is drawn all the same,
    /// so that each VM's draw does not depend on the others' markets).
    pub fn vm(&mut self, market: Market) -> Vec<Hibernation> {
        let series = self.usable[self.rng.random_range(0..self.usable.len())];
        if market != Market::Spot {
            return Vec::new();
        }
        self.outages(series)
    }

    /// The hibernations of a spot VM bought `at` periods into the job, as
    /// a provider's failover across zones buys it: in the first market,
    /// from one drawn on in the markets' order, with capacity at `at`;
    /// `None` if none has.
    pub fn bought(&mut self, at: u64) -> Option<Vec<Hibernation>> {
        let first = self.rng.random_range(0..self.usable.len());
        let n = self.usable.len();
        (0..n)
            .map(|k| self.outages(self.usable[(first + k) % n]))
            .find(|outages| outages.iter().all(|h| at < h.start || at >= h.end))
    }

    /// `series`' outages within the job, in periods from its start.
    fn outages(&self, series: &MarketSeries) -> Vec<Hibernation> {
        let origin = self
            .start_us
            .clamp(series.span_us.0, series.span_us.1 - self.horizon_us);
        let rounded = series
            .outages_us
            .iter()
            .filter(|(s, e)| *e > origin && *s < origin + self.horizon_us)
            .map(|&(s, e)| Hibernation {
                start: s.saturating_sub(origin) / self.period_us,
                end: (e - origin).div_ceil(self.period_us),
            });
        // Outages less than a period apart meet once rounded: one.
        let mut merged: Vec<Hibernation> = Vec::new();
        for h in rounded {
            match merged.last_mut() {
                Some(last) if h.start <= last.end => last.end = last.end.max(h.end),
                _ => merged.push(h),
            }
        }
        merged
    }
}

/// One line of the trade-off plot: its name, and per quantile its label,
/// its cost over the maps on the true runtimes (%) and the share of runs
/// that missed their deadline (%).
pub type TradeOffLine = (String, Vec<(String, f64, f64)>);

/// Deadline misses against cost across the quantiles the maps were drawn
/// at, one line per hibernation scenario, each point labelled with its
/// quantile: `deadline_tradeoff.svg` in `dir`.
pub fn write_tradeoff_plot(
    dir: &std::path::Path,
    lines: &[TradeOffLine],
) -> Result<std::path::PathBuf, String> {
    use plotters::prelude::*;

    use crate::report::{PALETTE, axes, canvas, finish, frame, legend_line};

    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join("deadline_tradeoff.svg");
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let points = || lines.iter().flat_map(|(_, p)| p.iter());
    let x_hi = points().map(|p| p.1).fold(10.0, f64::max) * 1.1;
    let x_lo = points().map(|p| p.1).fold(0.0, f64::min) * 1.1;
    let y_hi = points().map(|p| p.2).fold(10.0, f64::max) * 1.1;
    // The drawing borrows the path: it ends before the path is returned.
    {
        let root = canvas(&path, (900, 560)).map_err(|e| err(&e))?;
        let mut chart = frame(
            &root,
            "Deadlines missed against cost, by quantile planned at",
            56,
        )
        .build_cartesian_2d(x_lo..x_hi, 0f64..y_hi)
        .map_err(|e| err(&e))?;
        axes(
            &mut chart.configure_mesh(),
            "cost over the maps on the true runtimes (%)",
            "runs that missed their deadline (%)",
        )
        .draw()
        .map_err(|e| err(&e))?;
        for (i, (name, line)) in lines.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()].to_rgba();
            chart
                .draw_series(LineSeries::new(
                    line.iter().map(|&(_, x, y)| (x, y)),
                    color.stroke_width(2),
                ))
                .map_err(|e| err(&e))?
                .label(name.as_str())
                .legend(legend_line(color.stroke_width(2)));
            chart
                .draw_series(
                    line.iter()
                        .map(|&(_, x, y)| Circle::new((x, y), 4, color.filled())),
                )
                .map_err(|e| err(&e))?;
            chart
                .draw_series(line.iter().map(|(label, x, y)| {
                    Text::new(label.clone(), (*x, *y), ("sans-serif", 14).into_font())
                }))
                .map_err(|e| err(&e))?;
        }
        finish(&mut chart, &root, SeriesLabelPosition::UpperRight).map_err(|e| err(&e))?;
    }
    Ok(path)
}

#[cfg(test)]
pub(super) mod tests {
    use jobcast_ingest::event::{MachineEvent, VmInfo};
    use jobcast_predictor::deadlines::SpotPrice;

    use super::*;

    pub(crate) fn bag(n: u32, hours: f64) -> Vec<Task> {
        (0..n)
            .map(|id| Task {
                id,
                base_s: hours * 3600.0,
                memory_gb: 1.0,
            })
            .collect()
    }

    /// Hibernations of `maps`' VMs: the first spot VM's, from `start` to
    /// `end`.
    pub(crate) fn first_spot_hibernates(
        maps: &Maps,
        start: u64,
        end: u64,
    ) -> Vec<Vec<Hibernation>> {
        let spot = maps
            .primary
            .vms
            .iter()
            .position(|v| v.market == Market::Spot)
            .expect("the maps hold a spot VM");
        let mut h = vec![Vec::new(); maps.primary.vms.len()];
        h[spot].push(Hibernation { start, end });
        h
    }

    pub(crate) fn setup() -> (Vec<Task>, Catalogue, Clock, Maps) {
        let cat = Catalogue::teylo_2018();
        let clock = Clock::MINUTE_PERIODS_HOUR_SLOTS;
        let tasks = bag(20, 10.0);
        let maps = Maps::draw(&tasks, &cat, &clock, 8 * 60, 0.5, true);
        assert!(maps.valid());
        (tasks, cat, clock, maps)
    }

    /// A spot slot is billed at the price in effect when it begins on
    /// the wall clock: from the job's start, later by the hibernations
    /// before it.
    #[test]
    fn spot_slots_are_billed_at_the_price_of_their_start() {
        let (tasks, cat, clock, maps) = setup();
        let hour = 3_600_000_000;
        let priced = |changes: &dyn Fn(f64) -> Vec<SpotPrice>| {
            let mut c = cat.clone();
            let series = c
                .types
                .iter()
                .map(|t| (t.name.clone(), changes(t.spot_usd_h.unwrap())))
                .collect();
            c.set_spot_prices(&series);
            c
        };
        let at = |from_us, usd_h| SpotPrice { from_us, usd_h };
        let fixed = run(&maps, &tasks, &cat, &clock, &[], Response::Wait, 0);
        let doubled = {
            let mut c = cat.clone();
            for t in &mut c.types {
                t.spot_usd_h = t.spot_usd_h.map(|p| 2.0 * p);
            }
            run(&maps, &tasks, &c, &clock, &[], Response::Wait, 0)
        };
        assert!(doubled.cost_usd > fixed.cost_usd);
        // Doubling 100 h on: the job of 8 h pays the first price, unless
        // it starts past the change.
        let later = priced(&|p| vec![at(0, p), at(100 * hour, 2.0 * p)]);
        let cost = |start_us, h: &[Vec<Hibernation>]| {
            run(&maps, &tasks, &later, &clock, h, Response::Wait, start_us).cost_usd
        };
        assert!((cost(0, &[]) - fixed.cost_usd).abs() < 1e-9);
        assert!((cost(100 * hour, &[]) - doubled.cost_usd).abs() < 1e-9);
        // Starting an hour before the change, a spot VM hibernated from the
        // start for an hour begins its first slot at the new price.
        let h = first_spot_hibernates(&maps, 0, 60);
        let spot = h.iter().position(|x| !x.is_empty()).unwrap();
        let hibernated = run(&maps, &tasks, &later, &clock, &h, Response::Wait, 99 * hour);
        assert_eq!(hibernated.migrations, 0, "an hour is waited out");
        let hibernated = hibernated.cost_usd;
        let first_slot = clock.cost(
            1,
            cat.types[maps.primary.vms[spot].kind].spot_usd_h.unwrap(),
        );
        let expected = cost(99 * hour, &[]) + first_slot;
        assert!(
            (hibernated - expected).abs() < 1e-9,
            "{hibernated} {expected}"
        );
    }

    #[test]
    fn undisturbed_runs_as_drawn() {
        let (tasks, cat, clock, maps) = setup();
        let out = run(&maps, &tasks, &cat, &clock, &[], Response::Wait, 0);
        assert_eq!(out.makespan, maps.primary.makespan());
        assert!((out.cost_usd - maps.primary.cost(&cat, &clock)).abs() < 1e-9);
        assert!(!out.missed);
        assert_eq!((out.hibernations, out.migrations), (0, 0));
    }

    #[test]
    fn a_short_hibernation_is_waited_out_and_a_long_one_migrates_at_start_bkp() {
        let (tasks, cat, clock, maps) = setup();
        let g = &maps.backup.groups[0];
        let short = one_hibernation(&maps, 1, 30, 60).unwrap();
        let out = run(&maps, &tasks, &cat, &clock, &short, Response::Wait, 0);
        assert_eq!((out.hibernations, out.migrations), (1, 0));
        assert_eq!(out.makespan, maps.primary.makespan() + 60);
        // Hibernation is not billed.
        assert!((out.cost_usd - maps.primary.cost(&cat, &clock)).abs() < 1e-9);
        // Too long: migrate at start_bkp, and still meet D.
        let long = one_hibernation(&maps, 1, 30, 60_000).unwrap();
        let out = run(&maps, &tasks, &cat, &clock, &long, Response::Wait, 0);
        assert_eq!(out.migrations, 1);
        assert!(!out.missed, "{out:?}");
        assert_eq!(out.makespan, g.start_backup as u64 + g.runtime);
        // Immediate migration: earlier, and on the same backup VMs.
        let now = run(&maps, &tasks, &cat, &clock, &long, Response::Immediate, 0);
        assert_eq!(now.migrations, 1);
        assert_eq!(now.makespan, 30 + g.runtime);
        assert!(now.cost_usd < out.cost_usd + 1e-9);
        // Both pay for the spot VM's first slot and the backups.
        assert!(now.cost_usd > maps.primary.cost(&cat, &clock));
    }

    #[test]
    fn longer_true_runtimes_miss_the_deadline() {
        let (_, cat, clock, maps) = setup();
        let truth = bag(20, 80.0);
        let out = run(&maps, &truth, &cat, &clock, &[], Response::Wait, 0);
        assert!(out.missed);
        assert!(out.makespan > maps.primary.deadline);
    }

    #[test]
    fn outages_of_a_measured_market_become_hibernations() {
        let (_, _, clock, maps) = setup();
        let vm = |t: u64| VmInfo {
            name: None,
            vm_type: "v100_1".into(),
            zone: "z".into(),
            preemptible: true,
            launch_time_us: t,
            end_reason: None,
        };
        let hour = 3_600_000_000;
        let ev = |t, id, kind| Event::Machine(MachineEvent::of_vm(t, id, kind, vm(t)));
        // Capacity for 100 h, but none from hour 10 to hour 12, nor after
        // hour 100 until the trace ends.
        let events = vec![
            ev(0, 1, MachineKind::Add),
            ev(10 * hour, 1, MachineKind::Hibernate),
            ev(12 * hour, 1, MachineKind::Resume),
            ev(100 * hour, 1, MachineKind::Hibernate),
            ev(101 * hour, 1, MachineKind::Remove),
        ];
        let a = Availability::from_events(events);
        assert_eq!(a.markets.len(), 1);
        assert_eq!(a.markets[0].outages_us, [(10 * hour, 12 * hour)]);
        assert_eq!(a.markets[0].span_us, (0, 100 * hour));
        let h = a.hibernations(&maps, &clock, 8 * 60, 3).unwrap();
        assert_eq!(h.len(), maps.primary.vms.len());
        // The job's 8 h land somewhere in the 100: the outage, if it falls
        // within, lasts at most 2 h.
        for vm in &h {
            for x in vm {
                assert!(x.end - x.start <= 121 && x.start < 8 * 60, "{x:?}");
            }
        }
        // Too long a job for the series.
        assert!(a.hibernations(&maps, &clock, 200 * 60, 3).is_none());
    }

    /// A VM bought while the job runs is bought in a market with capacity
    /// then, whichever the draw starts from; when no market has any, it
    /// cannot be had on the spot market.
    #[test]
    fn a_vm_bought_late_fails_over_to_a_market_with_capacity() {
        let clock = Clock::MINUTE_PERIODS_HOUR_SLOTS;
        let hour = 3_600_000_000;
        let market = |zone: &str, outages_us: Vec<(u64, u64)>| MarketSeries {
            zone: zone.into(),
            vm_type: "v100_1".into(),
            // A µs longer than the job, which then starts at 0.
            span_us: (0, 100 * hour + 1),
            outages_us,
        };
        // Zone a has no capacity from hour 1 to hour 3 of the job, zone b
        // from hour 2 to hour 4.
        let a = Availability {
            markets: vec![
                market("a", vec![(hour, 3 * hour)]),
                market("b", vec![(2 * hour, 4 * hour)]),
            ],
        };
        for seed in 0..8 {
            let mut draw = a.draw(&clock, 100 * 60, seed).unwrap();
            // At 1.5 h only b has capacity: its outage comes later.
            let b = draw.bought(90).unwrap();
            assert_eq!(
                b,
                [Hibernation {
                    start: 120,
                    end: 240
                }],
                "seed {seed}"
            );
            // At 3.5 h only a has.
            let a_ = draw.bought(210).unwrap();
            assert_eq!(
                a_,
                [Hibernation {
                    start: 60,
                    end: 180
                }],
                "seed {seed}"
            );
            // At 2.5 h neither has.
            assert_eq!(draw.bought(150), None, "seed {seed}");
        }
    }
}
