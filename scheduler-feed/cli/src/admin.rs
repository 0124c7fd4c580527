//! `jobcast admin`: what an operator asks of a store.
//!
//! - `info`: what the store holds: keys and bytes per column family, the
//!   snapshot a restart restores and the log after it, the stored input
//!   offsets, the oldest ended job still retained. It opens the store
//!   read-only, so it runs beside a serving instance.

use std::path::PathBuf;

use anyhow::Context;
use jobcast_storage::state::{StateStore, StoreSummary};

use crate::output::{print_json, print_out};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: AdminCommand,
}

#[derive(clap::Subcommand)]
enum AdminCommand {
    /// What a store holds, and where a restart would start.
    Info(InfoArgs),
}

#[derive(clap::Args)]
struct InfoArgs {
    /// The store: `storage.path` of the instance.
    #[arg(long, env = "JOBCAST_DATA_DIR")]
    data_dir: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.command {
        AdminCommand::Info(args) => info(args),
    }
}

fn info(args: InfoArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.data_dir.join("CURRENT").is_file(),
        "{} holds no store",
        args.data_dir.display()
    );
    let store = StateStore::open_read_only(&args.data_dir)
        .with_context(|| format!("opening {}", args.data_dir.display()))?;
    let summary = store.summary()?;
    if args.json {
        print_json(&summary)
    } else {
        print_out(&text(&summary))
    }
}

fn text(s: &StoreSummary) -> String {
    let mut out = format!(
        "store {} (format {})\n",
        s.path,
        s.format.as_deref().unwrap_or("none: empty")
    );
    let rows: Vec<Vec<String>> = std::iter::once(vec![
        "family".to_owned(),
        "keys (est.)".to_owned(),
        "bytes on disk".to_owned(),
    ])
    .chain(s.families.iter().map(|(name, size)| {
        vec![
            (*name).to_owned(),
            size.keys.to_string(),
            size.bytes.to_string(),
        ]
    }))
    .collect();
    out += &jobcast_replay::report::align(&rows, |c, _| c == 0);
    out += &match (s.snapshot_seq, s.snapshot_bytes) {
        (Some(seq), Some(bytes)) => format!(
            "a restart restores the snapshot at message {seq} ({bytes} bytes) and applies the {} messages logged after it\n",
            s.next_log_seq - seq
        ),
        _ => format!(
            "no snapshot: a restart applies the {} messages logged\n",
            s.next_log_seq
        ),
    };
    for (topic, offsets) in &s.offsets {
        let list: Vec<String> = offsets.iter().map(|(p, o)| format!("{p}:{o}")).collect();
        out += &format!(
            "next offsets of {topic} (partition:offset): {}\n",
            list.join(" ")
        );
    }
    let stored: Vec<String> = s.stored_partitions.iter().map(i32::to_string).collect();
    out += &format!("records of partitions: {}\n", stored.join(" "));
    out += &match s.oldest_retained_job {
        Some((end_us, job_id)) => {
            format!("oldest retained ended job: {job_id}, ended at {end_us} µs\n")
        }
        None => "no ended job retained\n".to_owned(),
    };
    out
}
