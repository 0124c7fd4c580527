//! An elastic fleet for one bag of tasks: the primary map's VMs to begin
//! with, then grown and drained on what the bag's ended tasks teach. The
//! simulator (`jobcast_replay::deadlines::run_elastic`) carries it out
//! against the truth; the engine (`engine/deadlines.rs`) follows a live
//! job with it and publishes its `grow` and `drain` decisions. Which task
//! runs where is the bag's runtime's business (each free core pulls the
//! next task); the fleet decides only how many VMs of which types.
//!
//! - **Drain.** A VM that would open a new billing slot for its next task
//!   stops taking tasks when the others can finish the bag by the map's
//!   occupation limit without it ([`Fleet::takes_next`]).
//! - **Grow.** When the fleet cannot finish the bag by halfway from the
//!   limit to the deadline, VMs are bought for the tasks it would leave
//!   over (Algorithm 1 on those tasks, in the time left), and no more
//!   until they have booted ([`Fleet::grow`]).
//! - **The runtime every decision assumes** is the Kaplan–Meier mean of
//!   the bag's tasks, the ended ones observed and the running ones
//!   censored at their age, so that the short tasks that end first do not
//!   pass for the bag; before any task ends, the estimate the maps were
//!   drawn at.
//! - **Hibernation** keeps a VM's memory: its tasks are suspended, and each
//!   also goes back to the head of the queue, since when the VM resumes is
//!   not known ([`Fleet::hibernate`]). Such a task runs again on the spot
//!   market the first time only, and only while the time left holds
//!   three runs of it on the fastest type; else on on-demand VMs, which
//!   the fleet buys for it, planned to end by the deadline itself (spot
//!   VMs leave it queued). A VM that resumes drains at once
//!   when the rest of the fleet ends the bag by the occupation limit
//!   without it; otherwise a suspended task goes on unless a copy
//!   elsewhere is further on ([`Fleet::resume`]).
//!   Whichever run of a task ends first stops the others ([`Fleet::end`]).
//!
//! Time is the maps' periods, counted from the job's start. A VM is
//! billed in whole slots for the time it runs, from its purchase to its
//! last task's end, less the time it hibernated.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::{Catalogue, Clock, Maps, Market, Task, VmType, primary_map};

/// How many times a task a hibernation stopped runs again on the spot
/// market: past it, it runs again on on-demand VMs only, which do not
/// hibernate.
const SPOT_RERUNS: u32 = 1;

/// A task a hibernation stopped runs again on the spot market only while
/// the time left holds this many runs of it on the fastest type (boot
/// aside): a rerun that another hibernation stops must leave time to run
/// again.
const RUNS_LEFT: u64 = 3;

/// What hibernations did to a task not yet ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
struct Stopped {
    /// How many times a hibernation stopped it.
    times: u32,
    /// The longest it was seen to run, seconds on the baseline core.
    ran_s: f64,
    /// It runs again on on-demand VMs only.
    on_demand: bool,
}

/// The bag's tasks in the order the map placed them.
pub fn pool(maps: &Maps) -> VecDeque<u32> {
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

/// How many of the bag's `tasks` a VM of type `t` runs at once: its cores,
/// fewer if its memory holds fewer of the bag's largest task.
pub fn task_slots(t: &VmType, tasks: &[Task]) -> usize {
    let memory = tasks.iter().map(|x| x.memory_gb).fold(0.0, f64::max);
    let by_memory = if memory > 0.0 {
        (t.memory_gb / memory).floor() as usize
    } else {
        usize::from(t.cores)
    };
    usize::from(t.cores).min(by_memory.max(1))
}

/// What a fleet's decisions read: the VM types and the maps' clock.
#[derive(Debug, Clone, Copy)]
pub struct Terms<'a> {
    pub catalogue: &'a Catalogue,
    pub clock: &'a Clock,
    /// The job's start, µs of event time: spot VMs are bought at the
    /// prices in effect then plus the periods since.
    pub start_us: u64,
}

impl Terms<'_> {
    fn vm_type(&self, node: &Node) -> &VmType {
        &self.catalogue.types[node.kind]
    }
}

/// A task's run on a slot of a VM.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Run {
    pub task: u32,
    /// When it started, later by the time its VM hibernated.
    pub since: u64,
    /// It went on after its VM resumed.
    pub resumed: bool,
}

