//! Runtime predictions on an HPC trace, as the field measures them
//! (Tsafrir et al. 2007): the trace's events in time order; at each job's
//! submission every predictor predicts its runtime from what ended
//! before; at its end every predictor learns it. Scored are the jobs that
//! completed with a runtime of at least a second and a requested time.
//!
//! Per predictor: the accuracy (the mean of min(p, a) / max(p, a)), the
//! share of jobs under-predicted (p < a: a backfilled job that runs over
//! its prediction delays the queue's head), the P50 and P90 of
//! |p − a| / a, and for predictors with quantiles, the share of jobs
//! at or below their P90.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use jobcast_ingest::event::{Event, JobOutcome, JobSubmitted};
use jobcast_predictor::stats::percentile;
use serde::Serialize;

use super::RunTime;
use super::predictor::{Predictor, Said};

/// The predictors, in report order ([`Predictor::all`]).
pub const PREDICTORS: [&str; 3] = ["jobcast", "last2", "user_estimate"];

/// How the scores of one predictor came out.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Scores {
    pub jobs: usize,
    pub accuracy: f64,
    pub under_pct: f64,
    pub p50_error_pct: f64,
    pub p90_error_pct: f64,
    /// Jobs at or below the predictor's P90 (none for point predictors).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub coverage_p90_pct: Option<f64>,
}

/// The predictions of every predictor over one trace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// Jobs submitted.
    pub submitted: usize,
    /// Jobs scored: completed, with a runtime and a request.
    pub jobs: usize,
    pub predictors: BTreeMap<&'static str, Scores>,
}

impl Report {
    pub fn scores(&self, name: &str) -> Option<&Scores> {
        self.predictors.get(name)
    }

    /// The scores as a table, one predictor a row.
    pub fn table(&self) -> String {
        let mut out = format!(
            "{} jobs submitted, {} scored (completed, with a runtime and a request)\n\
             {:<14} {:>7} {:>9} {:>8} {:>10} {:>10} {:>9}\n",
            self.submitted,
            self.jobs,
            "predictor",
            "jobs",
            "accuracy",
            "under %",
            "P50 err %",
            "P90 err %",
            "P90 cov %"
        );
        for name in PREDICTORS {
            let Some(s) = self.scores(name) else { continue };
            let coverage = s
                .coverage_p90_pct
                .map_or_else(|| "-".to_owned(), |c| format!("{c:.1}"));
            let _ = writeln!(
                out,
                "{name:<14} {:>7} {:>9.3} {:>8.1} {:>10.1} {:>10.1} {coverage:>9}",
                s.jobs, s.accuracy, s.under_pct, s.p50_error_pct, s.p90_error_pct
            );
        }
        out
    }
}

/// A job between its submission and its end.
struct Open {
    job: JobSubmitted,
    ran: RunTime,
    /// What each predictor said, in [`PREDICTORS`] order.
    said: [Said; 3],
}

/// Per predictor, the scored pairs (prediction, actual).
#[derive(Default)]
struct Tally {
    pairs: Vec<(f64, f64)>,
    covered: usize,
}

impl Tally {
    fn scores(&self, with_quantiles: bool) -> Scores {
        let n = self.pairs.len();
        if n == 0 {
            return Scores::default();
        }
        let mut errors: Vec<f64> = self
            .pairs
            .iter()
            .map(|&(p, a)| (p - a).abs() / a * 100.0)
            .collect();
        errors.sort_by(f64::total_cmp);
        let accuracy = self
            .pairs
            .iter()
            .map(|&(p, a)| p.min(a) / p.max(a))
            .sum::<f64>()
            / n as f64;
        let under = self.pairs.iter().filter(|&&(p, a)| p < a).count();
        Scores {
            jobs: n,
            accuracy,
            under_pct: under as f64 * 100.0 / n as f64,
            p50_error_pct: percentile(&errors, 50.0).unwrap_or(0.0),
            p90_error_pct: percentile(&errors, 90.0).unwrap_or(0.0),
            coverage_p90_pct: with_quantiles.then(|| self.covered as f64 * 100.0 / n as f64),
        }
    }
}

