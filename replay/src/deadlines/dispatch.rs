//! The maps carried out as a bag-of-tasks runtime that pulls work does:
//! each free core takes the next task of one pool, so which task runs
//! where follows the truth as it unfolds, and the map decides only how
//! many VMs of which types.
//!
//! - [`run_dispatched`]: the primary map's VMs, all of them, to the end.
//! - [`run_elastic`]: the elastic fleet of
//!   [`jobcast_predictor::deadlines::fleet`] (the one the engine runs
//!   live), carried out against the truth: the primary map's VMs to begin
//!   with, grown and drained on what the bag's ended tasks teach.
//!
//! A VM is billed in whole slots for the time it runs, from its purchase
//! to its last task's end, less the time it hibernated.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use jobcast_predictor::deadlines::fleet::{pool, task_slots};
use jobcast_predictor::deadlines::{
    Catalogue, Change, Clock, Fleet, Maps, Market, Task, Terms, VmType,
};

use super::{Hibernation, MarketDraw, Outcome, true_task};

/// The price of a VM of type `t` bought at `from` (periods from the job's
/// start at `start_us`) and run for `periods`: whole slots, at least one,
/// a spot slot at the price in effect when it would begin unpaused.
fn bill(t: &VmType, market: Market, from: u64, periods: u64, clock: &Clock, start_us: u64) -> f64 {
    let slots = clock.slots(periods).max(1);
    match market {
        Market::OnDemand => clock.cost(slots, t.on_demand_usd_h),
        Market::Spot => (0..slots)
            .map(|k| {
                let at = start_us + (from + k * clock.slot_periods) * clock.period_s * 1_000_000;
                clock.cost(1, t.spot_at(at).unwrap_or(t.on_demand_usd_h))
            })
            .sum(),
    }
}
/// The primary map's VMs carrying out the bag by dispatch instead of the
/// map's own order: every VM of the map boots at the job's start, and each
/// free core takes the next task of one pool (in the map's order of
/// placement), as many at once on a VM as its cores and memory hold. Each
/// VM is billed to its last task's end (at least one slot).
pub fn run_dispatched(
    maps: &Maps,
    truth: &[Task],
    catalogue: &Catalogue,
    clock: &Clock,
    start_us: u64,
) -> Outcome {
    let vms = &maps.primary.vms;
    // Free slots (time, VM, slot), earliest first.
    let mut free: BinaryHeap<Reverse<(u64, usize, usize)>> = BinaryHeap::new();
    for (j, vm) in vms.iter().enumerate() {
        for slot in 0..task_slots(&catalogue.types[vm.kind], truth) {
            free.push(Reverse((0, j, slot)));
        }
    }
    let mut last_end = vec![0u64; vms.len()];
    for id in pool(maps) {
        let Reverse((at, j, slot)) = free.pop().expect("every VM has a slot");
        let end = at + true_task(truth, id).periods_on(&catalogue.types[vms[j].kind], clock);
        last_end[j] = last_end[j].max(end);
        free.push(Reverse((end, j, slot)));
    }
    let makespan = last_end.iter().copied().max().unwrap_or(0);
    Outcome {
        cost_usd: vms
            .iter()
            .zip(&last_end)
            .map(|(vm, &end)| {
                bill(
                    &catalogue.types[vm.kind],
                    vm.market,
                    0,
                    end,
                    clock,
                    start_us,
                )
            })
            .sum(),
        makespan,
        missed: makespan > maps.primary.deadline,
        ..Outcome::default()
    }
}

/// What happens next in an elastic run, in this order at one time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    /// A spot VM of the map resumes.
    Resume { vm: usize },
    /// A task slot is free: its task ended (of this generation), or its
    /// VM has booted.
    Free {
        vm: usize,
        slot: usize,
        generation: u64,
    },
    /// A spot VM of the map hibernates until `until`.
    Hibernate { vm: usize, until: u64 },
}

