//! Measured spot-instance preemptions: SkyPilot's spot traces
//! (`skypilot-org/spot-traces`; Wu et al., "Can't Be Late", NSDI 2024).
//!
//! Each file is `{"metadata": {"gap_seconds": G}, "data": [n, n, …]}`: the
//! spot instances alive at each tick of `G` seconds, for one instance type
//! in one zone, named `ZONE_TYPE.json` (`us-east-1b_intel_64.json`) in a
//! directory named for the provider and the day the collection started
//! (`aws-04-19-2023`). In a preemption trace one instance was launched and
//! relaunched as soon as it was taken back, so a run of 1s is one
//! instance's life and the 0 after it its preemption.
//!
//! Each run becomes a `machine` `add` event at its first tick and a
//! `remove` event at the tick after its last, `end_reason` `preempted`;
//! the run still alive when the trace ends is removed at its end as
//! `stopped`, a right-censored lifetime, as a user stop is. Lifetimes are
//! known to one tick. Times start at midnight UTC of the directory's date
//! (tick 0), or at 0 when the directory names none.
//!
//! Only single-instance traces are read this way: when more than one
//! instance is alive, which one a decrease took is unknown, so such a file
//! is skipped and reported. A file that is not such a trace is skipped by
//! name; the other files go on.
//!
//! [`Reading::Hibernation`] reads the same files as a spot VM that
//! hibernates instead of dying (Teylo et al.; EC2's `hibernate`
//! interruption behaviour): one VM per file, its market's capacity being
//! any instance alive. The VM is added at the first tick with capacity,
//! `hibernate`s at each tick its market has none after having some, and
//! `resume`s at the tick capacity comes back; at the trace's end it is
//! removed as `stopped`. Here a multi-instance (availability) trace is
//! read as well: the count only says whether the market has capacity.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::event::{EndReason, Event, MachineEvent, MachineKind, VmInfo};
use crate::ids::stable_id;
use crate::source::{Diagnostics, Location, Trace, TraceError, list_files, open_input, total_size};

#[derive(Deserialize)]
struct SpotTrace {
    metadata: Metadata,
    data: Vec<u32>,
}

#[derive(Deserialize)]
struct Metadata {
    gap_seconds: f64,
}

/// What a spot trace's runs of capacity are taken for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    /// Each run is one instance's life, ended by a preemption.
    Lifetimes,
    /// Each file is one VM, hibernated between runs.
    Hibernation,
}

/// Open one trace file, or a directory of them (every `.json` file under
/// it), read as `reading` says.
pub fn open(input: &Path, reading: Reading) -> Result<Trace, TraceError> {
    let files: Vec<PathBuf> = list_files(input, "")?
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    if files.is_empty() {
        return Err(TraceError::invalid(input, "no `.json` spot trace under it"));
    }
    let diagnostics = Diagnostics::new();
    let mut events = Vec::new();
    for file in &files {
        diagnostics.rows(1);
        let at = Location {
            file: file.clone(),
            line: 0,
            record: None,
        };
        match file_events(file, reading, &diagnostics) {
            Ok(all) => events.extend(
                all.into_iter()
                    .filter(|e| diagnostics.within_limits(e, |_| at.clone())),
            ),
            Err((class, detail)) => diagnostics.skip(at, class, detail),
        }
    }
    events.sort_by_key(Event::time_us);
    let size = total_size(&files);
    Ok(Trace::new(events.into_iter().map(Ok), diagnostics, size))
}