/// Predict and score every job of `events` (in time order).
pub fn evaluate(events: impl IntoIterator<Item = Event>) -> Report {
    let mut predictors = Predictor::all();
    let mut open: HashMap<u64, Open> = HashMap::new();
    let mut tallies: [Tally; 3] = Default::default();
    let mut submitted = 0;
    for event in events {
        match event {
            Event::JobSubmitted(job) => {
                submitted += 1;
                let said = predictors.each_ref().map(|p| p.predict(&job));
                open.insert(
                    job.job_id,
                    Open {
                        job,
                        ran: RunTime::default(),
                        said,
                    },
                );
            }
            Event::Task(t) => {
                if let Some(o) = open.get_mut(&t.job_id) {
                    o.ran.see(&t);
                }
            }
            Event::JobEnded(end) => {
                let Some(o) = open.remove(&end.job_id) else {
                    continue;
                };
                if !o.ran.ran() || end.outcome != JobOutcome::Finish {
                    continue;
                }
                let runtime = o.ran.runtime_us() as f64;
                for (p, said) in predictors.iter_mut().zip(o.said) {
                    p.learn(&o.job, said, runtime);
                }
                if runtime < 1e6 || o.job.time_limit_us.is_none() {
                    continue;
                }
                for (tally, said) in tallies.iter_mut().zip(o.said) {
                    if let Some(p) = said.point_us {
                        tally.pairs.push((p.max(1.0), runtime));
                    }
                    if let Some(q) = said.quantiles_us {
                        tally.covered += usize::from(runtime <= q.p90);
                    }
                }
            }
            _ => {}
        }
    }
    let predictors: BTreeMap<&'static str, Scores> = predictors
        .iter()
        .zip(&tallies)
        .map(|(p, tally)| (p.name(), tally.scores(matches!(p, Predictor::Jobcast(_)))))
        .collect();
    Report {
        submitted,
        jobs: tallies[0].pairs.len(),
        predictors,
    }
}

#[cfg(test)]
mod tests {
    use jobcast_ingest::event::{JobEnded, TaskEvent, TaskKind};

    use super::*;

    fn job(id: u64, user: &str, submit_s: u64, run_s: u64, request_s: u64) -> Vec<Event> {
        let mut j = JobSubmitted::new(id, submit_s * 1_000_000, 1);
        j.user = user.to_owned();
        j.time_limit_us = Some(request_s * 1_000_000);
        let task = |s: u64, kind| {
            Event::Task(TaskEvent {
                time_us: s * 1_000_000,
                job_id: id,
                task_index: 0,
                kind,
                machine_id: None,
                stage: None,
            })
        };
        vec![
            Event::JobSubmitted(j),
            task(submit_s, TaskKind::Schedule),
            task(submit_s + run_s, TaskKind::Finish),
            Event::JobEnded(JobEnded {
                time_us: (submit_s + run_s) * 1_000_000,
                job_id: id,
                outcome: JobOutcome::Finish,
            }),
        ]
    }

    /// Three jobs of one user, one after another: Last-2 predicts the
    /// first from its request, the second from the first, the third from
    /// both; the scores follow by hand.
    #[test]
    fn scores_follow_by_hand() {
        let mut events = job(1, "a", 0, 100, 400);
        events.extend(job(2, "a", 200, 200, 400));
        events.extend(job(3, "a", 500, 300, 400));
        let report = evaluate(events);
        assert_eq!((report.submitted, report.jobs), (3, 3));
        let l2 = report.scores("last2").unwrap();
        // Predictions 400, 100, 150 for 100, 200, 300.
        let accuracy = (100.0 / 400.0 + 100.0 / 200.0 + 150.0 / 300.0) / 3.0;
        assert!((l2.accuracy - accuracy).abs() < 1e-9, "{l2:?}");
        assert!((l2.under_pct - 200.0 / 3.0).abs() < 1e-9, "{l2:?}");
        let user = report.scores("user_estimate").unwrap();
        assert_eq!(user.under_pct, 0.0);
        assert!(user.coverage_p90_pct.is_none());
        // Errors 300 %, 100 %, 33 %: the median 100 %.
        assert!((user.p50_error_pct - 100.0).abs() < 1e-9, "{user:?}");
        assert!(report.scores("jobcast").unwrap().coverage_p90_pct.is_some());
    }
}
