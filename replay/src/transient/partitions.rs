//! Where work may go: the servers of each partition that take probes, the
//! general servers free of long tasks (Eagle's Succinct State Sharing),
//! and the long work the central scheduler has bound to each general
//! server. The event loop (`cluster.rs`) asks it where to send a task or a
//! probe and tells it what changed; it owns no queue and runs nothing.
//!
//! Servers are numbered as the cluster creates them: the general ones
//! first, then the static short partition, then transient servers as they
//! are requested.

use std::collections::BTreeSet;

use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// Servers a probe may be sent to, each once, drawn uniformly.
#[derive(Default)]
struct Pool {
    items: Vec<usize>,
    /// By server: its index in `items`, or `usize::MAX`.
    at: Vec<usize>,
}

impl Pool {
    fn insert(&mut self, server: usize) {
        if self.at.len() <= server {
            self.at.resize(server + 1, usize::MAX);
        }
        if self.at[server] == usize::MAX {
            self.at[server] = self.items.len();
            self.items.push(server);
        }
    }

    fn remove(&mut self, server: usize) {
        let Some(&i) = self.at.get(server).filter(|&&i| i != usize::MAX) else {
            return;
        };
        self.items.swap_remove(i);
        if let Some(&moved) = self.items.get(i) {
            self.at[moved] = i;
        }
        self.at[server] = usize::MAX;
    }

    fn len(&self) -> usize {
        self.items.len()
    }
}

pub(super) struct Partitions {
    general: usize,
    static_short: Pool,
    free_general: Pool,
    transient_up: Pool,
    /// Transient servers requested and not yet up.
    provisioning: Pool,
    /// Per general server: the long tasks bound there, and their
    /// estimated work (µs), as the central scheduler counts it.
    long: Vec<(u32, u64)>,
    /// General servers by (estimated work, id): the central scheduler's
    /// choice.
    by_backlog: BTreeSet<(u64, usize)>,
    /// Transient servers provisioning or up, not draining: the dynamic
    /// partition.
    transient_active: u32,
}

impl Partitions {
    /// `general` general servers (ids `0..general`) and `short_static`
    /// short-only ones after them, all free.
    pub(super) fn new(general: usize, short_static: usize) -> Partitions {
        let mut partitions = Partitions {
            general,
            static_short: Pool::default(),
            free_general: Pool::default(),
            transient_up: Pool::default(),
            provisioning: Pool::default(),
            long: vec![(0, 0); general],
            by_backlog: (0..general).map(|s| (0, s)).collect(),
            transient_active: 0,
        };
        for server in 0..general {
            partitions.free_general.insert(server);
        }
        for server in general..general + short_static {
            partitions.static_short.insert(server);
        }
        partitions
    }

    /// Bind a long task of estimated work `est_us` to the general server
    /// with the least estimated work bound to it.
    pub(super) fn bind_long(&mut self, est_us: u64) -> usize {
        let (backlog, server) = self.by_backlog.pop_first().expect("a general server");
        let long = &mut self.long[server];
        long.0 += 1;
        long.1 = backlog + est_us;
        self.by_backlog.insert((long.1, server));
        self.free_general.remove(server);
        server
    }

    /// A long task of estimated work `est_us` left `server`.
    pub(super) fn long_done(&mut self, server: usize, est_us: u64) {
        let long = &mut self.long[server];
        self.by_backlog.remove(&(long.1, server));
        long.0 -= 1;
        long.1 = long.1.saturating_sub(est_us);
        self.by_backlog.insert((long.1, server));
        if long.0 == 0 {
            self.free_general.insert(server);
        }
    }

    /// A random server for a short task's probe: an on-demand one (the
    /// static short partition or a general server with no long task), or
    /// unless `on_demand` any short-task server, transient ones included.
    /// With none, the general server with the least long work.
    pub(super) fn probe_target(&self, on_demand: bool, rng: &mut ChaCha8Rng) -> usize {
        let (a, b) = (self.static_short.len(), self.free_general.len());
        let c = if on_demand {
            0
        } else {
            self.transient_up.len()
        };
        if a + b + c == 0 {
            return self.by_backlog.first().expect("a general server").1;
        }
        let pick = rng.random_range(0..a + b + c);
        if pick < a {
            self.static_short.items[pick]
        } else if pick < a + b {
            self.free_general.items[pick - a]
        } else {
            self.transient_up.items[pick - a - b]
        }
    }

    /// `l_r`'s terms for the controller: general servers holding a long
    /// task, all servers (provisioning transient ones included, draining
    /// ones not), and the transient servers among them.
    pub(super) fn load(&self) -> (u32, u32, u32) {
        let long = (self.general - self.free_general.len()) as u32;
        let total = (self.general + self.static_short.len()) as u32 + self.transient_active;
        (long, total, self.transient_active)
    }

    pub(super) fn transient_active(&self) -> u32 {
        self.transient_active
    }

    /// The transient servers that are up and take probes.
    pub(super) fn transient_up(&self) -> &[usize] {
        &self.transient_up.items
    }

    /// The most recently requested transient server not yet up.
    pub(super) fn last_provisioning(&self) -> Option<usize> {
        self.provisioning.items.last().copied()
    }

    /// A transient server was requested.
    pub(super) fn requested(&mut self, server: usize) {
        self.provisioning.insert(server);
        self.transient_active += 1;
    }

    /// A requested transient server is up: it takes probes.
    pub(super) fn up(&mut self, server: usize) {
        self.provisioning.remove(server);
        self.transient_up.insert(server);
    }

    /// The controller gives up a transient server (provisioning, or up and
    /// now draining): it leaves the partition and takes no more probes.
    pub(super) fn released(&mut self, server: usize) {
        self.transient_active -= 1;
        self.provisioning.remove(server);
        self.transient_up.remove(server);
    }

    /// The provider took a transient server back; `in_partition` if it
    /// was still counted (up, not draining).
    pub(super) fn preempted(&mut self, server: usize, in_partition: bool) {
        if in_partition {
            self.transient_active -= 1;
        }
        self.transient_up.remove(server);
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    #[test]
    fn long_work_goes_to_the_least_loaded_general_server_and_frees_it_after() {
        let mut p = Partitions::new(3, 1);
        assert_eq!(p.load(), (0, 4, 0));
        assert_eq!(p.bind_long(100), 0);
        assert_eq!(p.bind_long(50), 1);
        assert_eq!(p.bind_long(10), 2);
        // Server 2 has the least work bound to it.
        assert_eq!(p.bind_long(10), 2);
        assert_eq!(p.load(), (3, 4, 0));
        // Only the static short server takes probes now.
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        assert!((0..20).all(|_| p.probe_target(false, &mut rng) == 3));
        p.long_done(1, 50);
        assert_eq!(p.load(), (2, 4, 0));
        p.requested(4);
        assert_eq!(p.load(), (2, 5, 1));
        // Provisioning servers take no probes; once up, they do (not the
        // on-demand ones).
        assert!((0..50).all(|_| p.probe_target(false, &mut rng) != 4));
        p.up(4);
        assert!((0..50).any(|_| p.probe_target(false, &mut rng) == 4));
        assert!((0..50).all(|_| p.probe_target(true, &mut rng) != 4));
        p.preempted(4, true);
        assert_eq!(p.load(), (2, 4, 0));
        assert!(p.transient_up().is_empty());
    }
}
