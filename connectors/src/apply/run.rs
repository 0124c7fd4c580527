//! The applier's loop: decisions read, the scheduler observed, the plan
//! carried out, the state saved.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jobcast_ingest::kafka::{
    KafkaSettings, ReadError, is_runtime_decision, partitions, read_to_end,
};
use jobcast_predictor::decision::{Decision, Newest};
use jobcast_predictor::queues::QueueConfig;
use rdkafka::Message;
use rdkafka::consumer::BaseConsumer;
use rdkafka::error::KafkaError;
use serde::{Deserialize, Serialize};

use super::plan::{Action, Change, Standing, Target, Walltime, plan};
use crate::state_file::StateFile;
use crate::{Scheduler, every};

/// How long the brokers may take to answer, and (by default) reading the
/// decisions published since the last tick may take.
const BROKER_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone)]
pub struct ApplyOptions {
    /// The decisions topic.
    pub topic: String,
    /// The state file (created if absent); a dry run reads it and never
    /// writes it.
    pub state: PathBuf,
    pub interval: Duration,
    /// The service's queue layout (`engine.queues`).
    pub queues: QueueConfig,
    /// Say what would be done, do nothing.
    pub dry_run: bool,
    /// Attempts at each action before it is reported failed.
    pub attempts: u32,
    /// Time limits from the estimates, if wanted.
    pub walltime: Option<Walltime>,
    /// How long reading the decisions published since the last tick may
    /// take; a tick whose read takes longer keeps what it read and acts on
    /// nothing.
    pub read_timeout: Duration,
    /// Decisions published longer ago than this (their Kafka timestamp)
    /// are not acted on, if set.
    pub max_decision_age: Option<Duration>,
}

impl ApplyOptions {
    pub const DEFAULT_READ_TIMEOUT: Duration = BROKER_TIMEOUT;
}

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("Kafka: {0}")]
    Kafka(#[from] KafkaError),
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error("{0}")]
    State(String),
    #[error("observing the scheduler: {0}")]
    Observe(String),
}

/// What is kept across restarts.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(bound = "M: Serialize + serde::de::DeserializeOwned + Default")]
struct Saved<M> {
    /// The decisions topic's next offset, per partition.
    next: BTreeMap<i32, i64>,
    /// The newest decision of each job the scheduler still holds.
    newest: Newest,
    scheduler: M,
    /// Jobs a hand-back has begun on and not finished (Slurm: held, maybe
    /// not released): handed back again by the next hand-back or start.
    #[serde(default)]
    handing_back: BTreeSet<u64>,
    /// The time limit (s; none: unlimited) each job's pending tasks had
    /// before the applier first lowered it, recorded before it does, put
    /// back by a hand-back; forgotten with the job.
    #[serde(default)]
    limits: BTreeMap<u64, Option<u64>>,
}

/// One action of a tick, and how it went.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    #[serde(flatten)]
    pub action: Action,
    /// The scheduler's command.
    pub command: String,
    /// Whether it was carried out (always false in a dry run).
    pub done: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub attempts: u32,
    /// When its last attempt returned (or, in a dry run, when it was
    /// shown), Unix ms: a job's first `done` is when its decision took
    /// effect.
    pub at_ms: u64,
}

/// What one tick did.
#[derive(Debug, Default)]
pub struct Ticked {
    /// Decisions newer than the job's held one.
    pub newer: u64,
    /// Decisions no newer (redeliveries, overtaken ones), dropped.
    pub stale: u64,
    /// Decisions older than `max_decision_age`, dropped.
    pub too_old: u64,
    /// Messages of the decisions topic that are not decisions, each with
    /// where and why.
    pub unreadable: Vec<String>,
    /// The actions planned: carried out, failed, or (dry run) shown.
    pub outcomes: Vec<Outcome>,
    /// Jobs with a decision that the scheduler holds.
    pub jobs: usize,
}

/// An applier with its state loaded and its consumer connected.
pub struct Applier<S: Scheduler> {
    options: ApplyOptions,
    scheduler: S,
    /// What the applier keeps across restarts, under the state file's
    /// lock while the applier lives.
    saved: StateFile<Saved<S::Memory>>,
    consumer: BaseConsumer,
    /// A dry run's last plan: only changes to it are shown.
    shown: Vec<Action>,
}

