//! Megha's simulation: one event loop over the GMs, the LMs, the workers
//! and the sampler's reservations ([`super`] says what each does).

use std::cmp::Ordering;
use std::collections::{BTreeSet, BinaryHeap, VecDeque};

use jobcast_predictor::features::JobFeatures;
use jobcast_predictor::history::{Estimator, History};
use jobcast_predictor::stats::percentile;
use rand::SeedableRng;
use rand::seq::index::sample;
use rand_chacha::ChaCha8Rng;

use super::{MeghaConfig, MeghaRun, QueueAttainment, Scheduler, UserQueue};
use crate::workload::SimJob;

/// A task: its job's index in the run and its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct TaskRef {
    job: u32,
    task: u32,
}

#[derive(Debug, Clone, Copy)]
enum Ev {
    Arrive(u32),
    GmTurn(u32),
    AtLm(Request),
    LmDecide(Request),
    Answer {
        gm: u32,
        lm: u32,
        task: TaskRef,
        ok: bool,
    },
    Heartbeat(u32),
    Start {
        task: TaskRef,
        worker: u32,
    },
    End {
        task: TaskRef,
        worker: u32,
        attempt: u32,
    },
    Probe {
        job: u32,
        worker: u32,
    },
    TaskReply {
        job: u32,
        worker: u32,
    },
}

/// A GM's request to an LM: launch `task` on `worker`, after preempting
/// tasks of queue `preempt` there if it names one.
#[derive(Debug, Clone, Copy)]
struct Request {
    gm: u32,
    task: TaskRef,
    worker: u32,
    external: bool,
    preempt: Option<u32>,
}

