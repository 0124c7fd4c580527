//! The service's durable state in RocksDB.
//!
//! One column family per kind of record, plus the consumed Kafka offsets and
//! the log of consumed messages:
//!
//! | column family | key                          | value                          |
//! |---------------|------------------------------|--------------------------------|
//! | `jobs`        | job id (u64 BE)              | job record (binary, `JobRecord::to_bytes`) |
//! | `decisions`   | job id, version (u64, u32 BE) | a published decision (JSON)   |
//! | `tasks`       | job id, task index (u64, u32 BE) | task record (binary, `TaskRecord::to_bytes`) |
//! | `machines`    | machine id (u64 BE)          | machine record (JSON)          |
//! | `deadlines`   | job id (u64 BE)              | a deadline job's plan and recoveries (JSON) |
//! | `policies`    | policy name                  | its error statistics (JSON)    |
//! | `history`     | `global`, or feature, `/`, value hash (u64 BE) | 3Sigma distribution (binary, `HistoryRecord::to_bytes`) |
//! | `offsets`     | topic, 0, partition (i32 BE) | next offset to consume (i64 BE)|
//! | `log`         | sequence number (u64 BE)     | input message: partition, offset, key, payload |
//! | `snapshots`   | sequence number (u64 BE)     | the predictor's state after every message logged before it, whole or as changes |
//! | `parked`      | id (u64 BE)                  | an output the broker refused for good, with why (JSON, [`ParkedOutput`]) |
//! | `expiry`      | end time, job id (u64, u64 BE) | (empty): an ended job whose records expire; end `u64::MAX`: a live job whose decisions stay from an earlier ownership, indexed at its end once it ends |
//! | `meta`        | name                         | value                          |
//!
//! `meta` holds the store's layout version ([`STORE_FORMAT`]), the engine
//! configuration the store was built with, the input partitions whose
//! records it holds, the jobcast releases that created it and last wrote
//! it, and the input ranges an operator told it to skip
//! ([`operations`]); [`StateStore::check_format`] refuses a store that
//! another layout or another configuration wrote, since applying its log
//! again would rebuild a different state, and names the rebuild that
//! resolves it.
//!
//! Everything one batch of input changes, *and the offsets it consumed*, is
//! written with one atomic [`WriteBatch`]: after a crash the store holds
//! either all of a batch or none of it, and consumption resumes from the
//! stored offsets, so no event is lost or applied twice. Big-endian keys
//! make RocksDB's byte order the numeric order. A job's decisions are kept
//! apart from its record so that each is written once: a wide job makes
//! hundreds of decisions, each with its pilot list, while its record changes
//! with every batch.
//!
//! The `log` holds the consumed input messages (applied or dead-lettered)
//! in the order they were processed, with the partition and offset each
//! came from, since the latest snapshot. The in-memory predictor state
//! (policies, in-flight jobs) is a deterministic function of the messages
//! processed; a snapshot (`snapshots`) is that state after every message
//! logged before its sequence number, written atomically with the batch
//! it follows, and the same write deletes the log behind it. A snapshot is
//! whole ([`StateBatch::put_snapshot`], which also deletes the snapshots
//! behind it) or holds only what changed since the one before
//! ([`StateBatch::put_snapshot_changes`]). A restart restores the chain
//! from the latest whole snapshot on and applies the log after it, so what
//! it applies is bounded by how often snapshots are taken, not by how long
//! the service has run.
//! The `history` family holds the 3Sigma distributions of that state, per
//! feature value, written with the batch that changed them, so that what
//! the predictor has learnt can be inspected (and compared between runs)
//! without restoring anything.
//!
//! Ended jobs' records (the job, its decisions and tasks) are kept for a
//! retention window of event time: the `expiry` family indexes them by
//! their end, so that the expired ones are found by one short scan from its
//! start and deleted ([`StateStore::expired`], [`StateBatch::expire_job`]).

mod operations;
mod parked;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use rocksdb::{
    BlockBasedOptions, BottommostLevelCompaction, ColumnFamily, ColumnFamilyDescriptor,
    CompactOptions, DB, DBCompressionType, Direction, FlushOptions, IteratorMode, Options,
    WriteBatch, WriteOptions,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use operations::{Skip, is_store, restore_backup, set_aside, unix_seconds};
pub use parked::ParkedOutput;

pub const JOBS: &str = "jobs";
pub const DECISIONS: &str = "decisions";
pub const TASKS: &str = "tasks";
pub const MACHINES: &str = "machines";
pub const DEADLINES: &str = "deadlines";
pub const HISTORY: &str = "history";
pub const POLICIES: &str = "policies";
pub const OFFSETS: &str = "offsets";
pub const LOG: &str = "log";
pub const SNAPSHOTS: &str = "snapshots";
pub const EXPIRY: &str = "expiry";
pub const PARKED: &str = "parked";
pub const META: &str = "meta";

const COLUMN_FAMILIES: [&str; 13] = [
    JOBS, DECISIONS, TASKS, MACHINES, DEADLINES, HISTORY, POLICIES, OFFSETS, LOG, SNAPSHOTS,
    EXPIRY, PARKED, META,
];

const MAX_TOTAL_WAL_BYTES: u64 = 256 << 20;

/// The store's layout version. 16: the `deadlines` family holds deadline
/// jobs' plans, job records their cluster, `meta` the clusters; 13: a snapshot holds the outputs kept for
/// other owners' partitions; 12: a job carries its ETA, a machine its
/// CPUs; 11: a job's estimates carry their quantiles; 10: jobs carry their partition and requested time limit; 9: a snapshot holds the engine's after the
/// pipeline's parts, its history values as bytes; 8: a snapshot may hold only the history
/// changed since the one before it; 7: snapshots hold when each machine last
/// reported and the watermark that expires silent jobs and machines; 6:
/// the log is truncated behind the latest
/// snapshot (`snapshots`); 5: the `jobs` and `tasks` families hold
/// binary records (`JobRecord::to_bytes`, `TaskRecord::to_bytes`); 4: the
/// `history` family holds binary records (`HistoryRecord::to_bytes`); 3: a
/// job's decisions are stored apart from its record; 2: the log holds every
/// consumed message with its partition, offset and key; 1: the log held
/// applied events only.
pub const STORE_FORMAT: &[u8] = b"16";
const STORE_FORMAT_KEY: &str = "store_format";
/// The jobcast release that created the store, and the one that last
/// opened it to write ([`StateStore::stamp_version`]).
const CREATED_BY_KEY: &str = "created_by";
const WRITTEN_BY_KEY: &str = "written_by";
/// This jobcast's release.
pub const JOBCAST_VERSION: &str = env!("CARGO_PKG_VERSION");
/// The engine configuration a store was built with (JSON).
const ENGINE_CONFIG_KEY: &str = "engine_config";
/// The latest decision of CloudCoaster's controller (JSON).
const CAPACITY_KEY: &str = "capacity";
/// The clusters of a federation and what each holds ([`StateBatch::put_clusters`]).
const CLUSTERS_KEY: &str = "clusters";
/// The input partitions whose records the store holds (JSON list), kept
/// current with every batch that changes them.
const STORED_PARTITIONS_KEY: &str = "stored_partitions";

/// The column families that hold derived state (what two equivalent runs
/// must agree on), as opposed to bookkeeping (offsets, log, meta).
pub const STATE_FAMILIES: [&str; 7] = [
    JOBS, DECISIONS, TASKS, MACHINES, DEADLINES, HISTORY, POLICIES,
];

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("RocksDB at {path}: {source}")]
    Rocks {
        path: String,
        #[source]
        source: rocksdb::Error,
    },
    #[error("corrupt {family} record {key:?}: {reason}")]
    Corrupt {
        family: &'static str,
        key: Vec<u8>,
        reason: String,
    },
    #[error("the state writer thread has stopped after an earlier failed write")]
    WriterStopped,
    #[error("the RocksDB state at {path} cannot be recovered: {reason}")]
    Incompatible { path: String, reason: String },
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// An operator's request that would damage the store.
    #[error("{0}")]
    Refused(String),
    /// A write refused for the room left on the store's filesystem
    /// ([`StateStore::reserve`]): nothing of it was written.
    #[error(
        "the filesystem of the store at {path} has {free_mib} MiB free, under the {reserve_mib} MiB \
         it needs (storage.min_free_bytes; twice that to start): nothing of the write was written; \
         free some room (older backups, storage.backup_keep): the service goes on from its last \
         write"
    )]
    DiskFull {
        path: String,
        free_mib: u64,
        reserve_mib: u64,
    },
}

