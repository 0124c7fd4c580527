//! Teylo et al.'s scheduler of deadline jobs on hibernating spot VMs, live
//! ([`Deadlines`]): the maps of [`crate::deadlines`] drawn from jobcast's
//! estimates, and the `start_bkp` clock of every hibernated VM.
//!
//! - **Plan.** A job with a deadline, of independent tasks, gets its maps
//!   once an estimate with quantiles is known (the driving policy's, else
//!   3Sigma's): every task at the estimate's quantile
//!   (`engine.deadlines.quantile`, lowered to the highest whose maps are
//!   valid, else `p50`), the deadline counted from that moment. The
//!   primary map is published (`plan`); a job no map can be drawn for
//!   gets `unplanned` and why.
//! - **Hibernation.** When a VM running a planned job's tasks hibernates,
//!   its recovery group is Eq. 2 on the primary map: the tasks running on
//!   the VM, and those the map put after them on their cores that have not
//!   started elsewhere. Algorithm 2 places the group on on-demand VMs with
//!   the time left (the latest estimate, boot included); Eq. 3 gives
//!   `start_bkp`. The group waits (`wait`) until then, or migrates at once
//!   when it is already due.
//! - **Due.** Event time reaching a waiting group's `start_bkp` with its
//!   VM still hibernated migrates it (`migrate`); a resume first ends the
//!   wait (`resume`); a VM removed while hibernated migrates its group at
//!   once (its tasks are lost).
//!
//! - **Elastic fleet** (`engine.deadlines.fleet = "elastic"`). Instead of
//!   the recovery groups, the job's VMs follow
//!   [`crate::deadlines::fleet`], the fleet the simulator measures: the
//!   map's VMs, bound to the machines its tasks run on (by VM type, where
//!   the machine's events give one), then `grow` (buy these VMs) when the
//!   fleet would end the bag too late, and `drain` (this machine takes no
//!   more tasks) when it ends in time without a VM about to open a new
//!   billing slot. Its time is the maps' periods; the runtimes it learns
//!   are the tasks' own, by their VM's slowdown.
//!
//! Each decision has a version that grows by one per job, apart from the
//! job's runtime decisions; the job's record of plan and recoveries
//! ([`DeadlineRecord`]) rides with it, for the store and `GET /jobs/{id}`.

use std::collections::{BTreeMap, BTreeSet};

use jobcast_ingest::event::JobSubmitted;
use serde::{Deserialize, Serialize};

use crate::deadlines::{
    Catalogue, Change, Clock, Fleet, Maps, Market, PrimaryMap, Task, Terms, Vm,
};
use crate::deadlines::{place_group, recovery_group};
use crate::decision::{Estimate, PolicyKind, Quantiles};
use crate::preemption::hints::hibernation_hint;

use super::config::{DeadlineSettings, FleetMode};
use super::effects::{Effects, Output};
use super::records::{
    DeadlineAction, DeadlineDecision, DeadlinePlan, DeadlineRecord, FleetChange, FleetRecord,
    FleetVm, PlannedTask, PlannedVm, Recovery, RecoveryState,
};
use super::running::RunningTasks;

const US: u64 = 1_000_000;

/// The deadline jobs, their maps and the hibernated VMs' recovery groups.
#[derive(Debug)]
pub(super) struct Deadlines {
    planner: Option<Planner>,
    state: DeadlineState,
    /// The elastic jobs whose fleets each machine plays a VM of, so that a
    /// machine's hibernation, resume or removal reaches only those; drawn
    /// from the fleets, so not in the snapshot.
    fleets_of: BTreeMap<u64, BTreeSet<u64>>,
}

/// The settings, checked.
#[derive(Debug)]
struct Planner {
    catalogue: Catalogue,
    clock: Clock,
    /// Index into [`Quantiles::NAMES`] of the highest quantile planned at.
    quantile: usize,
    time_limit: f64,
    memory_gb_per_unit: f64,
    max_tasks: u32,
    elastic: bool,
}

