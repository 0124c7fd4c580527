//! The reports of `jobcast bench`: a table on stdout, or JSON with
//! `--json`.

use crate::output::{print_json, print_out};

use super::latency::LatencyReport;
use super::pipeline::Report;

pub(super) fn output(report: &Report, json: bool) -> anyhow::Result<()> {
    if json {
        return print_json(report);
    }
    let row = |step: &str, rate: f64, secs: f64| format!("  {step:<28} {rate:>12.0} {secs:>9.2}\n");
    let mut out = format!(
        "jobcast bench pipeline: {} events, {} partitions, {} output partitions, {}\n\n  {:<28} {:>12} {:>9}\n",
        report.events,
        report.partitions,
        report.output_partitions,
        report.broker,
        "step",
        "events/s",
        "seconds"
    );
    out.push_str(&row(
        "write (producer, acks=all)",
        report.write_events_per_sec,
        report.write_secs,
    ));
    out.push_str(&row(
        "raw consume (librdkafka)",
        report.raw_consume_events_per_sec,
        report.raw_secs,
    ));
    out.push_str(&row(
        "pipeline (service, RocksDB)",
        report.pipeline_events_per_sec,
        report.pipeline_secs,
    ));
    out.push_str(&format!(
        "\n  ratio pipeline / raw         {:>12.3}\n  decisions published          {:>12}\n  dead-lettered                {:>12}\n",
        report.ratio, report.decisions, report.dead_lettered
    ));
    let st = &report.stages;
    out.push_str(&format!(
        "\n  pipeline seconds by step ({} batches)\n    apply (engine, log)        {:>12.2}\n    publish (until acked)      {:>12.2}\n    commit (records, handover) {:>12.2}\n    waiting for input, merge   {:>12.2}\n  RocksDB writes (writer thread) {:>10.2}\n  input partitions paused      {:>12}\n",
        st.batches,
        st.apply_secs,
        st.publish_secs,
        st.commit_secs,
        st.other_secs,
        st.write_secs,
        st.input_pauses
    ));
    print_out(&out)
}

pub(super) fn output_latency(report: &LatencyReport, json: bool) -> anyhow::Result<()> {
    if json {
        return print_json(report);
    }
    let mut out = format!(
        "jobcast bench latency: {} events, {} partitions, {} output partitions, {}\n\
         latency: job submission handed to the producer -> its first decision received\n\
         relay: a bare consumer republishing each submission at once (the broker's own latency)\n\n  \
         {:>10} {:>8} {:>11} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9}\n",
        report.events,
        report.partitions,
        report.output_partitions,
        report.broker,
        "offered/s",
        "by",
        "achieved/s",
        "decisions",
        "samples",
        "p50 ms",
        "p99 ms",
        "p99.9 ms",
        "max ms"
    );
    for load in &report.loads {
        let offered = load
            .offered_per_sec
            .map_or_else(|| "max".to_owned(), |r| format!("{r:.0}"));
        let rows = [
            ("service", Some(&load.service)),
            ("relay", load.relay.as_ref()),
        ];
        for (by, figures) in rows {
            let Some(f) = figures else { continue };
            out.push_str(&format!(
                "  {offered:>10} {by:>8} {:>11.0} {:>10} {:>9} {:>9.2} {:>9.2} {:>9.2} {:>9.2}\n",
                f.achieved_per_sec, f.decisions, f.samples, f.p50_ms, f.p99_ms, f.p999_ms, f.max_ms
            ));
        }
    }
    out.push_str(&format!(
        "\n  service batches: {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}\n",
        "offered/s", "batches", "events", "queued ms", "apply ms", "publish ms", "commit ms"
    ));
    for load in &report.loads {
        let Some(b) = &load.service.batches else {
            continue;
        };
        let offered = load
            .offered_per_sec
            .map_or_else(|| "max".to_owned(), |r| format!("{r:.0}"));
        out.push_str(&format!(
            "                   {offered:>10} {:>9} {:>9.1} {:>9.2} {:>9.2} {:>9.2} {:>9.2}\n",
            b.batches, b.events_per_batch, b.queued_ms, b.apply_ms, b.publish_ms, b.commit_ms
        ));
    }
    print_out(&out)
}
