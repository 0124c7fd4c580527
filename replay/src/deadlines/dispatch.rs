//! The maps carried out as a bag-of-tasks runtime that pulls work does:
//! each free core takes the next task of one pool, so which task runs
//! where follows the truth as it unfolds, and the map decides only how
//! many VMs of which types.
//!
//! - [`run_dispatched`]: the primary map's VMs, all of them, to the end.
//! - [`run_elastic`]: the primary map's VMs to begin with, then a fleet
//!   that follows what the bag's ended tasks teach. A VM that would open
//!   a new billing slot stops taking tasks when the others can finish the
//!   bag by the map's occupation limit without it; when the fleet cannot
//!   finish it by halfway from the limit to the deadline, VMs are bought
//!   for the tasks it would leave over (Algorithm 1 on those tasks, in the
//!   time left), and no more until they have booted. The runtime every decision assumes is the
//!   Kaplan–Meier mean of the bag's tasks, the ended ones observed and the
//!   running ones censored at their age, so that the short tasks that end
//!   first do not pass for the bag; before any task ends, the estimate the
//!   maps were drawn at.
//!
//! A hibernating VM keeps its memory: its tasks are suspended, and each
//! also goes back to the head of the queue, since when the VM resumes is
//! not known. Whichever run of a task ends first stops the other, so a
//! short hibernation costs little progress and a long one delays nothing.
//!
//! A VM is billed in whole slots for the time it runs, from its purchase
//! to its last task's end, less the time it hibernated.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use jobcast_predictor::deadlines::{Catalogue, Clock, Maps, Market, Task, VmType, primary_map};

use super::{Hibernation, Outcome, true_task};

/// The bag's tasks in the order the map placed them.
fn pool(maps: &Maps) -> VecDeque<u32> {
    let mut order: Vec<(u64, usize, u32)> = maps
        .primary
        .vms
        .iter()
        .enumerate()
        .flat_map(|(j, vm)| vm.placements.iter().map(move |p| (p.start, j, p.task)))
        .collect();
    order.sort_unstable();
    order.into_iter().map(|(_, _, id)| id).collect()
}

/// How many of the bag's tasks a VM of type `t` runs at once: its cores,
/// fewer if its memory holds fewer of the bag's largest task.
fn task_slots(t: &VmType, truth: &[Task]) -> usize {
    let memory = truth.iter().map(|x| x.memory_gb).fold(0.0, f64::max);
    let by_memory = if memory > 0.0 {
        (t.memory_gb / memory).floor() as usize
    } else {
        usize::from(t.cores)
    };
    usize::from(t.cores).min(by_memory.max(1))
}

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

/// A task's run on a slot of a VM.
#[derive(Debug, Clone, Copy)]
struct Run {
    task: u32,
    /// When it started, later by the time its VM hibernated.
    since: u64,
    /// It went on after its VM resumed.
    resumed: bool,
}

/// A VM of the elastic fleet.
struct Node {
    kind: usize,
    market: Market,
    /// When it was bought: its slots are priced from here.
    bought: u64,
    /// When it can run tasks (after its boot, or its resume).
    ready: u64,
    /// Per task slot, the run it holds.
    running: Vec<Option<Run>>,
    /// Per task slot, the generation of its pending end: a hibernation
    /// voids the ends of the runs it stopped.
    generation: Vec<u64>,
    /// Periods it ran before its last hibernation, and since when it has
    /// run after it (or since its purchase).
    active: u64,
    active_since: u64,
    /// When its last task ended.
    last_end: u64,
    /// It was started: bought while the job ran, or a VM of the map that
    /// took a task (one that never did was never booted).
    booted: bool,
    /// It takes no more tasks.
    draining: bool,
    hibernated: bool,
    /// When its last hibernation began.
    stopped_at: u64,
}

