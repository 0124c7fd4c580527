//! Property-based fuzzing of everything that reads untrusted bytes: the
//! event decoder and every trace adapter. Inputs are arbitrary bytes and
//! structure-aware mutations of valid inputs (truncation, flipped bytes,
//! values replaced by other JSON types, huge numbers, deep nesting, extra
//! and missing columns). Properties: nothing panics; the decoder answers
//! `Ok` or an error with a kind; whatever decodes or is emitted by an
//! adapter is valid on the wire; a bad row is skipped with its file and
//! line.
//!
//! The default case count is modest for CI; run more with e.g.
//! `PROPTEST_CASES=20000 cargo test --release --workspace -p jobcast-ingest --test fuzz`
//! (docs/reliability.md).

use std::path::PathBuf;

use jobcast_ingest::event::{DecodeErrorKind, Event, MAX_STRING_BYTES, decode, encode};
use jobcast_ingest::{Format, open};
use proptest::prelude::*;
use proptest::test_runner::Config;

fn config() -> Config {
    // `PROPTEST_CASES` overrides this default.
    Config {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(256),
        failure_persistence: None,
        ..Config::default()
    }
}

/// Valid events of every type, the seeds of the mutations.
const SEEDS: &[&str] = &[
    r#"{"v":1,"type":"job_submitted","time_us":600000000,"job_id":42,"user":"alice","job_name":"wc","logical_name":"wc-l","scheduling_class":2,"priority":9,"cpu_request":0.125,"mem_request":0.0625,"num_tasks":3,"stages":[{"id":1,"parents":[],"num_tasks":2,"name":"M1"},{"id":2,"parents":[1],"num_tasks":1}]}"#,
    r#"{"v":1,"type":"task","time_us":600000001,"job_id":42,"task_index":0,"kind":"schedule","machine_id":7,"stage":1}"#,
    r#"{"v":1,"type":"job_ended","time_us":700000000,"job_id":42,"outcome":"finish"}"#,
    r#"{"v":1,"type":"machine","time_us":0,"machine_id":9,"kind":"remove","platform":"p","cpus":0.5,"memory":0.25,"vm_name":"vm-1","vm_type":"n1-highcpu-16","zone":"us-east1-b","preemptible":true,"launch_time_us":0,"end_reason":"preempted"}"#,
];

/// JSON values of every type, including the awkward ones.
fn json_value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("null".to_owned()),
        any::<bool>().prop_map(|b| b.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|x| format!("{x:e}")),
        Just("18446744073709551616".to_owned()),
        Just("-0".to_owned()),
        Just("1e400".to_owned()),
        Just("1e30".to_owned()),
        Just("9223372036854775808".to_owned()),
        Just("\"\"".to_owned()),
        "[a-z_]{0,12}".prop_map(|s| format!("\"{s}\"")),
        (0usize..3).prop_map(|k| format!("\"{}\"", "é".repeat(MAX_STRING_BYTES / 2 + k - 1))),
        Just("[]".to_owned()),
        Just("{}".to_owned()),
        Just(r#"[{"id":1,"num_tasks":1}]"#.to_owned()),
        (1usize..400).prop_map(|d| format!("{}1{}", "[".repeat(d), "]".repeat(d))),
        (1usize..400).prop_map(|d| format!("{}{}", "{\"a\":".repeat(d), "}".repeat(d))),
        Just("\"\\ud800\"".to_owned()),
    ]
}

