//! Real Spark DAG jobs with every task's runtime: Decima's executions of
//! the 22 TPC-H queries (Mao et al., SIGCOMM 2019), converted in
//! `../shared/data/spark-tpch-dags-decima/stages.jsonl.gz` to one JSON
//! object per stage:
//! `{"size": "2g", "query": 1, "stage": 0, "parents": [..], "durations_ms":
//! {"first_wave": {"<executors>": [..]}, "rest_wave": {..}, ..}}`.
//!
//! The file records runs, not a cluster's timeline; this adapter lays them
//! out as one:
//!
//! - **A DAG job per run**: one (input size, query, executor count), its
//!   stages the query's, each stage's tasks that run's `first_wave` then
//!   `rest_wave` durations (`fresh_durations`, the tasks that met a freshly
//!   started executor, are among them and not added again). User `tpch`,
//!   job and logical name `q<N>`: a query recurs across sizes and executor
//!   counts, so its stages' history is the same query on other inputs.
//! - **History from other sizes**: the runs on 2, 10, 50 and 100 GB arrive
//!   in the trace's first half, those on 5, 20 and 80 GB in its second, so
//!   a workload split in the middle (`jobcast evaluate`) predicts every
//!   evaluated query from its runs on other input sizes, never its own.
//! - **Arrivals**: each half in a fixed pseudo-random order (ChaCha8, seed
//!   [`SEED`]), with exponential gaps (Poisson arrivals) averaging
//!   [`MEAN_GAP_S`] in the second half and spread over the same span in the
//!   first. The load on a cluster is chosen where the trace is used
//!   (`evaluate` sizes its cluster for an average load of 1; `--slots`).
//! - **Task times**: a stage starts when its parent stages have ended (the
//!   job's arrival for a root); its tasks run in order on the run's
//!   executors, each on the executor free first, as Spark's waves did
//!   ([`crate::timeline`]). A stage's executors are its own: sibling
//!   stages do not compete.
//!
//! A line that cannot be used is skipped and reported by file and line; a
//! run whose stage has no task at its executor count is left out and
//! noted. Stage ids must be 0..n per query and size, parents before
//! children (the published file is), else that query and size is skipped.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::Path;

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;

use crate::event::{Event, JobSubmitted, Stage};
use crate::source::{Diagnostics, Location, Trace, TraceError, list_files, open_input, total_size};
use crate::timeline;

/// The seed of the arrival order and gaps.
pub const SEED: u64 = 0x7c9_d4a6;
/// Mean gap between arrivals in the evaluated (second) half, seconds.
pub const MEAN_GAP_S: f64 = 60.0;
/// Input sizes (GB) whose runs arrive in the first half: the history.
pub const HISTORY_SIZES_GB: [u32; 4] = [2, 10, 50, 100];
/// The trace starts here (time 0 means "before the trace").
const START_US: u64 = 1_000_000;

#[derive(Deserialize)]
struct Line {
    size: String,
    query: u32,
    stage: u32,
    #[serde(default)]
    parents: Vec<u32>,
    durations_ms: Durations,
}

#[derive(Deserialize)]
struct Durations {
    first_wave: BTreeMap<String, Vec<f64>>,
    #[serde(default)]
    rest_wave: BTreeMap<String, Vec<f64>>,
}

/// One stage as read: its parents and, per executor count, its tasks' ms.
struct StageRuns {
    parents: Vec<u32>,
    runs: BTreeMap<u32, Vec<f64>>,
    line: u64,
}

/// Every stage read, by (input size in GB, query) and stage id.
type Queries = BTreeMap<(u32, u32), BTreeMap<u32, StageRuns>>;

/// One run of a query: every stage's tasks, in µs.
struct Run {
    size_gb: u32,
    query: u32,
    executors: u32,
    stages: Vec<(Vec<u32>, Vec<u64>)>,
}

/// Open `stages.jsonl[.gz]`, or the directory holding it.
pub fn open(input: &Path) -> Result<Trace, TraceError> {
    let files = list_files(input, "stages")?;
    let Some(path) = files.first() else {
        return Err(TraceError::invalid(input, "no stages.jsonl[.gz] here"));
    };
    let diagnostics = Diagnostics::new();
    let reader = open_input(path, &diagnostics)?;
    let queries = read_stages(path, reader, &diagnostics)?;
    let runs = runs_of(path, queries, &diagnostics);
    let events = lay_out(path, runs, &diagnostics);
    Ok(Trace::new(
        events.into_iter().map(Ok),
        diagnostics,
        total_size(&files),
    ))
}

