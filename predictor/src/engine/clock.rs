//! Event time: the engine's "now", made by the input partitions together,
//! and the events that stand alone far ahead of it.
//!
//! Everything the engine does at a time rather than at an event (giving up
//! on silent jobs and machines, the history's window, the store's
//! retention) reads one clock. Were it the latest event time applied, one
//! event far ahead would move it (a unit mistaken, a clock gone wrong, or
//! an attacker's machine events each just under the skew ahead of the
//! last, walking it forward until every live job expires), and the events
//! after it would be refused for lying behind it. The clock is made as
//! Flink makes a watermark instead:
//!
//! - **Per partition**, the latest event time applied from it. An event
//!   more than `engine.max_future_skew_secs` ahead of every partition's
//!   latest (the *frontier*) is not applied at once: it is *held*, with the
//!   events of the same job (or machine) that follow it on its partition,
//!   until the input says whether the jump was real. It was if an event of
//!   another job or machine on that partition agrees (also far ahead,
//!   within the skew of the held run), if another partition's events reach
//!   it (the frontier comes within the skew), or if more than half of the
//!   partitions hold runs that agree (the quiet day ended everywhere): the
//!   run is applied. It was not if the partition's next event about
//!   something else is back near the frontier: the run stood alone, and
//!   is refused (`future_time`, dead-lettered). So a quiet day (a
//!   weekend, a maintenance window, a gap of days in a replayed log) ends
//!   with every event applied, while no single job's or machine's events
//!   can move the frontier by more than the skew.
//! - **Across partitions**, the clock is the minimum of the partitions'
//!   latest times, over the active ones: a partition more than the skew
//!   behind the time that a majority of partitions have reached is idle
//!   (quiet, or drained), and left out until it catches up. No single
//!   partition can move the clock, and a jump that the active partitions
//!   agree on moves it. The clock never goes back.
//!
//! A run that ends a partition's input, with too few partitions agreeing,
//! stays held (counted, [`Engine::held_events`]) until
//! that partition delivers again. Everything here is a function of the
//! events and the partitions they came from, in the order applied: the
//! same log gives the same clock, the same held and refused events, on
//! replay and on recovery, and the state is in the snapshot.
//!
//! [`Engine::held_events`]: super::Engine::held_events

use std::collections::{BTreeMap, VecDeque};

use jobcast_ingest::event::{Event, decode, encode};
use serde::{Deserialize, Serialize};

use super::effects::{self, Rejection};

/// Where an event came from: its input partition and offset. The clock is
/// made per partition; the offset names a held event when it is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    pub partition: i32,
    pub offset: i64,
}

impl Origin {
    pub fn new(partition: i32, offset: i64) -> Self {
        Origin { partition, offset }
    }
}

/// The most events one held run keeps (a job of a million tasks whose
/// clock is a year off would otherwise be held whole); further events of
/// the same job or machine are refused at once.
pub const MAX_HELD_PER_PARTITION: usize = 1_000;

/// What an event is about: a held run is confirmed only by an event about
/// something else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Subject {
    Job(u64),
    Machine(u64),
}

impl Subject {
    fn of(event: &Event) -> Self {
        match event {
            Event::JobSubmitted(j) => Subject::Job(j.job_id),
            Event::Task(t) => Subject::Job(t.job_id),
            Event::JobEnded(e) => Subject::Job(e.job_id),
            Event::Machine(m) => Subject::Machine(m.machine_id),
        }
    }
}

/// An event held, far ahead of the clock.
#[derive(Debug, Clone, PartialEq)]
pub struct Held {
    pub origin: Origin,
    pub event: Event,
}

/// An event that was held and then found to stand alone: the caller
/// dead-letters it as it would an event refused on arrival.
#[derive(Debug, Clone, PartialEq)]
pub struct Refused {
    pub origin: Origin,
    pub event: Event,
    pub rejection: Rejection,
}

#[derive(Debug, Default)]
struct PartitionClock {
    /// The latest event time applied from the partition, once one was.
    latest_us: Option<u64>,
    /// A run of events far ahead, all about one job or machine.
    held: VecDeque<Held>,
}

