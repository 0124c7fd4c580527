//! Giving up on a partition that holds the merge back for too long.
//!
//! A partition that neither delivers nor reports its end (its leader
//! offline, its broker unreachable while the others answer) would hold
//! back every other partition for as long as it lasts: the instance, and
//! every other instance, since each reads all partitions, would apply
//! nothing. After `consumer.idle_partition_timeout_ms` of holding back
//! messages that wait, the merge stops waiting for it; what it delivers
//! when it returns is applied late, among later events, as a live topic's
//! late events always are. The order then depends on timing, so a second
//! run over the same data may apply them elsewhere; the log keeps the
//! order applied, so a restore repeats it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tracing::warn;

use super::partition_merge::{PartitionMerge, Weigh};
use crate::telemetry;

pub(super) struct IdleWatch {
    timeout: Option<Duration>,
    /// When each partition holding the merge back began to, while
    /// messages waited for it.
    since: BTreeMap<i32, Instant>,
}

impl IdleWatch {
    /// `timeout` of `None`: wait for every partition for ever.
    pub(super) fn new(timeout: Option<Duration>) -> Self {
        IdleWatch {
            timeout,
            since: BTreeMap::new(),
        }
    }

    /// Give up on the partitions that have held back waiting messages for
    /// the timeout, as of `now`.
    pub(super) fn check<T: Weigh>(&mut self, merge: &mut PartitionMerge<T>, now: Instant) {
        let Some(timeout) = self.timeout else {
            return;
        };
        if !merge.blocked() {
            self.since.clear();
        } else {
            let holding = merge.holding_back();
            self.since.retain(|p, _| holding.contains(p));
            for partition in holding {
                let since = *self.since.entry(partition).or_insert(now);
                if now.duration_since(since) >= timeout && merge.stop_waiting_for(partition) {
                    self.since.remove(&partition);
                    warn!(
                        partition,
                        waited_seconds = timeout.as_secs_f64(),
                        "input partition neither delivers nor reports its end (its leader gone?): \
                         the others go on without it, and its events are applied late when it returns"
                    );
                    metrics::counter!(telemetry::INPUT_PARTITION_IDLE, "partition" => partition.to_string())
                        .increment(1);
                }
            }
        }
        metrics::gauge!(telemetry::INPUT_PARTITIONS_IDLE).set(merge.idle() as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct Message(&'static str);

    impl Weigh for Message {
        fn bytes(&self) -> usize {
            0
        }
    }

    #[test]
    fn a_partition_holding_back_waiting_messages_is_given_up_on_after_the_timeout() {
        let mut merge = PartitionMerge::default();
        merge.assign(0, None);
        merge.assign(1, None);
        let mut watch = IdleWatch::new(Some(Duration::from_secs(5)));
        let t0 = Instant::now();
        // Nothing waits: holding back costs nothing, and is not timed.
        watch.check(&mut merge, t0);
        watch.check(&mut merge, t0 + Duration::from_secs(10));
        assert_eq!(merge.idle(), 0);
        merge.push(0, 0, Some(10), Message("a"));
        merge.reached_end(0);
        watch.check(&mut merge, t0 + Duration::from_secs(11));
        watch.check(&mut merge, t0 + Duration::from_millis(15_900));
        assert_eq!((merge.idle(), merge.pop()), (0, None));
        watch.check(&mut merge, t0 + Duration::from_secs(16));
        assert_eq!(merge.idle(), 1);
        assert_eq!(merge.pop().map(|m| m.item), Some(Message("a")));
    }

    #[test]
    fn without_a_timeout_every_partition_is_waited_for() {
        let mut merge = PartitionMerge::default();
        merge.assign(0, None);
        merge.assign(1, None);
        merge.push(0, 0, Some(10), Message("a"));
        let mut watch = IdleWatch::new(None);
        let t0 = Instant::now();
        watch.check(&mut merge, t0);
        watch.check(&mut merge, t0 + Duration::from_secs(86_400));
        assert_eq!((merge.idle(), merge.pop()), (0, None));
    }
}