fn file_events(
    file: &Path,
    reading: Reading,
    diagnostics: &Diagnostics,
) -> Result<Vec<Event>, (&'static str, String)> {
    let reader = open_input(file, diagnostics).map_err(|e| ("io", e.to_string()))?;
    let trace: SpotTrace = serde_json::from_reader(reader).map_err(|e| {
        (
            "invalid_record",
            format!("not a spot trace (metadata.gap_seconds, data): {e}"),
        )
    })?;
    let gap = trace.metadata.gap_seconds;
    if !(gap.is_finite() && gap > 0.0) {
        return Err((
            "invalid_field",
            format!("metadata.gap_seconds {gap} is not a positive duration"),
        ));
    }
    if let Some(n) = trace.data.iter().find(|&&n| n > 1)
        && reading == Reading::Lifetimes
    {
        return Err((
            "multi_instance",
            format!("{n} instances alive at once: which one a decrease took is unknown"),
        ));
    }
    let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    let (zone, vm_type) = stem
        .split_once('_')
        .ok_or(("invalid_name", format!("`{stem}` is not ZONE_TYPE")))?;
    let origin_us = match file
        .parent()
        .and_then(|d| d.file_name())
        .and_then(|n| n.to_str())
        .and_then(day_of)
    {
        Some(us) => us,
        None => {
            diagnostics.note("spot traces without a dated directory (times from 0)");
            0
        }
    };
    let tick_us = |i: usize| origin_us + (i as f64 * gap * 1e6).round() as u64;
    let vm = |launch_time_us: u64, end_reason: Option<EndReason>| VmInfo {
        name: None,
        vm_type: vm_type.to_owned(),
        zone: zone.to_owned(),
        preemptible: true,
        launch_time_us,
        end_reason,
    };
    let machine = |machine_id, time_us, kind, vm| {
        Event::Machine(MachineEvent::of_vm(time_us, machine_id, kind, vm))
    };
    let ticks = trace.data.len();
    let events = match reading {
        Reading::Lifetimes => {
            let mut events = Vec::new();
            let mut start = None;
            for (i, &alive) in trace.data.iter().chain(std::iter::once(&0)).enumerate() {
                match (start, alive) {
                    (None, 1) => start = Some(i),
                    (Some(first), 0) => {
                        let id = stable_id(format!("{}#{first}", file.display()).as_bytes());
                        let (launch, end) = (tick_us(first), tick_us(i));
                        // Past the last tick the trace ended, not the instance.
                        let reason = if i == ticks {
                            EndReason::Stopped
                        } else {
                            EndReason::Preempted
                        };
                        events.push(machine(id, launch, MachineKind::Add, vm(launch, None)));
                        events.push(machine(
                            id,
                            end,
                            MachineKind::Remove,
                            vm(launch, Some(reason)),
                        ));
                        start = None;
                    }
                    _ => {}
                }
            }
            events
        }
        Reading::Hibernation => {
            let Some(first) = trace.data.iter().position(|&n| n > 0) else {
                return Err((
                    "no_capacity",
                    "the market never had capacity: no VM to hibernate".to_owned(),
                ));
            };
            let id = stable_id(file.display().to_string().as_bytes());
            let launch = tick_us(first);
            let mut events = vec![machine(id, launch, MachineKind::Add, vm(launch, None))];
            for (i, pair) in trace.data.windows(2).enumerate().skip(first) {
                let kind = match (pair[0] > 0, pair[1] > 0) {
                    (true, false) => MachineKind::Hibernate,
                    (false, true) => MachineKind::Resume,
                    _ => continue,
                };
                events.push(machine(id, tick_us(i + 1), kind, vm(launch, None)));
            }
            events.push(machine(
                id,
                tick_us(ticks),
                MachineKind::Remove,
                vm(launch, Some(EndReason::Stopped)),
            ));
            events
        }
    };
    Ok(events)
}

