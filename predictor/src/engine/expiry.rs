//! Giving up on what stopped reporting. A job whose end never arrives (its
//! end event lost upstream, a trace cut short) and a machine that left
//! without a word would otherwise stay in memory, in every snapshot and in
//! the store for as long as the service runs. So a job with no event for
//! `expiry.live_job_idle_hours` of event time ends as
//! [`JobState::Expired`]: unscored, nothing learnt from it, its policies'
//! state released, its record then kept for the store's retention like any
//! ended job's. A machine with no event (its own, or a task placed on it)
//! for `expiry.machine_silent_hours` is forgotten, record and all. Each is
//! counted ([`Effects::expired_jobs`], [`Effects::expired_machines`]), never
//! silent.
//!
//! Sweeps run when the event clock (the time the input partitions agree
//! on, `clock.rs`; no single event or partition moves it) crosses a step of a hundredth of the shorter window: one pass
//! over the live jobs and machines per step, in id order, so the outcome is
//! a function of the input alone, as everything the engine does.

use serde::{Deserialize, Serialize};

use super::Engine;
use super::effects::Effects;
use super::records::JobState;
use jobcast_ingest::config::ConfigError;

/// Steps per window.
const STEPS: u64 = 100;
const HOUR_US: u64 = 3_600_000_000;

/// When live jobs and machines that stopped reporting are given up on
/// (hours of event time; 0 never).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExpirySettings {
    /// A job still running with no event for this long ends as `expired`.
    pub live_job_idle_hours: u64,
    /// A machine with no event for this long is forgotten.
    pub machine_silent_hours: u64,
}

impl Default for ExpirySettings {
    /// 30 days each: longer than any batch job runs quietly (the Google
    /// 2011 trace is 29 days long), short enough that a lost end costs a
    /// month of memory, not the service's lifetime.
    fn default() -> Self {
        ExpirySettings {
            live_job_idle_hours: 720,
            machine_silent_hours: 720,
        }
    }
}

impl ExpirySettings {
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (key, hours) in [
            ("live_job_idle_hours", self.live_job_idle_hours),
            ("machine_silent_hours", self.machine_silent_hours),
        ] {
            if hours.checked_mul(HOUR_US).is_none() {
                return Err(ConfigError::new(
                    key,
                    format!("{hours} hours do not fit in µs of event time"),
                ));
            }
        }
        Ok(())
    }

    fn window_us(hours: u64) -> Option<u64> {
        (hours > 0).then(|| hours * HOUR_US)
    }

    /// The event time between sweeps: a hundredth of the shorter window
    /// (`None` when nothing expires).
    fn step_us(&self) -> Option<u64> {
        let job = Self::window_us(self.live_job_idle_hours);
        let machine = Self::window_us(self.machine_silent_hours);
        let shorter = match (job, machine) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b)?,
        };
        Some((shorter / STEPS).max(1))
    }
}

impl Engine {
    /// When the clock crosses a step, give up on the jobs and machines
    /// silent for longer than their window.
    pub(super) fn expire_silent(&mut self, effects: &mut Effects) {
        let Some(step) = self.expiry.step_us() else {
            return;
        };
        let watermark = self.clock.now_us();
        if watermark < self.next_sweep_us {
            return;
        }
        self.next_sweep_us = watermark - watermark % step + step;
        if let Some(idle) = ExpirySettings::window_us(self.expiry.live_job_idle_hours) {
            let bound = watermark.saturating_sub(idle);
            let mut silent: Vec<u64> = self
                .jobs
                .iter()
                .filter(|(_, job)| job.last_event_us < bound)
                .map(|(&id, _)| id)
                .collect();
            silent.sort_unstable();
            for job_id in silent {
                self.forget_pacing(job_id, effects);
                let mut job = self.jobs.remove(&job_id).expect("listed above");
                self.etas.forget(job_id);
                job.record.state = JobState::Expired;
                job.record.end_us = Some(watermark);
                for policy in &mut self.policies {
                    policy.on_job_abandoned(job_id);
                }
                effects.jobs.mark(job_id);
                effects.expired_jobs.push(job_id);
                self.ended.insert(job_id, job.record);
            }
        }
        if let Some(silent_for) = ExpirySettings::window_us(self.expiry.machine_silent_hours) {
            self.machines
                .expire_silent(watermark.saturating_sub(silent_for), effects);
        }
    }
}
