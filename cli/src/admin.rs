//! `jobcast admin`: what an operator asks of a store.
//!
//! - `info`: what the store holds: keys and bytes per column family, the
//!   snapshot a restart restores and the log after it, the stored input
//!   offsets, the oldest ended job still retained, the releases that
//!   created and last wrote it, the skips. It opens the store read-only,
//!   so it runs beside a serving instance.
//! - `backup`: a consistent copy of the store; of a stopped instance's
//!   store directly, of a running one through its `POST /admin/backup`.
//! - `restore`: a backup back into place, the instance stopped.
//! - `skip`: an offset range of an input partition that the service
//!   dead-letters instead of applying: the way past a poison message.
//! - `rebuild`: the store set aside (its skips kept), so that the next
//!   start rebuilds the state from the input topic.
//! - `parked`: the outputs the broker refused for good (parked instead of
//!   retried for ever), and, once their cause is fixed, `--republish`.
//!
//! Every command but `info`, `parked` without `--republish` and an online
//! `backup` needs the instance stopped: RocksDB's lock says so, and the error names what to do.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use jobcast_scheduler_feed::config::ServeConfig;
use jobcast_scheduler_feed::service::republish_parked;
use jobcast_storage::state::{
    Skip, StateStore, StoreError, StoreSummary, is_store, restore_backup, set_aside, unix_seconds,
};
use serde_json::Value;
use tracing::warn;

use crate::output::{print_json, print_out};
use jobcast_ingest::kafka_args::KafkaArgs;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: AdminCommand,
}

#[derive(clap::Subcommand)]
enum AdminCommand {
    /// What a store holds, and where a restart would start.
    Info(InfoArgs),
    /// Write a consistent copy of a store.
    Backup(BackupArgs),
    /// Put a backup in place of a store (the instance stopped).
    Restore(RestoreArgs),
    /// Dead-letter an offset range of an input partition instead of
    /// applying it (the instance stopped).
    Skip(SkipArgs),
    /// Set the store aside so that the next start rebuilds the state from
    /// the input topic (the instance stopped).
    Rebuild(RebuildArgs),
    /// List the outputs the broker refused for good; with `--republish`,
    /// produce them again (the instance stopped).
    Parked(ParkedArgs),
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

#[derive(clap::Args)]
struct BackupArgs {
    /// The store of a stopped instance (`storage.path`); with `--to`.
    #[arg(long, requires = "to", conflicts_with = "url")]
    data_dir: Option<PathBuf>,
    /// Where the backup goes: a directory that does not exist yet.
    #[arg(long, requires = "data_dir")]
    to: Option<PathBuf>,
    /// The HTTP address of a running instance (e.g. http://127.0.0.1:8080):
    /// it writes the backup under its `storage.backup_dir`.
    #[arg(long)]
    url: Option<String>,
    /// The instance's HTTP token, if it has one (`http.token`); best given
    /// by the variable.
    #[arg(
        long,
        env = "JOBCAST_HTTP_TOKEN",
        hide_env_values = true,
        requires = "url"
    )]
    token: Option<String>,
}

#[derive(clap::Args)]
struct RestoreArgs {
    /// The backup (a directory `admin backup` wrote).
    #[arg(long)]
    from: PathBuf,
    /// The store to restore to (`storage.path`): absent or empty, unless
    /// `--replace`.
    #[arg(long, env = "JOBCAST_DATA_DIR")]
    data_dir: PathBuf,
    /// Set an existing store aside (renamed beside it) and restore in its
    /// place.
    #[arg(long)]
    replace: bool,
}

#[derive(clap::Args)]
struct SkipArgs {
    /// The store of the stopped instance (`storage.path`). With several
    /// instances, skip the same range in every instance's store: each
    /// applies every partition, and all must learn the same state.
    #[arg(long, env = "JOBCAST_DATA_DIR")]
    data_dir: PathBuf,
    /// The input topic.
    #[arg(long, env = "JOBCAST_EVENTS_TOPIC", default_value = "jobcast.events")]
    topic: String,
    #[arg(long)]
    partition: i32,
    /// The range, `FROM..UNTIL` (UNTIL excluded), or one offset.
    #[arg(long, value_parser = parse_range)]
    offsets: (i64, i64),
    /// Why: kept in the store, logged and sent with each skipped message
    /// to the dead-letter topic.
    #[arg(long)]
    reason: String,
}