/// Keys and values of a column family, in key order.
pub type Records = Vec<(Vec<u8>, Vec<u8>)>;

pub struct StateStore {
    db: DB,
    path: String,
    write: WriteOptions,
    /// The id the next parked output gets.
    parked_next: AtomicU64,
    /// Bytes a write must leave free on the store's filesystem
    /// ([`Self::reserve`]); 0: no check.
    reserve_bytes: AtomicU64,
}

impl StateStore {
    /// Open (or create) the store at `path`. With `sync`, every commit is
    /// flushed to disk before it returns, so even a machine crash loses no
    /// committed batch; without it, a process crash still loses nothing.
    pub fn open(path: &Path, sync: bool) -> Result<Self, StoreError> {
        let mut options = Options::default();
        options.create_if_missing(true);
        options.create_missing_column_families(true);
        // A WAL file is deleted only once every column family with writes in
        // it has flushed; rarely written families (meta, policies) would
        // otherwise keep gigabytes of WAL alive (RocksDB's default bound is
        // four times all the memtables).
        options.set_max_total_wal_size(MAX_TOTAL_WAL_BYTES);
        let families = COLUMN_FAMILIES
            .iter()
            .map(|name| ColumnFamilyDescriptor::new(*name, family_options(name)));
        let shown = path.display().to_string();
        let db = DB::open_cf_descriptors(&options, path, families).map_err(|source| {
            StoreError::Rocks {
                path: shown.clone(),
                source,
            }
        })?;
        let mut write = WriteOptions::default();
        write.set_sync(sync);
        StateStore {
            db,
            path: shown,
            write,
            parked_next: AtomicU64::new(0),
            reserve_bytes: AtomicU64::new(0),
        }
        .with_parked_ids()
    }

    /// Open the store at `path` to read, beside a service that may be
    /// writing it: what was committed when it opens.
    pub fn open_read_only(path: &Path) -> Result<Self, StoreError> {
        let shown = path.display().to_string();
        let families = COLUMN_FAMILIES
            .iter()
            .map(|name| ColumnFamilyDescriptor::new(*name, family_options(name)));
        let db = DB::open_cf_descriptors_read_only(&Options::default(), path, families, false)
            .map_err(|source| StoreError::Rocks {
                path: shown.clone(),
                source,
            })?;
        StateStore {
            db,
            path: shown,
            write: WriteOptions::default(),
            parked_next: AtomicU64::new(0),
            reserve_bytes: AtomicU64::new(0),
        }
        .with_parked_ids()
    }

    fn with_parked_ids(mut self) -> Result<Self, StoreError> {
        let next = self.first_free_parked_id()?;
        *self.parked_next.get_mut() = next;
        Ok(self)
    }

    /// The store's directory.
    pub fn path(&self) -> &Path {
        Path::new(&self.path)
    }