/// A VM of the fleet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Node {
    /// Its type in the catalogue.
    pub kind: usize,
    pub market: Market,
    /// The machine that plays it, once one ran a task of the bag (live).
    pub machine_id: Option<u64>,
    /// When it was bought: its slots are priced from here.
    pub bought: u64,
    /// Bought while the job ran ([`Fleet::grow`]), not one of the map's.
    pub added: bool,
    /// When it can run tasks (after its boot, or its resume).
    ready: u64,
    /// Per task slot, the run it holds.
    running: Vec<Option<Run>>,
    /// Per task slot, the generation of its run: a run stopped by a
    /// hibernation, or by its task ending elsewhere, voids its end.
    generation: Vec<u64>,
    /// Periods it ran before its last hibernation, and since when it has
    /// run after it (or since its purchase).
    active: u64,
    active_since: u64,
    /// When its last task ended.
    pub last_end: u64,
    /// It was started: bought while the job ran, or a VM of the map that
    /// took a task (one that never did was never booted).
    pub booted: bool,
    /// It takes no more tasks.
    pub draining: bool,
    pub hibernated: bool,
    /// When its last hibernation began.
    stopped_at: u64,
}

impl Node {
    fn new(kind: usize, market: Market, bought: u64, ready: u64, slots: usize) -> Node {
        Node {
            kind,
            market,
            machine_id: None,
            bought,
            added: false,
            ready,
            running: vec![None; slots],
            generation: vec![0; slots],
            active: 0,
            active_since: bought,
            last_end: bought,
            booted: false,
            draining: false,
            hibernated: false,
            stopped_at: 0,
        }
    }

    /// Periods it has been billed for by the end of its last task.
    pub fn billed(&self) -> u64 {
        self.active + self.last_end.saturating_sub(self.active_since)
    }

    /// Its task slots.
    pub fn slots(&self) -> usize {
        self.running.len()
    }

    /// The run slot `slot` holds.
    pub fn run(&self, slot: usize) -> Option<Run> {
        self.running[slot]
    }

    /// The generation of slot `slot`'s run.
    pub fn generation(&self, slot: usize) -> u64 {
        self.generation[slot]
    }

    /// When it can take tasks.
    pub fn ready(&self) -> u64 {
        self.ready
    }

    /// The end of the last slot it has paid for by `now`.
    fn paid_until(&self, now: u64, clock: &Clock) -> u64 {
        let ran = self.active + now.saturating_sub(self.active_since);
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

    /// Stop the run in `slot`: its end is void.
    fn stop(&mut self, slot: usize) {
        self.running[slot] = None;
        self.generation[slot] += 1;
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

/// What a fleet's step changed that its driver acts on: the simulator
/// schedules the freed slots and counts the rest; the engine publishes
/// the purchases and drains.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Slot `slot` of VM `vm` can take a task at `at` (of this generation).
    Free {
        at: u64,
        vm: usize,
        slot: usize,
        generation: u64,
    },
    /// VM `vm` was bought.
    Bought { vm: usize },
    /// VM `vm` takes no more tasks.
    Drained { vm: usize },
}

/// The elastic fleet of one bag: its VMs, the tasks not yet started, and
/// what the ended ones showed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fleet {
    /// The bag's tasks (their memory: runtimes are the fleet's mean).
    tasks: Vec<Task>,
    boot: u64,
    /// The occupation limit it drains to, the time past which it grows,
    /// and the deadline.
    limit: u64,
    grow_by: u64,
    deadline: u64,
    nodes: Vec<Node>,
    /// The tasks no VM runs, the next first.
    queue: VecDeque<u32>,
    /// The tasks a hibernation stopped, until they end
    /// ([`Fleet::hibernate`]).
    #[serde(default)]
    stopped: BTreeMap<u32, Stopped>,
    /// Runtimes of the ended tasks, seconds on the baseline core.
    ended: Vec<f64>,
    /// The runtime every decision assumes, seconds on the baseline core.
    mean_s: f64,
    /// The latest time a step was taken at: a live step that comes
    /// earlier (machine and job events are not ordered against each
    /// other) is taken at it.
    last_now: u64,
    #[serde(skip)]
    changes: Vec<Change>,
}

impl Fleet {
    /// The fleet of `maps`' primary VMs, none booted yet, for the bag's
    /// `tasks`, trusting `planned_s` until a task ends.
    pub fn new(maps: &Maps, tasks: &[Task], terms: Terms, planned_s: f64) -> Fleet {
        let limit = maps.primary.limit;
        let deadline = maps.primary.deadline;
        let mut fleet = Fleet {
            tasks: tasks.to_vec(),
            boot: terms.clock.periods(terms.catalogue.boot_s as f64),
            limit,
            // Between the limit and halfway to the deadline the fleet stays
            // as it is: drained to the one, grown past the other.
            grow_by: limit + deadline.saturating_sub(limit) / 2,
            deadline,
            nodes: Vec::new(),
            queue: pool(maps),
            stopped: BTreeMap::new(),
            ended: Vec::new(),
            mean_s: planned_s,
            last_now: 0,
            changes: Vec::new(),
        };
        for vm in &maps.primary.vms {
            let t = &terms.catalogue.types[vm.kind];
            fleet
                .nodes
                .push(Node::new(vm.kind, vm.market, 0, 0, task_slots(t, tasks)));
            let j = fleet.nodes.len() - 1;
            for slot in 0..fleet.nodes[j].slots() {
                fleet.free_at(0, j, slot);
            }
        }
        fleet
    }

    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The tasks no VM runs.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// The runtime the fleet assumes, seconds on the baseline core.
    pub fn mean_s(&self) -> f64 {
        self.mean_s
    }

