//! What an operator does to a store (`jobcast admin`): back it up, restore
//! it, put it aside for a rebuild, and skip input it must never apply.
//!
//! A backup is a RocksDB checkpoint: every column family at one point of
//! the write sequence, so the log, the snapshot, the records and the
//! offsets they came from agree (each batch is one atomic write). Its SST
//! files are hard links into the store, so it costs little disk until the
//! store compacts away from it, and it is itself a store: restoring is a
//! copy of its files into an empty directory.
//!
//! A skip is an offset range of one input partition that the service
//! dead-letters instead of applying (the way past a poison message). Skips
//! live in the store's `meta`, so a restart that applies the log again
//! skips the same messages, and every instance must be given the same
//! skips to learn the same state.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use rocksdb::checkpoint::Checkpoint;
use serde::{Deserialize, Serialize};

use super::{META, StateStore, StoreError};

/// The `meta` key of the recorded skips (JSON list of [`Skip`]).
const SKIPS_KEY: &str = "skips";

/// An offset range of an input partition that is dead-lettered, never
/// applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skip {
    pub topic: String,
    pub partition: i32,
    /// The first offset skipped.
    pub from: i64,
    /// The first offset after the range.
    pub until: i64,
    /// Why, in the operator's words: it travels with every message skipped.
    pub reason: String,
    /// When the skip was recorded, seconds since the Unix epoch.
    pub recorded_at_s: u64,
}

impl Skip {
    /// Whether the message at `offset` of `partition` of `topic` is skipped.
    pub fn covers(&self, topic: &str, partition: i32, offset: i64) -> bool {
        self.partition == partition
            && self.topic == topic
            && (self.from..self.until).contains(&offset)
    }
}

impl std::fmt::Display for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "offsets {}..{} of {} partition {} ({})",
            self.from, self.until, self.topic, self.partition, self.reason
        )
    }
}

impl StateStore {
    /// Write a consistent copy of the store to `dir` (which must not
    /// exist), while the store stays open for writing.
    pub fn checkpoint(&self, dir: &Path) -> Result<(), StoreError> {
        if dir.exists() {
            return Err(StoreError::Refused(format!(
                "{} exists already: a backup goes to a new directory",
                dir.display()
            )));
        }
        let checkpoint = Checkpoint::new(&self.db).map_err(|e| self.rocks(e))?;
        checkpoint
            .create_checkpoint(dir)
            .map_err(|source| StoreError::Rocks {
                path: dir.display().to_string(),
                source,
            })
    }

    /// The skips recorded, in the order they were.
    pub fn skips(&self) -> Result<Vec<Skip>, StoreError> {
        match self.meta(SKIPS_KEY)? {
            None => Ok(Vec::new()),
            Some(list) => serde_json::from_slice(&list).map_err(|e| StoreError::Corrupt {
                family: META,
                key: SKIPS_KEY.as_bytes().to_vec(),
                reason: e.to_string(),
            }),
        }
    }

    /// Record `skip`. A range that is empty, or that reaches back into
    /// what the store has consumed already, is refused: those messages are
    /// applied, and skipping them now would give a state no run gives.
    pub fn add_skip(&self, skip: Skip) -> Result<(), StoreError> {
        if skip.from < 0 || skip.until <= skip.from {
            return Err(StoreError::Refused(format!(
                "offsets {}..{}: the range must be non-empty and non-negative",
                skip.from, skip.until
            )));
        }
        let next = self.offsets(&skip.topic)?.get(&skip.partition).copied();
        if let Some(next) = next.filter(|&next| skip.from < next) {
            return Err(StoreError::Refused(format!(
                "partition {} of {} is consumed up to offset {next} already: offsets before it \
                 are applied and cannot be skipped (skip from {next} on, or rebuild the store)",
                skip.partition, skip.topic
            )));
        }
        self.put_skips(&[self.skips()?, vec![skip]].concat())
    }

