//! Where SLearn's JCT gain over 3Sigma comes from, broken down as the
//! paper breaks it down: jobs binned by width (thin: under the thin limit)
//! and size (under 10³ s of task time, or not), with SLearn's speedup in
//! each bin (§5.2.7, Table 8 and Fig. 9); and wide jobs' normalized
//! waiting time, the mean wait of their tasks over their mean task
//! runtime, in the paper's three segments (§5.2.5, Fig. 7).

use std::collections::HashMap;

use serde::Serialize;

use crate::sim::JobResult;

/// Jobs of at least this much task time are large (Table 8: 10³ s).
pub const LARGE_SIZE_US: f64 = 1e9;

/// The bounds of Fig. 7's three segments of normalized waiting time.
pub const WAIT_SEGMENTS: [f64; 2] = [0.04, 1.9];

/// One of Table 8's bins.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Bin {
    /// `thin-small` (the paper's bin-1), `wide-small` (bin-2),
    /// `thin-large` (bin-3), `wide-large` (bin-4).
    pub bin: &'static str,
    pub jobs: usize,
    /// Its share of the jobs and of their total task time.
    pub jobs_pct: f64,
    pub size_pct: f64,
    /// The bin's average JCT under the baseline over that under SLearn.
    pub speedup: Option<f64>,
    /// Its jobs that SLearn finished sooner than the baseline.
    pub faster_pct: Option<f64>,
}

/// One of Fig. 7's segments of wide jobs' normalized waiting time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WaitSegment {
    pub range: &'static str,
    /// Wide jobs in it under SLearn, under the baseline, under both (% of
    /// the wide jobs).
    pub slearn_pct: f64,
    pub baseline_pct: f64,
    pub both_pct: f64,
    /// Of those in it under both, the share that waited less under SLearn.
    pub less_under_slearn_pct: Option<f64>,
}

/// SLearn against one baseline, job by job.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Breakdown {
    pub bins: Vec<Bin>,
    /// Over the wide jobs.
    pub waiting: Vec<WaitSegment>,
    /// The wide jobs' normalized waiting times under SLearn and under the
    /// baseline, for Fig. 7's CDF.
    #[serde(skip)]
    pub wide_waits: [Vec<f64>; 2],
}

/// A job's mean task wait over its mean task runtime.
fn normalized_wait(j: &JobResult) -> f64 {
    j.mean_task_wait_us / j.true_mean_task_runtime_us.max(1.0)
}

fn pct(part: usize, whole: usize) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64 * 100.0
    }
}