    pub fn deadline(&self) -> u64 {
        self.deadline
    }

    /// `now`, or the latest time a step was taken at if that is later.
    fn at(&mut self, now: u64) -> u64 {
        self.last_now = self.last_now.max(now);
        self.last_now
    }

    /// What the last steps changed, oldest first; taken once.
    pub fn take_changes(&mut self) -> Vec<Change> {
        std::mem::take(&mut self.changes)
    }

    fn free_at(&mut self, at: u64, vm: usize, slot: usize) {
        let generation = self.nodes[vm].generation[slot];
        self.changes.push(Change::Free {
            at,
            vm,
            slot,
            generation,
        });
    }

    /// The tasks the fleet's VMs (all but `without`; on demand only if
    /// `on_demand`) can still run by `horizon`.
    fn spare_on(
        &self,
        now: u64,
        horizon: u64,
        without: Option<usize>,
        on_demand: bool,
        terms: Terms,
    ) -> f64 {
        self.nodes
            .iter()
            .enumerate()
            .filter(|&(i, n)| Some(i) != without && (!on_demand || n.market == Market::OnDemand))
            .map(|(_, n)| n.spare(now, horizon, self.mean_s, terms.vm_type(n), terms.clock))
            .sum()
    }

    fn spare(&self, now: u64, horizon: u64, without: Option<usize>, terms: Terms) -> f64 {
        self.spare_on(now, horizon, without, false, terms)
    }

    /// Whether task `id` runs again on on-demand VMs only.
    fn on_demand_only(&self, id: u32) -> bool {
        self.stopped.get(&id).is_some_and(|s| s.on_demand)
    }

    /// The tasks that run again on on-demand VMs only, the queued ones
    /// first: what a `grow` that buys on demand is for.
    pub fn on_demand_reruns(&self) -> Vec<u32> {
        let (mut queued, mut running): (Vec<u32>, Vec<u32>) = self
            .stopped
            .iter()
            .filter(|(_, s)| s.on_demand)
            .map(|(&id, _)| id)
            .partition(|id| self.queue.contains(id));
        queued.append(&mut running);
        queued
    }

    /// The queued tasks that run again on on-demand VMs only.
    fn queued_reruns(&self) -> usize {
        self.queue
            .iter()
            .filter(|&&id| self.on_demand_only(id))
            .count()
    }

    /// A task's expected runtime once it has run `ran_s` (seconds on the
    /// baseline core): the mean of the ended tasks that ran longer, or,
    /// before any did, the fleet's mean or `ran_s`, whichever is longer.
    fn expected_beyond(&self, ran_s: f64) -> f64 {
        let (sum, n) = self
            .ended
            .iter()
            .filter(|&&x| x > ran_s)
            .fold((0.0, 0u32), |(sum, n), &x| (sum + x, n + 1));
        if n > 0 {
            sum / f64::from(n)
        } else {
            self.mean_s.max(ran_s)
        }
    }

    /// Whether the fleet's VMs but `without` end the queue by `horizon`:
    /// all of them the queue, and those on demand its reruns.
    fn ends_queue(&self, now: u64, horizon: u64, without: Option<usize>, terms: Terms) -> bool {
        self.queue.len() as f64 <= self.spare(now, horizon, without, terms).floor()
            && self.queued_reruns() as f64
                <= self.spare_on(now, horizon, without, true, terms).floor()
    }

    /// The VM machine `machine_id` plays, as it runs a task of the bag at
    /// `now`: the one it played before; else one no machine plays yet, of
    /// its type (any, where its events give none) and of its market where
    /// one is left, the one due to be ready nearest `now` (the map's VMs
    /// from the start, those bought once booted; the earliest on a tie),
    /// which then counts as bought on the machine's market. `None` when no
    /// such VM is left.
    pub fn bind(
        &mut self,
        now: u64,
        machine_id: u64,
        vm: Option<(&str, Market)>,
        terms: Terms,
    ) -> Option<usize> {
        if let Some(j) = self.vm_of(machine_id) {
            return Some(j);
        }
        let now = self.at(now);
        let free =
            |n: &Node| n.machine_id.is_none() && vm.is_none_or(|(t, _)| terms.vm_type(n).name == t);
        let nearest = |same_market: bool| {
            self.nodes
                .iter()
                .enumerate()
                .filter(|(_, n)| free(n) && (!same_market || vm.is_none_or(|v| n.market == v.1)))
                .min_by_key(|(j, n)| (n.ready.abs_diff(now), *j))
                .map(|(j, _)| j)
        };
        let j = nearest(true).or_else(|| nearest(false))?;
        let node = &mut self.nodes[j];
        node.machine_id = Some(machine_id);
        if let Some((_, market)) = vm {
            node.market = market;
        }
        Some(j)
    }