struct Scheduled {
    at: u64,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scheduled {
    /// The earliest first, from a max-heap.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// Free resources of every worker.
#[derive(Debug, Clone)]
struct Room {
    cores: Vec<f64>,
    memory: Vec<f64>,
}

impl Room {
    fn fits(&self, w: usize, need: (f64, f64)) -> bool {
        self.cores[w] >= need.0 - 1e-9 && self.memory[w] >= need.1 - 1e-9
    }

    fn take(&mut self, w: usize, need: (f64, f64)) {
        self.cores[w] -= need.0;
        self.memory[w] -= need.1;
    }

    fn give(&mut self, w: usize, need: (f64, f64)) {
        self.cores[w] += need.0;
        self.memory[w] += need.1;
    }

    fn copy_range(&mut self, from: &Room, range: std::ops::Range<usize>) {
        self.cores[range.clone()].copy_from_slice(&from.cores[range.clone()]);
        self.memory[range.clone()].copy_from_slice(&from.memory[range]);
    }
}

/// A Global Master: the user queues it serves (in turn), the tasks
/// waiting for its view to change, and its view.
struct Gm {
    queues: Vec<usize>,
    next_queue: usize,
    waiting: Vec<(usize, Entry)>,
    view: Room,
    busy_until: u64,
    turn_pending: bool,
    next_internal: usize,
    next_external: usize,
}

/// A queued task: its key (0, or jobcast's estimate of its job's work),
/// its order of arrival (0 for a task taken again first), the task.
type Entry = (u64, u64, TaskRef);

/// A user queue's tasks, in order of key, and what it holds and got.
struct Queue {
    spec: UserQueue,
    tasks: BTreeSet<Entry>,
    used_cores: f64,
    /// Tasks arrived and not started.
    pending: u64,
    waited_us: u64,
    attained_us: f64,
    started: u64,
    preempted: u64,
}

struct JobState {
    arrival_us: u64,
    need: (f64, f64),
    /// Queue key under jobcast (estimated work), else 0.
    key: u64,
    estimated_task_us: f64,
    home_lm: usize,
    launched: u32,
    ended: u32,
    end_us: u64,
    queue: usize,
    /// Per task: times it was preempted.
    attempts: Vec<u32>,
    /// When its tasks running now started.
    running_starts: Vec<u64>,
}

/// A Sparrow worker's reservations, and whether it is asking for a task.
#[derive(Default)]
struct SamplingWorker {
    reservations: VecDeque<u32>,
    asking: bool,
}

pub(super) struct Sim<'a> {
    jobs: &'a [SimJob],
    config: MeghaConfig,
    scheduler: Scheduler,
    history: History,
    rng: ChaCha8Rng,
    events: BinaryHeap<Scheduled>,
    seq: u64,
    now: u64,
    real: Room,
    gms: Vec<Gm>,
    lm_busy_until: Vec<u64>,
    /// jobcast's estimated work running on each cluster, µs.
    lm_estimated_work_us: Vec<f64>,
    state: Vec<JobState>,
    queues: Vec<Queue>,
    fairness: bool,
    /// Per worker: the tasks running there, with their start, in order
    /// of start.
    running: Vec<Vec<(TaskRef, u64)>>,
    last_event_us: u64,
    tasks_ended: usize,
    preemption_attempts: u64,
    preemptions: u64,
    /// Work lost to preemption: the preempted attempts' time run, µs.
    preempted_work_us: u64,
    sampling: Vec<SamplingWorker>,
    allocation_us: Vec<u64>,
    inconsistencies: u64,
    repartitions: u64,
    requeues: u64,
}

impl<'a> Sim<'a> {
    pub(super) fn new(
        jobs: &'a [SimJob],
        config: &MeghaConfig,
        scheduler: Scheduler,
        history: History,
    ) -> Sim<'a> {
        let n = config.workers as usize;
        let real = Room {
            cores: vec![config.worker_cores; n],
            memory: vec![config.worker_memory_gb; n],
        };
        let fairness = !config.queues.is_empty();
        let specs: Vec<UserQueue> = if fairness {
            config.queues.clone()
        } else {
            (0..config.gms)
                .map(|gm| UserQueue {
                    share: 1.0 / f64::from(config.gms),
                    gm,
                })
                .collect()
        };
        let gms = (0..config.gms)
            .map(|g| Gm {
                queues: (0..specs.len()).filter(|&q| specs[q].gm == g).collect(),
                next_queue: 0,
                waiting: Vec::new(),
                view: real.clone(),
                busy_until: 0,
                turn_pending: false,
                next_internal: 0,
                next_external: 0,
            })
            .collect();
        let queues: Vec<Queue> = specs
            .iter()
            .map(|&spec| Queue {
                spec,
                tasks: BTreeSet::new(),
                used_cores: 0.0,
                pending: 0,
                waited_us: 0,
                attained_us: 0.0,
                started: 0,
                preempted: 0,
            })
            .collect();
        let state = jobs
            .iter()
            .enumerate()
            .map(|(i, j)| {
                let job = j.job();
                // A user's queue by a hash of the name; without queues,
                // the GMs in turn.
                let queue = if fairness {
                    (jobcast_ingest::ids::stable_id(job.user.as_bytes()) % queues.len() as u64)
                        as usize
                } else {
                    i % queues.len()
                };
                let need = (
                    (job.cpu_request * config.request_cores).clamp(0.01, config.worker_cores),
                    (job.mem_request * config.request_memory_gb)
                        .clamp(0.0, config.worker_memory_gb),
                );
                JobState {
                    arrival_us: job.time_us,
                    need,
                    key: 0,
                    estimated_task_us: 0.0,
                    home_lm: 0,
                    launched: 0,
                    ended: 0,
                    end_us: 0,
                    queue,
                    attempts: vec![0; j.runtimes_us().len()],
                    running_starts: Vec::new(),
                }
            })
            .collect();
        let mut sim = Sim {
            jobs,
            config: config.clone(),
            scheduler,
            history,
            rng: ChaCha8Rng::seed_from_u64(config.seed),
            events: BinaryHeap::new(),
            seq: 0,
            now: 0,
            real,
            gms,
            lm_busy_until: vec![0; config.lms as usize],
            lm_estimated_work_us: vec![0.0; config.lms as usize],
            state,
            queues,
            fairness,
            running: vec![Vec::new(); n],
            last_event_us: 0,
            tasks_ended: 0,
            preemption_attempts: 0,
            preemptions: 0,
            preempted_work_us: 0,
            sampling: (0..n).map(|_| SamplingWorker::default()).collect(),
            allocation_us: Vec::new(),
            inconsistencies: 0,
            repartitions: 0,
            requeues: 0,
        };
        for (i, j) in jobs.iter().enumerate() {
            sim.at(j.job().time_us, Ev::Arrive(i as u32));
        }
        if scheduler != Scheduler::Sampling {
            let first = jobs.iter().map(|j| j.job().time_us).min().unwrap_or(0);
            // Heartbeats spread over the period, one cluster after another.
            for lm in 0..config.lms {
                let offset = config.heartbeat_us * u64::from(lm) / u64::from(config.lms);
                sim.at(first + offset, Ev::Heartbeat(lm));
            }
        }
        sim
    }