impl<S: Scheduler> Applier<S> {
    /// Load the state and connect; the topic must exist.
    pub fn open(
        kafka: &KafkaSettings,
        options: ApplyOptions,
        mut scheduler: S,
    ) -> Result<Self, ApplyError> {
        let mut saved: StateFile<Saved<S::Memory>> =
            StateFile::open(&options.state).map_err(ApplyError::State)?;
        // A hand-back begun and not finished: finished first, or its jobs
        // could stay held (a failure leaves them recorded for the next).
        if !saved.handing_back.is_empty() && !options.dry_run {
            finish_hand_back(&mut scheduler, &mut saved, options.attempts, false, false)
                .map_err(ApplyError::State)?;
        }
        let mut config = kafka.client_config();
        config
            .set("group.id", "jobcast-slurm-apply")
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false");
        let consumer: BaseConsumer = config.create().map_err(|e| kafka.redact(e))?;
        partitions(&consumer, &options.topic, BROKER_TIMEOUT)?;
        Ok(Applier {
            options,
            scheduler,
            saved,
            consumer,
            shown: Vec::new(),
        })
    }

    /// Read the decisions published since the last tick, observe the
    /// scheduler, carry out the plan and save the state. A tick that fails
    /// to read every decision up to the topic's end, or to observe the
    /// scheduler, acts on nothing and saves nothing.
    ///
    /// Each decision is offered to the newest held as it is read, so the
    /// offsets never run ahead of what was offered: a read cut short keeps
    /// what it read, and the next tick reads on from there. Memory holds
    /// one decision per job, whatever the backlog.
    pub fn tick(&mut self) -> Result<Ticked, ApplyError> {
        let mut ticked = Ticked::default();
        let topic = self.options.topic.clone();
        let saved = &mut *self.saved;
        let newest = &mut saved.newest;
        let oldest_ms = self.options.max_decision_age.map(|age| {
            unix_ms().saturating_sub(u64::try_from(age.as_millis()).unwrap_or(u64::MAX))
        });
        read_to_end(
            &self.consumer,
            &topic,
            &mut saved.next,
            (BROKER_TIMEOUT, self.options.read_timeout),
            |message| {
                if !is_runtime_decision(message) {
                    // A deadline job's plan or recovery: not this applier's.
                    return;
                }
                let payload = message.payload().unwrap_or_default();
                let published_ms = message.timestamp().to_millis();
                match serde_json::from_slice::<Decision>(payload) {
                    Ok(_)
                        if oldest_ms.is_some_and(|oldest| {
                            published_ms.is_some_and(|at| (at as u64) < oldest)
                        }) =>
                    {
                        ticked.too_old += 1;
                    }
                    Ok(decision) => {
                        if newest.offer(decision) {
                            ticked.newer += 1;
                        } else {
                            ticked.stale += 1;
                        }
                    }
                    Err(e) => ticked.unreadable.push(format!(
                        "{topic} partition {} offset {}: not a decision: {e}",
                        message.partition(),
                        message.offset()
                    )),
                }
            },
        )?;
        let view = self
            .scheduler
            .observe(&mut self.saved.scheduler)
            .map_err(ApplyError::Observe)?;
        let held = |job: u64| view.jobs.contains_key(&job) || view.unreadable.contains(&job);
        self.saved.newest.retain(held);
        self.saved.limits.retain(|&job, _| held(job));
        ticked.jobs = self.saved.newest.len();
        let actions = plan(
            &self.saved.newest,
            &view,
            &self.options.queues,
            self.options.walltime.as_ref(),
        );
        if self.options.dry_run {
            let shown = std::mem::replace(&mut self.shown, actions.clone());
            for action in actions.into_iter().filter(|a| !shown.contains(a)) {
                ticked.outcomes.push(self.carry_out(action));
            }
            return Ok(ticked);
        }
        // A job's limit before the applier first lowers it, kept before
        // any is lowered: a hand-back puts it back, even after a kill.
        for action in &actions {
            if let Change::TimeLimitS(_) = action.change
                && let Some(job) = view.jobs.get(&action.job_id)
            {
                self.saved
                    .limits
                    .entry(action.job_id)
                    .or_insert(job.time_limit_s);
            }
        }
        self.save()?;
        for action in actions {
            ticked.outcomes.push(self.carry_out(action));
        }
        self.save()?;
        Ok(ticked)
    }

