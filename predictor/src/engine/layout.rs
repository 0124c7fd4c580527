//! The stored form of the job and task records: fixed binary layouts
//! ([`crate::codec`]), since the service rewrites every job and
//! task a batch touches. The HTTP API decodes a job record and serves it as
//! JSON.

use jobcast_ingest::event::TaskKind;

use crate::codec::{Reader, Writer};
use crate::decision::{
    ClusterCompletion, Completion, Decision, Estimate, EstimateSource, Phase, PolicyKind,
    Quantiles, RuntimeQuantiles, StageEstimate,
};
use crate::features::FeatureKind;

use super::records::{JobRecord, JobState, PredictionError, TaskRecord};

/// First byte of [`JobRecord::to_bytes`], changed with the layout.
const JOB_LAYOUT: u8 = 4;
/// First byte of [`TaskRecord::to_bytes`], changed with the layout.
const TASK_LAYOUT: u8 = 1;
/// First byte of [`Decision::to_bytes`], changed with the layout.
const DECISION_LAYOUT: u8 = 3;

const JOB_STATES: [JobState; 6] = [
    JobState::Running,
    JobState::Finished,
    JobState::Failed,
    JobState::Killed,
    JobState::Lost,
    JobState::Expired,
];

impl JobRecord {
    /// The stored form, in field order: layout (4), `job_id`, `submit_us`
    /// (u64), `user`, `job_name`, `logical_name`, `cluster` (strings),
    /// `width` (u32),
    /// `state` (u8), `end_us` (optional u64), `tasks_finished` (u32),
    /// `estimates` (u8 count, then per policy its index in
    /// [`PolicyKind::ALL`], the estimate's three f64 and its source: a tag
    /// byte and the feature index or pilot count it carries, and its
    /// quantiles: 0, or 1 and the mean's then the size's four f64),
    /// `actual_mean_task_runtime_us` (optional f64), `errors` (u8 count,
    /// then per policy its index and two f64), `eta` (0, or 1 and its four
    /// u64).
    pub fn to_bytes(&self) -> Vec<u8> {
        let strings =
            self.user.len() + self.job_name.len() + self.logical_name.len() + self.cluster.len();
        let mut out = Vec::with_capacity(64 + strings + 104 * self.estimates.len());
        out.put_u8(JOB_LAYOUT);
        out.put_u64(self.job_id);
        out.put_u64(self.submit_us);
        out.put_str(&self.user);
        out.put_str(&self.job_name);
        out.put_str(&self.logical_name);
        out.put_str(&self.cluster);
        out.put_u32(self.width);
        out.put_u8(index(&JOB_STATES, self.state));
        out.put_opt_u64(self.end_us);
        out.put_u32(self.tasks_finished);
        out.put_u8(self.estimates.len() as u8);
        for (&policy, estimate) in &self.estimates {
            out.put_u8(index(&PolicyKind::ALL, policy));
            put_estimate(&mut out, estimate);
        }
        out.put_opt_f64(self.actual_mean_task_runtime_us);
        out.put_u8(self.errors.len() as u8);
        for (&policy, error) in &self.errors {
            out.put_u8(index(&PolicyKind::ALL, policy));
            out.put_f64(error.log_ratio);
            out.put_f64(error.abs_pct);
        }
        put_completion(&mut out, self.eta.as_ref());
        out
    }

    /// Read back [`Self::to_bytes`]; what is wrong, and at which byte,
    /// otherwise.
    pub fn from_bytes(bytes: &[u8]) -> Result<JobRecord, String> {
        let mut r = Reader::new(bytes);
        r.layout("job record", JOB_LAYOUT)?;
        let mut record = JobRecord {
            job_id: r.u64()?,
            submit_us: r.u64()?,
            user: r.str()?,
            job_name: r.str()?,
            logical_name: r.str()?,
            cluster: r.str()?,
            width: r.u32()?,
            state: r.index_of(&JOB_STATES, "job state")?,
            end_us: r.opt_u64()?,
            tasks_finished: r.u32()?,
            estimates: Default::default(),
            actual_mean_task_runtime_us: None,
            errors: Default::default(),
            eta: None,
        };
        for _ in 0..r.u8()? {
            let policy = r.index_of(&PolicyKind::ALL, "policy")?;
            record.estimates.insert(policy, read_estimate(&mut r)?);
        }
        record.actual_mean_task_runtime_us = r.opt_f64()?;
        for _ in 0..r.u8()? {
            let policy = r.index_of(&PolicyKind::ALL, "policy")?;
            let error = PredictionError {
                log_ratio: r.f64()?,
                abs_pct: r.f64()?,
            };
            record.errors.insert(policy, error);
        }
        record.eta = read_completion(&mut r)?;
        r.finish()?;
        Ok(record)
    }
}

