//! The clusters of a federation that one jobcast serves ([`Clusters`]):
//! what each holds now, from the `cluster` its jobs' and machines' events
//! name (empty: the one cluster of a source that names none).
//!
//! The history learns across clusters: a job's runtime is predicted from
//! every cluster's jobs of its features. What is per cluster is what a
//! scheduler choosing among them needs: machines up, their CPUs, live
//! jobs. A cluster is listed while it holds a live job or a machine up,
//! and at most `engine.max_clusters` are at once: an event naming one
//! more is refused (`over_budget`), so that neither memory nor the
//! metrics' label sets follow a producer that names a cluster per event.

use std::collections::BTreeMap;

use super::records::{ClusterRecord, MachineRecord};

#[derive(Debug)]
pub(super) struct Clusters {
    max: usize,
    held: BTreeMap<String, Held>,
}

/// What one cluster holds.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Held {
    machines_up: u32,
    /// CPUs of its machines up, in millionths: an integer sum, the same in
    /// whatever order machines come and go (a restore counts them again
    /// in another order, and ETAs divide by it).
    micro_cpus: u64,
    live_jobs: u64,
}

/// `cpus` in millionths.
fn micro(cpus: f64) -> u64 {
    (cpus * 1e6).round() as u64
}

impl Held {
    fn is_empty(&self) -> bool {
        self.machines_up == 0 && self.live_jobs == 0
    }
}

/// A machine as the clusters count it: its cluster, whether it is up, and
/// the CPUs it adds.
pub(super) type Counted<'a> = (&'a str, bool, f64);

impl Clusters {
    pub(super) fn new(max: u32) -> Self {
        Clusters {
            max: max as usize,
            held: BTreeMap::new(),
        }
    }

    /// Whether an event naming `cluster` may be applied: the cluster is
    /// listed, or there is room for one more.
    pub(super) fn admits(&self, cluster: &str) -> bool {
        self.held.contains_key(cluster) || self.held.len() < self.max
    }

    /// The most clusters listed at once (`engine.max_clusters`).
    pub(super) fn max(&self) -> usize {
        self.max
    }

    pub(super) fn job_started(&mut self, cluster: &str) {
        self.held.entry(cluster.to_owned()).or_default().live_jobs += 1;
    }

    pub(super) fn job_ended(&mut self, cluster: &str) {
        self.change(cluster, |held| {
            held.live_jobs = held.live_jobs.saturating_sub(1)
        });
    }

    /// A machine went from `before` (none: unknown) to `after` (none:
    /// forgotten).
    pub(super) fn machine_changed(
        &mut self,
        before: Option<Counted<'_>>,
        after: Option<Counted<'_>>,
    ) {
        if before == after {
            return;
        }
        if let Some((cluster, true, cpus)) = before {
            self.change(cluster, |held| {
                held.machines_up = held.machines_up.saturating_sub(1);
                held.micro_cpus = held.micro_cpus.saturating_sub(micro(cpus));
            });
        }
        if let Some((cluster, true, cpus)) = after {
            let held = self.held.entry(cluster.to_owned()).or_default();
            held.machines_up += 1;
            held.micro_cpus += micro(cpus);
        }
    }

    fn change(&mut self, cluster: &str, f: impl FnOnce(&mut Held)) {
        if let Some(held) = self.held.get_mut(cluster) {
            f(held);
            if held.is_empty() {
                self.held.remove(cluster);
            }
        }
    }

    /// Count again from the live jobs' clusters and every machine record
    /// (after a restore, or machines forgotten for their silence).
    pub(super) fn rebuild<'a>(
        &mut self,
        jobs: impl IntoIterator<Item = &'a str>,
        machines: impl IntoIterator<Item = &'a MachineRecord>,
    ) {
        self.held.clear();
        for cluster in jobs {
            self.job_started(cluster);
        }
        for machine in machines {
            self.machine_changed(None, Some(counted(machine)));
        }
    }

    /// How many clusters are listed.
    pub(super) fn len(&self) -> usize {
        self.held.len()
    }

    /// Every cluster listed with the CPUs of its machines up, by name.
    pub(super) fn cpus(&self) -> impl Iterator<Item = (&str, f64)> {
        self.held
            .iter()
            .map(|(name, held)| (name.as_str(), held.micro_cpus as f64 / 1e6))
    }

    /// Every cluster listed, by name.
    pub(super) fn records(&self) -> Vec<ClusterRecord> {
        self.held
            .iter()
            .map(|(cluster, held)| ClusterRecord {
                cluster: cluster.clone(),
                machines_up: held.machines_up,
                cpus: held.micro_cpus as f64 / 1e6,
                live_jobs: held.live_jobs,
            })
            .collect()
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
