//! `POST /admin/backup`: a consistent copy of the store (a RocksDB
//! checkpoint), written while the service runs, to a new directory under
//! `storage.backup_dir`; one at a time. `jobcast admin restore` brings it
//! back.
//!
//! A backup must not fill the disk it shares with the store, nor pile up:
//! one is refused (507) before it starts when its filesystem has less room
//! than the store takes, and once one is written the oldest beyond
//! `storage.backup_keep` are deleted.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use jobcast_storage::disk;
use jobcast_storage::state::{StoreError, unix_seconds};
use serde_json::json;

use super::error;
use crate::config::Backups;
use crate::shared::Shared;
use crate::telemetry;

/// Room beyond the store's size a backup's filesystem must have.
const MARGIN_BYTES: u64 = 64 << 20;
/// The name of each backup's directory: this, then the Unix second.
const PREFIX: &str = "backup-";

/// Why a backup was not written.
enum Failure {
    NoRoom(String),
    Store(StoreError),
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        Failure::Store(e)
    }
}

pub(super) async fn write(
    shared: Arc<Shared>,
    backups: Option<Backups>,
    busy: Arc<AtomicBool>,
) -> Response {
    let outcome = |label: &'static str| metrics::counter!(telemetry::BACKUPS, "outcome" => label);
    let Some(backups) = backups else {
        return error(
            StatusCode::NOT_FOUND,
            "online backups are off: set storage.backup_dir".into(),
        );
    };
    if busy.swap(true, Ordering::AcqRel) {
        outcome("refused").increment(1);
        return error(
            StatusCode::CONFLICT,
            "a backup is being written; try again when it is done".into(),
        );
    }
    let dir = backups.dir.join(format!("{PREFIX}{}", unix_seconds()));
    let started = Instant::now();
    let target = dir.clone();
    let written =
        tokio::task::spawn_blocking(move || write_blocking(&shared, &backups, &target)).await;
    busy.store(false, Ordering::Release);
    match written {
        Ok(Ok(removed)) => {
            let seconds = started.elapsed().as_secs_f64();
            outcome("written").increment(1);
            metrics::gauge!(telemetry::BACKUP_SECONDS).set(seconds);
            tracing::info!(path = %dir.display(), seconds, removed = removed.len(), "online backup written");
            Json(json!({ "path": dir, "seconds": seconds, "removed": removed })).into_response()
        }
        Ok(Err(Failure::NoRoom(reason))) => {
            outcome("refused").increment(1);
            error(StatusCode::INSUFFICIENT_STORAGE, reason)
        }
        Ok(Err(Failure::Store(StoreError::Refused(reason)))) => {
            outcome("refused").increment(1);
            error(StatusCode::CONFLICT, reason)
        }
        Ok(Err(Failure::Store(e))) => {
            outcome("failed").increment(1);
            error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
        }
        Err(e) => {
            outcome("failed").increment(1);
            error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
        }
    }
}

/// Check the room, write the checkpoint to `target`, prune; the backups
/// removed.
fn write_blocking(
    shared: &Shared,
    backups: &Backups,
    target: &Path,
) -> Result<Vec<PathBuf>, Failure> {
    let io = |path: &Path, source: std::io::Error| StoreError::Io {
        path: path.display().to_string(),
        source,
    };
    std::fs::create_dir_all(&backups.dir).map_err(|e| io(&backups.dir, e))?;
    let store_bytes: u64 = shared
        .store
        .family_sizes()
        .values()
        .map(|size| size.bytes)
        .sum();
    let space = disk::space(&backups.dir).map_err(|e| io(&backups.dir, e))?;
    let needed = store_bytes.saturating_add(MARGIN_BYTES);
    if space.free_bytes < needed {
        return Err(Failure::NoRoom(format!(
            "{} has {} MiB free, and a backup of the store ({} MiB) needs {} MiB: free room, or \
             point storage.backup_dir elsewhere",
            backups.dir.display(),
            space.free_bytes >> 20,
            store_bytes >> 20,
            needed >> 20
        )));
    }
    shared.store.checkpoint(target)?;
    Ok(prune(&backups.dir, backups.keep).map_err(|e| io(&backups.dir, e))?)
}

/// Delete the oldest backups in `dir` beyond the newest `keep`; those
/// deleted.
fn prune(dir: &Path, keep: usize) -> std::io::Result<Vec<PathBuf>> {
    let mut found: Vec<(u64, PathBuf)> = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(second) = name
            .to_str()
            .and_then(|n| n.strip_prefix(PREFIX))
            .and_then(|n| n.parse().ok())
        else {
            continue;
        };
        if entry.file_type()?.is_dir() {
            found.push((second, entry.path()));
        }
    }
    found.sort();
    let excess = found.len().saturating_sub(keep);
    let mut removed = Vec::new();
    for (_, path) in found.into_iter().take(excess) {
        std::fs::remove_dir_all(&path)?;
        removed.push(path);
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_backups_beyond_the_count_kept_are_deleted() {
        let dir = tempfile::tempdir().unwrap();
        for second in [100, 7, 50, 300] {
            std::fs::create_dir(dir.path().join(format!("{PREFIX}{second}"))).unwrap();
        }
        std::fs::create_dir(dir.path().join("not-a-backup")).unwrap();
        std::fs::write(dir.path().join(format!("{PREFIX}9")), b"a file").unwrap();
        let removed = prune(dir.path(), 2).unwrap();
        let names: Vec<String> = removed
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["backup-7", "backup-50"]);
        assert!(dir.path().join("backup-100").exists() && dir.path().join("backup-300").exists());
        assert!(dir.path().join("not-a-backup").exists());
        assert!(prune(dir.path(), 2).unwrap().is_empty());
    }
}
