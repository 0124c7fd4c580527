//! The job features 3Sigma matches similar jobs by (SLearn §4.2): user, job
//! name, logical job name, submission time (hour of the week), and requested
//! CPU and memory (bucketed); and, where the scheduler has them (Slurm, HPC
//! logs), the partition, the requested time limit (bucketed), which
//! published HPC runtime models find the strongest single signal, and the
//! user's group.

use jobcast_ingest::event::JobSubmitted;
use jobcast_ingest::ids::stable_id;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FeatureKind {
    User,
    JobName,
    LogicalName,
    SubmitHour,
    CpuRequest,
    MemRequest,
    Partition,
    TimeLimit,
    Group,
}

impl FeatureKind {
    /// How many there are.
    pub const COUNT: usize = 9;

    /// Every kind, in the order of [`JobFeatures::values`]. Stored records
    /// name a kind by its index here: new kinds go at the end.
    pub const ALL: [FeatureKind; Self::COUNT] = [
        FeatureKind::User,
        FeatureKind::JobName,
        FeatureKind::LogicalName,
        FeatureKind::SubmitHour,
        FeatureKind::CpuRequest,
        FeatureKind::MemRequest,
        FeatureKind::Partition,
        FeatureKind::TimeLimit,
        FeatureKind::Group,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FeatureKind::User => "user",
            FeatureKind::JobName => "job_name",
            FeatureKind::LogicalName => "logical_name",
            FeatureKind::SubmitHour => "submit_hour",
            FeatureKind::CpuRequest => "cpu_request",
            FeatureKind::MemRequest => "mem_request",
            FeatureKind::Partition => "partition",
            FeatureKind::TimeLimit => "time_limit",
            FeatureKind::Group => "group",
        }
    }
}

/// A job's feature values, each reduced to a 64-bit key. `None` where the
/// trace has no value (an empty name matches nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct JobFeatures {
    pub values: [Option<u64>; FeatureKind::COUNT],
}

const HOUR_US: u64 = 3_600_000_000;

impl JobFeatures {
    pub fn of(job: &JobSubmitted) -> Self {
        let mut f = Self::from_parts(
            &job.user,
            &job.job_name,
            &job.logical_name,
            job.time_us,
            job.cpu_request,
            job.mem_request,
        );
        f.values[FeatureKind::Partition as usize] = name_key(&job.partition);
        f.values[FeatureKind::TimeLimit as usize] =
            job.time_limit_us.and_then(|us| bucket(us as f64 / 1e6));
        f.values[FeatureKind::Group as usize] = name_key(&job.group);
        f
    }

    /// Features of one DAG stage: the job's, with names qualified by the
    /// stage so that each stage learns its own history (the partition, time
    /// limit and group are the job's, shared by its stages).
    pub fn of_stage(job: &JobSubmitted, stage: u32) -> Self {
        let mut f = Self::of(job);
        for kind in [
            FeatureKind::User,
            FeatureKind::JobName,
            FeatureKind::LogicalName,
        ] {
            let slot = &mut f.values[kind as usize];
            *slot = slot.map(|key| key ^ stable_id(&stage.to_le_bytes()).rotate_left(17));
        }
        f
    }

    pub fn from_parts(
        user: &str,
        job_name: &str,
        logical_name: &str,
        submit_time_us: u64,
        cpu_request: f64,
        mem_request: f64,
    ) -> Self {
        JobFeatures {
            values: [
                name_key(user),
                name_key(job_name),
                name_key(logical_name),
                // Hour of the week since the trace's epoch: day and hour.
                Some((submit_time_us / HOUR_US) % (7 * 24)),
                bucket(cpu_request),
                bucket(mem_request),
                None,
                None,
                None,
            ],
        }
    }

    pub fn get(&self, kind: FeatureKind) -> Option<u64> {
        self.values[kind as usize]
    }
}

/// A name's key; an empty name matches nothing.
fn name_key(name: &str) -> Option<u64> {
    (!name.is_empty()).then(|| stable_id(name.as_bytes()))
}

/// Requests bucketed on a log scale, four buckets per doubling: requests
/// that differ by less than ~19% share a bucket. Zero or unknown requests
/// match nothing.
fn bucket(request: f64) -> Option<u64> {
    (request.is_finite() && request > 0.0).then(|| (request.log2() * 4.0).round() as i64 as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn features_key_names_hours_and_request_buckets() {
        let a = JobFeatures::from_parts("u", "n", "", 3 * HOUR_US + 5, 0.125, 0.0);
        let b = JobFeatures::from_parts("u", "m", "", (3 + 168) * HOUR_US, 0.13, 0.5);
        assert_eq!(a.get(FeatureKind::User), b.get(FeatureKind::User));
        assert_ne!(a.get(FeatureKind::JobName), b.get(FeatureKind::JobName));
        assert_eq!(a.get(FeatureKind::LogicalName), None);
        assert_eq!(a.get(FeatureKind::SubmitHour), Some(3));
        assert_eq!(b.get(FeatureKind::SubmitHour), Some(3));
        assert_eq!(
            a.get(FeatureKind::CpuRequest),
            b.get(FeatureKind::CpuRequest)
        );
        assert_eq!(a.get(FeatureKind::MemRequest), None);
        assert_ne!(bucket(0.125), bucket(0.25));
        assert_eq!(a.get(FeatureKind::Partition), None);
        assert_eq!(a.get(FeatureKind::TimeLimit), None);
    }

    #[test]
    fn a_slurm_jobs_partition_and_time_limit_are_features() {
        let job = |partition: &str, minutes: Option<u64>| JobSubmitted {
            user: "u".into(),
            job_name: "n".into(),
            logical_name: "n".into(),
            cpu_request: 1.0,
            partition: partition.into(),
            time_limit_us: minutes.map(|m| m * 60_000_000),
            ..JobSubmitted::new(1, 0, 1)
        };
        let [a, b, c] = [
            JobFeatures::of(&job("debug", Some(60))),
            JobFeatures::of(&job("debug", Some(61))),
            JobFeatures::of(&job("long", Some(120))),
        ];
        assert_eq!(a.get(FeatureKind::Partition), b.get(FeatureKind::Partition));
        assert_ne!(a.get(FeatureKind::Partition), c.get(FeatureKind::Partition));
        assert!(a.get(FeatureKind::TimeLimit).is_some());
        assert_eq!(a.get(FeatureKind::TimeLimit), b.get(FeatureKind::TimeLimit));
        assert_ne!(a.get(FeatureKind::TimeLimit), c.get(FeatureKind::TimeLimit));
        let unlimited = JobFeatures::of(&job("", None));
        assert_eq!(unlimited.get(FeatureKind::Partition), None);
        assert_eq!(unlimited.get(FeatureKind::TimeLimit), None);
    }
}