/// A seed event with one mutation applied.
fn mutated() -> impl Strategy<Value = Vec<u8>> {
    let seed = prop::sample::select(SEEDS);
    prop_oneof![
        // Truncated anywhere.
        (seed.clone(), any::<prop::sample::Index>())
            .prop_map(|(s, i)| s.as_bytes()[..i.index(s.len())].to_vec()),
        // Bytes flipped.
        (
            seed.clone(),
            prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4)
        )
            .prop_map(|(s, flips)| {
                let mut b = s.as_bytes().to_vec();
                for (i, x) in flips {
                    let at = i.index(b.len());
                    b[at] = x;
                }
                b
            }),
        // A field's value replaced by another JSON value.
        (seed.clone(), any::<prop::sample::Index>(), json_value()).prop_map(|(s, i, value)| {
            let mut object: serde_json::Map<String, serde_json::Value> =
                serde_json::from_str(s).unwrap();
            let keys: Vec<String> = object.keys().cloned().collect();
            let key = &keys[i.index(keys.len())];
            object.insert(key.clone(), serde_json::Value::Null);
            let text = serde_json::to_string(&object).unwrap();
            text.replacen(&format!("\"{key}\":null"), &format!("\"{key}\":{value}"), 1)
                .into_bytes()
        }),
        // A field removed, or an extra one added.
        (seed.clone(), any::<prop::sample::Index>(), json_value()).prop_map(|(s, i, value)| {
            let mut object: serde_json::Map<String, serde_json::Value> =
                serde_json::from_str(s).unwrap();
            let keys: Vec<String> = object.keys().cloned().collect();
            let key = &keys[i.index(keys.len())];
            if value.len() % 2 == 0 {
                object.remove(key);
                serde_json::to_vec(&object).unwrap()
            } else {
                let text = serde_json::to_string(&object).unwrap();
                format!("{},\"extra\":{value}}}", &text[..text.len() - 1]).into_bytes()
            }
        }),
        // Trailing garbage, or a second document.
        (seed, prop::collection::vec(any::<u8>(), 0..8)).prop_map(|(s, tail)| [
            s.as_bytes(),
            &tail
        ]
        .concat()),
    ]
}

/// The decoder's contract on any input.
fn check_decode(bytes: &[u8]) -> Result<(), TestCaseError> {
    match decode(bytes) {
        Ok(event) => {
            let mut wire = Vec::new();
            encode(&event, &mut wire);
            let again = decode(&wire).map_err(|e| {
                TestCaseError::fail(format!("decoded event does not decode after encoding: {e}"))
            })?;
            prop_assert!(same(&again, &event), "{event:?} became {again:?}");
        }
        Err(e) => {
            let text = e.to_string();
            prop_assert!(!text.is_empty());
            prop_assert!(
                text.chars().count() < 600,
                "long error: {} chars",
                text.len()
            );
            if let Some(field) = &e.field {
                prop_assert!(text.contains(field.as_str()), "{text}");
            }
            if e.kind == DecodeErrorKind::Syntax {
                prop_assert!(e.field.is_none() || !text.is_empty());
            }
        }
    }
    Ok(())
}