impl Node {
    fn new(
        kind: usize,
        market: Market,
        bought: u64,
        ready: u64,
        slots: usize,
        booted: bool,
    ) -> Node {
        Node {
            kind,
            market,
            bought,
            ready,
            running: vec![None; slots],
            generation: vec![0; slots],
            active: 0,
            active_since: bought,
            last_end: bought,
            booted,
            draining: false,
            hibernated: false,
            stopped_at: 0,
        }
    }

    /// Periods it has been billed for by the end of its last task.
    fn billed(&self) -> u64 {
        self.active + self.last_end.saturating_sub(self.active_since)
    }

    /// The end of the last slot it has paid for by `now`.
    fn paid_until(&self, now: u64, clock: &Clock) -> u64 {
        let ran = self.active + (now - self.active_since);
        now + clock.slots(ran).max(1) * clock.slot_periods - ran
    }

    /// The tasks of `mean_s` each it can still run by `horizon`, in
    /// fractions of a task: per slot, from when its running task is
    /// expected to end (none while it hibernates: when it resumes is not
    /// known).
    fn spare(&self, now: u64, horizon: u64, mean_s: f64, t: &VmType, clock: &Clock) -> f64 {
        if self.draining || self.hibernated {
            return 0.0;
        }
        let per = clock.periods(mean_s * t.slowdown).max(1);
        self.running
            .iter()
            .map(|slot| {
                let free = match slot {
                    Some(run) => (run.since + per).max(now),
                    None => now.max(self.ready),
                };
                horizon.saturating_sub(free) as f64 / per as f64
            })
            .sum()
    }
}

/// The Kaplan–Meier mean of a runtime from `ended` runtimes and the ages
/// of the `running` (censored), restricted to the longest observation,
/// seconds; `None` before any task has ended. The restriction errs short
/// while long tasks run; each end corrects it, and the occupation limit
/// leaves the deadline's other half for what it missed.
fn km_mean(ended: &[f64], running: &[f64]) -> Option<f64> {
    if ended.is_empty() {
        return None;
    }
    let mut all: Vec<(f64, bool)> = ended
        .iter()
        .map(|&x| (x, true))
        .chain(running.iter().map(|&x| (x, false)))
        .collect();
    // At a tie an end comes before a censoring, as Kaplan–Meier has it.
    all.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.cmp(&a.1)));
    let (mut survival, mut mean, mut previous) = (1.0, 0.0, 0.0);
    let mut at_risk = all.len() as f64;
    for &(time, ended) in &all {
        mean += survival * (time - previous);
        previous = time;
        if ended {
            survival *= 1.0 - 1.0 / at_risk;
        }
        at_risk -= 1.0;
    }
    Some(mean)
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

/// The elastic fleet of one bag: its VMs, the tasks not yet started, what
/// the ended ones showed, and what comes next.
struct Fleet<'a> {
    truth: &'a [Task],
    catalogue: &'a Catalogue,
    clock: &'a Clock,
    start_us: u64,
    boot: u64,
    /// The occupation limit it drains to, the time past which it grows,
    /// and the deadline.
    limit: u64,
    grow_by: u64,
    deadline: u64,
    nodes: Vec<Node>,
    steps: BinaryHeap<Reverse<(u64, Step)>>,
    queue: VecDeque<u32>,
    ended: Vec<f64>,
    /// The runtime every decision assumes, seconds on the baseline core.
    mean_s: f64,
    outcome: Outcome,
}

