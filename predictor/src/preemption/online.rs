//! Refitting the lifetime models from the stream of machine events, for the
//! streaming service to hold one [`OnlineFitter`] and ask it for the current
//! model of a VM by type, zone and launch time.
//!
//! The fitter follows preemptible VMs through their `add` (launched) and
//! `remove` (preempted or stopped) events. Every
//! [`OnlineConfig::refit_every`] finished lifetimes, or when asked, it
//! refits every group with [`fit_groups`] on:
//! - the finished lifetimes (preempted ones as events, stopped ones
//!   censored), the most recent [`OnlineConfig::window`] of them, so memory
//!   stays bounded and the fit follows a provider that changes its policy;
//! - the VMs still running, censored at their current age. Early in a
//!   stream only short lifetimes have finished; leaving the survivors out
//!   would make preemptions look far more frequent than they are. A VM
//!   still "running" past the deadline has lost its `remove` event and is
//!   dropped.
//!
//! Groups are the offline fit's dimensions: machine type, zone and
//! day/night by VM-local launch time ([`local_period`]), by default in
//! every combination ([`Grouping::combinations`]). A lookup answers with
//! the most specific group fitted (type+zone+period first, then the coarser
//! ones, then the pooled fit; [`FitSet::lookup`], as offline), so a thin
//! type+zone+period group gives way to broader ones instead of guessing.
//!
//! "Now" is the latest event time seen: the fitter reads no clock, so a
//! replayed trace refits exactly as the live stream did.
//!
//! Until the first successful refit (enough preemptions, see
//! [`FitConfig::min_events`]) lookups answer with the configured priors
//! ([`FitConfig::priors`]; by default the paper's typical bathtub);
//! afterwards the pooled fit is still shrunk toward those priors with the
//! weight `d/(d + k)` of [`fit`](super::fit), and each group toward the
//! pooled fit, so a handful of early preemptions cannot swing it.

use std::collections::{BTreeMap, VecDeque};

use jobcast_ingest::event::{MachineEvent, MachineKind};

use super::bathtub::Bathtub;
use super::fit::{
    DEADLINE_WINDOW_H, DeadlineCheck, FitConfig, FitError, FitSet, Grouping, LifetimeRecord,
    fit_groups, local_period,
};
use super::kaplan_meier::{KaplanMeier, Observation};
use super::models::{LifetimeModel, ModelKind};
use serde::{Deserialize, Serialize};

/// How an [`OnlineFitter`] refits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OnlineConfig {
    /// What to fit and how; its `priors` are the answers before any data.
    pub fit: FitConfig,
    /// Finished lifetimes between automatic refits.
    pub refit_every: usize,
    /// The most recent finished lifetimes kept for fitting.
    pub window: usize,
}

impl Default for OnlineConfig {
    /// The bathtub model only (what risk scores use; each model costs a
    /// fit per group), with the paper's typical fit ([`Bathtub::default`])
    /// as prior, groups in every combination of type, zone and period,
    /// otherwise the default [`FitConfig`]; refit every 100 lifetimes over
    /// the last 20,000.
    fn default() -> Self {
        OnlineConfig {
            fit: FitConfig {
                models: vec![ModelKind::Bathtub],
                groupings: Grouping::combinations(),
                priors: vec![LifetimeModel::Bathtub(Bathtub::default())],
                ..FitConfig::default()
            },
            refit_every: 100,
            window: 20_000,
        }
    }
}

/// A preemptible VM that is still running.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct LiveVm {
    launch_time_us: u64,
    vm_type: String,
    zone: String,
}

/// Accumulates VM lifetimes from machine events and keeps per-group fits
/// fresh (see the [module docs](self)).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OnlineFitter {
    config: OnlineConfig,
    live: BTreeMap<u64, LiveVm>,
    finished: VecDeque<LifetimeRecord>,
    since_refit: usize,
    now_us: u64,
    /// The earliest VM launch seen: whether a deadline could have shown.
    first_launch_us: Option<u64>,
    fits: Option<FitSet>,
    /// What the last refit found of a deadline.
    deadline: Option<DeadlineCheck>,
    /// `Ĝ` at the last refit: the Kaplan–Meier curve of the users' stops
    /// (preemptions and running VMs censored), which weighs the outcomes
    /// risk scores are recalibrated on (`scoring::ipcw`).
    censoring: Option<KaplanMeier>,
    refits: u64,
}

