//! Algorithm 2 of Teylo et al.: the backup map. For each task `tᵢ` on a
//! spot VM, its recovery group (Eq. 2: `tᵢ`, the tasks running beside it,
//! and every task after those on their cores) is placed on on-demand VMs,
//! the ones already chosen for the group first, each task where it costs
//! least while the group still ends before `D`; then Eq. 3 gives
//! `start_bkp`, the latest moment a hibernation during `tᵢ` may last to
//! before the group must migrate ([`hibernation_hint`]).
//!
//! Cost is what the task adds to the group's bill in whole slots, so a
//! task that fits a slot an earlier one already bought costs nothing; a
//! new VM's slots are shared among the group's tasks it can hold at once
//! (its cores, its memory, the tasks left). That is the paper's "minimum
//! number of the cheapest on-demand VMs" (§III): a per-task price alone
//! would buy a two-core VM for each pair of tasks where one sixteen-core
//! VM costs half as much. The group's tasks are placed longest first.

use serde::{Deserialize, Serialize};

use super::catalogue::{Catalogue, Clock};
use super::primary::PrimaryMap;
use super::vm::{Market, Task, Vm};
use crate::preemption::hints::hibernation_hint;

/// The recovery group of one task on one spot VM, and where it would run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecoveryGroup {
    /// The spot VM, by index into the primary map's VMs.
    pub vm: usize,
    /// `tᵢ`.
    pub task: u32,
    /// Eq. 2, by task id, as placed (longest first).
    pub tasks: Vec<u32>,
    /// `S_VM`: the on-demand VMs it runs on, times from the migration
    /// (boot included).
    pub backups: Vec<Vm>,
    /// `runtime(Rec_Group, S_VM)`, boot included, periods.
    pub runtime: u64,
    /// Eq. 3, periods from the job's start; negative when even an
    /// immediate migration is late.
    pub start_backup: i64,
    /// `end(tᵢ) + runtime < D`: the group meets the deadline if `tᵢ`'s VM
    /// hibernates while `tᵢ` runs.
    pub meets_deadline: bool,
}

/// The backup map: one recovery group per task on a spot VM.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BackupMap {
    pub groups: Vec<RecoveryGroup>,
}

impl BackupMap {
    /// Every group meets the deadline.
    pub fn meets_deadline(&self) -> bool {
        self.groups.iter().all(|g| g.meets_deadline)
    }

    /// The group of `task` on the spot VM `vm`.
    pub fn group(&self, vm: usize, task: u32) -> Option<&RecoveryGroup> {
        self.groups.iter().find(|g| g.vm == vm && g.task == task)
    }
}

/// Algorithm 2 over `primary`'s spot VMs. `tasks` are the bag the primary
/// map placed (looked up by id).
pub fn backup_map(
    primary: &PrimaryMap,
    tasks: &[Task],
    catalogue: &Catalogue,
    clock: &Clock,
) -> BackupMap {
    let by_id = |id: u32| {
        tasks
            .iter()
            .find(|t| t.id == id)
            .expect("the primary map places only the bag's tasks")
    };
    let boot = clock.periods(catalogue.boot_s as f64);
    let deadline = primary.deadline;
    let mut groups = Vec::new();
    for (j, vm) in primary.vms.iter().enumerate() {
        if vm.market != Market::Spot {
            continue;
        }
        let mut placed = std::collections::HashMap::new();
        for ti in &vm.placements {
            let mut members = recovery_group(vm, ti.task);
            members.sort_by(|&a, &b| by_id(b).base_s.total_cmp(&by_id(a).base_s).then(a.cmp(&b)));
            // The group must end by D − 1 after tᵢ's planned end. Tasks
            // that run side by side share their group: it is placed once.
            let budget = deadline.saturating_sub(1).saturating_sub(ti.end);
            let (backups, meets) = placed
                .entry((members.clone(), budget))
                .or_insert_with(|| place_group(&members, &by_id, catalogue, clock, boot, budget))
                .clone();
            let runtime = backups.iter().map(Vm::last_end).max().unwrap_or(0);
            let hint = hibernation_hint(deadline as f64, runtime as f64, 1.0, 0.0, None);
            groups.push(RecoveryGroup {
                vm: j,
                task: ti.task,
                tasks: members,
                backups,
                runtime,
                start_backup: hint.start_backup as i64,
                meets_deadline: meets && ti.end + runtime < deadline,
            });
        }
    }
    BackupMap { groups }
}

