//! Algorithm 1 of Teylo et al.: the primary map, a greedy best fit of the
//! bag's tasks, by memory from the largest, onto as few and as fast VMs as
//! the occupation limit `D · VM_timelimit` allows, each bought where it is
//! cheaper (the spot market, when it is allowed).

use serde::{Deserialize, Serialize};

use super::catalogue::{Catalogue, Clock};
use super::vm::{Market, Task, Vm};

/// The primary map of one bag.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PrimaryMap {
    pub vms: Vec<Vm>,
    /// `D`, periods.
    pub deadline: u64,
    /// `D · VM_timelimit`, periods: no VM is occupied past it.
    pub limit: u64,
}

impl PrimaryMap {
    /// Every task ends within the occupation limit.
    pub fn within_limit(&self) -> bool {
        self.vms.iter().all(|vm| vm.last_end() <= self.limit)
    }

    /// When its last task ends, periods.
    pub fn makespan(&self) -> u64 {
        self.vms.iter().map(Vm::last_end).max().unwrap_or(0)
    }

    /// What its contracted slots cost, USD.
    pub fn cost(&self, catalogue: &Catalogue, clock: &Clock) -> f64 {
        self.vms.iter().map(|vm| vm.cost(catalogue, clock)).sum()
    }
}

/// Algorithm 1 for `tasks` with deadline `deadline` (periods) and the
/// occupation share `time_limit` (`VM_timelimit`, 0.5 in the paper). With
/// `spot` false every VM is on demand (the paper's On-demand baseline).
pub fn primary_map(
    tasks: &[Task],
    catalogue: &Catalogue,
    clock: &Clock,
    deadline: u64,
    time_limit: f64,
    spot: bool,
) -> PrimaryMap {
    let limit = (deadline as f64 * time_limit).floor() as u64;
    let mut order: Vec<&Task> = tasks.iter().collect();
    // Line 1: by memory, largest first (then longest, then id, so that a
    // map is a function of the bag).
    order.sort_by(|a, b| {
        b.memory_gb
            .total_cmp(&a.memory_gb)
            .then(b.base_s.total_cmp(&a.base_s))
            .then(a.id.cmp(&b.id))
    });
    let mut vms: Vec<Vm> = Vec::new();
    for task in order {
        let fit = |vm: &Vm| {
            let t = &catalogue.types[vm.kind];
            let periods = task.periods_on(t, clock);
            vm.earliest_start(t, task.memory_gb, periods)
                .map(|(core, start)| (core, start, periods))
        };
        // Lines 5-14: into an already contracted slot, the VM of most
        // waste first.
        let mut by_waste: Vec<usize> = (0..vms.len()).collect();
        by_waste.sort_by_key(|&i| (std::cmp::Reverse(vms[i].waste(clock)), i));
        let inside = by_waste.iter().find_map(|&i| {
            let (core, start, periods) = fit(&vms[i])?;
            let end = start + periods;
            (end <= vms[i].end_slot(clock) && end <= limit).then_some((i, core, start, periods))
        });
        // Lines 16-26: new slots on an allocated VM, the least waste first,
        // while its slots stay within the limit.
        let extended = inside.or_else(|| {
            by_waste.iter().rev().find_map(|&i| {
                let (core, start, periods) = fit(&vms[i])?;
                let slots = clock.slots(start + periods);
                (slots * clock.slot_periods <= limit).then_some((i, core, start, periods))
            })
        });
        let (i, core, start, periods) = match extended {
            Some(found) => found,
            None => {
                // Lines 27-33: a new VM of the type that runs the task in
                // the fewest periods (the cheaper on a tie), on the spot
                // market if it is cheaper there.
                let kind = best_type(task, catalogue, clock, spot);
                let t = &catalogue.types[kind];
                let market = match t.spot_usd_h {
                    Some(s) if spot && s < t.on_demand_usd_h => Market::Spot,
                    _ => Market::OnDemand,
                };
                vms.push(Vm::new(kind, market, 0));
                (vms.len() - 1, 0, 0, task.periods_on(t, clock))
            }
        };
        vms[i].place(task, core, start, periods, clock);
    }
    PrimaryMap {
        vms,
        deadline,
        limit,
    }
}