#[derive(clap::Args)]
struct ParkedArgs {
    /// The store (`storage.path`). Listing opens it read-only, beside a
    /// running instance.
    #[arg(long, env = "JOBCAST_DATA_DIR")]
    data_dir: PathBuf,
    /// Produce every parked output again, to its topic, with the
    /// instance's Kafka settings (`--config`, `--brokers`, `-X`), and
    /// delete those the broker acknowledges; those it refuses for good
    /// stay parked. Fix the cause first (create the topic, grant the ACL,
    /// raise the size limit).
    #[arg(long)]
    republish: bool,
    /// The instance's configuration file, for its Kafka settings (with
    /// `--republish`).
    #[arg(long, env = "JOBCAST_CONFIG")]
    config: Option<PathBuf>,
    #[command(flatten)]
    kafka: KafkaArgs,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct RebuildArgs {
    /// The store of the stopped instance (`storage.path`).
    #[arg(long, env = "JOBCAST_DATA_DIR")]
    data_dir: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.command {
        AdminCommand::Info(args) => info(args),
        AdminCommand::Backup(args) => backup(args),
        AdminCommand::Restore(args) => restore(args),
        AdminCommand::Skip(args) => skip(args),
        AdminCommand::Rebuild(args) => rebuild(args),
        AdminCommand::Parked(args) => parked(args),
    }
}

fn parked(args: ParkedArgs) -> anyhow::Result<()> {
    if args.republish {
        // As `serve` reads them: file, `JOBCAST_KAFKA__…`, then the flags.
        let kafka = args
            .kafka
            .apply(ServeConfig::load(args.config.as_deref())?.kafka);
        let store = Arc::new(open_stopped(&args.data_dir)?);
        let done = republish_parked(store, &kafka)?;
        return if args.json {
            print_json(&done)
        } else {
            print_out(&format!(
                "{} parked outputs published; {} refused for good again, still parked\n",
                done.published, done.parked_again
            ))
        };
    }
    ensure_store(&args.data_dir)?;
    let store = StateStore::open_read_only(&args.data_dir)
        .with_context(|| format!("opening {}", args.data_dir.display()))?;
    let parked = store.parked()?;
    if args.json {
        let list: Vec<Value> = parked
            .iter()
            .map(|(id, o)| {
                serde_json::json!({
                    "id": id,
                    "topic": o.topic,
                    "reason": o.reason,
                    "error": o.error,
                    "parked_at": o.parked_at,
                    "key": String::from_utf8_lossy(&o.key),
                    "payload_bytes": o.payload.len(),
                    "headers": o.headers.iter().map(|(name, value)| {
                        (name.clone(), String::from_utf8_lossy(value).into_owned())
                    }).collect::<std::collections::BTreeMap<_, _>>(),
                })
            })
            .collect();
        return print_json(&list);
    }
    let mut out = format!("{} parked outputs\n", parked.len());
    for (id, o) in &parked {
        out += &format!(
            "{id}: {} key {:?}, {} bytes, parked at {} (unix s): {} ({})\n",
            o.topic,
            String::from_utf8_lossy(&o.key),
            o.payload.len(),
            o.parked_at,
            o.reason,
            o.error
        );
    }
    print_out(&out)
}

fn info(args: InfoArgs) -> anyhow::Result<()> {
    ensure_store(&args.data_dir)?;
    let store = StateStore::open_read_only(&args.data_dir)
        .with_context(|| format!("opening {}", args.data_dir.display()))?;
    let summary = store.summary()?;
    if args.json {
        print_json(&summary)
    } else {
        print_out(&text(&summary))
    }
}

fn backup(args: BackupArgs) -> anyhow::Result<()> {
    let path = match (args.url, args.data_dir, args.to) {
        (Some(url), _, _) => backup_online(&url, args.token.as_deref())?,
        (None, Some(data_dir), Some(to)) => {
            let store = open_stopped(&data_dir)?;
            store.checkpoint(&to)?;
            to.display().to_string()
        }
        _ => anyhow::bail!("give --url, or --data-dir with --to"),
    };
    print_out(&format!("backup written to {path}\n"))
}

/// Ask the running instance at `url` for a backup (with its bearer
/// `token`, if given); where it wrote it.
fn backup_online(url: &str, token: Option<&str>) -> anyhow::Result<String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(600)))
        .build()
        .into();
    let endpoint = format!("{}/admin/backup", url.trim_end_matches('/'));
    let mut request = agent.post(&endpoint);
    if let Some(token) = token {
        request = request.header("Authorization", &format!("Bearer {token}"));
    }
    let mut response = request
        .send_empty()
        .with_context(|| format!("POST {endpoint}"))?;
    let status = response.status();
    let body: Value = response
        .body_mut()
        .read_json()
        .with_context(|| format!("the answer of {endpoint} ({status})"))?;
    anyhow::ensure!(
        status.is_success(),
        "{endpoint} answered {status}: {}",
        body["error"].as_str().unwrap_or("(no reason given)")
    );
    body["path"]
        .as_str()
        .map(str::to_owned)
        .with_context(|| format!("{endpoint} answered without a path: {body}"))
}

fn restore(args: RestoreArgs) -> anyhow::Result<()> {
    let mut aside = None;
    if is_store(&args.data_dir) {
        anyhow::ensure!(
            args.replace,
            "{} holds a store: pass --replace to set it aside and restore in its place",
            args.data_dir.display()
        );
        drop(open_stopped(&args.data_dir)?);
        aside = Some(set_aside(&args.data_dir)?);
    }
    restore_backup(&args.from, &args.data_dir)?;
    let store = StateStore::open_read_only(&args.data_dir)?;
    let summary = store.summary()?;
    let mut out = format!(
        "restored {} to {}\n",
        args.from.display(),
        args.data_dir.display()
    );
    if let Some(aside) = aside {
        out += &format!("the store it replaced is at {}\n", aside.display());
    }
    out += &text(&summary);
    print_out(&out)
}

