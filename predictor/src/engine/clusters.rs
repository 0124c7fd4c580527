//! The clusters of a federation that one jobcast serves ([`Clusters`]):
//! what each holds now, from the `cluster` its jobs' and machines' events
//! name (empty: the one cluster of a source that names none).
//!
//! The history learns across clusters: a job's runtime is predicted from
//! every cluster's jobs of its features. What is per cluster is what a
//! scheduler choosing among them needs: machines up, their CPUs, live
//! jobs. A cluster that holds nothing stays listed (an idle cluster is the
//! best place for the next job) until the expiry sweep finds it idle for
//! longer than a silent job is kept (`engine.expiry`). At most
//! `engine.max_clusters` are listed at once: an event naming one more is
//! refused (`over_budget`), so that neither memory nor the metrics' label
//! sets follow a producer that names a cluster per event.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::records::{ClusterRecord, MachineRecord};

#[derive(Debug)]
pub(super) struct Clusters {
    max: usize,
    state: ClustersState,
}

/// What [`Clusters`] saves in a snapshot: each cluster listed, by name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct ClustersState {
    held: BTreeMap<String, Held>,
}

/// What one cluster holds.
#[derive(Debug, Default, Clone, Copy, PartialEq, Serialize, Deserialize)]
struct Held {
    machines_up: u32,
    /// CPUs of its machines up, in millionths: an integer sum, the same in
    /// whatever order machines come and go (ETAs divide by it).
    micro_cpus: u64,
    live_jobs: u64,
    /// Since when it holds nothing, µs of event time.
    idle_since_us: Option<u64>,
}

/// `cpus` in millionths.
fn micro(cpus: f64) -> u64 {
    (cpus * 1e6).round() as u64
}

impl Held {
    /// Note at `now_us` whether it holds anything now.
    fn settle(&mut self, now_us: u64) {
        let empty = self.machines_up == 0 && self.live_jobs == 0;
        match (empty, self.idle_since_us) {
            (true, None) => self.idle_since_us = Some(now_us),
            (false, Some(_)) => self.idle_since_us = None,
            _ => {}
        }
    }
}

/// A machine as the clusters count it: its cluster, whether it is up, and
/// the CPUs it adds.
pub(super) type Counted<'a> = (&'a str, bool, f64);

impl Clusters {
    pub(super) fn new(max: u32) -> Self {
        Clusters {
            max: max as usize,
            state: ClustersState::default(),
        }
    }

    /// Whether an event naming `cluster` may be applied: the cluster is
    /// listed, or there is room for one more.
    pub(super) fn admits(&self, cluster: &str) -> bool {
        self.state.held.contains_key(cluster) || self.state.held.len() < self.max
    }

    /// The most clusters listed at once (`engine.max_clusters`).
    pub(super) fn max(&self) -> usize {
        self.max
    }

    pub(super) fn job_started(&mut self, cluster: &str, now_us: u64) {
        self.change(cluster, now_us, |held| held.live_jobs += 1);
    }

    pub(super) fn job_ended(&mut self, cluster: &str, now_us: u64) {
        self.change(cluster, now_us, |held| {
            held.live_jobs = held.live_jobs.saturating_sub(1);
        });
    }

    /// A machine went from `before` (none: unknown) to `after` (none:
    /// forgotten) at `now_us`.
    pub(super) fn machine_changed(
        &mut self,
        before: Option<Counted<'_>>,
        after: Option<Counted<'_>>,
        now_us: u64,
    ) {
        if before == after {
            return;
        }
        if let Some((cluster, true, cpus)) = before {
            self.change(cluster, now_us, |held| {
                held.machines_up = held.machines_up.saturating_sub(1);
                held.micro_cpus = held.micro_cpus.saturating_sub(micro(cpus));
            });
        }
        if let Some((cluster, true, cpus)) = after {
            self.change(cluster, now_us, |held| {
                held.machines_up += 1;
                held.micro_cpus += micro(cpus);
            });
        }
    }

    /// Change `cluster`'s counts (listing it if it is not), then note
    /// whether it holds anything.
    fn change(&mut self, cluster: &str, now_us: u64, f: impl FnOnce(&mut Held)) {
        let held = match self.state.held.get_mut(cluster) {
            Some(held) => held,
            None => self.state.held.entry(cluster.to_owned()).or_default(),
        };
        f(held);
        held.settle(now_us);
    }

    /// The expiry sweep: forget the clusters idle since before `before_us`.
    pub(super) fn forget_idle(&mut self, before_us: u64) {
        self.state
            .held
            .retain(|_, held| held.idle_since_us.is_none_or(|since| since >= before_us));
    }

    /// Count the machines again from their records at `now_us` (after some
    /// were forgotten for their silence), keeping every cluster listed.
    pub(super) fn recount_machines<'a>(
        &mut self,
        machines: impl IntoIterator<Item = &'a MachineRecord>,
        now_us: u64,
    ) {
        for held in self.state.held.values_mut() {
            held.machines_up = 0;
            held.micro_cpus = 0;
        }
        for machine in machines {
            let (cluster, up, cpus) = counted(machine);
            if up && let Some(held) = self.state.held.get_mut(cluster) {
                held.machines_up += 1;
                held.micro_cpus += micro(cpus);
            }
        }
        for held in self.state.held.values_mut() {
            held.settle(now_us);
        }
    }

    /// How many clusters are listed.
    pub(super) fn len(&self) -> usize {
        self.state.held.len()
    }

    /// Every cluster listed with the CPUs of its machines up, by name.
    pub(super) fn cpus(&self) -> impl Iterator<Item = (&str, f64)> {
        self.state
            .held
            .iter()
            .map(|(name, held)| (name.as_str(), held.micro_cpus as f64 / 1e6))
    }

    /// The CPUs of `cluster`'s machines up (0 if it is not listed).
    pub(super) fn cpus_of(&self, cluster: &str) -> f64 {
        self.state
            .held
            .get(cluster)
            .map_or(0.0, |held| held.micro_cpus as f64 / 1e6)
    }

    /// Every cluster listed, by name.
    pub(super) fn records(&self) -> Vec<ClusterRecord> {
        self.state
            .held
            .iter()
            .map(|(cluster, held)| ClusterRecord {
                cluster: cluster.clone(),
                machines_up: held.machines_up,
                cpus: held.micro_cpus as f64 / 1e6,
                live_jobs: held.live_jobs,
            })
            .collect()
    }

    pub(super) fn state(&self) -> &ClustersState {
        &self.state
    }

    pub(super) fn restore(&mut self, state: ClustersState) {
        self.state = state;
    }
}

/// How the clusters count `machine`.
pub(super) fn counted(machine: &MachineRecord) -> Counted<'_> {
    (
        &machine.cluster,
        machine.up,
        MachineRecord::capacity(Some(machine)),
    )
}