impl Decision {
    /// A binary form, in field order: layout (2), `job_id` (u64),
    /// `version` (u32), `queue` (u8), `phase` (its index in
    /// [`Phase::ALL`]), `estimate` (0, or 1 and the estimate as in a job
    /// record), `policy` (its index in [`PolicyKind::ALL`]), `pilots` (u32
    /// count, then each u32), `eta` (as in a job record), `stages` (u32
    /// count, then each stage's id (u32) and two f64), `clusters` (u32
    /// count, then each cluster's name and completion, as `eta`), and
    /// `recommended_cluster` (0, or 1 and the name). The engine's
    /// snapshot keeps decisions waiting to be published in it; `start` is
    /// not kept, since the engine sets it as it publishes (`starts.rs`).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(160 + 4 * self.pilots.len() + 20 * self.stages.len());
        out.put_u8(DECISION_LAYOUT);
        out.put_u64(self.job_id);
        out.put_u32(self.version);
        out.put_u8(self.queue);
        out.put_u8(index(&Phase::ALL, self.phase));
        match &self.estimate {
            None => out.put_u8(0),
            Some(estimate) => {
                out.put_u8(1);
                put_estimate(&mut out, estimate);
            }
        }
        out.put_u8(index(&PolicyKind::ALL, self.policy));
        out.put_u32(self.pilots.len() as u32);
        for &pilot in &self.pilots {
            out.put_u32(pilot);
        }
        put_completion(&mut out, self.eta.as_ref());
        out.put_u32(self.stages.len() as u32);
        for stage in &self.stages {
            out.put_u32(stage.id);
            out.put_f64(stage.mean_task_runtime_us);
            out.put_f64(stage.size_us);
        }
        out.put_u32(self.clusters.len() as u32);
        for c in &self.clusters {
            out.put_str(&c.cluster);
            put_completion(&mut out, Some(&c.eta));
        }
        match &self.recommended_cluster {
            None => out.put_u8(0),
            Some(cluster) => {
                out.put_u8(1);
                out.put_str(cluster);
            }
        }
        out
    }

    /// Read back [`Self::to_bytes`]; what is wrong, and at which byte,
    /// otherwise.
    pub fn from_bytes(bytes: &[u8]) -> Result<Decision, String> {
        let mut r = Reader::new(bytes);
        r.layout("decision", DECISION_LAYOUT)?;
        let job_id = r.u64()?;
        let version = r.u32()?;
        let queue = r.u8()?;
        let phase = r.index_of(&Phase::ALL, "phase")?;
        let at = r.at();
        let estimate = match r.u8()? {
            0 => None,
            1 => Some(read_estimate(&mut r)?),
            tag => return Err(format!("byte {at}: no estimate with tag {tag}")),
        };
        let policy = r.index_of(&PolicyKind::ALL, "policy")?;
        let pilots = (0..r.u32()?)
            .map(|_| r.u32())
            .collect::<Result<Vec<u32>, String>>()?;
        let eta = read_completion(&mut r)?;
        let stages = (0..r.u32()?)
            .map(|_| {
                Ok(StageEstimate {
                    id: r.u32()?,
                    mean_task_runtime_us: r.f64()?,
                    size_us: r.f64()?,
                })
            })
            .collect::<Result<Vec<StageEstimate>, String>>()?;
        let clusters = (0..r.u32()?)
            .map(|_| {
                let cluster = r.str()?;
                let at = r.at();
                let eta = read_completion(&mut r)?
                    .ok_or_else(|| format!("byte {at}: a cluster without its completion"))?;
                Ok(ClusterCompletion { cluster, eta })
            })
            .collect::<Result<Vec<ClusterCompletion>, String>>()?;
        let at = r.at();
        let recommended_cluster = match r.u8()? {
            0 => None,
            1 => Some(r.str()?),
            tag => return Err(format!("byte {at}: no recommended cluster with tag {tag}")),
        };
        r.finish()?;
        Ok(Decision {
            job_id,
            version,
            queue,
            phase,
            estimate,
            policy,
            pilots,
            eta,
            stages,
            clusters,
            recommended_cluster,
            start: None,
        })
    }
}

