//! Fitting lifetime models to measured, right-censored VM lifetimes, per
//! group of VMs, with small groups shrunk toward the pooled fit.
//!
//! # What is fitted to what
//! Each model of [`ModelKind`] is fitted by bounded least squares to the
//! Kaplan–Meier estimate `F̂` of the group's lifetime CDF, as the paper fits
//! its CDF (it uses SciPy's `curve_fit`): minimise `Σᵢ (G_θ(tᵢ) − F̂(tᵢ))²`
//! over the distinct preemption times `tᵢ < L` (a rank-spaced subset of
//! [`FitConfig::max_points`] of them in large samples), where `G_θ` is the model's
//! proper CDF ([`LifetimeModel::cdf`], bathtub clamping and deadline atom
//! included). Using the Kaplan–Meier curve rather than the empirical CDF of
//! the preemptions alone is what makes user-stopped (censored) VMs count:
//! they are mostly stopped early, so dropping them inflates early
//! preemptions (a test below shows the bias).
//!
//! # The deadline
//! A measured lifetime at or past the deadline `L` ([`FitConfig::max_lifetime_h`],
//! 24 h for GCE) is a VM that lived to the deadline, whatever ended it: it
//! is counted as preempted at `L`, the point mass every model puts there.
//! (In the GCE data, 351 of the 717 preemptions are logged between 24.0 and
//! 24.83 h after the insert operation: the deadline reclamation, logged
//! late; and 3 user stops fall there too.)
//!
//! # Optimiser
//! Nelder–Mead from `argmin`, on unconstrained coordinates `x` mapped into
//! each parameter's bounds by a logistic transform (on a log scale for
//! rates and time constants), so every trial point is a valid model. It
//! runs from a heuristic or prior start and from [`FitConfig::restarts`]
//! seeded random starts, then once more from the best point found (Nelder–
//! Mead can stall on a degenerate simplex); the best result wins. The
//! uniform model has no free parameter and is only evaluated.
//!
//! # Goodness of fit
//! Both against the Kaplan–Meier curve on `[0, L)`: `R² = 1 − SS_res/SS_tot`
//! over the fitted points, and the Kolmogorov–Smirnov distance
//! `sup_t |G(t) − F̂(t)|`, checked at both sides of every step of `F̂` and
//! at the end of the observed range.
//!
//! # Groups and shrinkage
//! Groups are the pooled data plus, for each [`Grouping`], every value of
//! its dimensions: machine type, zone, and day/night by the VM-local launch
//! time ([`local_period`]). A small group's own fit is noisy, so each
//! group's parameters are an empirical-Bayes style blend of its own fit and
//! the pooled one,
//!
//! ```text
//! θ = w·θ_group + (1 − w)·θ_pooled,   w = d / (d + k)
//! ```
//!
//! where `d` is the group's number of preemptions (deadline ones included)
//! and `k` is [`FitConfig::shrinkage_events`] (default 50: a group of 20
//! preemptions keeps 29 % of its own fit, one of 300 keeps 86 %). The blend
//! is taken on the transformed scale each parameter is bounded on (log for
//! rates and time constants), so it stays within bounds. Groups with fewer
//! than [`FitConfig::min_events`] preemptions are not fitted at all; lookups
//! fall back past them. The pooled fit is blended the same way toward
//! [`FitConfig::priors`] when a prior is configured for its model (the
//! online fitter starts from the paper's typical parameters this way).

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use argmin::core::{CostFunction, Executor, State};
use argmin::solver::neldermead::NelderMead;
use jobcast_ingest::event::{EndReason, MachineEvent, MachineKind};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::kaplan_meier::{InvalidLifetime, KaplanMeier, Observation};
use super::models::{LifetimeModel, ModelKind};
use serde::{Deserialize, Serialize};

/// One VM's measured lifetime.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LifetimeRecord {
    /// Hours from launch to preemption or stop.
    pub lifetime_h: f64,
    /// `true` if the provider preempted it; `false` if its user stopped it
    /// (a right-censored lifetime).
    pub preempted: bool,
    pub vm_type: String,
    pub zone: String,
    /// Launch time, µs since the Unix epoch.
    pub launch_time_us: u64,
}

impl LifetimeRecord {
    /// The lifetime a machine `remove` event reports: a preemptible VM with
    /// a known end reason. Other events (adds, updates, non-cloud machines,
    /// on-demand VMs, unknown end reasons, an end before the launch) say
    /// nothing about preemptible lifetimes and give `None`.
    pub fn from_machine_event(event: &MachineEvent) -> Option<LifetimeRecord> {
        let vm = event.vm.as_ref()?;
        if event.kind != MachineKind::Remove || !vm.preemptible {
            return None;
        }
        let preempted = match vm.end_reason? {
            EndReason::Preempted => true,
            EndReason::Stopped => false,
        };
        let lifetime_us = event.time_us.checked_sub(vm.launch_time_us)?;
        Some(LifetimeRecord {
            lifetime_h: lifetime_us as f64 / 3.6e9,
            preempted,
            vm_type: vm.vm_type.clone(),
            zone: vm.zone.clone(),
            launch_time_us: vm.launch_time_us,
        })
    }
}

/// When, in the VM's local time, it was launched. The paper (§3.1) finds
/// VMs launched at night (20:00–08:00 local) live slightly longer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Period {
    Day,
    Night,
}

impl Period {
    pub fn name(self) -> &'static str {
        match self {
            Period::Day => "day",
            Period::Night => "night",
        }
    }
}

/// Daylight-saving rules of the regions' time zones (current rules: the US
/// ones since 2007, the EU ones since 1996).
#[derive(Debug, Clone, Copy)]
enum Dst {
    None,
    /// Second Sunday of March 02:00 local standard time to first Sunday of
    /// November 02:00 local daylight time.
    Us,
    /// Last Sunday of March 01:00 UTC to last Sunday of October 01:00 UTC.
    Eu,
}

/// GCE regions, where their data centres are, and their UTC offsets in
/// minutes (standard time).
const REGIONS: &[(&str, i64, Dst)] = &[
    ("us-central1", -360, Dst::Us),             // Council Bluffs, Iowa
    ("us-east1", -300, Dst::Us),                // Moncks Corner, South Carolina
    ("us-east4", -300, Dst::Us),                // Ashburn, Virginia
    ("us-west1", -480, Dst::Us),                // The Dalles, Oregon
    ("us-west2", -480, Dst::Us),                // Los Angeles
    ("us-west3", -420, Dst::Us),                // Salt Lake City
    ("us-west4", -480, Dst::Us),                // Las Vegas
    ("northamerica-northeast1", -300, Dst::Us), // Montréal
    ("europe-west1", 60, Dst::Eu),              // St. Ghislain, Belgium
    ("europe-west2", 0, Dst::Eu),               // London
    ("europe-west3", 60, Dst::Eu),              // Frankfurt
    ("europe-west4", 60, Dst::Eu),              // Eemshaven, Netherlands
    ("europe-west6", 60, Dst::Eu),              // Zürich
    ("europe-north1", 120, Dst::Eu),            // Hamina, Finland
    ("asia-east1", 480, Dst::None),             // Changhua, Taiwan
    ("asia-east2", 480, Dst::None),             // Hong Kong
    ("asia-northeast1", 540, Dst::None),        // Tokyo
    ("asia-south1", 330, Dst::None),            // Mumbai
    ("asia-southeast1", 480, Dst::None),        // Jurong West, Singapore
];

/// The VM-local period of a launch in `zone` (e.g. `us-central1-c`) at
/// `time_us` µs since the epoch. The zone's region (the zone name without
/// its `-x` suffix) gives the time zone of its data centres; `None` for
/// regions not in the table (their VMs join no day/night group).
pub fn local_period(zone: &str, time_us: u64) -> Option<Period> {
    let minutes = local_minute_of_day(zone, time_us)?;
    Some(if (8 * 60..20 * 60).contains(&minutes) {
        Period::Day
    } else {
        Period::Night
    })
}

