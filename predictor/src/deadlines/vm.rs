//! One VM of a map: its type, market, contracted slots and the tasks
//! placed on its cores, with the memory they hold over time.

use serde::{Deserialize, Serialize};

use super::catalogue::{Catalogue, Clock, VmType};

/// Where a VM is bought.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Market {
    /// Cheap, and may hibernate.
    Spot,
    OnDemand,
}

/// A task of a bag: its runtime on the baseline core (slowdown 1) and the
/// memory it holds while it runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Task {
    pub id: u32,
    pub base_s: f64,
    pub memory_gb: f64,
}

impl Task {
    /// Its runtime in periods on a VM of type `vm`.
    pub fn periods_on(&self, vm: &VmType, clock: &Clock) -> u64 {
        clock.periods(self.base_s * vm.slowdown)
    }
}

/// A task placed on a core: `[start, end)` in periods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    pub task: u32,
    pub core: u16,
    pub start: u64,
    pub end: u64,
}

/// A VM of a map.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Vm {
    /// Index of its type in the catalogue.
    pub kind: usize,
    pub market: Market,
    /// Slots contracted from time 0 of the map.
    pub slots: u64,
    /// In the order they were placed.
    pub placements: Vec<Placement>,
    /// The memory each placed task holds, by position in `placements`.
    memory_gb: Vec<f64>,
    /// When each core's last task ends, by core (cores beyond it are free).
    free: Vec<u64>,
    /// Until when the VM cannot run tasks (a backup VM's boot).
    ready: u64,
}

impl Vm {
    /// A VM of type `kind` with no task, ready to run from `ready`.
    pub fn new(kind: usize, market: Market, ready: u64) -> Vm {
        Vm {
            kind,
            market,
            slots: 0,
            placements: Vec::new(),
            memory_gb: Vec::new(),
            free: Vec::new(),
            ready,
        }
    }

    /// The end of its last contracted slot.
    pub fn end_slot(&self, clock: &Clock) -> u64 {
        self.slots * clock.slot_periods
    }

    /// When its last task ends (its readiness while it has none).
    pub fn last_end(&self) -> u64 {
        self.placements
            .iter()
            .map(|p| p.end)
            .max()
            .unwrap_or(self.ready)
    }

    /// Eq. 1: the idle end of its last contracted slot.
    pub fn waste(&self, clock: &Clock) -> u64 {
        self.end_slot(clock).saturating_sub(self.last_end())
    }

    /// The earliest `(core, start)` at which a task holding `memory_gb`
    /// for `periods` fits: after the core's last task, and with the VM's
    /// memory never exceeded while it runs (a core may wait for memory,
    /// the gaps of the paper's Fig. 3). `None` if the task alone needs
    /// more memory than the VM has.
    pub fn earliest_start(&self, vm: &VmType, memory_gb: f64, periods: u64) -> Option<(u16, u64)> {
        if memory_gb > vm.memory_gb {
            return None;
        }
        // While every core can hold the largest task at once, memory never
        // binds and the earliest free core is the answer.
        let largest = self.memory_gb.iter().copied().fold(memory_gb, f64::max);
        let unbound = largest * f64::from(vm.cores) <= vm.memory_gb + 1e-9;
        let mut best: Option<(u64, u16)> = None;
        for core in 0..vm.cores {
            let free = self
                .free
                .get(usize::from(core))
                .copied()
                .unwrap_or(self.ready);
            if best.is_some_and(|(start, _)| start <= free) {
                continue;
            }
            if unbound {
                best = Some((free, core));
                continue;
            }
            // A start that waits for memory waits for some task's end.
            let mut candidates: Vec<u64> = std::iter::once(free)
                .chain(self.placements.iter().map(|p| p.end).filter(|&e| e > free))
                .collect();
            candidates.sort_unstable();
            if let Some(start) = candidates
                .into_iter()
                .find(|&s| self.fits(vm, memory_gb, s, s + periods))
                && best.is_none_or(|(b, _)| start < b)
            {
                best = Some((start, core));
            }
        }
        best.map(|(start, core)| (core, start))
    }

