//! The Kaplan–Meier estimate of a lifetime distribution from right-censored
//! observations.
//!
//! A VM that was preempted gives its lifetime exactly (an *event*); one that
//! its user stopped only says the lifetime was longer than what was seen
//! (*right-censored*). About half of the GCE measurements are user stops,
//! mostly early, so the plain empirical CDF of the preemptions alone
//! overstates early preemptions. The Kaplan–Meier product
//!
//! ```text
//! Ŝ(t) = ∏_{tᵢ ≤ t} (1 − dᵢ / nᵢ)
//! ```
//!
//! over the distinct event times `tᵢ` (`dᵢ` events among the `nᵢ` VMs still
//! under observation just before `tᵢ`) counts every censored VM as at risk up
//! to its censoring time and no longer. At a time shared by events and
//! censorings, the events come first (the censored VMs were at risk at that
//! instant), the usual convention. Greenwood's formula gives the variance:
//! `Var Ŝ(t) = Ŝ(t)² Σ_{tᵢ ≤ t} dᵢ / (nᵢ (nᵢ − dᵢ))`, reported as 0 once `Ŝ`
//! has reached 0 (where the sum is undefined and the estimate certain).
//!
//! This module is the empirical curve that [`fit`](super::fit) fits the
//! lifetime models to and measures them against.

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::running_time::LifetimeDraws;

/// One observed lifetime.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Observation {
    /// Hours from launch to the end of observation.
    pub time_h: f64,
    /// `true` if the VM was preempted then; `false` if its lifetime is
    /// right-censored there (stopped by its user, or still running).
    pub event: bool,
}

/// The estimate at one distinct event time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct KmStep {
    pub time_h: f64,
    /// VMs under observation just before `time_h`.
    pub at_risk: usize,
    /// Preemptions at `time_h`.
    pub events: usize,
    /// `Ŝ(time_h)`, after this step.
    pub survival: f64,
    /// Greenwood's variance of `Ŝ(time_h)`.
    pub variance: f64,
}

/// The Kaplan–Meier curve: `Ŝ` is 1 before the first step, constant
/// between steps, and undefined after the last observation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KaplanMeier {
    steps: Vec<KmStep>,
    observations: usize,
    events: usize,
    last_time_h: f64,
}

/// An observation time is not a finite, non-negative number.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[error("lifetime {0} h is not a finite, non-negative number")]
pub struct InvalidLifetime(pub f64);

impl KaplanMeier {
    /// Estimate from observations in any order.
    pub fn new(observations: &[Observation]) -> Result<Self, InvalidLifetime> {
        if let Some(bad) = observations
            .iter()
            .find(|o| !(o.time_h.is_finite() && o.time_h >= 0.0))
        {
            return Err(InvalidLifetime(bad.time_h));
        }
        let mut sorted = observations.to_vec();
        // At equal times, events (true) before censorings (false).
        sorted.sort_by(|a, b| a.time_h.total_cmp(&b.time_h).then(b.event.cmp(&a.event)));
        let mut steps = Vec::new();
        let (mut survival, mut greenwood) = (1.0_f64, 0.0_f64);
        let mut at_risk = sorted.len();
        let mut i = 0;
        while i < sorted.len() {
            let t = sorted[i].time_h;
            let same_time = sorted[i..].iter().take_while(|o| o.time_h == t);
            let (mut events, mut total) = (0, 0);
            for o in same_time {
                total += 1;
                events += usize::from(o.event);
            }
            if events > 0 {
                let (n, d) = (at_risk as f64, events as f64);
                survival *= 1.0 - d / n;
                if events < at_risk {
                    greenwood += d / (n * (n - d));
                }
                steps.push(KmStep {
                    time_h: t,
                    at_risk,
                    events,
                    survival,
                    variance: survival * survival * greenwood,
                });
            }
            at_risk -= total;
            i += total;
        }
        Ok(KaplanMeier {
            steps,
            observations: observations.len(),
            events: observations.iter().filter(|o| o.event).count(),
            last_time_h: sorted.last().map_or(0.0, |o| o.time_h),
        })
    }

    /// The steps, one per distinct event time, ascending.
    pub fn steps(&self) -> &[KmStep] {
        &self.steps
    }

    /// How many lifetimes (events and censored) the estimate is built from.
    pub fn observations(&self) -> usize {
        self.observations
    }

    /// How many of them are preemptions.
    pub fn events(&self) -> usize {
        self.events
    }

    /// The largest observed time (event or censoring): `Ŝ` is known up to it.
    pub fn last_time_h(&self) -> f64 {
        self.last_time_h
    }

