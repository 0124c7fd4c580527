//! Fixtures shared by the policy tests.

use jobcast_ingest::event::{JobSubmitted, Stage};

use crate::features::JobFeatures;
use crate::history::{History, HistoryConfig};
use crate::policies::{Context, JobDone, TaskEnd};
use crate::queues::QueueConfig;

/// One second, µs.
pub const S: f64 = 1e6;

pub struct Kit {
    queues: QueueConfig,
}

impl Kit {
    pub fn new() -> Self {
        Kit {
            queues: QueueConfig::default(),
        }
    }

    pub fn history(&self) -> History {
        History::new(HistoryConfig::default())
    }

    pub fn ctx<'a>(&'a self, history: &'a History) -> Context<'a> {
        Context {
            now_us: 10,
            history,
            queues: &self.queues,
        }
    }
}

/// A flat job of user "u", name "n".
pub fn job(job_id: u64, num_tasks: u32) -> JobSubmitted {
    JobSubmitted {
        user: "u".into(),
        job_name: "n".into(),
        ..JobSubmitted::new(job_id, 0, num_tasks)
    }
}

/// A DAG job from `(id, parents, tasks)` stages; its width is their sum.
pub fn dag_job(job_id: u64, stages: &[(u32, &[u32], u32)]) -> JobSubmitted {
    JobSubmitted {
        num_tasks: stages.iter().map(|s| s.2).sum(),
        stages: Some(
            stages
                .iter()
                .map(|&(id, parents, num_tasks)| Stage {
                    id,
                    parents: parents.to_vec(),
                    num_tasks,
                    name: None,
                })
                .collect(),
        ),
        ..job(job_id, 0)
    }
}

/// Teach `history` each stage's mean task runtime (seconds), twice, so
/// that the per-stage feature values have a zero running error and win
/// over the features stages share (submit hour).
pub fn learn_stages(history: &mut History, dag: &JobSubmitted, secs: &[(u32, f64)]) {
    for round in 0..2 {
        for &(stage, s) in secs {
            history.observe(&JobFeatures::of_stage(dag, stage), round, s * S);
        }
    }
}

pub fn finished(job_id: u64, task_index: u32, secs: u64) -> TaskEnd {
    TaskEnd {
        job_id,
        task_index,
        time_us: 0,
        runtime_us: Some(secs * 1_000_000),
    }
}

pub fn failed(job_id: u64, task_index: u32) -> TaskEnd {
    TaskEnd {
        job_id,
        task_index,
        time_us: 0,
        runtime_us: None,
    }
}

pub fn done(job_id: u64, width: u32, normalized_jct: f64) -> JobDone {
    JobDone {
        job_id,
        submit_us: 0,
        end_us: 1,
        width,
        mean_task_runtime_us: S,
        normalized_jct,
    }
}