    /// Keys (RocksDB's estimate) and bytes on disk (SST files) of every
    /// column family.
    pub fn family_sizes(&self) -> BTreeMap<&'static str, FamilySize> {
        let property = |family: &str, name: &str| {
            self.db
                .property_int_value_cf(self.cf(family), name)
                .ok()
                .flatten()
                .unwrap_or(0)
        };
        COLUMN_FAMILIES
            .iter()
            .map(|&family| {
                let size = FamilySize {
                    keys: property(family, "rocksdb.estimate-num-keys"),
                    bytes: property(family, "rocksdb.total-sst-files-size"),
                    unflushed: property(family, "rocksdb.num-entries-active-mem-table")
                        + property(family, "rocksdb.num-entries-imm-mem-tables"),
                };
                (family, size)
            })
            .collect()
    }

    /// What the store holds (see [`StoreSummary`]).
    pub fn summary(&self) -> Result<StoreSummary, StoreError> {
        let families = self.family_sizes();
        let chain = self.snapshot_chain()?;
        let mut offsets: BTreeMap<String, BTreeMap<i32, i64>> = BTreeMap::new();
        for item in self.db.iterator_cf(self.cf(OFFSETS), IteratorMode::Start) {
            let (key, value) = item.map_err(|e| self.rocks(e))?;
            let corrupt = || StoreError::Corrupt {
                family: OFFSETS,
                key: key.to_vec(),
                reason: "not a topic, 0, partition and an offset".into(),
            };
            let nul = key.iter().position(|&b| b == 0).ok_or_else(corrupt)?;
            let topic = String::from_utf8_lossy(&key[..nul]).into_owned();
            let partition = i32::from_be_bytes(key[nul + 1..].try_into().map_err(|_| corrupt())?);
            let offset = i64::from_be_bytes(value[..].try_into().map_err(|_| corrupt())?);
            offsets.entry(topic).or_default().insert(partition, offset);
        }
        let stored_partitions = match self.meta(STORED_PARTITIONS_KEY)? {
            None => BTreeSet::new(),
            Some(list) => serde_json::from_slice(&list).map_err(|e| StoreError::Corrupt {
                family: META,
                key: STORED_PARTITIONS_KEY.as_bytes().to_vec(),
                reason: e.to_string(),
            })?,
        };
        Ok(StoreSummary {
            path: self.path.clone(),
            format: self.meta_string(STORE_FORMAT_KEY)?,
            created_by: self.meta_string(CREATED_BY_KEY)?,
            written_by: self.meta_string(WRITTEN_BY_KEY)?,
            families,
            snapshot_seq: chain.last().map(|(seq, _)| *seq),
            snapshot_bytes: (!chain.is_empty())
                .then(|| chain.iter().map(|(_, bytes)| bytes.len() as u64).sum()),
            snapshot_chain: chain.len(),
            next_log_seq: self.next_log_seq()?,
            stored_partitions,
            offsets,
            oldest_retained_job: self.expired(0, u64::MAX, 1)?.first().copied(),
            skips: self.skips()?,
            parked: self.parked()?.len() as u64,
        })
    }

    /// Drop a column family, so that a batch built before fails to commit:
    /// the one write failure RocksDB produces on demand.
    #[cfg(test)]
    pub(crate) fn drop_family(&mut self, name: &str) {
        self.db.drop_cf(name).expect("the family drops");
    }

    /// Write every family's memtable to an SST file, so that the next open
    /// has no write-ahead log to replay: a clean stop's last step. (A start
    /// after a crash replays the log, at most [`MAX_TOTAL_WAL_BYTES`].)
    pub fn flush_memtables(&self) -> Result<(), StoreError> {
        let families: Vec<&ColumnFamily> = COLUMN_FAMILIES.iter().map(|n| self.cf(n)).collect();
        self.db
            .flush_cfs_opt(&families, &FlushOptions::default())
            .map_err(|e| self.rocks(e))
    }

    /// Compact every family down to its last level, so that what deletes
    /// and range deletes removed leaves the disk now instead of when
    /// RocksDB's background compaction reaches it: the store's live size
    /// (`jobcast bench recovery` reports both).
    pub fn compact(&self) {
        let mut options = CompactOptions::default();
        options.set_bottommost_level_compaction(BottommostLevelCompaction::Force);
        for name in COLUMN_FAMILIES {
            self.db
                .compact_range_cf_opt(self.cf(name), None::<&[u8]>, None::<&[u8]>, &options);
        }
    }

    fn cf(&self, name: &str) -> &ColumnFamily {
        self.db
            .cf_handle(name)
            .expect("every column family is created on open")
    }

    fn rocks(&self, source: rocksdb::Error) -> StoreError {
        StoreError::Rocks {
            path: self.path.clone(),
            source,
        }
    }

    pub fn batch(&self) -> StateBatch<'_> {
        StateBatch {
            store: self,
            batch: WriteBatch::default(),
        }
    }

    /// Write a batch atomically.
    pub fn commit(&self, batch: StateBatch<'_>) -> Result<(), StoreError> {
        self.commit_write_batch(batch.batch)
    }

    /// Write a batch taken out of a [`StateBatch`] of this store
    /// ([`crate::writer`]).
    pub(crate) fn commit_write_batch(&self, batch: WriteBatch) -> Result<(), StoreError> {
        if self.reserve_bytes.load(Ordering::Relaxed) > 0 {
            self.check_room(1)?;
        }
        self.db
            .write_opt(batch, &self.write)
            .map_err(|e| self.rocks(e))
    }

    /// Keep `bytes` free on the store's filesystem: a commit that finds
    /// less is refused whole ([`StoreError::DiskFull`]) before RocksDB
    /// writes anything, so the room left serves RocksDB's own flushes and
    /// compactions, and a start that opens the store (RocksDB writes a
    /// new manifest and log). RocksDB's `SstFileManager` would bound its
    /// files only, not the write-ahead log nor the backups beside it.
    /// 0: no check.
    pub fn reserve(&self, bytes: u64) {
        self.reserve_bytes.store(bytes, Ordering::Relaxed);
    }

    /// The room on the store's filesystem, against `times` the reserve:
    /// an error if it is below.
    pub fn check_room(&self, times: u64) -> Result<crate::disk::Space, StoreError> {
        let space = crate::disk::space(Path::new(&self.path)).map_err(|source| StoreError::Io {
            path: self.path.clone(),
            source,
        })?;
        let reserve = self
            .reserve_bytes
            .load(Ordering::Relaxed)
            .saturating_mul(times);
        if space.free_bytes < reserve {
            return Err(StoreError::DiskFull {
                path: self.path.clone(),
                free_mib: space.free_bytes >> 20,
                reserve_mib: reserve.div_ceil(1 << 20),
            });
        }
        Ok(space)
    }

    fn get_raw(&self, family: &str, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.db
            .get_cf(self.cf(family), key)
            .map_err(|e| self.rocks(e))
    }

    fn get_json<T: DeserializeOwned>(
        &self,
        family: &'static str,
        key: &[u8],
    ) -> Result<Option<T>, StoreError> {
        self.get_decoded(family, key, |bytes| {
            serde_json::from_slice(bytes).map_err(|e| e.to_string())
        })
    }

    /// A job's decisions, oldest first.
    pub fn decisions<T: DeserializeOwned>(&self, job_id: u64) -> Result<Vec<T>, StoreError> {
        Ok(self.decisions_page(job_id, 0, usize::MAX, usize::MAX)?.0)
    }

    /// A job's decisions from version `from` on, oldest first, until
    /// `limit` of them or `max_bytes` of stored JSON (at least one), and the
    /// version the next page starts at if there is one: a wide job's
    /// history is read a page at a time, never whole.
    pub fn decisions_page<T: DeserializeOwned>(
        &self,
        job_id: u64,
        from: u32,
        limit: usize,
        max_bytes: usize,
    ) -> Result<(Vec<T>, Option<u32>), StoreError> {
        let prefix = job_id.to_be_bytes();
        let start = task_key(job_id, from);
        let iter = self.db.iterator_cf(
            self.cf(DECISIONS),
            IteratorMode::From(&start, Direction::Forward),
        );
        let (mut out, mut bytes) = (Vec::new(), 0usize);
        for item in iter {
            let (key, value) = item.map_err(|e| self.rocks(e))?;
            let Some(version) = key
                .strip_prefix(&prefix)
                .and_then(|rest| <[u8; 4]>::try_from(rest).ok())
            else {
                break;
            };
            let full = bytes.saturating_add(value.len()) > max_bytes && !out.is_empty();
            if out.len() == limit || full {
                return Ok((out, Some(u32::from_be_bytes(version))));
            }
            bytes = bytes.saturating_add(value.len());
            let decision = serde_json::from_slice(&value).map_err(|e| StoreError::Corrupt {
                family: DECISIONS,
                key: key.to_vec(),
                reason: e.to_string(),
            })?;
            out.push(decision);
        }
        Ok((out, None))
    }

    /// A machine's record as stored (JSON bytes).
    pub fn machine_json(&self, machine_id: u64) -> Result<Option<Vec<u8>>, StoreError> {
        self.get_raw(MACHINES, &machine_id.to_be_bytes())
    }

    /// A deadline job's plan and recoveries, read as `T`.
    pub fn deadline<T: DeserializeOwned>(&self, job_id: u64) -> Result<Option<T>, StoreError> {
        self.get_json(DEADLINES, &job_id.to_be_bytes())
    }

    /// A job's record, read with `decode` (`JobRecord::from_bytes`).
    pub fn job<T>(
        &self,
        job_id: u64,
        decode: impl FnOnce(&[u8]) -> Result<T, String>,
    ) -> Result<Option<T>, StoreError> {
        self.get_decoded(JOBS, &job_id.to_be_bytes(), decode)
    }

    /// Job records in job-id order after `after` (from the first without
    /// it), read with `decode`, those `keep` accepts, until `limit` are
    /// kept or `max_scanned` records were read; and the job id to go on
    /// after if the scan stopped before the end. A filter that matches few
    /// jobs costs at most `max_scanned` reads per page, never a full scan.
    pub fn jobs_page<T>(
        &self,
        after: Option<u64>,
        limit: usize,
        max_scanned: usize,
        decode: impl Fn(&[u8]) -> Result<T, String>,
        keep: impl Fn(&T) -> bool,
    ) -> Result<(Vec<T>, Option<u64>), StoreError> {
        let start = match after {
            Some(u64::MAX) => return Ok((Vec::new(), None)),
            Some(id) => (id + 1).to_be_bytes(),
            None => 0u64.to_be_bytes(),
        };
        let iter = self.db.iterator_cf(
            self.cf(JOBS),
            IteratorMode::From(&start, Direction::Forward),
        );
        let (mut out, mut scanned, mut last) = (Vec::new(), 0usize, None);
        for item in iter {
            if out.len() == limit || scanned == max_scanned {
                return Ok((out, last));
            }
            let (key, value) = item.map_err(|e| self.rocks(e))?;
            let corrupt = |reason: String| StoreError::Corrupt {
                family: JOBS,
                key: key.to_vec(),
                reason,
            };
            let id = <[u8; 8]>::try_from(&key[..])
                .map(u64::from_be_bytes)
                .map_err(|_| corrupt(format!("a key of {} bytes, not 8", key.len())))?;
            let record = decode(&value).map_err(corrupt)?;
            scanned += 1;
            last = Some(id);
            if keep(&record) {
                out.push(record);
            }
        }
        Ok((out, None))
    }

    /// A task's record, read with `decode` (`TaskRecord::from_bytes`).
    pub fn task<T>(
        &self,
        job_id: u64,
        task_index: u32,
        decode: impl FnOnce(&[u8]) -> Result<T, String>,
    ) -> Result<Option<T>, StoreError> {
        self.get_decoded(TASKS, &task_key(job_id, task_index), decode)
    }

    fn get_decoded<T>(
        &self,
        family: &'static str,
        key: &[u8],
        decode: impl FnOnce(&[u8]) -> Result<T, String>,
    ) -> Result<Option<T>, StoreError> {
        self.get_raw(family, key)?
            .map(|bytes| {
                decode(&bytes).map_err(|reason| StoreError::Corrupt {
                    family,
                    key: key.to_vec(),
                    reason,
                })
            })
            .transpose()
    }

    pub fn machine<T: DeserializeOwned>(&self, machine_id: u64) -> Result<Option<T>, StoreError> {
        self.get_json(MACHINES, &machine_id.to_be_bytes())
    }

    /// The next offset to consume for each stored partition of `topic`.
    pub fn offsets(&self, topic: &str) -> Result<BTreeMap<i32, i64>, StoreError> {
        let prefix = offset_prefix(topic);
        let mut out = BTreeMap::new();
        let iter = self.db.iterator_cf(
            self.cf(OFFSETS),
            IteratorMode::From(&prefix, Direction::Forward),
        );
        for item in iter {
            let (key, value) = item.map_err(|e| self.rocks(e))?;
            let Some(partition) = key.strip_prefix(prefix.as_slice()) else {
                break;
            };
            let corrupt = |reason: &str| StoreError::Corrupt {
                family: OFFSETS,
                key: key.to_vec(),
                reason: reason.into(),
            };
            let partition = i32::from_be_bytes(
                partition
                    .try_into()
                    .map_err(|_| corrupt("partition is not 4 bytes"))?,
            );
            let offset = i64::from_be_bytes(
                value[..]
                    .try_into()
                    .map_err(|_| corrupt("offset is not 8 bytes"))?,
            );
            out.insert(partition, offset);
        }
        Ok(out)
    }

    /// The sequence number the next logged event gets: after the last
    /// logged one, or the latest snapshot's when the log behind it is
    /// truncated and nothing was logged since.
    pub fn next_log_seq(&self) -> Result<u64, StoreError> {
        let snapshot = self.latest_snapshot_seq()?;
        let mut iter = self.db.iterator_cf(self.cf(LOG), IteratorMode::End);
        match iter.next() {
            None => Ok(snapshot),
            Some(item) => {
                let (key, _) = item.map_err(|e| self.rocks(e))?;
                Ok((sequence_number(LOG, &key)? + 1).max(snapshot))
            }
        }
    }

    /// The latest snapshot's sequence number (0 without one), read without
    /// its value.
    fn latest_snapshot_seq(&self) -> Result<u64, StoreError> {
        let mut iter = self.db.raw_iterator_cf(self.cf(SNAPSHOTS));
        iter.seek_to_last();
        iter.status().map_err(|e| self.rocks(e))?;
        Ok(iter
            .key()
            .and_then(|k| k.try_into().ok())
            .map_or(0, u64::from_be_bytes))
    }

    /// The logged messages from sequence number `from` on, in the order
    /// they were processed.
    pub fn log_from(
        &self,
        from: u64,
    ) -> impl Iterator<Item = Result<LoggedMessage, StoreError>> + '_ {
        let from = from.to_be_bytes();
        self.db
            .iterator_cf(self.cf(LOG), IteratorMode::From(&from, Direction::Forward))
            .map(|item| {
                let (key, value) = item.map_err(|e| self.rocks(e))?;
                LoggedMessage::decode(&value).ok_or_else(|| StoreError::Corrupt {
                    family: LOG,
                    key: key.to_vec(),
                    reason: "not a logged message (partition, offset, key, payload)".into(),
                })
            })
    }

    /// Up to `limit` ended jobs that ended from `from_us` to before
    /// `before_us`, oldest first: (end time, job id).
    pub fn expired(
        &self,
        from_us: u64,
        before_us: u64,
        limit: usize,
    ) -> Result<Vec<(u64, u64)>, StoreError> {
        let mut out = Vec::new();
        // From where the caller knows nothing is left: the deleted entries
        // below stay as tombstones until compaction, and a scan from the
        // start steps over every one of them.
        let from = expiry_key(from_us, 0);
        let mode = IteratorMode::From(&from, rocksdb::Direction::Forward);
        for item in self.db.iterator_cf(self.cf(EXPIRY), mode) {
            let (key, _) = item.map_err(|e| self.rocks(e))?;
            let corrupt = || StoreError::Corrupt {
                family: EXPIRY,
                key: key.to_vec(),
                reason: "not an end time and a job id (16 bytes)".into(),
            };
            let (end, job) = key.split_first_chunk::<8>().ok_or_else(corrupt)?;
            let job: [u8; 8] = job.try_into().map_err(|_| corrupt())?;
            let end_us = u64::from_be_bytes(*end);
            if end_us >= before_us || out.len() >= limit {
                break;
            }
            out.push((end_us, u64::from_be_bytes(job)));
        }
        Ok(out)
    }

    /// Live jobs whose decisions the store keeps from when it owned their
    /// partition (indexed at [`END_UNKNOWN`]): once each ends, it is
    /// indexed at its end instead ([`StateBatch::index_end`]).
    pub fn awaiting_end(&self) -> Result<Vec<u64>, StoreError> {
        let from = expiry_key(END_UNKNOWN, 0);
        let mode = IteratorMode::From(&from, rocksdb::Direction::Forward);
        let mut jobs = Vec::new();
        for item in self.db.iterator_cf(self.cf(EXPIRY), mode) {
            let (key, _) = item.map_err(|e| self.rocks(e))?;
            let job = key
                .get(8..16)
                .and_then(|b| <[u8; 8]>::try_from(b).ok())
                .ok_or_else(|| StoreError::Corrupt {
                    family: EXPIRY,
                    key: key.to_vec(),
                    reason: "not an end time and a job id (16 bytes)".into(),
                })?;
            jobs.push(u64::from_be_bytes(job));
        }
        Ok(jobs)
    }

    /// The snapshots a restore needs, oldest first: the latest whole one
    /// and those written after it with only what changed
    /// ([`StateBatch::put_snapshot_changes`]). Each comes with the sequence
    /// number of the first message it does not include.
    pub fn snapshot_chain(&self) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
        self.db
            .iterator_cf(self.cf(SNAPSHOTS), IteratorMode::Start)
            .map(|item| {
                let (key, value) = item.map_err(|e| self.rocks(e))?;
                Ok((sequence_number(SNAPSHOTS, &key)?, value.into_vec()))
            })
            .collect()
    }

    /// The latest decision of CloudCoaster's controller, as JSON
    /// ([`StateBatch::put_capacity`]).
    pub fn capacity_json(&self) -> Result<Option<Vec<u8>>, StoreError> {
        self.meta(CAPACITY_KEY)
    }

    /// The clusters as last stored ([`StateBatch::put_clusters`]), JSON.
    pub fn clusters_json(&self) -> Result<Option<Vec<u8>>, StoreError> {
        self.meta(CLUSTERS_KEY)
    }

    pub fn meta(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.get_raw(META, name.as_bytes())
    }

    fn meta_string(&self, name: &str) -> Result<Option<String>, StoreError> {
        Ok(self
            .meta(name)?
            .map(|v| String::from_utf8_lossy(&v).into_owned()))
    }

    /// Record that this jobcast release writes the store from now on, and
    /// return the release that wrote it before (`None` for a new store, or
    /// one older than the record).
    pub fn stamp_version(&self) -> Result<Option<String>, StoreError> {
        let before = self.meta_string(WRITTEN_BY_KEY)?;
        let mut batch = self.batch();
        batch.set_meta(WRITTEN_BY_KEY, JOBCAST_VERSION.as_bytes());
        self.commit(batch)?;
        Ok(before)
    }

    /// Check that this store can be recovered by this jobcast with
    /// `engine_config` (the engine's configuration, serialised): an empty
    /// store can; one with a log must have been written in this layout
    /// ([`STORE_FORMAT`]) with the same configuration. Returns the input
    /// partitions whose records the store holds.
    pub fn check_format(&self, engine_config: &[u8]) -> Result<BTreeSet<i32>, StoreError> {
        let refuse = |reason: String| StoreError::Incompatible {
            path: self.path.clone(),
            reason,
        };
        let logged = self.next_log_seq()? > 0;
        // An older layout is named first: an upgrade changes the engine
        // configuration's defaults too, and the layout is the reason.
        let format = self.meta(STORE_FORMAT_KEY)?;
        let older = logged && format.as_deref() != Some(STORE_FORMAT);
        let older_layout = || {
            let found = format
                .as_deref()
                .map_or("1".into(), |f| String::from_utf8_lossy(f).into_owned());
            refuse(format!(
                "it was written by an older jobcast (store format {found}; this one reads {}, \
                 and derives its state differently); rebuild it from the input topic ({})",
                String::from_utf8_lossy(STORE_FORMAT),
                self.rebuild_hint()
            ))
        };
        if older && format.is_some() {
            return Err(older_layout());
        }
        match self.meta(ENGINE_CONFIG_KEY)? {
            Some(stored) if stored != engine_config => {
                return Err(refuse(format!(
                    "it was built with another engine configuration ({}); \
                     rebuild it from the input topic for this one ({})",
                    String::from_utf8_lossy(&stored),
                    self.rebuild_hint()
                )));
            }
            None if logged => {
                return Err(refuse(
                    "it has logged events but no engine configuration".into(),
                ));
            }
            _ => {}
        }
        if older {
            return Err(older_layout());
        }
        match self.meta(STORED_PARTITIONS_KEY)? {
            None => Ok(BTreeSet::new()),
            Some(stored) => serde_json::from_slice(&stored)
                .map_err(|e| refuse(format!("its list of stored partitions is corrupt: {e}"))),
        }
    }

    /// How to rebuild this store, for the errors that call for it.
    fn rebuild_hint(&self) -> String {
        format!(
            "stop the service, run `jobcast admin rebuild --data-dir {}`, start it again",
            self.path
        )
    }

    /// Every key and value of a column family, in key order (for
    /// comparing two stores, and for debugging).
    pub fn dump(&self, family: &str) -> Result<Records, StoreError> {
        self.db
            .iterator_cf(self.cf(family), IteratorMode::Start)
            .map(|item| {
                item.map(|(k, v)| (k.into_vec(), v.into_vec()))
                    .map_err(|e| self.rocks(e))
            })
            .collect()
    }

    /// RocksDB's write throttling now: whether writes are stopped (too
    /// many memtables or level-0 files, or too much pending compaction),
    /// and the rate in bytes/s writes are slowed to (0 when not slowed).
    pub fn write_stall(&self) -> (bool, u64) {
        let property = |name: &str| self.db.property_int_value(name).ok().flatten().unwrap_or(0);
        (
            property("rocksdb.is-write-stopped") > 0,
            property("rocksdb.actual-delayed-write-rate"),
        )
    }
}