    /// Replace the recorded skips (a rebuilt store keeps its skips).
    pub fn put_skips(&self, skips: &[Skip]) -> Result<(), StoreError> {
        let mut batch = self.batch();
        batch.set_meta(
            SKIPS_KEY,
            &serde_json::to_vec(skips).expect("skips serialise"),
        );
        self.commit(batch)
    }
}

/// Whether `path` holds a store.
pub fn is_store(path: &Path) -> bool {
    path.join("CURRENT").is_file()
}

/// Restore the backup at `backup` (a [`StateStore::checkpoint`]) to
/// `path`, which must hold no store: its files are copied beside `path`
/// first, each synced, with their directory, then renamed into place
/// once complete (and the parent synced), so an interrupted restore or a
/// power cut leaves no half store behind.
pub fn restore_backup(backup: &Path, path: &Path) -> Result<(), StoreError> {
    let io = |what: &Path, e: std::io::Error| StoreError::Io {
        path: what.display().to_string(),
        source: e,
    };
    if !is_store(backup) {
        return Err(StoreError::Refused(format!(
            "{} holds no backup (no CURRENT file)",
            backup.display()
        )));
    }
    if path.exists()
        && std::fs::read_dir(path)
            .map_err(|e| io(path, e))?
            .next()
            .is_some()
    {
        return Err(StoreError::Refused(format!(
            "{} is not empty: restore into a new or empty directory (set the old store aside \
             first)",
            path.display()
        )));
    }
    let staging = sibling(path, "restoring");
    if staging.exists() {
        std::fs::remove_dir_all(&staging).map_err(|e| io(&staging, e))?;
    }
    std::fs::create_dir_all(&staging).map_err(|e| io(&staging, e))?;
    for entry in std::fs::read_dir(backup).map_err(|e| io(backup, e))? {
        let entry = entry.map_err(|e| io(backup, e))?;
        let from = entry.path();
        if !entry.file_type().map_err(|e| io(&from, e))?.is_file() {
            continue;
        }
        let to = staging.join(entry.file_name());
        std::fs::copy(&from, &to).map_err(|e| io(&from, e))?;
        std::fs::File::open(&to)
            .and_then(|f| f.sync_all())
            .map_err(|e| io(&to, e))?;
    }
    sync_dir(&staging).map_err(|e| io(&staging, e))?;
    // What was copied must open as a store before it takes the place.
    StateStore::open_read_only(&staging)?;
    if path.exists() {
        std::fs::remove_dir(path).map_err(|e| io(path, e))?;
    }
    std::fs::rename(&staging, path).map_err(|e| io(path, e))?;
    match path.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(parent) => sync_dir(parent).map_err(|e| io(parent, e)),
        None => Ok(()),
    }
}

/// Make a directory's entries (files created or renamed in it) durable.
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Move the store at `path` aside, to a sibling named after it and the
/// time, and return where it went.
pub fn set_aside(path: &Path) -> Result<PathBuf, StoreError> {
    let aside = sibling(path, &format!("replaced-{}", unix_seconds()));
    std::fs::rename(path, &aside).map_err(|e| StoreError::Io {
        path: path.display().to_string(),
        source: e,
    })?;
    Ok(aside)
}