    /// `Ŝ(t)`, right-continuous. NaN past the last observation when the
    /// largest time is a censoring (the estimate says nothing there), and
    /// for NaN `t`.
    pub fn survival(&self, t: f64) -> f64 {
        if t.is_nan() || (t > self.last_time_h && self.survival_at_end() > 0.0) {
            return f64::NAN;
        }
        // The number of steps at or before t.
        let k = self.steps.partition_point(|s| s.time_h <= t);
        if k == 0 {
            1.0
        } else {
            self.steps[k - 1].survival
        }
    }

    /// `F̂(t) = 1 − Ŝ(t)`.
    pub fn cdf(&self, t: f64) -> f64 {
        1.0 - self.survival(t)
    }

    /// Greenwood's variance of `Ŝ(t)` (NaN where `Ŝ(t)` is).
    pub fn variance(&self, t: f64) -> f64 {
        let s = self.survival(t);
        if s.is_nan() {
            return f64::NAN;
        }
        let k = self.steps.partition_point(|s| s.time_h <= t);
        if k == 0 {
            0.0
        } else {
            self.steps[k - 1].variance
        }
    }

    /// `Ŝ` after the last step (1 without events).
    fn survival_at_end(&self) -> f64 {
        self.steps.last().map_or(1.0, |s| s.survival)
    }

    /// `Ŝ(t)` completed past the last observation: the mass still alive
    /// there ends there (for an empirical distribution to draw from).
    fn completed_survival(&self, t: f64) -> f64 {
        if t >= self.last_time_h {
            0.0
        } else {
            self.survival(t)
        }
    }
}

/// The measured curve as a distribution to draw lifetimes from, for
/// simulations that score a policy against measured lifetimes instead of
/// its own model: `Ŝ` as estimated, and the mass it leaves at its last
/// observation (VMs still alive when observation ended) ending there.
impl LifetimeDraws for KaplanMeier {
    fn failure_probability(&self, age_h: f64, job_h: f64) -> f64 {
        if job_h <= 0.0 {
            return 0.0;
        }
        let alive = self.completed_survival(age_h);
        if alive <= 0.0 {
            return 1.0;
        }
        ((alive - self.completed_survival(age_h + job_h)) / alive).clamp(0.0, 1.0)
    }