    fn at(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        self.events.push(Scheduled {
            at,
            seq: self.seq,
            ev,
        });
    }

    fn per_lm(&self) -> usize {
        self.config.workers as usize / self.config.lms as usize
    }

    /// The workers of cluster `lm`'s partition of GM `gm`.
    fn partition(&self, lm: usize, gm: usize) -> std::ops::Range<usize> {
        let per_lm = self.per_lm();
        let per_part = per_lm / self.config.gms as usize;
        let start = lm * per_lm + gm * per_part;
        let end = if gm + 1 == self.config.gms as usize {
            (lm + 1) * per_lm
        } else {
            start + per_part
        };
        start..end
    }

    fn lm_of(&self, worker: usize) -> usize {
        (worker / self.per_lm()).min(self.config.lms as usize - 1)
    }

    fn lm_range(&self, lm: usize) -> std::ops::Range<usize> {
        let per_lm = self.per_lm();
        let end = if lm + 1 == self.config.lms as usize {
            self.config.workers as usize
        } else {
            (lm + 1) * per_lm
        };
        lm * per_lm..end
    }

    pub(super) fn run(&mut self) {
        let total: usize = self.jobs.iter().map(|j| j.runtimes_us().len()).sum();
        while let Some(Scheduled { at, ev, .. }) = self.events.pop() {
            self.advance(at);
            match ev {
                Ev::Arrive(job) => self.arrive(job),
                Ev::GmTurn(gm) => self.gm_turn(gm as usize),
                Ev::AtLm(request) => {
                    let lm = self.lm_of(request.worker as usize);
                    let done = self.lm_busy_until[lm].max(at) + self.config.lm_request_us;
                    self.lm_busy_until[lm] = done;
                    self.at(done, Ev::LmDecide(request));
                }
                Ev::LmDecide(request) => self.lm_decide(request),
                Ev::Answer { gm, lm, task, ok } => self.answer(gm as usize, lm as usize, task, ok),
                Ev::Heartbeat(lm) => {
                    for gm in 0..self.gms.len() {
                        self.refresh(gm, lm as usize);
                    }
                    if self.tasks_ended < total {
                        self.at(at + self.config.heartbeat_us, Ev::Heartbeat(lm));
                    }
                }
                Ev::Start { task, worker } => self.start(task, worker),
                Ev::End {
                    task,
                    worker,
                    attempt,
                } => self.end(task, worker, attempt),
                Ev::Probe { job, worker } => {
                    self.sampling[worker as usize].reservations.push_back(job);
                    self.serve_reservations(worker as usize);
                }
                Ev::TaskReply { job, worker } => self.task_reply(job, worker),
            }
        }
    }

    /// Event time moves to `at`: each queue with tasks waiting adds what
    /// it got meanwhile.
    fn advance(&mut self, at: u64) {
        let dt = at.saturating_sub(self.last_event_us);
        if dt > 0 {
            let total = f64::from(self.config.workers) * self.config.worker_cores;
            for q in &mut self.queues {
                if q.pending > 0 {
                    q.waited_us += dt;
                    q.attained_us += dt as f64 * (q.used_cores / (q.spec.share * total)).min(1.0);
                }
            }
        }
        self.last_event_us = at;
        self.now = at;
    }