/// Equal, allowing a float read back one ulp off: serde_json without its
/// `float_roundtrip` feature parses some decimal strings to a neighbour of
/// the value that printed them.
fn same(a: &Event, b: &Event) -> bool {
    let close = |x: f64, y: f64| x == y || (x - y).abs() <= y.abs() * 4.0 * f64::EPSILON;
    let opt = |x: Option<f64>, y: Option<f64>| match (x, y) {
        (Some(x), Some(y)) => close(x, y),
        (x, y) => x == y,
    };
    match (a, b) {
        (Event::JobSubmitted(x), Event::JobSubmitted(y)) => {
            let mut x2 = x.clone();
            x2.cpu_request = y.cpu_request;
            x2.mem_request = y.mem_request;
            x2 == *y && close(x.cpu_request, y.cpu_request) && close(x.mem_request, y.mem_request)
        }
        (Event::Machine(x), Event::Machine(y)) => {
            let mut x2 = x.clone();
            x2.cpus = y.cpus;
            x2.memory = y.memory;
            x2 == *y && opt(x.cpus, y.cpus) && opt(x.memory, y.memory)
        }
        _ => a == b,
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn decode_takes_any_bytes(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        check_decode(&bytes)?;
    }

    #[test]
    fn decode_takes_any_mutation_of_a_valid_event(bytes in mutated()) {
        check_decode(&bytes)?;
    }
}

#[test]
fn every_seed_decodes() {
    for seed in SEEDS {
        assert!(decode(seed.as_bytes()).is_ok(), "{seed}");
    }
}

/// One trace adapter and a small valid input for it: the files (relative
/// path, lines) to write, and the path to open.
struct Fixture {
    format: Format,
    files: Vec<(&'static str, Vec<String>)>,
    open_at: &'static str,
    /// Does the adapter report skipped rows by line (not by record name)?
    by_line: bool,
}

fn fixtures() -> Vec<Fixture> {
    let lines = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    vec![
        Fixture {
            format: Format::Jsonl,
            files: vec![("events.jsonl", lines(&SEEDS[..3]))],
            open_at: "events.jsonl",
            by_line: true,
        },
        Fixture {
            format: Format::Google2011,
            files: vec![
                (
                    "job_events/part-00000-of-00001.csv",
                    lines(&[
                        "0,,10,0,alice,2,wc,wc-l",
                        "5000000,,11,0,bob,1,sort,sort-l",
                        "90000000,,10,4,alice,2,wc,wc-l",
                    ]),
                ),
                (
                    "task_events/part-00000-of-00001.csv",
                    lines(&[
                        "0,,10,0,,0,alice,2,9,0.125,0.0625,0.001,0",
                        "1000000,,10,0,7,1,alice,2,9,0.125,0.0625,0.001,0",
                        "5000000,,11,0,,0,bob,1,3,0.25,0.125,0.001,0",
                        "6000000,,11,0,8,1,bob,1,3,0.25,0.125,0.001,0",
                        "80000000,,10,0,7,4,alice,2,9,0.125,0.0625,0.001,0",
                        "100000000,,11,0,8,4,bob,1,3,0.25,0.125,0.001,0",
                    ]),
                ),
                (
                    "machine_events/part-00000-of-00001.csv",
                    lines(&["0,7,0,P1,0.5,0.25", "0,8,0,P1,0.5,0.25"]),
                ),
            ],
            open_at: ".",
            by_line: true,
        },
        Fixture {
            format: Format::Google2019,
            files: vec![
                (
                    "collection_events-0.json",
                    lines(&[
                        r#"{"time":"0","type":"0","collection_id":"100","priority":200,"scheduling_class":2,"collection_type":0,"user":"alice","collection_name":"wc","collection_logical_name":"wc-logical"}"#,
                        r#"{"time":"90","type":"6","collection_id":"100","priority":200,"scheduling_class":2,"collection_type":0,"user":"alice","collection_name":"wc","collection_logical_name":"wc-logical"}"#,
                    ]),
                ),
                (
                    "instance_events-0.json",
                    lines(&[
                        r#"{"time":"1","type":"0","collection_id":"100","instance_index":0,"resource_request":{"cpus":0.1,"memory":0.2}}"#,
                        r#"{"time":"2","type":"3","collection_id":"100","instance_index":0,"machine_id":"8"}"#,
                        r#"{"time":"80","type":"6","collection_id":"100","instance_index":0,"machine_id":"8"}"#,
                    ]),
                ),
            ],
            open_at: ".",
            by_line: true,
        },
        Fixture {
            format: Format::Alibaba2018,
            files: vec![
                (
                    "batch_task.csv",
                    lines(&[
                        "M1,2,j_1,1,Terminated,100,130,100,0.5",
                        "R2_1,1,j_1,1,Terminated,140,160,200,0.8",
                    ]),
                ),
                (
                    "batch_instance.csv",
                    lines(&[
                        "ins_1,M1,j_1,1,Terminated,101,128,m_12,1,1,50,80,0.3,0.4",
                        "ins_2,M1,j_1,1,Terminated,102,125,m_11,1,1,50,80,0.3,0.4",
                        "ins_3,R2_1,j_1,1,Terminated,141,159,m_11,1,1,50,80,0.3,0.4",
                    ]),
                ),
            ],
            open_at: ".",
            by_line: true,
        },
        Fixture {
            format: Format::GceLifetimes,
            files: vec![(
                "data.json",
                vec![
                    r#"{"vm-1":{"instance_data":{"ZONE":"us-east1-b","MACHINE_TYPE":"n1-highcpu-16","PREEMPTIBLE":true},"time_in_sec":3600.5,"insert":{"insertTime":"2019-01-01T00:00:00.000-08:00","targetId":"1"},"compute.instances.preempted":{"insertTime":"2019-01-01T01:00:00.500-08:00","targetId":"1"}},"#.to_owned(),
                    r#""vm-2":{"instance_data":{"ZONE":"us-east1-c","MACHINE_TYPE":"n1-highcpu-2","PREEMPTIBLE":true},"time_in_sec":600,"insert":{"insertTime":"2019-01-01T00:10:00.000-08:00","targetId":"2"},"stop":{"insertTime":"2019-01-01T00:20:00.000-08:00","targetId":"2"}}}"#.to_owned(),
                ],
            )],
            open_at: "data.json",
            by_line: false,
        },
        Fixture {
            format: Format::Swf,
            files: vec![(
                "log.swf",
                lines(&[
                    "; Version: 2.2",
                    "; UnixStartTime: 843480031",
                    "; MaxProcs: 100",
                    "1 0 10 3600 4 -1 -1 4 7200 -1 1 3 2 7 1 -1 -1 -1",
                    "2 60 0 120 1 -1 -1 1 600 -1 0 4 2 -1 1 -1 -1 -1",
                    "3 90 30 -1 8 -1 -1 8 600 -1 5 3 2 7 1 -1 -1 -1",
                ]),
            )],
            open_at: "log.swf",
            by_line: true,
        },
        Fixture {
            format: Format::Sacct,
            files: vec![(
                "sacct.txt",
                lines(&[
                    "JobID|JobName|User|Partition|NCPUS|ReqMem|TimelimitRaw|Submit|Start|End|State",
                    "7|sim|alice|batch|4|2Gc|60|2026-01-15T10:00:00|2026-01-15T10:00:05|2026-01-15T10:20:00|COMPLETED",
                    "7.batch|batch||batch|4||||2026-01-15T10:00:05|2026-01-15T10:20:00|COMPLETED",
                    "8_0|arr|bob|batch|1|1000M|10|2026-01-15T10:01:00|2026-01-15T10:01:00|2026-01-15T10:03:00|FAILED",
                    "8_1|arr|bob|batch|1|1000M|10|2026-01-15T10:01:00|2026-01-15T10:02:00|2026-01-15T10:12:00|TIMEOUT",
                    "9|long|carol|batch|2|1G|120|2026-01-15T10:05:00|2026-01-15T10:06:00|Unknown|RUNNING",
                ]),
            )],
            open_at: "sacct.txt",
            by_line: true,
        },
    ]
}

/// What reading a trace gave.
struct Read {
    events: Vec<Event>,
    skipped: u64,
    skipped_lines: Vec<(PathBuf, u64)>,
}

/// Write `files` under a fresh directory, open it with `format` and read
/// it to the end, checking the adapter contract on the way: errors and
/// skipped rows name a file of the input, every event is valid on the wire.
fn read_trace(
    format: Format,
    files: &[(&str, Vec<u8>)],
    open_at: &str,
) -> Result<Option<Read>, TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes) in files {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }
    let names_input = |text: &str| text.contains(&dir.path().display().to_string());
    let trace = match open(format, &dir.path().join(open_at)) {
        Ok(trace) => trace,
        Err(e) => {
            prop_assert!(names_input(&e.to_string()), "{e}");
            return Ok(None);
        }
    };
    let diagnostics = trace.diagnostics().clone();
    let mut events = Vec::new();
    for item in trace {
        match item {
            Ok(event) => {
                let mut wire = Vec::new();
                encode(&event, &mut wire);
                let decoded = decode(&wire).map_err(|e| {
                    TestCaseError::fail(format!(
                        "{format:?} emitted an event the decoder refuses ({e}): {}",
                        String::from_utf8_lossy(&wire)
                    ))
                })?;
                prop_assert!(same(&decoded, &event));
                events.push(event);
            }
            Err(e) => {
                prop_assert!(names_input(&e.to_string()), "{e}");
                return Ok(None);
            }
        }
    }
    let examples = diagnostics.examples();
    for skipped in &examples {
        prop_assert!(
            skipped.at.file.starts_with(dir.path()),
            "{} {}",
            skipped.at,
            skipped.reason
        );
    }
    Ok(Some(Read {
        events,
        skipped: diagnostics.skipped_total(),
        skipped_lines: examples
            .iter()
            .filter(|s| s.at.record.is_none())
            .map(|s| {
                (
                    s.at.file.strip_prefix(dir.path()).unwrap().to_owned(),
                    s.at.line,
                )
            })
            .collect(),
    }))
}

