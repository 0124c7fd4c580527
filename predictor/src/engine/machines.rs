//! Machines and the preemption risk of the tasks placed on transient VMs
//! ([`Machines`]): machine events keep the records (each cluster's
//! capacity is counted from them, `clusters.rs`) and when each machine last
//! reported, and feed the online lifetime fit;
//! a task placed on a preemptible VM is scored, and scored again as the VM
//! ages past the bathtub's turning points; a machine silent too long is
//! given up on.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BTreeSet};

use foldhash::{HashMap, HashMapExt};
use jobcast_ingest::event::{EndReason, MachineEvent, MachineKind, TaskEvent, TaskKind};

use crate::decision::Estimate;
use crate::preemption::checkpoint::{CheckpointSpec, CheckpointTable, SegmentPolicy};
use crate::preemption::kaplan_meier::KaplanMeier;
use crate::preemption::models::LifetimeModel;
use crate::preemption::online::OnlineFitter;
use crate::preemption::recalibration::Recalibration;
use crate::preemption::risk::{Recommendation, RuntimeEstimate, score};
use crate::preemption::running_time::preemption_probability;
use crate::preemption::scoring::ipcw;
use serde::{Deserialize, Serialize};

use super::config::RiskSettings;
use super::effects::{Effects, Output};
use super::records::{MachineRecord, MachineRisk};

/// Every machine the engine knows, and what it derives from them.
#[derive(Debug)]
pub(super) struct Machines {
    records: HashMap<u64, MachineRecord>,
    /// When each machine last reported (its events, or tasks placed on
    /// it), µs.
    seen: HashMap<u64, u64>,
    /// Preemption lifetimes of the VMs seen, fitted as they end.
    lifetimes: OnlineFitter,
    risk: RiskSettings,
    /// (when, machine): the risk scores to refresh as VMs age.
    refresh: BTreeSet<(u64, u64)>,
    /// The machines up, and the preemptible ones among them.
    up: Servers,
    /// Checkpoint schedules for the risk scores, if configured: one table
    /// per lifetime model in use, built when first needed and dropped on a
    /// refit (a function of the model, so never saved).
    checkpoints: Option<Checkpoints>,
    /// The scores of the task running on each VM, until its outcome is
    /// known, and what past outcomes say of the model's probabilities.
    outcomes: Outcomes,
}

/// The scores awaiting their outcome, and the recalibration they teach.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct Outcomes {
    /// By VM: the task scored on it, and each score's VM age (hours) and
    /// the model's probability.
    pending: BTreeMap<u64, Pending>,
    recalibration: Recalibration,
}

/// The scores of one attempt of a task on a VM.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Pending {
    job_id: u64,
    task_index: u32,
    /// The attempt's placement, µs.
    placed_us: u64,
    /// When the attempt was evicted or lost, if it was: the VM's
    /// preemption soon after says why.
    lost_us: Option<u64>,
    /// Each score's VM age, hours, and the model's probability.
    scores: Vec<(f64, f64)>,
}

/// How long after an attempt is evicted or lost the VM's preemption still
/// counts as its cause: the provider's notice and the events' paths apart.
const LOST_WITH_PREEMPTION_US: u64 = 10 * 60 * 1_000_000;

impl Outcomes {
    fn new(risk: &RiskSettings) -> Self {
        Outcomes {
            pending: BTreeMap::new(),
            recalibration: Recalibration::new(
                risk.recalibration_bins,
                risk.recalibration_min_outcomes,
            ),
        }
    }

    /// A score of the model's `p` at VM age `age_h` for the attempt of a
    /// task placed on `machine_id` at `placed_us`; a score of another
    /// attempt replaces the pending ones (their outcome will not be seen).
    fn scored(&mut self, machine_id: u64, attempt: (u64, u32, u64), age_h: f64, p: f64) {
        let (job_id, task_index, placed_us) = attempt;
        let fresh = Pending {
            job_id,
            task_index,
            placed_us,
            lost_us: None,
            scores: Vec::new(),
        };
        let pending = self.pending.entry(machine_id).or_insert(fresh.clone());
        if (pending.job_id, pending.task_index, pending.placed_us) != attempt {
            *pending = fresh;
        }
        pending.scores.push((age_h, p));
    }