    fn arrive(&mut self, job: u32) {
        let j = job as usize;
        let width = self.jobs[j].runtimes_us().len() as u32;
        let q = self.state[j].queue;
        self.queues[q].pending += u64::from(width);
        if self.scheduler == Scheduler::Sampling {
            // `probes` reservations a task on distinct workers; a job with
            // more than there are workers gets every worker more than once.
            let n = self.config.workers as usize;
            let probes = (self.config.probes * width) as usize;
            let delay = self.config.network_us;
            let mut workers: Vec<usize> = (0..probes / n).flat_map(|_| 0..n).collect();
            workers.extend(sample(&mut self.rng, n, probes % n));
            for w in workers {
                self.at(
                    self.now + delay,
                    Ev::Probe {
                        job,
                        worker: w as u32,
                    },
                );
            }
            return;
        }
        if self.scheduler == Scheduler::MeghaJobcast {
            let estimate = self.history.estimate(
                &JobFeatures::of(self.jobs[j].job()),
                self.now,
                Estimator::Utility,
            );
            let task_us = estimate.mean_task_runtime_us.max(1.0);
            let lms = self.config.lms as usize;
            // The clusters are of one size: least work is earliest done.
            let home = (0..lms)
                .min_by(|&a, &b| {
                    self.lm_estimated_work_us[a]
                        .total_cmp(&self.lm_estimated_work_us[b])
                        .then(a.cmp(&b))
                })
                .unwrap_or(0);
            let s = &mut self.state[j];
            s.estimated_task_us = task_us;
            s.key = (task_us * f64::from(width)).min(u64::MAX as f64 / 2.0) as u64;
            s.home_lm = home;
        }
        // The tasks join the user's queue at its GM, after a message's
        // delay.
        let key = self.state[j].key;
        for task in 0..width {
            self.seq += 1;
            self.queues[q]
                .tasks
                .insert((key, self.seq, TaskRef { job, task }));
        }
        let gm = self.queues[q].spec.gm as usize;
        self.wake(gm, self.now + self.config.network_us);
    }

    /// Have GM `gm` take its next task no earlier than `at`.
    fn wake(&mut self, gm: usize, at: u64) {
        let has_tasks = self.gms[gm]
            .queues
            .iter()
            .any(|&q| !self.queues[q].tasks.is_empty());
        if !self.gms[gm].turn_pending && has_tasks {
            self.gms[gm].turn_pending = true;
            let at = at.max(self.gms[gm].busy_until);
            self.at(at, Ev::GmTurn(gm as u32));
        }
    }

    fn gm_turn(&mut self, g: usize) {
        self.gms[g].turn_pending = false;
        if self.gms[g].busy_until > self.now {
            let at = self.gms[g].busy_until;
            self.gms[g].turn_pending = true;
            self.at(at, Ev::GmTurn(g as u32));
            return;
        }
        // The GM's queues in turn: the next one holding a task.
        let served = self.gms[g].queues.len();
        let Some(q) = (0..served)
            .map(|k| self.gms[g].queues[(self.gms[g].next_queue + k) % served])
            .find(|&q| !self.queues[q].tasks.is_empty())
        else {
            return;
        };
        let at = self.gms[g].queues.iter().position(|&x| x == q).unwrap_or(0);
        self.gms[g].next_queue = (at + 1) % served;
        let entry = self.queues[q].tasks.pop_first().expect("not empty");
        let task = entry.2;
        let need = self.state[task.job as usize].need;
        let (mut found, mut scanned) = self.find(g, task);
        let mut preempt = None;
        if found.is_none() && self.fairness {
            let (victim, looked) = self.victim(g, q, need);
            scanned += looked;
            if let Some((worker, v)) = victim {
                found = Some((worker, false));
                preempt = Some(v as u32);
                self.preemption_attempts += 1;
            }
        }
        let cost = self.config.gm_request_us + scanned as u64 * self.config.scan_ns / 1_000;
        let done = self.now + cost;
        self.gms[g].busy_until = done;
        match found {
            Some((worker, external)) => {
                if preempt.is_none() {
                    self.gms[g].view.take(worker, need);
                }
                self.at(
                    done + self.config.network_us,
                    Ev::AtLm(Request {
                        gm: g as u32,
                        task,
                        worker: worker as u32,
                        external,
                        preempt,
                    }),
                );
            }
            None => {
                self.requeues += 1;
                self.gms[g].waiting.push((q, entry));
            }
        }
        self.wake(g, done);
    }