/// `best_VM`: the type with memory for `task` that runs it in the fewest
/// periods, the cheaper on a tie (the first type with the most memory if
/// none has enough: the map is then over its limit, and says so).
fn best_type(task: &Task, catalogue: &Catalogue, clock: &Clock, spot: bool) -> usize {
    let price = |i: usize| {
        let t = &catalogue.types[i];
        match t.spot_usd_h {
            Some(s) if spot => s.min(t.on_demand_usd_h),
            _ => t.on_demand_usd_h,
        }
    };
    (0..catalogue.types.len())
        .filter(|&i| catalogue.types[i].memory_gb >= task.memory_gb)
        .min_by(|&a, &b| {
            let pa = task.periods_on(&catalogue.types[a], clock);
            let pb = task.periods_on(&catalogue.types[b], clock);
            pa.cmp(&pb).then(price(a).total_cmp(&price(b)))
        })
        .unwrap_or_else(|| {
            (0..catalogue.types.len())
                .max_by(|&a, &b| {
                    catalogue.types[a]
                        .memory_gb
                        .total_cmp(&catalogue.types[b].memory_gb)
                        .then(b.cmp(&a))
                })
                .expect("a validated catalogue has types")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bag(n: u32, hours: f64, memory_gb: f64) -> Vec<Task> {
        (0..n)
            .map(|id| Task {
                id,
                base_s: hours * 3600.0,
                memory_gb,
            })
            .collect()
    }

    #[test]
    fn fills_the_fastest_spot_vm_before_buying_another() {
        let cat = Catalogue::teylo_2018();
        let clock = Clock::MINUTE_PERIODS_HOUR_SLOTS;
        // 40 tasks of 10 h on the baseline, 1 GB each: 1.61 h on c3.8xlarge.
        let map = primary_map(&bag(40, 10.0, 1.0), &cat, &clock, 20 * 60, 0.5, true);
        assert!(map.within_limit());
        assert_eq!(map.limit, 600);
        let names: Vec<&str> = map
            .vms
            .iter()
            .map(|vm| cat.types[vm.kind].name.as_str())
            .collect();
        assert_eq!(names, ["c3.8xlarge"]);
        assert!(map.vms.iter().all(|vm| vm.market == Market::Spot));
        // 32 cores: 40 tasks run in two waves of 97 periods each.
        assert_eq!(map.makespan(), 2 * 97);
        assert_eq!(map.vms[0].slots, 4);
        assert!((map.cost(&cat, &clock) - 4.0 * 0.47).abs() < 1e-9);
    }

    #[test]
    fn the_occupation_limit_spreads_the_bag_and_on_demand_only_stays_on_demand() {
        let cat = Catalogue::teylo_2018();
        let clock = Clock::MINUTE_PERIODS_HOUR_SLOTS;
        // Within 2 h only one wave of 97 periods fits: two VMs.
        let map = primary_map(&bag(40, 10.0, 1.0), &cat, &clock, 4 * 60, 0.5, true);
        assert!(map.within_limit());
        assert_eq!(map.vms.len(), 2);
        assert_eq!(map.makespan(), 97);
        let od = primary_map(&bag(40, 10.0, 1.0), &cat, &clock, 4 * 60, 0.5, false);
        assert!(od.vms.iter().all(|vm| vm.market == Market::OnDemand));
        assert!(od.cost(&cat, &clock) > map.cost(&cat, &clock) * 3.0);
        // A task longer than the limit even on the fastest type.
        let late = primary_map(&bag(1, 100.0, 1.0), &cat, &clock, 10 * 60, 0.5, true);
        assert!(!late.within_limit());
    }

    #[test]
    fn memory_picks_the_type_and_limits_the_cores_in_use() {
        let cat = Catalogue::teylo_2018();
        let clock = Clock::MINUTE_PERIODS_HOUR_SLOTS;
        // 20 GB tasks: three fit a 60 GB VM at once, the rest wait or go
        // elsewhere.
        let map = primary_map(&bag(4, 10.0, 20.0), &cat, &clock, 20 * 60, 0.5, true);
        assert!(map.within_limit());
        for vm in &map.vms {
            let t = &cat.types[vm.kind];
            for p in &vm.placements {
                let held: f64 = vm
                    .placements
                    .iter()
                    .filter(|q| q.start <= p.start && p.start < q.end)
                    .count() as f64
                    * 20.0;
                assert!(held <= t.memory_gb, "{} over its memory", t.name);
            }
        }
        assert_eq!(map.vms.iter().map(|v| v.placements.len()).sum::<usize>(), 4);
    }
}