    /// The pending scores of `machine_id` learn that the VM was up, or
    /// preempted, at age `seen_h`; `censoring` is `Ĝ`, which weighs them
    /// (unweighted before the fitter has one).
    fn resolved(
        &mut self,
        machine_id: u64,
        failed: bool,
        seen_h: f64,
        censoring: Option<&KaplanMeier>,
    ) {
        let Some(pending) = self.pending.remove(&machine_id) else {
            return;
        };
        for (age_h, p) in pending.scores {
            let weight = match censoring {
                Some(g) => match ipcw(g, age_h, seen_h) {
                    Some(w) => w,
                    None => continue,
                },
                None => 1.0,
            };
            self.recalibration.observe(p, failed, weight);
        }
        self.recalibration.refit();
    }
}

/// Machines up, counted as their records change.
#[derive(Debug, Clone, Copy, Default)]
struct Servers {
    up: u32,
    transient: u32,
}

impl Servers {
    /// What `machine` adds to the counts.
    fn of(machine: Option<&MachineRecord>) -> Servers {
        match machine {
            Some(m) if m.up => Servers {
                up: 1,
                transient: u32::from(m.preemptible),
            },
            _ => Servers::default(),
        }
    }

    /// A machine went from counting `before` to `after`.
    fn changed(&mut self, before: Servers, after: Servers) {
        self.up = self.up + after.up - before.up;
        self.transient = self.transient + after.transient - before.transient;
    }
}

/// The checkpoint tables of the lifetime models risk scores use.
#[derive(Debug)]
struct Checkpoints {
    spec: CheckpointSpec,
    /// By the model: its kind, deadline and parameters, as bits.
    tables: HashMap<Vec<u64>, CheckpointTable>,
}

impl Checkpoints {
    /// The table of `model`, built now if it is the first use.
    fn table(&mut self, model: &LifetimeModel) -> Option<&CheckpointTable> {
        let key: Vec<u64> = [model.kind() as u64, model.max_lifetime_h().to_bits()]
            .into_iter()
            .chain(model.params().iter().map(|p| p.to_bits()))
            .collect();
        match self.tables.entry(key) {
            Entry::Occupied(table) => Some(table.into_mut()),
            Entry::Vacant(slot) => {
                let table =
                    CheckpointTable::build(model, self.spec, SegmentPolicy::Optimal).ok()?;
                Some(slot.insert(table))
            }
        }
    }
}

/// A snapshot's view of [`Machines`], borrowed to save and owned to
/// restore.
pub(super) struct MachinesState<R, S, L, F, O> {
    pub records: R,
    pub seen: S,
    pub lifetimes: L,
    pub refresh: F,
    pub outcomes: O,
}

/// [`Machines`] as a snapshot saves it.
pub(super) type Saved<'a> = MachinesState<
    &'a HashMap<u64, MachineRecord>,
    &'a HashMap<u64, u64>,
    &'a OnlineFitter,
    &'a BTreeSet<(u64, u64)>,
    &'a Outcomes,
>;

/// [`Machines`] as a snapshot restores it.
pub(super) type Restored = MachinesState<
    HashMap<u64, MachineRecord>,
    HashMap<u64, u64>,
    OnlineFitter,
    BTreeSet<(u64, u64)>,
    Outcomes,
>;

impl Machines {
    pub(super) fn new(lifetimes: OnlineFitter, risk: RiskSettings) -> Self {
        Machines {
            records: HashMap::new(),
            seen: HashMap::new(),
            lifetimes,
            refresh: BTreeSet::new(),
            up: Servers::default(),
            checkpoints: risk.checkpoint_spec().map(|spec| Checkpoints {
                spec,
                tables: HashMap::new(),
            }),
            outcomes: Outcomes::new(&risk),
            risk,
        }
    }

    pub(super) fn get(&self, machine_id: u64) -> Option<&MachineRecord> {
        self.records.get(&machine_id)
    }

    /// How many machines are up.
    pub(super) fn servers_up(&self) -> u32 {
        self.up.up
    }

    /// How many preemptible machines are up.
    pub(super) fn transient_up(&self) -> u32 {
        self.up.transient
    }

    pub(super) fn is_up(&self, machine_id: u64) -> bool {
        self.records.get(&machine_id).is_some_and(|m| m.up)
    }