    /// Machine `machine_id`, a VM of catalogue type `vm_type` on `market`,
    /// runs a task of the bag though no VM of the fleet is left for it (an
    /// operator's own): the fleet counts it as a VM bought at `now` and
    /// ready then. `None` if its type is not in the catalogue.
    pub fn adopt(
        &mut self,
        now: u64,
        machine_id: u64,
        vm_type: &str,
        market: Market,
        terms: Terms,
    ) -> Option<usize> {
        let now = self.at(now);
        let kind = terms.catalogue.kind(vm_type)?;
        let slots = task_slots(&terms.catalogue.types[kind], &self.tasks);
        let mut node = Node::new(kind, market, now, now, slots);
        node.machine_id = Some(machine_id);
        node.booted = true;
        node.added = true;
        self.nodes.push(node);
        Some(self.nodes.len() - 1)
    }

    /// The machines that play its VMs.
    pub fn machines(&self) -> impl Iterator<Item = u64> + '_ {
        self.nodes.iter().filter_map(|n| n.machine_id)
    }

    /// The VM machine `machine_id` plays, if it plays one.
    pub fn vm_of(&self, machine_id: u64) -> Option<usize> {
        self.nodes
            .iter()
            .position(|n| n.machine_id == Some(machine_id))
    }

    /// Task `task` ended where the fleet did not follow it (before the
    /// fleet was drawn, on a machine beyond its VMs, or on a VM whose run
    /// of it the fleet had stopped) at `now`, after `base_s` on the
    /// baseline core if known: it leaves the queue, its other runs stop,
    /// and its runtime counts at the next end.
    pub fn done_elsewhere(&mut self, now: u64, task: u32, base_s: Option<f64>) {
        let now = self.at(now);
        self.queue.retain(|&queued| queued != task);
        self.stopped.remove(&task);
        self.ended.extend(base_s);
        for i in 0..self.nodes.len() {
            while let Some(slot) = self.slot_of(i, task) {
                let node = &mut self.nodes[i];
                node.stop(slot);
                if !node.hibernated {
                    node.last_end = node.last_end.max(now);
                    self.free_at(now, i, slot);
                }
            }
        }
    }

    /// The task VM `vm` takes next, if it should take one at `now`: yes
    /// within the slot it has paid for; past it, only if the others cannot
    /// end the queue by the occupation limit without it (else it drains).
    /// A spot VM takes no task that runs again on demand only: it leaves
    /// those queued, and the fleet grows for them.
    pub fn takes_next(&mut self, now: u64, vm: usize, terms: Terms) -> Option<u32> {
        let now = self.at(now);
        let on_demand = self.nodes[vm].market == Market::OnDemand;
        if !on_demand && self.queued_reruns() > 0 {
            self.grow(now, terms);
        }
        let &next = self
            .queue
            .iter()
            .find(|&&id| on_demand || !self.on_demand_only(id))?;
        let per = terms
            .clock
            .periods(self.mean_s * terms.vm_type(&self.nodes[vm]).slowdown);
        self.keeps_working(now, vm, per, terms).then_some(next)
    }

    /// Whether VM `vm` runs a task expected to take `per` more periods.
    fn keeps_working(&mut self, now: u64, vm: usize, per: u64, terms: Terms) -> bool {
        let node = &self.nodes[vm];
        if now + per <= node.paid_until(now, terms.clock) {
            true
        } else if node.draining {
            false
        } else if self.ends_queue(now, self.limit, Some(vm), terms) {
            self.nodes[vm].draining = true;
            self.changes.push(Change::Drained { vm });
            false
        } else {
            true
        }
    }

    /// Task `task` started at `now` on VM `vm`, in slot `slot` if given
    /// (the simulator's), else the first free one (a live machine may run
    /// more at once than its type's slots say: it gets another). The task
    /// leaves the queue.
    pub fn start(
        &mut self,
        now: u64,
        vm: usize,
        slot: Option<usize>,
        task: u32,
        terms: Terms,
    ) -> usize {
        let now = self.at(now);
        if self.nodes[vm].hibernated {
            // A task starting on it says it runs again.
            self.resume(now, vm, terms);
        }
        if let Some(at) = self.queue.iter().position(|&queued| queued == task) {
            self.queue.remove(at);
        }
        let node = &mut self.nodes[vm];
        let slot = slot
            .or_else(|| node.running.iter().position(Option::is_none))
            .unwrap_or_else(|| {
                node.running.push(None);
                node.generation.push(0);
                node.running.len() - 1
            });
        node.running[slot] = Some(Run {
            task,
            since: now,
            resumed: false,
        });
        node.booted = true;
        slot
    }

    /// The slot of VM `vm` that runs `task`.
    pub fn slot_of(&self, vm: usize, task: u32) -> Option<usize> {
        self.nodes[vm]
            .running
            .iter()
            .position(|run| run.is_some_and(|r| r.task == task))
    }