fn put_completion(out: &mut Vec<u8>, eta: Option<&Completion>) {
    match eta {
        None => out.put_u8(0),
        Some(eta) => {
            out.put_u8(1);
            for v in [eta.at_us, eta.p10_us, eta.p50_us, eta.p90_us] {
                out.put_u64(v);
            }
        }
    }
}

fn read_completion(r: &mut Reader<'_>) -> Result<Option<Completion>, String> {
    let at = r.at();
    match r.u8()? {
        0 => Ok(None),
        1 => Ok(Some(Completion {
            at_us: r.u64()?,
            p10_us: r.u64()?,
            p50_us: r.u64()?,
            p90_us: r.u64()?,
        })),
        tag => Err(format!("byte {at}: no ETA with tag {tag}")),
    }
}

impl TaskRecord {
    /// The stored form, in field order: layout (1), `job_id` (u64),
    /// `task_index` (u32), `last` (its index in [`TaskKind::ALL`]),
    /// `attempts` (u32), then `last_schedule_us`, `running_since_us`,
    /// `runtime_us` and `machine_id` (optional u64 each).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(54);
        out.put_u8(TASK_LAYOUT);
        out.put_u64(self.job_id);
        out.put_u32(self.task_index);
        out.put_u8(index(&TaskKind::ALL, self.last));
        out.put_u32(self.attempts);
        out.put_opt_u64(self.last_schedule_us);
        out.put_opt_u64(self.running_since_us);
        out.put_opt_u64(self.runtime_us);
        out.put_opt_u64(self.machine_id);
        out
    }

    /// Read back [`Self::to_bytes`]; what is wrong, and at which byte,
    /// otherwise.
    pub fn from_bytes(bytes: &[u8]) -> Result<TaskRecord, String> {
        let mut r = Reader::new(bytes);
        r.layout("task record", TASK_LAYOUT)?;
        let record = TaskRecord {
            job_id: r.u64()?,
            task_index: r.u32()?,
            last: r.index_of(&TaskKind::ALL, "task event kind")?,
            attempts: r.u32()?,
            last_schedule_us: r.opt_u64()?,
            running_since_us: r.opt_u64()?,
            runtime_us: r.opt_u64()?,
            machine_id: r.opt_u64()?,
        };
        r.finish()?;
        Ok(record)
    }
}

/// `value`'s position in `all`, which lists every value of its type.
fn index<T: PartialEq>(all: &[T], value: T) -> u8 {
    all.iter()
        .position(|v| *v == value)
        .expect("the list holds every value") as u8
}

fn put_estimate(out: &mut Vec<u8>, estimate: &Estimate) {
    out.put_f64(estimate.mean_task_runtime_us);
    out.put_f64(estimate.size_us);
    out.put_f64(estimate.log_sd);
    match estimate.source {
        EstimateSource::History { feature } => {
            out.put_u8(0);
            out.put_u8(index(&FeatureKind::ALL, feature));
        }
        EstimateSource::Fallback => out.put_u8(1),
        EstimateSource::Pilots { pilots } => {
            out.put_u8(2);
            out.put_u32(pilots);
        }
        EstimateSource::Posterior { pilots } => {
            out.put_u8(3);
            out.put_u32(pilots);
        }
        EstimateSource::Truth => out.put_u8(4),
    }
    match &estimate.quantiles {
        None => out.put_u8(0),
        Some(q) => {
            // Tag 2 adds how many levels are capped; 1 says none is.
            if q.capped == 0 {
                out.put_u8(1);
            } else {
                out.put_u8(2);
                out.put_u8(q.capped);
            }
            for v in q
                .mean_task_runtime_us
                .to_array()
                .into_iter()
                .chain(q.size_us.to_array())
            {
                out.put_f64(v);
            }
        }
    }
}