impl OnlineFitter {
    pub fn new(config: OnlineConfig) -> OnlineFitter {
        OnlineFitter {
            config,
            live: BTreeMap::new(),
            finished: VecDeque::new(),
            since_refit: 0,
            now_us: 0,
            first_launch_us: None,
            fits: None,
            deadline: None,
            censoring: None,
            refits: 0,
        }
    }

    /// Take in one machine event; returns whether it triggered a refit.
    /// Events of machines that are not preemptible VMs are ignored.
    pub fn observe(&mut self, event: &MachineEvent) -> bool {
        self.now_us = self.now_us.max(event.time_us);
        let Some(vm) = event.vm.as_ref().filter(|vm| vm.preemptible) else {
            return false;
        };
        match event.kind {
            MachineKind::Add => {
                self.first_launch_us = Some(
                    self.first_launch_us
                        .map_or(vm.launch_time_us, |t| t.min(vm.launch_time_us)),
                );
                self.live.insert(
                    event.machine_id,
                    LiveVm {
                        launch_time_us: vm.launch_time_us,
                        vm_type: vm.vm_type.clone(),
                        zone: vm.zone.clone(),
                    },
                );
                false
            }
            MachineKind::Remove => {
                self.live.remove(&event.machine_id);
                let Some(record) = LifetimeRecord::from_machine_event(event) else {
                    return false;
                };
                self.finished.push_back(record);
                while self.finished.len() > self.config.window {
                    self.finished.pop_front();
                }
                self.since_refit += 1;
                // Too few preemptions yet: keep the previous answers and
                // try again with the next lifetime.
                self.since_refit >= self.config.refit_every && self.refit().is_ok()
            }
            // A pause is not the end of a lifetime: the VM lives on.
            MachineKind::Update | MachineKind::Hibernate | MachineKind::Resume => false,
        }
    }

    /// Refit now, from the finished lifetimes and the running VMs censored
    /// at their current age. On error (too few preemptions) the previous
    /// fits stay in force.
    ///
    /// Lifetimes without a deadline cluster ([`DeadlineCheck`]) break the
    /// bathtub's assumption, so they are fitted without a deadline by the
    /// models that need none, and [`OnlineFitter::risk_model_for`] answers
    /// with the one closest to the data. That is decided only once VMs have
    /// been watched for longer than the configured deadline: before, the
    /// absence of a cluster says nothing.
    pub fn refit(&mut self) -> Result<(), FitError> {
        let deadline_h = self.config.fit.max_lifetime_h;
        let now = self.now_us;
        let capped = self
            .fits
            .as_ref()
            .is_none_or(|f| f.max_lifetime_h().is_finite());
        if capped {
            // A VM running past the deadline has lost its remove event.
            self.live.retain(|_, vm| {
                ((now.saturating_sub(vm.launch_time_us)) as f64) < deadline_h * 3.6e9
            });
        }
        let running = self.live.values().filter_map(|vm| {
            let age_us = now.checked_sub(vm.launch_time_us)?;
            Some(LifetimeRecord {
                lifetime_h: age_us as f64 / 3.6e9,
                preempted: false,
                vm_type: vm.vm_type.clone(),
                zone: vm.zone.clone(),
                launch_time_us: vm.launch_time_us,
            })
        });
        let records: Vec<LifetimeRecord> = self.finished.iter().cloned().chain(running).collect();
        let stops: Vec<Observation> = records
            .iter()
            .enumerate()
            .map(|(i, r)| Observation {
                time_h: r.lifetime_h,
                // A finished VM that was not preempted was stopped; the
                // running ones are censored.
                event: i < self.finished.len() && !r.preempted,
            })
            .collect();
        let deadline = DeadlineCheck::of(&records);
        let watched_h = self
            .first_launch_us
            .map_or(0.0, |first| now.saturating_sub(first) as f64 / 3.6e9);
        let uncapped = !deadline.present && watched_h > deadline_h + DEADLINE_WINDOW_H;
        let fits = if uncapped {
            fit_groups(&records, &self.config.fit.without_deadline())?
        } else {
            fit_groups(&records, &self.config.fit)?
        };
        self.fits = Some(fits);
        self.deadline = Some(deadline);
        self.censoring = KaplanMeier::new(&stops).ok();
        self.since_refit = 0;
        self.refits += 1;
        Ok(())
    }

