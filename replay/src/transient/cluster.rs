//! The simulated cluster: servers with per-server queues, Eagle's hybrid
//! placement, CloudCoaster's transient short partition, and preemptions.
//! See the [module docs](super) for the model; this file is its event loop,
//! and `partitions.rs` says which servers take which work.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use jobcast_predictor::preemption::hints::{CoasterConfig, PartitionAction, coaster_hint};
use jobcast_predictor::preemption::running_time::{LifetimeDraws, preemption_probability};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::classes::{Classifier, JobClass};
use super::partitions::Partitions;
use super::{Lifetimes, Run, TransientConfig};
use crate::workload::SimJob;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// The general partition: long jobs, and short ones where no long task
    /// is queued.
    General,
    /// The static short-only partition (on-demand).
    Short,
    /// The dynamic short-only partition.
    Transient,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Provisioning,
    Up,
    /// Released: finishes its queue, takes no new probes.
    Draining,
    Gone,
}

#[derive(Debug, Clone, Copy)]
enum Entry {
    /// A short job's probe: late binding, it takes the job's next unstarted
    /// task when it reaches the head, or is dropped if there is none.
    Probe(usize),
    /// A long task, bound to this server by the central scheduler.
    Long(usize, u32),
}

#[derive(Debug, Clone, Copy)]
struct Running {
    job: usize,
    task: u32,
    start_us: u64,
}

struct Server {
    kind: Kind,
    state: State,
    queue: VecDeque<Entry>,
    running: Option<Running>,
    /// Bumped on a preemption: events of the server before it are stale.
    epoch: u32,
    requested_us: u64,
    up_us: u64,
    ended_us: Option<u64>,
}

struct Job<'a> {
    spec: &'a SimJob,
    class: JobClass,
    /// Tasks not started (or lost to a preemption), taken from the back.
    unstarted: Vec<u32>,
    unfinished: u32,
    /// Its probes in queues.
    probes: u32,
    /// Σ of its tasks' queueing delays (last start − arrival), µs.
    delay_us: Vec<u64>,
    end_us: Option<u64>,
}

/// At equal times: task ends, then preemptions, then servers coming up,
/// then arrivals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    End { server: usize, epoch: u32 },
    Preempt { server: usize, epoch: u32 },
    Ready { server: usize },
    Arrive { job: usize },
}

pub(super) struct Cluster<'a, 'c> {
    config: &'a TransientConfig,
    coaster: Option<CoasterConfig>,
    lifetimes: Lifetimes<'a>,
    classifier: &'c mut dyn Classifier,
    rng: ChaCha8Rng,
    servers: Vec<Server>,
    jobs: Vec<Job<'a>>,
    events: BinaryHeap<Reverse<(u64, Ev, u64)>>,
    seq: u64,
    /// Which servers take which work.
    partitions: Partitions,
    unfinished_jobs: usize,
    run: Run,
}