/// Every usable line, by (size in GB, query) and stage id.
fn read_stages(
    path: &Path,
    reader: impl BufRead,
    diagnostics: &Diagnostics,
) -> Result<Queries, TraceError> {
    let mut queries = Queries::new();
    for (i, line) in reader.lines().enumerate() {
        let line = line.map_err(|e| TraceError::io(path, e))?;
        let number = i as u64 + 1;
        if line.trim().is_empty() {
            continue;
        }
        diagnostics.rows(1);
        let at = || Location {
            file: path.to_owned(),
            line: number,
            record: None,
        };
        let parsed: Line = match serde_json::from_str(&line) {
            Ok(l) => l,
            Err(e) => {
                diagnostics.skip(at(), "invalid_record", e);
                continue;
            }
        };
        let Some(size_gb) = parsed
            .size
            .strip_suffix('g')
            .and_then(|n| n.parse::<u32>().ok())
        else {
            diagnostics.skip(
                at(),
                "invalid_field",
                format!("size {:?} is not <GB>g", parsed.size),
            );
            continue;
        };
        let mut runs = BTreeMap::new();
        let Durations {
            first_wave,
            mut rest_wave,
        } = parsed.durations_ms;
        for (executors, mut ms) in first_wave {
            let Ok(n) = executors.parse::<u32>() else {
                diagnostics.skip(
                    at(),
                    "invalid_field",
                    format!("executor count {executors:?} is not a number"),
                );
                continue;
            };
            ms.extend(rest_wave.remove(&executors).unwrap_or_default());
            runs.insert(n, ms);
        }
        let stages = queries.entry((size_gb, parsed.query)).or_default();
        let stage = StageRuns {
            parents: parsed.parents,
            runs,
            line: number,
        };
        if stages.insert(parsed.stage, stage).is_some() {
            diagnostics.skip(
                at(),
                "duplicate_stage",
                format!(
                    "stage {} of query {} at {} GB appears twice; the last is kept",
                    parsed.stage, parsed.query, size_gb
                ),
            );
        }
    }
    Ok(queries)
}

/// Each (size, query) with stages 0..n whose parents come first, as one
/// run per executor count that every stage has tasks for.
fn runs_of(path: &Path, queries: Queries, diagnostics: &Diagnostics) -> Vec<Run> {
    let mut runs = Vec::new();
    for ((size_gb, query), stages) in queries {
        let well_formed = stages
            .iter()
            .enumerate()
            .all(|(i, (&id, s))| id as usize == i && s.parents.iter().all(|&p| p < id));
        if !well_formed {
            let line = stages.values().map(|s| s.line).min().unwrap_or(0);
            diagnostics.skip(
                Location {
                    file: path.to_owned(),
                    line,
                    record: Some(format!("q{query} {size_gb}g")),
                },
                "invalid_dag",
                "stage ids are not 0..n with every parent before its child",
            );
            continue;
        }
        let executor_counts = stages.values().next().map(|s| s.runs.keys().copied());
        for executors in executor_counts.into_iter().flatten() {
            let tasks: Option<Vec<(Vec<u32>, Vec<u64>)>> = stages
                .values()
                .map(|s| {
                    let ms = s.runs.get(&executors).filter(|ms| !ms.is_empty())?;
                    let us = ms.iter().map(|&m| (m.max(0.0) * 1000.0).round() as u64);
                    Some((s.parents.clone(), us.collect()))
                })
                .collect();
            match tasks {
                Some(stages) => runs.push(Run {
                    size_gb,
                    query,
                    executors,
                    stages,
                }),
                None => diagnostics.note("runs with a stage without tasks left out"),
            }
        }
    }
    runs
}

/// The runs as a timeline of canonical events (see the module docs).
fn lay_out(path: &Path, runs: Vec<Run>, diagnostics: &Diagnostics) -> Vec<Event> {
    let (mut history, mut evaluated): (Vec<Run>, Vec<Run>) = runs
        .into_iter()
        .partition(|r| HISTORY_SIZES_GB.contains(&r.size_gb));
    let mut rng = ChaCha8Rng::seed_from_u64(SEED);
    history.shuffle(&mut rng);
    evaluated.shuffle(&mut rng);
    let span_us = MEAN_GAP_S * 1e6 * evaluated.len().max(1) as f64;
    let mut events = Vec::new();
    let mut job_id = 0u64;
    let mut start_us = START_US as f64;
    for half in [history, evaluated] {
        let gap_us = span_us / half.len().max(1) as f64;
        let mut at = start_us;
        for run in half {
            job_id += 1;
            let arrival = at.round() as u64;
            let job = run_events(&run, job_id, arrival);
            let fits = job.iter().all(|e| {
                diagnostics.within_limits(e, |_| Location {
                    file: path.to_owned(),
                    line: 0,
                    record: Some(format!(
                        "q{} {}g on {}",
                        run.query, run.size_gb, run.executors
                    )),
                })
            });
            if fits {
                events.extend(job);
            }
            // Exponential gaps: -ln(U) × mean, U in (0, 1].
            let u: f64 = 1.0 - rng.random::<f64>();
            at += -u.ln() * gap_us;
        }
        start_us += span_us;
    }
    // Stable: at equal times a job's submission, its tasks, its end.
    events.sort_by_key(Event::time_us);
    events
}

