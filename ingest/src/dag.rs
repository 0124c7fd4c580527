//! The DAG hidden in Alibaba `cluster-trace-v2018` task names.
//!
//! `batch_task.task_name` encodes a job's dependency graph: `M5_3_4` is task
//! 5, which may start only once tasks 3 and 4 have finished; `M1` has no
//! parents. The leading letters (`M`, `R`, `J`, ...) carry no meaning. Tasks
//! outside any DAG get random names such as `task_Nzg3ODAwNTc5NjMyNDY2NDk0Nw==`.
//!
//! The trace has documented anomalies, all tolerated here: a `Stg` suffix
//! (`J10_7_9_Stg4`, ignored), trailing underscores (`M3_`, `R4_3_`),
//! dependency cycles, and (not documented, but possible in any job) duplicate
//! stage ids, self-dependencies and parents that are not in the job.
//! [`build_job`] repairs these so that the canonical stages always form a
//! DAG, and reports every repair as a [`DagProblem`].

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap, HashSet};
use std::fmt;

use crate::event::Stage;

/// What a task name says about the task's place in its job's DAG.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskName {
    /// Stage `id`, depending on `parents` (as written: unsorted, possibly
    /// with duplicates or the stage itself).
    Dag { id: u32, parents: Vec<u32> },
    /// A task outside any DAG: any name that is not `<letters><id>(_<parent>)*`.
    Independent,
}

/// Parse one `task_name`. Never fails: a name that does not encode a DAG
/// position is [`TaskName::Independent`].
pub fn parse_task_name(name: &str) -> TaskName {
    parse_dag(name).map_or(TaskName::Independent, |(id, parents)| TaskName::Dag {
        id,
        parents,
    })
}

fn parse_dag(name: &str) -> Option<(u32, Vec<u32>)> {
    let letters = name.bytes().take_while(u8::is_ascii_alphabetic).count();
    if letters == 0 {
        return None;
    }
    // `letters` counts ASCII bytes only, so it is a char boundary.
    let mut segments = name[letters..].split('_');
    let id = parse_id(segments.next()?)?;
    let mut parents = Vec::new();
    // After a `Stg` suffix or an empty segment only trailing `_` may follow.
    let mut tail = false;
    for segment in segments {
        if segment.is_empty() {
            tail = true;
        } else if tail {
            return None;
        } else if let Some(n) = segment.strip_prefix("Stg") {
            parse_id(n)?;
            tail = true;
        } else {
            parents.push(parse_id(segment)?);
        }
    }
    Some((id, parents))
}

/// Decimal digits only: `str::parse` would also take a leading `+`.
fn parse_id(s: &str) -> Option<u32> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Something wrong with a job's DAG, and how [`build_job`] repaired it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DagProblem {
    /// The stages form a dependency cycle: each depends on the next, and the
    /// last on the first. Listed from the smallest id. The edge that closed
    /// the cycle was dropped.
    Cycle(Vec<u32>),
    /// `stage` names a parent that is not in the job; the edge was dropped.
    MissingParent { stage: u32, parent: u32 },
    /// `stage` depends on itself; the edge was dropped.
    SelfDependency { stage: u32 },
    /// A second task named `name` claims stage `id`; it became stage
    /// `renumbered`, and references to `id` mean the first one.
    DuplicateStage {
        id: u32,
        name: String,
        renumbered: u32,
    },
}

impl fmt::Display for DagProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DagProblem::Cycle(ids) => {
                write!(f, "dependency cycle ")?;
                for id in ids {
                    write!(f, "{id} -> ")?;
                }
                write!(f, "{}", ids.first().copied().unwrap_or_default())
            }
            DagProblem::MissingParent { stage, parent } => {
                write!(f, "stage {stage} depends on absent stage {parent}")
            }
            DagProblem::SelfDependency { stage } => write!(f, "stage {stage} depends on itself"),
            DagProblem::DuplicateStage {
                id,
                name,
                renumbered,
            } => {
                write!(
                    f,
                    "duplicate stage id {id} (`{name}` renumbered {renumbered})"
                )
            }
        }
    }
}

/// A job's canonical DAG.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobDag {
    /// One stage per input task, sorted by id. Parents are sorted, unique,
    /// exist in the job and never form a cycle.
    pub stages: Vec<Stage>,
    /// The stage id given to each input task, in input order.
    pub task_stage: Vec<u32>,
    /// Every stage id once, parents before children (smallest id first
    /// among the stages that are ready).
    pub order: Vec<u32>,
    pub problems: Vec<DagProblem>,
}

