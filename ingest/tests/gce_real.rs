//! The GCE preemptible-VM adapter on the real shared dataset: counts from
//! the data's README. Ignored unless run with `--ignored`, which
//! `scripts/test.sh` does where `../shared` exists.

use std::path::PathBuf;

use jobcast_ingest::event::{EndReason, Event, MachineKind};
use jobcast_ingest::{Format, open};

#[test]
#[ignore = "needs ../shared/data, the shared traces: scripts/test.sh runs it where they exist"]
fn lifetimes_match_the_data_readme() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/data/google-preemptible-vm-lifetimes-2019/data.json.gz");
    assert!(path.is_file(), "{} not found", path.display());
    let trace = open(Format::GceLifetimes, &path).unwrap();
    let diagnostics = trace.diagnostics().clone();
    let events: Vec<Event> = trace.map(Result::unwrap).collect();
    assert_eq!(diagnostics.skipped_total(), 0, "{}", diagnostics.summary());
    assert_eq!(events.len(), 2 * 1442);

    let mut preempted = Vec::new();
    let mut stopped = Vec::new();
    for e in &events {
        let Event::Machine(m) = e else {
            panic!("{e:?}")
        };
        let vm = m.vm.as_ref().unwrap();
        assert!(vm.preemptible);
        if m.kind == MachineKind::Remove {
            let lifetime_s = (m.time_us - vm.launch_time_us) as f64 / 1e6;
            match vm.end_reason {
                Some(EndReason::Preempted) => preempted.push(lifetime_s),
                Some(EndReason::Stopped) => stopped.push(lifetime_s),
                None => panic!("remove without a reason: {m:?}"),
            }
        }
    }
    assert_eq!((preempted.len(), stopped.len()), (717, 725));
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    // README: preempted median 77,226 s, max 89,398 s; stopped median 3,138 s, min 38 s.
    assert!((median(&mut preempted) - 77_226.0).abs() < 60.0);
    assert!((preempted.last().unwrap() - 89_398.0).abs() < 1.0);
    assert!((median(&mut stopped) - 3_138.0).abs() < 60.0);
    assert!((stopped[0] - 38.0).abs() < 1.0);
    assert_eq!(
        diagnostics
            .notes()
            .get("PREEMPTIBLE field not a boolean (taken as preemptible)"),
        Some(&16)
    );
}