/// A `log` or `snapshots` key: a sequence number, big-endian.
fn sequence_number(family: &'static str, key: &[u8]) -> Result<u64, StoreError> {
    let seq: [u8; 8] = key.try_into().map_err(|_| StoreError::Corrupt {
        family,
        key: key.to_vec(),
        reason: "sequence number is not 8 bytes".into(),
    })?;
    Ok(u64::from_be_bytes(seq))
}

/// A column family's options, chosen for how it is used. Every family but
/// the snapshots is compressed with zstd (records of one kind share most
/// of their bytes); snapshots (postcard's dense integers and floats)
/// barely compress, and would cost a compression at every flush and
/// compaction. A whole snapshot deletes all before it by range, but their
/// bytes stay on disk until a compaction drops them: the snapshots are
/// compacted at every flush, so the family holds the live chain and at
/// most one flush's worth more, not four (RocksDB's default trigger).
/// The families read by key (a job, a task, a machine, a history value:
/// `GET /jobs/{id}` and the takeover's writes) get a Bloom filter, so that
/// a lookup reads one block, not one per level; the log (appended, read in
/// order once on restart, deleted by range) and the snapshots need none.
fn family_options(name: &str) -> Options {
    let mut options = Options::default();
    let compression = if name == SNAPSHOTS {
        options.set_level_zero_file_num_compaction_trigger(1);
        DBCompressionType::None
    } else {
        DBCompressionType::Zstd
    };
    options.set_compression_type(compression);
    options.set_bottommost_compression_type(compression);
    if matches!(name, JOBS | TASKS | MACHINES | HISTORY) {
        let mut table = BlockBasedOptions::default();
        table.set_bloom_filter(10.0, false);
        options.set_block_based_table_factory(&table);
    }
    options
}