    /// Whether `memory_gb` more fits throughout `[start, end)`.
    fn fits(&self, vm: &VmType, memory_gb: f64, start: u64, end: u64) -> bool {
        // Memory in use only rises at a task's start: check at `start` and
        // at every start inside the window.
        std::iter::once(start)
            .chain(
                self.placements
                    .iter()
                    .map(|p| p.start)
                    .filter(|&s| s > start && s < end),
            )
            .all(|t| {
                let used: f64 = self
                    .placements
                    .iter()
                    .zip(&self.memory_gb)
                    .filter(|(p, _)| p.start <= t && t < p.end)
                    .map(|(_, m)| m)
                    .sum();
                used + memory_gb <= vm.memory_gb + 1e-9
            })
    }

    /// Place `task` at `start` on `core`, contracting the slots its end
    /// needs.
    pub fn place(&mut self, task: &Task, core: u16, start: u64, periods: u64, clock: &Clock) {
        let end = start + periods;
        self.placements.push(Placement {
            task: task.id,
            core,
            start,
            end,
        });
        self.memory_gb.push(task.memory_gb);
        let core = usize::from(core);
        if self.free.len() <= core {
            self.free.resize(core + 1, self.ready);
        }
        self.free[core] = self.free[core].max(end);
        self.slots = self.slots.max(clock.slots(end));
    }

    /// What its contracted slots cost.
    pub fn cost(&self, catalogue: &Catalogue, clock: &Clock) -> f64 {
        let t = &catalogue.types[self.kind];
        let price = match self.market {
            Market::Spot => t.spot_usd_h.unwrap_or(t.on_demand_usd_h),
            Market::OnDemand => t.on_demand_usd_h,
        };
        clock.cost(self.slots, price)
    }

    /// The placement of `task`, if it is here.
    pub fn placement_of(&self, task: u32) -> Option<&Placement> {
        self.placements.iter().find(|p| p.task == task)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vm_type(cores: u16, memory_gb: f64) -> VmType {
        VmType {
            name: "t".into(),
            cores,
            memory_gb,
            on_demand_usd_h: 1.0,
            spot_usd_h: Some(0.3),
            slowdown: 1.0,
            spot_prices: Vec::new(),
        }
    }

    #[test]
    fn a_core_waits_for_memory() {
        let clock = Clock::MINUTE_PERIODS_HOUR_SLOTS;
        let t = vm_type(2, 8.0);
        let mut vm = Vm::new(0, Market::Spot, 0);
        let big = Task {
            id: 0,
            base_s: 600.0,
            memory_gb: 6.0,
        };
        assert_eq!(vm.earliest_start(&t, 6.0, 10), Some((0, 0)));
        vm.place(&big, 0, 0, 10, &clock);
        // Core 1 is free at once, but 6 + 6 > 8 GB: it waits until 10.
        assert_eq!(vm.earliest_start(&t, 6.0, 10), Some((0, 10)));
        // 2 GB fit beside it now.
        assert_eq!(vm.earliest_start(&t, 2.0, 10), Some((1, 0)));
        assert_eq!(vm.earliest_start(&t, 9.0, 1), None);
        assert_eq!(vm.slots, 1);
        assert_eq!(vm.waste(&clock), 50);
        vm.place(&big, 0, 10, 55, &clock);
        assert_eq!(vm.slots, 2);
        assert_eq!(vm.waste(&clock), 55);
        assert!(
            (vm.cost(
                &Catalogue {
                    types: vec![t],
                    boot_s: 0
                },
                &clock
            ) - 0.6)
                .abs()
                < 1e-12
        );
    }

    #[test]
    fn a_booting_vm_starts_tasks_after_its_boot() {
        let t = vm_type(1, 8.0);
        let vm = Vm::new(0, Market::OnDemand, 3);
        assert_eq!(vm.earliest_start(&t, 1.0, 5), Some((0, 3)));
        assert_eq!(vm.last_end(), 3);
    }
}