    /// Write the state: a tick that changed nothing writes nothing.
    fn save(&mut self) -> Result<(), ApplyError> {
        self.saved.save().map_err(ApplyError::State)
    }

    fn carry_out(&mut self, action: Action) -> Outcome {
        let (attempts, dry_run) = (self.options.attempts, self.options.dry_run);
        carry_out(
            &mut self.scheduler,
            &self.saved.scheduler,
            action,
            attempts,
            dry_run,
        )
    }
}

/// Hand every job jobcast set a standing on back to the scheduler's own
/// order ([`super::plan::hand_back`]), for when `slurm apply` stops for
/// good: each action's outcome, or why the scheduler could not say what it
/// holds or the state file could not be kept.
///
/// Handing a job back may take more than one step (Slurm: a hold, then a
/// release), and a job caught between them would stay held, where no plan
/// finds it. So the jobs are recorded in the applier's state file
/// (`state`) before the first step, each forgotten once handed back: a
/// hand-back killed midway, or whose step failed, is finished by the next
/// hand-back, or by the applier's next start.
pub fn hand_back<S: Scheduler>(
    scheduler: &mut S,
    state: &Path,
    attempts: u32,
    dry_run: bool,
) -> Result<Vec<Outcome>, String> {
    let mut saved: StateFile<Saved<S::Memory>> = StateFile::open(state)?;
    let outcomes = finish_hand_back(scheduler, &mut saved, attempts, dry_run, true)?;
    Ok(outcomes)
}

/// Hand back the jobs recorded in `saved` as begun, and (with `all`) every
/// job jobcast set a standing on; the record saved (not in a dry run)
/// before and after each.
fn finish_hand_back<S: Scheduler>(
    scheduler: &mut S,
    saved: &mut StateFile<Saved<S::Memory>>,
    attempts: u32,
    dry_run: bool,
    all: bool,
) -> Result<Vec<Outcome>, String> {
    let view = scheduler.observe(&mut saved.scheduler)?;
    // Limits first: a job handed back (Slurm: held, then released) may
    // start at once, with the limit it has then.
    let restores = if all {
        super::plan::restore_limits(&view, &saved.limits)
    } else {
        Vec::new()
    };
    let mut outcomes = Vec::new();
    for action in restores {
        let job = action.job_id;
        let outcome = carry_out(scheduler, &saved.scheduler, action, attempts, dry_run);
        if outcome.done {
            saved.limits.remove(&job);
            saved.save()?;
        }
        outcomes.push(outcome);
    }
    let mut jobs: BTreeSet<u64> = saved
        .handing_back
        .iter()
        .copied()
        .filter(|job| view.jobs.contains_key(job))
        .collect();
    if all {
        jobs.extend(super::plan::hand_back(&view).iter().map(|a| a.job_id));
    }
    if dry_run {
        outcomes.extend(jobs.into_iter().map(|job| {
            carry_out(
                scheduler,
                &saved.scheduler,
                handing_back(job),
                attempts,
                true,
            )
        }));
        return Ok(outcomes);
    }
    saved.handing_back = jobs.clone();
    saved.save()?;
    for job in jobs {
        let outcome = carry_out(
            scheduler,
            &saved.scheduler,
            handing_back(job),
            attempts,
            false,
        );
        if outcome.done {
            saved.handing_back.remove(&job);
            saved.save()?;
        }
        outcomes.push(outcome);
    }
    Ok(outcomes)
}

/// The action that gives `job` back to the scheduler's own order.
fn handing_back(job_id: u64) -> Action {
    Action {
        job_id,
        version: 0,
        target: Target::Job,
        change: Change::Standing(Standing::Own),
    }
}