impl Fleet<'_> {
    fn vm_type(&self, j: usize) -> &VmType {
        &self.catalogue.types[self.nodes[j].kind]
    }

    fn spare(&self, now: u64, horizon: u64, without: Option<usize>) -> f64 {
        self.nodes
            .iter()
            .enumerate()
            .filter(|&(i, _)| Some(i) != without)
            .map(|(_, n)| {
                n.spare(
                    now,
                    horizon,
                    self.mean_s,
                    &self.catalogue.types[n.kind],
                    self.clock,
                )
            })
            .sum()
    }

    /// Slot `slot` of VM `j` is free at `at`, unless a hibernation voids
    /// it before.
    fn free_at(&mut self, at: u64, j: usize, slot: usize) {
        let generation = self.nodes[j].generation[slot];
        let step = Step::Free {
            vm: j,
            slot,
            generation,
        };
        self.steps.push(Reverse((at, step)));
    }

    /// Learn from the task that ended in `slot` of VM `j`, and stop its
    /// other runs: the one a hibernation suspended, or the one started
    /// again elsewhere.
    fn end(&mut self, now: u64, j: usize, slot: usize) {
        let Some(Run {
            task: id, resumed, ..
        }) = self.nodes[j].running[slot].take()
        else {
            return;
        };
        self.outcome.resumed += u32::from(resumed);
        self.ended.push(true_task(self.truth, id).base_s);
        self.nodes[j].last_end = now;
        self.queue.retain(|&queued| queued != id);
        for i in 0..self.nodes.len() {
            for other in 0..self.nodes[i].running.len() {
                if self.nodes[i].running[other].is_some_and(|run| run.task == id) {
                    let node = &mut self.nodes[i];
                    node.running[other] = None;
                    node.generation[other] += 1;
                    if !node.hibernated {
                        // It ran until now, and its slot takes the next task.
                        node.last_end = node.last_end.max(now);
                        self.free_at(now, i, other);
                    }
                }
            }
        }
        let period_s = self.clock.period_s;
        let ages: Vec<f64> = self
            .nodes
            .iter()
            .filter(|n| !n.hibernated)
            .flat_map(|n| {
                let slowdown = self.catalogue.types[n.kind].slowdown;
                n.running
                    .iter()
                    .flatten()
                    .map(move |run| ((now - run.since) * period_s) as f64 / slowdown)
            })
            .collect();
        if let Some(mean) = km_mean(&self.ended, &ages) {
            self.mean_s = mean;
        }
    }

    /// Buy VMs for the tasks the fleet cannot end in time, unless VMs
    /// bought before are still booting: by `grow_by`, or by the deadline
    /// once `grow_by` is too close for a boot.
    fn grow(&mut self, now: u64) {
        if self.queue.is_empty() || self.nodes.iter().any(|n| n.ready > now && !n.hibernated) {
            return;
        }
        let horizon = if now + self.boot < self.grow_by {
            self.grow_by
        } else {
            self.deadline
        };
        let spare = self.spare(now, horizon, None);
        if self.queue.len() as f64 <= spare {
            return;
        }
        let over: Vec<Task> = self
            .queue
            .iter()
            .skip(spare as usize)
            .map(|&id| Task {
                base_s: self.mean_s,
                ..*true_task(self.truth, id)
            })
            .collect();
        let window = horizon.saturating_sub(now + self.boot).max(1);
        let clock = self.clock;
        let priced = self
            .catalogue
            .priced_at(self.start_us + now * clock.period_s * 1_000_000);
        for vm in primary_map(&over, &priced, clock, window, 1.0, true).vms {
            let slots = task_slots(&self.catalogue.types[vm.kind], self.truth);
            let ready = now + self.boot;
            self.nodes
                .push(Node::new(vm.kind, vm.market, now, ready, slots, true));
            let j = self.nodes.len() - 1;
            for slot in 0..slots {
                self.free_at(ready, j, slot);
            }
            self.outcome.vms_added += 1;
        }
    }

    /// Whether VM `j` runs a task expected to take `per` more periods: yes
    /// within the slot it has paid for; past it, only if the others cannot
    /// end the queue by the occupation limit without it (else it drains).
    fn keeps_working(&mut self, now: u64, j: usize, per: u64) -> bool {
        let node = &self.nodes[j];
        if now + per <= node.paid_until(now, self.clock) {
            true
        } else if node.draining {
            false
        } else if self.queue.len() as f64 <= self.spare(now, self.limit, Some(j)).floor() {
            self.nodes[j].draining = true;
            self.outcome.vms_drained += 1;
            false
        } else {
            true
        }
    }

    /// Slot `slot` of VM `j` is free: give it the next task, unless that
    /// would open a slot the others make unneeded (the VM then drains).
    fn dispatch(&mut self, now: u64, j: usize, slot: usize) {
        let Some(&next) = self.queue.front() else {
            return;
        };
        let per = self.clock.periods(self.mean_s * self.vm_type(j).slowdown);
        if self.keeps_working(now, j, per) {
            self.queue.pop_front();
            let end = now + true_task(self.truth, next).periods_on(self.vm_type(j), self.clock);
            let node = &mut self.nodes[j];
            node.running[slot] = Some(Run {
                task: next,
                since: now,
                resumed: false,
            });
            node.booted = true;
            self.free_at(end, j, slot);
        }
    }

    /// VM `j` hibernates until `until`. Hibernation keeps its memory, so
    /// its running tasks are suspended, not lost; but when it resumes is
    /// not known, so each also goes back to the head of the queue, to
    /// start over wherever a core frees first, and the fleet grows if the
    /// rest cannot end them. Whichever run of a task ends first stops the
    /// other.
    fn hibernate(&mut self, now: u64, j: usize, until: u64) {
        let node = &mut self.nodes[j];
        if node.running.iter().all(Option::is_none) {
            // Nothing runs on it: it has stopped, or not started.
            return;
        }
        self.outcome.hibernations += 1;
        node.hibernated = true;
        node.stopped_at = now;
        node.active += now - node.active_since;
        let mut suspended = Vec::new();
        for slot in 0..node.running.len() {
            if let Some(run) = node.running[slot] {
                suspended.push(run.task);
                // Its pending end is void.
                node.generation[slot] += 1;
            }
        }
        for id in suspended {
            // A task already started again elsewhere is not queued twice.
            let elsewhere = self
                .nodes
                .iter()
                .any(|n| !n.hibernated && n.running.iter().flatten().any(|run| run.task == id));
            if !elsewhere {
                self.queue.push_front(id);
            }
        }
        self.steps.push(Reverse((until, Step::Resume { vm: j })));
        // Slots left idle when the queue ran dry take the requeued tasks.
        let idle: Vec<(usize, usize)> = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| !n.hibernated && n.ready <= now)
            .flat_map(|(i, n)| {
                (0..n.running.len())
                    .filter(|&slot| n.running[slot].is_none())
                    .map(move |slot| (i, slot))
            })
            .collect();
        for (i, slot) in idle {
            self.free_at(now, i, slot);
        }
        self.grow(now);
    }

    /// VM `j` resumes, billed from now: each suspended task goes on from
    /// where it stopped, and its copy leaves the queue, unless the copy
    /// started elsewhere has run longer, or going on would keep a VM the
    /// fleet does not need past its paid slot (then the suspended run
    /// stops, and the copy stands); its other slots take tasks.
    fn resume(&mut self, now: u64, j: usize) {
        let paused = now - self.nodes[j].stopped_at;
        let node = &mut self.nodes[j];
        node.hibernated = false;
        node.active_since = now;
        node.ready = now;
        for slot in 0..self.nodes[j].running.len() {
            let Some(Run {
                task: id, since, ..
            }) = self.nodes[j].running[slot]
            else {
                self.free_at(now, j, slot);
                continue;
            };
            // Progress in seconds on the baseline core, here and in the
            // copy furthest on.
            let done_here = (self.nodes[j].stopped_at - since) as f64 / self.vm_type(j).slowdown;
            let done_elsewhere = self
                .nodes
                .iter()
                .enumerate()
                .filter(|&(i, n)| i != j && !n.hibernated)
                .flat_map(|(_, n)| {
                    let slowdown = self.catalogue.types[n.kind].slowdown;
                    n.running
                        .iter()
                        .flatten()
                        .filter(move |run| run.task == id)
                        .map(move |run| (now - run.since) as f64 / slowdown)
                })
                .fold(None, |best: Option<f64>, x| {
                    Some(best.map_or(x, |b| b.max(x)))
                });
            let left = self
                .clock
                .periods((self.mean_s - done_here).max(0.0) * self.vm_type(j).slowdown);
            if done_elsewhere.is_some_and(|there| there >= done_here)
                || !self.keeps_working(now, j, left.max(1))
            {
                // The copy is further on, or the VM is not needed past
                // what it has paid for: this run stops.
                self.nodes[j].running[slot] = None;
                self.free_at(now, j, slot);
                continue;
            }
            let since = since + paused;
            if let Some(at) = self.queue.iter().position(|&queued| queued == id) {
                self.queue.remove(at);
            }
            self.nodes[j].running[slot] = Some(Run {
                task: id,
                since,
                resumed: true,
            });
            let end = since + true_task(self.truth, id).periods_on(self.vm_type(j), self.clock);
            self.free_at(end, j, slot);
        }
    }
}