/// What a store holds, for operators (`jobcast admin info`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StoreSummary {
    pub path: String,
    pub format: Option<String>,
    /// The jobcast release that created the store, and the one that last
    /// opened it to write.
    pub created_by: Option<String>,
    pub written_by: Option<String>,
    /// Keys (RocksDB's estimate) and bytes on disk (SST files) per family.
    pub families: BTreeMap<&'static str, FamilySize>,
    /// The sequence number the latest snapshot restores to, the bytes of
    /// the snapshots a restore reads, and how many they are (a whole one
    /// and those holding only changes after it).
    pub snapshot_seq: Option<u64>,
    pub snapshot_bytes: Option<u64>,
    pub snapshot_chain: usize,
    /// The sequence number the next logged message gets.
    pub next_log_seq: u64,
    /// The input partitions whose records the store holds.
    pub stored_partitions: BTreeSet<i32>,
    /// The next offset to consume of each input partition, by topic.
    pub offsets: BTreeMap<String, BTreeMap<i32, i64>>,
    /// The end time (µs) and id of the oldest ended job still retained.
    pub oldest_retained_job: Option<(u64, u64)>,
    /// Input the service dead-letters instead of applying.
    pub skips: Vec<Skip>,
    /// Outputs the broker refused for good, waiting to be published again
    /// ([`ParkedOutput`]).
    pub parked: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FamilySize {
    pub keys: u64,
    pub bytes: u64,
    /// Writes held in memtables only: a start after a crash replays them
    /// from the write-ahead log; after a clean stop there are none.
    pub unflushed: u64,
}

/// Writes collected for one atomic commit.
pub struct StateBatch<'a> {
    store: &'a StateStore,
    batch: WriteBatch,
}

impl StateBatch<'_> {
    pub(crate) fn store(&self) -> &StateStore {
        self.store
    }

    /// The batch itself, to be committed elsewhere ([`crate::writer`]):
    /// column family handles live as long as the store.
    pub(crate) fn into_write_batch(self) -> WriteBatch {
        self.batch
    }

    fn put_json<T: Serialize>(&mut self, family: &str, key: &[u8], value: &T) {
        let bytes = serde_json::to_vec(value).expect("records serialise to JSON");
        self.batch.put_cf(self.store.cf(family), key, bytes);
    }

    /// Store a job's record, in its binary form (`JobRecord::to_bytes`).
    pub fn put_job(&mut self, job_id: u64, record: &[u8]) {
        self.batch
            .put_cf(self.store.cf(JOBS), job_id.to_be_bytes(), record);
    }

    /// Store one of a job's decisions; `version` orders them.
    pub fn put_decision<T: Serialize>(&mut self, job_id: u64, version: u32, decision: &T) {
        self.put_json(DECISIONS, &task_key(job_id, version), decision);
    }

    /// Store a decision already in its JSON form ([`Self::put_decision`]'s).
    pub fn put_decision_json(&mut self, job_id: u64, version: u32, json: &[u8]) {
        self.batch
            .put_cf(self.store.cf(DECISIONS), task_key(job_id, version), json);
    }

    /// Store a task's record, in its binary form (`TaskRecord::to_bytes`).
    pub fn put_task(&mut self, job_id: u64, task_index: u32, record: &[u8]) {
        self.batch
            .put_cf(self.store.cf(TASKS), task_key(job_id, task_index), record);
    }

    /// Store a deadline job's plan and recoveries.
    pub fn put_deadline<T: Serialize>(&mut self, job_id: u64, record: &T) {
        self.put_json(DEADLINES, &job_id.to_be_bytes(), record);
    }

    pub fn put_machine<T: Serialize>(&mut self, machine_id: u64, record: &T) {
        self.put_json(MACHINES, &machine_id.to_be_bytes(), record);
    }

    /// Store a history distribution under its key
    /// (`jobcast_predictor::history::HistoryKey::to_bytes`), in its binary
    /// form (`HistoryRecord::to_bytes`).
    pub fn put_history(&mut self, key: &[u8], record: &[u8]) {
        self.batch.put_cf(self.store.cf(HISTORY), key, record);
    }

    pub fn put_policy<T: Serialize>(&mut self, name: &str, record: &T) {
        self.put_json(POLICIES, name.as_bytes(), record);
    }

    /// Delete a job's record, its deadline plan and its decisions.
    pub fn delete_job(&mut self, job_id: u64) {
        self.delete_job_record(job_id);
        // The end is exclusive: one byte past the job's last possible key.
        let mut end = task_key(job_id, u32::MAX).to_vec();
        end.push(0);
        self.batch
            .delete_range_cf(self.store.cf(DECISIONS), &task_key(job_id, 0)[..], &end[..]);
    }

    /// Index an ended job's records for expiry at `end_us` plus the
    /// retention window.
    pub fn put_expiry(&mut self, end_us: u64, job_id: u64) {
        self.batch
            .put_cf(self.store.cf(EXPIRY), expiry_key(end_us, job_id), []);
    }

    /// Keep a live job's decisions until it ends: the store no longer
    /// owns its partition, so its end will not be stored here.
    pub fn await_end(&mut self, job_id: u64) {
        self.put_expiry(END_UNKNOWN, job_id);
    }

    /// A job [awaiting its end](Self::await_end) ended at `end_us`:
    /// index what the store keeps of it at its end.
    pub fn index_end(&mut self, end_us: u64, job_id: u64) {
        self.batch
            .delete_cf(self.store.cf(EXPIRY), expiry_key(END_UNKNOWN, job_id));
        self.put_expiry(end_us, job_id);
    }

    /// Delete an ended job's records (the job, its decisions, its tasks)
    /// and its expiry entry.
    pub fn expire_job(&mut self, end_us: u64, job_id: u64) {
        self.delete_job(job_id);
        let mut end = task_key(job_id, u32::MAX).to_vec();
        end.push(0);
        self.batch
            .delete_range_cf(self.store.cf(TASKS), &task_key(job_id, 0)[..], &end[..]);
        self.batch
            .delete_cf(self.store.cf(EXPIRY), expiry_key(end_us, job_id));
    }

    /// Delete a job's record and its deadline plan, keeping its
    /// decisions.
    pub fn delete_job_record(&mut self, job_id: u64) {
        self.batch
            .delete_cf(self.store.cf(JOBS), job_id.to_be_bytes());
        self.batch
            .delete_cf(self.store.cf(DEADLINES), job_id.to_be_bytes());
    }

    pub fn delete_task(&mut self, job_id: u64, task_index: u32) {
        self.batch
            .delete_cf(self.store.cf(TASKS), task_key(job_id, task_index));
    }

    pub fn delete_machine(&mut self, machine_id: u64) {
        self.batch
            .delete_cf(self.store.cf(MACHINES), machine_id.to_be_bytes());
    }

    /// Drop a history distribution that holds no jobs any more.
    pub fn delete_history(&mut self, key: &[u8]) {
        self.batch.delete_cf(self.store.cf(HISTORY), key);
    }

    /// Record that `partition` of `topic` is consumed up to (not
    /// including) `next_offset`.
    pub fn set_offset(&mut self, topic: &str, partition: i32, next_offset: i64) {
        let mut key = offset_prefix(topic);
        key.extend_from_slice(&partition.to_be_bytes());
        self.batch
            .put_cf(self.store.cf(OFFSETS), key, next_offset.to_be_bytes());
    }

    /// Log the input message at `partition`/`offset` as the `seq`th
    /// processed.
    pub fn append_log(
        &mut self,
        seq: u64,
        partition: i32,
        offset: i64,
        key: Option<&[u8]>,
        payload: Option<&[u8]>,
    ) {
        let value = LoggedMessage::encode(partition, offset, key, payload);
        self.batch
            .put_cf(self.store.cf(LOG), seq.to_be_bytes(), value);
    }

    /// Store `snapshot`, the predictor's state after every message logged
    /// before `seq`, and delete the log and the snapshots behind it: a
    /// restart then restores this snapshot and applies only what is logged
    /// from `seq` on. Range deletes cost one tombstone each, whatever they
    /// cover; compaction reclaims the space.
    pub fn put_snapshot(&mut self, seq: u64, snapshot: &[u8]) {
        let zero = 0u64.to_be_bytes();
        self.batch
            .delete_range_cf(self.store.cf(SNAPSHOTS), &zero[..], &seq.to_be_bytes()[..]);
        self.put_snapshot_changes(seq, snapshot);
    }

    /// Store `snapshot`, what changed after the snapshots already stored
    /// (which a restore reads first), and delete the log behind it.
    pub fn put_snapshot_changes(&mut self, seq: u64, snapshot: &[u8]) {
        let key = seq.to_be_bytes();
        let zero = 0u64.to_be_bytes();
        self.batch.put_cf(self.store.cf(SNAPSHOTS), key, snapshot);
        self.batch
            .delete_range_cf(self.store.cf(LOG), &zero[..], &key[..]);
    }

    /// Store the latest decision of CloudCoaster's controller (JSON; every
    /// instance holds the same, learnt from every partition).
    pub fn put_capacity<T: Serialize>(&mut self, decision: &T) {
        let bytes = serde_json::to_vec(decision).expect("records serialise to JSON");
        self.set_meta(CAPACITY_KEY, &bytes);
    }

    /// Store the clusters and what each holds.
    pub fn put_clusters<T: Serialize>(&mut self, clusters: &T) {
        let bytes = serde_json::to_vec(clusters).expect("records serialise to JSON");
        self.set_meta(CLUSTERS_KEY, &bytes);
    }

    pub fn set_meta(&mut self, name: &str, value: &[u8]) {
        self.batch
            .put_cf(self.store.cf(META), name.as_bytes(), value);
    }

    /// Mark a new store with this layout and the engine configuration it is
    /// built with (see [`StateStore::check_format`]).
    pub fn stamp_format(&mut self, engine_config: &[u8]) {
        self.set_meta(ENGINE_CONFIG_KEY, engine_config);
        self.set_meta(STORE_FORMAT_KEY, STORE_FORMAT);
        self.set_meta(CREATED_BY_KEY, JOBCAST_VERSION.as_bytes());
    }

    /// Record which input partitions' records the store holds.
    pub fn set_stored_partitions(&mut self, partitions: &BTreeSet<i32>) {
        let list = serde_json::to_vec(partitions).expect("partitions serialise");
        self.set_meta(STORED_PARTITIONS_KEY, &list);
    }

    /// Writes collected so far.
    pub fn len(&self) -> usize {
        self.batch.len()
    }

    pub fn is_empty(&self) -> bool {
        self.batch.is_empty()
    }
}