/// What to do with an arriving event, after settling the run held before
/// it.
#[derive(Debug, Default)]
pub(super) struct Admission {
    /// Held events to apply first, in order.
    pub release: Vec<Held>,
    /// Held events that stood alone.
    pub refuse: Vec<Held>,
    /// The arriving event itself.
    pub this: Verdict,
}

#[derive(Debug, Default, PartialEq, Eq)]
pub(super) enum Verdict {
    #[default]
    Apply,
    Hold,
    /// Refused at once (its run is full).
    Refuse,
}

#[derive(Debug)]
pub(super) struct EventClock {
    /// How far ahead of the clock an event may be (µs), if bounded; also
    /// how far behind the majority a partition is idle.
    skew_us: Option<u64>,
    partitions: BTreeMap<i32, PartitionClock>,
    now_us: u64,
    /// The latest event time applied from any partition.
    frontier_us: u64,
    /// Events held, over every partition.
    held: usize,
    /// The partitions' latest times, reused by [`Self::agreed`] so that
    /// applying an event allocates nothing.
    scratch: Vec<u64>,
    /// The partition whose latest time the agreement was, when last
    /// computed ([`Self::bounded`]).
    witness: Option<i32>,
}

/// The clock's state, as a snapshot holds it. Held events are in their
/// wire form (the event types have no serde form of their own).
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct ClockState {
    now_us: u64,
    partitions: Vec<PartitionState>,
}

/// A partition's id, latest time applied, and held events (each with its
/// origin, in wire form).
type PartitionState = (i32, Option<u64>, Vec<(Origin, Vec<u8>)>);

impl EventClock {
    pub(super) fn new(skew_us: Option<u64>) -> Self {
        EventClock {
            skew_us,
            partitions: BTreeMap::new(),
            now_us: 0,
            frontier_us: 0,
            held: 0,
            scratch: Vec::new(),
            witness: None,
        }
    }

    /// The engine's now: the minimum over the active partitions of their
    /// latest event time applied (0 before any).
    pub(super) fn now_us(&self) -> u64 {
        self.now_us
    }

    /// The latest time a history window or a risk refresh may take from an
    /// event: the clock plus the skew, so that no event moves them further
    /// ahead of the partitions' agreement than that.
    pub(super) fn cap_us(&self, time_us: u64) -> u64 {
        match self.skew_us {
            Some(skew) if self.now_us > 0 => time_us.min(self.now_us.saturating_add(skew)),
            _ => time_us,
        }
    }

    pub(super) fn held_events(&self) -> usize {
        self.held
    }

    /// Decide what to do with `event`, arriving from `origin`: the run held
    /// on its partition is released or refused first, if this event
    /// settles it.
    pub(super) fn admit(&mut self, origin: Origin, event: &Event) -> Admission {
        let mut out = Admission::default();
        let Some(skew) = self.skew_us else {
            return out;
        };
        // Nothing applied yet: the first event has nothing to be ahead of
        // (checked in full only while the frontier is at 0).
        let first =
            self.frontier_us == 0 && self.partitions.values().all(|p| p.latest_us.is_none());
        let mut reference = self.frontier_us;
        let p = self.partitions.entry(origin.partition).or_default();
        let ahead = |time: u64, reference: u64| !first && time > reference.saturating_add(skew);
        let t = event.time_us();
        let subject = Subject::of(event);
        if let Some(front) = p.held.front() {
            let h = front.event.time_us();
            if !ahead(h, reference) {
                // The clock caught up with the run.
                out.release = p.held.drain(..).collect();
                reference = reference.max(h);
            } else if !ahead(t, reference) {
                // Back near the clock: the run stood alone.
                out.refuse = p.held.drain(..).collect();
            } else if subject == Subject::of(&front.event) {
                if p.held.len() < MAX_HELD_PER_PARTITION {
                    p.held.push_back(Held {
                        origin,
                        event: event.clone(),
                    });
                    out.this = Verdict::Hold;
                } else {
                    out.this = Verdict::Refuse;
                }
            } else if t.abs_diff(h) <= skew {
                // Another job or machine agrees: the jump is real.
                out.release = p.held.drain(..).collect();
                reference = reference.max(t);
            } else {
                // Another jump, which the run does not agree with.
                out.refuse = p.held.drain(..).collect();
            }
        }
        if out.this == Verdict::Apply && ahead(t, reference) {
            p.held.push_back(Held {
                origin,
                event: event.clone(),
            });
            out.this = Verdict::Hold;
        }
        self.held = self.held + usize::from(out.this == Verdict::Hold)
            - out.release.len()
            - out.refuse.len();
        out
    }