    fn draw_given_alive(&self, age_h: f64, rng: &mut ChaCha8Rng) -> f64 {
        let alive = self.completed_survival(age_h);
        if alive <= 0.0 {
            return age_h;
        }
        // The first step past `age_h` where Ŝ falls to u·Ŝ(age), u in (0, 1].
        let target = (1.0 - rng.random::<f64>()) * alive;
        let from = self.steps.partition_point(|s| s.time_h <= age_h);
        self.steps[from..]
            .iter()
            .find(|s| s.survival <= target)
            .map_or(self.last_time_h, |s| s.time_h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(time_h: f64, event: bool) -> Observation {
        Observation { time_h, event }
    }

    /// Draws from the curve follow it, conditioned on the age, and the
    /// mass left at a final censoring ends there.
    #[test]
    fn draws_follow_the_curve_and_end_at_the_last_observation() {
        use rand::SeedableRng;
        // Ŝ: 1 → 3/4 at 1 h → 3/8 at 2 h; 3/8 still alive at 3 h (censored).
        let data = [
            obs(1.0, true),
            obs(1.0, true),
            obs(2.0, true),
            obs(2.0, true),
            obs(2.0, true),
            obs(3.0, false),
            obs(3.0, false),
            obs(3.0, false),
        ];
        let km = KaplanMeier::new(&data).unwrap();
        assert!((km.failure_probability(0.0, 1.5) - 0.25).abs() < 1e-12);
        assert!((km.failure_probability(1.0, 1.5) - 0.5).abs() < 1e-12);
        assert_eq!(km.failure_probability(0.0, 5.0), 1.0);
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let n = 40_000;
        let draws: Vec<f64> = (0..n).map(|_| km.draw_given_alive(0.0, &mut rng)).collect();
        let share = |t: f64| draws.iter().filter(|&&d| d == t).count() as f64 / f64::from(n);
        for (t, want) in [(1.0, 0.25), (2.0, 0.375), (3.0, 0.375)] {
            assert!((share(t) - want).abs() < 0.01, "{t}: {}", share(t));
        }
        let later: Vec<f64> = (0..n).map(|_| km.draw_given_alive(1.5, &mut rng)).collect();
        assert!(later.iter().all(|&d| d == 2.0 || d == 3.0));
        let at_two = later.iter().filter(|&&d| d == 2.0).count() as f64 / f64::from(n);
        assert!((at_two - 0.5).abs() < 0.01, "{at_two}");
    }

    /// A hand-computed case with ties between events and a censoring:
    /// times 1, 2, 2(c), 3, 3, 4(c), 5, 6(c).
    ///
    /// | t | n | d | Ŝ | Greenwood sum |
    /// |---|---|---|---|---|
    /// | 1 | 8 | 1 | 7/8 | 1/56 |
    /// | 2 | 7 | 1 | 7/8·6/7 = 3/4 | 1/56 + 1/42 |
    /// | 3 | 5 | 2 | 3/4·3/5 = 9/20 | … + 2/15 |
    /// | 5 | 2 | 1 | 9/40 | … + 1/2 |
    #[test]
    fn hand_computed_case() {
        let data = [
            obs(3.0, true),
            obs(1.0, true),
            obs(2.0, false),
            obs(6.0, false),
            obs(2.0, true),
            obs(5.0, true),
            obs(4.0, false),
            obs(3.0, true),
        ];
        let km = KaplanMeier::new(&data).unwrap();
        let got: Vec<(f64, usize, usize)> = km
            .steps()
            .iter()
            .map(|s| (s.time_h, s.at_risk, s.events))
            .collect();
        assert_eq!(
            got,
            vec![(1.0, 8, 1), (2.0, 7, 1), (3.0, 5, 2), (5.0, 2, 1)]
        );
        let want = [7.0 / 8.0, 3.0 / 4.0, 9.0 / 20.0, 9.0 / 40.0];
        let sums = [
            1.0 / 56.0,
            1.0 / 56.0 + 1.0 / 42.0,
            1.0 / 56.0 + 1.0 / 42.0 + 2.0 / 15.0,
            1.0 / 56.0 + 1.0 / 42.0 + 2.0 / 15.0 + 1.0 / 2.0,
        ];
        for ((step, s), g) in km.steps().iter().zip(want).zip(sums) {
            assert!((step.survival - s).abs() < 1e-15, "{step:?}");
            assert!((step.variance - s * s * g).abs() < 1e-15, "{step:?}");
        }
        assert_eq!(
            (km.observations(), km.events(), km.last_time_h()),
            (8, 5, 6.0)
        );
        assert_eq!(km.survival(0.5), 1.0);
        assert_eq!(km.survival(2.0), 0.75);
        assert_eq!(km.survival(2.99), 0.75);
        assert!((km.survival(4.5) - 9.0 / 20.0).abs() < 1e-15);
        assert!((km.cdf(6.0) - (1.0 - 9.0 / 40.0)).abs() < 1e-15);
        // The last time is a censoring: nothing is known beyond it.
        assert!(km.survival(6.5).is_nan() && km.variance(6.5).is_nan());
        assert_eq!(km.variance(0.5), 0.0);
    }

    #[test]
    fn without_censoring_it_is_the_empirical_cdf() {
        let data: Vec<Observation> = [0.5, 1.5, 1.5, 2.0, 4.0]
            .into_iter()
            .map(|t| obs(t, true))
            .collect();
        let km = KaplanMeier::new(&data).unwrap();
        for (t, f) in [
            (0.4, 0.0),
            (0.5, 0.2),
            (1.5, 0.6),
            (3.0, 0.8),
            (4.0, 1.0),
            (9.0, 1.0),
        ] {
            assert!((km.cdf(t) - f).abs() < 1e-15, "t={t}: {}", km.cdf(t));
        }
        // The last step empties the risk set: Ŝ = 0 with variance 0.
        assert_eq!(km.steps().last().unwrap().variance, 0.0);
    }

    #[test]
    fn edge_cases() {
        let empty = KaplanMeier::new(&[]).unwrap();
        assert!(empty.steps().is_empty());
        assert_eq!(empty.survival(0.0), 1.0);
        let censored = KaplanMeier::new(&[obs(1.0, false), obs(2.0, false)]).unwrap();
        assert!(censored.steps().is_empty());
        assert_eq!(censored.survival(1.5), 1.0);
        assert!(censored.survival(2.5).is_nan());
        assert_eq!(
            KaplanMeier::new(&[obs(f64::NAN, true)])
                .unwrap_err()
                .to_string(),
            "lifetime NaN h is not a finite, non-negative number"
        );
        assert!(KaplanMeier::new(&[obs(-1.0, false)]).is_err());
    }
}
