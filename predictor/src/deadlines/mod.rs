//! Deadlines on hibernating spot VMs: the static scheduler of Teylo et al.
//! ("A Bag-of-Tasks Scheduler Tolerant to Temporal Failures in Clouds").
//!
//! A bag of independent tasks must end by its deadline `D`. Spot VMs are
//! cheap but may hibernate, and one that resumes too late makes the job
//! late (a temporal failure). The scheduler draws two maps before the job
//! starts:
//!
//! - the primary map ([`primary`], Algorithm 1): every task on a VM,
//!   greedily, spot VMs of the most processing power first, no VM busy past
//!   `D · VM_timelimit`, so that half the time (the paper's 0.5) is left
//!   for recovery;
//! - the backup map ([`backup`], Algorithm 2): for each task on a spot VM,
//!   the on-demand VMs its recovery group would move to, and `start_bkp`
//!   (Eq. 3), until when a hibernation can be waited out.
//!
//! Time is discrete ([`Clock`]): periods (a minute), billed in slots (an
//! hour). Runtimes are the caller's: the paper's are known in advance;
//! jobcast's are its estimates at a quantile, which the simulator
//! (`jobcast_replay::deadlines`) then runs against the truth.

pub mod backup;
pub mod catalogue;
pub mod fleet;
pub mod primary;
pub mod vm;

pub use backup::{BackupMap, RecoveryGroup, backup_map, place_group, recovery_group};
pub use catalogue::{Catalogue, CatalogueError, Clock, SpotPrice, VmType};
pub use fleet::{Change, Fleet, Terms};
pub use primary::{PrimaryMap, primary_map};
pub use vm::{Market, Placement, Task, Vm};

/// Both maps of one bag at one deadline.
#[derive(Debug, Clone, PartialEq)]
pub struct Maps {
    pub primary: PrimaryMap,
    pub backup: BackupMap,
}

impl Maps {
    /// Algorithms 1 and 2 for `tasks` at `deadline` periods; with `spot`
    /// false, on on-demand VMs only (the paper's On-demand baseline, with
    /// nothing to back up).
    pub fn draw(
        tasks: &[Task],
        catalogue: &Catalogue,
        clock: &Clock,
        deadline: u64,
        time_limit: f64,
        spot: bool,
    ) -> Maps {
        let primary = primary_map(tasks, catalogue, clock, deadline, time_limit, spot);
        let backup = backup_map(&primary, tasks, catalogue, clock);
        Maps { primary, backup }
    }

    /// A valid pair: the primary within its occupation limit, every
    /// recovery group within the deadline.
    pub fn valid(&self) -> bool {
        self.primary.within_limit() && self.backup.meets_deadline()
    }
}

/// §IV: the shortest deadline, in steps of `step` periods from `step` up
/// to `max`, at which both maps are valid; `None` if none is by `max`.
pub fn shortest_deadline(
    tasks: &[Task],
    catalogue: &Catalogue,
    clock: &Clock,
    time_limit: f64,
    step: u64,
    max: u64,
) -> Option<(u64, Maps)> {
    let step = step.max(1);
    (1..=max / step).map(|k| k * step).find_map(|deadline| {
        // The backup map only where the primary one holds.
        let primary = primary_map(tasks, catalogue, clock, deadline, time_limit, true);
        if !primary.within_limit() {
            return None;
        }
        let backup = backup_map(&primary, tasks, catalogue, clock);
        let maps = Maps { primary, backup };
        maps.valid().then_some((deadline, maps))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shortest_deadline_is_the_first_valid_step() {
        let cat = Catalogue::teylo_2018();
        let clock = Clock::MINUTE_PERIODS_HOUR_SLOTS;
        let tasks: Vec<Task> = (0..50)
            .map(|id| Task {
                id,
                base_s: (5.0 + f64::from(id % 7)) * 3600.0,
                memory_gb: 1.0 + f64::from(id % 3),
            })
            .collect();
        let (d, maps) = shortest_deadline(&tasks, &cat, &clock, 0.5, 60, 200 * 60).unwrap();
        assert!(maps.valid());
        assert_eq!(d % 60, 0);
        // One hour less is not valid.
        assert!(!Maps::draw(&tasks, &cat, &clock, d - 60, 0.5, true).valid());
        // Every task is placed once, and the spot VMs' tasks have groups.
        let placed: usize = maps.primary.vms.iter().map(|v| v.placements.len()).sum();
        assert_eq!(placed, 50);
        let on_spot: usize = maps
            .primary
            .vms
            .iter()
            .filter(|v| v.market == Market::Spot)
            .map(|v| v.placements.len())
            .sum();
        assert_eq!(maps.backup.groups.len(), on_spot);
        assert!(shortest_deadline(&tasks, &cat, &clock, 0.5, 60, 60).is_none());
    }
}