    /// The runs that wait no longer: the frontier came within the skew of
    /// them, or more than half of the partitions seen hold runs within
    /// the skew of them. Drained, in partition order, to be applied.
    pub(super) fn settle(&mut self) -> Vec<Held> {
        let Some(skew) = self.skew_us else {
            return Vec::new();
        };
        if self.held == 0 {
            return Vec::new();
        }
        let seen = self.partitions.len();
        let ready: Vec<i32> = self
            .partitions
            .iter()
            .filter_map(|(&id, p)| {
                let h = p.held.front()?.event.time_us();
                if h <= self.frontier_us.saturating_add(skew) {
                    return Some(id);
                }
                let agreeing = self
                    .partitions
                    .values()
                    .filter(|q| {
                        q.held
                            .front()
                            .is_some_and(|f| f.event.time_us().abs_diff(h) <= skew)
                    })
                    .count();
                (agreeing > 1 && 2 * agreeing > seen).then_some(id)
            })
            .collect();
        let mut out = Vec::new();
        for id in ready {
            let p = self.partitions.get_mut(&id).expect("listed above");
            out.extend(p.held.drain(..));
        }
        self.held -= out.len();
        out
    }

    /// Why a held event (or one refused on arrival) is refused.
    pub(super) fn rejection(&self, origin: Origin, event: &Event, full: bool) -> Rejection {
        let t = event.time_us();
        let skew_s = self.skew_us.unwrap_or(0) / 1_000_000;
        let why = if full {
            format!(
                "its job or machine already has {MAX_HELD_PER_PARTITION} events held far ahead on \
                 partition {}",
                origin.partition
            )
        } else {
            format!(
                "no event of another job or machine on partition {} confirmed the jump",
                origin.partition
            )
        };
        effects::reject(
            "future_time",
            format!(
                "event at partition {} offset {}: time {t} µs is {:.0} s ahead of the latest event \
                 time applied from any partition ({} µs), more than engine.max_future_skew_secs \
                 ({skew_s} s), and {why}",
                origin.partition,
                origin.offset,
                t.saturating_sub(self.frontier_us) as f64 / 1e6,
                self.frontier_us,
            ),
        )
    }

    /// Note an event applied from `partition` at `time_us`, and move the
    /// clock if the partitions now agree on a later time.
    pub(super) fn applied(&mut self, partition: i32, time_us: u64) {
        let p = self.partitions.entry(partition).or_default();
        p.latest_us = Some(p.latest_us.map_or(time_us, |l| l.max(time_us)));
        self.frontier_us = self.frontier_us.max(time_us);
        if self.partitions.len() == 1 {
            // One partition is the whole input.
            self.now_us = self.now_us.max(self.frontier_us);
        } else if time_us > self.now_us && !self.bounded(partition) {
            self.now_us = self.now_us.max(self.agreed());
        }
    }

    /// Whether the agreement surely cannot pass the clock now that
    /// `partition` moved, so that computing it again would change
    /// nothing: its last witness is another partition, still no later than
    /// the clock, and surely active, being within the skew of the frontier
    /// (which no majority passes). Then the agreement, the minimum over the
    /// active partitions, is at most the witness's time. Most events move
    /// a partition other than the slowest, and skip the pass over every
    /// partition.
    fn bounded(&self, partition: i32) -> bool {
        let Some(witness) = self.witness.filter(|&w| w != partition) else {
            return false;
        };
        let Some(latest) = self.partitions.get(&witness).and_then(|p| p.latest_us) else {
            return false;
        };
        let active_from = self
            .frontier_us
            .saturating_sub(self.skew_us.unwrap_or(u64::MAX));
        latest <= self.now_us && latest >= active_from
    }