/// Minutes since local midnight.
fn local_minute_of_day(zone: &str, time_us: u64) -> Option<i64> {
    let (region, _) = zone.rsplit_once('-')?;
    let &(_, standard, dst) = REGIONS.iter().find(|(r, _, _)| *r == region)?;
    let utc_s = i64::try_from(time_us / 1_000_000).ok()?;
    let offset = standard + if in_dst(dst, standard, utc_s) { 60 } else { 0 };
    Some((utc_s / 60 + offset).rem_euclid(24 * 60))
}

fn in_dst(dst: Dst, standard_min: i64, utc_s: i64) -> bool {
    let (year, _, _) = civil_from_days(utc_s.div_euclid(86_400));
    // Transition instants in UTC seconds.
    let (start, end) = match dst {
        Dst::None => return false,
        Dst::Us => {
            let start = days_from_civil(year, 3, nth_sunday(year, 3, 2)) * 86_400 + 2 * 3600
                - standard_min * 60;
            // 02:00 daylight time is 01:00 standard time.
            let end = days_from_civil(year, 11, nth_sunday(year, 11, 1)) * 86_400 + 3600
                - standard_min * 60;
            (start, end)
        }
        Dst::Eu => (
            days_from_civil(year, 3, last_sunday(year, 3)) * 86_400 + 3600,
            days_from_civil(year, 10, last_sunday(year, 10)) * 86_400 + 3600,
        ),
    };
    (start..end).contains(&utc_s)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
/// `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day count since 1970-01-01 (`civil_from_days`).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// 0 = Sunday.
fn weekday(days: i64) -> i64 {
    // 1970-01-01 was a Thursday.
    (days + 4).rem_euclid(7)
}

/// The day of the month of its `n`-th Sunday.
fn nth_sunday(y: i64, m: i64, n: i64) -> i64 {
    let first = weekday(days_from_civil(y, m, 1));
    1 + (7 - first) % 7 + 7 * (n - 1)
}

/// The day of the month of its last Sunday (for 31-day months).
fn last_sunday(y: i64, m: i64) -> i64 {
    31 - weekday(days_from_civil(y, m, 31))
}

/// A dimension VMs are grouped by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Dimension {
    /// Machine type, e.g. `n1-highcpu-16`.
    Type,
    /// Zone, e.g. `us-central1-c`.
    Zone,
    /// Day or night by the VM-local launch time.
    Period,
}

impl Dimension {
    pub const ALL: [Dimension; 3] = [Dimension::Type, Dimension::Zone, Dimension::Period];

    pub fn name(self) -> &'static str {
        match self {
            Dimension::Type => "type",
            Dimension::Zone => "zone",
            Dimension::Period => "period",
        }
    }
}

/// One way of splitting the VMs: by one dimension, or by several at once
/// (written `type+zone`). Parsed from and displayed as that form.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Grouping(Vec<Dimension>);

impl Grouping {
    /// The dimensions, each once, in [`Dimension::ALL`] order.
    pub fn new(dimensions: &[Dimension]) -> Grouping {
        Grouping(
            Dimension::ALL
                .into_iter()
                .filter(|d| dimensions.contains(d))
                .collect(),
        )
    }

    pub fn dimensions(&self) -> &[Dimension] {
        &self.0
    }

    /// Every combination of one or more dimensions, most specific first:
    /// by number of dimensions, then in [`Dimension::ALL`] order
    /// (type+zone+period, type+zone, type+period, zone+period, type, zone,
    /// period). [`FitSet::lookup`] tries groups in this order.
    pub fn combinations() -> Vec<Grouping> {
        let mut all: Vec<Grouping> = (1..1u8 << Dimension::ALL.len())
            .map(|mask| {
                Grouping(
                    Dimension::ALL
                        .into_iter()
                        .enumerate()
                        .filter(|(i, _)| mask & (1 << i) != 0)
                        .map(|(_, d)| d)
                        .collect(),
                )
            })
            .collect();
        all.sort_by(|x, y| y.0.len().cmp(&x.0.len()).then_with(|| x.0.cmp(&y.0)));
        all
    }

    /// The record's group under this grouping; `None` if a dimension has no
    /// value for it (an unknown region's day/night).
    pub fn key(&self, record: &LifetimeRecord) -> Option<GroupKey> {
        let period = || local_period(&record.zone, record.launch_time_us);
        self.key_of(&record.vm_type, &record.zone, period)
    }

    /// The group of a VM of this type in this zone launched in `period`
    /// (computed only if this grouping splits by it); `None` if a dimension
    /// has no value.
    fn key_of(
        &self,
        vm_type: &str,
        zone: &str,
        period: impl Fn() -> Option<Period>,
    ) -> Option<GroupKey> {
        let mut key = GroupKey::default();
        for d in &self.0 {
            match d {
                Dimension::Type => key.vm_type = Some(vm_type.to_owned()),
                Dimension::Zone => key.zone = Some(zone.to_owned()),
                Dimension::Period => key.period = Some(period()?),
            }
        }
        Some(key)
    }
}

impl fmt::Display for Grouping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.0.iter().map(|d| d.name()).collect();
        f.write_str(&names.join("+"))
    }
}

impl std::str::FromStr for Grouping {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let mut dims = Vec::new();
        for part in s.split('+') {
            let d = Dimension::ALL
                .into_iter()
                .find(|d| d.name() == part)
                .ok_or_else(|| {
                    format!("unknown grouping `{part}` (expected type, zone or period, or a `+` combination)")
                })?;
            dims.push(d);
        }
        Ok(Grouping::new(&dims))
    }
}

/// A group of VMs: the pooled data has no field set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct GroupKey {
    pub vm_type: Option<String>,
    pub zone: Option<String>,
    pub period: Option<Period>,
}

impl GroupKey {
    /// All VMs.
    pub fn pooled() -> GroupKey {
        GroupKey::default()
    }

    pub fn is_pooled(&self) -> bool {
        *self == GroupKey::default()
    }
}

/// `all`, or `type=…,zone=…,period=…` with the fields that are set.
impl fmt::Display for GroupKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(t) = &self.vm_type {
            parts.push(format!("type={t}"));
        }
        if let Some(z) = &self.zone {
            parts.push(format!("zone={z}"));
        }
        if let Some(p) = self.period {
            parts.push(format!("period={}", p.name()));
        }
        if parts.is_empty() {
            f.write_str("all")
        } else {
            f.write_str(&parts.join(","))
        }
    }
}

/// How [`fit_groups`] fits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FitConfig {
    /// The provider's deadline `L` in hours (finite).
    pub max_lifetime_h: f64,
    pub models: Vec<ModelKind>,
    /// The groupings besides the pooled data.
    pub groupings: Vec<Grouping>,
    /// `k` in the shrinkage weight `d/(d + k)`, in preemptions.
    pub shrinkage_events: f64,
    /// Groups with fewer preemptions are not fitted.
    pub min_events: usize,
    /// Models the pooled fit is shrunk toward (at most one per kind).
    pub priors: Vec<LifetimeModel>,
    /// Random starts besides the heuristic one.
    pub restarts: usize,
    /// Nelder–Mead iterations per start.
    pub max_iters: u64,
    /// The most Kaplan–Meier points a least-squares fit uses (rank-spaced
    /// when there are more), which bounds the cost of a fit.
    pub max_points: usize,
    /// Seed of the random starts.
    pub seed: u64,
}

impl Default for FitConfig {
    /// GCE's 24 h deadline, every model, groups by type, zone and period,
    /// `k = 50`, at least 5 preemptions per group, no priors, 4 random
    /// starts, up to 500 fitted points.
    fn default() -> Self {
        FitConfig {
            max_lifetime_h: 24.0,
            models: ModelKind::ALL.to_vec(),
            groupings: Dimension::ALL
                .into_iter()
                .map(|d| Grouping::new(&[d]))
                .collect(),
            shrinkage_events: 50.0,
            min_events: 5,
            priors: Vec::new(),
            restarts: 4,
            max_iters: 2000,
            max_points: 500,
            seed: 0x006a_6f62_6361_7374,
        }
    }
}