/// Carry out `action` (show it, in a dry run), retrying a failure up to
/// `attempts` times in all.
fn carry_out<S: Scheduler>(
    scheduler: &mut S,
    memory: &S::Memory,
    action: Action,
    attempts: u32,
    dry_run: bool,
) -> Outcome {
    let mut outcome = Outcome {
        command: scheduler
            .describe(memory, &action)
            .unwrap_or_else(|e| format!("({e})")),
        action,
        done: false,
        error: None,
        attempts: 0,
        at_ms: unix_ms(),
    };
    if dry_run {
        return outcome;
    }
    let mut backoff = Duration::from_millis(100);
    while outcome.attempts < attempts.max(1) {
        outcome.attempts += 1;
        match scheduler.act(memory, &outcome.action) {
            Ok(()) => {
                outcome.done = true;
                outcome.error = None;
                break;
            }
            Err(e) => outcome.error = Some(e),
        }
        if outcome.attempts < attempts {
            std::thread::sleep(backoff);
            backoff *= 2;
        }
    }
    outcome.at_ms = unix_ms();
    outcome
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Tick every `options.interval` until `stop` is set, each tick's outcome
/// handed to `report`. Only opening fails; a tick that fails is reported
/// and the next one goes on.
pub fn apply<S: Scheduler>(
    kafka: &KafkaSettings,
    options: ApplyOptions,
    scheduler: S,
    stop: &AtomicBool,
    mut report: impl FnMut(Result<&Ticked, &ApplyError>),
) -> Result<(), ApplyError> {
    let interval = options.interval;
    let mut applier = Applier::open(kafka, options, scheduler)?;
    every(interval, stop, || match applier.tick() {
        Ok(ticked) => report(Ok(&ticked)),
        Err(e) => report(Err(&e)),
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use jobcast_predictor::decision::{Phase, PolicyKind};
    use rdkafka::mocking::MockCluster;
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

    use super::*;
    use crate::slurm::{Scope, Slurm};

    fn decision(job_id: u64, version: u32, queue: u8) -> Vec<u8> {
        serde_json::to_vec(&Decision::new(
            PolicyKind::SLearn,
            job_id,
            version,
            queue,
            Phase::Estimated,
        ))
        .unwrap()
    }

    fn publish(kafka: &KafkaSettings, payloads: &[Vec<u8>]) {
        let producer: BaseProducer = kafka.producer_config().create().unwrap();
        for payload in payloads {
            producer
                .send(BaseRecord::<(), Vec<u8>>::to("decisions").payload(payload))
                .map_err(|(e, _)| e)
                .unwrap();
        }
        producer.flush(Duration::from_secs(10)).unwrap();
    }

    /// The real `Slurm` scheduler, with `squeue` printing `snapshot` and
    /// an `scontrol` that always succeeds.
    fn slurm(snapshot: &str) -> Slurm {
        Slurm {
            squeue: vec!["echo".into(), snapshot.into()],
            scontrol: vec!["true".into()],
            base: 1000,
            levels: 10,
            scope: Scope::default(),
        }
    }

    fn options(state: &Path) -> ApplyOptions {
        ApplyOptions {
            topic: "decisions".into(),
            state: state.to_owned(),
            interval: Duration::from_millis(10),
            queues: QueueConfig::default(),
            dry_run: false,
            attempts: 1,
            walltime: None,
            read_timeout: Duration::from_secs(10),
            max_decision_age: None,
        }
    }

    /// Slurm holds job 5 pending at a priority of its own.
    const JOB_5_PENDING: &str =
        r#"{"jobs": [{"job_id": 5, "job_state": "PENDING", "submit_time": 1, "priority": 1}]}"#;

    /// A message of the decisions topic that is not a decision is named
    /// and skipped; the decision after it is carried out, and the next
    /// tick reads neither again.
    #[test]
    fn a_message_that_is_not_a_decision_is_named_and_the_rest_applied() {
        let mock = MockCluster::new(1).unwrap();
        mock.create_topic("decisions", 1, 1).unwrap();
        let kafka = KafkaSettings::new(mock.bootstrap_servers());
        publish(&kafka, &[b"not json".to_vec(), decision(5, 1, 0)]);
        let dir = tempfile::tempdir().unwrap();
        let options = options(&dir.path().join("state.json"));
        let mut applier = Applier::open(&kafka, options, slurm(JOB_5_PENDING)).unwrap();
        let ticked = applier.tick().unwrap();
        assert_eq!(ticked.unreadable.len(), 1, "{:?}", ticked.unreadable);
        assert!(
            ticked.unreadable[0].starts_with("decisions partition 0 offset 0: not a decision"),
            "{}",
            ticked.unreadable[0]
        );
        assert_eq!((ticked.newer, ticked.jobs), (1, 1));
        assert!(
            ticked
                .outcomes
                .iter()
                .any(|o| o.action.job_id == 5 && o.done),
            "{:?}",
            ticked.outcomes
        );
        let again = applier.tick().unwrap();
        assert!(again.unreadable.is_empty());
        assert_eq!(again.newer, 0);
    }

    /// Reads cut short by their timeout (1 ms: a part of 2,000 decisions
    /// each) lose nothing: what each read is offered before the offsets
    /// pass it, and a full read then finds every job decided.
    #[test]
    fn reads_cut_short_lose_no_decision() {
        let mock = MockCluster::new(1).unwrap();
        mock.create_topic("decisions", 2, 1).unwrap();
        let kafka = KafkaSettings::new(mock.bootstrap_servers());
        let jobs: Vec<u64> = (1..=2_000).collect();
        publish(
            &kafka,
            &jobs.iter().map(|&j| decision(j, 1, 0)).collect::<Vec<_>>(),
        );
        let pending: Vec<String> = jobs
            .iter()
            .map(|j| {
                format!(
                    r#"{{"job_id": {j}, "job_state": "PENDING", "submit_time": 1, "priority": 1}}"#
                )
            })
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let snapshot = dir.path().join("squeue.json");
        std::fs::write(
            &snapshot,
            format!(r#"{{"jobs": [{}]}}"#, pending.join(", ")),
        )
        .unwrap();
        let mut short = options(&dir.path().join("state.json"));
        short.read_timeout = Duration::from_millis(1);
        // Shown, not carried out: 2,000 `scontrol`s a tick would only slow
        // the test.
        short.dry_run = true;
        let squeue = Slurm {
            squeue: vec!["cat".into(), snapshot.display().to_string()],
            ..slurm("")
        };
        let mut applier = Applier::open(&kafka, short, squeue).unwrap();
        let mut cut_short = 0;
        for _ in 0..20 {
            match applier.tick() {
                Err(ApplyError::Read(ReadError::Timeout { .. })) => cut_short += 1,
                Err(e) => panic!("{e}"),
                Ok(_) => {}
            }
        }
        assert!(cut_short > 0, "no read was cut short");
        applier.options.read_timeout = Duration::from_secs(10);
        let ticked = applier.tick().unwrap();
        eprintln!("{cut_short} reads of 20 cut short");
        assert_eq!(ticked.jobs, jobs.len(), "every job's decision is held");
    }

    /// A hand-back whose release fails (as one killed between Slurm's hold
    /// and release would leave it) keeps the job recorded: the next
    /// hand-back releases it, though Slurm now lists it held, where no
    /// plan finds it; then nothing is left to do.
    #[test]
    fn a_hand_back_cut_short_is_finished_by_the_next() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("scontrol.log");
        let script = dir.path().join("scontrol");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\necho \"$@\" >> {log}\nif [ \"$1\" = release ] && [ ! -e {flag} ]; then touch {flag}; exit 1; fi\n",
                log = log.display(),
                flag = dir.path().join("failed-once").display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let snapshot = dir.path().join("squeue.json");
        let listed = |priority: u32| {
            std::fs::write(
                &snapshot,
                format!(
                    r#"{{"jobs": [{{"job_id": 5, "job_state": "PENDING", "submit_time": 1, "priority": {priority}}}]}}"#
                ),
            )
            .unwrap();
        };
        let mut slurm = Slurm {
            squeue: vec!["cat".into(), snapshot.display().to_string()],
            scontrol: vec![script.display().to_string()],
            base: 1000,
            levels: 10,
            scope: Scope::default(),
        };
        let state = dir.path().join("state.json");
        // Job 5 stands where jobcast put it (the first queue's rank).
        listed(1010);
        let first = hand_back(&mut slurm, &state, 1, false).unwrap();
        assert_eq!(first.len(), 1);
        assert!(!first[0].done, "{first:?}");
        // Slurm holds it now: priority 0, no standing of jobcast's.
        listed(0);
        let second = hand_back(&mut slurm, &state, 1, false).unwrap();
        assert_eq!(second.len(), 1, "the recorded job is handed back again");
        assert!(second[0].done, "{second:?}");
        let calls = std::fs::read_to_string(&log).unwrap();
        assert_eq!(calls, "hold 5\nrelease 5\nhold 5\nrelease 5\n");
        listed(1);
        assert!(hand_back(&mut slurm, &state, 1, false).unwrap().is_empty());
    }

    /// A walltime lowers a pending job's limit (30 min) after the applier
    /// has recorded it in its state; a hand-back puts it back, before it
    /// hands the job back, and forgets it once done. Unlimited jobs get
    /// `UNLIMITED` back.
    #[test]
    fn a_hand_back_puts_back_the_limits_the_applier_lowered() {
        use std::os::unix::fs::PermissionsExt;

        use jobcast_predictor::decision::{Estimate, EstimateSource, Quantiles};
        let mock = MockCluster::new(1).unwrap();
        mock.create_topic("decisions", 1, 1).unwrap();
        let kafka = KafkaSettings::new(mock.bootstrap_servers());
        // Mean task runtime 60 s, its P99 90 s: a limit of 2 minutes.
        let mut estimate = Estimate::new(60e6, 60e6, 0.0, EstimateSource::Pilots { pilots: 2 });
        estimate.set_quantiles(Quantiles::from_array([1.0, 1.2, 1.3, 1.5]));
        let placed = |job_id: u64| {
            serde_json::to_vec(&Decision {
                estimate: Some(estimate),
                ..Decision::new(PolicyKind::SLearn, job_id, 2, 1, Phase::Estimated)
            })
            .unwrap()
        };
        publish(&kafka, &[placed(5), placed(6)]);
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("scontrol.log");
        let script = dir.path().join("scontrol");
        std::fs::write(
            &script,
            format!("#!/bin/sh\necho \"$@\" >> {}\n", log.display()),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let snapshot = dir.path().join("squeue.json");
        let listed = |limits: (&str, &str), priority: u32| {
            let job = |id: u64, limit: &str| {
                format!(
                    r#"{{"job_id": {id}, "job_state": "PENDING", "submit_time": 1, "priority": {priority}{limit}}}"#
                )
            };
            std::fs::write(
                &snapshot,
                format!(
                    r#"{{"jobs": [{}, {}]}}"#,
                    job(5, limits.0),
                    job(6, limits.1)
                ),
            )
            .unwrap();
        };
        let slurm = || Slurm {
            squeue: vec!["cat".into(), snapshot.display().to_string()],
            scontrol: vec![script.display().to_string()],
            base: 1000,
            levels: 10,
            scope: Scope::default(),
        };
        // Job 5 has 30 minutes, job 6 no limit.
        listed((r#", "time_limit": 30"#, ""), 1);
        let state = dir.path().join("state.json");
        let mut options = options(&state);
        options.walltime = Some(Walltime {
            quantile: 3,
            margin: 1.0,
            min_s: 60,
            step_s: 60,
        });
        let mut applier = Applier::open(&kafka, options, slurm()).unwrap();
        applier.tick().unwrap();
        drop(applier);
        let calls = std::fs::read_to_string(&log).unwrap();
        assert!(
            calls.contains("update JobId=5 TimeLimit=2\n")
                && calls.contains("update JobId=6 TimeLimit=2\n"),
            "{calls}"
        );
        let saved: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&state).unwrap()).unwrap();
        assert_eq!(saved["limits"], serde_json::json!({"5": 1800, "6": null}));

        // Slurm now shows the lowered limits, and the standings set.
        listed((r#", "time_limit": 2"#, r#", "time_limit": 2"#), 1009);
        std::fs::remove_file(&log).unwrap();
        let handed = hand_back(&mut slurm(), &state, 1, false).unwrap();
        assert!(handed.iter().all(|o| o.done), "{handed:?}");
        let calls = std::fs::read_to_string(&log).unwrap();
        assert_eq!(
            calls,
            "update JobId=5 TimeLimit=30\nupdate JobId=6 TimeLimit=UNLIMITED\n\
             hold 5\nrelease 5\nhold 6\nrelease 6\n"
        );
        let saved: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&state).unwrap()).unwrap();
        assert_eq!(saved["limits"], serde_json::json!({}));
    }

    /// Decisions published longer ago than the age set are not acted on;
    /// the fresh one is. Jobs beyond the scope (another partition) are
    /// neither moved nor kept.
    #[test]
    fn decisions_too_old_and_jobs_beyond_the_scope_are_left_alone() {
        let mock = MockCluster::new(1).unwrap();
        mock.create_topic("decisions", 1, 1).unwrap();
        let kafka = KafkaSettings::new(mock.bootstrap_servers());
        let producer: BaseProducer = kafka.producer_config().create().unwrap();
        let hour_ago = unix_ms() as i64 - 3_600_000;
        for (job, at) in [(5u64, Some(hour_ago)), (6, None), (7, None)] {
            let payload = decision(job, 1, 0);
            let mut record = BaseRecord::<(), Vec<u8>>::to("decisions").payload(&payload);
            if let Some(at) = at {
                record = record.timestamp(at);
            }
            producer.send(record).map_err(|(e, _)| e).unwrap();
        }
        producer.flush(Duration::from_secs(10)).unwrap();
        let pending = |job: u64, partition: &str| {
            format!(
                r#"{{"job_id": {job}, "job_state": "PENDING", "submit_time": 1, "priority": 1, "partition": "{partition}"}}"#
            )
        };
        let snapshot = format!(
            r#"{{"jobs": [{}, {}, {}]}}"#,
            pending(5, "batch"),
            pending(6, "batch"),
            pending(7, "debug")
        );
        let dir = tempfile::tempdir().unwrap();
        let mut options = options(&dir.path().join("state.json"));
        options.max_decision_age = Some(Duration::from_secs(600));
        let scoped = Slurm {
            scope: Scope {
                partitions: ["batch".to_owned()].into(),
                accounts: BTreeSet::new(),
            },
            ..slurm(&snapshot)
        };
        let mut applier = Applier::open(&kafka, options, scoped).unwrap();
        let ticked = applier.tick().unwrap();
        assert_eq!((ticked.too_old, ticked.newer), (1, 2), "{ticked:?}");
        let moved: BTreeSet<u64> = ticked
            .outcomes
            .iter()
            .filter(|o| o.action.version > 0)
            .map(|o| o.action.job_id)
            .collect();
        assert_eq!(moved, [6].into(), "{:?}", ticked.outcomes);
        assert_eq!(ticked.jobs, 1, "job 7 is beyond the scope");
    }

    /// Restarted from its state, the applier drops an older decision
    /// delivered again (as a producer's retry or a rewound topic would) and
    /// carries out only the newer one it had; while Slurm's record of the
    /// job cannot be read, it keeps the decision and does nothing to the
    /// job.
    #[test]
    fn a_restarted_applier_carries_out_nothing_older_and_keeps_an_unreadable_jobs_decision() {
        let mock = MockCluster::new(1).unwrap();
        mock.create_topic("decisions", 1, 1).unwrap();
        let kafka = KafkaSettings::new(mock.bootstrap_servers());
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state.json");
        publish(&kafka, &[decision(5, 2, 0)]);
        let mut applier = Applier::open(&kafka, options(&state), slurm(JOB_5_PENDING)).unwrap();
        let ticked = applier.tick().unwrap();
        let done: Vec<(u64, u32)> = ticked
            .outcomes
            .iter()
            .filter(|o| o.done)
            .map(|o| (o.action.job_id, o.action.version))
            .collect();
        assert_eq!(done, [(5, 2)], "{:?}", ticked.outcomes);
        drop(applier);

        publish(&kafka, &[decision(5, 1, 3)]);
        // Slurm still shows job 5 where it was (`echo` prints the same):
        // the restarted applier sets it again, by version 2.
        let mut applier = Applier::open(&kafka, options(&state), slurm(JOB_5_PENDING)).unwrap();
        let ticked = applier.tick().unwrap();
        assert_eq!((ticked.newer, ticked.stale, ticked.jobs), (0, 1, 1));
        assert!(
            ticked.outcomes.iter().all(|o| o.action.version == 2),
            "{:?}",
            ticked.outcomes
        );

        applier.scheduler = slurm(r#"{"jobs": [{"job_id": 5, "job_state": 7}]}"#);
        let ticked = applier.tick().unwrap();
        assert_eq!(ticked.jobs, 1, "the decision is kept");
        assert!(ticked.outcomes.is_empty(), "{:?}", ticked.outcomes);
        applier.scheduler = slurm(r#"{"jobs": []}"#);
        assert_eq!(applier.tick().unwrap().jobs, 0, "a job gone is forgotten");
    }
}