/// Midnight UTC of the day a directory such as `aws-04-19-2023` names
/// (month, day, year), in µs since the epoch.
fn day_of(dir: &str) -> Option<u64> {
    let mut parts = dir.rsplitn(4, '-');
    let (year, day, month) = (parts.next()?, parts.next()?, parts.next()?);
    let date = chrono::NaiveDate::from_ymd_opt(
        year.parse().ok()?,
        month.parse().ok()?,
        day.parse().ok()?,
    )?;
    let midnight = date.and_hms_opt(0, 0, 0)?.and_utc();
    u64::try_from(midnight.timestamp_micros()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory `day` holding `files` (name, content).
    fn traces(day: &str, files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let day = dir.path().join(day);
        std::fs::create_dir(&day).unwrap();
        for (name, content) in files {
            std::fs::write(day.join(name), content).unwrap();
        }
        dir
    }

    #[test]
    fn runs_of_one_instance_become_lifetimes_and_the_last_is_censored() {
        let dir = traces(
            "aws-04-19-2023",
            &[
                (
                    "us-east-1b_intel_64.json",
                    r#"{"metadata": {"gap_seconds": 30}, "data": [0, 1, 1, 0, 0, 1, 1, 1]}"#,
                ),
                (
                    "us-east-1c_v100_4.json",
                    r#"{"metadata": {"gap_seconds": 30}, "data": [2, 1]}"#,
                ),
                ("notes.json", r#"{"x": 1}"#),
            ],
        );
        let trace = open(dir.path(), Reading::Lifetimes).unwrap();
        let diags = trace.diagnostics().clone();
        let events: Vec<Event> = trace.map(Result::unwrap).collect();
        let machines: Vec<&MachineEvent> = events
            .iter()
            .map(|e| match e {
                Event::Machine(m) => m,
                _ => panic!("{e:?}"),
            })
            .collect();
        assert_eq!(machines.len(), 4);
        let origin = 1_681_862_400_000_000; // 2023-04-19T00:00:00Z
        let (add, remove) = (machines[0], machines[1]);
        let vm = remove.vm.as_ref().unwrap();
        assert_eq!(
            (add.kind, remove.kind),
            (MachineKind::Add, MachineKind::Remove)
        );
        assert_eq!(add.time_us, origin + 30_000_000);
        assert_eq!(remove.time_us - vm.launch_time_us, 60_000_000);
        assert_eq!(vm.end_reason, Some(EndReason::Preempted));
        assert_eq!(
            (vm.zone.as_str(), vm.vm_type.as_str()),
            ("us-east-1b", "intel_64")
        );
        assert!(vm.preemptible);
        // The run alive at the end: three ticks, censored.
        let last = machines[3].vm.as_ref().unwrap();
        assert_eq!(machines[3].time_us - last.launch_time_us, 90_000_000);
        assert_eq!(last.end_reason, Some(EndReason::Stopped));
        assert_ne!(machines[0].machine_id, machines[2].machine_id);
        assert_eq!(diags.skipped_total(), 2, "{}", diags.summary());
        let summary = diags.summary();
        assert!(summary.contains("which one a decrease took"), "{summary}");
        assert!(summary.contains("notes.json"), "{summary}");
    }

    #[test]
    fn read_for_hibernation_each_file_is_one_vm_paused_while_its_market_has_no_capacity() {
        let dir = traces(
            "aws-02-15-2023",
            &[
                (
                    "us-east-1a_v100_1.json",
                    r#"{"metadata": {"gap_seconds": 60}, "data": [0, 1, 3, 0, 0, 2, 0]}"#,
                ),
                (
                    "us-east-1b_v100_1.json",
                    r#"{"metadata": {"gap_seconds": 60}, "data": [0, 0]}"#,
                ),
            ],
        );
        let trace = open(dir.path(), Reading::Hibernation).unwrap();
        let diags = trace.diagnostics().clone();
        let machines: Vec<MachineEvent> = trace
            .map(|e| match e.unwrap() {
                Event::Machine(m) => m,
                e => panic!("{e:?}"),
            })
            .collect();
        let origin = 1_676_419_200_000_000; // 2023-02-15T00:00:00Z
        let minute = 60_000_000;
        let seen: Vec<(MachineKind, u64)> = machines
            .iter()
            .map(|m| (m.kind, (m.time_us - origin) / minute))
            .collect();
        assert_eq!(
            seen,
            [
                (MachineKind::Add, 1),
                (MachineKind::Hibernate, 3),
                (MachineKind::Resume, 5),
                (MachineKind::Hibernate, 6),
                (MachineKind::Remove, 7),
            ]
        );
        assert!(
            machines
                .iter()
                .all(|m| m.machine_id == machines[0].machine_id)
        );
        let vm = machines[4].vm.as_ref().unwrap();
        assert_eq!(
            (vm.zone.as_str(), vm.vm_type.as_str()),
            ("us-east-1a", "v100_1")
        );
        assert_eq!(vm.launch_time_us, origin + minute);
        assert_eq!(vm.end_reason, Some(EndReason::Stopped));
        assert_eq!(diags.skipped_total(), 1, "{}", diags.summary());
        assert!(
            diags.summary().contains("never had capacity"),
            "{}",
            diags.summary()
        );
    }

    #[test]
    fn a_directory_without_a_date_starts_at_zero() {
        assert_eq!(day_of("aws-04-22-2023"), Some(1_682_121_600_000_000));
        assert_eq!(day_of("traces"), None);
        assert_eq!(day_of("aws-13-40-2023"), None);
    }
}