/// Why [`fit_groups`] could not fit.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FitError {
    #[error(transparent)]
    InvalidLifetime(#[from] InvalidLifetime),
    #[error(
        "max_lifetime_h must be > 0, and finite when the bathtub or the uniform model is fitted, got {0}"
    )]
    InvalidDeadline(f64),
    #[error("only {events} preemptions in all; at least {min} are needed to fit")]
    TooFewEvents { events: usize, min: usize },
    #[error(
        "the {kind} prior's `{param}` must be in [{lo}, {hi}] (the range the fit searches), got {value}"
    )]
    PriorOutOfRange {
        kind: ModelKind,
        param: &'static str,
        lo: f64,
        hi: f64,
        value: f64,
    },
    #[error("the {kind} prior's deadline is {prior} h, the fit's max_lifetime_h is {fit} h")]
    PriorDeadline {
        kind: ModelKind,
        prior: f64,
        fit: f64,
    },
}

impl FitConfig {
    /// This configuration for lifetimes without a deadline
    /// ([`DeadlineCheck`]): no deadline, only the models that need none,
    /// and no priors (the configured ones are bathtubs).
    pub fn without_deadline(&self) -> FitConfig {
        FitConfig {
            max_lifetime_h: f64::INFINITY,
            models: self
                .models
                .iter()
                .copied()
                .filter(|m| !m.needs_deadline())
                .chain(
                    // Only deadline models asked for: fit the others.
                    ModelKind::ALL
                        .into_iter()
                        .filter(|m| !m.needs_deadline())
                        .filter(|_| self.models.iter().all(|m| m.needs_deadline())),
                )
                .collect(),
            priors: Vec::new(),
            ..self.clone()
        }
    }

    /// Check that every prior shares the fit's deadline and has its
    /// parameters within the bounds the fit searches: the shrinkage blends
    /// on those bounds, so a prior outside them would be clamped silently.
    pub fn check_priors(&self) -> Result<(), FitError> {
        for prior in &self.priors {
            let kind = prior.kind();
            if prior.max_lifetime_h() != self.max_lifetime_h {
                return Err(FitError::PriorDeadline {
                    kind,
                    prior: prior.max_lifetime_h(),
                    fit: self.max_lifetime_h,
                });
            }
            let bounds = bounds(kind, self.max_lifetime_h);
            for ((param, value), bound) in prior.named_params().into_iter().zip(bounds) {
                if !(bound.lo..=bound.hi).contains(&value) {
                    return Err(FitError::PriorOutOfRange {
                        kind,
                        param,
                        lo: bound.lo,
                        hi: bound.hi,
                        value,
                    });
                }
            }
        }
        Ok(())
    }
}

/// One model fitted to one group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelFit {
    /// The model to use: the group's own fit blended toward the pooled one
    /// (or the pooled fit toward its prior).
    pub model: LifetimeModel,
    /// The group's own least-squares fit, before shrinkage.
    pub raw: LifetimeModel,
    /// The weight `w` of `raw` in `model` (1 = no shrinkage).
    pub weight: f64,
    /// `R²` of `model` against the group's Kaplan–Meier curve.
    pub r2: f64,
    /// Kolmogorov–Smirnov distance of `model` from that curve.
    pub ks: f64,
}

impl ModelFit {
    /// The parameters of the group's own fit that sit at an edge of the
    /// search (within 0.1 % of a bound): the data do not pin them down,
    /// and the fit is only as good as the bound (the bathtub's τ2 at the
    /// deadline, say).
    pub fn at_bounds(&self) -> Vec<&'static str> {
        let near = |v: f64, edge: f64| (v - edge).abs() <= 1e-3 * edge.abs().max(1e-9);
        bounds(self.raw.kind(), self.raw.max_lifetime_h())
            .iter()
            .zip(self.raw.named_params())
            .filter(|(b, (_, v))| near(*v, b.lo) || near(*v, b.hi))
            .map(|(_, (name, _))| name)
            .collect()
    }
}

/// Every model fitted to one group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupFit {
    pub key: GroupKey,
    /// The group's Kaplan–Meier estimate (lifetimes clamped at `L`).
    pub km: KaplanMeier,
    /// One per configured model, in configuration order.
    pub fits: Vec<ModelFit>,
}

impl GroupFit {
    pub fn fit(&self, kind: ModelKind) -> Option<&ModelFit> {
        self.fits.iter().find(|f| f.model.kind() == kind)
    }

    /// The fit this group's risks would be scored with: the bathtub when it
    /// was fitted (lifetimes with a deadline), else the other model closest
    /// to the Kaplan–Meier curve (smallest KS distance).
    pub fn chosen(&self) -> Option<&ModelFit> {
        self.fit(ModelKind::Bathtub)
            .or_else(|| self.fits.iter().min_by(|a, b| a.ks.total_cmp(&b.ks)))
    }
}

/// Preemptions this close below the longest preempted lifetime, hours,
/// make up a deadline cluster ([`DeadlineCheck`]).
pub const DEADLINE_WINDOW_H: f64 = 1.0;

/// The share of the preemptions a deadline cluster holds at least.
pub const DEADLINE_SHARE: f64 = 0.1;

/// Whether measured lifetimes show a provider deadline, as GCE's 24 h: a
/// cluster of preemptions just below the longest preempted lifetime. GCE's
/// measured VMs put 49 % of their preemptions within the hour below it
/// (351 of 717); SkyPilot's AWS spot traces, which have no cap, 0.5 % (2 of
/// 423). Lifetimes without
/// one break the bathtub's assumption: fit the models that need no
/// deadline instead ([`ModelKind::needs_deadline`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DeadlineCheck {
    pub preemptions: usize,
    /// The longest preempted lifetime, hours.
    pub longest_h: f64,
    /// Preemptions within [`DEADLINE_WINDOW_H`] below it.
    pub near_longest: usize,
    pub present: bool,
}

impl DeadlineCheck {
    pub fn of(records: &[LifetimeRecord]) -> DeadlineCheck {
        let preempted: Vec<f64> = records
            .iter()
            .filter(|r| r.preempted)
            .map(|r| r.lifetime_h)
            .collect();
        let longest_h = preempted.iter().copied().fold(0.0, f64::max);
        let near_longest = preempted
            .iter()
            .filter(|&&t| t >= longest_h - DEADLINE_WINDOW_H)
            .count();
        DeadlineCheck {
            preemptions: preempted.len(),
            longest_h,
            near_longest,
            present: !preempted.is_empty()
                && near_longest as f64 >= DEADLINE_SHARE * preempted.len() as f64,
        }
    }
}

/// The fits of every group: the pooled one first, then each grouping's
/// groups in key order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FitSet {
    max_lifetime_h: f64,
    groups: Vec<GroupFit>,
    /// Groups left unfitted for too few preemptions: key, lifetimes,
    /// preemptions.
    skipped: Vec<(GroupKey, usize, usize)>,
}

impl FitSet {
    pub fn max_lifetime_h(&self) -> f64 {
        self.max_lifetime_h
    }

    pub fn groups(&self) -> &[GroupFit] {
        &self.groups
    }

    pub fn skipped(&self) -> &[(GroupKey, usize, usize)] {
        &self.skipped
    }

    pub fn pooled(&self) -> &GroupFit {
        &self.groups[0]
    }

    pub fn group(&self, key: &GroupKey) -> Option<&GroupFit> {
        self.groups.iter().find(|g| g.key == *key)
    }