    /// The `n` preemptible machines up likeliest to be preempted within
    /// `horizon_h` of `now_us` by their fitted lifetime model (the
    /// likeliest first, then by id): `(machine, age_h, probability)`.
    pub(super) fn release_candidates(
        &self,
        now_us: u64,
        horizon_h: f64,
        n: usize,
    ) -> Vec<(u64, f64, f64)> {
        let mut candidates: Vec<(u64, f64, f64)> = self
            .records
            .values()
            .filter(|m| m.up && m.preemptible)
            .map(|m| {
                let launch = m.launch_time_us.or(m.added_us).unwrap_or(now_us);
                let age_h = now_us.saturating_sub(launch) as f64 / 3.6e9;
                let model = self.lifetimes.risk_model_for(
                    m.vm_type.as_deref().unwrap_or_default(),
                    m.zone.as_deref().unwrap_or_default(),
                    launch,
                );
                let p = preemption_probability(&model, age_h, horizon_h);
                (m.machine_id, age_h, p)
            })
            .collect();
        candidates.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(&b.0)));
        candidates.truncate(n);
        candidates
    }

    #[cfg(test)]
    pub(super) fn lifetimes(&self) -> &OnlineFitter {
        &self.lifetimes
    }

    /// Outcomes the recalibration has counted, by weight.
    #[cfg(test)]
    pub(super) fn outcomes_counted(&self) -> f64 {
        self.outcomes.recalibration.outcomes()
    }

    /// What a snapshot saves.
    pub(super) fn state(&self) -> Saved<'_> {
        MachinesState {
            records: &self.records,
            seen: &self.seen,
            lifetimes: &self.lifetimes,
            refresh: &self.refresh,
            outcomes: &self.outcomes,
        }
    }

    /// Take back what a snapshot saved.
    pub(super) fn restore(&mut self, state: Restored) {
        self.records = state.records;
        self.seen = state.seen;
        self.lifetimes = state.lifetimes;
        self.refresh = state.refresh;
        self.outcomes = state.outcomes;
        self.up = Servers::default();
        for machine in self.records.values() {
            self.up
                .changed(Servers::default(), Servers::of(Some(machine)));
        }
        if let Some(checkpoints) = &mut self.checkpoints {
            checkpoints.tables.clear();
        }
    }

    /// Note that a machine the engine knows reported at `time_us`.
    pub(super) fn seen(&mut self, machine_id: u64, time_us: u64) {
        if !self.records.contains_key(&machine_id) {
            return;
        }
        let seen = self.seen.entry(machine_id).or_insert(time_us);
        *seen = (*seen).max(time_us);
    }

    /// Give up on the machines that last reported before `bound`.
    pub(super) fn expire_silent(&mut self, bound: u64, effects: &mut Effects) {
        let mut silent: Vec<u64> = self
            .seen
            .iter()
            .filter(|&(_, &seen)| seen < bound)
            .map(|(&id, _)| id)
            .collect();
        silent.sort_unstable();
        if !silent.is_empty() {
            self.refresh
                .retain(|(_, machine_id)| silent.binary_search(machine_id).is_err());
        }
        for machine_id in silent {
            self.seen.remove(&machine_id);
            let gone = self.records.remove(&machine_id);
            self.outcomes.pending.remove(&machine_id);
            self.up
                .changed(Servers::of(gone.as_ref()), Servers::default());
            effects.machines.mark(machine_id);
            effects.expired_machines.push(machine_id);
        }
    }
}

impl MachineRecord {
    /// The CPUs it adds to the cluster's capacity: its own while it is up.
    pub(super) fn capacity(machine: Option<&MachineRecord>) -> f64 {
        machine.filter(|m| m.up).and_then(|m| m.cpus).unwrap_or(0.0)
    }
}

impl Machines {
    /// Score `task`, just placed, if on a transient VM: its job's
    /// `estimate` gives the runtime it must survive.
    pub(super) fn placed(&mut self, task: &TaskEvent, estimate: &Estimate, effects: &mut Effects) {
        let Some(machine_id) = task.machine_id else {
            return;
        };
        let runtime = RuntimeEstimate {
            mean_h: estimate.mean_task_runtime_us / 3.6e9,
            // The log-normal whose ln-sd is the estimate's spread.
            cv: (estimate.log_sd.powi(2).exp() - 1.0).sqrt(),
        };
        self.score(
            machine_id,
            task.job_id,
            task.task_index,
            task.time_us,
            task.time_us,
            runtime,
            effects,
        );
    }