fn join(lines: &[String]) -> Vec<u8> {
    let mut text = lines.join("\n");
    text.push('\n');
    text.into_bytes()
}

#[test]
fn every_fixture_reads_cleanly() {
    for fixture in fixtures() {
        let files: Vec<(&str, Vec<u8>)> =
            fixture.files.iter().map(|(n, l)| (*n, join(l))).collect();
        let read = read_trace(fixture.format, &files, fixture.open_at)
            .unwrap()
            .unwrap_or_else(|| panic!("{:?} fixture opens", fixture.format));
        assert!(!read.events.is_empty(), "{:?}", fixture.format);
        assert_eq!(read.skipped, 0, "{:?}", fixture.format);
    }
}

/// A line that is bad in every line-based format: wrong column count, not
/// JSON, not a number where one is needed.
fn bad_line() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("{oops".to_owned()),
        Just(",,,".to_owned()),
        Just("\u{0}\u{1}garbage".to_owned()),
        "[a-z,]{1,40}",
        Just(",".repeat(100_000)),
        Just("x".repeat(5 << 20)),
    ]
}

/// A mutation of one line of a valid fixture.
#[derive(Debug, Clone)]
enum LineMutation {
    Truncate(prop::sample::Index),
    Flip(prop::sample::Index, u8),
    /// Replace the `n`-th field (comma-separated) with `value`.
    Field(prop::sample::Index, String),
    Duplicate,
    Delete,
}