/// One input message as logged: where it came from, its key and its
/// payload (`None` for a message without one, which is dead-lettered).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedMessage {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub payload: Option<Vec<u8>>,
}

impl LoggedMessage {
    /// partition (i32 BE), offset (i64 BE), key length (i32 BE, -1 for
    /// none), key, 1 if a payload follows (else 0), payload.
    fn encode(partition: i32, offset: i64, key: Option<&[u8]>, payload: Option<&[u8]>) -> Vec<u8> {
        let key_len = key.map_or(-1, |k| i32::try_from(k.len()).expect("Kafka keys fit i32"));
        let mut value =
            Vec::with_capacity(17 + key.map_or(0, <[u8]>::len) + payload.map_or(0, <[u8]>::len));
        value.extend_from_slice(&partition.to_be_bytes());
        value.extend_from_slice(&offset.to_be_bytes());
        value.extend_from_slice(&key_len.to_be_bytes());
        value.extend_from_slice(key.unwrap_or_default());
        value.push(u8::from(payload.is_some()));
        value.extend_from_slice(payload.unwrap_or_default());
        value
    }

    fn decode(value: &[u8]) -> Option<Self> {
        let (partition, rest) = value.split_first_chunk::<4>()?;
        let (offset, rest) = rest.split_first_chunk::<8>()?;
        let (key_len, rest) = rest.split_first_chunk::<4>()?;
        let (key, rest) = match i32::from_be_bytes(*key_len) {
            -1 => (None, rest),
            len => {
                let len = usize::try_from(len).ok()?;
                (Some(rest.get(..len)?.to_vec()), rest.get(len..)?)
            }
        };
        let (has_payload, payload) = rest.split_first()?;
        Some(LoggedMessage {
            partition: i32::from_be_bytes(*partition),
            offset: i64::from_be_bytes(*offset),
            key,
            payload: match has_payload {
                0 if payload.is_empty() => None,
                1 => Some(payload.to_vec()),
                _ => return None,
            },
        })
    }
}

/// The key of a task (job id, task index) or of a decision (job id,
/// version).
fn task_key(job_id: u64, index: u32) -> [u8; 12] {
    let mut key = [0u8; 12];
    key[..8].copy_from_slice(&job_id.to_be_bytes());
    key[8..].copy_from_slice(&index.to_be_bytes());
    key
}

/// The end time in `expiry` of a live job whose decisions the store keeps
/// ([`StateBatch::await_end`]): after every real end, so no retention
/// bound reaches it.
pub const END_UNKNOWN: u64 = u64::MAX;

/// The key of an ended job in `expiry`: its end time, then its id.
fn expiry_key(end_us: u64, job_id: u64) -> [u8; 16] {
    let mut key = [0u8; 16];
    key[..8].copy_from_slice(&end_us.to_be_bytes());
    key[8..].copy_from_slice(&job_id.to_be_bytes());
    key
}