    /// The run in slot `slot` of VM `vm` ended at `now`, its task done, it
    /// having taken `base_s` on the baseline core (`None`: as long as it
    /// ran, by the VM's slowdown): learn from it, and stop the task's other
    /// runs (suspended by a hibernation, or started again elsewhere).
    /// Returns the run.
    pub fn end(
        &mut self,
        now: u64,
        vm: usize,
        slot: usize,
        base_s: Option<f64>,
        terms: Terms,
    ) -> Option<Run> {
        let now = self.at(now);
        let run = self.nodes[vm].running[slot].take()?;
        let id = run.task;
        let period_s = terms.clock.period_s;
        let slowdown = terms.vm_type(&self.nodes[vm]).slowdown;
        self.ended
            .push(base_s.unwrap_or(((now.saturating_sub(run.since)) * period_s) as f64 / slowdown));
        self.nodes[vm].last_end = now;
        self.queue.retain(|&queued| queued != id);
        self.stopped.remove(&id);
        for i in 0..self.nodes.len() {
            for other in 0..self.nodes[i].running.len() {
                if self.nodes[i].running[other].is_some_and(|run| run.task == id) {
                    let node = &mut self.nodes[i];
                    node.stop(other);
                    if !node.hibernated {
                        // It ran until now, and its slot takes the next task.
                        node.last_end = node.last_end.max(now);
                        self.free_at(now, i, other);
                    }
                }
            }
        }
        let ages: Vec<f64> =
            self.nodes
                .iter()
                .filter(|n| !n.hibernated)
                .flat_map(|n| {
                    let slowdown = terms.vm_type(n).slowdown;
                    n.running.iter().flatten().map(move |run| {
                        (now.saturating_sub(run.since) * period_s) as f64 / slowdown
                    })
                })
                .collect();
        if let Some(mean) = km_mean(&self.ended, &ages) {
            self.mean_s = mean;
        }
        Some(run)
    }

    /// A run of `task` that was not the fleet's to count (a live attempt
    /// that failed, or was killed) stopped on VM `vm`: its task goes back
    /// to the head of the queue unless another run of it goes on.
    pub fn lost(&mut self, now: u64, vm: usize, task: u32) {
        let now = self.at(now);
        let Some(slot) = self.slot_of(vm, task) else {
            return;
        };
        self.nodes[vm].stop(slot);
        self.nodes[vm].last_end = self.nodes[vm].last_end.max(now);
        if !self.runs_elsewhere(task) && !self.queue.contains(&task) {
            self.queue.push_front(task);
        }
    }

    fn runs_elsewhere(&self, task: u32) -> bool {
        self.nodes
            .iter()
            .any(|n| !n.hibernated && n.running.iter().flatten().any(|run| run.task == task))
    }

    /// Buy VMs for the tasks the fleet cannot end in time, unless VMs
    /// bought before are still booting: by `grow_by`, or by the deadline
    /// once `grow_by` is too close for a boot.
    pub fn grow(&mut self, now: u64, terms: Terms) {
        let now = self.at(now);
        if self.queue.is_empty() || self.nodes.iter().any(|n| n.ready > now && !n.hibernated) {
            return;
        }
        let horizon = if now + self.boot < self.grow_by {
            self.grow_by
        } else {
            self.deadline
        };
        if self.ends_queue(now, horizon, None, terms) {
            return;
        }
        // The reruns on-demand VMs cannot take, on demand; then the tasks
        // the whole fleet cannot take, on the spot market.
        let reruns = self.queued_reruns();
        let on_demand_spare = self.spare_on(now, horizon, None, true, terms).floor() as usize;
        let all_spare = self.spare(now, horizon, None, terms).floor() as usize;
        let over_reruns = reruns.saturating_sub(on_demand_spare);
        // The rest take the spot VMs' spare, and what on-demand VMs leave.
        let over_rest = (self.queue.len() - reruns).saturating_sub(
            all_spare.saturating_sub(on_demand_spare) + on_demand_spare.saturating_sub(reruns),
        );
        let planned = |id: u32| Task {
            base_s: self.mean_s,
            ..self.task(id)
        };
        let (mut on_demand, mut spot) = (Vec::new(), Vec::new());
        for &id in self.queue.iter().rev() {
            if self.on_demand_only(id) {
                if on_demand.len() < over_reruns {
                    on_demand.push(planned(id));
                }
            } else if spot.len() < over_rest {
                spot.push(planned(id));
            }
        }
        let clock = terms.clock;
        let priced = terms
            .catalogue
            .priced_at(terms.start_us + now * clock.period_s * 1_000_000);
        // On-demand VMs do not hibernate: their runs may end by the
        // deadline itself.
        let bought: Vec<_> = [(on_demand, self.deadline, false), (spot, horizon, true)]
            .into_iter()
            .filter(|(over, ..)| !over.is_empty())
            .flat_map(|(over, by, spot)| {
                let window = by.saturating_sub(now + self.boot).max(1);
                primary_map(&over, &priced, clock, window, 1.0, spot).vms
            })
            .collect();
        for vm in bought {
            let slots = task_slots(&terms.catalogue.types[vm.kind], &self.tasks);
            let ready = now + self.boot;
            self.nodes
                .push(Node::new(vm.kind, vm.market, now, ready, slots));
            let j = self.nodes.len() - 1;
            self.nodes[j].booted = true;
            self.nodes[j].added = true;
            self.changes.push(Change::Bought { vm: j });
            for slot in 0..slots {
                self.free_at(ready, j, slot);
            }
        }
    }