fn line_mutation() -> impl Strategy<Value = LineMutation> {
    prop_oneof![
        any::<prop::sample::Index>().prop_map(LineMutation::Truncate),
        (any::<prop::sample::Index>(), any::<u8>()).prop_map(|(i, b)| LineMutation::Flip(i, b)),
        (
            any::<prop::sample::Index>(),
            json_value().boxed().prop_union(
                prop_oneof![
                    Just("-1".to_owned()),
                    Just("NaN".to_owned()),
                    Just("inf".to_owned()),
                    Just("99999999999999999999999".to_owned()),
                    Just("1e300".to_owned()),
                    Just("-9223372036854775808".to_owned()),
                    Just("4294967296".to_owned()),
                    Just("\"\"".to_owned()),
                ]
                .boxed()
            )
        )
            .prop_map(|(i, v)| LineMutation::Field(i, v)),
        Just(LineMutation::Duplicate),
        Just(LineMutation::Delete),
    ]
}

fn apply(line: &str, mutation: &LineMutation) -> Vec<Vec<u8>> {
    let bytes = line.as_bytes();
    match mutation {
        LineMutation::Truncate(i) => vec![bytes[..i.index(bytes.len() + 1)].to_vec()],
        // An earlier mutation may have emptied the line: nothing to flip.
        LineMutation::Flip(..) if bytes.is_empty() => vec![Vec::new()],
        LineMutation::Flip(i, b) => {
            let mut out = bytes.to_vec();
            let at = i.index(out.len());
            out[at] = *b;
            vec![out]
        }
        LineMutation::Field(i, value) => {
            let mut fields: Vec<&str> = line.split(',').collect();
            let at = i.index(fields.len());
            // JSON lines: replace the value after the key, not the key.
            let replaced;
            if let Some((key, _)) = fields[at].split_once(':') {
                replaced = format!("{key}:{value}");
                fields[at] = &replaced;
                vec![fields.join(",").into_bytes()]
            } else {
                fields[at] = value;
                vec![fields.join(",").into_bytes()]
            }
        }
        LineMutation::Duplicate => vec![bytes.to_vec(), bytes.to_vec()],
        LineMutation::Delete => vec![],
    }
}