    /// Score the task on a VM at `now_us` and schedule the next refresh.
    #[allow(clippy::too_many_arguments)]
    fn score(
        &mut self,
        machine_id: u64,
        job_id: u64,
        task_index: u32,
        placed_us: u64,
        now_us: u64,
        runtime: RuntimeEstimate,
        effects: &mut Effects,
    ) {
        let Some(machine) = self.records.get_mut(&machine_id) else {
            return;
        };
        let (Some(vm_type), Some(zone), Some(launch)) = (
            machine.vm_type.clone(),
            machine.zone.clone(),
            machine.launch_time_us,
        ) else {
            return;
        };
        // A NaN or non-positive runtime cannot be scored.
        let has_work = runtime.mean_h > 0.0;
        if !(machine.preemptible && machine.up && has_work) {
            return;
        }
        let age_h = now_us.saturating_sub(launch) as f64 / 3.6e9;
        // By type, zone and VM-local day/night of the launch, as fitted.
        let model = self.lifetimes.risk_model_for(&vm_type, &zone, launch);
        let Ok(mut score) = score(&model, age_h, runtime, &self.risk.recommendation, None) else {
            return;
        };
        // The schedule on the VM the score recommends, for a task that
        // checkpoints; the recommendation itself stays that of a task
        // that does not.
        let on = match score.recommendation {
            Recommendation::Keep => Some(age_h),
            Recommendation::FreshVm => Some(0.0),
            Recommendation::OnDemand => None,
        };
        if let (Some(on_age_h), Some(checkpoints)) = (on, self.checkpoints.as_mut())
            && let Some(table) = checkpoints.table(&model)
        {
            score.checkpoints = table.schedule(runtime.mean_h, on_age_h).ok();
        }
        let p = score.this_vm.preemption_probability;
        self.outcomes
            .scored(machine_id, (job_id, task_index, placed_us), age_h, p);
        let risk = MachineRisk {
            machine_id,
            job_id,
            task_index,
            time_us: now_us,
            placed_us,
            vm_type,
            zone,
            lifetime_model: model.kind().name().to_owned(),
            preemption_probability: self.outcomes.recalibration.map(p),
            score,
        };
        machine.risk = Some(risk.clone());
        effects.machines.mark(machine_id);
        effects.outputs.push(Output::Risk(risk));
        if let Some(next) = self
            .risk
            .refresh_ages_h
            .iter()
            .copied()
            .filter(|&a| a > age_h)
            .reduce(f64::min)
        {
            self.refresh
                .insert((launch.saturating_add((next * 3.6e9) as u64), machine_id));
        }
    }

    /// A task's attempt on `machine_id` ended with `task`. Its scores are
    /// refreshed no more. A finish is the outcome they wait for (the VM
    /// outlived it); an eviction or loss may be the VM's preemption, which
    /// the VM's remove event tells ([`Self::vm_left`]); a failure, kill or
    /// timeout of the task's own says nothing of the VM, and they are
    /// dropped.
    pub(super) fn attempt_ended(
        &mut self,
        machine_id: u64,
        task: &TaskEvent,
        effects: &mut Effects,
    ) {
        let attempt = (task.job_id, task.task_index);
        if let Some(record) = self.records.get_mut(&machine_id)
            && record
                .risk
                .as_ref()
                .is_some_and(|r| (r.job_id, r.task_index) == attempt)
        {
            record.risk = None;
            effects.machines.mark(machine_id);
        }
        let Some(pending) = self.outcomes.pending.get_mut(&machine_id) else {
            return;
        };
        if (pending.job_id, pending.task_index) != attempt {
            return;
        }
        match task.kind {
            TaskKind::Finish => {
                let Some(launch) = self.records.get(&machine_id).and_then(|m| m.launch_time_us)
                else {
                    return;
                };
                let age_h = task.time_us.saturating_sub(launch) as f64 / 3.6e9;
                self.outcomes
                    .resolved(machine_id, false, age_h, self.lifetimes.censoring());
            }
            TaskKind::Evict | TaskKind::Lost => pending.lost_us = Some(task.time_us),
            _ => {
                self.outcomes.pending.remove(&machine_id);
            }
        }
    }

    /// The task whose scores on `machine_id` wait for their outcome.
    pub(super) fn pending_task(&self, machine_id: u64) -> Option<(u64, u32)> {
        self.outcomes
            .pending
            .get(&machine_id)
            .map(|p| (p.job_id, p.task_index))
    }