    /// `Ĝ`, the curve of the users' stops at the last refit; `None` before
    /// the first.
    pub fn censoring(&self) -> Option<&KaplanMeier> {
        self.censoring.as_ref()
    }

    /// The current fits; `None` before the first successful refit.
    pub fn fits(&self) -> Option<&FitSet> {
        self.fits.as_ref()
    }

    /// The model of `kind` for a VM of this type in this zone launched at
    /// `launch_time_us` (µs since the epoch, which gives its VM-local
    /// day/night): the most specific fitted group (see [`FitSet::lookup`]),
    /// else the configured prior; `None` when there is neither.
    pub fn model_for(
        &self,
        kind: ModelKind,
        vm_type: &str,
        zone: &str,
        launch_time_us: u64,
    ) -> Option<LifetimeModel> {
        let period = local_period(zone, launch_time_us);
        self.fits
            .as_ref()
            .and_then(|f| f.lookup(kind, vm_type, zone, period))
            .map(|f| f.model)
            .or_else(|| {
                self.config
                    .fit
                    .priors
                    .iter()
                    .copied()
                    .find(|p| p.kind() == kind)
            })
    }

    /// The bathtub for a VM of this type in this zone launched at
    /// `launch_time_us` (see [`OnlineFitter::model_for`]): fitted, else the
    /// configured prior, else the paper's typical fit.
    pub fn bathtub_for(&self, vm_type: &str, zone: &str, launch_time_us: u64) -> Bathtub {
        match self.model_for(ModelKind::Bathtub, vm_type, zone, launch_time_us) {
            Some(LifetimeModel::Bathtub(b)) => b,
            _ => Bathtub::default(),
        }
    }

    /// The model risks are scored with for a VM of this type in this zone
    /// launched at `launch_time_us`: the bathtub ([`Self::bathtub_for`])
    /// while the lifetimes show a deadline, or have not been watched long
    /// enough to tell; else, in the most specific fitted group, the model
    /// closest to its lifetimes ([`GroupFit::chosen`](super::fit::GroupFit::chosen)).
    pub fn risk_model_for(&self, vm_type: &str, zone: &str, launch_time_us: u64) -> LifetimeModel {
        let uncapped = self
            .fits
            .as_ref()
            .filter(|f| f.max_lifetime_h().is_infinite());
        let Some(fits) = uncapped else {
            return LifetimeModel::Bathtub(self.bathtub_for(vm_type, zone, launch_time_us));
        };
        let period = local_period(zone, launch_time_us);
        fits.pooled()
            .chosen()
            .and_then(|pooled| fits.lookup_group(pooled.model.kind(), vm_type, zone, period))
            .and_then(|group| group.chosen())
            .map(|fit| fit.model)
            .unwrap_or_else(|| {
                LifetimeModel::Bathtub(self.bathtub_for(vm_type, zone, launch_time_us))
            })
    }

    /// What the last refit found of a deadline; `None` before one.
    pub fn deadline(&self) -> Option<&DeadlineCheck> {
        self.deadline.as_ref()
    }

    /// Successful refits so far.
    pub fn refits(&self) -> u64 {
        self.refits
    }

    /// Preemptible VMs currently running.
    pub fn running(&self) -> usize {
        self.live.len()
    }

    /// Finished lifetimes held for fitting.
    pub fn finished(&self) -> usize {
        self.finished.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jobcast_ingest::event::{EndReason, VmInfo};
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    const HOUR_US: f64 = 3.6e9;

    fn vm_in(zone: &str, launch_time_us: u64, end_reason: Option<EndReason>) -> VmInfo {
        VmInfo {
            name: None,
            vm_type: "n1-highcpu-2".to_owned(),
            zone: zone.to_owned(),
            preemptible: true,
            launch_time_us,
            end_reason,
        }
    }

    fn vm(launch_time_us: u64, end_reason: Option<EndReason>) -> VmInfo {
        vm_in("us-east1-b", launch_time_us, end_reason)
    }

    fn event(time_us: u64, machine_id: u64, kind: MachineKind, vm: VmInfo) -> MachineEvent {
        MachineEvent::of_vm(time_us, machine_id, kind, vm)
    }

    /// Add and remove events of VMs in `zone`, each launched at its time
    /// with a lifetime from its model, a quarter stopped early by their
    /// users, in time order.
    fn lifetimes_in(zone: &str, vms: &[(u64, &Bathtub)], seed: u64) -> Vec<MachineEvent> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut events = Vec::new();
        for (id, &(launch, truth)) in (0..).zip(vms) {
            let mut life = truth.sample(&mut rng);
            let mut reason = EndReason::Preempted;
            if rng.random::<f64>() < 0.25 {
                let stop = rng.random::<f64>() * 2.0;
                if stop < life {
                    life = stop;
                    reason = EndReason::Stopped;
                }
            }
            let end = launch + (life * HOUR_US) as u64;
            events.push(event(
                launch,
                id,
                MachineKind::Add,
                vm_in(zone, launch, None),
            ));
            events.push(event(
                end,
                id,
                MachineKind::Remove,
                vm_in(zone, launch, Some(reason)),
            ));
        }
        events.sort_by_key(|e| e.time_us);
        events
    }