    /// The fit of `kind` for VMs of this type in this zone launched in
    /// `period` (VM-local; `None` if unknown): the most specific fitted
    /// group in [`Grouping::combinations`] order (type+zone+period,
    /// type+zone, type+period, zone+period, type, zone, period; the ones
    /// with a period only when it is known), then the pooled one. `None`
    /// only if `kind` was not fitted.
    pub fn lookup(
        &self,
        kind: ModelKind,
        vm_type: &str,
        zone: &str,
        period: Option<Period>,
    ) -> Option<&ModelFit> {
        self.lookup_group(kind, vm_type, zone, period)?.fit(kind)
    }

    /// The group whose fit of `kind` [`FitSet::lookup`] uses: the most
    /// specific fitted one, else the pooled one.
    pub fn lookup_group(
        &self,
        kind: ModelKind,
        vm_type: &str,
        zone: &str,
        period: Option<Period>,
    ) -> Option<&GroupFit> {
        Grouping::combinations()
            .iter()
            .filter_map(|g| g.key_of(vm_type, zone, || period))
            .find_map(|k| self.group(&k).filter(|g| g.fit(kind).is_some()))
            .or_else(|| Some(self.pooled()).filter(|g| g.fit(kind).is_some()))
    }
}

/// Fit every configured model to the pooled records and to every group.
pub fn fit_groups(records: &[LifetimeRecord], config: &FitConfig) -> Result<FitSet, FitError> {
    let l = config.max_lifetime_h;
    let needs_deadline = config.models.iter().any(|m| m.needs_deadline());
    if l.is_nan() || l <= 0.0 || (l.is_infinite() && needs_deadline) {
        return Err(FitError::InvalidDeadline(l));
    }
    config.check_priors()?;
    let pooled_obs: Vec<Observation> = records.iter().map(|r| observation(r, l)).collect();
    let pooled_km = KaplanMeier::new(&pooled_obs)?;
    if pooled_km.events() < config.min_events.max(1) {
        return Err(FitError::TooFewEvents {
            events: pooled_km.events(),
            min: config.min_events.max(1),
        });
    }
    let mut pooled_fits = Vec::new();
    for &kind in &config.models {
        let prior = config.priors.iter().find(|p| p.kind() == kind);
        let starts: Vec<LifetimeModel> = prior.copied().into_iter().collect();
        let raw = fit_model(kind, &pooled_km, l, &starts, config);
        let (model, weight) = match prior {
            Some(p) => shrink(&raw, p, pooled_km.events(), config),
            None => (raw, 1.0),
        };
        pooled_fits.push(ModelFit {
            model,
            raw,
            weight,
            r2: r_squared(&model, &pooled_km),
            ks: ks_distance(&model, &pooled_km),
        });
    }
    let mut groups = vec![GroupFit {
        key: GroupKey::pooled(),
        km: pooled_km,
        fits: pooled_fits,
    }];
    let mut skipped = Vec::new();
    // Groups of the same VMs (a type seen in one zone only: type and
    // type+zone) get the same fit, which is deterministic: fit them once.
    // By members, the index in `groups` of the group fitted to them.
    let mut fitted: HashMap<Vec<usize>, usize> = HashMap::new();
    for grouping in &config.groupings {
        let mut by_key: BTreeMap<GroupKey, Vec<usize>> = BTreeMap::new();
        for (i, r) in records.iter().enumerate() {
            if let Some(key) = grouping.key(r) {
                by_key.entry(key).or_default().push(i);
            }
        }
        for (key, members) in by_key {
            if key.is_pooled() || groups.iter().any(|g| g.key == key) {
                continue;
            }
            if let Some(&same) = fitted.get(&members) {
                let twin = GroupFit {
                    key,
                    ..groups[same].clone()
                };
                groups.push(twin);
                continue;
            }
            let obs: Vec<Observation> = members.iter().map(|&i| pooled_obs[i]).collect();
            let km = KaplanMeier::new(&obs)?;
            if km.events() < config.min_events {
                skipped.push((key, km.observations(), km.events()));
                continue;
            }
            let fits = groups[0]
                .fits
                .iter()
                .map(|pooled| {
                    // The pooled fit is a good start for its groups.
                    let raw = fit_model(pooled.model.kind(), &km, l, &[pooled.model], config);
                    let (model, weight) = shrink(&raw, &pooled.model, km.events(), config);
                    ModelFit {
                        model,
                        raw,
                        weight,
                        r2: r_squared(&model, &km),
                        ks: ks_distance(&model, &km),
                    }
                })
                .collect();
            fitted.insert(members, groups.len());
            groups.push(GroupFit { key, km, fits });
        }
    }
    Ok(FitSet {
        max_lifetime_h: l,
        groups,
        skipped,
    })
}

/// A record as the fit sees it: clamped at the deadline, where it counts
/// as a preemption.
fn observation(record: &LifetimeRecord, max_lifetime_h: f64) -> Observation {
    if record.lifetime_h >= max_lifetime_h {
        Observation {
            time_h: max_lifetime_h,
            event: true,
        }
    } else {
        Observation {
            time_h: record.lifetime_h,
            event: record.preempted,
        }
    }
}

/// `(w·raw + (1 − w)·toward, w)` with `w = d/(d + k)`, on each parameter's
/// fitting scale.
fn shrink(
    raw: &LifetimeModel,
    toward: &LifetimeModel,
    events: usize,
    config: &FitConfig,
) -> (LifetimeModel, f64) {
    let d = events as f64;
    let w = d / (d + config.shrinkage_events.max(0.0));
    let bounds = bounds(raw.kind(), raw.max_lifetime_h());
    let params: Vec<f64> = raw
        .params()
        .iter()
        .zip(toward.params())
        .zip(&bounds)
        .map(|((&own, other), bound)| {
            let other = bound.scaled(other.clamp(bound.lo, bound.hi));
            bound.unscaled(w * bound.scaled(own) + (1.0 - w) * other)
        })
        .collect();
    let model = LifetimeModel::from_params(raw.kind(), &params, raw.max_lifetime_h())
        .expect("a blend of in-bounds parameters is in bounds");
    (model, w)
}

/// A parameter's range, on a linear or log scale.
#[derive(Debug, Clone, Copy)]
struct Bound {
    lo: f64,
    hi: f64,
    log: bool,
}

impl Bound {
    const fn lin(lo: f64, hi: f64) -> Bound {
        Bound { lo, hi, log: false }
    }
    const fn log(lo: f64, hi: f64) -> Bound {
        Bound { lo, hi, log: true }
    }

    fn scaled(self, v: f64) -> f64 {
        if self.log { v.ln() } else { v }
    }

    fn unscaled(self, s: f64) -> f64 {
        let v = if self.log { s.exp() } else { s };
        v.clamp(self.lo, self.hi)
    }

    /// The parameter for an unconstrained coordinate: a logistic map onto
    /// `[lo, hi]` on the bound's scale.
    fn bounded(self, x: f64) -> f64 {
        let u = 1.0 / (1.0 + (-x).exp());
        let (lo, hi) = (self.scaled(self.lo), self.scaled(self.hi));
        self.unscaled(lo + (hi - lo) * u)
    }

    /// The inverse of [`Bound::bounded`], for starting points (clamped
    /// strictly inside the bounds).
    fn free(self, v: f64) -> f64 {
        let (lo, hi) = (self.scaled(self.lo), self.scaled(self.hi));
        let u = ((self.scaled(v.clamp(self.lo, self.hi)) - lo) / (hi - lo)).clamp(1e-6, 1.0 - 1e-6);
        (u / (1.0 - u)).ln()
    }
}