impl Breakdown {
    /// SLearn's results against the baseline's on the same jobs; jobs of
    /// fewer than `thin_limit` tasks are thin.
    pub fn of(slearn: &[JobResult], baseline: &[JobResult], thin_limit: u32) -> Breakdown {
        let base: HashMap<u64, &JobResult> = baseline.iter().map(|j| (j.job_id, j)).collect();
        let pairs: Vec<(&JobResult, &JobResult)> = slearn
            .iter()
            .filter_map(|s| Some((s, *base.get(&s.job_id)?)))
            .collect();
        let size = |j: &JobResult| j.true_mean_task_runtime_us * f64::from(j.width);
        let total_size: f64 = pairs.iter().map(|(s, _)| size(s)).sum();
        let bins = [
            ("thin-small", true, false),
            ("wide-small", false, false),
            ("thin-large", true, true),
            ("wide-large", false, true),
        ]
        .into_iter()
        .map(|(bin, thin, large)| {
            let members: Vec<&(&JobResult, &JobResult)> = pairs
                .iter()
                .filter(|(s, _)| (s.width < thin_limit) == thin)
                .filter(|(s, _)| (size(s) >= LARGE_SIZE_US) == large)
                .collect();
            let jct = |f: fn(&(&JobResult, &JobResult)) -> u64| -> u128 {
                members.iter().map(|p| u128::from(f(p))).sum()
            };
            let (under_slearn, under_base) = (jct(|p| p.0.jct_us), jct(|p| p.1.jct_us));
            let faster = members.iter().filter(|(s, b)| s.jct_us < b.jct_us).count();
            let bin_size: f64 = members.iter().map(|(s, _)| size(s)).sum();
            Bin {
                bin,
                jobs: members.len(),
                jobs_pct: pct(members.len(), pairs.len()),
                size_pct: if total_size > 0.0 {
                    bin_size / total_size * 100.0
                } else {
                    0.0
                },
                speedup: (under_slearn > 0).then(|| under_base as f64 / under_slearn as f64),
                faster_pct: (!members.is_empty()).then(|| pct(faster, members.len())),
            }
        })
        .collect();
        let wide: Vec<(f64, f64)> = pairs
            .iter()
            .filter(|(s, _)| s.width >= thin_limit)
            .map(|(s, b)| (normalized_wait(s), normalized_wait(b)))
            .collect();
        let [low, high] = WAIT_SEGMENTS;
        let waiting = [
            ("< 0.04", 0.0, low),
            ("0.04–1.9", low, high),
            ("≥ 1.9", high, f64::INFINITY),
        ]
        .into_iter()
        .map(|(range, from, to)| {
            let inside = |w: f64| w >= from && w < to;
            let both: Vec<&(f64, f64)> = wide
                .iter()
                .filter(|(s, b)| inside(*s) && inside(*b))
                .collect();
            let less = both.iter().filter(|(s, b)| s < b).count();
            WaitSegment {
                range,
                slearn_pct: pct(wide.iter().filter(|(s, _)| inside(*s)).count(), wide.len()),
                baseline_pct: pct(wide.iter().filter(|(_, b)| inside(*b)).count(), wide.len()),
                both_pct: pct(both.len(), wide.len()),
                less_under_slearn_pct: (!both.is_empty()).then(|| pct(less, both.len())),
            }
        })
        .collect();
        Breakdown {
            bins,
            waiting,
            wide_waits: [
                wide.iter().map(|w| w.0).collect(),
                wide.iter().map(|w| w.1).collect(),
            ],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::placed;

    /// Job `id` of `width` tasks of `mean_s` s each, ended after `jct_s`,
    /// its tasks having waited `wait_s` on average.
    fn ran(id: u64, width: u32, mean_s: f64, jct_s: u64, wait_s: f64) -> JobResult {
        JobResult {
            job_id: id,
            jct_us: jct_s * 1_000_000,
            mean_task_wait_us: wait_s * 1e6,
            true_mean_task_runtime_us: mean_s * 1e6,
            ..placed(width, 0, 0)
        }
    }

    #[test]
    fn jobs_fall_into_table_8s_bins_and_fig_7s_segments() {
        // (id, width, mean s): thin-small, wide-small ×2, thin-large,
        // wide-large.
        let jobs = [
            (1, 1, 10.0),
            (2, 10, 5.0),
            (3, 10, 50.0),
            (4, 2, 900.0),
            (5, 20, 100.0),
        ];
        // SLearn: the thin jobs at once, the wide ones after their pilots.
        let slearn: Vec<JobResult> = [(10, 0.0), (100, 1.0), (60, 0.01), (900, 0.0), (500, 3.0)]
            .iter()
            .zip(jobs)
            .map(|(&(jct, wait), (id, width, mean))| ran(id, width, mean, jct, wait * mean))
            .collect();
        // The baseline (jobs listed in another order).
        let baseline: Vec<JobResult> = [
            (5, 20, 100.0, 1000, 5.0),
            (4, 2, 900.0, 1800, 1.0),
            (3, 10, 50.0, 50, 0.02),
            (2, 10, 5.0, 50, 0.5),
            (1, 1, 10.0, 20, 1.0),
        ]
        .into_iter()
        .map(|(id, width, mean, jct, wait)| ran(id, width, mean, jct, wait * mean))
        .collect();
        let b = Breakdown::of(&slearn, &baseline, 3);
        let bins: Vec<(&str, usize, Option<f64>, Option<f64>)> = b
            .bins
            .iter()
            .map(|x| (x.bin, x.jobs, x.speedup, x.faster_pct))
            .collect();
        assert_eq!(
            bins,
            [
                ("thin-small", 1, Some(2.0), Some(100.0)),
                ("wide-small", 2, Some(100.0 / 160.0), Some(0.0)),
                ("thin-large", 1, Some(2.0), Some(100.0)),
                ("wide-large", 1, Some(2.0), Some(100.0)),
            ]
        );
        // Task time: 10 + 50 + 500 + 1800 + 2000 = 4360 s.
        assert!((b.bins[3].size_pct - 2000.0 / 4360.0 * 100.0).abs() < 1e-9);
        assert!((b.bins.iter().map(|x| x.jobs_pct).sum::<f64>() - 100.0).abs() < 1e-9);
        // Wide jobs' normalized waits: SLearn 1.0, 0.01, 3.0; the
        // baseline 0.5, 0.02, 5.0.
        let segments: Vec<(f64, f64, f64, Option<f64>)> = b
            .waiting
            .iter()
            .map(|s| {
                (
                    s.slearn_pct,
                    s.baseline_pct,
                    s.both_pct,
                    s.less_under_slearn_pct,
                )
            })
            .collect();
        let third = 1.0 / 3.0 * 100.0;
        assert_eq!(
            segments,
            [
                (third, third, third, Some(100.0)),
                (third, third, third, Some(0.0)),
                (third, third, third, Some(100.0)),
            ]
        );
        assert_eq!(b.wide_waits[0].len(), 3);
    }
}