    #[test]
    fn a_hibernation_is_no_end_of_a_lifetime() {
        let mut fitter = OnlineFitter::new(OnlineConfig::default());
        let hour = HOUR_US as u64;
        fitter.observe(&event(0, 1, MachineKind::Add, vm(0, None)));
        fitter.observe(&event(hour, 1, MachineKind::Hibernate, vm(0, None)));
        fitter.observe(&event(2 * hour, 1, MachineKind::Resume, vm(0, None)));
        assert_eq!((fitter.running(), fitter.finished()), (1, 0));
        fitter.observe(&event(
            3 * hour,
            1,
            MachineKind::Remove,
            vm(0, Some(EndReason::Preempted)),
        ));
        assert_eq!((fitter.running(), fitter.finished()), (0, 1));
    }

    /// `n` VMs in us-east1-b launched a minute apart from the epoch, with
    /// lifetimes from `truth`.
    fn stream(truth: &Bathtub, n: u64, seed: u64) -> Vec<MachineEvent> {
        let vms: Vec<(u64, &Bathtub)> = (0..n).map(|id| (id * 60_000_000, truth)).collect();
        lifetimes_in("us-east1-b", &vms, seed)
    }

    #[test]
    fn answers_with_the_prior_until_it_has_data() {
        let fitter = OnlineFitter::new(OnlineConfig::default());
        assert!(fitter.fits().is_none());
        assert_eq!(
            fitter.bathtub_for("n1-highcpu-2", "us-east1-b", 0),
            Bathtub::default()
        );
        assert_eq!(fitter.model_for(ModelKind::Weibull, "t", "z", 0), None);
    }

    #[test]
    fn refits_periodically_and_converges_to_the_truth() {
        let truth = Bathtub::new(0.35, 1.5, 0.8, 24.0, 24.0).unwrap();
        let mut fitter = OnlineFitter::new(OnlineConfig {
            refit_every: 500,
            ..OnlineConfig::default()
        });
        let events = stream(&truth, 3000, 1);
        let triggered = events.iter().filter(|e| fitter.observe(e)).count();
        assert_eq!(triggered, 6);
        assert_eq!(fitter.refits(), 6);
        assert_eq!((fitter.running(), fitter.finished()), (0, 3000));
        let got = fitter.bathtub_for("n1-highcpu-2", "us-east1-b", 0);
        // 3000 lifetimes outweigh the prior (A = 0.45) but for 1–2 %.
        assert!((got.a() - truth.a()).abs() < 0.03, "{got:?}");
        let sup = (0..2400)
            .map(|i| f64::from(i) / 100.0)
            .map(|t| (got.cdf(t) - truth.cdf(t)).abs())
            .fold(0.0, f64::max);
        assert!(sup < 0.03, "{got:?}");
    }