proptest! {
    #![proptest_config(config())]

    /// Any bytes in any input file: no panic, errors name the input.
    #[test]
    fn adapters_take_any_bytes(
        fixture in 0usize..7,
        file in any::<prop::sample::Index>(),
        bytes in prop::collection::vec(any::<u8>(), 0..512),
    ) {
        let fixture = &fixtures()[fixture];
        let target = file.index(fixture.files.len());
        let files: Vec<(&str, Vec<u8>)> = fixture
            .files
            .iter()
            .enumerate()
            .map(|(i, (n, l))| (*n, if i == target { bytes.clone() } else { join(l) }))
            .collect();
        read_trace(fixture.format, &files, fixture.open_at)?;
    }

    /// Valid files with some lines mutated: no panic, every event valid.
    #[test]
    fn adapters_take_mutated_lines(
        fixture in 0usize..7,
        mutations in prop::collection::vec(
            (any::<prop::sample::Index>(), any::<prop::sample::Index>(), line_mutation()),
            1..4,
        ),
    ) {
        let fixture = &fixtures()[fixture];
        let mut contents: Vec<Vec<Vec<u8>>> = fixture
            .files
            .iter()
            .map(|(_, lines)| lines.iter().map(|l| l.clone().into_bytes()).collect())
            .collect();
        for (file, line, mutation) in &mutations {
            let f = file.index(contents.len());
            let lines = &mut contents[f];
            if lines.is_empty() {
                continue;
            }
            let at = line.index(lines.len());
            let original = String::from_utf8_lossy(&lines[at]).into_owned();
            lines.splice(at..=at, apply(&original, mutation));
        }
        let files: Vec<(&str, Vec<u8>)> = fixture
            .files
            .iter()
            .zip(contents)
            .map(|((name, _), lines)| {
                let mut bytes = lines.join(&b'\n');
                bytes.push(b'\n');
                (*name, bytes)
            })
            .collect();
        read_trace(fixture.format, &files, fixture.open_at)?;
    }

    /// One bad line in an otherwise valid line-based file is skipped and
    /// reported with its file and line number; the rest still reads.
    #[test]
    fn a_bad_line_is_reported_by_file_and_line(
        fixture in 0usize..7,
        file in any::<prop::sample::Index>(),
        at in any::<prop::sample::Index>(),
        bad in bad_line(),
    ) {
        let fixture = &fixtures()[fixture];
        prop_assume!(fixture.by_line);
        let target = file.index(fixture.files.len());
        let mut files: Vec<(&str, Vec<String>)> = fixture.files.clone();
        let lines = &mut files[target].1;
        let index = at.index(lines.len() + 1);
        lines.insert(index, bad.clone());
        let bytes: Vec<(&str, Vec<u8>)> = files.iter().map(|(n, l)| (*n, join(l))).collect();
        let Some(read) = read_trace(fixture.format, &bytes, fixture.open_at)? else {
            // Google 2019 files are JSON lines or CSV, told apart by their
            // first line, and a sacct output's first line is the header
            // naming its columns: a bad first line makes the whole file an
            // error (which read_trace checked names the file). Nothing
            // else may.
            prop_assert!(
                matches!(fixture.format, Format::Google2019 | Format::Sacct) && index == 0,
                "{:?}: a bad line at {index} stopped the whole trace",
                fixture.format
            );
            return Ok(());
        };
        // An empty line is not a row in any format.
        if !bad.is_empty() {
            let want = (PathBuf::from(files[target].0), index as u64 + 1);
            prop_assert!(
                read.skipped_lines.contains(&want),
                "{:?}: line {} of {} ({:?}…) not reported: {:?}",
                fixture.format,
                want.1,
                want.0.display(),
                &bad[..bad.len().min(20)],
                read.skipped_lines
            );
        }
        prop_assert!(!read.events.is_empty());
    }
}