/// Build a job's stages from its tasks' `(task_name, instance count)`.
///
/// DAG tasks keep their parsed id. Independent tasks, and tasks whose id an
/// earlier task already took, get fresh ids that no name in the job
/// mentions (counting up from above the largest), so every task belongs to
/// exactly one stage and no fresh stage is mistaken for a named parent.
pub fn build_job<'a>(tasks: impl IntoIterator<Item = (&'a str, u32)>) -> JobDag {
    let rows: Vec<(&str, u32, TaskName)> = tasks
        .into_iter()
        .map(|(name, n)| (name, n, parse_task_name(name)))
        .collect();

    let mut mentioned = HashSet::new();
    for (_, _, parsed) in &rows {
        if let TaskName::Dag { id, parents } = parsed {
            mentioned.insert(*id);
            mentioned.extend(parents.iter().copied());
        }
    }
    let mut fresh = FreshIds::new(&mentioned);

    let mut problems = Vec::new();
    let mut owners = HashSet::new();
    let mut task_stage = Vec::with_capacity(rows.len());
    let mut stages: Vec<Stage> = Vec::with_capacity(rows.len());
    for (name, num_tasks, parsed) in &rows {
        let (id, parents) = match parsed {
            TaskName::Dag { id, parents } if owners.insert(*id) => (*id, parents.clone()),
            TaskName::Dag { id, parents } => {
                let renumbered = fresh.next();
                problems.push(DagProblem::DuplicateStage {
                    id: *id,
                    name: (*name).to_owned(),
                    renumbered,
                });
                (renumbered, parents.clone())
            }
            TaskName::Independent => (fresh.next(), Vec::new()),
        };
        task_stage.push(id);
        stages.push(Stage {
            id,
            parents,
            num_tasks: *num_tasks,
            name: Some((*name).to_owned()),
        });
    }
    stages.sort_by_key(|s| s.id);

    for stage in &mut stages {
        let written: BTreeSet<u32> = stage.parents.iter().copied().collect();
        stage.parents.clear();
        for parent in written {
            if parent == stage.id {
                problems.push(DagProblem::SelfDependency { stage: stage.id });
            } else if !owners.contains(&parent) {
                problems.push(DagProblem::MissingParent {
                    stage: stage.id,
                    parent,
                });
            } else {
                stage.parents.push(parent);
            }
        }
    }

    break_cycles(&mut stages, &mut problems);
    let order = topological_order(&stages);
    JobDag {
        stages,
        task_stage,
        order,
        problems,
    }
}

/// Hands out ids that no task name mentions: upwards from above the largest
/// mentioned id (from 1 if none), wrapping past `u32::MAX`.
struct FreshIds<'a> {
    taken: &'a HashSet<u32>,
    next: u32,
}

impl<'a> FreshIds<'a> {
    fn new(taken: &'a HashSet<u32>) -> Self {
        // Alibaba numbers stages from 1; so do jobs without DAG names.
        let next = taken.iter().max().map_or(1, |m| m.wrapping_add(1));
        FreshIds { taken, next }
    }

    fn next(&mut self) -> u32 {
        // Terminates: a job has far fewer than 2^32 mentioned ids.
        while self.taken.contains(&self.next) {
            self.next = self.next.wrapping_add(1);
        }
        let id = self.next;
        self.next = self.next.wrapping_add(1);
        id
    }
}

/// Depth-first search along parent edges (iterative, so deep chains cannot
/// overflow the stack). Every back edge closes a cycle: report the cycle and
/// drop that edge. Removing all back edges of a DFS leaves a DAG.
fn break_cycles(stages: &mut [Stage], problems: &mut Vec<DagProblem>) {
    let index: HashMap<u32, usize> = stages.iter().enumerate().map(|(i, s)| (s.id, i)).collect();
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Active,
        Done,
    }
    let mut mark = vec![Mark::New; stages.len()];
    let mut back_edges = Vec::new();
    for root in 0..stages.len() {
        if mark[root] != Mark::New {
            continue;
        }
        // (stage, next parent to look at); the stack is the current path.
        let mut path: Vec<(usize, usize)> = vec![(root, 0)];
        mark[root] = Mark::Active;
        while let Some(top) = path.last_mut() {
            let (node, next) = *top;
            let Some(&parent_id) = stages[node].parents.get(next) else {
                mark[node] = Mark::Done;
                path.pop();
                continue;
            };
            top.1 += 1;
            let Some(&parent) = index.get(&parent_id) else {
                continue;
            };
            match mark[parent] {
                Mark::New => {
                    mark[parent] = Mark::Active;
                    path.push((parent, 0));
                }
                Mark::Active => {
                    let start = path.iter().position(|&(n, _)| n == parent).unwrap_or(0);
                    let mut cycle: Vec<u32> =
                        path[start..].iter().map(|&(n, _)| stages[n].id).collect();
                    let smallest = cycle
                        .iter()
                        .enumerate()
                        .min_by_key(|&(_, id)| *id)
                        .map_or(0, |(i, _)| i);
                    cycle.rotate_left(smallest);
                    problems.push(DagProblem::Cycle(cycle));
                    back_edges.push((node, parent_id));
                }
                Mark::Done => {}
            }
        }
    }
    for (node, parent_id) in back_edges {
        stages[node].parents.retain(|&p| p != parent_id);
    }
}