impl Planner {
    fn period_us(&self) -> u64 {
        self.clock.period_s * US
    }

    /// Periods of the maps to µs.
    fn us(&self, periods: u64) -> u64 {
        periods * self.period_us()
    }

    /// The terms of a fleet whose job was planned at `planned_us`.
    fn terms(&self, planned_us: u64) -> Terms<'_> {
        Terms {
            catalogue: &self.catalogue,
            clock: &self.clock,
            start_us: planned_us,
        }
    }

    /// `now_us` in the maps' periods from `planned_us`.
    fn periods_since(&self, planned_us: u64, now_us: u64) -> u64 {
        now_us.saturating_sub(planned_us) / self.period_us()
    }
}

/// What [`Deadlines`] saves in a snapshot.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct DeadlineState {
    /// Every live job with a deadline that was planned or refused a plan.
    jobs: BTreeMap<u64, DeadlineJob>,
    /// Running attempts of planned jobs' tasks.
    running: RunningTasks,
    /// Recovery groups waiting for their `start_bkp`: (`start_backup_us`,
    /// job, machine).
    waiting: BTreeSet<(u64, u64, u64)>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct DeadlineJob {
    record: DeadlineRecord,
    /// The primary map, its periods counted from `planned_us`; none when
    /// unplanned.
    primary: Option<PrimaryMap>,
    planned_us: u64,
    /// Memory each task holds, GB.
    memory_gb: f64,
    finished: BTreeSet<u32>,
    /// With an elastic fleet: the fleet.
    fleet: Option<Fleet>,
}

impl Deadlines {
    /// Off unless `settings.enabled` (checked by the caller).
    pub(super) fn new(settings: &DeadlineSettings) -> Self {
        let planner = settings.enabled.then(|| Planner {
            catalogue: settings.catalogue.clone(),
            clock: settings.clock(),
            quantile: settings.quantile_index().expect("checked by Engine::new"),
            time_limit: settings.time_limit,
            memory_gb_per_unit: settings.memory_gb_per_unit,
            max_tasks: settings.max_tasks,
            elastic: settings.fleet == FleetMode::Elastic,
        });
        Deadlines {
            planner,
            state: DeadlineState::default(),
            fleets_of: BTreeMap::new(),
        }
    }

    /// Whether the job `job_id` with deadline `deadline_us` still waits
    /// for its maps.
    pub(super) fn wants_plan(&self, job_id: u64, deadline_us: Option<u64>) -> bool {
        self.planner.is_some() && deadline_us.is_some() && !self.state.jobs.contains_key(&job_id)
    }

    /// The record of a job's plan and recoveries, while it is live.
    pub(super) fn record(&self, job_id: u64) -> Option<&DeadlineRecord> {
        self.state.jobs.get(&job_id).map(|j| &j.record)
    }