    /// `event` removed a VM whose pending task was `running` on it then
    /// (the engine's records say). A preemption fails the task's scores if
    /// the task ran until it, or was evicted or lost just before; any other
    /// end leaves their outcome unknown.
    pub(super) fn vm_left(&mut self, event: &MachineEvent, running: bool) {
        let Some(pending) = self.outcomes.pending.get(&event.machine_id) else {
            return;
        };
        let lost_with_it = running
            || pending
                .lost_us
                .is_some_and(|t| event.time_us.saturating_sub(t) <= LOST_WITH_PREEMPTION_US);
        let record = self.records.get(&event.machine_id);
        match (
            record.and_then(|r| r.end_reason),
            record.and_then(|r| r.launch_time_us),
        ) {
            (Some(EndReason::Preempted), Some(launch)) if lost_with_it => {
                let lifetime_h = event.time_us.saturating_sub(launch) as f64 / 3.6e9;
                self.outcomes.resolved(
                    event.machine_id,
                    true,
                    lifetime_h.next_down(),
                    self.lifetimes.censoring(),
                );
            }
            _ => {
                self.outcomes.pending.remove(&event.machine_id);
            }
        }
    }

    /// Score again the VMs whose age crossed a refresh age by `now_us`,
    /// for the work their task has left.
    pub(super) fn refresh_risks(&mut self, now_us: u64, effects: &mut Effects) {
        while let Some(&(due, machine_id)) = self.refresh.first() {
            if due > now_us {
                break;
            }
            self.refresh.pop_first();
            let Some(last) = self.records.get(&machine_id).and_then(|m| m.risk.clone()) else {
                continue;
            };
            let done_h = due.saturating_sub(last.placed_us) as f64 / 3.6e9;
            let left_h = last.score.runtime.mean_h - done_h;
            if left_h <= 0.0 {
                continue;
            }
            let runtime = RuntimeEstimate {
                mean_h: left_h,
                cv: last.score.runtime.cv,
            };
            self.score(
                machine_id,
                last.job_id,
                last.task_index,
                last.placed_us,
                due,
                runtime,
                effects,
            );
        }
    }

    /// A machine event: its record, when it last reported, and the
    /// lifetime fit.
    pub(super) fn event(&mut self, event: &MachineEvent, effects: &mut Effects) {
        let counted = Servers::of(self.records.get(&event.machine_id));
        let record = self
            .records
            .entry(event.machine_id)
            .or_insert_with(|| MachineRecord {
                machine_id: event.machine_id,
                up: false,
                added_us: None,
                removed_us: None,
                vm_type: None,
                zone: None,
                preemptible: false,
                launch_time_us: None,
                end_reason: None,
                risk: None,
                cpus: None,
                hibernated_since_us: None,
                cluster: String::new(),
            });
        match event.kind {
            MachineKind::Add => {
                record.up = true;
                record.added_us = Some(event.time_us);
                record.removed_us = None;
                record.end_reason = None;
            }
            MachineKind::Remove => {
                record.up = false;
                record.removed_us = Some(event.time_us);
                record.risk = None;
                record.hibernated_since_us = None;
            }
            MachineKind::Hibernate => {
                record.hibernated_since_us.get_or_insert(event.time_us);
            }
            MachineKind::Resume => record.hibernated_since_us = None,
            MachineKind::Update => {}
        }
        if let Some(vm) = &event.vm {
            record.vm_type = Some(vm.vm_type.clone());
            record.zone = Some(vm.zone.clone());
            record.preemptible = vm.preemptible;
            record.launch_time_us = Some(vm.launch_time_us);
            if vm.end_reason.is_some() {
                record.end_reason = vm.end_reason;
            }
        }
        if event.cpus.is_some() {
            record.cpus = event.cpus;
        }
        if !event.cluster.is_empty() && event.cluster != record.cluster {
            record.cluster.clone_from(&event.cluster);
        }
        let counts = Servers::of(Some(record));
        self.up.changed(counted, counts);
        effects.machines.mark(event.machine_id);
        self.seen(event.machine_id, event.time_us);
        if self.lifetimes.observe(event)
            && let Some(checkpoints) = &mut self.checkpoints
        {
            // The models changed: their tables are built again when used.
            checkpoints.tables.clear();
        }
    }
}