    /// VM `vm`, bought on the spot market, could not be had there (no
    /// zone had capacity): it is bought on demand instead.
    pub fn bought_on_demand(&mut self, vm: usize) {
        self.nodes[vm].market = Market::OnDemand;
    }

    fn task(&self, id: u32) -> Task {
        *self
            .tasks
            .iter()
            .find(|t| t.id == id)
            .expect("a task of the bag")
    }

    /// VM `vm` hibernates at `now` (or is gone: it then never resumes).
    /// Hibernation keeps its memory, so its running tasks are suspended,
    /// not lost; but when it resumes is not known, so each also goes back
    /// to the head of the queue, to start over wherever a core frees
    /// first (on demand only, past its first stop or once the time left
    /// holds fewer than [`RUNS_LEFT`] runs of it on the fastest type, at
    /// the runtime expected of a task that ran as long as it was seen to),
    /// and the fleet grows if the rest cannot end them. An idle VM
    /// hibernates too: it takes no task until it resumes. Returns how many
    /// runs it suspended; `None`, and nothing changes, if it was
    /// hibernated already.
    pub fn hibernate(&mut self, now: u64, vm: usize, terms: Terms) -> Option<usize> {
        let now = self.at(now);
        let node = &mut self.nodes[vm];
        if node.hibernated {
            return None;
        }
        let busy = node.running.iter().any(Option::is_some);
        node.hibernated = true;
        node.stopped_at = now;
        // Billed while it ran, or until its last task ended if idle.
        let until = if busy {
            now
        } else {
            node.last_end
                .clamp(node.active_since, now.max(node.active_since))
        };
        node.active += until.saturating_sub(node.active_since);
        let mut suspended = Vec::new();
        let mut done = Vec::new();
        for slot in 0..node.running.len() {
            // Its pending end, or offer, is void: a resume offers it anew.
            node.generation[slot] += 1;
            if let Some(run) = node.running[slot] {
                suspended.push(run.task);
                done.push(now.saturating_sub(run.since));
            }
        }
        let suspended_count = suspended.len();
        let slowdown = terms.vm_type(&self.nodes[vm]).slowdown;
        let fastest = terms
            .catalogue
            .types
            .iter()
            .map(|t| t.slowdown)
            .fold(f64::INFINITY, f64::min);
        for (&id, &periods) in suspended.iter().zip(&done) {
            let ran_s = (periods * terms.clock.period_s) as f64 / slowdown;
            let mut stopped = self.stopped.get(&id).copied().unwrap_or_default();
            stopped.times += 1;
            stopped.ran_s = stopped.ran_s.max(ran_s);
            let run = terms
                .clock
                .periods(self.expected_beyond(stopped.ran_s) * fastest);
            stopped.on_demand |=
                stopped.times > SPOT_RERUNS || now + self.boot + RUNS_LEFT * run > self.deadline;
            self.stopped.insert(id, stopped);
        }
        for id in suspended {
            // A task already started again elsewhere is not queued twice.
            if !self.runs_elsewhere(id) {
                self.queue.push_front(id);
            }
        }
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
        self.grow(now, terms);
        Some(suspended_count)
    }