    /// Draw the maps of `job` (which [`Self::wants_plan`]) at `now_us` from
    /// `estimate` (the policy's whose it is); without quantiles, wait for
    /// a later one.
    pub(super) fn plan(
        &mut self,
        job: &JobSubmitted,
        estimate: Option<(PolicyKind, &Estimate)>,
        now_us: u64,
        effects: &mut Effects,
    ) {
        let Some(planner) = &self.planner else {
            return;
        };
        let Some(deadline_us) = job.deadline_us else {
            return;
        };
        let refusal = if job.stages.is_some() {
            Some("a DAG job: its tasks are not independent".to_owned())
        } else if job.num_tasks > planner.max_tasks {
            Some(format!(
                "{} tasks, more than engine.deadlines.max_tasks ({})",
                job.num_tasks, planner.max_tasks
            ))
        } else if deadline_us <= now_us {
            Some("the deadline has passed".to_owned())
        } else {
            None
        };
        let memory_gb = job.mem_request * planner.memory_gb_per_unit;
        let mut entry = DeadlineJob {
            record: DeadlineRecord {
                job_id: job.job_id,
                deadline_us,
                version: 0,
                plan: None,
                reason: None,
                recoveries: Vec::new(),
                fleet: None,
            },
            primary: None,
            planned_us: now_us,
            memory_gb,
            finished: BTreeSet::new(),
            fleet: None,
        };
        if let Some(reason) = refusal {
            entry.record.reason = Some(reason.clone());
            self.publish(
                entry,
                DeadlineAction::Unplanned,
                now_us,
                None,
                None,
                effects,
            );
            return;
        }
        let Some((policy, estimate)) = estimate else {
            return;
        };
        let Some(quantiles) = estimate.quantiles else {
            return;
        };
        let levels = quantiles.mean_task_runtime_us.to_array();
        let deadline = (deadline_us - now_us) / planner.period_us();
        // The spot prices now, of the catalogue's series where it has one.
        let catalogue = planner.catalogue.priced_at(now_us);
        let tasks_at = |level: usize| -> Vec<Task> {
            (0..job.num_tasks)
                .map(|id| Task {
                    id,
                    base_s: levels[level] / 1e6,
                    memory_gb,
                })
                .collect()
        };
        let draw = |level: usize| {
            let tasks = tasks_at(level);
            Maps::draw(
                &tasks,
                &catalogue,
                &planner.clock,
                deadline,
                planner.time_limit,
                true,
            )
        };
        // The highest quantile whose maps are valid, else the median's.
        let (level, maps) = (0..=planner.quantile)
            .rev()
            .map(|level| (level, draw(level)))
            .find(|(_, maps)| maps.valid())
            .unwrap_or_else(|| (0, draw(0)));
        let planned = |vm: &Vm| PlannedVm {
            vm_type: planner.catalogue.types[vm.kind].name.clone(),
            market: vm.market,
            tasks: vm
                .placements
                .iter()
                .map(|p| PlannedTask {
                    task_index: p.task,
                    start_us: now_us + planner.us(p.start),
                    end_us: now_us + planner.us(p.end),
                })
                .collect(),
        };
        entry.record.plan = Some(DeadlinePlan {
            policy,
            quantile: Quantiles::NAMES[level].to_owned(),
            task_runtime_us: levels[level].round() as u64,
            valid: maps.valid(),
            cost_usd: maps.primary.cost(&catalogue, &planner.clock),
            end_us: now_us + planner.us(maps.primary.makespan()),
            vms: maps.primary.vms.iter().map(planned).collect(),
        });
        if planner.elastic {
            let mut fleet = Fleet::new(
                &maps,
                &tasks_at(level),
                planner.terms(now_us),
                levels[level] / 1e6,
            );
            fleet.take_changes();
            entry.fleet = Some(fleet);
        }
        entry.primary = Some(maps.primary);
        self.publish(entry, DeadlineAction::Plan, now_us, None, None, effects);
    }

