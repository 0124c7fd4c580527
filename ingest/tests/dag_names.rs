//! The Alibaba v2018 DAG task-name parser: properties on arbitrary input,
//! and every real task name in the derived SLAMBUC samples of `batch_task`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::BufRead;
use std::path::Path;

use jobcast_ingest::dag::{DagProblem, JobDag, TaskName, build_job, parse_task_name};
use jobcast_ingest::source::{Diagnostics, open_input};
use proptest::prelude::*;

fn format_name(letters: &str, id: u32, parents: &[u32]) -> String {
    let mut name = format!("{letters}{id}");
    for p in parents {
        name += &format!("_{p}");
    }
    name
}

/// What must hold for any job, whatever its names.
fn check_invariants(rows: &[(String, u32)], job: &JobDag) {
    assert_eq!(job.stages.len(), rows.len());
    assert_eq!(job.task_stage.len(), rows.len());
    let ids: HashSet<u32> = job.stages.iter().map(|s| s.id).collect();
    assert_eq!(ids.len(), rows.len(), "stage ids are unique");
    assert!(
        job.stages.windows(2).all(|w| w[0].id < w[1].id),
        "sorted by id"
    );
    for (i, (name, n)) in rows.iter().enumerate() {
        let stage = job
            .stages
            .iter()
            .find(|s| s.id == job.task_stage[i])
            .unwrap();
        assert_eq!(stage.name.as_deref(), Some(name.as_str()));
        assert_eq!(stage.num_tasks, *n);
    }
    let mut order = job.order.clone();
    order.sort_unstable();
    assert_eq!(
        order,
        job.stages.iter().map(|s| s.id).collect::<Vec<_>>(),
        "order is a permutation"
    );
    let pos: HashMap<u32, usize> = job
        .order
        .iter()
        .enumerate()
        .map(|(i, &id)| (id, i))
        .collect();
    for s in &job.stages {
        assert!(
            s.parents.windows(2).all(|w| w[0] < w[1]),
            "parents sorted, unique"
        );
        for p in &s.parents {
            assert!(ids.contains(p), "parent {p} exists");
            assert!(pos[p] < pos[&s.id], "parents come first");
        }
    }
}

fn cycles(job: &JobDag) -> Vec<&Vec<u32>> {
    job.problems
        .iter()
        .filter_map(|p| match p {
            DagProblem::Cycle(c) => Some(c),
            _ => None,
        })
        .collect()
}

/// A random DAG: stage `ids[i]` depends on some of `ids[..i]`.
fn random_dag() -> impl Strategy<Value = (Vec<u32>, Vec<Vec<usize>>, Vec<String>)> {
    (1usize..25)
        .prop_flat_map(|n| {
            (
                proptest::collection::hash_set(0u32..1000, n),
                proptest::collection::vec(
                    proptest::collection::vec(any::<prop::sample::Index>(), 0..4),
                    n,
                ),
                proptest::collection::vec("[A-Z]{1,2}", n),
            )
        })
        .prop_map(|(ids, picks, letters)| {
            let ids: Vec<u32> = ids.into_iter().collect();
            let parents = picks
                .iter()
                .enumerate()
                .map(|(i, picks)| {
                    let mut p: Vec<usize> = if i == 0 {
                        vec![]
                    } else {
                        picks.iter().map(|x| x.index(i)).collect()
                    };
                    p.sort_unstable();
                    p.dedup();
                    p
                })
                .collect();
            (ids, parents, letters)
        })
}