    /// VM `vm` resumes at `now`, billed from now. If the rest of the fleet
    /// ends the bag by the occupation limit without it, it drains at once
    /// and its suspended runs stop: their copies stand. Otherwise each
    /// suspended task goes on from where it stopped, and its copy leaves
    /// the queue, unless the copy started elsewhere has run longer, or
    /// going on would keep the VM past its paid slot when the fleet can do
    /// without it; its other slots take tasks. Returns the runs that go
    /// on, by slot.
    pub fn resume(&mut self, now: u64, vm: usize, terms: Terms) -> Vec<(usize, Run)> {
        let now = self.at(now);
        if !self.nodes[vm].hibernated {
            return Vec::new();
        }
        let paused = now - self.nodes[vm].stopped_at;
        let node = &mut self.nodes[vm];
        node.hibernated = false;
        node.active_since = now;
        // One still booting boots on.
        node.ready = node.ready.max(now);
        let ready = node.ready;
        let slowdown = terms.vm_type(&self.nodes[vm]).slowdown;
        let period_s = terms.clock.period_s as f64;
        // The fleet moved its tasks on while it slept: if the rest end the
        // bag by the occupation limit without it, it drains at once.
        let suspended = self.nodes[vm].running.iter().any(Option::is_some);
        if !self.nodes[vm].draining
            && (suspended || !self.queue.is_empty())
            && self.ends_queue(now, self.limit, Some(vm), terms)
        {
            self.nodes[vm].draining = true;
            self.changes.push(Change::Drained { vm });
        }
        let mut going_on = Vec::new();
        for slot in 0..self.nodes[vm].running.len() {
            let Some(Run {
                task: id, since, ..
            }) = self.nodes[vm].running[slot]
            else {
                self.free_at(ready, vm, slot);
                continue;
            };
            // Progress in seconds on the baseline core, here and in the
            // copy furthest on.
            let done_here =
                self.nodes[vm].stopped_at.saturating_sub(since) as f64 * period_s / slowdown;
            let done_elsewhere = self
                .nodes
                .iter()
                .enumerate()
                .filter(|&(i, n)| i != vm && !n.hibernated)
                .flat_map(|(_, n)| {
                    let slowdown = terms.vm_type(n).slowdown;
                    n.running
                        .iter()
                        .flatten()
                        .filter(move |run| run.task == id)
                        .map(move |run| now.saturating_sub(run.since) as f64 * period_s / slowdown)
                })
                .fold(None, |best: Option<f64>, x| {
                    Some(best.map_or(x, |b| b.max(x)))
                });
            let left = terms
                .clock
                .periods((self.mean_s - done_here).max(0.0) * slowdown);
            if done_elsewhere.is_some_and(|there| there >= done_here)
                || self.nodes[vm].draining
                || !self.keeps_working(now, vm, left.max(1), terms)
            {
                // The copy is further on, or the VM is not needed past
                // what it has paid for: this run stops.
                self.nodes[vm].running[slot] = None;
                self.free_at(ready, vm, slot);
                continue;
            }
            if let Some(at) = self.queue.iter().position(|&queued| queued == id) {
                self.queue.remove(at);
            }
            let run = Run {
                task: id,
                since: since + paused,
                resumed: true,
            };
            self.nodes[vm].running[slot] = Some(run);
            going_on.push((slot, run));
        }
        going_on
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static CLOCK: Clock = Clock::MINUTE_PERIODS_HOUR_SLOTS;

    fn terms(catalogue: &Catalogue) -> Terms<'_> {
        Terms {
            catalogue,
            clock: &CLOCK,
            start_us: 0,
        }
    }

    /// Four tasks of 50 GB, 2 h each (20 minutes on the fastest VM): one
    /// at a time per VM, two VMs of the map within the 50-minute limit of
    /// a 100-minute deadline; the fleet of that map.
    fn four_tasks(catalogue: &Catalogue) -> Fleet {
        let tasks: Vec<Task> = (0..4)
            .map(|id| Task {
                id,
                base_s: 2.0 * 3600.0,
                memory_gb: 50.0,
            })
            .collect();
        let maps = Maps::draw(&tasks, catalogue, &CLOCK, 100, 0.5, true);
        assert_eq!(maps.primary.vms.len(), 2, "{maps:?}");
        Fleet::new(&maps, &tasks, terms(catalogue), 2.0 * 3600.0)
    }

    /// An idle VM that hibernates (or leaves) takes no task and counts
    /// for no spare capacity until it resumes; a busy one's tasks wait
    /// again; a second hibernation changes nothing.
    #[test]
    fn an_idle_vm_that_hibernates_no_longer_counts() {
        let catalogue = Catalogue::teylo_2018();
        let terms = terms(&catalogue);
        let mut fleet = four_tasks(&catalogue);
        let next = fleet.takes_next(0, 0, terms).unwrap();
        fleet.start(0, 0, Some(0), next, terms);
        let spare = fleet.spare(1, 50, None, terms);
        // VM 1, idle, hibernates: its share of the spare is gone.
        assert_eq!(fleet.hibernate(1, 1, terms), Some(0));
        assert!(fleet.nodes()[1].hibernated);
        assert!(fleet.spare(1, 50, None, terms) < spare);
        assert_eq!(fleet.hibernate(2, 1, terms), None);
        // VM 0, busy, hibernates: its task waits again.
        assert_eq!(fleet.hibernate(3, 0, terms), Some(1));
        assert_eq!(fleet.queued(), 4);
        // A start on it says it runs again; an earlier time after a later
        // one is taken at the later.
        fleet.start(10, 0, None, next, terms);
        assert!(!fleet.nodes()[0].hibernated);
        assert_eq!(fleet.queued(), 3);
        let slot = fleet.slot_of(0, next).unwrap();
        assert!(fleet.end(5, 0, slot, None, terms).is_some());
    }