    /// A task's attempt started at `now_us` on `machine_id`: a VM of a
    /// type, preemptible or not, if its events said.
    pub(super) fn task_started(
        &mut self,
        task: (u64, u32),
        machine_id: Option<u64>,
        vm: Option<(&str, bool)>,
        now_us: u64,
        effects: &mut Effects,
    ) {
        if !self.planned(task.0) {
            return;
        }
        // The attempt it replaces, if any, stops.
        let previous = self.state.running.machine_of(task);
        match machine_id {
            Some(machine_id) => self.state.running.start(task, machine_id),
            None => {
                self.state.running.end(task);
            }
        }
        let (Some(planner), Some(job)) = (&self.planner, self.state.jobs.get_mut(&task.0)) else {
            return;
        };
        let Some(fleet) = &mut job.fleet else {
            return;
        };
        let terms = planner.terms(job.planned_us);
        let now = planner.periods_since(job.planned_us, now_us);
        if let Some(vm) = previous
            .filter(|&m| Some(m) != machine_id)
            .and_then(|m| fleet.vm_of(m))
        {
            fleet.lost(now, vm, task.1);
        }
        let Some(machine_id) = machine_id else {
            let changes = fleet.take_changes();
            self.fleet_changed(task.0, changes, now_us, effects);
            return;
        };
        // A machine beyond the fleet's VMs joins it, if its type is in the
        // catalogue; else it runs the task outside the fleet, which counts
        // the task queued until it ends.
        let vm = vm.map(|(vm_type, preemptible)| {
            let market = if preemptible {
                Market::Spot
            } else {
                Market::OnDemand
            };
            (vm_type, market)
        });
        let bound = fleet.bind(now, machine_id, vm, terms).or_else(|| {
            let (vm_type, market) = vm?;
            fleet.adopt(now, machine_id, vm_type, market, terms)
        });
        if let Some(vm) = bound {
            self.fleets_of.entry(machine_id).or_default().insert(task.0);
            if fleet.slot_of(vm, task.1).is_none() {
                // On a hibernated VM, it says the VM runs again: its
                // resume may drain it.
                fleet.start(now, vm, None, task.1, terms);
            }
        }
        let changes = fleet.take_changes();
        self.fleet_changed(task.0, changes, now_us, effects);
    }

    /// A task's running attempt ended at `now_us`; `runtime_us`, how long
    /// it ran, if it finished the task. An elastic fleet learns from it,
    /// and may grow or drain.
    pub(super) fn task_ended(
        &mut self,
        task: (u64, u32),
        runtime_us: Option<u64>,
        now_us: u64,
        effects: &mut Effects,
    ) {
        let finished = runtime_us.is_some();
        let machine_id = self.state.running.end(task);
        let Some(mut job) = self.state.jobs.remove(&task.0) else {
            return;
        };
        if finished {
            job.finished.insert(task.1);
        }
        let changes = match (&self.planner, &mut job.fleet) {
            (Some(planner), Some(fleet)) => {
                let terms = planner.terms(job.planned_us);
                let now = planner.periods_since(job.planned_us, now_us);
                match machine_id.and_then(|m| fleet.vm_of(m)) {
                    Some(vm) if finished => {
                        if let Some(slot) = fleet.slot_of(vm, task.1) {
                            // On the baseline core, by the VM's slowdown.
                            let slowdown = terms.catalogue.types[fleet.nodes()[vm].kind].slowdown;
                            let base_s = runtime_us.map(|us| us as f64 / 1e6 / slowdown);
                            fleet.end(now, vm, slot, base_s, terms);
                        } else {
                            fleet.done_elsewhere(now, task.1, None);
                        }
                        fleet.grow(now, terms);
                        // The freed core would take the next task: drain
                        // its VM if the rest end the bag in time.
                        fleet.takes_next(now, vm, terms);
                    }
                    // A copy that stops once its task is done elsewhere.
                    Some(_) if job.finished.contains(&task.1) => {}
                    Some(vm) => {
                        fleet.lost(now, vm, task.1);
                        fleet.grow(now, terms);
                    }
                    None if finished => fleet.done_elsewhere(now, task.1, None),
                    None => {}
                }
                fleet.take_changes()
            }
            _ => Vec::new(),
        };
        self.state.jobs.insert(task.0, job);
        self.fleet_changed(task.0, changes, now_us, effects);
    }

    /// A task of job `job_id` that finished before the job was planned
    /// (in `runtime_us`, on a VM of type `vm_type` if its machine's events
    /// gave one): an elastic fleet counts it done, and learns its runtime
    /// on the baseline core, by that type's slowdown (the measured runtime
    /// where the type is not in the catalogue).
    pub(super) fn finished_before(
        &mut self,
        task: (u64, u32),
        runtime_us: u64,
        vm_type: Option<&str>,
    ) {
        let (Some(planner), Some(job)) = (&self.planner, self.state.jobs.get_mut(&task.0)) else {
            return;
        };
        job.finished.insert(task.1);
        if let Some(fleet) = &mut job.fleet {
            let slowdown = vm_type
                .and_then(|name| planner.catalogue.kind(name))
                .map_or(1.0, |kind| planner.catalogue.types[kind].slowdown);
            fleet.done_elsewhere(0, task.1, Some(runtime_us as f64 / 1e6 / slowdown));
            fleet.take_changes();
        }
    }