/// An elastic run: the fleet, the truth its tasks run to, and what comes
/// next.
struct ElasticRun<'a, 'm> {
    fleet: Fleet,
    terms: Terms<'a>,
    truth: &'a [Task],
    /// The markets the VMs it buys meet, if measured.
    markets: Option<&'m mut MarketDraw<'a>>,
    steps: BinaryHeap<Reverse<(u64, Step)>>,
    outcome: Outcome,
}

impl ElasticRun<'_, '_> {
    fn vm_type(&self, vm: usize) -> &VmType {
        &self.terms.catalogue.types[self.fleet.nodes()[vm].kind]
    }

    /// Slot `slot` of VM `vm` is free at `at` for the run it holds now.
    fn free_at(&mut self, at: u64, vm: usize, slot: usize) {
        let generation = self.fleet.nodes()[vm].generation(slot);
        let step = Step::Free {
            vm,
            slot,
            generation,
        };
        self.steps.push(Reverse((at, step)));
    }

    /// Schedule what the fleet's last step freed, and count what it bought
    /// and drained.
    fn absorb(&mut self) {
        for change in self.fleet.take_changes() {
            match change {
                Change::Free {
                    at,
                    vm,
                    slot,
                    generation,
                } => {
                    let step = Step::Free {
                        vm,
                        slot,
                        generation,
                    };
                    self.steps.push(Reverse((at, step)));
                }
                Change::Bought { vm } => {
                    self.outcome.vms_added += 1;
                    self.meet_market(vm);
                }
                Change::Drained { .. } => self.outcome.vms_drained += 1,
            }
        }
    }

    /// VM `vm`, just bought, meets the outages of the market it is bought
    /// in ([`MarketDraw::bought`]): each hibernates it. A spot VM that no
    /// market can supply when it is bought is bought on demand, as an
    /// operator's provisioning would fall back.
    fn meet_market(&mut self, vm: usize) {
        let node = &self.fleet.nodes()[vm];
        let Some(draw) = self.markets.as_deref_mut() else {
            return;
        };
        if node.market != Market::Spot {
            return;
        }
        let Some(outages) = draw.bought(node.bought) else {
            self.fleet.bought_on_demand(vm);
            return;
        };
        for h in outages.into_iter().filter(|h| h.start > node.bought) {
            let step = Step::Hibernate { vm, until: h.end };
            self.steps.push(Reverse((h.start, step)));
        }
    }

    /// Slot `slot` of VM `vm` is free at `now`: its task ended, if it held
    /// one, and it takes the next, if the fleet keeps the VM working.
    fn free(&mut self, now: u64, vm: usize, slot: usize) {
        if let Some(run) = self.fleet.nodes()[vm].run(slot) {
            let base_s = true_task(self.truth, run.task).base_s;
            let ended = self.fleet.end(now, vm, slot, Some(base_s), self.terms);
            self.outcome.resumed += u32::from(ended.is_some_and(|r| r.resumed));
            self.fleet.grow(now, self.terms);
        }
        if let Some(task) = self.fleet.takes_next(now, vm, self.terms) {
            self.fleet.start(now, vm, Some(slot), task, self.terms);
            let periods =
                true_task(self.truth, task).periods_on(self.vm_type(vm), self.terms.clock);
            self.free_at(now + periods, vm, slot);
        }
        self.absorb();
    }

    fn hibernate(&mut self, now: u64, vm: usize, until: u64) {
        if let Some(suspended) = self.fleet.hibernate(now, vm, self.terms) {
            self.outcome.hibernations += u32::from(suspended > 0);
            self.steps.push(Reverse((until, Step::Resume { vm })));
        }
        self.absorb();
    }

    fn resume(&mut self, now: u64, vm: usize) {
        for (slot, run) in self.fleet.resume(now, vm, self.terms) {
            let periods =
                true_task(self.truth, run.task).periods_on(self.vm_type(vm), self.terms.clock);
            self.free_at(run.since + periods, vm, slot);
        }
        self.absorb();
    }
}