    #[test]
    fn day_and_night_launches_get_their_own_fits() {
        use crate::preemption::fit::{Period, local_period};
        // 2019-06-03T00:00Z; us-central1 is on CDT (UTC−5) then, so 19:00
        // UTC is 14:00 local (day) and 07:00 UTC is 02:00 local (night).
        const JUNE_3: u64 = 1_559_520_000_000_000;
        const DAY_US: u64 = 86_400_000_000;
        let zone = "us-central1-c";
        let day_launch = JUNE_3 + 19 * 3_600_000_000;
        let night_launch = JUNE_3 + 7 * 3_600_000_000;
        assert_eq!(local_period(zone, day_launch), Some(Period::Day));
        assert_eq!(local_period(zone, night_launch), Some(Period::Night));
        // Day launches are made short-lived, night ones long-lived.
        let short = Bathtub::new(0.7, 1.0, 0.8, 24.0, 24.0).unwrap();
        let long = Bathtub::new(0.2, 2.0, 0.8, 24.0, 24.0).unwrap();
        let prior = Bathtub::new(0.4, 1.5, 1.0, 23.0, 24.0).unwrap();
        let config = OnlineConfig {
            fit: FitConfig {
                priors: vec![LifetimeModel::Bathtub(prior)],
                ..OnlineConfig::default().fit
            },
            refit_every: usize::MAX,
            ..OnlineConfig::default()
        };
        // 20 VMs of each period a day, a minute apart, for 40 days.
        let mut vms = Vec::new();
        for day in 0..40 {
            for i in 0..20 {
                let offset = day * DAY_US + i * 60_000_000;
                vms.push((day_launch + offset, &short));
                vms.push((night_launch + offset, &long));
            }
        }
        let events = lifetimes_in(zone, &vms, 4);
        let mut fitter = OnlineFitter::new(config);
        // Before a refit: exactly the configured prior, day or night.
        for e in &events[..200] {
            assert!(!fitter.observe(e));
        }
        for launch in [day_launch, night_launch] {
            assert_eq!(fitter.bathtub_for("n1-highcpu-2", zone, launch), prior);
        }
        for e in &events[200..] {
            fitter.observe(e);
        }
        fitter.refit().unwrap();
        let at_day = fitter.bathtub_for("n1-highcpu-2", zone, day_launch + 30 * DAY_US);
        let at_night = fitter.bathtub_for("n1-highcpu-2", zone, night_launch + 30 * DAY_US);
        // The answers are the type+zone+period groups' fits.
        let group = |period| {
            let key = crate::preemption::fit::GroupKey {
                vm_type: Some("n1-highcpu-2".to_owned()),
                zone: Some(zone.to_owned()),
                period: Some(period),
            };
            fitter
                .fits()
                .unwrap()
                .group(&key)
                .unwrap()
                .fit(ModelKind::Bathtub)
                .unwrap()
                .model
        };
        assert_eq!(LifetimeModel::Bathtub(at_day), group(Period::Day));
        assert_eq!(LifetimeModel::Bathtub(at_night), group(Period::Night));
        // P(preempted before 5 h): short ≈ 0.69, long ≈ 0.18, prior ≈ 0.38.
        let p5 = |b: &Bathtub| b.cdf(5.0);
        assert!((p5(&at_day) - p5(&short)).abs() < 0.05, "{at_day:?}");
        assert!((p5(&at_night) - p5(&long)).abs() < 0.05, "{at_night:?}");
        assert!(p5(&at_day) > p5(&prior) + 0.2 && p5(&at_night) < p5(&prior) - 0.1);
        // A VM whose period is unknown (a region not in the table) gets the
        // type's fit, which pools both periods.
        let pooled = fitter.bathtub_for("n1-highcpu-2", "mars-base1-a", day_launch);
        assert!(p5(&at_night) < p5(&pooled) && p5(&pooled) < p5(&at_day));
    }

    #[test]
    fn running_vms_count_as_censored() {
        let truth = Bathtub::default();
        let mut fitter = OnlineFitter::new(OnlineConfig {
            refit_every: usize::MAX,
            ..OnlineConfig::default()
        });
        // 2000 VMs launched at once; watch the first 6 hours only.
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let mut events = Vec::new();
        for id in 0..2000 {
            events.push(event(0, id, MachineKind::Add, vm(0, None)));
            let life = truth.sample(&mut rng);
            if life < 6.0 {
                let end = (life * HOUR_US) as u64;
                events.push(event(
                    end,
                    id,
                    MachineKind::Remove,
                    vm(0, Some(EndReason::Preempted)),
                ));
            }
        }
        events.sort_by_key(|e| e.time_us);
        for e in &events {
            fitter.observe(e);
        }
        let six_hours = (6.0 * HOUR_US) as u64;
        fitter.observe(&event(six_hours, 9999, MachineKind::Update, vm(0, None)));
        assert!(fitter.running() > 1000);
        fitter.refit().unwrap();
        let km = &fitter.fits().unwrap().pooled().km;
        assert_eq!(km.observations(), 2000);
        // Only the preempted VMs have finished; with the survivors censored
        // at 6 h the estimate still matches the truth.
        for t in [0.5, 2.0, 5.0] {
            assert!(
                (km.cdf(t) - truth.cdf(t)).abs() < 0.03,
                "t={t}: {}",
                km.cdf(t)
            );
        }
    }