/// Topic names cannot contain NUL, so `topic, 0` is an unambiguous prefix.
fn offset_prefix(topic: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(topic.len() + 5);
    key.extend_from_slice(topic.as_bytes());
    key.push(0);
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The job ids the keys of `family` start with, in key order.
    fn job_ids<C: FromIterator<u64>>(store: &StateStore, family: &str) -> C {
        store
            .dump(family)
            .unwrap()
            .iter()
            .map(|(k, _)| u64::from_be_bytes(k[..8].try_into().unwrap()))
            .collect()
    }

    #[test]
    fn a_jobs_decisions_are_listed_in_version_order_and_deleted_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(dir.path(), false).unwrap();
        let mut batch = store.batch();
        for (job_id, version) in [(7, 2), (7, 1), (6, 1), (8, 1), (7, u32::MAX), (7, 256)] {
            batch.put_job(job_id, &job_id.to_le_bytes());
            batch.put_decision(job_id, version, &serde_json::json!({ "v": version }));
        }
        store.commit(batch).unwrap();
        let versions = |job_id| -> Vec<u64> {
            let stored = store.decisions::<serde_json::Value>(job_id).unwrap();
            stored.iter().map(|d| d["v"].as_u64().unwrap()).collect()
        };
        assert_eq!(versions(7), [1, 2, 256, u64::from(u32::MAX)]);
        assert_eq!(versions(9), Vec::<u64>::new());
        // Pages: from a version on, at most `limit`, and where the next
        // page starts.
        let page = |from, limit| {
            let (stored, next) = store
                .decisions_page::<serde_json::Value>(7, from, limit, usize::MAX)
                .unwrap();
            let versions: Vec<u64> = stored.iter().map(|d| d["v"].as_u64().unwrap()).collect();
            (versions, next)
        };
        assert_eq!(page(0, 2), (vec![1, 2], Some(256)));
        assert_eq!(page(256, 2), (vec![256, u64::from(u32::MAX)], None));
        assert_eq!(page(3, 1), (vec![256], Some(u32::MAX)));
        assert_eq!(page(0, 0), (vec![], Some(1)));
        assert_eq!(page(u32::MAX, 5), (vec![u64::from(u32::MAX)], None));
        // A byte budget ends a page too, after at least one decision.
        let sized = |max_bytes| {
            let (stored, next) = store
                .decisions_page::<serde_json::Value>(7, 0, 10, max_bytes)
                .unwrap();
            (stored.len(), next)
        };
        let one = serde_json::to_vec(&serde_json::json!({ "v": 1 }))
            .unwrap()
            .len();
        assert_eq!(sized(0), (1, Some(2)));
        assert_eq!(sized(2 * one), (2, Some(256)));

        let mut batch = store.batch();
        batch.delete_job(7);
        store.commit(batch).unwrap();
        assert_eq!(versions(7), Vec::<u64>::new());
        assert!(store.job(7, |b| Ok(b.to_vec())).unwrap().is_none());
        assert_eq!(versions(6), [1]);
        assert_eq!(versions(8), [1]);
    }

    #[test]
    fn a_committed_batch_is_there_after_reopening_and_an_uncommitted_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = StateStore::open(dir.path(), true).unwrap();
            let mut batch = store.batch();
            batch.put_job(7, b"job 7");
            batch.put_task(7, 1, b"task 1");
            batch.set_offset("events", 3, 42);
            batch.set_offset("events-2", 0, 5);
            batch.append_log(0, 3, 41, Some(b"7"), Some(b"{\"a\":1}"));
            batch.append_log(1, 0, 7, None, None);
            batch.append_log(2, 1, 0, Some(b""), Some(b""));
            store.commit(batch).unwrap();
            let mut lost = store.batch();
            lost.put_job(8, b"job 8");
            lost.set_offset("events", 3, 99);
            // Dropped without commit: as if the process died here.
        }
        let store = StateStore::open(dir.path(), true).unwrap();
        let raw = |b: &[u8]| Ok(b.to_vec());
        assert_eq!(store.job(7, raw).unwrap().as_deref(), Some(&b"job 7"[..]));
        assert_eq!(store.job(8, raw).unwrap(), None);
        assert_eq!(
            store.task(7, 1, raw).unwrap().as_deref(),
            Some(&b"task 1"[..])
        );
        assert_eq!(store.offsets("events").unwrap(), BTreeMap::from([(3, 42)]));
        assert_eq!(store.offsets("events-2").unwrap(), BTreeMap::from([(0, 5)]));
        assert_eq!(store.offsets("other").unwrap(), BTreeMap::new());
        assert_eq!(store.next_log_seq().unwrap(), 3);
        let log: Vec<LoggedMessage> = store.log_from(0).collect::<Result<_, _>>().unwrap();
        assert_eq!(
            log,
            vec![
                LoggedMessage {
                    partition: 3,
                    offset: 41,
                    key: Some(b"7".to_vec()),
                    payload: Some(b"{\"a\":1}".to_vec())
                },
                LoggedMessage {
                    partition: 0,
                    offset: 7,
                    key: None,
                    payload: None
                },
                LoggedMessage {
                    partition: 1,
                    offset: 0,
                    key: Some(Vec::new()),
                    payload: Some(Vec::new())
                }
            ]
        );
    }

    #[test]
    fn log_and_offsets_keep_numeric_order() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(dir.path(), false).unwrap();
        let mut batch = store.batch();
        for seq in [300u64, 2, 256, 1] {
            batch.append_log(seq, -1, i64::MIN, None, Some(seq.to_string().as_bytes()));
        }
        for partition in [10, 2, 256] {
            batch.set_offset("t", partition, i64::from(partition) * 2);
        }
        store.commit(batch).unwrap();
        let log: Vec<String> = store
            .log_from(0)
            .map(|r| String::from_utf8(r.unwrap().payload.unwrap()).unwrap())
            .collect();
        assert_eq!(log, ["1", "2", "256", "300"]);
        assert_eq!(store.next_log_seq().unwrap(), 301);
        let offsets: Vec<(i32, i64)> = store.offsets("t").unwrap().into_iter().collect();
        assert_eq!(offsets, [(2, 4), (10, 20), (256, 512)]);
    }

    #[test]
    fn flushed_memtables_hold_nothing_and_lose_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(dir.path(), false).unwrap();
        let in_memtables = |store: &StateStore| -> u64 {
            store.family_sizes().values().map(|f| f.unflushed).sum()
        };
        let mut batch = store.batch();
        batch.put_job(7, b"job 7");
        batch.append_log(0, 0, 9, None, Some(b"{}"));
        batch.put_snapshot(1, b"snapshot");
        store.commit(batch).unwrap();
        assert!(in_memtables(&store) > 0);
        store.flush_memtables().unwrap();
        assert_eq!(in_memtables(&store), 0);
        drop(store);
        let store = StateStore::open(dir.path(), false).unwrap();
        assert_eq!(store.snapshot_chain().unwrap(), [(1, b"snapshot".to_vec())]);
    }

    #[test]
    fn compaction_removes_from_disk_what_a_truncation_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(dir.path(), false).unwrap();
        let log_bytes = |store: &StateStore| store.family_sizes()[LOG].bytes;
        let mut batch = store.batch();
        for seq in 0..10_000u64 {
            let payload = seq.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_le_bytes();
            batch.append_log(seq, 0, seq as i64, None, Some(&payload));
        }
        store.commit(batch).unwrap();
        store.flush_memtables().unwrap();
        let mut batch = store.batch();
        batch.put_snapshot(10_000, b"snapshot");
        store.commit(batch).unwrap();
        store.flush_memtables().unwrap();
        // The range delete is written; the entries it covers are still on
        // disk until a compaction meets them.
        assert!(store.log_from(0).next().is_none());
        assert!(log_bytes(&store) > 10_000 * 8, "{}", log_bytes(&store));
        store.compact();
        assert_eq!(log_bytes(&store), 0);
        assert_eq!(
            store.snapshot_chain().unwrap(),
            [(10_000, b"snapshot".to_vec())]
        );
    }

    #[test]
    fn a_snapshot_truncates_the_log_and_the_snapshots_behind_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(dir.path(), false).unwrap();
        let payloads = |store: &StateStore, from| -> Vec<u64> {
            store
                .log_from(from)
                .map(|r| r.unwrap().offset as u64)
                .collect()
        };
        let mut batch = store.batch();
        for seq in 0..10u64 {
            batch.append_log(seq, 0, seq as i64, None, Some(b"{}"));
        }
        batch.put_snapshot(4, b"four");
        store.commit(batch).unwrap();
        assert_eq!(payloads(&store, 0), [4, 5, 6, 7, 8, 9]);
        assert_eq!(payloads(&store, 7), [7, 8, 9]);
        assert_eq!(store.snapshot_chain().unwrap(), [(4, b"four".to_vec())]);

        // One with only changes keeps those before it, not the log.
        let mut batch = store.batch();
        batch.put_snapshot_changes(7, b"seven");
        store.commit(batch).unwrap();
        assert_eq!(payloads(&store, 0), [7, 8, 9]);
        assert_eq!(
            store.snapshot_chain().unwrap(),
            [(4, b"four".to_vec()), (7, b"seven".to_vec())]
        );
        let summary = store.summary().unwrap();
        assert_eq!(
            (
                summary.snapshot_seq,
                summary.snapshot_bytes,
                summary.snapshot_chain
            ),
            (Some(7), Some(9), 2)
        );

        let mut batch = store.batch();
        batch.put_snapshot(10, b"ten");
        store.commit(batch).unwrap();
        assert_eq!(payloads(&store, 0), Vec::<u64>::new());
        assert_eq!(store.snapshot_chain().unwrap(), [(10, b"ten".to_vec())]);
        // The next message continues the sequence the snapshot ended.
        assert_eq!(store.next_log_seq().unwrap(), 10);
    }

    #[test]
    fn jobs_are_listed_a_page_at_a_time_with_a_bounded_scan() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(dir.path(), false).unwrap();
        let mut batch = store.batch();
        for job_id in [3u64, 1, 200, 7, 9, u64::MAX] {
            batch.put_job(job_id, if job_id % 2 == 1 { b"odd" } else { b"even" });
        }
        store.commit(batch).unwrap();
        let decode = |bytes: &[u8]| Ok(String::from_utf8(bytes.to_vec()).unwrap());
        let page = |after, limit, scan, want: Option<&'static str>| {
            store
                .jobs_page(after, limit, scan, decode, |s: &String| {
                    want.is_none_or(|w| s == w)
                })
                .unwrap()
        };
        // Job-id order, with the id to go on after.
        assert_eq!(page(None, 2, 100, None), (vec!["odd".into(); 2], Some(3)));
        assert_eq!(page(Some(3), 10, 100, Some("even")).0.len(), 1);
        // The last page says there is no more.
        assert_eq!(page(Some(200), 10, 100, None).1, None);
        assert_eq!(page(Some(u64::MAX), 10, 100, None), (vec![], None));
        // A filter that matches nothing stops after `max_scanned` reads
        // and says where to go on.
        assert_eq!(page(None, 10, 2, Some("none")), (vec![], Some(3)));
        assert_eq!(page(Some(3), 10, 2, Some("none")), (vec![], Some(9)));
        assert_eq!(page(Some(9), 10, 2, Some("none")), (vec![], None));
        // A damaged record is named, not skipped.
        let err = store
            .jobs_page(None, 10, 100, |_| Err::<(), _>("bad".into()), |_| true)
            .unwrap_err();
        assert!(
            matches!(err, StoreError::Corrupt { family: JOBS, .. }),
            "{err}"
        );
    }

    #[test]
    fn expired_jobs_are_found_oldest_first_and_deleted_with_everything_they_had() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(dir.path(), false).unwrap();
        let mut batch = store.batch();
        for (job_id, end_us) in [(1u64, 300u64), (2, 100), (3, 200), (4, 900)] {
            batch.put_job(job_id, b"record");
            batch.put_decision(job_id, 1, &serde_json::json!({ "v": 1 }));
            for index in [0, 7, u32::MAX] {
                batch.put_task(job_id, index, b"task");
            }
            batch.put_expiry(end_us, job_id);
        }
        store.commit(batch).unwrap();
        assert_eq!(store.expired(0, 250, 10).unwrap(), [(100, 2), (200, 3)]);
        assert_eq!(store.expired(0, 1000, 2).unwrap(), [(100, 2), (200, 3)]);
        let mut batch = store.batch();
        for (end_us, job_id) in store.expired(0, 250, 10).unwrap() {
            batch.expire_job(end_us, job_id);
        }
        store.commit(batch).unwrap();
        assert_eq!(
            store.expired(0, u64::MAX, 10).unwrap(),
            [(300, 1), (900, 4)]
        );
        // A scan from a bound reached starts there.
        assert_eq!(
            store.expired(300, u64::MAX, 10).unwrap(),
            [(300, 1), (900, 4)]
        );
        assert_eq!(store.expired(301, u64::MAX, 10).unwrap(), [(900, 4)]);
        assert_eq!(store.awaiting_end().unwrap(), [] as [u64; 0]);
        assert_eq!(job_ids::<Vec<u64>>(&store, JOBS), [1, 4]);
        assert_eq!(
            job_ids::<BTreeSet<u64>>(&store, TASKS),
            BTreeSet::from([1, 4])
        );
        assert!(store.decisions::<serde_json::Value>(2).unwrap().is_empty());
        assert_eq!(store.decisions::<serde_json::Value>(1).unwrap().len(), 1);
    }

    #[test]
    fn a_truncated_log_entry_is_reported_as_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(dir.path(), false).unwrap();
        let mut batch = store.batch();
        // A partition and half an offset: no key length, no payload flag.
        batch
            .batch
            .put_cf(store.cf(LOG), 0u64.to_be_bytes(), [0u8; 8]);
        store.commit(batch).unwrap();
        let err = store.log_from(0).next().unwrap().unwrap_err();
        assert!(err.to_string().starts_with("corrupt log record"), "{err}");
    }

    #[test]
    fn a_corrupt_record_is_reported_with_its_family() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(dir.path(), false).unwrap();
        let mut batch = store.batch();
        batch
            .batch
            .put_cf(store.cf(JOBS), 5u64.to_be_bytes(), b"damaged");
        store.commit(batch).unwrap();
        let err = store
            .job(5, |_| Err::<(), _>("byte 3: no good".into()))
            .unwrap_err();
        assert!(err.to_string().starts_with("corrupt jobs record"), "{err}");
        assert!(err.to_string().contains("byte 3: no good"), "{err}");
    }

    #[test]
    fn a_store_is_recovered_only_by_its_layout_and_engine_configuration() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(dir.path(), false).unwrap();
        // Empty: anything goes, and nothing is stored yet.
        assert_eq!(store.check_format(b"{\"a\":1}").unwrap(), BTreeSet::new());

        let mut batch = store.batch();
        batch.stamp_format(b"{\"a\":1}");
        batch.append_log(0, 3, 0, None, Some(b"{}"));
        batch.set_stored_partitions(&BTreeSet::from([1, 3]));
        store.commit(batch).unwrap();
        assert_eq!(
            store.check_format(b"{\"a\":1}").unwrap(),
            BTreeSet::from([1, 3])
        );

        let err = store.check_format(b"{\"a\":2}").unwrap_err().to_string();
        assert!(err.contains("cannot be recovered"), "{err}");
        assert!(
            err.contains("another engine configuration ({\"a\":1})"),
            "{err}"
        );

        let mut batch = store.batch();
        batch.set_meta(STORE_FORMAT_KEY, b"4");
        store.commit(batch).unwrap();
        let err = store.check_format(b"{\"a\":1}").unwrap_err().to_string();
        let named = format!(
            "store format 4; this one reads {}",
            String::from_utf8_lossy(STORE_FORMAT)
        );
        assert!(err.contains(&named), "{err}");

        let mut batch = store.batch();
        batch.stamp_format(b"{\"a\":1}");
        batch.set_meta(STORED_PARTITIONS_KEY, b"[1,");
        store.commit(batch).unwrap();
        let err = store.check_format(b"{\"a\":1}").unwrap_err().to_string();
        assert!(
            err.contains("list of stored partitions is corrupt"),
            "{err}"
        );
    }

    #[test]
    fn a_store_records_the_release_that_created_it_and_the_one_that_writes_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(dir.path(), false).unwrap();
        assert_eq!(store.stamp_version().unwrap(), None);
        let mut batch = store.batch();
        batch.stamp_format(b"{}");
        batch.set_meta(WRITTEN_BY_KEY, b"0.0.1");
        store.commit(batch).unwrap();
        assert_eq!(store.stamp_version().unwrap().as_deref(), Some("0.0.1"));
        let summary = store.summary().unwrap();
        assert_eq!(summary.created_by.as_deref(), Some(JOBCAST_VERSION));
        assert_eq!(summary.written_by.as_deref(), Some(JOBCAST_VERSION));
        let err = store.check_format(b"{\"b\":1}").unwrap_err().to_string();
        assert!(err.contains("jobcast admin rebuild --data-dir"), "{err}");
    }

    #[test]
    fn a_store_with_a_log_but_no_configuration_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(dir.path(), false).unwrap();
        let mut batch = store.batch();
        batch.append_log(0, 0, 0, None, None);
        store.commit(batch).unwrap();
        let err = store.check_format(b"{}").unwrap_err().to_string();
        assert!(
            err.contains("logged events but no engine configuration"),
            "{err}"
        );
    }

    #[test]
    fn a_live_jobs_kept_decisions_expire_once_it_has_ended() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(dir.path(), false).unwrap();
        let mut batch = store.batch();
        for job_id in [5u64, 6] {
            batch.put_decision(job_id, 1, &serde_json::json!({ "v": 1 }));
            batch.await_end(job_id);
        }
        batch.put_expiry(100, 7);
        store.commit(batch).unwrap();
        assert_eq!(store.awaiting_end().unwrap(), [5, 6]);
        // No bound reaches a job whose end is unknown.
        assert_eq!(store.expired(0, u64::MAX, 10).unwrap(), [(100, 7)]);

        let mut batch = store.batch();
        batch.index_end(50, 6);
        store.commit(batch).unwrap();
        assert_eq!(store.awaiting_end().unwrap(), [5]);
        assert_eq!(store.expired(0, u64::MAX, 10).unwrap(), [(50, 6), (100, 7)]);
        let mut batch = store.batch();
        batch.expire_job(50, 6);
        store.commit(batch).unwrap();
        assert_eq!(job_ids::<Vec<u64>>(&store, DECISIONS), [5]);
    }
}