fn skip(args: SkipArgs) -> anyhow::Result<()> {
    let store = open_stopped(&args.data_dir)?;
    let (from, until) = args.offsets;
    let skip = Skip {
        topic: args.topic,
        partition: args.partition,
        from,
        until,
        reason: args.reason,
        recorded_at_s: unix_seconds(),
    };
    store.add_skip(skip.clone())?;
    // The audit line; the service logs each message it skips, and sends it
    // with this reason to the dead-letter topic.
    warn!(store = %args.data_dir.display(), %skip, "skip recorded");
    print_out(&format!(
        "recorded: {skip} will be dead-lettered, not applied, from the next start on\n"
    ))
}

fn rebuild(args: RebuildArgs) -> anyhow::Result<()> {
    let store = open_stopped(&args.data_dir)?;
    let skips = store.skips()?;
    drop(store);
    let aside = set_aside(&args.data_dir)?;
    let fresh = StateStore::open(&args.data_dir, true)?;
    fresh.put_skips(&skips)?;
    warn!(store = %args.data_dir.display(), aside = %aside.display(), "store set aside for a rebuild");
    print_out(&format!(
        "{} is empty now (its {} skips kept): the next start rebuilds the state from the \
         beginning of the input topic, publishing only what the group has not committed.\n\
         The old store is at {}; delete it once the rebuild is done.\n",
        args.data_dir.display(),
        skips.len(),
        aside.display()
    ))
}

fn ensure_store(path: &Path) -> anyhow::Result<()> {
    anyhow::ensure!(is_store(path), "{} holds no store", path.display());
    Ok(())
}

/// Open the store of a stopped instance to change it; a running instance
/// holds RocksDB's lock, and the error then says so.
fn open_stopped(path: &Path) -> anyhow::Result<StateStore> {
    ensure_store(path)?;
    StateStore::open(path, true).map_err(|e| match e {
        StoreError::Rocks { ref source, .. } if source.to_string().contains("lock") => {
            anyhow::anyhow!(
                "{} is in use by a running jobcast: stop it first (a backup of a running \
                 instance: `jobcast admin backup --url http://<its HTTP address>`)",
                path.display()
            )
        }
        e => anyhow::Error::new(e).context(format!("opening {}", path.display())),
    })
}

/// `FROM..UNTIL`, or one offset `N` (= `N..N+1`).
fn parse_range(raw: &str) -> Result<(i64, i64), String> {
    let number = |s: &str| {
        s.trim()
            .parse::<i64>()
            .map_err(|e| format!("{s:?} is not an offset: {e}"))
    };
    match raw.split_once("..") {
        Some((from, until)) => Ok((number(from)?, number(until)?)),
        None => {
            let offset = number(raw)?;
            Ok((offset, offset.checked_add(1).ok_or("offset too large")?))
        }
    }
}

fn text(s: &StoreSummary) -> String {
    let mut out = format!(
        "store {} (format {}, created by jobcast {}, last written by jobcast {})\n",
        s.path,
        s.format.as_deref().unwrap_or("none: empty"),
        s.created_by.as_deref().unwrap_or("unknown"),
        s.written_by.as_deref().unwrap_or("unknown"),
    );
    let rows: Vec<Vec<String>> = std::iter::once(vec![
        "family".to_owned(),
        "keys (est.)".to_owned(),
        "bytes on disk".to_owned(),
        "unflushed writes".to_owned(),
    ])
    .chain(s.families.iter().map(|(name, size)| {
        vec![
            (*name).to_owned(),
            size.keys.to_string(),
            size.bytes.to_string(),
            size.unflushed.to_string(),
        ]
    }))
    .collect();
    out += &jobcast_replay::report::align(&rows, |c, _| c == 0);
    out += &match (s.snapshot_seq, s.snapshot_bytes) {
        (Some(seq), Some(bytes)) => format!(
            "a restart restores the snapshot at message {seq} ({} of {bytes} bytes: a whole one and the changes after it) and applies the {} messages logged after it\n",
            s.snapshot_chain,
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
    for skip in &s.skips {
        out += &format!("skipped: {skip}\n");
    }
    if s.parked > 0 {
        out += &format!(
            "{} outputs parked: the broker refused them for good (`jobcast admin parked` lists them)\n",
            s.parked
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::parse_range;

    #[test]
    fn a_range_is_two_offsets_or_one() {
        assert_eq!(parse_range("5..9"), Ok((5, 9)));
        assert_eq!(parse_range("17"), Ok((17, 18)));
        assert!(parse_range("a..3").unwrap_err().contains("not an offset"));
        assert!(parse_range(&i64::MAX.to_string()).is_err());
    }
}