proptest! {
    #[test]
    fn names_round_trip(letters in "[A-Za-z]{1,4}", id in any::<u32>(), parents in proptest::collection::vec(any::<u32>(), 0..8)) {
        let name = format_name(&letters, id, &parents);
        prop_assert_eq!(parse_task_name(&name), TaskName::Dag { id, parents: parents.clone() });
        prop_assert_eq!(parse_task_name(&format!("{name}_")), TaskName::Dag { id, parents: parents.clone() });
        prop_assert_eq!(parse_task_name(&format!("{name}_Stg{id}")), TaskName::Dag { id, parents });
    }

    #[test]
    fn arbitrary_names_never_panic(name in any::<String>(), shaped in "[A-Za-z_0-9=+/]{0,20}") {
        parse_task_name(&name);
        parse_task_name(&shaped);
    }

    #[test]
    fn arbitrary_jobs_build(rows in proptest::collection::vec(("([MRJ][0-9]{1,2}(_[0-9]{1,2}){0,3}_?)|task_[a-z]{2}|.{0,6}", 0u32..5), 0..20)) {
        let job = build_job(rows.iter().map(|(n, c)| (n.as_str(), *c)));
        check_invariants(&rows, &job);
    }

    #[test]
    fn random_dags_are_acyclic_until_a_back_edge((ids, parents, letters) in random_dag(), pick in any::<prop::sample::Index>()) {
        let names: Vec<String> = (0..ids.len())
            .map(|i| format_name(&letters[i], ids[i], &parents[i].iter().map(|&p| ids[p]).collect::<Vec<_>>()))
            .collect();
        let rows: Vec<(String, u32)> = names.iter().map(|n| (n.clone(), 1)).collect();
        let job = build_job(rows.iter().map(|(n, c)| (n.as_str(), *c)));
        check_invariants(&rows, &job);
        prop_assert!(job.problems.is_empty(), "{:?}", job.problems);
        for (i, &id) in ids.iter().enumerate() {
            let mut want: Vec<u32> = parents[i].iter().map(|&p| ids[p]).collect();
            want.sort_unstable();
            prop_assert_eq!(&job.stages.iter().find(|s| s.id == id).unwrap().parents, &want);
        }

        // Pick an edge child -> parent and make the parent depend on the child.
        let edges: Vec<(usize, usize)> = parents.iter().enumerate().flat_map(|(c, ps)| ps.iter().map(move |&p| (c, p))).collect();
        prop_assume!(!edges.is_empty());
        let (child, parent) = edges[pick.index(edges.len())];
        let mut with_back = rows.clone();
        with_back[parent].0 += &format!("_{}", ids[child]);
        let job = build_job(with_back.iter().map(|(n, c)| (n.as_str(), *c)));
        check_invariants(&with_back, &job);
        // Every cycle runs through the new edge, so holds both its ends.
        let found = cycles(&job);
        prop_assert!(!found.is_empty(), "{:?}", job.problems);
        prop_assert_eq!(found.len(), job.problems.len());
        for cycle in found {
            prop_assert!(cycle.contains(&ids[child]) && cycle.contains(&ids[parent]), "{:?}", cycle);
        }
    }
}

/// The documented anomalies, each in a job of its own.
#[test]
fn documented_anomalies() {
    let job = build_job([
        ("M1", 2),
        ("J10_7_9_Stg4", 1),
        ("M7_1", 1),
        ("M9_", 3),
        ("R4_3_", 1),
    ]);
    let parents: BTreeMap<u32, Vec<u32>> = job
        .stages
        .iter()
        .map(|s| (s.id, s.parents.clone()))
        .collect();
    assert_eq!(parents[&10], vec![7, 9]);
    assert_eq!(parents[&9], Vec::<u32>::new());
    assert_eq!(parents[&4], Vec::<u32>::new());
    assert_eq!(
        job.problems,
        vec![DagProblem::MissingParent {
            stage: 4,
            parent: 3
        }]
    );

    let job = build_job([
        ("M1_2", 1),
        ("M2_1", 1),
        ("M3_3", 1),
        ("task_Nzg3ODAw==", 5),
    ]);
    assert_eq!(
        job.problems,
        vec![
            DagProblem::SelfDependency { stage: 3 },
            DagProblem::Cycle(vec![1, 2])
        ]
    );
    assert_eq!(
        job.stages.iter().map(|s| s.id).collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
    assert_eq!(job.order, vec![2, 1, 3, 4]);
}

/// A long chain closed into one cycle must neither hang nor overflow the stack.
#[test]
fn long_cycle() {
    let n = 200_000u32;
    let names: Vec<String> = (1..=n)
        .map(|i| format!("M{i}_{}", if i == 1 { n } else { i - 1 }))
        .collect();
    let job = build_job(names.iter().map(|s| (s.as_str(), 1)));
    let found = cycles(&job);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].len(), n as usize);
    assert_eq!(job.order.len(), n as usize);
}