    /// A task a hibernation stopped early may run again on the spot
    /// market; stopped again, it runs again on demand only: spot VMs leave
    /// it queued and take the other tasks, and the fleet buys an on-demand
    /// VM for it, which takes it.
    #[test]
    fn a_task_stopped_again_runs_again_on_demand_only() {
        let catalogue = Catalogue::teylo_2018();
        let terms = terms(&catalogue);
        let mut fleet = four_tasks(&catalogue);
        assert!(fleet.nodes().iter().all(|n| n.market == Market::Spot));
        let first = fleet.takes_next(0, 0, terms).unwrap();
        fleet.start(0, 0, Some(0), first, terms);
        fleet.hibernate(1, 0, terms);
        assert!(fleet.on_demand_reruns().is_empty());
        assert_eq!(fleet.takes_next(1, 1, terms), Some(first));
        fleet.start(1, 1, Some(0), first, terms);
        fleet.hibernate(2, 1, terms);
        assert_eq!(fleet.on_demand_reruns(), vec![first]);
        // The VMs bought at the first stop, all on the spot market, boot:
        // the first to take a task takes another, and the fleet buys an
        // on-demand VM for the rerun.
        let market = |fleet: &Fleet, vm: usize| fleet.nodes()[vm].market;
        let spot = (2..fleet.nodes().len())
            .find(|&vm| market(&fleet, vm) == Market::Spot)
            .expect("spot VMs bought at the first stop");
        assert!((2..fleet.nodes().len()).all(|vm| market(&fleet, vm) == Market::Spot));
        let ready = fleet.nodes()[spot].ready();
        let next = fleet.takes_next(ready, spot, terms).unwrap();
        assert_ne!(next, first);
        fleet.start(ready, spot, Some(0), next, terms);
        let on_demand = (2..fleet.nodes().len())
            .find(|&vm| market(&fleet, vm) == Market::OnDemand)
            .expect("an on-demand VM for the rerun");
        let ready = fleet.nodes()[on_demand].ready();
        assert_eq!(fleet.takes_next(ready, on_demand, terms), Some(first));
        // Its end forgets it.
        let slot = fleet.start(ready, on_demand, Some(0), first, terms);
        fleet.end(ready + 20, on_demand, slot, None, terms).unwrap();
        assert!(fleet.on_demand_reruns().is_empty());
    }

    /// Stopped late, when the time left no longer holds three runs of it
    /// on the fastest type, a task runs again on demand only at its first
    /// stop.
    #[test]
    fn a_task_stopped_late_runs_again_on_demand_only() {
        let catalogue = Catalogue::teylo_2018();
        let terms = terms(&catalogue);
        let mut fleet = four_tasks(&catalogue);
        let first = fleet.takes_next(0, 0, terms).unwrap();
        // 2 h on the baseline core: 20 periods on the fastest type, three
        // runs and a boot past the deadline of 100 from 39 on.
        fleet.start(30, 0, Some(0), first, terms);
        fleet.hibernate(40, 0, terms);
        assert_eq!(fleet.on_demand_reruns(), vec![first]);
        assert_ne!(fleet.takes_next(40, 1, terms), Some(first));
    }

    /// A machine taking its first task of the bag plays the VM of its type
    /// due to be ready nearest then (one bought late, once booted, rather
    /// than one of the map's that no machine has played since the start),
    /// of its market where one is left, and the VM then counts on its
    /// market; it keeps playing it.
    #[test]
    fn a_machine_plays_the_vm_of_its_type_due_nearest_its_first_task() {
        let catalogue = Catalogue::teylo_2018();
        let terms = terms(&catalogue);
        let mut fleet = four_tasks(&catalogue);
        let kind = fleet.nodes()[0].kind;
        let name = catalogue.types[kind].name.as_str();
        let same: Vec<usize> = (0..fleet.nodes().len())
            .filter(|&j| fleet.nodes()[j].kind == kind)
            .collect();
        // A VM of the same type, bought at 20 and booted at 22.
        let mut bought = Node::new(kind, Market::Spot, 20, 22, 1);
        bought.added = true;
        fleet.nodes.push(bought);
        let bought = fleet.nodes().len() - 1;
        assert_eq!(
            fleet.bind(22, 7, Some((name, Market::Spot)), terms),
            Some(bought)
        );
        assert_eq!(fleet.bind(23, 7, None, terms), Some(bought));
        // The map's VMs of the type, then none.
        for (&j, machine) in same.iter().zip(8..) {
            let on_demand = Some((name, Market::OnDemand));
            assert_eq!(fleet.bind(24, machine, on_demand, terms), Some(j));
            assert_eq!(fleet.nodes()[j].market, Market::OnDemand);
        }
        assert_eq!(fleet.bind(25, 99, Some((name, Market::Spot)), terms), None);
        assert_eq!(fleet.vm_of(7), Some(bought));
        assert_eq!(fleet.machines().count(), same.len() + 1);
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
}
