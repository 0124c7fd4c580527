//! Cluster-level hints for the schedulers downstream of the risk scores:
//! the rules the transient-capacity (CloudCoaster) and spot-deadline
//! (Teylo et al.) schedulers act on. The simulator's CloudCoaster
//! (`jobcast_replay::transient`) and the engine's live controller
//! (`engine/capacity.rs`) resize the transient partition by
//! [`coaster_hint`]; the spot-deadline maps (`crate::deadlines`) and the
//! simulator's hibernations (`jobcast_replay::deadlines`) time a recovery
//! group's migration by [`hibernation_hint`].
//!
//! - CloudCoaster (Ogden and Guo): a hybrid scheduler keeps a short-job-only
//!   partition and grows it with cheap transient servers while long tasks
//!   crowd the cluster. Its signal is the long-load ratio
//!   `l_r = servers running long tasks / all servers`, recomputed when a
//!   long job arrives or a long task ends: above the threshold (0.95 in the
//!   paper) transient servers are added, otherwise released (after draining
//!   their queues), "until l_r equals the threshold" (§3.2), adding
//!   aggressively and removing conservatively (§3.3). With whole servers
//!   `l_r` seldom equals the threshold, so jobcast reads the two rules
//!   together: add at once as many servers as bring `l_r` down to the
//!   threshold; release one at a time, and only while `l_r` stays at or
//!   under it without that server (a release that pushed it back over
//!   would be undone by the next long task). The budget is the cost of the
//!   `p·N` on-demand short servers it replaces: at
//!   `r = on-demand price / transient price` that buys `K = ⌊r⌋·N·p`
//!   transient servers (the paper: "⌊r⌋ is the number of transient servers
//!   that can be used for the cost of one on-demand server").
//! - Hibernation-prone spot VMs (Teylo et al.): a hibernated VM may resume
//!   too late for a job's deadline `D`. The latest safe time to start the
//!   backup on on-demand VMs is
//!   `start_bkp = D − runtime(recovery group on the backup VMs, boot included) − 1`
//!   (one scheduling period of slack); once a hibernation outlasts it the
//!   tasks must migrate now.

use serde::{Deserialize, Serialize};

/// CloudCoaster's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CoasterConfig {
    /// Grow the transient partition while `l_r` is above this.
    pub threshold: f64,
    /// `r = on-demand price / transient price`.
    pub cost_ratio: f64,
    /// `N`: on-demand servers of a purely static short-only partition.
    pub static_short_servers: u32,
    /// `p`: the fraction of them replaced by transient servers.
    pub replaced_fraction: f64,
}

impl Default for CoasterConfig {
    /// The paper's simulation: threshold 0.95, `r = 3`, `N = 80`, `p = 0.5`.
    fn default() -> Self {
        CoasterConfig {
            threshold: 0.95,
            cost_ratio: 3.0,
            static_short_servers: 80,
            replaced_fraction: 0.5,
        }
    }
}

/// What to do with the transient short-job partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PartitionAction {
    /// Add [`CoasterHint::servers`] transient servers.
    Grow,
    /// Drain and release one transient server.
    Shrink,
    /// Nothing: grow wanted but the budget is spent, nothing to release,
    /// or a release would push `l_r` over the threshold.
    Hold,
}

impl PartitionAction {
    /// Its name in JSON and in metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            PartitionAction::Grow => "grow",
            PartitionAction::Shrink => "shrink",
            PartitionAction::Hold => "hold",
        }
    }
}

/// The CloudCoaster hint.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CoasterHint {
    pub long_load_ratio: f64,
    pub threshold: f64,
    pub action: PartitionAction,
    /// Servers to add (for `Grow`) or release (1, for `Shrink`); 0 to hold.
    pub servers: u32,
    /// `K = ⌊r⌋·N·p`: transient servers the budget buys.
    pub transient_budget: u32,
    /// Transient servers in the partition now.
    pub transient_servers: u32,
}

/// The CloudCoaster decision for a cluster with `long_servers` of
/// `total_servers` (transient ones included) running long tasks, and
/// `transient_servers` transient servers in the short partition (see the
/// [module docs](self) for the rule). An empty cluster has `l_r = 0`.
pub fn coaster_hint(
    long_servers: u32,
    total_servers: u32,
    transient_servers: u32,
    config: &CoasterConfig,
) -> CoasterHint {
    let long = f64::from(long_servers.min(total_servers));
    let long_load_ratio = if total_servers == 0 {
        0.0
    } else {
        long / f64::from(total_servers)
    };
    let budget = (config.cost_ratio.floor().max(0.0)
        * f64::from(config.static_short_servers)
        * config.replaced_fraction.clamp(0.0, 1.0))
    .floor() as u32;
    let threshold = config.threshold;
    let (action, servers) = if long_load_ratio > threshold {
        // The fewest added servers that bring l_r to the threshold.
        let wanted = ((long / threshold).ceil() - f64::from(total_servers)).max(1.0);
        let room = budget.saturating_sub(transient_servers);
        let add = (wanted.min(f64::from(u32::MAX)) as u32).min(room);
        if add > 0 {
            (PartitionAction::Grow, add)
        } else {
            (PartitionAction::Hold, 0)
        }
    } else if transient_servers > 0
        && total_servers > 1
        && long / f64::from(total_servers - 1) <= threshold
    {
        (PartitionAction::Shrink, 1)
    } else {
        (PartitionAction::Hold, 0)
    };
    CoasterHint {
        long_load_ratio,
        threshold,
        action,
        servers,
        transient_budget: budget,
        transient_servers,
    }
}