impl<'a, 'c> Cluster<'a, 'c> {
    pub(super) fn new(
        jobs: &[&'a SimJob],
        config: &'a TransientConfig,
        coaster: Option<CoasterConfig>,
        lifetimes: Lifetimes<'a>,
        classifier: &'c mut dyn Classifier,
        run: Run,
    ) -> Self {
        let short_static = match &coaster {
            Some(c) => {
                config.short_servers
                    - (f64::from(config.short_servers) * c.replaced_fraction).round() as u32
            }
            None => config.short_servers,
        };
        let general = (config.servers - config.short_servers) as usize;
        let mut cluster = Cluster {
            config,
            coaster,
            lifetimes,
            classifier,
            rng: ChaCha8Rng::seed_from_u64(config.seed),
            servers: Vec::new(),
            jobs: jobs
                .iter()
                .map(|spec| Job {
                    spec,
                    class: JobClass {
                        long: false,
                        task_us: 0.0,
                    },
                    unstarted: (0..spec.width()).rev().collect(),
                    unfinished: spec.width(),
                    probes: 0,
                    delay_us: vec![0; spec.width() as usize],
                    end_us: None,
                })
                .collect(),
            events: BinaryHeap::new(),
            seq: 0,
            partitions: Partitions::new(general, short_static as usize),
            unfinished_jobs: jobs.len(),
            run,
        };
        for i in 0..general + short_static as usize {
            let kind = if i < general {
                Kind::General
            } else {
                Kind::Short
            };
            cluster.servers.push(Server::new(kind, State::Up, 0));
        }
        for (i, job) in jobs.iter().enumerate() {
            cluster.push(job.arrival_us(), Ev::Arrive { job: i });
        }
        cluster
    }

    fn push(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        self.events.push(Reverse((at, ev, self.seq)));
    }

    /// Run to the last job's end; the report.
    pub(super) fn simulate(mut self) -> Run {
        let mut first = None;
        let mut last = 0;
        while let Some(Reverse((now, ev, _))) = self.events.pop() {
            first.get_or_insert(now);
            last = now;
            match ev {
                Ev::Arrive { job } => self.arrive(job, now),
                Ev::End { server, epoch } => self.end(server, epoch, now),
                Ev::Preempt { server, epoch } => self.preempt(server, epoch, now),
                Ev::Ready { server } => self.ready(server, now),
            }
            if self.unfinished_jobs == 0 {
                break;
            }
        }
        self.finish(first.unwrap_or(0), last)
    }

    fn arrive(&mut self, job: usize, now: u64) {
        let class = self.classifier.classify(self.jobs[job].spec, now);
        self.jobs[job].class = class;
        let truly_long = self.jobs[job].spec.mean_task_runtime_us() > self.config.cutoff_us;
        match (class.long, truly_long) {
            (true, false) => self.run.short_as_long += 1,
            (false, true) => self.run.long_as_short += 1,
            _ => {}
        }
        if class.long {
            let est = class.task_us.max(1.0).round() as u64;
            let tasks: Vec<u32> = std::mem::take(&mut self.jobs[job].unstarted);
            let mut touched = Vec::new();
            for task in tasks.into_iter().rev() {
                let server = self.partitions.bind_long(est);
                self.servers[server].queue.push_back(Entry::Long(job, task));
                touched.push(server);
            }
            for server in touched {
                self.serve(server, now);
            }
            self.control(now);
        } else {
            let width = self.jobs[job].spec.width();
            let probes = (width * self.config.probe_ratio).max(self.config.min_probes);
            // One probe per task on an on-demand server (§3.3), the rest
            // anywhere short tasks may go.
            for i in 0..probes {
                self.probe(job, i < width, now);
            }
        }
    }

    /// Send one probe of `job` to a random server: an on-demand one if
    /// `on_demand`, else any that takes short tasks
    /// ([`Partitions::probe_target`]).
    fn probe(&mut self, job: usize, on_demand: bool, now: u64) {
        let server = self.partitions.probe_target(on_demand, &mut self.rng);
        self.jobs[job].probes += 1;
        self.servers[server].queue.push_back(Entry::Probe(job));
        self.run.probes += 1;
        self.serve(server, now);
    }

    /// Start the next task at an idle server, or shut it down if it is
    /// draining and has nothing left.
    fn serve(&mut self, server: usize, now: u64) {
        if self.servers[server].running.is_some() {
            return;
        }
        while let Some(at) = self.next_entry(server) {
            let entry = self.servers[server]
                .queue
                .remove(at)
                .expect("chosen from the queue");
            match entry {
                Entry::Probe(job) => {
                    self.jobs[job].probes -= 1;
                    if let Some(task) = self.jobs[job].unstarted.pop() {
                        self.start(server, job, task, now);
                        return;
                    }
                }
                Entry::Long(job, task) => {
                    self.start(server, job, task, now);
                    return;
                }
            }
        }
        if self.servers[server].state == State::Draining {
            self.gone(server, now);
        }
    }

    /// Where in `server`'s queue the entry to run next is: a long task at
    /// the head, else the entry of least remaining estimated work (SRPT),
    /// the earlier on a tie; a probe whose job has no task left to start
    /// costs nothing and goes first, to be dropped.
    fn next_entry(&self, server: usize) -> Option<usize> {
        let queue = &self.servers[server].queue;
        if let Some(Entry::Long(..)) = queue.front() {
            return Some(0);
        }
        let remaining = |entry: &Entry| -> f64 {
            match *entry {
                Entry::Probe(job) => {
                    let j = &self.jobs[job];
                    j.class.task_us * j.unstarted.len() as f64
                }
                Entry::Long(job, _) => {
                    let j = &self.jobs[job];
                    j.class.task_us * f64::from(j.unfinished)
                }
            }
        };
        queue
            .iter()
            .enumerate()
            .min_by(|(i, a), (k, b)| remaining(a).total_cmp(&remaining(b)).then(i.cmp(k)))
            .map(|(i, _)| i)
    }

    fn start(&mut self, server: usize, job: usize, task: u32, now: u64) {
        let runtime = self.jobs[job].spec.runtimes_us()[task as usize];
        let j = &mut self.jobs[job];
        j.delay_us[task as usize] = now - j.spec.arrival_us();
        let s = &mut self.servers[server];
        s.running = Some(Running {
            job,
            task,
            start_us: now,
        });
        let epoch = s.epoch;
        self.push(now + runtime, Ev::End { server, epoch });
    }

    fn end(&mut self, server: usize, epoch: u32, now: u64) {
        if self.servers[server].epoch != epoch {
            return;
        }
        let Some(done) = self.servers[server].running.take() else {
            return;
        };
        let job = done.job;
        let long = self.jobs[job].class.long;
        self.jobs[job].unfinished -= 1;
        if self.jobs[job].unfinished == 0 {
            self.unfinished_jobs -= 1;
            self.jobs[job].end_us = Some(now);
            self.classifier.ended(self.jobs[job].spec, now);
        }
        if long {
            let est = self.jobs[job].class.task_us.max(1.0).round() as u64;
            self.partitions.long_done(server, est);
            self.control(now);
        } else if !self.jobs[job].unstarted.is_empty()
            && self.servers[server].state != State::Draining
        {
            // Sticky batch probing: the probe goes back to the head (behind
            // a long task there, which runs first) and competes for the
            // job's next task. A released server only finishes its queue.
            self.jobs[job].probes += 1;
            let queue = &mut self.servers[server].queue;
            let at = usize::from(matches!(queue.front(), Some(Entry::Long(..))));
            queue.insert(at, Entry::Probe(job));
        }
        self.serve(server, now);
    }

    /// A transient server comes up: it takes probes, and its lifetime
    /// starts.
    fn ready(&mut self, server: usize, now: u64) {
        if self.servers[server].state != State::Provisioning {
            return;
        }
        self.servers[server].state = State::Up;
        self.servers[server].up_us = now;
        self.partitions.up(server);
        if let Some(truth) = self.lifetimes.measured {
            let hours = truth.draw_given_alive(0.0, &mut self.rng);
            let epoch = self.servers[server].epoch;
            self.push(
                now + (hours * 3.6e9).round() as u64,
                Ev::Preempt { server, epoch },
            );
        }
    }

    /// The provider takes a transient server back: the task running there
    /// loses its work and goes back to its job, the probes queued there are
    /// lost, and jobs left with fewer probes than unstarted tasks probe
    /// again (on on-demand servers).
    fn preempt(&mut self, server: usize, epoch: u32, now: u64) {
        let s = &mut self.servers[server];
        if s.epoch != epoch || matches!(s.state, State::Gone | State::Provisioning) {
            return;
        }
        s.epoch += 1;
        self.partitions.preempted(server, s.state == State::Up);
        self.run.preemptions += 1;
        let mut affected = Vec::new();
        if let Some(lost) = s.running.take() {
            self.run.tasks_lost += 1;
            self.run.work_lost_s += (now - lost.start_us) as f64 / 1e6;
            self.jobs[lost.job].unstarted.push(lost.task);
            affected.push(lost.job);
        }
        for entry in std::mem::take(&mut s.queue) {
            if let Entry::Probe(job) = entry {
                self.jobs[job].probes -= 1;
                affected.push(job);
            }
        }
        self.gone(server, now);
        affected.sort_unstable();
        affected.dedup();
        for job in affected {
            let j = &self.jobs[job];
            let missing = (j.unstarted.len() as u32).saturating_sub(j.probes);
            self.run.reprobes += u64::from(missing);
            for _ in 0..missing {
                self.probe(job, true, now);
            }
        }
        self.control(now);
    }

    fn gone(&mut self, server: usize, now: u64) {
        let s = &mut self.servers[server];
        s.state = State::Gone;
        s.ended_us = Some(now);
    }

    /// CloudCoaster's controller: `l_r` against the threshold, after every
    /// change of the long load or of the servers.
    fn control(&mut self, now: u64) {
        let Some(coaster) = self.coaster else {
            return;
        };
        let (long, total, transient) = self.partitions.load();
        let hint = coaster_hint(long, total, transient, &coaster);
        self.run.max_long_load_ratio = self.run.max_long_load_ratio.max(hint.long_load_ratio);
        match hint.action {
            PartitionAction::Grow => {
                self.run.grown += hint.servers;
                for _ in 0..hint.servers {
                    let server = self.servers.len();
                    self.servers
                        .push(Server::new(Kind::Transient, State::Provisioning, now));
                    self.partitions.requested(server);
                    self.push(now + self.config.provisioning_us, Ev::Ready { server });
                }
                self.run.max_transient_servers = self
                    .run
                    .max_transient_servers
                    .max(self.partitions.transient_active());
            }
            PartitionAction::Shrink => {
                self.run.released += 1;
                self.release(now);
            }
            PartitionAction::Hold => {}
        }
    }

    /// Release one transient server: one still provisioning if any (it has
    /// done nothing yet), else the one the lifetime model says is likeliest
    /// to be preempted within the next hour (the early-failure phase or the
    /// deadline), else the one with the shortest queue; it drains first.
    fn release(&mut self, now: u64) {
        if let Some(server) = self.partitions.last_provisioning() {
            self.partitions.released(server);
            self.gone(server, now);
            return;
        }
        let score = |s: &Server| -> (f64, Reverse<usize>) {
            let risk = self.lifetimes.model.map_or(0.0, |m| {
                let age_h = (now - s.up_us) as f64 / 3.6e9;
                preemption_probability(m, age_h, 1.0)
            });
            (risk, Reverse(s.queue.len()))
        };
        let victim = self
            .partitions
            .transient_up()
            .iter()
            .copied()
            .max_by(|&a, &b| {
                let (sa, sb) = (score(&self.servers[a]), score(&self.servers[b]));
                sa.0.total_cmp(&sb.0).then(sa.1.cmp(&sb.1)).then(b.cmp(&a))
            });
        if let Some(server) = victim {
            self.partitions.released(server);
            self.servers[server].state = State::Draining;
            self.serve(server, now);
        }
    }

    /// The report over `[first, last]`.
    fn finish(mut self, first: u64, last: u64) -> Run {
        let span_us = last.saturating_sub(first).max(1);
        let transient_us: u64 = self
            .servers
            .iter()
            .filter(|s| s.kind == Kind::Transient)
            .map(|s| s.ended_us.unwrap_or(last).saturating_sub(s.requested_us))
            .sum();
        self.run.transient_server_hours = transient_us as f64 / 3.6e9;
        self.run.avg_transient_servers = transient_us as f64 / span_us as f64;
        let cutoff = self.config.cutoff_us;
        let mut short_delays: Vec<f64> = Vec::new();
        let (mut short_jct, mut long_jct) = (Vec::new(), Vec::new());
        for j in &self.jobs {
            let jct = j.end_us.map(|e| (e - j.spec.arrival_us()) as f64 / 1e6);
            if j.spec.mean_task_runtime_us() > cutoff {
                long_jct.extend(jct);
            } else {
                short_jct.extend(jct);
                short_delays.extend(j.delay_us.iter().map(|&d| d as f64 / 1e6));
            }
        }
        self.run.unfinished = self.jobs.iter().filter(|j| j.end_us.is_none()).count();
        self.run.short_delay = super::Delays::of(&mut short_delays);
        self.run.short_delays_s = short_delays;
        let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
        self.run.short_jobs = short_jct.len();
        self.run.long_jobs = long_jct.len();
        self.run.short_avg_jct_s = mean(&short_jct);
        self.run.long_avg_jct_s = mean(&long_jct);
        self.run
    }
}

impl Server {
    fn new(kind: Kind, state: State, now: u64) -> Server {
        Server {
            kind,
            state,
            queue: VecDeque::new(),
            running: None,
            epoch: 0,
            requested_us: now,
            up_us: now,
            ended_us: None,
        }
    }
}