    /// Fairness: for a task of queue `q` that found no room, the worker
    /// where preempting the queue furthest over its share frees enough,
    /// if `q` is under its share (Megha: the first found; jobcast: the one
    /// of least [`Sim::preemption_cost`], fewest jobs delayed first); and
    /// how many workers were examined.
    fn victim(&self, g: usize, q: usize, need: (f64, f64)) -> (Option<(usize, usize)>, usize) {
        let total = f64::from(self.config.workers) * self.config.worker_cores;
        let over = |v: usize| self.queues[v].used_cores - self.queues[v].spec.share * total;
        if over(q) >= 0.0 {
            return (None, 0);
        }
        // A victim keeps at least its share: preempting one below it
        // would have it preempt back.
        let Some(v) = (0..self.queues.len())
            .filter(|&v| v != q && over(v) >= need.0)
            .max_by(|&a, &b| over(a).total_cmp(&over(b)))
        else {
            return (None, 0);
        };
        let view = &self.gms[g].view;
        let jobcast = self.scheduler == Scheduler::MeghaJobcast;
        let mut best: Option<((u32, f64), usize)> = None;
        let mut scanned = 0;
        for w in 0..self.running.len() {
            scanned += 1;
            let (mut cores, mut memory) = (view.cores[w], view.memory[w]);
            let fits = |c: f64, m: f64| c >= need.0 - 1e-9 && m >= need.1 - 1e-9;
            let mut cost = (0, 0.0);
            let mut stopped = false;
            for (t, started) in self.stopping_order(w, v) {
                if fits(cores, memory) {
                    break;
                }
                let n = self.state[t.job as usize].need;
                cores += n.0;
                memory += n.1;
                stopped = true;
                if jobcast {
                    let (delayed, us) = self.preemption_cost(t, started);
                    cost = (cost.0 + delayed, cost.1 + us);
                }
            }
            if !stopped || !fits(cores, memory) {
                continue;
            }
            if !jobcast {
                return (Some((w, v)), scanned);
            }
            if best.is_none_or(|(least, _)| {
                cost.0 < least.0 || (cost.0 == least.0 && cost.1 < least.1)
            }) {
                best = Some((cost, w));
            }
        }
        (best.map(|(_, w)| (w, v)), scanned)
    }