fn read_estimate(r: &mut Reader<'_>) -> Result<Estimate, String> {
    let (mean_task_runtime_us, size_us, log_sd) = (r.f64()?, r.f64()?, r.f64()?);
    let at = r.at();
    let source = match r.u8()? {
        0 => EstimateSource::History {
            feature: r.index_of(&FeatureKind::ALL, "feature")?,
        },
        1 => EstimateSource::Fallback,
        2 => EstimateSource::Pilots { pilots: r.u32()? },
        3 => EstimateSource::Posterior { pilots: r.u32()? },
        4 => EstimateSource::Truth,
        tag => return Err(format!("byte {at}: no estimate source with tag {tag}")),
    };
    let at = r.at();
    let quantiles = match r.u8()? {
        0 => None,
        tag @ (1 | 2) => {
            let capped = if tag == 2 { r.u8()? } else { 0 };
            let mut four = || -> Result<Quantiles, String> {
                Ok(Quantiles::from_array([
                    r.f64()?,
                    r.f64()?,
                    r.f64()?,
                    r.f64()?,
                ]))
            };
            Some(RuntimeQuantiles {
                mean_task_runtime_us: four()?,
                size_us: four()?,
                capped,
            })
        }
        tag => return Err(format!("byte {at}: no quantiles with tag {tag}")),
    };
    Ok(Estimate {
        mean_task_runtime_us,
        size_us,
        log_sd,
        source,
        quantiles,
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn source() -> impl Strategy<Value = EstimateSource> {
        prop_oneof![
            proptest::sample::select(FeatureKind::ALL.to_vec())
                .prop_map(|feature| EstimateSource::History { feature }),
            Just(EstimateSource::Fallback),
            any::<u32>().prop_map(|pilots| EstimateSource::Pilots { pilots }),
            any::<u32>().prop_map(|pilots| EstimateSource::Posterior { pilots }),
            Just(EstimateSource::Truth),
        ]
    }

    fn estimate() -> impl Strategy<Value = Estimate> {
        let quantiles = proptest::option::of(any::<([f64; 4], [f64; 4], u8)>().prop_map(
            |(m, s, capped)| RuntimeQuantiles {
                mean_task_runtime_us: Quantiles::from_array(m),
                size_us: Quantiles::from_array(s),
                capped: capped % 5,
            },
        ));
        (
            any::<f64>(),
            any::<f64>(),
            any::<f64>(),
            source(),
            quantiles,
        )
            .prop_map(
                |(mean_task_runtime_us, size_us, log_sd, source, quantiles)| Estimate {
                    mean_task_runtime_us,
                    size_us,
                    log_sd,
                    source,
                    quantiles,
                },
            )
    }

    fn policy() -> impl Strategy<Value = PolicyKind> {
        proptest::sample::select(PolicyKind::ALL.to_vec())
    }

    prop_compose! {
        fn job()(
            ids in any::<(u64, u64, u32, u32)>(),
            names in any::<(String, String, String, String)>(),
            state in proptest::sample::select(JOB_STATES.to_vec()),
            end_us in any::<Option<u64>>(),
            estimates in proptest::collection::btree_map(policy(), estimate(), 0..10),
            actual in any::<Option<f64>>(),
            errors in proptest::collection::btree_map(policy(), any::<(f64, f64)>(), 0..10),
            eta in any::<Option<(u64, u64, u64, u64)>>(),
        ) -> JobRecord {
            JobRecord {
                job_id: ids.0,
                submit_us: ids.1,
                user: names.0,
                job_name: names.1,
                logical_name: names.2,
                cluster: names.3,
                width: ids.2,
                state,
                end_us,
                tasks_finished: ids.3,
                estimates,
                actual_mean_task_runtime_us: actual,
                errors: errors
                    .into_iter()
                    .map(|(p, (log_ratio, abs_pct))| (p, PredictionError { log_ratio, abs_pct }))
                    .collect(),
                eta: eta.map(|(at_us, p10_us, p50_us, p90_us)| Completion {
                    at_us,
                    p10_us,
                    p50_us,
                    p90_us,
                }),
            }
        }
    }

    prop_compose! {
        fn task()(
            ids in any::<(u64, u32, u32)>(),
            last in proptest::sample::select(TaskKind::ALL.to_vec()),
            times in any::<(Option<u64>, Option<u64>, Option<u64>, Option<u64>)>(),
        ) -> TaskRecord {
            TaskRecord {
                job_id: ids.0,
                task_index: ids.1,
                last,
                attempts: ids.2,
                last_schedule_us: times.0,
                running_since_us: times.1,
                runtime_us: times.2,
                machine_id: times.3,
            }
        }
    }

    prop_compose! {
        fn decision()(
            ids in any::<(u64, u32, u8)>(),
            phase in proptest::sample::select(Phase::ALL.to_vec()),
            estimate in proptest::option::of(estimate()),
            policy in policy(),
            pilots in proptest::collection::vec(any::<u32>(), 0..50),
            eta in any::<Option<(u64, u64, u64, u64)>>(),
            stages in proptest::collection::vec(any::<(u32, f64, f64)>(), 0..20),
            clusters in proptest::collection::vec(any::<(String, (u64, u64, u64, u64))>(), 0..5),
            recommended_cluster in any::<Option<String>>(),
        ) -> Decision {
            Decision {
                clusters: clusters
                    .into_iter()
                    .map(|(cluster, (at_us, p10_us, p50_us, p90_us))| ClusterCompletion {
                        cluster,
                        eta: Completion {
                            at_us,
                            p10_us,
                            p50_us,
                            p90_us,
                        },
                    })
                    .collect(),
                recommended_cluster,
                start: None,
                stages: stages
                    .into_iter()
                    .map(|(id, mean_task_runtime_us, size_us)| StageEstimate {
                        id,
                        mean_task_runtime_us,
                        size_us,
                    })
                    .collect(),
                job_id: ids.0,
                version: ids.1,
                queue: ids.2,
                phase,
                estimate,
                policy,
                pilots,
                eta: eta.map(|(at_us, p10_us, p50_us, p90_us)| Completion {
                    at_us,
                    p10_us,
                    p50_us,
                    p90_us,
                }),
            }
        }
    }

    proptest! {
        /// Every record reads back as written (compared as bytes, so that
        /// NaN estimates compare too), and every shorter prefix is refused.
        #[test]
        fn job_records_read_back_as_written(record in job()) {
            let bytes = record.to_bytes();
            let back = JobRecord::from_bytes(&bytes).map_err(TestCaseError::fail)?;
            prop_assert_eq!(back.to_bytes(), bytes.clone());
            for cut in 0..bytes.len() {
                prop_assert!(JobRecord::from_bytes(&bytes[..cut]).is_err());
            }
        }

        #[test]
        fn task_records_read_back_as_written(record in task()) {
            let bytes = record.to_bytes();
            prop_assert_eq!(TaskRecord::from_bytes(&bytes), Ok(record));
            for cut in 0..bytes.len() {
                prop_assert!(TaskRecord::from_bytes(&bytes[..cut]).is_err());
            }
        }

        #[test]
        fn decisions_read_back_as_written(decision in decision()) {
            let bytes = decision.to_bytes();
            let back = Decision::from_bytes(&bytes).map_err(TestCaseError::fail)?;
            prop_assert_eq!(back.to_bytes(), bytes.clone());
            for cut in 0..bytes.len() {
                prop_assert!(Decision::from_bytes(&bytes[..cut]).is_err());
            }
        }
    }

    #[test]
    fn damage_is_named_with_its_byte() {
        let record = JobRecord {
            job_id: 1,
            submit_us: 2,
            user: "u".into(),
            job_name: "n".into(),
            logical_name: String::new(),
            cluster: String::new(),
            width: 3,
            state: JobState::Finished,
            end_us: Some(4),
            tasks_finished: 3,
            estimates: [(
                PolicyKind::ThreeSigma,
                Estimate::new(1.0, 3.0, 0.5, EstimateSource::Fallback),
            )]
            .into(),
            actual_mean_task_runtime_us: Some(1.5),
            errors: Default::default(),
            eta: None,
        };
        let mut bytes = record.to_bytes();
        assert_eq!(JobRecord::from_bytes(&bytes), Ok(record.clone()));
        // layout, two ids, four strings (4 + 1, 4 + 1, 4, 4), width: the
        // state.
        let state_at = 1 + 16 + 5 + 5 + 4 + 4 + 4;
        bytes[state_at] = 9;
        assert_eq!(
            JobRecord::from_bytes(&bytes),
            Err(format!("byte {state_at}: no job state with index 9"))
        );
        let mut json = serde_json::to_vec(&record).unwrap();
        assert_eq!(
            JobRecord::from_bytes(&json),
            Err(format!("job record layout 123, expected {JOB_LAYOUT}"))
        );
        json.truncate(0);
        assert!(
            TaskRecord::from_bytes(&json)
                .unwrap_err()
                .contains("record ends at byte 0")
        );
    }
}
