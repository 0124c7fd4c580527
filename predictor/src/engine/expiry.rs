//! Giving up on what stopped reporting. A job whose end never arrives (its
//! end event lost upstream, a trace cut short) and a machine that left
//! without a word would otherwise stay in memory, in every snapshot and in
//! the store for as long as the service runs. So a job with no event for
//! `expiry.live_job_idle_hours` of event time ends as
//! [`JobState::Expired`](crate::engine::JobState::Expired): unscored, nothing learnt from it, its policies'
//! state released, its record then kept for the store's retention like any
//! ended job's. A machine with no event (its own, or a task placed on it)
//! for `expiry.machine_silent_hours` is forgotten, record and all. Each is
//! counted (`Effects::expired_jobs`, `Effects::expired_machines`), never
//! silent.
//!
//! Sweeps run when the event clock (the time the input partitions agree
//! on, `clock.rs`; no single event or partition moves it) crosses a step of a hundredth of the shorter window: one pass
//! over the live jobs and machines per step, in id order, so the outcome is
//! a function of the input alone, as everything the engine does.

use serde::{Deserialize, Serialize};

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

/// When the next sweep is, and how long is too long.
#[derive(Debug)]
pub(super) struct Expiry {
    settings: ExpirySettings,
    /// The clock's time at which to look next for what stopped reporting.
    next_sweep_us: u64,
}

/// What a sweep gives up on: the live jobs whose last event is before
/// `jobs_before`, the machines silent since before `machines_before`
/// (none where that window is 0).
pub(super) struct Sweep {
    pub(super) jobs_before: Option<u64>,
    pub(super) machines_before: Option<u64>,
}

impl Expiry {
    pub(super) fn new(settings: ExpirySettings) -> Self {
        Expiry {
            settings,
            next_sweep_us: 0,
        }
    }

    /// What a snapshot keeps: when the next sweep is.
    pub(super) fn next_sweep_us(&self) -> u64 {
        self.next_sweep_us
    }

    pub(super) fn restore(&mut self, next_sweep_us: u64) {
        self.next_sweep_us = next_sweep_us;
    }

    /// The sweep due once the clock, at `now_us`, has crossed a step.
    pub(super) fn due(&mut self, now_us: u64) -> Option<Sweep> {
        let step = self.settings.step_us()?;
        if now_us < self.next_sweep_us {
            return None;
        }
        self.next_sweep_us = now_us - now_us % step + step;
        let before = |hours| ExpirySettings::window_us(hours).map(|w| now_us.saturating_sub(w));
        Some(Sweep {
            jobs_before: before(self.settings.live_job_idle_hours),
            machines_before: before(self.settings.machine_silent_hours),
        })
    }
}