    /// Publish what the elastic fleet of `job_id` changed at `now_us`: one
    /// `grow` for the VMs it bought, a `drain` for each VM it drained.
    fn fleet_changed(
        &mut self,
        job_id: u64,
        changes: Vec<Change>,
        now_us: u64,
        effects: &mut Effects,
    ) {
        let Some(planner) = &self.planner else {
            return;
        };
        let mut buy = Vec::new();
        let mut drains = Vec::new();
        {
            let Some(job) = self.state.jobs.get(&job_id) else {
                return;
            };
            let Some(fleet) = &job.fleet else {
                return;
            };
            for change in changes {
                match change {
                    Change::Bought { vm } => buy.push(fleet_vm(planner, job.planned_us, fleet, vm)),
                    Change::Drained { vm } => drains.extend(fleet.nodes()[vm].machine_id),
                    Change::Free { .. } => {}
                }
            }
        }
        let decisions = (!buy.is_empty())
            .then_some((DeadlineAction::Grow, buy, None))
            .into_iter()
            .chain(
                drains
                    .into_iter()
                    .map(|m| (DeadlineAction::Drain, Vec::new(), Some(m))),
            );
        for (action, buy, drain_machine_id) in decisions {
            let job = self.state.jobs.remove(&job_id).expect("looked up above");
            let fleet = job.fleet.as_ref().expect("looked up above");
            let change = FleetChange {
                buy,
                drain_machine_id,
                queued: fleet.queued() as u32,
                task_runtime_us: (fleet.mean_s() * 1e6).round() as u64,
                on_demand_tasks: fleet.on_demand_reruns(),
            };
            self.publish(job, action, now_us, None, Some(change), effects);
        }
    }

    fn planned(&self, job_id: u64) -> bool {
        self.state
            .jobs
            .get(&job_id)
            .is_some_and(|j| j.primary.is_some())
    }

    /// A job ended, or was given up on: nothing of it waits any more.
    pub(super) fn job_ended(&mut self, job_id: u64) {
        let Some(job) = self.state.jobs.remove(&job_id) else {
            return;
        };
        for machine_id in job.fleet.iter().flat_map(Fleet::machines) {
            if let Some(jobs) = self.fleets_of.get_mut(&machine_id) {
                jobs.remove(&job_id);
                if jobs.is_empty() {
                    self.fleets_of.remove(&machine_id);
                }
            }
        }
        self.state.running.end_job(job_id);
        self.state.waiting.retain(|&(_, job, _)| job != job_id);
    }