/// The bag carried out by an elastic fleet
/// ([`jobcast_predictor::deadlines::fleet`] says how), starting from the
/// primary map's VMs, VM `j` of the map hibernating as `hibernations[j]`
/// says, and each spot VM bought through the outages of a market drawn
/// from `markets` (none without); `planned_s` is the runtime the maps were
/// drawn at, trusted until a task ends.
pub fn run_elastic<'a>(
    maps: &Maps,
    truth: &'a [Task],
    terms: Terms<'a>,
    hibernations: &[Vec<Hibernation>],
    markets: Option<&mut MarketDraw<'a>>,
    planned_s: f64,
) -> Outcome {
    let Terms {
        catalogue,
        clock,
        start_us,
    } = terms;
    let mut run = ElasticRun {
        fleet: Fleet::new(maps, truth, terms, planned_s),
        terms,
        truth,
        markets,
        steps: BinaryHeap::new(),
        outcome: Outcome::default(),
    };
    run.absorb();
    for (j, vm) in maps.primary.vms.iter().enumerate() {
        if vm.market == Market::Spot {
            for h in hibernations.get(j).into_iter().flatten() {
                let step = Step::Hibernate {
                    vm: j,
                    until: h.end,
                };
                run.steps.push(Reverse((h.start, step)));
            }
        }
    }
    while let Some(Reverse((now, step))) = run.steps.pop() {
        match step {
            Step::Free {
                vm,
                slot,
                generation,
            } => {
                let node = &run.fleet.nodes()[vm];
                if node.hibernated || node.generation(slot) != generation {
                    continue;
                }
                run.free(now, vm, slot);
            }
            Step::Hibernate { vm, until } => run.hibernate(now, vm, until),
            Step::Resume { vm } => run.resume(now, vm),
        }
    }
    assert_eq!(
        run.fleet.queued(),
        0,
        "a drain leaves the rest to VMs that run"
    );
    let ElasticRun {
        fleet, mut outcome, ..
    } = run;
    let deadline = maps.primary.deadline;
    outcome.makespan = fleet.nodes().iter().map(|n| n.last_end).max().unwrap_or(0);
    outcome.missed = outcome.makespan > deadline;
    outcome.cost_usd = fleet
        .nodes()
        .iter()
        .filter(|n| n.booted)
        .map(|n| {
            bill(
                &catalogue.types[n.kind],
                n.market,
                n.bought,
                n.billed(),
                clock,
                start_us,
            )
        })
        .sum();
    outcome
}

#[cfg(test)]
mod tests {
    use jobcast_predictor::deadlines::{Catalogue, Clock, Maps, Task};

    use super::super::tests::{first_spot_hibernates, setup};
    use super::super::{Response, run};
    use super::*;

    /// Dispatch carries out maps on the truth as they were drawn when the
    /// truth is what they were drawn on, and on a bag of mixed lengths
    /// drawn at one mean it costs no more than the map's own order.
    #[test]
    fn dispatch_follows_the_truth_on_the_maps_vms() {
        let (tasks, cat, clock, maps) = setup();
        let drawn = run(&maps, &tasks, &cat, &clock, &[], Response::Wait, 0);
        let pulled = run_dispatched(&maps, &tasks, &cat, &clock, 0);
        assert_eq!(pulled.makespan, drawn.makespan);
        assert!((pulled.cost_usd - drawn.cost_usd).abs() < 1e-9);
        assert!(!pulled.missed);
        // Half the tasks 2 h, half 18 h, planned at their mean of 10 h.
        let mixed: Vec<Task> = tasks
            .iter()
            .map(|t| Task {
                base_s: if t.id % 2 == 0 { 2.0 } else { 18.0 } * 3600.0,
                ..*t
            })
            .collect();
        let statically = run(&maps, &mixed, &cat, &clock, &[], Response::Wait, 0);
        let dispatched = run_dispatched(&maps, &mixed, &cat, &clock, 0);
        assert!(
            dispatched.cost_usd <= statically.cost_usd,
            "{dispatched:?} {statically:?}"
        );
        assert!(
            dispatched.makespan <= statically.makespan,
            "{dispatched:?} {statically:?}"
        );
        assert_eq!((dispatched.hibernations, dispatched.migrations), (0, 0));
    }

