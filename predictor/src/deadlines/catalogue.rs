//! The VM types a deadline job may run on, and the clock its maps are
//! drawn on.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One VM type, as Table VI of Teylo et al. describes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VmType {
    pub name: String,
    pub cores: u16,
    pub memory_gb: f64,
    /// On-demand price of one hour, USD.
    pub on_demand_usd_h: f64,
    /// Spot price of one hour, USD; none where the type is not offered on
    /// the spot market with hibernation.
    pub spot_usd_h: Option<f64>,
    /// A task's runtime here over its runtime on the baseline core
    /// (`P_B / P_vm`: below 1 is faster).
    pub slowdown: f64,
    /// The spot price's changes over time, in time order; when given they
    /// set the spot price ([`VmType::spot_at`]) and `spot_usd_h` only
    /// says the type is on the spot market.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spot_prices: Vec<SpotPrice>,
}

/// A spot price from `from_us` (µs of event time) until the next change.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpotPrice {
    pub from_us: u64,
    pub usd_h: f64,
}

impl VmType {
    /// The spot price in effect at `time_us`: the last change at or before
    /// it (the first change before the series begins, the price then being
    /// unknown), else the fixed `spot_usd_h`. `None` off the spot market.
    pub fn spot_at(&self, time_us: u64) -> Option<f64> {
        self.spot_usd_h?;
        let after = self.spot_prices.partition_point(|p| p.from_us <= time_us);
        match self.spot_prices.get(after.saturating_sub(1)) {
            Some(p) => Some(p.usd_h),
            None => self.spot_usd_h,
        }
    }
}

/// The VM types on offer, and how long one takes to boot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Catalogue {
    pub types: Vec<VmType>,
    /// From a VM's request until it runs tasks, seconds. The paper counts
    /// it into a recovery group's runtime (Eq. 3) without giving a figure.
    pub boot_s: u64,
}

/// Why a catalogue cannot be used.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CatalogueError {
    #[error("the VM catalogue is empty")]
    Empty,
    #[error("VM type `{name}`: {reason}")]
    Type { name: String, reason: &'static str },
}

impl Catalogue {
    /// The index of the type named `name`, if the catalogue has it.
    pub fn kind(&self, name: &str) -> Option<usize> {
        self.types.iter().position(|t| t.name == name)
    }

    /// Table VI: the C3, C4 and M4 types (which may hibernate on the spot
    /// market), with on-demand and spot prices of us-east-1 on 10 September
    /// 2018 and slowdowns against c3.large and m4.large. Boot: 2 minutes.
    pub fn teylo_2018() -> Catalogue {
        let row = |name: &str, cores, memory_gb, od, spot, slowdown| VmType {
            name: name.to_owned(),
            cores,
            memory_gb,
            on_demand_usd_h: od,
            spot_usd_h: Some(spot),
            slowdown,
            spot_prices: Vec::new(),
        };
        Catalogue {
            types: vec![
                row("m4.large", 2, 8.0, 0.1, 0.0324, 1.000),
                row("c3.large", 2, 3.75, 0.10, 0.0294, 1.000),
                row("c4.large", 2, 3.75, 0.1, 0.0308, 0.655),
                row("m4.2xlarge", 8, 32.0, 0.4, 0.1326, 0.672),
                row("m4.xlarge", 4, 16.0, 0.2, 0.0648, 0.477),
                row("m4.4xlarge", 16, 64.0, 0.8, 0.3257, 0.513),
                row("c3.xlarge", 4, 7.5, 0.21, 0.0588, 0.323),
                row("c4.xlarge", 4, 7.5, 0.199, 0.0617, 0.332),
                row("c3.2xlarge", 8, 15.0, 0.42, 0.1175, 0.475),
                row("c4.2xlarge", 8, 15.0, 0.398, 0.1262, 0.447),
                row("c3.4xlarge", 16, 30.0, 0.84, 0.2350, 0.163),
                row("c4.4xlarge", 16, 30.0, 0.796, 0.2535, 0.162),
                row("c4.8xlarge", 36, 60.0, 1.591, 0.4986, 0.162),
                row("c3.8xlarge", 32, 60.0, 1.68, 0.4700, 0.161),
            ],
            boot_s: 120,
        }
    }

    /// The catalogue as a planner at `time_us` sees it: each spot price
    /// the one then in effect ([`VmType::spot_at`]).
    pub fn priced_at(&self, time_us: u64) -> Catalogue {
        let mut priced = self.clone();
        for t in &mut priced.types {
            t.spot_usd_h = t.spot_at(time_us);
        }
        priced
    }

    /// Give each type named in `series` (type name to its changes) those
    /// spot price changes, putting it on the spot market; the names
    /// matched, in the catalogue's order.
    pub fn set_spot_prices(&mut self, series: &BTreeMap<String, Vec<SpotPrice>>) -> Vec<String> {
        let mut matched = Vec::new();
        for t in &mut self.types {
            if let Some(changes) = series.get(&t.name).filter(|c| !c.is_empty()) {
                t.spot_prices = changes.clone();
                t.spot_usd_h = Some(changes[0].usd_h);
                matched.push(t.name.clone());
            }
        }
        matched
    }