/// The bag carried out by an elastic fleet (the module's head says how),
/// starting from the primary map's VMs, VM `j` of the map hibernating as
/// `hibernations[j]` says; `planned_s` is the runtime the maps were drawn
/// at, trusted until a task ends. A hibernating VM's running tasks go
/// back to the queue, and the fleet grows if the rest cannot end them in
/// time; on resume the VM takes tasks again.
pub fn run_elastic(
    maps: &Maps,
    truth: &[Task],
    catalogue: &Catalogue,
    clock: &Clock,
    hibernations: &[Vec<Hibernation>],
    planned_s: f64,
    start_us: u64,
) -> Outcome {
    let limit = maps.primary.limit;
    let deadline = maps.primary.deadline;
    let mut fleet = Fleet {
        truth,
        catalogue,
        clock,
        start_us,
        boot: clock.periods(catalogue.boot_s as f64),
        limit,
        // Between the limit and halfway to the deadline the fleet stays as
        // it is: drained to the one, grown past the other.
        grow_by: limit + deadline.saturating_sub(limit) / 2,
        deadline,
        nodes: maps
            .primary
            .vms
            .iter()
            .map(|vm| {
                let t = &catalogue.types[vm.kind];
                Node::new(vm.kind, vm.market, 0, 0, task_slots(t, truth), false)
            })
            .collect(),
        steps: BinaryHeap::new(),
        queue: pool(maps),
        ended: Vec::new(),
        mean_s: planned_s,
        outcome: Outcome::default(),
    };
    for (j, vm) in maps.primary.vms.iter().enumerate() {
        for slot in 0..fleet.nodes[j].running.len() {
            fleet.free_at(0, j, slot);
        }
        if vm.market == Market::Spot {
            for h in hibernations.get(j).into_iter().flatten() {
                let step = Step::Hibernate {
                    vm: j,
                    until: h.end,
                };
                fleet.steps.push(Reverse((h.start, step)));
            }
        }
    }
    while let Some(Reverse((now, step))) = fleet.steps.pop() {
        match step {
            Step::Free {
                vm,
                slot,
                generation,
            } => {
                let node = &fleet.nodes[vm];
                if node.hibernated || node.generation[slot] != generation {
                    continue;
                }
                if node.running[slot].is_some() {
                    fleet.end(now, vm, slot);
                    fleet.grow(now);
                }
                fleet.dispatch(now, vm, slot);
            }
            Step::Hibernate { vm, until } => fleet.hibernate(now, vm, until),
            Step::Resume { vm } => fleet.resume(now, vm),
        }
    }
    assert!(
        fleet.queue.is_empty(),
        "a drain leaves the rest to VMs that run"
    );
    let Fleet {
        nodes, mut outcome, ..
    } = fleet;
    outcome.makespan = nodes.iter().map(|n| n.last_end).max().unwrap_or(0);
    outcome.missed = outcome.makespan > deadline;
    outcome.cost_usd = nodes
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

    /// The Kaplan–Meier mean: the plain mean when every task has ended; a
    /// task still running counts as lasting at least its age.
    #[test]
    fn the_mean_counts_running_tasks_as_lasting_at_least_their_age() {
        assert_eq!(km_mean(&[], &[5.0]), None);
        assert!((km_mean(&[1.0, 2.0, 6.0], &[]).unwrap() - 3.0).abs() < 1e-9);
        // One of two ended at 1; the other has run 4 so far.
        let m = km_mean(&[1.0], &[4.0]).unwrap();
        assert!((m - 2.5).abs() < 1e-9, "{m}");
        assert!(m > 1.0);
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
        let elastic = run_elastic(&maps, &truth, &cat, &clock, &[], planned, 0);
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
        let elastic = run_elastic(&maps, &truth, &cat, &clock, &[], planned, 0);
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
        let calm = run_elastic(&maps, &truth, &cat, &clock, &[], planned, 0);
        let h = first_spot_hibernates(&maps, 30, 60_000);
        let out = run_elastic(&maps, &truth, &cat, &clock, &h, planned, 0);
        assert_eq!(out.hibernations, 1);
        assert!(!out.missed, "{out:?}");
        assert!(out.cost_usd < 1.5 * calm.cost_usd, "{out:?} {calm:?}");

        let (tasks, cat, clock, maps) = setup();
        assert_eq!(maps.primary.vms.len(), 1, "{maps:?}");
        let alone = [vec![Hibernation {
            start: 30,
            end: 60_000,
        }]];
        let out = run_elastic(&maps, &tasks, &cat, &clock, &alone, tasks[0].base_s, 0);
        assert_eq!(out.hibernations, 1);
        assert!(out.vms_added > 0, "{out:?}");
        assert!(!out.missed, "{out:?}");
    }

    /// Hibernation keeps a VM's memory: when the VM resumes before the
    /// tasks it stopped have run again elsewhere, they go on where they
    /// stopped; when it never resumes, their runs elsewhere end them.
    #[test]
    fn a_resumed_vm_goes_on_with_the_tasks_it_stopped() {
        // Tasks of 15 and 30 minutes: one stopped 5 minutes in ends
        // within the slot its VM has paid for.
        let truth = mixed(200, 0.25, 0.5);
        let (cat, clock, maps, planned) = drawn_at(&truth, 0.375, 4);
        let calm = run_elastic(&maps, &truth, &cat, &clock, &[], planned, 0);
        let brief = first_spot_hibernates(&maps, 5, 7);
        let out = run_elastic(&maps, &truth, &cat, &clock, &brief, planned, 0);
        assert_eq!(out.hibernations, 1);
        assert!(out.resumed > 0, "{out:?}");
        assert!(!out.missed, "{out:?}");
        assert!(out.makespan <= calm.makespan + 2, "{out:?} {calm:?}");

        let (tasks, cat, clock, maps) = setup();
        let never = [vec![Hibernation {
            start: 30,
            end: 60_000,
        }]];
        let out = run_elastic(&maps, &tasks, &cat, &clock, &never, tasks[0].base_s, 0);
        assert_eq!(out.resumed, 0, "{out:?}");
        assert!(!out.missed, "{out:?}");
    }

    /// On the runtimes the maps were drawn on, the elastic fleet neither
    /// misses nor buys, and pays no more than the map.
    #[test]
    fn an_elastic_fleet_on_the_planned_truth_keeps_to_the_map() {
        let (tasks, cat, clock, maps) = setup();
        let drawn = run(&maps, &tasks, &cat, &clock, &[], Response::Wait, 0);
        let elastic = run_elastic(&maps, &tasks, &cat, &clock, &[], tasks[0].base_s, 0);
        assert!(!elastic.missed);
        assert_eq!(elastic.vms_added, 0);
        assert!(
            elastic.cost_usd <= drawn.cost_usd + 1e-9,
            "{elastic:?} {drawn:?}"
        );
    }
}