/// Lines 8-17: the group's tasks (`members`, longest first), each on the
/// backup VM where it costs least within `budget` periods, a new one (ready
/// after `boot` periods) when none of those can take it; and whether every
/// task made the budget. Times count from the migration.
pub fn place_group<'a>(
    members: &[u32],
    by_id: &impl Fn(u32) -> &'a Task,
    catalogue: &Catalogue,
    clock: &Clock,
    boot: u64,
    budget: u64,
) -> (Vec<Vm>, bool) {
    let mut backups: Vec<Vm> = Vec::new();
    let mut meets = true;
    for (done, &id) in members.iter().enumerate() {
        let task = by_id(id);
        let left = members.len() - done;
        let runtime = backups.iter().map(Vm::last_end).max().unwrap_or(0);
        let (i, core, start, periods) =
            match cheapest_in(&backups, task, catalogue, clock, runtime, budget) {
                Some(found) => found,
                None => {
                    let (kind, ok) =
                        cheapest_new(task, left, catalogue, clock, boot, runtime, budget);
                    meets &= ok;
                    backups.push(Vm::new(kind, Market::OnDemand, boot));
                    let periods = task.periods_on(&catalogue.types[kind], clock);
                    (backups.len() - 1, 0, boot, periods)
                }
            };
        backups[i].place(task, core, start, periods, clock);
    }
    (backups, meets)
}

/// Eq. 2: `task`, the tasks on `vm` whose run overlaps it, and every task
/// after each of those on its core.
pub fn recovery_group(vm: &Vm, task: u32) -> Vec<u32> {
    let ti = vm.placement_of(task).expect("the task is on the VM");
    let mut heads: Vec<_> = vm
        .placements
        .iter()
        .filter(|p| p.task == task || (p.start < ti.end && ti.start < p.end))
        .collect();
    heads.sort_by_key(|p| (p.core, p.start));
    let mut members: Vec<u32> = vm
        .placements
        .iter()
        .filter(|p| heads.iter().any(|h| h.core == p.core && p.start >= h.start))
        .map(|p| p.task)
        .collect();
    members.sort_unstable();
    members
}

/// `get_best_VM(t_k, S_VM)`: the VM of the group where `task` adds the
/// least to the bill, the earlier end on a tie, keeping the group within
/// `budget` periods.
fn cheapest_in(
    backups: &[Vm],
    task: &Task,
    catalogue: &Catalogue,
    clock: &Clock,
    runtime: u64,
    budget: u64,
) -> Option<(usize, u16, u64, u64)> {
    backups
        .iter()
        .enumerate()
        .filter_map(|(i, vm)| {
            let t = &catalogue.types[vm.kind];
            let periods = task.periods_on(t, clock);
            let (core, start) = vm.earliest_start(t, task.memory_gb, periods)?;
            let end = start + periods;
            if runtime.max(end) > budget {
                return None;
            }
            let added = clock.slots(end).saturating_sub(vm.slots);
            Some((
                clock.cost(added, t.on_demand_usd_h),
                end,
                i,
                core,
                start,
                periods,
            ))
        })
        .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)))
        .map(|(_, _, i, core, start, periods)| (i, core, start, periods))
}