    /// The minimum latest time over the partitions within the skew of the
    /// time a majority has reached.
    fn agreed(&mut self) -> u64 {
        let latest = &mut self.scratch;
        latest.clear();
        latest.extend(self.partitions.values().filter_map(|p| p.latest_us));
        if latest.is_empty() {
            return 0;
        }
        // The time more than half of them have reached.
        let half = latest.len() / 2;
        let majority = *latest.select_nth_unstable_by(half, |a, b| b.cmp(a)).1;
        let active_from = majority.saturating_sub(self.skew_us.unwrap_or(u64::MAX));
        let agreed = latest
            .iter()
            .copied()
            .filter(|&l| l >= active_from)
            .min()
            .unwrap_or(0);
        self.witness = self
            .partitions
            .iter()
            .find(|(_, p)| p.latest_us == Some(agreed))
            .map(|(&id, _)| id);
        agreed
    }

    pub(super) fn state(&self) -> ClockState {
        ClockState {
            now_us: self.now_us,
            partitions: self
                .partitions
                .iter()
                .map(|(&id, p)| {
                    let held = p
                        .held
                        .iter()
                        .map(|h| {
                            let mut bytes = Vec::new();
                            encode(&h.event, &mut bytes);
                            (h.origin, bytes)
                        })
                        .collect();
                    (id, p.latest_us, held)
                })
                .collect(),
        }
    }