/// The bounds of each model's parameters: wide enough for any plausible
/// provider, narrow enough that every point is a well-defined model.
fn bounds(kind: ModelKind, max_lifetime_h: f64) -> Vec<Bound> {
    match kind {
        // a, τ1, τ2, b: the paper's fits lie well inside.
        ModelKind::Bathtub => vec![
            Bound::lin(0.01, 1.0),
            Bound::log(0.01, 2.0 * max_lifetime_h),
            Bound::log(0.01, max_lifetime_h),
            Bound::lin(0.0, 2.0 * max_lifetime_h),
        ],
        ModelKind::Exponential => vec![Bound::log(1e-4, 100.0)],
        ModelKind::Weibull => vec![Bound::log(1e-4, 100.0), Bound::log(0.05, 20.0)],
        ModelKind::GompertzMakeham => vec![
            Bound::log(1e-6, 100.0),
            Bound::log(1e-20, 100.0),
            Bound::log(1e-3, 100.0),
        ],
        ModelKind::Uniform => vec![],
    }
}

/// The least-squares objective on unconstrained coordinates.
#[derive(Clone, Copy)]
struct LeastSquares<'a> {
    kind: ModelKind,
    bounds: &'a [Bound],
    max_lifetime_h: f64,
    /// `(tᵢ, F̂(tᵢ))`.
    points: &'a [(f64, f64)],
}

impl LeastSquares<'_> {
    fn model(&self, x: &[f64]) -> Option<LifetimeModel> {
        let params: Vec<f64> = x
            .iter()
            .zip(self.bounds)
            .map(|(&x, b)| b.bounded(x))
            .collect();
        LifetimeModel::from_params(self.kind, &params, self.max_lifetime_h).ok()
    }
}

impl CostFunction for LeastSquares<'_> {
    type Param = Vec<f64>;
    type Output = f64;

    fn cost(&self, x: &Vec<f64>) -> Result<f64, argmin::core::Error> {
        // Out-of-domain points (only reachable through rounding at a bound)
        // cost infinity, which Nelder–Mead simply moves away from.
        Ok(self.model(x).map_or(f64::INFINITY, |m| {
            self.points
                .iter()
                .map(|&(t, f)| (m.cdf(t) - f).powi(2))
                .sum()
        }))
    }
}

/// The points least squares fits: the Kaplan–Meier CDF at each event time
/// before the deadline (at `L` every model is 1 by construction).
fn fit_points(km: &KaplanMeier, max_lifetime_h: f64) -> Vec<(f64, f64)> {
    km.steps()
        .iter()
        .filter(|s| s.time_h < max_lifetime_h)
        .map(|s| (s.time_h, 1.0 - s.survival))
        .collect()
}

/// At most `max` of the points, evenly spaced in rank and ending with the
/// last: they bound the cost of a fit whatever the number of lifetimes
/// (each step of a large sample moves `F̂` by little, so a rank-spaced
/// subset traces the same curve).
fn thin(points: Vec<(f64, f64)>, max: usize) -> Vec<(f64, f64)> {
    let n = points.len();
    if n <= max {
        return points;
    }
    (1..=max).map(|i| points[i * n / max - 1]).collect()
}

/// Fit one model to a Kaplan–Meier curve by bounded least squares, from a
/// heuristic start, the given `starts`, and seeded random ones.
pub fn fit_model(
    kind: ModelKind,
    km: &KaplanMeier,
    max_lifetime_h: f64,
    starts: &[LifetimeModel],
    config: &FitConfig,
) -> LifetimeModel {
    let bounds = bounds(kind, max_lifetime_h);
    let points = thin(fit_points(km, max_lifetime_h), config.max_points);
    let problem = LeastSquares {
        kind,
        bounds: &bounds,
        max_lifetime_h,
        points: &points,
    };
    let heuristic = heuristic_start(kind, km, max_lifetime_h);
    if bounds.is_empty() {
        return heuristic;
    }
    let free = |m: &LifetimeModel| -> Vec<f64> {
        m.params()
            .iter()
            .zip(&bounds)
            .map(|(&v, b)| b.free(v))
            .collect()
    };
    let mut candidates: Vec<Vec<f64>> = std::iter::once(&heuristic)
        .chain(starts.iter().filter(|s| s.kind() == kind))
        .map(free)
        .collect();
    let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
    for _ in 0..config.restarts {
        candidates.push(
            (0..bounds.len())
                .map(|_| rng.random_range(-3.0..3.0))
                .collect(),
        );
    }
    let mut best = candidates
        .into_iter()
        .map(|x| minimise(&problem, x, config.max_iters))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .expect("at least the heuristic start");
    // One restart from the best point, with a fresh simplex.
    let polished = minimise(&problem, best.0.clone(), config.max_iters);
    if polished.1 < best.1 {
        best = polished;
    }
    problem.model(&best.0).unwrap_or(heuristic)
}

/// Nelder–Mead from `x0`; the best point and its cost (the start itself if
/// the solver fails).
fn minimise(problem: &LeastSquares<'_>, x0: Vec<f64>, max_iters: u64) -> (Vec<f64>, f64) {
    let start_cost = problem.cost(&x0).unwrap_or(f64::INFINITY);
    // The initial simplex: x0 and a step of 0.5 along each axis (the
    // logistic maps about [−6, 6] onto the whole range).
    let mut simplex = vec![x0.clone()];
    for i in 0..x0.len() {
        let mut x = x0.clone();
        x[i] += if x[i] > 0.0 { -0.5 } else { 0.5 };
        simplex.push(x);
    }
    let result = NelderMead::new(simplex)
        .with_sd_tolerance(1e-14)
        .map_err(|e| e.to_string())
        .and_then(|solver| {
            Executor::new(*problem, solver)
                .configure(|state| state.max_iters(max_iters))
                .run()
                .map_err(|e| e.to_string())
        });
    match result {
        Ok(res) => {
            let state = res.state();
            match state.get_best_param() {
                Some(x) if state.get_best_cost() < start_cost => (x.clone(), state.get_best_cost()),
                _ => (x0, start_cost),
            }
        }
        Err(_) => (x0, start_cost),
    }
}

/// A start from simple statistics: for the rate-based models the
/// exponential rate through the Kaplan–Meier median (or the last step if
/// the curve stays above one half), `λ = −ln Ŝ(t)/t`; for the bathtub the
/// paper's typical fit.
fn heuristic_start(kind: ModelKind, km: &KaplanMeier, max_lifetime_h: f64) -> LifetimeModel {
    let l = max_lifetime_h;
    let anchor = km
        .steps()
        .iter()
        .find(|s| s.survival <= 0.5)
        .or(km.steps().last())
        .filter(|s| s.time_h > 0.0 && s.survival > 0.0);
    let rate = anchor.map_or(1.0 / l, |s| -s.survival.ln() / s.time_h);
    let params: Vec<f64> = match kind {
        ModelKind::Bathtub => vec![0.45, 1.0, 0.8, l],
        ModelKind::Exponential => vec![rate],
        ModelKind::Weibull => vec![rate, 1.0],
        ModelKind::GompertzMakeham => vec![rate, 1e-4, 0.3],
        ModelKind::Uniform => vec![],
    };
    let bounds = bounds(kind, l);
    let params: Vec<f64> = params
        .iter()
        .zip(&bounds)
        .map(|(&v, b)| v.clamp(b.lo, b.hi))
        .collect();
    LifetimeModel::from_params(kind, &params, l).expect("in-bounds start")
}

/// `R² = 1 − SS_res/SS_tot` of the model against the Kaplan–Meier CDF at
/// its event times before the deadline (NaN with fewer than 2 such points).
pub fn r_squared(model: &LifetimeModel, km: &KaplanMeier) -> f64 {
    let points = fit_points(km, model.max_lifetime_h());
    if points.len() < 2 {
        return f64::NAN;
    }
    let mean = points.iter().map(|p| p.1).sum::<f64>() / points.len() as f64;
    let ss_tot: f64 = points.iter().map(|p| (p.1 - mean).powi(2)).sum();
    let ss_res: f64 = points
        .iter()
        .map(|&(t, f)| (model.cdf(t) - f).powi(2))
        .sum();
    1.0 - ss_res / ss_tot
}