    /// `machine_id` hibernated at `now_us`: each planned job running tasks
    /// on it gets its recovery group, placed with the job's latest
    /// estimate (`estimate_of`).
    pub(super) fn hibernated<'a>(
        &mut self,
        machine_id: u64,
        now_us: u64,
        estimate_of: impl Fn(u64) -> Option<&'a Estimate>,
        effects: &mut Effects,
    ) {
        let Some(planner) = &self.planner else {
            return;
        };
        if planner.elastic {
            self.fleets_on(machine_id, now_us, effects, |fleet, now, vm, terms| {
                fleet.hibernate(now, vm, terms);
            });
            return;
        }
        let jobs: BTreeSet<u64> = self
            .state
            .running
            .on(machine_id)
            .map(|(job, _)| job)
            .collect();
        for job_id in jobs {
            let waiting = self
                .state
                .jobs
                .get(&job_id)
                .and_then(|j| j.waiting_recovery(machine_id));
            if waiting.is_some() {
                // Hibernated already: its clock runs.
                continue;
            }
            let Some(recovery) = self.recovery(job_id, machine_id, now_us, estimate_of(job_id))
            else {
                continue;
            };
            let due = recovery.start_backup_us <= now_us;
            let job = self.state.jobs.remove(&job_id).expect("planned");
            if due {
                self.migrate(job, recovery, now_us, effects);
            } else {
                self.state
                    .waiting
                    .insert((recovery.start_backup_us, job_id, machine_id));
                self.publish(
                    job,
                    DeadlineAction::Wait,
                    now_us,
                    Some(recovery),
                    None,
                    effects,
                );
            }
        }
    }

    /// `machine_id` runs again: its waiting groups stay where they are;
    /// the elastic fleets it is in take it back.
    pub(super) fn resumed(&mut self, machine_id: u64, now_us: u64, effects: &mut Effects) {
        self.fleets_on(machine_id, now_us, effects, |fleet, now, vm, terms| {
            fleet.resume(now, vm, terms);
        });
        for (job, recovery) in self.take_waiting(machine_id) {
            let recovery = Recovery {
                state: RecoveryState::Resumed,
                ..recovery
            };
            self.publish(
                job,
                DeadlineAction::Resume,
                now_us,
                Some(recovery),
                None,
                effects,
            );
        }
    }

    /// `machine_id` is gone: its waiting groups move now, and the elastic
    /// fleets it is in count it hibernated for good.
    pub(super) fn machine_gone(&mut self, machine_id: u64, now_us: u64, effects: &mut Effects) {
        self.fleets_on(machine_id, now_us, effects, |fleet, now, vm, terms| {
            fleet.hibernate(now, vm, terms);
        });
        for (job, recovery) in self.take_waiting(machine_id) {
            self.migrate(job, recovery, now_us, effects);
        }
    }

    /// Apply `step` to the VM `machine_id` plays in each elastic fleet,
    /// and publish what it changed.
    fn fleets_on(
        &mut self,
        machine_id: u64,
        now_us: u64,
        effects: &mut Effects,
        step: impl Fn(&mut Fleet, u64, usize, Terms),
    ) {
        let Some(planner) = &self.planner else {
            return;
        };
        let mut changed = Vec::new();
        let jobs = self.fleets_of.get(&machine_id).into_iter().flatten();
        for &job_id in jobs {
            let Some(job) = self.state.jobs.get_mut(&job_id) else {
                continue;
            };
            let Some(fleet) = &mut job.fleet else {
                continue;
            };
            let Some(vm) = fleet.vm_of(machine_id) else {
                continue;
            };
            let now = planner.periods_since(job.planned_us, now_us);
            step(fleet, now, vm, planner.terms(job.planned_us));
            changed.push((job_id, fleet.take_changes()));
        }
        for (job_id, changes) in changed {
            self.fleet_changed(job_id, changes, now_us, effects);
        }
    }

    /// Migrate the groups whose `start_bkp` event time has reached.
    pub(super) fn due(&mut self, now_us: u64, effects: &mut Effects) {
        while let Some(&(start_us, job_id, machine_id)) = self.state.waiting.first() {
            if start_us > now_us {
                return;
            }
            self.state.waiting.pop_first();
            let job = self
                .state
                .jobs
                .remove(&job_id)
                .expect("a waiting job is live");
            let recovery = job.waiting_recovery(machine_id).expect("a waiting group");
            self.migrate(job, recovery, now_us, effects);
        }
    }

    /// The waiting groups of `machine_id`, out of the wait, with their jobs
    /// taken out of the state (the caller publishes, which puts them back).
    fn take_waiting(&mut self, machine_id: u64) -> Vec<(DeadlineJob, Recovery)> {
        let keys: Vec<(u64, u64, u64)> = self
            .state
            .waiting
            .iter()
            .filter(|k| k.2 == machine_id)
            .copied()
            .collect();
        keys.into_iter()
            .map(|key| {
                self.state.waiting.remove(&key);
                let job = self
                    .state
                    .jobs
                    .remove(&key.1)
                    .expect("a waiting job is live");
                let recovery = job.waiting_recovery(machine_id).expect("a waiting group");
                (job, recovery)
            })
            .collect()
    }

    fn migrate(
        &mut self,
        job: DeadlineJob,
        recovery: Recovery,
        now_us: u64,
        effects: &mut Effects,
    ) {
        let recovery = Recovery {
            state: RecoveryState::Migrated,
            ..recovery
        };
        self.publish(
            job,
            DeadlineAction::Migrate,
            now_us,
            Some(recovery),
            None,
            effects,
        );
    }

    /// Eq. 2 for the tasks of `job_id` on `machine_id`, placed by
    /// Algorithm 2 with the time left at `now_us`; `None` if nothing of
    /// the job is left to move.
    fn recovery(
        &self,
        job_id: u64,
        machine_id: u64,
        now_us: u64,
        latest: Option<&Estimate>,
    ) -> Option<Recovery> {
        let planner = self.planner.as_ref()?;
        let job = self.state.jobs.get(&job_id)?;
        let (primary, plan) = (job.primary.as_ref()?, job.record.plan.as_ref()?);
        let here: Vec<u32> = self
            .state
            .running
            .on(machine_id)
            .filter(|&(job, _)| job == job_id)
            .map(|(_, task)| task)
            .collect();
        // The map's VM this machine plays: the one planned for most of
        // the tasks running on it.
        let mut votes: BTreeMap<usize, usize> = BTreeMap::new();
        for &task in &here {
            if let Some(vm) = primary
                .vms
                .iter()
                .position(|vm| vm.placement_of(task).is_some())
            {
                *votes.entry(vm).or_default() += 1;
            }
        }
        let planned_vm = votes
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
            .map(|(&vm, _)| &primary.vms[vm]);
        let mut members: BTreeSet<u32> = here.iter().copied().collect();
        if let Some(vm) = planned_vm {
            for &task in &here {
                if vm.placement_of(task).is_some() {
                    members.extend(recovery_group(vm, task));
                }
            }
        }
        // What finished, or runs on another machine, stays out.
        members.retain(|&task| {
            !job.finished.contains(&task)
                && self
                    .state
                    .running
                    .machine_of((job_id, task))
                    .is_none_or(|m| m == machine_id)
        });
        if members.is_empty() {
            return None;
        }
        let level = Quantiles::index_of(&plan.quantile).unwrap_or(0);
        let runtime_us = latest
            .and_then(|e| e.quantiles)
            .map_or(plan.task_runtime_us as f64, |q| {
                q.mean_task_runtime_us.to_array()[level]
            });
        let tasks: Vec<Task> = members
            .iter()
            .map(|&id| Task {
                id,
                base_s: runtime_us / 1e6,
                memory_gb: job.memory_gb,
            })
            .collect();
        let by_id = |id: u32| {
            tasks
                .iter()
                .find(|t| t.id == id)
                .expect("a member of the group")
        };
        let period_us = planner.period_us();
        let boot = planner.clock.periods(planner.catalogue.boot_s as f64);
        let left = job.record.deadline_us.saturating_sub(now_us) / period_us;
        let order: Vec<u32> = members.iter().copied().collect();
        let (backups, fits) = place_group(
            &order,
            &by_id,
            &planner.catalogue,
            &planner.clock,
            boot,
            left.saturating_sub(1),
        );
        let runtime = backups.iter().map(Vm::last_end).max().unwrap_or(0);
        let runtime_us = planner.us(runtime);
        let hint = hibernation_hint(
            job.record.deadline_us as f64,
            runtime_us as f64,
            period_us as f64,
            now_us as f64,
            Some(now_us as f64),
        );
        let start_backup_us = hint.start_backup.max(0.0) as u64;
        let backups = backups
            .iter()
            .map(|vm| PlannedVm {
                vm_type: planner.catalogue.types[vm.kind].name.clone(),
                market: Market::OnDemand,
                tasks: vm
                    .placements
                    .iter()
                    .map(|p| PlannedTask {
                        task_index: p.task,
                        start_us: planner.us(p.start),
                        end_us: planner.us(p.end),
                    })
                    .collect(),
            })
            .collect();
        Some(Recovery {
            machine_id,
            hibernated_us: now_us,
            tasks: order,
            backups,
            runtime_us,
            start_backup_us,
            meets_deadline: fits
                && now_us.max(start_backup_us) + runtime_us < job.record.deadline_us,
            state: RecoveryState::Waiting,
        })
    }

    /// Publish a decision of `job` and keep it in the state.
    fn publish(
        &mut self,
        mut job: DeadlineJob,
        action: DeadlineAction,
        now_us: u64,
        recovery: Option<Recovery>,
        fleet: Option<FleetChange>,
        effects: &mut Effects,
    ) {
        job.record.version += 1;
        if let Some(recovery) = &recovery {
            job.set_recovery(recovery.clone());
        }
        if let (Some(planner), Some(f)) = (&self.planner, &job.fleet) {
            job.record.fleet = Some(FleetRecord {
                vms: (0..f.nodes().len())
                    .map(|vm| fleet_vm(planner, job.planned_us, f, vm))
                    .collect(),
                queued: f.queued() as u32,
                task_runtime_us: (f.mean_s() * 1e6).round() as u64,
            });
        }
        let record = &job.record;
        let decision = DeadlineDecision {
            job_id: record.job_id,
            version: record.version,
            time_us: now_us,
            deadline_us: record.deadline_us,
            action,
            plan: (action == DeadlineAction::Plan)
                .then(|| record.plan.clone())
                .flatten(),
            recovery,
            reason: (action == DeadlineAction::Unplanned)
                .then(|| record.reason.clone())
                .flatten(),
            fleet,
        };
        effects.outputs.push(Output::Deadline {
            decision,
            record: record.clone(),
        });
        self.state.jobs.insert(record.job_id, job);
    }

    pub(super) fn state(&self) -> &DeadlineState {
        &self.state
    }

    pub(super) fn restore(&mut self, state: DeadlineState) {
        self.fleets_of.clear();
        for (&job_id, job) in &state.jobs {
            for machine_id in job.fleet.iter().flat_map(Fleet::machines) {
                self.fleets_of.entry(machine_id).or_default().insert(job_id);
            }
        }
        self.state = state;
    }
}

/// VM `vm` of the fleet of a job planned at `planned_us`, as published.
fn fleet_vm(planner: &Planner, planned_us: u64, fleet: &Fleet, vm: usize) -> FleetVm {
    let node = &fleet.nodes()[vm];
    FleetVm {
        vm_type: planner.catalogue.types[node.kind].name.clone(),
        market: node.market,
        machine_id: node.machine_id,
        bought_us: node.added.then(|| planned_us + planner.us(node.bought)),
        draining: node.draining,
        hibernated: node.hibernated,
    }
}

impl DeadlineJob {
    /// Keep `recovery` as its machine's latest.
    fn set_recovery(&mut self, recovery: Recovery) {
        let recoveries = &mut self.record.recoveries;
        match recoveries.binary_search_by_key(&recovery.machine_id, |r| r.machine_id) {
            Ok(i) => recoveries[i] = recovery,
            Err(i) => recoveries.insert(i, recovery),
        }
    }

    /// The waiting group of `machine_id`.
    fn waiting_recovery(&self, machine_id: u64) -> Option<Recovery> {
        self.record
            .recoveries
            .iter()
            .find(|r| r.machine_id == machine_id && r.state == RecoveryState::Waiting)
            .cloned()
    }
}