/// The hibernation hint for one task's recovery group.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HibernationHint {
    /// `start_bkp`: the latest time to start the backup and still meet `D`.
    pub start_backup: f64,
    /// How long a hibernation starting at `hibernated_since` may last
    /// before the backup must start (negative: already too late).
    pub tolerable_hibernation: Option<f64>,
    /// The VM is hibernated and `now ≥ start_bkp`: migrate the recovery
    /// group to its backup VMs now.
    pub migrate_now: bool,
}

/// Teylo et al.'s backup start for a job with deadline `deadline`, whose
/// recovery group takes `recovery_runtime` on the backup VMs (boot
/// included), with scheduling periods of `period` (the "− 1" of the paper
/// is one period). `hibernated_since` is when the VM hibernated, if it is
/// hibernated now. All times on one clock, in one unit (hours, or the
/// maps' periods).
pub fn hibernation_hint(
    deadline: f64,
    recovery_runtime: f64,
    period: f64,
    now: f64,
    hibernated_since: Option<f64>,
) -> HibernationHint {
    let start_backup = deadline - recovery_runtime - period;
    HibernationHint {
        start_backup,
        tolerable_hibernation: hibernated_since.map(|since| start_backup - since),
        migrate_now: hibernated_since.is_some() && now >= start_backup,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_load_ratio_against_the_threshold() {
        let c = CoasterConfig::default();
        // K = ⌊3⌋·80·0.5 = 120, as in the paper's r = 3 runs.
        let h = coaster_hint(3900, 4000, 10, &c);
        assert_eq!(h.transient_budget, 120);
        assert!((h.long_load_ratio - 0.975).abs() < 1e-15);
        // 3900 / 0.95 = 4105.3: 106 servers bring l_r to the threshold.
        assert_eq!((h.action, h.servers), (PartitionAction::Grow, 106));
        // ... within the budget's 110 left, else what is left.
        let h = coaster_hint(3900, 4000, 100, &c);
        assert_eq!((h.action, h.servers), (PartitionAction::Grow, 20));
        assert_eq!(
            coaster_hint(3900, 4000, 120, &c).action,
            PartitionAction::Hold
        );
        // At the threshold exactly it does not grow ("above the threshold"),
        // nor release a server that would push it back over.
        assert_eq!(
            coaster_hint(3800, 4000, 10, &c).action,
            PartitionAction::Hold
        );
        let h = coaster_hint(3700, 4000, 10, &c);
        assert_eq!((h.action, h.servers), (PartitionAction::Shrink, 1));
        assert_eq!(coaster_hint(100, 4000, 0, &c).action, PartitionAction::Hold);
        assert_eq!(coaster_hint(0, 0, 3, &c).long_load_ratio, 0.0);
        // ⌊2.7⌋ = 2 transient servers per on-demand one.
        let r = CoasterConfig {
            cost_ratio: 2.7,
            ..c
        };
        assert_eq!(coaster_hint(0, 10, 0, &r).transient_budget, 80);
    }

    #[test]
    fn backup_start_and_migration() {
        // D = 10 h, recovery 3 h with boot, periods of 1 min.
        let period = 1.0 / 60.0;
        let h = hibernation_hint(10.0, 3.0, period, 6.0, None);
        assert!((h.start_backup - (7.0 - period)).abs() < 1e-12);
        assert_eq!(h.tolerable_hibernation, None);
        assert!(!h.migrate_now);
        let h = hibernation_hint(10.0, 3.0, period, 6.9, Some(6.0));
        assert!((h.tolerable_hibernation.unwrap() - (1.0 - period)).abs() < 1e-12);
        assert!(!h.migrate_now);
        let h = hibernation_hint(10.0, 3.0, period, 7.0, Some(6.0));
        assert!(h.migrate_now);
        // Not hibernated: nothing to migrate even past start_bkp.
        assert!(!hibernation_hint(10.0, 3.0, period, 8.0, None).migrate_now);
    }
}