    /// Refuse a catalogue no map can be drawn on.
    pub fn validate(&self) -> Result<(), CatalogueError> {
        if self.types.is_empty() {
            return Err(CatalogueError::Empty);
        }
        for t in &self.types {
            let reason = if t.cores == 0 {
                "no cores"
            } else if !(t.memory_gb.is_finite() && t.memory_gb > 0.0) {
                "memory must be positive"
            } else if !(t.on_demand_usd_h.is_finite() && t.on_demand_usd_h >= 0.0) {
                "on-demand price must be a price"
            } else if t.spot_usd_h.is_some_and(|p| !(p.is_finite() && p >= 0.0)) {
                "spot price must be a price"
            } else if !(t.slowdown.is_finite() && t.slowdown > 0.0) {
                "slowdown must be positive"
            } else if t
                .spot_prices
                .iter()
                .any(|p| !(p.usd_h.is_finite() && p.usd_h >= 0.0))
            {
                "every spot price change must be a price"
            } else if t
                .spot_prices
                .windows(2)
                .any(|w| w[0].from_us >= w[1].from_us)
            {
                "spot price changes must be in time order, one per instant"
            } else if !t.spot_prices.is_empty() && t.spot_usd_h.is_none() {
                "spot price changes need `spot_usd_h`: the type is on the spot market"
            } else {
                continue;
            };
            return Err(CatalogueError::Type {
                name: t.name.clone(),
                reason,
            });
        }
        Ok(())
    }
}

/// The discrete time of the maps: periods of `period_s` seconds (the
/// paper's `T = {1, …, D}`), billed in slots of `slot_periods` periods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Clock {
    pub period_s: u64,
    pub slot_periods: u64,
}

impl Clock {
    /// Periods of one minute, slots of an hour (the paper's example, and
    /// EC2's billing when it wrote).
    pub const MINUTE_PERIODS_HOUR_SLOTS: Clock = Clock {
        period_s: 60,
        slot_periods: 60,
    };

    /// Whole periods covering `seconds` (at least one for any work).
    pub fn periods(&self, seconds: f64) -> u64 {
        if seconds <= 0.0 {
            return 0;
        }
        ((seconds / self.period_s as f64).ceil() as u64).max(1)
    }

    /// Whole slots covering `periods`.
    pub fn slots(&self, periods: u64) -> u64 {
        periods.div_ceil(self.slot_periods)
    }

    /// Hours in `periods`.
    pub fn hours(&self, periods: u64) -> f64 {
        (periods * self.period_s) as f64 / 3600.0
    }

    /// The price of `slots` slots at `usd_h` an hour.
    pub fn cost(&self, slots: u64, usd_h: f64) -> f64 {
        self.hours(slots * self.slot_periods) * usd_h
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_price_series_prices_the_catalogue_at_each_instant() {
        let mut c = Catalogue::teylo_2018();
        let change = |from_us, usd_h| SpotPrice { from_us, usd_h };
        let series = BTreeMap::from([
            (
                "c4.large".to_owned(),
                vec![change(100, 0.03), change(200, 0.05)],
            ),
            ("x9.huge".to_owned(), vec![change(100, 9.0)]),
        ]);
        assert_eq!(c.set_spot_prices(&series), ["c4.large"]);
        c.validate().unwrap();
        let at = |t| {
            let priced = c.priced_at(t);
            priced
                .types
                .iter()
                .find(|v| v.name == "c4.large")
                .unwrap()
                .spot_usd_h
        };
        // Before the series: its first price; then each change in turn.
        assert_eq!(
            [at(0), at(100), at(199), at(200), at(900)],
            [Some(0.03), Some(0.03), Some(0.03), Some(0.05), Some(0.05)]
        );
        // A type without a series keeps its price; one off the market, none.
        assert_eq!(c.priced_at(150).types[0].spot_usd_h, Some(0.0324));
        let mut off = c.types[2].clone();
        off.spot_usd_h = None;
        assert_eq!(off.spot_at(150), None);
        // A series out of order is refused by name.
        c.types[2].spot_prices.reverse();
        assert_eq!(
            c.validate(),
            Err(CatalogueError::Type {
                name: "c4.large".into(),
                reason: "spot price changes must be in time order, one per instant"
            })
        );
    }

    #[test]
    fn table_vi_is_valid_and_refusals_name_the_type() {
        let c = Catalogue::teylo_2018();
        assert_eq!(c.types.len(), 14);
        c.validate().unwrap();
        let mut bad = c.clone();
        bad.types[3].slowdown = 0.0;
        assert_eq!(
            bad.validate(),
            Err(CatalogueError::Type {
                name: "m4.2xlarge".into(),
                reason: "slowdown must be positive"
            })
        );
        assert_eq!(
            Catalogue {
                types: vec![],
                boot_s: 0
            }
            .validate(),
            Err(CatalogueError::Empty)
        );
    }

    #[test]
    fn periods_slots_and_prices() {
        let c = Clock::MINUTE_PERIODS_HOUR_SLOTS;
        assert_eq!(c.periods(0.0), 0);
        assert_eq!(c.periods(1.0), 1);
        assert_eq!(c.periods(60.0), 1);
        assert_eq!(c.periods(61.0), 2);
        // 61 minutes are two slots (the paper's example).
        assert_eq!(c.slots(61), 2);
        assert_eq!(c.slots(60), 1);
        assert!((c.cost(2, 0.84) - 1.68).abs() < 1e-12);
    }
}