/// Counts measured on one file of real names. The SLAMBUC samples hold no
/// cycles, missing parents, duplicate ids or self-dependencies (checked
/// independently), nor `Stg` suffixes or trailing underscores.
#[derive(Debug, Default, PartialEq, Eq)]
struct Counts {
    rows: usize,
    jobs: usize,
    dag_names: usize,
    independent_names: usize,
    /// Jobs whose tasks are all DAG tasks, all independent, or both kinds.
    dag_jobs: usize,
    independent_jobs: usize,
    mixed_jobs: usize,
    /// Dependency edges of the canonical stages (names repeating a parent
    /// count it once).
    edges: usize,
    /// DAG names of exactly 50 characters: they look cut off (e.g.
    /// `J91_52_54_..._79_8`), so their last parent may be truncated.
    names_of_50_chars: usize,
    cycles: usize,
    missing_parents: usize,
    self_dependencies: usize,
    duplicate_stages: usize,
}

fn real_file(name: &str) -> std::path::PathBuf {
    let path = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/data/alibaba-cluster-trace-v2018-derived-slambuc"
    ))
    .join(name);
    assert!(path.exists(), "{} is absent", path.display());
    path
}

/// Columns `x, job, task_name, duration, cpu, mem, num`, no header.
fn measure(path: &Path) -> Counts {
    let input = open_input(path, &Diagnostics::new()).unwrap();
    let mut jobs: BTreeMap<String, Vec<(String, u32)>> = BTreeMap::new();
    let mut counts = Counts::default();
    for line in input.lines() {
        let line = line.unwrap();
        let cols: Vec<&str> = line.split(',').collect();
        assert_eq!(cols.len(), 7, "{line}");
        counts.rows += 1;
        match parse_task_name(cols[2]) {
            TaskName::Dag { .. } => {
                counts.dag_names += 1;
                counts.names_of_50_chars += usize::from(cols[2].len() == 50);
            }
            TaskName::Independent => {
                // Every name is understood: the only independent ones are
                // the documented random `task_...` names.
                assert!(cols[2].starts_with("task_"), "unparsed name {:?}", cols[2]);
                counts.independent_names += 1;
            }
        }
        jobs.entry(cols[1].to_owned())
            .or_default()
            .push((cols[2].to_owned(), cols[6].parse().unwrap()));
    }
    counts.jobs = jobs.len();
    for rows in jobs.values() {
        let job = build_job(rows.iter().map(|(n, c)| (n.as_str(), *c)));
        check_invariants(rows, &job);
        let dag = rows
            .iter()
            .filter(|(n, _)| matches!(parse_task_name(n), TaskName::Dag { .. }))
            .count();
        match dag {
            0 => counts.independent_jobs += 1,
            d if d == rows.len() => counts.dag_jobs += 1,
            _ => counts.mixed_jobs += 1,
        }
        counts.edges += job.stages.iter().map(|s| s.parents.len()).sum::<usize>();
        for problem in &job.problems {
            match problem {
                DagProblem::Cycle(_) => counts.cycles += 1,
                DagProblem::MissingParent { .. } => counts.missing_parents += 1,
                DagProblem::SelfDependency { .. } => counts.self_dependencies += 1,
                DagProblem::DuplicateStage { .. } => counts.duplicate_stages += 1,
            }
        }
    }
    counts
}

#[test]
#[ignore = "needs ../shared/data, the shared traces: scripts/test.sh runs it where they exist"]
fn real_names_sample_tasks() {
    let path = real_file("sample_tasks.csv.gz");
    let counts = measure(&path);
    println!("{counts:?}");
    assert_eq!(
        counts,
        Counts {
            rows: 67_634,
            jobs: 16_749,
            dag_names: 64_860,
            independent_names: 2_774,
            dag_jobs: 15_478,
            independent_jobs: 1_271,
            edges: 52_829,
            names_of_50_chars: 9,
            ..Counts::default()
        }
    );
}

#[test]
#[ignore = "needs ../shared/data, the shared traces: scripts/test.sh runs it where they exist"]
fn real_names_batch_task() {
    let path = real_file("batch_task.csv.gz");
    let counts = measure(&path);
    println!("{counts:?}");
    assert_eq!(
        counts,
        Counts {
            rows: 6_615,
            jobs: 1_679,
            dag_names: 6_304,
            independent_names: 311,
            dag_jobs: 1_540,
            independent_jobs: 139,
            edges: 5_078,
            ..Counts::default()
        }
    );
}