    /// The tasks of queue `v` on worker `w`, in the order they are
    /// preempted (Megha's GM names them, the LM checks): the latest
    /// started first; under jobcast, those whose jobs it delays least
    /// first ([`Sim::preemption_cost`]).
    fn stopping_order(&self, w: usize, v: usize) -> Vec<(TaskRef, u64)> {
        let tasks: Vec<(TaskRef, u64)> = self.running[w]
            .iter()
            .rev()
            .filter(|(t, _)| self.state[t.job as usize].queue == v)
            .copied()
            .collect();
        if self.scheduler == Scheduler::MeghaJobcast {
            let mut costed: Vec<((u32, f64), (TaskRef, u64))> = tasks
                .into_iter()
                .map(|t| (self.preemption_cost(t.0, t.1), t))
                .collect();
            // Stable: among equal costs, the latest started first still.
            costed.sort_by(|(a, _), (b, _)| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
            return costed.into_iter().map(|(_, t)| t).collect();
        }
        tasks
    }

    /// jobcast's cost of preempting `task`, which started at `started`:
    /// whether its job is predicted to end later for it (1 or 0), and by
    /// how much plus the work the task loses, µs. The task starts again
    /// no sooner than now and runs its estimated runtime; a job with tasks
    /// still queued, or another running that ends after that, ends no
    /// sooner anyway. A delayed job waits as well for its task to come
    /// back from a queue that is over its share, which is why it counts
    /// first.
    fn preemption_cost(&self, task: TaskRef, started: u64) -> (u32, f64) {
        let j = task.job as usize;
        let s = &self.state[j];
        let now = self.now as f64;
        let lost = now - started as f64;
        let width = self.jobs[j].runtimes_us().len();
        let queued = width - s.ended as usize - s.running_starts.len();
        if queued > 0 {
            return (0, lost);
        }
        let est = s.estimated_task_us;
        // The job's other tasks running: skip this one's start once.
        let mut own = Some(started);
        let others_end = s
            .running_starts
            .iter()
            .filter(|&&at| {
                if own == Some(at) {
                    own = None;
                    false
                } else {
                    true
                }
            })
            .map(|&at| at as f64 + est)
            .fold(f64::NEG_INFINITY, f64::max);
        let before = (started as f64 + est).max(others_end);
        let after = (now + est).max(others_end);
        let delay = after - before;
        (u32::from(delay > 0.0), delay + lost)
    }

    /// First fit for `task` on GM `g`'s view: internal partitions
    /// round-robin over the clusters (under jobcast, from the job's
    /// cluster), then external ones; the worker, whether it is external,
    /// and how many workers were examined.
    fn find(&mut self, g: usize, task: TaskRef) -> (Option<(usize, bool)>, usize) {
        let lms = self.config.lms as usize;
        let gms = self.config.gms as usize;
        let s = &self.state[task.job as usize];
        let need = s.need;
        let first_lm = match self.scheduler {
            Scheduler::MeghaJobcast => s.home_lm,
            _ => self.gms[g].next_internal,
        };
        let mut scanned = 0;
        for k in 0..lms {
            let lm = (first_lm + k) % lms;
            for w in self.partition(lm, g) {
                scanned += 1;
                if self.gms[g].view.fits(w, need) {
                    self.gms[g].next_internal = (lm + 1) % lms;
                    return (Some((w, false)), scanned);
                }
            }
        }
        let first_lm = match self.scheduler {
            Scheduler::MeghaJobcast => s.home_lm,
            _ => self.gms[g].next_external,
        };
        for k in 0..lms {
            let lm = (first_lm + k) % lms;
            for other in (0..gms).filter(|&o| o != g) {
                for w in self.partition(lm, other) {
                    scanned += 1;
                    if self.gms[g].view.fits(w, need) {
                        self.gms[g].next_external = (lm + 1) % lms;
                        return (Some((w, true)), scanned);
                    }
                }
            }
        }
        (None, scanned)
    }

    fn lm_decide(&mut self, r: Request) {
        let w = r.worker as usize;
        let need = self.state[r.task.job as usize].need;
        if let Some(victim) = r.preempt {
            self.preempt_for(victim as usize, w, need);
        }
        let ok = self.real.fits(w, need);
        if ok {
            self.real.take(w, need);
            if r.external {
                self.repartitions += 1;
            }
            self.at(
                self.now + self.config.network_us,
                Ev::Start {
                    task: r.task,
                    worker: r.worker,
                },
            );
        } else {
            self.inconsistencies += 1;
        }
        let lm = self.lm_of(w) as u32;
        self.at(
            self.now + self.config.network_us,
            Ev::Answer {
                gm: r.gm,
                lm,
                task: r.task,
                ok,
            },
        );
    }

    /// The LM preempts tasks of queue `victim` on worker `w`, in
    /// [`Sim::stopping_order`], until `need` fits, if the queue is still
    /// over its share and that frees enough; a preempted task goes back to
    /// the front of its queue.
    fn preempt_for(&mut self, victim: usize, w: usize, need: (f64, f64)) {
        let total = f64::from(self.config.workers) * self.config.worker_cores;
        let queue = &self.queues[victim];
        if queue.used_cores - need.0 < queue.spec.share * total {
            return;
        }
        let of_victim = self.stopping_order(w, victim);
        let freed = of_victim.iter().fold(
            (self.real.cores[w], self.real.memory[w]),
            |(c, m), (t, _)| {
                let n = self.state[t.job as usize].need;
                (c + n.0, m + n.1)
            },
        );
        if freed.0 < need.0 - 1e-9 || freed.1 < need.1 - 1e-9 {
            return;
        }
        for (task, started) in of_victim {
            if self.real.fits(w, need) {
                break;
            }
            self.stop(task, w);
            self.preempted_work_us += self.now.saturating_sub(started);
            let j = task.job as usize;
            self.state[j].attempts[task.task as usize] += 1;
            let q = self.state[j].queue;
            let key = self.state[j].key;
            self.queues[q].tasks.insert((key, 0, task));
            self.queues[q].pending += 1;
            self.queues[q].preempted += 1;
            self.preemptions += 1;
            let gm = self.queues[q].spec.gm as usize;
            self.wake(gm, self.now + self.config.network_us);
        }
    }

    /// `task` leaves worker `w`: its room and its queue's use given back.
    fn stop(&mut self, task: TaskRef, w: usize) {
        let j = task.job as usize;
        let need = self.state[j].need;
        self.real.give(w, need);
        if let Some(at) = self.running[w].iter().position(|(t, _)| *t == task) {
            let (_, started) = self.running[w].remove(at);
            let starts = &mut self.state[j].running_starts;
            if let Some(k) = starts.iter().position(|&s| s == started) {
                starts.swap_remove(k);
            }
        }
        let q = self.state[j].queue;
        self.queues[q].used_cores = (self.queues[q].used_cores - need.0).max(0.0);
        if self.scheduler == Scheduler::MeghaJobcast {
            let lm = self.lm_of(w);
            let est = self.state[j].estimated_task_us;
            self.lm_estimated_work_us[lm] = (self.lm_estimated_work_us[lm] - est).max(0.0);
        }
    }

    /// An LM's answer: its state refreshes the GM's view. A refused
    /// launch or preemption is taken again first, on that state: the GM
    /// looks for other room, or other tasks to preempt (§IV-C: "the GM
    /// finds other eligible tasks for preemption and repeats the
    /// process").
    fn answer(&mut self, g: usize, lm: usize, task: TaskRef, ok: bool) {
        if !ok {
            let j = task.job as usize;
            let q = self.state[j].queue;
            let key = self.state[j].key;
            self.queues[q].tasks.insert((key, 0, task));
        }
        self.refresh(g, lm);
    }

    /// Fold cluster `lm`'s true state into GM `g`'s view; the tasks that
    /// waited for a change go back to its queue.
    fn refresh(&mut self, g: usize, lm: usize) {
        let range = self.lm_range(lm);
        let cost = range.len() as u64 * self.config.scan_ns / 1_000;
        let real = &self.real;
        let gm = &mut self.gms[g];
        gm.view.copy_range(real, range);
        gm.busy_until = gm.busy_until.max(self.now) + cost;
        let waiting = std::mem::take(&mut gm.waiting);
        for (q, entry) in waiting {
            self.queues[q].tasks.insert(entry);
        }
        self.wake(g, self.now);
    }

    /// `task` starts on `worker` (its room already taken): its
    /// allocation time counts at its first start.
    fn start(&mut self, task: TaskRef, worker: u32) {
        let j = task.job as usize;
        let w = worker as usize;
        let runtime = self.jobs[j].runtimes_us()[task.task as usize];
        let attempt = self.state[j].attempts[task.task as usize];
        if attempt == 0 {
            self.allocation_us
                .push(self.now.saturating_sub(self.state[j].arrival_us));
        }
        self.state[j].launched += 1;
        let q = self.state[j].queue;
        self.queues[q].used_cores += self.state[j].need.0;
        self.queues[q].pending = self.queues[q].pending.saturating_sub(1);
        self.queues[q].started += 1;
        self.running[w].push((task, self.now));
        self.state[j].running_starts.push(self.now);
        if self.scheduler == Scheduler::MeghaJobcast {
            let lm = self.lm_of(w);
            self.lm_estimated_work_us[lm] += self.state[j].estimated_task_us;
        }
        self.at(
            self.now + runtime,
            Ev::End {
                task,
                worker,
                attempt,
            },
        );
    }

    /// `task` ends on `worker`, unless it was preempted since it started
    /// (that attempt's end is void).
    fn end(&mut self, task: TaskRef, worker: u32, attempt: u32) {
        let j = task.job as usize;
        if self.state[j].attempts[task.task as usize] != attempt {
            return;
        }
        let w = worker as usize;
        self.stop(task, w);
        self.tasks_ended += 1;
        let s = &mut self.state[j];
        s.ended += 1;
        if s.ended as usize == self.jobs[j].runtimes_us().len() {
            s.end_us = self.now;
            if self.scheduler == Scheduler::MeghaJobcast {
                self.jobs[j].observe_into(&mut self.history, self.now);
            }
        }
        if self.scheduler == Scheduler::Sampling {
            self.serve_reservations(w);
        }
    }

    /// A Sparrow worker asks the head reservation's scheduler for a task
    /// once that job's task fits (one request at a time).
    fn serve_reservations(&mut self, w: usize) {
        if self.sampling[w].asking {
            return;
        }
        let Some(&job) = self.sampling[w].reservations.front() else {
            return;
        };
        if self.real.fits(w, self.state[job as usize].need) {
            self.sampling[w].asking = true;
            self.at(
                self.now + 2 * self.config.network_us,
                Ev::TaskReply {
                    job,
                    worker: w as u32,
                },
            );
        }
    }

    /// The scheduler's answer: the job's next task, if it has one left
    /// (late binding); the reservation is used either way.
    fn task_reply(&mut self, job: u32, worker: u32) {
        let w = worker as usize;
        self.sampling[w].asking = false;
        self.sampling[w].reservations.pop_front();
        let j = job as usize;
        let s = &mut self.state[j];
        let width = self.jobs[j].runtimes_us().len() as u32;
        if s.launched < width {
            let task = TaskRef {
                job,
                task: s.launched,
            };
            let need = s.need;
            self.real.take(w, need);
            self.start(task, worker);
        }
        self.serve_reservations(w);
    }

    pub(super) fn report(&self) -> MeghaRun {
        let mut allocation: Vec<f64> = self.allocation_us.iter().map(|&u| u as f64).collect();
        allocation.sort_by(f64::total_cmp);
        let jct_s = |s: &JobState| s.end_us.saturating_sub(s.arrival_us) as f64 / 1e6;
        let mut jct: Vec<f64> = self.state.iter().map(jct_s).collect();
        jct.sort_by(f64::total_cmp);
        let queue_jcts = |q: usize| -> Vec<f64> {
            self.state
                .iter()
                .filter(|s| s.queue == q)
                .map(jct_s)
                .collect()
        };
        let ms = |p: f64| percentile(&allocation, p).unwrap_or(0.0) / 1e3;
        MeghaRun {
            scheduler: self.scheduler,
            workers: self.config.workers,
            lms: self.config.lms,
            gms: self.config.gms,
            jobs: self.jobs.len(),
            tasks: allocation.len(),
            allocation_p50_ms: ms(50.0),
            allocation_p99_ms: ms(99.0),
            allocation_max_ms: allocation.last().copied().unwrap_or(0.0) / 1e3,
            avg_jct_s: jct.iter().sum::<f64>() / jct.len().max(1) as f64,
            p50_jct_s: percentile(&jct, 50.0).unwrap_or(0.0),
            inconsistencies: self.inconsistencies,
            repartitions: self.repartitions,
            requeues: self.requeues,
            preemption_attempts: self.preemption_attempts,
            preemptions: self.preemptions,
            preempted_work_s: self.preempted_work_us as f64 / 1e6,
            share_attainment: if self.fairness {
                self.queues
                    .iter()
                    .enumerate()
                    .map(|(i, q)| QueueAttainment {
                        queue: i,
                        share: q.spec.share,
                        gm: q.spec.gm,
                        tasks: q.started - q.preempted,
                        attainment: (q.waited_us > 0).then(|| q.attained_us / q.waited_us as f64),
                        waiting_s: q.waited_us as f64 / 1e6,
                        preempted: q.preempted,
                        jobs: queue_jcts(i).len(),
                        avg_jct_s: {
                            let jcts = queue_jcts(i);
                            jcts.iter().sum::<f64>() / jcts.len().max(1) as f64
                        },
                    })
                    .collect()
            } else {
                Vec::new()
            },
        }
    }
}