/// One run's submission, its tasks' schedules and finishes, and its end.
fn run_events(run: &Run, job_id: u64, arrival_us: u64) -> Vec<Event> {
    let stages = run
        .stages
        .iter()
        .enumerate()
        .map(|(id, (parents, tasks))| Stage {
            id: id as u32,
            parents: parents.clone(),
            num_tasks: tasks.len() as u32,
            name: None,
        })
        .collect();
    let runtimes: Vec<u64> = run
        .stages
        .iter()
        .flat_map(|(_, t)| t.iter().copied())
        .collect();
    let name = format!("q{}", run.query);
    let job = JobSubmitted {
        user: "tpch".into(),
        job_name: name.clone(),
        logical_name: name,
        stages: Some(stages),
        ..JobSubmitted::new(job_id, arrival_us, runtimes.len() as u32)
    };
    timeline::job_events(&job, &runtimes, Some(run.executors))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::TaskKind;

    const TWO_QUERIES: &str = r#"{"size":"2g","query":1,"stage":0,"parents":[],"durations_ms":{"first_wave":{"2":[1000,2000],"4":[900]},"rest_wave":{"2":[500]},"fresh_durations":{"2":[1000]}}}
{"size":"2g","query":1,"stage":1,"parents":[0],"durations_ms":{"first_wave":{"2":[3000],"4":[]},"rest_wave":{}}}
{"size":"5g","query":1,"stage":0,"parents":[],"durations_ms":{"first_wave":{"2":[4000]},"rest_wave":{}}}
not json
{"size":"5g","query":2,"stage":0,"parents":[1],"durations_ms":{"first_wave":{"2":[4000]},"rest_wave":{}}}
{"size":"5g","query":2,"stage":1,"parents":[],"durations_ms":{"first_wave":{"2":[4000]},"rest_wave":{}}}
"#;

    fn read(text: &str) -> (Vec<Event>, Diagnostics) {
        let diagnostics = Diagnostics::new();
        let path = Path::new("stages.jsonl");
        let queries = read_stages(path, text.as_bytes(), &diagnostics).unwrap();
        let runs = runs_of(path, queries, &diagnostics);
        (lay_out(path, runs, &diagnostics), diagnostics)
    }

    #[test]
    fn a_run_is_a_dag_job_whose_stages_wait_for_their_parents() {
        let (events, diagnostics) = read(TWO_QUERIES);
        // The bad line and the query whose root depends on a later stage
        // are named; the 4-executor run (its stage 1 has no task) is noted.
        let skipped = diagnostics.skipped();
        assert_eq!(skipped.get("invalid_record"), Some(&1), "{skipped:?}");
        assert_eq!(skipped.get("invalid_dag"), Some(&1), "{skipped:?}");
        assert_eq!(
            diagnostics
                .notes()
                .get("runs with a stage without tasks left out"),
            Some(&1)
        );
        let submitted: Vec<&JobSubmitted> = events
            .iter()
            .filter_map(|e| match e {
                Event::JobSubmitted(j) => Some(j),
                _ => None,
            })
            .collect();
        assert_eq!(submitted.len(), 2, "q1 at 2 GB and at 5 GB, on 2 executors");
        // History sizes first: the 2 GB run arrives at the trace's start.
        let first = submitted[0];
        assert_eq!(first.time_us, START_US);
        assert_eq!(
            (first.job_name.as_str(), first.user.as_str()),
            ("q1", "tpch")
        );
        assert_eq!(first.num_tasks, 4);
        let stages = first.stages.as_ref().unwrap();
        assert_eq!(
            stages
                .iter()
                .map(|s| (s.num_tasks, s.parents.clone()))
                .collect::<Vec<_>>(),
            [(3, vec![]), (1, vec![0])]
        );
        assert!(submitted[1].time_us >= START_US + 60_000_000, "second half");
        // Stage 0's three tasks on two executors: 1 s and 2 s at once, the
        // 0.5 s one when the first executor frees up (1 s); stage 1 starts
        // when stage 0 ends (2 s) and runs 3 s.
        let tasks: Vec<(u32, TaskKind, u64)> = events
            .iter()
            .filter_map(|e| match e {
                Event::Task(t) if t.job_id == first.job_id => {
                    Some((t.task_index, t.kind, t.time_us - START_US))
                }
                _ => None,
            })
            .collect();
        let mut finishes: Vec<(u32, u64)> = tasks
            .iter()
            .filter(|t| t.1 == TaskKind::Finish)
            .map(|t| (t.0, t.2))
            .collect();
        finishes.sort_unstable();
        assert_eq!(
            finishes,
            [
                (0, 1_000_000),
                (1, 2_000_000),
                (2, 1_500_000),
                (3, 5_000_000)
            ]
        );
        assert!(tasks.contains(&(3, TaskKind::Schedule, 2_000_000)));
        let end = events.iter().find_map(|e| match e {
            Event::JobEnded(j) if j.job_id == first.job_id => Some(j.time_us - START_US),
            _ => None,
        });
        assert_eq!(end, Some(5_000_000));
        // A timeline: time never goes back.
        assert!(events.windows(2).all(|w| w[0].time_us() <= w[1].time_us()));
    }
}