/// `get_best_VM(t_k, M)`: the on-demand type that runs `task` after its
/// boot within `budget` at the least cost per task it can hold of the
/// `left` still to place (the faster on a tie), and whether one did;
/// failing that, the fastest with memory for it.
fn cheapest_new(
    task: &Task,
    left: usize,
    catalogue: &Catalogue,
    clock: &Clock,
    boot: u64,
    runtime: u64,
    budget: u64,
) -> (usize, bool) {
    let fitting =
        || (0..catalogue.types.len()).filter(|&i| catalogue.types[i].memory_gb >= task.memory_gb);
    let end = |i: usize| boot + task.periods_on(&catalogue.types[i], clock);
    let cheapest = fitting()
        .filter(|&i| runtime.max(end(i)) <= budget)
        .min_by(|&a, &b| {
            let cost = |i: usize| {
                let t = &catalogue.types[i];
                let room = ((t.memory_gb / task.memory_gb.max(1e-9)).floor() as usize)
                    .min(usize::from(t.cores))
                    .min(left)
                    .max(1);
                clock.cost(clock.slots(end(i)), t.on_demand_usd_h) / room as f64
            };
            cost(a)
                .total_cmp(&cost(b))
                .then(end(a).cmp(&end(b)))
                .then(a.cmp(&b))
        });
    match cheapest {
        Some(i) => (i, true),
        None => (
            fitting().min_by_key(|&i| (end(i), i)).unwrap_or_else(|| {
                (0..catalogue.types.len())
                    .max_by(|&a, &b| {
                        catalogue.types[a]
                            .memory_gb
                            .total_cmp(&catalogue.types[b].memory_gb)
                    })
                    .expect("a validated catalogue has types")
            }),
            false,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deadlines::primary::primary_map;
    use crate::deadlines::vm::Placement;

    #[test]
    fn eq_2_takes_the_parallel_tasks_and_their_successors() {
        // Fig. 4's shape: two cores; t0 then t2 on core 0, t1 then t3 on
        // core 1, t4 after t2.
        let clock = Clock::MINUTE_PERIODS_HOUR_SLOTS;
        let mut vm = Vm::new(0, Market::Spot, 0);
        let place = |vm: &mut Vm, task, core, start, end| {
            let t = Task {
                id: task,
                base_s: 0.0,
                memory_gb: 0.0,
            };
            vm.place(&t, core, start, end - start, &clock);
        };
        place(&mut vm, 0, 0, 0, 10);
        place(&mut vm, 1, 1, 0, 4);
        place(&mut vm, 3, 1, 4, 20);
        place(&mut vm, 2, 0, 10, 15);
        place(&mut vm, 4, 0, 15, 30);
        // During t0 [0, 10): t1 and t3 run beside it; all that follows.
        assert_eq!(recovery_group(&vm, 0), [0, 1, 2, 3, 4]);
        // During t2 [10, 15): t3 beside it, t4 after it.
        assert_eq!(recovery_group(&vm, 2), [2, 3, 4]);
        // During t4 [15, 30): t3 until 20.
        assert_eq!(recovery_group(&vm, 4), [3, 4]);
        assert_eq!(
            vm.placement_of(3),
            Some(&Placement {
                task: 3,
                core: 1,
                start: 4,
                end: 20
            })
        );
    }

    #[test]
    fn groups_pack_onto_few_on_demand_vms_within_the_deadline() {
        let cat = Catalogue::teylo_2018();
        let clock = Clock::MINUTE_PERIODS_HOUR_SLOTS;
        let tasks: Vec<Task> = (0..20)
            .map(|id| Task {
                id,
                base_s: 10.0 * 3600.0,
                memory_gb: 1.0,
            })
            .collect();
        let d = 8 * 60;
        let primary = primary_map(&tasks, &cat, &clock, d, 0.5, true);
        let backup = backup_map(&primary, &tasks, &cat, &clock);
        assert_eq!(backup.groups.len(), 20);
        assert!(backup.meets_deadline());
        for g in &backup.groups {
            // One wave on one VM: all 20 tasks run side by side.
            assert_eq!(g.tasks.len(), 20);
            let ti_end = primary.vms[g.vm].placement_of(g.task).unwrap().end;
            assert!(ti_end + g.runtime < d);
            // D − runtime − 1.
            assert_eq!(g.start_backup, d as i64 - g.runtime as i64 - 1);
            // The slowest type that makes D is the cheapest: it has to be
            // fast enough for 10 h of baseline work in D − 98 − 1 periods.
            let placed: usize = g.backups.iter().map(|vm| vm.placements.len()).sum();
            assert_eq!(placed, 20);
            assert!(g.backups.len() <= 2, "{} backup VMs", g.backups.len());
            for vm in &g.backups {
                assert_eq!(vm.market, Market::OnDemand);
                let t = &cat.types[vm.kind];
                assert!(10.0 * 3600.0 * t.slowdown / 60.0 + 2.0 <= (d - ti_end) as f64);
            }
        }
        // Too tight a deadline: no type makes it.
        let tight = primary_map(&tasks, &cat, &clock, 3 * 60, 0.5, true);
        assert!(!backup_map(&tight, &tasks, &cat, &clock).meets_deadline());
    }
}