/// Stage ids with every stage after its parents (Kahn's algorithm; the
/// smallest ready id goes first so the order is deterministic). Stages on
/// a cycle, or below one, are left out: fewer ids than stages means no DAG.
pub fn topological_order(stages: &[Stage]) -> Vec<u32> {
    let mut pending: HashMap<u32, usize> = HashMap::with_capacity(stages.len());
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for stage in stages {
        pending.insert(stage.id, stage.parents.len());
        for &p in &stage.parents {
            children.entry(p).or_default().push(stage.id);
        }
    }
    let mut ready: BinaryHeap<Reverse<u32>> = stages
        .iter()
        .filter(|s| s.parents.is_empty())
        .map(|s| Reverse(s.id))
        .collect();
    let mut order = Vec::with_capacity(stages.len());
    while let Some(Reverse(id)) = ready.pop() {
        order.push(id);
        for child in children.get(&id).into_iter().flatten() {
            if let Some(n) = pending.get_mut(child) {
                *n -= 1;
                if *n == 0 {
                    ready.push(Reverse(*child));
                }
            }
        }
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dag(id: u32, parents: &[u32]) -> TaskName {
        TaskName::Dag {
            id,
            parents: parents.to_vec(),
        }
    }

    #[test]
    fn parses_the_documented_forms() {
        assert_eq!(parse_task_name("M1"), dag(1, &[]));
        assert_eq!(parse_task_name("M5_3_4"), dag(5, &[3, 4]));
        assert_eq!(parse_task_name("R2_1"), dag(2, &[1]));
        assert_eq!(parse_task_name("J10_7_9_Stg4"), dag(10, &[7, 9]));
        assert_eq!(parse_task_name("M3_"), dag(3, &[]));
        assert_eq!(parse_task_name("R4_3_"), dag(4, &[3]));
        assert_eq!(parse_task_name("R4_3__"), dag(4, &[3]));
        assert_eq!(parse_task_name("MergeTask7_2"), dag(7, &[2]));
        assert_eq!(
            parse_task_name("task_Nzg3ODAwNTc5NjMyNDY2NDk0Nw=="),
            TaskName::Independent
        );
    }

    #[test]
    fn rejects_what_is_not_a_dag_name() {
        for name in [
            "",
            "_",
            "1",
            "M",
            "M_1",
            "M+1",
            "M1_+2",
            "M1__2",
            "M1_x",
            "M1_Stg",
            "M1_Stg4_5",
            "M99999999999",
            "M1_99999999999",
            "Mé1",
            "M1 ",
            " M1",
            "M1_2-3",
        ] {
            assert_eq!(parse_task_name(name), TaskName::Independent, "{name:?}");
        }
    }

    #[test]
    fn repairs_and_reports_problems() {
        let job = build_job([
            ("M1", 2),
            ("R2_1_1_9", 1),
            ("M3_3", 1),
            ("R1_2", 1),
            ("task_abc", 4),
        ]);
        // ids mentioned: 1, 2, 3, 9 -> fresh ids start at 10.
        assert_eq!(job.task_stage, vec![1, 2, 3, 10, 11]);
        assert_eq!(
            job.problems,
            vec![
                DagProblem::DuplicateStage {
                    id: 1,
                    name: "R1_2".into(),
                    renumbered: 10
                },
                DagProblem::MissingParent {
                    stage: 2,
                    parent: 9
                },
                DagProblem::SelfDependency { stage: 3 },
            ]
        );
        let parents: Vec<(u32, Vec<u32>)> = job
            .stages
            .iter()
            .map(|s| (s.id, s.parents.clone()))
            .collect();
        assert_eq!(
            parents,
            vec![
                (1, vec![]),
                (2, vec![1]),
                (3, vec![]),
                (10, vec![2]),
                (11, vec![])
            ]
        );
        assert_eq!(job.order, vec![1, 2, 3, 10, 11]);
        assert_eq!(job.stages[4].name.as_deref(), Some("task_abc"));
        assert_eq!(job.stages[4].num_tasks, 4);
    }

    #[test]
    fn cycles_are_reported_and_broken() {
        let job = build_job([("M1_3", 1), ("M2_1", 1), ("M3_2", 1), ("R4_3", 1)]);
        assert_eq!(job.problems, vec![DagProblem::Cycle(vec![1, 3, 2])]);
        assert_eq!(
            job.problems[0].to_string(),
            "dependency cycle 1 -> 3 -> 2 -> 1"
        );
        assert_eq!(job.order.len(), 4);
        let pos = |id: u32| job.order.iter().position(|&x| x == id).unwrap();
        for s in &job.stages {
            for &p in &s.parents {
                assert!(pos(p) < pos(s.id));
            }
        }
    }

    #[test]
    fn fresh_ids_wrap_past_the_largest_id() {
        let job = build_job([("M4294967295", 1), ("task_x", 1), ("M0", 1)]);
        assert_eq!(job.task_stage, vec![u32::MAX, 1, 0]);
        assert!(job.problems.is_empty());
    }
}
