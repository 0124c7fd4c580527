//! Which input partition the records of each live job and machine belong
//! to: a job's is that of its submission (every event of a job comes from
//! one partition), a machine's that of its first event. The instance that
//! owns the partition stores the records; the rest only apply the events.

use std::collections::BTreeSet;

use foldhash::HashMap;
use jobcast_ingest::event::Event;

/// (job or machine id, partition) pairs, as a snapshot keeps them.
pub(super) type Pairs = Vec<(u64, i32)>;

#[derive(Debug, Default)]
pub(super) struct RecordOwners {
    jobs: HashMap<u64, i32>,
    machines: HashMap<u64, i32>,
}

impl RecordOwners {
    /// The partitions saved by a snapshot ([`RecordOwners::saved`]).
    pub(super) fn restored(jobs: Pairs, machines: Pairs) -> Self {
        RecordOwners {
            jobs: jobs.into_iter().collect(),
            machines: machines.into_iter().collect(),
        }
    }

    /// The jobs' and machines' partitions, for a snapshot.
    pub(super) fn saved(&self) -> (Pairs, Pairs) {
        (
            self.jobs.iter().map(|(&j, &p)| (j, p)).collect(),
            self.machines.iter().map(|(&m, &p)| (m, p)).collect(),
        )
    }

    /// `event` came from `partition`: a submission gives its job's records
    /// to it, and a machine's first event the machine's. Known from the
    /// submission whether the engine applied it or held it.
    pub(super) fn note(&mut self, event: &Event, partition: i32) {
        match event {
            Event::JobSubmitted(job) => {
                self.jobs.insert(job.job_id, partition);
            }
            Event::Machine(machine) => {
                self.machines.entry(machine.machine_id).or_insert(partition);
            }
            Event::Task(_) | Event::JobEnded(_) => {}
        }
    }

    pub(super) fn job(&self, job_id: u64) -> Option<i32> {
        self.jobs.get(&job_id).copied()
    }

    pub(super) fn machine(&self, machine_id: u64) -> Option<i32> {
        self.machines.get(&machine_id).copied()
    }

    /// The job has ended or expired: its records are final.
    pub(super) fn forget_job(&mut self, job_id: u64) {
        self.jobs.remove(&job_id);
    }

    /// The engine forgot the machine for its silence.
    pub(super) fn forget_machine(&mut self, machine_id: u64) {
        self.machines.remove(&machine_id);
    }

    /// The live jobs whose records belong to `partitions`.
    pub(super) fn jobs_of<'a>(
        &'a self,
        partitions: &'a BTreeSet<i32>,
    ) -> impl Iterator<Item = u64> + 'a {
        self.jobs
            .iter()
            .filter(|(_, p)| partitions.contains(p))
            .map(|(&job_id, _)| job_id)
    }

    /// The machines whose records belong to `partitions`.
    pub(super) fn machines_of<'a>(
        &'a self,
        partitions: &'a BTreeSet<i32>,
    ) -> impl Iterator<Item = u64> + 'a {
        self.machines
            .iter()
            .filter(|(_, p)| partitions.contains(p))
            .map(|(&machine_id, _)| machine_id)
    }
}
