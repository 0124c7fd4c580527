//! Last-2 (Tsafrir, Etsion and Feitelson, "Backfilling using
//! system-generated predictions rather than user runtime estimates", TPDS
//! 2007): a job's runtime is predicted as the mean of the runtimes of the
//! two most recent jobs of its user that have ended, or of the one if only
//! one has; never above the job's requested time, which is also the
//! prediction while the user has no history.

use foldhash::{HashMap, HashMapExt};

/// The users' last two runtimes.
#[derive(Debug, Clone, Default)]
pub struct Last2 {
    /// Per user, the newest runtime and the one before it, µs.
    recent: HashMap<String, (f64, Option<f64>)>,
}

impl Last2 {
    pub fn new() -> Self {
        Last2 {
            recent: HashMap::new(),
        }
    }

    /// The prediction for a job of `user` that requested `requested_us`;
    /// `None` when the user has no history and the job no request.
    pub fn predict(&self, user: &str, requested_us: Option<u64>) -> Option<f64> {
        let request = requested_us.map(|us| us as f64);
        let learnt = self.recent.get(user).map(|&(newest, before)| match before {
            Some(before) => (newest + before) / 2.0,
            None => newest,
        });
        match (learnt, request) {
            (Some(p), Some(r)) => Some(p.min(r)),
            (Some(p), None) => Some(p),
            (None, r) => r,
        }
    }

    /// A job of `user` ended after running `runtime_us`.
    pub fn learn(&mut self, user: &str, runtime_us: f64) {
        if !(runtime_us.is_finite() && runtime_us >= 0.0) {
            return;
        }
        match self.recent.get_mut(user) {
            Some(slot) => *slot = (runtime_us, Some(slot.0)),
            None => {
                self.recent.insert(user.to_owned(), (runtime_us, None));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mean_of_the_last_two_capped_by_the_request() {
        let mut l = Last2::new();
        assert_eq!(l.predict("a", Some(600)), Some(600.0));
        assert_eq!(l.predict("a", None), None);
        l.learn("a", 100.0);
        assert_eq!(l.predict("a", Some(600)), Some(100.0));
        l.learn("a", 300.0);
        assert_eq!(l.predict("a", Some(600)), Some(200.0));
        l.learn("a", 900.0);
        // (900 + 300) / 2, capped by the request.
        assert_eq!(l.predict("a", Some(600)), Some(600.0));
        assert_eq!(l.predict("a", None), Some(600.0));
        assert_eq!(l.predict("b", Some(60)), Some(60.0));
    }
}