    /// Through measured outages the VMs the fleet buys meet the markets
    /// too: with every market out from the first hour on, the VMs it buys
    /// when the map's spot VMs hibernate can be had on demand only, and
    /// cost more than the spot VMs that never hibernate bought without
    /// markets.
    #[test]
    fn the_vms_an_elastic_fleet_buys_meet_the_measured_markets() {
        use super::super::{Availability, MarketSeries};
        let truth = mixed(40, 6.0, 14.0);
        let (cat, clock, maps, planned) = drawn_at(&truth, 10.0, 60);
        let hour = 3_600_000_000;
        let out_from_hour_one = |zone: &str| MarketSeries {
            zone: zone.into(),
            vm_type: "p3".into(),
            // A µs longer than the job, which then starts at 0.
            span_us: (0, 60 * hour + 1),
            outages_us: vec![(hour, 60 * hour + 1)],
        };
        let none_left = Availability {
            markets: vec![out_from_hour_one("a"), out_from_hour_one("b")],
        };
        let through = |bought_meet| {
            let terms = at_zero(&cat, &clock);
            elastic_through(
                &none_left,
                60 * 60,
                &maps,
                &truth,
                terms,
                planned,
                bought_meet,
            )
        };
        let (with, without) = (through(true), through(false));
        assert!(with.vms_added > 0 && without.vms_added > 0, "{with:?}");
        assert!(!with.missed, "{with:?}");
        assert!(
            with.cost_usd > without.cost_usd,
            "on demand costs more: {with:?} {without:?}"
        );
    }

    /// Markets that go out for an hour in every `every` hours, over a job
    /// of `deadline_h` hours starting at 0, in two zones: the first from
    /// hour `first`, the second an hour later.
    fn recurring_outages(first: u64, every: u64, deadline_h: u64) -> super::super::Availability {
        use super::super::{Availability, MarketSeries};
        let hour = 3_600_000_000;
        let end = deadline_h * hour + 1;
        let series = |zone: &str, first: u64| MarketSeries {
            zone: zone.into(),
            vm_type: "p3".into(),
            span_us: (0, end),
            outages_us: (first..deadline_h)
                .step_by(every as usize)
                .map(|h| (h * hour, (h + 1) * hour))
                .collect(),
        };
        Availability {
            markets: vec![series("a", first), series("b", first + 1)],
        }
    }

    /// Through markets that go out again and again (each an hour in two,
    /// the second zone an hour after the first), a task that a second
    /// outage stops runs again on demand, and the bag ends in time. Rerun
    /// on the spot market each time, its tasks start over at every outage,
    /// on a VM bought in the zone that goes out next: 7 hibernations, and
    /// the bag ends at 9.3 h of its 8.
    #[test]
    fn tasks_that_outages_stop_again_end_on_demand_in_time() {
        let truth = mixed(40, 6.0, 14.0);
        let deadline_h = 8;
        let (cat, clock, maps, planned) = drawn_at(&truth, 10.0, deadline_h);
        let markets = recurring_outages(1, 2, deadline_h);
        let terms = at_zero(&cat, &clock);
        let out = elastic_through(
            &markets,
            deadline_h * 60,
            &maps,
            &truth,
            terms,
            planned,
            true,
        );
        assert!(out.hibernations >= 2, "the outages stop its tasks: {out:?}");
        assert!(!out.missed, "{out:?}");
    }