/// The Kolmogorov–Smirnov distance `sup |G(t) − F̂(t)|` over `[0, L)`,
/// where `F̂` is known (up to the last observation). `G` is continuous on
/// `[0, L)`, so the supremum is attained at a step of `F̂`, on one side or
/// the other, or at the end of the range.
pub fn ks_distance(model: &LifetimeModel, km: &KaplanMeier) -> f64 {
    let l = model.max_lifetime_h();
    let mut d: f64 = 0.0;
    let mut before = 0.0;
    for s in km.steps().iter().filter(|s| s.time_h < l) {
        let g = model.cdf(s.time_h);
        let after = 1.0 - s.survival;
        d = d.max((g - before).abs()).max((g - after).abs());
        before = after;
    }
    // F̂ stays at `before` until the last observation or the deadline.
    let end = km.last_time_h().min(l);
    let g_end = if end < l {
        model.cdf(end)
    } else {
        // G's left limit at L: everything but the point mass.
        model.cdf(l * (1.0 - 1e-12))
    };
    d.max((g_end - before).abs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::preemption::bathtub::Bathtub;
    use crate::preemption::models::{Exponential, Weibull};

    fn record(lifetime_h: f64, preempted: bool, vm_type: &str, zone: &str) -> LifetimeRecord {
        LifetimeRecord {
            lifetime_h,
            preempted,
            vm_type: vm_type.to_owned(),
            zone: zone.to_owned(),
            // 2019-03-25T19:22:36Z: 14:22 CDT in us-central1.
            launch_time_us: 1_553_541_756_000_000,
        }
    }

    /// `n` lifetimes from `truth`, each censored at an independent
    /// exponential time with mean `censor_mean_h` (user stops).
    fn censored_sample(
        truth: &Bathtub,
        n: usize,
        censor_mean_h: f64,
        seed: u64,
    ) -> Vec<LifetimeRecord> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..n)
            .map(|_| {
                let t = truth.sample(&mut rng);
                let c = -censor_mean_h * (1.0 - rng.random::<f64>()).ln();
                if c < t {
                    record(c, false, "n1-highcpu-2", "us-central1-c")
                } else {
                    record(t, true, "n1-highcpu-2", "us-central1-c")
                }
            })
            .collect()
    }

    /// `sup |a − b|` over `[0, until_h)`.
    fn sup_distance(a: &LifetimeModel, b: &Bathtub, until_h: u32) -> f64 {
        (0..until_h * 100)
            .map(|i| f64::from(i) / 100.0)
            .map(|t| (a.cdf(t) - b.cdf(t)).abs())
            .fold(0.0, f64::max)
    }

    fn bathtub_only() -> FitConfig {
        FitConfig {
            models: vec![ModelKind::Bathtub],
            groupings: vec![],
            ..FitConfig::default()
        }
    }

    /// Lifetimes with a deadline cluster are told from uncapped ones; the
    /// uncapped are fitted without a deadline by the models that need none,
    /// and the closest of them is chosen.
    #[test]
    fn lifetimes_without_a_deadline_cluster_are_fitted_without_one() {
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        let truth = Weibull::new(0.3, 0.6, f64::INFINITY).unwrap();
        let uncapped: Vec<LifetimeRecord> = (0..600)
            .map(|_| {
                let u: f64 = rng.random();
                // Inverse of F(t) = 1 − exp(−(λt)^k).
                let t = (-(1.0 - u).ln()).powf(1.0 / truth.k()) / truth.lambda();
                record(t, true, "intel_64", "us-east-1b")
            })
            .collect();
        let check = DeadlineCheck::of(&uncapped);
        assert!(!check.present, "{check:?}");
        let capped = censored_sample(&Bathtub::default(), 600, 48.0, 5);
        let check = DeadlineCheck::of(&capped);
        assert!(check.present, "{check:?}");
        // The bathtub cannot be fitted without a deadline.
        let no_deadline = FitConfig {
            max_lifetime_h: f64::INFINITY,
            groupings: vec![],
            ..FitConfig::default()
        };
        assert!(matches!(
            fit_groups(&uncapped, &no_deadline),
            Err(FitError::InvalidDeadline(_))
        ));
        let fits = fit_groups(
            &uncapped,
            &FitConfig {
                models: ModelKind::ALL
                    .into_iter()
                    .filter(|m| !m.needs_deadline())
                    .collect(),
                ..no_deadline
            },
        )
        .unwrap();
        let chosen = fits.pooled().chosen().unwrap();
        assert_eq!(chosen.model.kind(), ModelKind::Weibull, "{chosen:?}");
        assert!(chosen.ks < 0.05, "{chosen:?}");
        assert!(chosen.model.max_lifetime_h().is_infinite());
    }

    #[test]
    fn recovers_known_bathtub_parameters_from_censored_samples() {
        for (truth, seed) in [
            (Bathtub::default(), 1),
            (Bathtub::new(0.4, 0.5, 1.0, 23.0, 24.0).unwrap(), 2),
            (Bathtub::new(0.5, 1.5, 0.8, 24.0, 24.0).unwrap(), 3),
        ] {
            let records = censored_sample(&truth, 4000, 30.0, seed);
            let fits = fit_groups(&records, &bathtub_only()).unwrap();
            let fit = fits.pooled().fit(ModelKind::Bathtub).unwrap();
            let LifetimeModel::Bathtub(got) = fit.model else {
                panic!()
            };
            assert!((got.a() - truth.a()).abs() < 0.03, "{truth:?} → {got:?}");
            assert!(
                (got.tau1() / truth.tau1() - 1.0).abs() < 0.2,
                "{truth:?} → {got:?}"
            );
            // The late phase is seen through fewer VMs (most are censored
            // or preempted early), so its shape is less sharply pinned.
            assert!(
                (got.tau2() / truth.tau2() - 1.0).abs() < 0.5,
                "{truth:?} → {got:?}"
            );
            assert!((got.b() - truth.b()).abs() < 1.5, "{truth:?} → {got:?}");
            assert!(
                sup_distance(&fit.model, &truth, 24) < 0.02,
                "{truth:?} → {got:?}"
            );
            assert!(fit.r2 > 0.99 && fit.ks < 0.03, "{fit:?}");
            assert_eq!((fit.weight, fit.raw), (1.0, fit.model));
        }
    }

    #[test]
    fn dropping_censored_lifetimes_biases_the_fit() {
        let truth = Bathtub::default();
        let records = censored_sample(&truth, 4000, 5.0, 11);
        let censored = records.iter().filter(|r| !r.preempted).count();
        assert!(censored > 1000, "{censored}");
        let with_km = fit_groups(&records, &bathtub_only()).unwrap();
        let preempted_only: Vec<LifetimeRecord> =
            records.iter().filter(|r| r.preempted).cloned().collect();
        let dropped = fit_groups(&preempted_only, &bathtub_only()).unwrap();
        let good = with_km.pooled().fit(ModelKind::Bathtub).unwrap().model;
        let bad = dropped.pooled().fit(ModelKind::Bathtub).unwrap().model;
        // Few VMs escape censoring for long, so compare where both fits
        // rest on data: the first 12 hours.
        assert!(sup_distance(&good, &truth, 12) < 0.02, "{good:?}");
        // Censoring removes long lifetimes, so the biased fit sees far more
        // early preemptions than there are.
        assert!(sup_distance(&bad, &truth, 12) > 0.15, "{bad:?}");
        assert!(bad.cdf(2.0) > truth.cdf(2.0) + 0.15);
    }

    #[test]
    fn baselines_recover_their_own_parameters() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let truth = Weibull::new(0.15, 0.7, 24.0).unwrap();
        // Inverse transform: S(t) = u ⇒ t = (−ln u)^(1/k) / λ, capped at L.
        let records: Vec<LifetimeRecord> = (0..3000)
            .map(|_| {
                let u: f64 = 1.0 - rng.random::<f64>();
                let t = (-u.ln()).powf(1.0 / truth.k()) / truth.lambda();
                record(t.min(30.0), true, "t", "z")
            })
            .collect();
        let config = FitConfig {
            groupings: vec![],
            ..FitConfig::default()
        };
        let fits = fit_groups(&records, &config).unwrap();
        let LifetimeModel::Weibull(w) = fits.pooled().fit(ModelKind::Weibull).unwrap().model else {
            panic!()
        };
        assert!((w.lambda() / 0.15 - 1.0).abs() < 0.1, "{w:?}");
        assert!((w.k() / 0.7 - 1.0).abs() < 0.1, "{w:?}");
        // Weibull data is fitted better by the Weibull than by the
        // memoryless or the uniform model.
        let ks = |k| fits.pooled().fit(k).unwrap().ks;
        assert!(ks(ModelKind::Weibull) < 0.03);
        assert!(ks(ModelKind::Exponential) > ks(ModelKind::Weibull) + 0.03);
        assert!(ks(ModelKind::Uniform) > 0.3);
        for f in &fits.pooled().fits {
            assert_eq!(f.model.max_lifetime_h(), 24.0);
        }
    }

    #[test]
    fn thinning_keeps_rank_spaced_points_and_the_last() {
        let points: Vec<(f64, f64)> = (0..10).map(|i| (f64::from(i), 0.0)).collect();
        let times = |v: Vec<(f64, f64)>| v.iter().map(|p| p.0).collect::<Vec<_>>();
        assert_eq!(times(thin(points.clone(), 4)), vec![1.0, 4.0, 6.0, 9.0]);
        assert_eq!(thin(points.clone(), 10), points);
        assert_eq!(thin(points.clone(), 50), points);
    }

    #[test]
    fn r2_and_ks_hand_cases() {
        // F̂ steps to 0.5 at t = 1 and to 1 at t = 3 (no censoring).
        let km = KaplanMeier::new(&[
            Observation {
                time_h: 1.0,
                event: true,
            },
            Observation {
                time_h: 3.0,
                event: true,
            },
        ])
        .unwrap();
        let u = LifetimeModel::Uniform(crate::preemption::models::Uniform::new(4.0).unwrap());
        // G(1) = 0.25, G(3) = 0.75: residuals −0.25 and −0.25 around a mean
        // of 0.75 with SS_tot = 0.125, so R² = 1 − 0.125/0.125 = 0.
        assert!(r_squared(&u, &km).abs() < 1e-15);
        // KS: |G(1) − 0| = 0.25, |G(1) − 0.5| = 0.25, |G(3) − 0.5| = 0.25,
        // |G(3) − 1| = 0.25; after t = 3 F̂ = 1 against G(3) = 0.75.
        assert!((ks_distance(&u, &km) - 0.25).abs() < 1e-12);
        let e = LifetimeModel::Exponential(Exponential::new(2f64.ln(), 24.0).unwrap());
        // G(1) = 0.5 exactly; G(3) = 0.875: R² = 1 − 0.015625/0.125.
        assert!((r_squared(&e, &km) - 0.875).abs() < 1e-12);
        // The largest gap: just before t = 1, G = 0.5 against F̂ = 0.
        assert!((ks_distance(&e, &km) - 0.5).abs() < 1e-12);
    }

    #[test]
    fn lifetimes_past_the_deadline_join_its_point_mass() {
        let records = [
            record(24.5, true, "t", "z"),
            record(24.1, false, "t", "z"),
            record(1.0, true, "t", "z"),
            record(2.0, false, "t", "z"),
        ];
        let km = KaplanMeier::new(
            &records
                .iter()
                .map(|r| observation(r, 24.0))
                .collect::<Vec<_>>(),
        )
        .unwrap();
        let last = km.steps().last().unwrap();
        assert_eq!((last.time_h, last.events, last.survival), (24.0, 2, 0.0));
    }

    #[test]
    fn small_groups_are_shrunk_toward_the_pooled_fit() {
        let big = Bathtub::default();
        let odd = Bathtub::new(0.3, 3.0, 0.8, 24.0, 24.0).unwrap();
        let mut records = censored_sample(&big, 3000, 8.0, 21);
        let mut rng = ChaCha8Rng::seed_from_u64(22);
        // A small and a large group, both drawn from the odd model.
        for (vm_type, n) in [("small", 25), ("large", 1500)] {
            for _ in 0..n {
                records.push(record(odd.sample(&mut rng), true, vm_type, "us-central1-c"));
            }
        }
        let config = FitConfig {
            models: vec![ModelKind::Bathtub],
            groupings: vec![Grouping::new(&[Dimension::Type])],
            ..FitConfig::default()
        };
        let fits = fit_groups(&records, &config).unwrap();
        let group = |t: &str| {
            fits.group(&GroupKey {
                vm_type: Some(t.to_owned()),
                ..GroupKey::default()
            })
            .unwrap()
            .fit(ModelKind::Bathtub)
            .unwrap()
            .clone()
        };
        let (small, large) = (group("small"), group("large"));
        let pooled = fits.pooled().fit(ModelKind::Bathtub).unwrap().model;
        assert!((small.weight - 25.0 / 75.0).abs() < 1e-12);
        assert!((large.weight - 1500.0 / 1550.0).abs() < 1e-12);
        let a = |m: &LifetimeModel| m.params()[0];
        // The shrunk A lies between the group's own fit and the pooled one,
        // at the weight's share of the way (A is on a linear scale).
        let want = small.weight * a(&small.raw) + (1.0 - small.weight) * a(&pooled);
        assert!((a(&small.model) - want).abs() < 1e-12);
        // The large group keeps nearly its own fit, close to the truth.
        assert!((a(&large.model) - odd.a()).abs() < 0.03, "{large:?}");
        // The small group stays nearer the pooled fit than to its own.
        assert!((a(&small.model) - a(&pooled)).abs() < (a(&small.model) - a(&small.raw)).abs());
        // Lookups fall back from type to pooled, and say which they used.
        let used = |vm_type: &str| {
            let group = fits
                .lookup_group(ModelKind::Bathtub, vm_type, "nowhere", None)
                .unwrap();
            (
                group.key.to_string(),
                a(&group.fit(ModelKind::Bathtub).unwrap().model),
            )
        };
        assert_eq!(used("large"), ("type=large".to_owned(), a(&large.model)));
        assert_eq!(
            used("unknown"),
            (GroupKey::pooled().to_string(), a(&pooled))
        );
    }

    #[test]
    fn tiny_groups_are_skipped_and_priors_pull_the_pooled_fit() {
        let mut records = censored_sample(&Bathtub::default(), 60, 10.0, 31);
        records.push(record(3.0, true, "rare", "us-central1-c"));
        let prior = Bathtub::new(0.3, 2.0, 1.0, 22.0, 24.0).unwrap();
        let config = FitConfig {
            models: vec![ModelKind::Bathtub],
            groupings: vec![Grouping::new(&[Dimension::Type])],
            priors: vec![LifetimeModel::Bathtub(prior)],
            ..FitConfig::default()
        };
        let fits = fit_groups(&records, &config).unwrap();
        assert_eq!(fits.skipped().len(), 1);
        assert_eq!(fits.skipped()[0].0.to_string(), "type=rare");
        let pooled = fits.pooled().fit(ModelKind::Bathtub).unwrap();
        let d = fits.pooled().km.events() as f64;
        assert!((pooled.weight - d / (d + 50.0)).abs() < 1e-12);
        assert_ne!(pooled.model, pooled.raw);
        let too_few = fit_groups(&records[..3], &config).unwrap_err();
        assert!(
            matches!(too_few, FitError::TooFewEvents { .. }),
            "{too_few}"
        );
    }

    #[test]
    fn lookups_take_the_most_specific_fitted_group_with_the_period() {
        let names: Vec<String> = Grouping::combinations()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            names,
            [
                "type+zone+period",
                "type+zone",
                "type+period",
                "zone+period",
                "type",
                "zone",
                "period"
            ]
        );
        // Half the VMs launched at 14:22 CDT (day), half 12 h later (night).
        let mut records = censored_sample(&Bathtub::default(), 400, 10.0, 51);
        for r in records.iter_mut().step_by(2) {
            r.launch_time_us += 12 * 3_600_000_000;
        }
        let config = FitConfig {
            models: vec![ModelKind::Bathtub],
            groupings: vec![
                Grouping::new(&[Dimension::Type, Dimension::Zone, Dimension::Period]),
                Grouping::new(&[Dimension::Type]),
            ],
            ..FitConfig::default()
        };
        let fits = fit_groups(&records, &config).unwrap();
        let (t, z) = ("n1-highcpu-2", "us-central1-c");
        let group = |key: &str| {
            let g = fits.groups().iter().find(|g| g.key.to_string() == key);
            g.unwrap().fit(ModelKind::Bathtub).unwrap()
        };
        let found = |vm_type, zone, period| {
            fits.lookup(ModelKind::Bathtub, vm_type, zone, period)
                .unwrap()
        };
        let day = group("type=n1-highcpu-2,zone=us-central1-c,period=day");
        let night = group("type=n1-highcpu-2,zone=us-central1-c,period=night");
        assert_ne!(day, night);
        assert_eq!(found(t, z, Some(Period::Day)), day);
        assert_eq!(found(t, z, Some(Period::Night)), night);
        // Without a period, or in a zone without its own group: the type.
        assert_eq!(found(t, z, None), group("type=n1-highcpu-2"));
        assert_eq!(
            found(t, "us-east1-b", Some(Period::Day)),
            group("type=n1-highcpu-2")
        );
        assert_eq!(found("other", z, Some(Period::Day)), group("all"));
    }

    #[test]
    fn priors_outside_the_fitted_range_are_refused() {
        let records = censored_sample(&Bathtub::default(), 100, 10.0, 61);
        let with_prior = |prior: Bathtub| FitConfig {
            priors: vec![LifetimeModel::Bathtub(prior)],
            ..bathtub_only()
        };
        let wide = with_prior(Bathtub::new(0.45, 60.0, 0.8, 24.0, 24.0).unwrap());
        let err = wide.check_priors().unwrap_err();
        assert!(
            err.to_string().contains("`tau1` must be in [0.01, 48]"),
            "{err}"
        );
        assert_eq!(fit_groups(&records, &wide).unwrap_err(), err);
        let other_deadline = with_prior(Bathtub::new(0.45, 1.0, 0.8, 24.0, 12.0).unwrap());
        assert!(matches!(
            other_deadline.check_priors(),
            Err(FitError::PriorDeadline { .. })
        ));
        with_prior(Bathtub::default()).check_priors().unwrap();
    }

    #[test]
    fn fits_are_deterministic() {
        let records = censored_sample(&Bathtub::default(), 500, 5.0, 41);
        let config = FitConfig::default();
        assert_eq!(
            fit_groups(&records, &config).unwrap(),
            fit_groups(&records, &config).unwrap()
        );
    }

    #[test]
    fn local_time_follows_the_regions_daylight_saving() {
        let at = |s: &str| {
            let (date, time) = s.split_once('T').unwrap();
            let d: Vec<i64> = date.split('-').map(|x| x.parse().unwrap()).collect();
            let t: Vec<i64> = time.split(':').map(|x| x.parse().unwrap()).collect();
            let secs = days_from_civil(d[0], d[1], d[2]) * 86_400 + t[0] * 3600 + t[1] * 60;
            u64::try_from(secs).unwrap() * 1_000_000
        };
        let minute = |zone: &str, utc: &str| local_minute_of_day(zone, at(utc)).map(|m| m / 60);
        // US DST 2019: 10 March 08:00 UTC (02:00 CST) to 3 November 07:00 UTC.
        assert_eq!(minute("us-central1-c", "2019-03-10T07:59"), Some(1));
        assert_eq!(minute("us-central1-c", "2019-03-10T08:00"), Some(3));
        assert_eq!(minute("us-east1-b", "2019-11-03T05:59"), Some(1));
        assert_eq!(minute("us-east1-b", "2019-11-03T06:00"), Some(1));
        assert_eq!(minute("us-west1-a", "2019-02-20T20:00"), Some(12));
        // EU DST 2019: 31 March to 27 October, 01:00 UTC.
        assert_eq!(minute("europe-west4-a", "2019-03-31T00:59"), Some(1));
        assert_eq!(minute("europe-west4-a", "2019-03-31T01:00"), Some(3));
        assert_eq!(minute("europe-north1-a", "2019-10-27T00:59"), Some(3));
        assert_eq!(minute("europe-north1-a", "2019-10-27T01:00"), Some(3));
        assert_eq!(minute("asia-south1-a", "2019-06-01T00:00"), Some(5));
        assert_eq!(minute("mars-base1-a", "2019-06-01T00:00"), None);
        assert_eq!(minute("nodash", "2019-06-01T00:00"), None);
        // 19:22 UTC on 25 March 2019 is 14:22 CDT (day), 12:22 PDT (day),
        // 20:22 CET (night).
        let t = at("2019-03-25T19:22");
        assert_eq!(local_period("us-central1-c", t), Some(Period::Day));
        assert_eq!(local_period("europe-west4-a", t), Some(Period::Night));
        assert_eq!(
            civil_from_days(days_from_civil(2019, 2, 28) + 1),
            (2019, 3, 1)
        );
        assert_eq!(
            civil_from_days(days_from_civil(2020, 2, 28) + 1),
            (2020, 2, 29)
        );
    }

    #[test]
    fn groupings_parse_and_key_records() {
        let g: Grouping = "zone+type".parse().unwrap();
        assert_eq!(g.to_string(), "type+zone");
        assert!("colour".parse::<Grouping>().unwrap_err().contains("colour"));
        let r = record(1.0, true, "n1-highcpu-2", "us-central1-c");
        assert_eq!(
            g.key(&r).unwrap().to_string(),
            "type=n1-highcpu-2,zone=us-central1-c"
        );
        let p: Grouping = "period".parse().unwrap();
        assert_eq!(p.key(&r).unwrap().to_string(), "period=day");
        assert_eq!(p.key(&record(1.0, true, "t", "mars-base1-a")), None);
        assert_eq!(GroupKey::pooled().to_string(), "all");
    }

    #[test]
    fn records_come_from_remove_events_of_preemptible_vms() {
        use jobcast_ingest::event::VmInfo;
        let vm = VmInfo {
            name: Some("vm".to_owned()),
            vm_type: "n1-highcpu-2".to_owned(),
            zone: "us-east1-b".to_owned(),
            preemptible: true,
            launch_time_us: 1_000_000_000,
            end_reason: Some(EndReason::Stopped),
        };
        let event = |kind, vm: Option<VmInfo>| MachineEvent {
            time_us: 1_000_000_000 + 5_400_000_000,
            machine_id: 7,
            kind,
            platform: None,
            cpus: None,
            memory: None,
            vm,
            cluster: String::new(),
        };
        let r = LifetimeRecord::from_machine_event(&event(MachineKind::Remove, Some(vm.clone())))
            .unwrap();
        assert_eq!(
            (r.lifetime_h, r.preempted, r.zone.as_str()),
            (1.5, false, "us-east1-b")
        );
        assert!(
            LifetimeRecord::from_machine_event(&event(MachineKind::Add, Some(vm.clone())))
                .is_none()
        );
        assert!(LifetimeRecord::from_machine_event(&event(MachineKind::Remove, None)).is_none());
        let on_demand = VmInfo {
            preemptible: false,
            ..vm.clone()
        };
        assert!(
            LifetimeRecord::from_machine_event(&event(MachineKind::Remove, Some(on_demand)))
                .is_none()
        );
        let no_reason = VmInfo {
            end_reason: None,
            ..vm
        };
        assert!(
            LifetimeRecord::from_machine_event(&event(MachineKind::Remove, Some(no_reason)))
                .is_none()
        );
    }
}
