//! Machines and the preemption risk of the tasks placed on transient VMs:
//! machine events keep the records and feed the online lifetime fit; a task
//! placed on a preemptible VM is scored, and scored again as the VM ages
//! past the bathtub's turning points.

use jobcast_ingest::event::{MachineEvent, MachineKind, TaskEvent};

use crate::decision::PolicyKind;
use crate::preemption::risk::{RuntimeEstimate, score};

use super::Engine;
use super::effects::{Effects, Output};
use super::records::{MachineRecord, MachineRisk};

impl Engine {
    /// Score the task just placed on `machine_id`, if that is a transient
    /// VM and the job has an estimate to score with.
    pub(super) fn place_on_vm(&mut self, task: &TaskEvent, effects: &mut Effects) {
        let Some(machine_id) = task.machine_id else {
            return;
        };
        let Some(job) = self.jobs.get(&task.job_id) else {
            return;
        };
        let estimate = job
            .record
            .estimates
            .get(&self.driver)
            // A thin job placed without an estimate: the history's.
            .or_else(|| job.record.estimates.get(&PolicyKind::ThreeSigma));
        let Some(estimate) = estimate else {
            return;
        };
        let runtime = RuntimeEstimate {
            mean_h: estimate.mean_task_runtime_us / 3.6e9,
            // The log-normal whose ln-sd is the estimate's spread.
            cv: (estimate.log_sd.powi(2).exp() - 1.0).sqrt(),
        };
        self.score_vm(
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
    fn score_vm(
        &mut self,
        machine_id: u64,
        job_id: u64,
        task_index: u32,
        placed_us: u64,
        now_us: u64,
        runtime: RuntimeEstimate,
        effects: &mut Effects,
    ) {
        let Some(machine) = self.machines.get_mut(&machine_id) else {
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
        let model = self.lifetimes.bathtub_for(&vm_type, &zone, launch);
        let Ok(score) = score(&model, age_h, runtime, &self.risk.recommendation, None) else {
            return;
        };
        let risk = MachineRisk {
            machine_id,
            job_id,
            task_index,
            time_us: now_us,
            placed_us,
            vm_type,
            zone,
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
            self.risk_refresh
                .insert((launch.saturating_add((next * 3.6e9) as u64), machine_id));
        }
    }

    /// Score again the VMs whose age crossed a refresh age by `now_us`,
    /// for the work their task has left.
    pub(super) fn refresh_risks(&mut self, now_us: u64, effects: &mut Effects) {
        while let Some(&(due, machine_id)) = self.risk_refresh.first() {
            if due > now_us {
                break;
            }
            self.risk_refresh.pop_first();
            let Some(last) = self.machines.get(&machine_id).and_then(|m| m.risk.clone()) else {
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
            self.score_vm(
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

    pub(super) fn machine_event(&mut self, event: &MachineEvent, effects: &mut Effects) {
        let before = MachineRecord::capacity(self.machines.get(&event.machine_id));
        let record = self
            .machines
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
            }
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
        let after = MachineRecord::capacity(Some(record));
        self.capacity_changed(before, after);
        effects.machines.mark(event.machine_id);
        self.machine_seen(event.machine_id, event.time_us);
        self.lifetimes.observe(event);
    }
}
