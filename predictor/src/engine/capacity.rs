//! CloudCoaster's controller, live ([`Capacity`]): the long-load ratio
//! `l_r` from the engine's own state, and the decisions that grow or
//! shrink the cluster's transient short partition by it.
//!
//! - A task counts as long when its job's estimate (the driving policy's,
//!   else 3Sigma's) of the mean task runtime is above
//!   `engine.capacity.long_cutoff_secs` at the task's placement: jobcast
//!   is what knows the classes CloudCoaster assumes known.
//! - `l_r` = machines up running a long task / machines up; the transient
//!   short partition is the cluster's preemptible machines.
//! - The rule is [`coaster_hint`]'s, the one the simulator
//!   (`jobcast_replay::transient`) resizes its partition by: grow at once
//!   by as many servers as bring `l_r` to the threshold, within the budget
//!   `K = ⌊r⌋·N·p`; release one at a time while `l_r` stays under it.
//! - A release names the servers to release: those the fitted lifetime
//!   model gives the highest chance of a preemption within
//!   `release_horizon_minutes` (leaving the early-failure phase or near
//!   the deadline), keeping those in the flat middle of their life.
//! - A decision is published when what it asks for changes (its action,
//!   its servers, or the transient servers it was decided for), with a
//!   version that grows by one each time: a consumer keeps the highest.

use serde::{Deserialize, Serialize};

use crate::preemption::hints::{PartitionAction, coaster_hint};

use super::config::CapacitySettings;
use super::effects::{Effects, Output};
use super::machines::Machines;
use super::records::{CapacityDecision, ReleaseCandidate};
use super::running::RunningTasks;

/// The controller: which long tasks run where, and the last decision.
#[derive(Debug)]
pub(super) struct Capacity {
    settings: Option<CapacitySettings>,
    state: CapacityState,
}

/// What [`Capacity`] saves in a snapshot.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct CapacityState {
    /// The running attempts of long tasks.
    running: RunningTasks,
    /// The last decision published.
    last: Option<CapacityDecision>,
}

impl Capacity {
    /// The controller, off unless `settings.enabled`.
    pub(super) fn new(settings: &CapacitySettings) -> Self {
        Capacity {
            settings: settings.enabled.then(|| settings.clone()),
            state: CapacityState::default(),
        }
    }

    /// Whether the controller runs (`engine.capacity.enabled`).
    pub(super) fn enabled(&self) -> bool {
        self.settings.is_some()
    }

    /// Whether a task of a job whose mean task runtime is estimated at
    /// `mean_task_runtime_us` counts as long; `None` when the controller
    /// is off.
    pub(super) fn is_long(&self, mean_task_runtime_us: Option<f64>) -> Option<bool> {
        let settings = self.settings.as_ref()?;
        Some(mean_task_runtime_us.is_some_and(|us| us > settings.long_cutoff_secs * 1e6))
    }

    /// A task's attempt started on `machine_id`: counted if `long` (and
    /// the machine is up, which the caller checks). A placement over a
    /// running attempt replaces it.
    pub(super) fn started(&mut self, task: (u64, u32), machine_id: u64, long: bool) {
        if long {
            self.state.running.start(task, machine_id);
        } else {
            self.state.running.end(task);
        }
    }

    /// A task's running attempt ended.
    pub(super) fn ended(&mut self, task: (u64, u32)) {
        self.state.running.end(task);
    }

    /// A job ended, or was given up on: its tasks run no more.
    pub(super) fn job_ended(&mut self, job_id: u64) {
        self.state.running.end_job(job_id);
    }

    /// A machine went away: what ran on it runs no more.
    pub(super) fn machine_gone(&mut self, machine_id: u64) {
        self.state.running.machine_gone(machine_id);
    }

    /// Decide again at `now_us` from the machines up; publish the decision
    /// if it asks for something new.
    pub(super) fn decide(&mut self, now_us: u64, machines: &Machines, effects: &mut Effects) {
        let Some(settings) = &self.settings else {
            return;
        };
        let servers = machines.servers_up();
        let transient = machines.transient_up();
        // Long tasks are counted on machines up only, and a machine's
        // leave forgets them.
        let long = self.state.running.machines() as u32;
        let hint = coaster_hint(long, servers, transient, &settings.coaster());
        let unchanged = match &self.state.last {
            Some(last) => {
                (last.action, last.servers, last.transient_servers)
                    == (hint.action, hint.servers, transient)
            }
            // Nothing to ask of a cluster with nothing to release.
            None => hint.action == PartitionAction::Hold,
        };
        if unchanged {
            return;
        }
        let release = match hint.action {
            PartitionAction::Shrink => machines.release_candidates(
                now_us,
                settings.release_horizon_minutes / 60.0,
                hint.servers as usize,
            ),
            _ => Vec::new(),
        };
        let decision = CapacityDecision {
            version: self.state.last.as_ref().map_or(1, |d| d.version + 1),
            time_us: now_us,
            action: hint.action,
            servers: hint.servers,
            release: release
                .into_iter()
                .map(|(machine_id, age_h, p)| ReleaseCandidate {
                    machine_id,
                    age_h,
                    preemption_probability: p,
                })
                .collect(),
            long_load_ratio: hint.long_load_ratio,
            threshold: hint.threshold,
            long_servers: long,
            servers_up: servers,
            transient_servers: transient,
            transient_budget: hint.transient_budget,
            long_cutoff_us: (settings.long_cutoff_secs * 1e6) as u64,
        };
        self.state.last = Some(decision.clone());
        effects.outputs.push(Output::Capacity(decision));
    }

    /// The last decision published.
    pub(super) fn last(&self) -> Option<&CapacityDecision> {
        self.state.last.as_ref()
    }

    pub(super) fn state(&self) -> &CapacityState {
        &self.state
    }

    pub(super) fn restore(&mut self, state: CapacityState) {
        self.state = state;
    }
}