    #[test]
    fn keeps_a_bounded_window_and_ignores_other_machines() {
        let mut fitter = OnlineFitter::new(OnlineConfig {
            refit_every: 50,
            window: 100,
            ..OnlineConfig::default()
        });
        for e in stream(&Bathtub::default(), 300, 3) {
            fitter.observe(&e);
        }
        assert_eq!(fitter.finished(), 100);
        assert!(fitter.refits() > 0);
        let on_demand = VmInfo {
            preemptible: false,
            ..vm(0, Some(EndReason::Stopped))
        };
        let before = fitter.finished();
        fitter.observe(&event(u64::MAX / 2, 1, MachineKind::Remove, on_demand));
        let mut plain = event(u64::MAX / 2, 2, MachineKind::Remove, vm(0, None));
        plain.vm = None;
        fitter.observe(&plain);
        assert_eq!(fitter.finished(), before);
        // A VM added long ago and never removed is dropped at the next refit.
        let mut stale = OnlineFitter::new(OnlineConfig::default());
        stale.observe(&event(0, 1, MachineKind::Add, vm(0, None)));
        stale.observe(&event(
            (30.0 * HOUR_US) as u64,
            2,
            MachineKind::Update,
            vm(0, None),
        ));
        assert_eq!(stale.running(), 1);
        assert!(stale.refit().is_err());
        assert_eq!(stale.running(), 0);
    }
}

#[cfg(test)]
mod deadline_tests {
    use jobcast_ingest::event::{EndReason, VmInfo};
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;

    /// Spot-like VMs, one launched every 10 minutes, each preempted after
    /// an exponential lifetime of mean 1 h: no deadline, anywhere.
    fn uncapped(vms: u64) -> Vec<MachineEvent> {
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let mut events = Vec::new();
        for id in 0..vms {
            let launch = id * 600_000_000;
            let life_us = (-(1.0 - rng.random::<f64>()).ln() * 3.6e9) as u64;
            let vm = |end_reason| VmInfo {
                name: None,
                vm_type: "intel_64".into(),
                zone: "us-east-1b".into(),
                preemptible: true,
                launch_time_us: launch,
                end_reason,
            };
            let event = |time_us, kind, vm| MachineEvent {
                time_us,
                machine_id: id,
                kind,
                platform: None,
                cpus: None,
                memory: None,
                vm: Some(vm),
                cluster: String::new(),
            };
            events.push(event(launch, MachineKind::Add, vm(None)));
            events.push(event(
                launch + life_us,
                MachineKind::Remove,
                vm(Some(EndReason::Preempted)),
            ));
        }
        events.sort_by_key(|e| e.time_us);
        events
    }

    /// Lifetimes without a deadline cluster are scored by a model without
    /// a deadline, but only once VMs have been watched for longer than the
    /// configured deadline: in the first day the bathtub stays.
    #[test]
    fn uncapped_lifetimes_leave_the_bathtub_once_a_deadline_could_have_shown() {
        let mut fitter = OnlineFitter::new(OnlineConfig::default());
        let events = uncapped(400);
        // 20 h of launches: not yet past the 24 h deadline.
        for e in events.iter().filter(|e| e.time_us < 20 * 3_600_000_000) {
            fitter.observe(e);
        }
        fitter.refit().unwrap();
        assert!(!fitter.deadline().unwrap().present);
        let early = fitter.risk_model_for("intel_64", "us-east-1b", 0);
        assert_eq!(early.kind(), ModelKind::Bathtub);
        // 66 h of them: no deadline, and the closest deadline-free model.
        for e in events.iter().filter(|e| e.time_us >= 20 * 3_600_000_000) {
            fitter.observe(e);
        }
        fitter.refit().unwrap();
        let later = fitter.risk_model_for("intel_64", "us-east-1b", 0);
        assert!(!later.kind().needs_deadline(), "{later:?}");
        assert!(later.max_lifetime_h().is_infinite());
        // About an hour on average, as drawn.
        assert!((0.8..1.25).contains(&later.mean()), "{later:?}");
    }
}
