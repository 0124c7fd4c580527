//! Measured lifetimes of GCE preemptible VMs (Kadupitiya, Sharma and
//! Jadhao's 2019 dataset): one JSON object whose keys are VM names, each with
//! the VM's `instance_data`, its `insert` operation, and either a
//! `compute.instances.preempted` operation, a user `stop`, or both.
//!
//! Each VM becomes a `machine` `add` event at its insert time and a `remove`
//! event `time_in_sec` later whose `end_reason` is `preempted` when the
//! provider preempted it and `stopped` otherwise: a user stop is a
//! right-censored lifetime, not a preemption.
//!
//! The whole object is read into memory (the published file is 2.6 MB).
//! A record that cannot be used is skipped and reported by VM name; the
//! other records go on.

use std::path::Path;

use serde::Deserialize;

use crate::event::{EndReason, Event, MachineEvent, MachineKind, VmInfo};
use crate::ids::stable_id;
use crate::source::{Diagnostics, Location, Trace, TraceError, open_input, total_size};

#[derive(Deserialize)]
struct Record {
    instance_data: InstanceData,
    time_in_sec: f64,
    insert: Operation,
    #[serde(rename = "compute.instances.preempted")]
    preempted: Option<Operation>,
    stop: Option<Operation>,
}

#[derive(Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
struct InstanceData {
    zone: String,
    machine_type: String,
    preemptible: serde_json::Value,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Operation {
    insert_time: String,
    target_id: Option<String>,
}

/// Open the lifetimes file (`data.json` or `data.json.gz`).
pub fn open(input: &Path) -> Result<Trace, TraceError> {
    let diagnostics = Diagnostics::new();
    let reader = open_input(input, &diagnostics)?;
    let all: serde_json::Map<String, serde_json::Value> = serde_json::from_reader(reader)
        .map_err(|e| TraceError::invalid(input, format!("not a JSON object of VM records: {e}")))?;
    let mut events = Vec::with_capacity(all.len() * 2);
    for (name, value) in all {
        diagnostics.rows(1);
        let at = Location {
            file: input.to_owned(),
            line: 0,
            record: Some(name.clone()),
        };
        match vm_events(&name, value, &diagnostics) {
            // Both events or neither: a VM without its end is no lifetime.
            Ok(pair) => {
                if pair
                    .iter()
                    .all(|e| diagnostics.within_limits(e, |_| at.clone()))
                {
                    events.extend(pair);
                }
            }
            Err((class, detail)) => diagnostics.skip(at, class, detail),
        }
    }
    // Stable sort: at equal times the input (name) order decides.
    events.sort_by_key(Event::time_us);
    let size = total_size(&[input.to_owned()]);
    Ok(Trace::new(events.into_iter().map(Ok), diagnostics, size))
}

fn vm_events(
    name: &str,
    value: serde_json::Value,
    diagnostics: &Diagnostics,
) -> Result<[Event; 2], (&'static str, String)> {
    let rec: Record =
        serde_json::from_value(value).map_err(|e| ("invalid_record", e.to_string()))?;
    let launch = chrono::DateTime::parse_from_rfc3339(&rec.insert.insert_time).map_err(|e| {
        (
            "invalid_field",
            format!("insert.insertTime {:?}: {e}", rec.insert.insert_time),
        )
    })?;
    let launch_time_us = u64::try_from(launch.timestamp_micros()).map_err(|_| {
        (
            "out_of_range",
            "insert.insertTime is before 1970".to_owned(),
        )
    })?;
    if !(rec.time_in_sec.is_finite() && rec.time_in_sec >= 0.0) {
        return Err((
            "invalid_field",
            format!(
                "time_in_sec {} is not a non-negative duration",
                rec.time_in_sec
            ),
        ));
    }
    let end_reason = match (&rec.preempted, &rec.stop) {
        (Some(_), _) => EndReason::Preempted,
        (None, Some(_)) => EndReason::Stopped,
        (None, None) => {
            return Err((
                "no_end",
                "neither a preemption nor a stop operation".to_owned(),
            ));
        }
    };
    let preemptible = match &rec.instance_data.preemptible {
        serde_json::Value::String(s) if s == "true" => true,
        serde_json::Value::String(s) if s == "false" => false,
        serde_json::Value::Bool(b) => *b,
        _ => {
            // In a few published records the columns shifted and this field
            // holds an IP address; every VM of the study was preemptible.
            diagnostics.note("PREEMPTIBLE field not a boolean (taken as preemptible)");
            true
        }
    };
    let machine_id = match rec.insert.target_id.as_deref().map(str::parse::<u64>) {
        Some(Ok(id)) => id,
        _ => {
            diagnostics.note("VMs without a numeric insert.targetId (id hashed from the name)");
            stable_id(name.as_bytes())
        }
    };
    let vm = VmInfo {
        name: Some(name.to_owned()),
        vm_type: rec.instance_data.machine_type,
        zone: rec.instance_data.zone,
        preemptible,
        launch_time_us,
        end_reason: None,
    };
    // Saturating (as is the float cast): an absurd lifetime ends beyond
    // `MAX_TIME_US`, which the limits check then refuses.
    let end_time_us = launch_time_us.saturating_add((rec.time_in_sec * 1e6).round() as u64);
    let add = Event::Machine(MachineEvent::of_vm(
        launch_time_us,
        machine_id,
        MachineKind::Add,
        vm.clone(),
    ));
    let remove = Event::Machine(MachineEvent::of_vm(
        end_time_us,
        machine_id,
        MachineKind::Remove,
        VmInfo {
            end_reason: Some(end_reason),
            ..vm
        },
    ));
    Ok([add, remove])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vms_become_add_and_remove_events_with_end_reasons() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data.json");
        std::fs::write(
            &path,
            r#"{
              "a": {"instance_data": {"NAME":"a","ZONE":"z1","MACHINE_TYPE":"n1-standard-1","PREEMPTIBLE":"true"},
                    "time_in_sec": 3600.5,
                    "insert": {"insertTime":"2019-03-25T12:00:00.000-07:00","targetId":"11"},
                    "compute.instances.preempted": {"insertTime":"2019-03-25T13:00:00.500-07:00"}},
              "b": {"instance_data": {"NAME":"b","ZONE":"z2","MACHINE_TYPE":"n1-highcpu-2","PREEMPTIBLE":"10.128.0.40"},
                    "time_in_sec": 60,
                    "insert": {"insertTime":"2019-03-25T11:00:00Z"},
                    "stop": {"insertTime":"2019-03-25T11:01:00Z"}},
              "c": {"instance_data": {"NAME":"c","ZONE":"z2","MACHINE_TYPE":"x","PREEMPTIBLE":"true"},
                    "time_in_sec": 60, "insert": {"insertTime":"yesterday"}, "stop": {"insertTime":"x"}},
              "d": {"instance_data": {"NAME":"d"}, "time_in_sec": 1}
            }"#,
        )
        .unwrap();
        let trace = open(&path).unwrap();
        let diags = trace.diagnostics().clone();
        let events: Vec<Event> = trace.map(Result::unwrap).collect();
        assert_eq!(events.len(), 4);
        let Event::Machine(first) = &events[0] else {
            panic!()
        };
        assert_eq!(first.vm.as_ref().unwrap().name.as_deref(), Some("b"));
        assert_eq!(first.machine_id, stable_id(b"b"));
        let Event::Machine(b_end) = &events[1] else {
            panic!()
        };
        assert_eq!(b_end.kind, MachineKind::Remove);
        assert_eq!(b_end.time_us - first.time_us, 60_000_000);
        assert_eq!(
            b_end.vm.as_ref().unwrap().end_reason,
            Some(EndReason::Stopped)
        );
        let Event::Machine(a_end) = &events[3] else {
            panic!()
        };
        let vm = a_end.vm.as_ref().unwrap();
        assert_eq!(
            (a_end.machine_id, vm.end_reason),
            (11, Some(EndReason::Preempted))
        );
        assert_eq!(a_end.time_us - vm.launch_time_us, 3_600_500_000);
        assert_eq!(vm.launch_time_us, 1_553_540_400_000_000);
        assert_eq!(diags.skipped_total(), 2, "{}", diags.summary());
        assert!(
            diags.summary().contains("record `c`"),
            "{}",
            diags.summary()
        );
        assert_eq!(
            diags
                .notes()
                .get("PREEMPTIBLE field not a boolean (taken as preemptible)"),
            Some(&1)
        );
    }
}