/// Seconds since the Unix epoch, by this machine's clock (names and audit
/// records only: nothing the state derives from).
pub fn unix_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `path` with `.suffix` added to its last component.
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".");
    name.push(suffix);
    path.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::state::{JOBS, STATE_FAMILIES};

    fn skip(from: i64, until: i64) -> Skip {
        Skip {
            topic: "events".into(),
            partition: 2,
            from,
            until,
            reason: "poison".into(),
            recorded_at_s: 1,
        }
    }

    #[test]
    fn a_backup_taken_while_writing_restores_to_the_state_it_saw() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(&dir.path().join("store"), false).unwrap();
        let mut batch = store.batch();
        batch.put_job(7, b"job 7");
        batch.set_offset("events", 0, 10);
        batch.append_log(0, 0, 9, None, Some(b"{}"));
        batch.put_snapshot(0, b"snapshot");
        store.commit(batch).unwrap();
        let backup = dir.path().join("backup");
        store.checkpoint(&backup).unwrap();
        // Written after the backup: not in it.
        let mut batch = store.batch();
        batch.put_job(8, b"job 8");
        batch.set_offset("events", 0, 11);
        store.commit(batch).unwrap();
        let err = store.checkpoint(&backup).unwrap_err().to_string();
        assert!(err.contains("exists already"), "{err}");

        let restored = dir.path().join("restored");
        restore_backup(&backup, &restored).unwrap();
        let restored = StateStore::open(&restored, false).unwrap();
        let raw = |b: &[u8]| Ok(b.to_vec());
        assert_eq!(
            restored.job(7, raw).unwrap().as_deref(),
            Some(&b"job 7"[..])
        );
        assert_eq!(restored.job(8, raw).unwrap(), None);
        assert_eq!(
            restored.offsets("events").unwrap(),
            BTreeMap::from([(0, 10)])
        );
        assert_eq!(
            restored.snapshot_chain().unwrap(),
            [(0, b"snapshot".to_vec())]
        );
        for family in STATE_FAMILIES.iter().filter(|&&f| f != JOBS) {
            assert_eq!(restored.dump(family).unwrap(), store.dump(family).unwrap());
        }
    }

    #[test]
    fn a_restore_refuses_a_directory_with_files_and_a_source_without_a_store() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(&dir.path().join("store"), false).unwrap();
        let backup = dir.path().join("backup");
        store.checkpoint(&backup).unwrap();
        let occupied = dir.path().join("occupied");
        std::fs::create_dir(&occupied).unwrap();
        std::fs::write(occupied.join("file"), b"x").unwrap();
        let err = restore_backup(&backup, &occupied).unwrap_err().to_string();
        assert!(err.contains("is not empty"), "{err}");
        let err = restore_backup(&occupied, &dir.path().join("new"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("holds no backup"), "{err}");
        // An empty directory is fine.
        let empty = dir.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        restore_backup(&backup, &empty).unwrap();
        assert!(is_store(&empty));
    }

    #[test]
    fn skips_are_kept_in_order_and_never_reach_back_into_consumed_input() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(dir.path(), false).unwrap();
        assert_eq!(store.skips().unwrap(), []);
        let mut batch = store.batch();
        batch.set_offset("events", 2, 100);
        store.commit(batch).unwrap();

        let err = store.add_skip(skip(99, 101)).unwrap_err().to_string();
        assert!(err.contains("consumed up to offset 100 already"), "{err}");
        let err = store.add_skip(skip(105, 105)).unwrap_err().to_string();
        assert!(err.contains("must be non-empty"), "{err}");
        store.add_skip(skip(100, 101)).unwrap();
        store.add_skip(skip(200, 300)).unwrap();
        // Another partition has consumed nothing: anything goes.
        store
            .add_skip(Skip {
                partition: 3,
                ..skip(0, 1)
            })
            .unwrap();
        let skips = store.skips().unwrap();
        assert_eq!(skips.len(), 3);
        assert_eq!(skips[..2], [skip(100, 101), skip(200, 300)]);
        assert!(skips[0].covers("events", 2, 100));
        assert!(!skips[0].covers("events", 2, 101));
        assert!(!skips[0].covers("other", 2, 100));
        assert!(!skips[1].covers("events", 3, 250));
    }

    #[test]
    fn a_store_set_aside_keeps_its_files_under_a_new_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        drop(StateStore::open(&path, false).unwrap());
        let aside = set_aside(&path).unwrap();
        assert!(!path.exists());
        assert!(is_store(&aside));
        let name = aside.file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with("store.replaced-"), "{name}");
    }
}