    /// The elastic fleet of `maps` through `markets`, the job starting at
    /// 0 and lasting `horizon` periods: the map's spot VMs hibernate as
    /// the markets drawn for them go out, and so do the VMs it buys if
    /// `bought_meet`.
    fn elastic_through<'a>(
        markets: &'a super::super::Availability,
        horizon: u64,
        maps: &Maps,
        truth: &'a [Task],
        terms: Terms<'a>,
        planned: f64,
        bought_meet: bool,
    ) -> Outcome {
        let mut draw = markets.draw(terms.clock, horizon, 7).unwrap();
        let h: Vec<Vec<Hibernation>> = maps
            .primary
            .vms
            .iter()
            .map(|vm| draw.vm(vm.market))
            .collect();
        let draw = bought_meet.then_some(&mut draw);
        run_elastic(maps, truth, terms, &h, draw, planned)
    }

    /// The terms of a job starting at 0.
    fn at_zero<'a>(catalogue: &'a Catalogue, clock: &'a Clock) -> Terms<'a> {
        Terms {
            catalogue,
            clock,
            start_us: 0,
        }
    }

    /// A bag of `n` tasks whose runtimes alternate `short` and `long`
    /// hours.
    fn mixed(n: u32, short: f64, long: f64) -> Vec<Task> {
        (0..n)
            .map(|id| Task {
                id,
                base_s: if id % 2 == 0 { short } else { long } * 3600.0,
                memory_gb: 1.0,
            })
            .collect()
    }

    /// `truth` and the maps drawn with every task at `planned_h` hours, by
    /// a deadline of `deadline_h`.
    fn drawn_at(truth: &[Task], planned_h: f64, deadline_h: u64) -> (Catalogue, Clock, Maps, f64) {
        let cat = Catalogue::teylo_2018();
        let clock = Clock::MINUTE_PERIODS_HOUR_SLOTS;
        let planned = planned_h * 3600.0;
        let even: Vec<Task> = truth
            .iter()
            .map(|t| Task {
                base_s: planned,
                ..*t
            })
            .collect();
        let maps = Maps::draw(&even, &cat, &clock, deadline_h * 60, 0.5, true);
        assert!(maps.valid());
        (cat, clock, maps, planned)
    }

    /// Maps drawn at a third of the truth leave dispatch late; the elastic
    /// fleet learns the runtime from the first ends and buys what the
    /// rest needs, in time.
    #[test]
    fn an_elastic_fleet_grows_when_the_bag_runs_longer_than_planned() {
        let truth = mixed(300, 6.0, 14.0);
        let (cat, clock, maps, planned) = drawn_at(&truth, 10.0 / 3.0, 12);
        let dispatched = run_dispatched(&maps, &truth, &cat, &clock, 0);
        assert!(dispatched.missed, "{dispatched:?}");
        let elastic = run_elastic(&maps, &truth, at_zero(&cat, &clock), &[], None, planned);
        assert!(!elastic.missed, "{elastic:?}");
        assert!(elastic.vms_added > 0, "{elastic:?}");
    }

    /// Maps drawn at three times the truth buy VMs the bag does not need:
    /// the elastic fleet stops them at a slot's end, costs less than
    /// dispatch on the same maps, and still meets the deadline.
    #[test]
    fn an_elastic_fleet_drains_what_an_over_estimate_bought() {
        let truth = mixed(300, 4.0, 12.0);
        let (cat, clock, maps, planned) = drawn_at(&truth, 24.0, 16);
        let dispatched = run_dispatched(&maps, &truth, &cat, &clock, 0);
        let elastic = run_elastic(&maps, &truth, at_zero(&cat, &clock), &[], None, planned);
        assert!(!elastic.missed, "{elastic:?}");
        assert!(elastic.vms_drained > 0, "{elastic:?}");
        assert!(
            elastic.cost_usd < dispatched.cost_usd,
            "{elastic:?} {dispatched:?}"
        );
    }

    /// A spot VM that hibernates for good: its tasks start over on the
    /// rest of the fleet, and the deadline holds; the hibernated time is
    /// not billed. A bag whose only VM hibernates gets VMs bought for it
    /// at once.
    #[test]
    fn an_elastic_fleet_reruns_a_hibernated_vms_tasks_in_time() {
        let truth = mixed(300, 4.0, 12.0);
        let (cat, clock, maps, planned) = drawn_at(&truth, 8.0, 16);
        let calm = run_elastic(&maps, &truth, at_zero(&cat, &clock), &[], None, planned);
        let h = first_spot_hibernates(&maps, 30, 60_000);
        let out = run_elastic(&maps, &truth, at_zero(&cat, &clock), &h, None, planned);
        assert_eq!(out.hibernations, 1);
        assert!(!out.missed, "{out:?}");
        assert!(out.cost_usd < 1.5 * calm.cost_usd, "{out:?} {calm:?}");

        let (tasks, cat, clock, maps) = setup();
        assert_eq!(maps.primary.vms.len(), 1, "{maps:?}");
        let alone = [vec![Hibernation {
            start: 30,
            end: 60_000,
        }]];
        let out = run_elastic(
            &maps,
            &tasks,
            at_zero(&cat, &clock),
            &alone,
            None,
            tasks[0].base_s,
        );
        assert_eq!(out.hibernations, 1);
        assert!(out.vms_added > 0, "{out:?}");
        assert!(!out.missed, "{out:?}");
    }

    /// A VM that resumes after the fleet has grown for its tasks drains at
    /// once: the rest end the bag by the occupation limit without it, and
    /// its suspended runs stop where their copies stand; when it never
    /// resumes, their runs elsewhere end them.
    #[test]
    fn a_resumed_vm_the_fleet_can_do_without_drains_at_once() {
        let truth = mixed(200, 0.25, 0.5);
        let (cat, clock, maps, planned) = drawn_at(&truth, 0.375, 4);
        let calm = run_elastic(&maps, &truth, at_zero(&cat, &clock), &[], None, planned);
        let brief = first_spot_hibernates(&maps, 5, 7);
        let out = run_elastic(&maps, &truth, at_zero(&cat, &clock), &brief, None, planned);
        assert_eq!(out.hibernations, 1);
        assert!(out.vms_added > 0, "{out:?}");
        assert!(out.vms_drained > calm.vms_drained, "{out:?} {calm:?}");
        assert_eq!(out.resumed, 0, "{out:?}");
        assert!(!out.missed, "{out:?}");

        let (tasks, cat, clock, maps) = setup();
        let never = [vec![Hibernation {
            start: 30,
            end: 60_000,
        }]];
        let out = run_elastic(
            &maps,
            &tasks,
            at_zero(&cat, &clock),
            &never,
            None,
            tasks[0].base_s,
        );
        assert_eq!(out.resumed, 0, "{out:?}");
        assert!(!out.missed, "{out:?}");
    }

    /// On the runtimes the maps were drawn on, the elastic fleet neither
    /// misses nor buys, and pays no more than the map.
    #[test]
    fn an_elastic_fleet_on_the_planned_truth_keeps_to_the_map() {
        let (tasks, cat, clock, maps) = setup();
        let drawn = run(&maps, &tasks, &cat, &clock, &[], Response::Wait, 0);
        let elastic = run_elastic(
            &maps,
            &tasks,
            at_zero(&cat, &clock),
            &[],
            None,
            tasks[0].base_s,
        );
        assert!(!elastic.missed);
        assert_eq!(elastic.vms_added, 0);
        assert!(
            elastic.cost_usd <= drawn.cost_usd + 1e-9,
            "{elastic:?} {drawn:?}"
        );
    }
}