    pub(super) fn restore(&mut self, state: ClockState) -> Result<(), String> {
        self.now_us = state.now_us;
        self.partitions.clear();
        self.witness = None;
        self.held = 0;
        for (id, latest_us, held) in state.partitions {
            let held = held
                .into_iter()
                .map(|(origin, bytes)| {
                    let event = decode(&bytes).map_err(|e| {
                        format!(
                            "the event held from partition {} offset {}: {e}",
                            origin.partition, origin.offset
                        )
                    })?;
                    Ok(Held { origin, event })
                })
                .collect::<Result<_, String>>()?;
            self.partitions
                .insert(id, PartitionClock { latest_us, held });
        }
        self.held = self.partitions.values().map(|p| p.held.len()).sum();
        self.frontier_us = self
            .partitions
            .values()
            .filter_map(|p| p.latest_us)
            .max()
            .unwrap_or(0);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: u64 = 3_600_000_000;

    fn machine(id: u64, t: u64) -> Event {
        decode(
            format!(r#"{{"v":1,"type":"machine","time_us":{t},"machine_id":{id},"kind":"add"}}"#)
                .as_bytes(),
        )
        .unwrap()
    }

    /// Admit and, when applicable, apply, then apply what settles (as the
    /// engine does).
    fn feed(clock: &mut EventClock, partition: i32, event: &Event) -> Admission {
        let mut admission = clock.admit(Origin::new(partition, 0), event);
        for held in &admission.release {
            clock.applied(held.origin.partition, held.event.time_us());
        }
        if admission.this == Verdict::Apply {
            clock.applied(partition, event.time_us());
        }
        loop {
            let settled = clock.settle();
            if settled.is_empty() {
                break;
            }
            for held in &settled {
                clock.applied(held.origin.partition, held.event.time_us());
            }
            admission.release.extend(settled);
        }
        admission
    }

    /// The clock as it was defined: the agreement computed again at every
    /// event that moves a partition past the clock.
    fn recomputed(events: &[(i32, u64)], skew_us: Option<u64>) -> Vec<u64> {
        let mut latest: BTreeMap<i32, u64> = BTreeMap::new();
        let mut now = 0u64;
        events
            .iter()
            .map(|&(partition, t)| {
                let l = latest.entry(partition).or_insert(t);
                *l = (*l).max(t);
                let frontier = latest.values().copied().max().unwrap_or(0);
                if latest.len() == 1 {
                    now = now.max(frontier);
                } else if t > now {
                    let mut values: Vec<u64> = latest.values().copied().collect();
                    values.sort_unstable_by(|a, b| b.cmp(a));
                    let majority = values[values.len() / 2];
                    let from = majority.saturating_sub(skew_us.unwrap_or(u64::MAX));
                    let agreed = values
                        .iter()
                        .copied()
                        .filter(|&l| l >= from)
                        .min()
                        .unwrap_or(0);
                    now = now.max(agreed);
                }
                now
            })
            .collect()
    }

    proptest::proptest! {
        /// Skipping the agreement when its witness bounds it gives the
        /// clock the recomputed one gives, event by event.
        #[test]
        fn the_clock_is_the_recomputed_agreement(
            events in proptest::collection::vec((0i32..6, 0u64..200), 1..300),
            skew in proptest::option::of(0u64..80),
        ) {
            let mut clock = EventClock::new(skew);
            let expected = recomputed(&events, skew);
            for (&(partition, t), &want) in events.iter().zip(&expected) {
                clock.applied(partition, t);
                proptest::prop_assert_eq!(clock.now_us(), want);
            }
        }
    }

    #[test]
    fn no_single_partition_moves_the_clock_but_a_majority_does() {
        let mut clock = EventClock::new(Some(24 * H));
        for p in 0..3 {
            feed(&mut clock, p, &machine(p as u64, H));
        }
        assert_eq!(clock.now_us(), H);
        // Partition 0 walks ahead, each step just under the skew.
        for step in 1..=31u64 {
            let a = feed(&mut clock, 0, &machine(100 + step, H + step * 23 * H));
            assert!(a.refuse.is_empty());
        }
        assert_eq!(clock.now_us(), H, "one partition alone");
        // A second partition moves within the skew of the third: the
        // third is still active, and holds the clock.
        feed(&mut clock, 1, &machine(200, 20 * H));
        assert_eq!(clock.now_us(), H);
        // Further: the majority (partitions 0 and 1) is past 40 h, the
        // third more than the skew behind it, idle and left out.
        feed(&mut clock, 1, &machine(201, 40 * H));
        assert_eq!(clock.now_us(), 40 * H);
        // It comes back: the clock never goes back.
        feed(&mut clock, 2, &machine(300, 2 * H));
        assert_eq!(clock.now_us(), 40 * H);
    }

    #[test]
    fn a_lone_event_far_ahead_is_held_then_refused_and_a_real_jump_is_applied() {
        let mut clock = EventClock::new(Some(24 * H));
        feed(&mut clock, 0, &machine(1, H));
        // Far ahead, alone: held, then refused when the next is near.
        assert_eq!(
            feed(&mut clock, 0, &machine(2, 9_000 * H)).this,
            Verdict::Hold
        );
        assert_eq!(
            feed(&mut clock, 0, &machine(2, 9_001 * H)).this,
            Verdict::Hold,
            "same machine"
        );
        let back = feed(&mut clock, 0, &machine(3, 2 * H));
        assert_eq!(back.refuse.len(), 2);
        assert_eq!(back.this, Verdict::Apply);
        assert_eq!(clock.now_us(), 2 * H);
        // A quiet day, then two machines agree: both applied.
        assert_eq!(feed(&mut clock, 0, &machine(4, 27 * H)).this, Verdict::Hold);
        let agreed = feed(&mut clock, 0, &machine(5, 27 * H + 1));
        assert_eq!((agreed.release.len(), agreed.this), (1, Verdict::Apply));
        assert_eq!(clock.now_us(), 27 * H + 1);
        assert_eq!(clock.held_events(), 0);
    }

    /// After a quiet day, three partitions of four each hold one machine's
    /// event (nothing on its own partition can confirm it): two agreeing
    /// are not more than half, three are, and all three are applied.
    #[test]
    fn runs_the_partitions_agree_on_are_applied() {
        let mut clock = EventClock::new(Some(24 * H));
        for p in 0..4 {
            feed(&mut clock, p, &machine(p as u64, H));
        }
        for p in 1..3 {
            assert_eq!(
                feed(&mut clock, p, &machine(10 + p as u64, 30 * H)).this,
                Verdict::Hold
            );
        }
        assert_eq!(
            clock.held_events(),
            2,
            "two of four agree: not more than half"
        );
        let third = feed(&mut clock, 3, &machine(13, 30 * H));
        assert_eq!(third.this, Verdict::Hold);
        assert_eq!(third.release.len(), 3, "three of four");
        assert_eq!(clock.held_events(), 0);
        assert_eq!(
            clock.now_us(),
            30 * H,
            "partition 0, a day behind three, is idle"
        );
        // Partition 0 comes back: near the clock, applied at once.
        assert_eq!(
            feed(&mut clock, 0, &machine(20, 30 * H + 5)).this,
            Verdict::Apply
        );
        assert_eq!(clock.now_us(), 30 * H);
    }
}
