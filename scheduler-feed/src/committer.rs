//! The pipeline's RocksDB writer: it commits batches on a thread of its
//! own, in the order they are handed over, so that the pipeline thread
//! applies and publishes the next batch while the last one is written (the
//! write is a quarter of the pipeline's time on the mock cluster).
//!
//! Crash safety is that of writing inline: a batch is handed over only
//! once its outputs are acknowledged, its records are serialised before it
//! is handed over, and batches are written one at a time in order, so the
//! store always holds a prefix of the batches, each with the offsets it
//! consumed. Whoever reads back what the pipeline wrote (the log replay,
//! the stored offsets) calls [`Committer::flush`] first; the HTTP API may
//! answer from a store one batch behind the decisions already published.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{SyncSender, sync_channel};
use std::thread::JoinHandle;
use std::time::Instant;

use jobcast_storage::state::{SealedBatch, StateStore, StoreError};

use crate::service::{ServiceError, Shared};
use crate::telemetry;

enum Job {
    Commit {
        write: SealedBatch,
        /// Input messages the batch consumed.
        events: u64,
        /// The next offset of each partition the batch read.
        offsets: BTreeMap<i32, i64>,
    },
    /// Answer once every batch handed over before is written.
    Flush(SyncSender<()>),
}

pub struct Committer {
    jobs: Option<SyncSender<Job>>,
    thread: Option<JoinHandle<Result<(), StoreError>>>,
}

impl Committer {
    /// Start the writer thread. At most one batch waits while another is
    /// written: a pipeline that outruns the disk waits in
    /// [`Committer::commit`].
    pub fn start(store: Arc<StateStore>, shared: Arc<Shared>) -> Committer {
        let (jobs, queue) = sync_channel::<Job>(1);
        let thread = std::thread::Builder::new()
            .name("rocksdb-commit".into())
            .spawn(move || {
                for job in queue {
                    match job {
                        Job::Commit {
                            write,
                            events,
                            offsets,
                        } => {
                            let started = Instant::now();
                            store.commit_sealed(write)?;
                            let took = started.elapsed();
                            let c = &shared.counters;
                            c.write_ns
                                .fetch_add(took.as_nanos() as u64, Ordering::Relaxed);
                            c.committed.fetch_add(events, Ordering::Relaxed);
                            metrics::histogram!(telemetry::BATCH_STAGE_SECONDS, "stage" => "write")
                                .record(took.as_secs_f64());
                            for (partition, next) in offsets {
                                metrics::gauge!(telemetry::COMMITTED_OFFSET, "partition" => partition.to_string())
                                    .set(next as f64);
                            }
                        }
                        Job::Flush(done) => {
                            let _ = done.send(());
                        }
                    }
                }
                Ok(())
            })
            .expect("the commit thread starts");
        Committer {
            jobs: Some(jobs),
            thread: Some(thread),
        }
    }

    /// Hand a batch over to be written after those handed over before.
    pub fn commit(
        &mut self,
        write: SealedBatch,
        events: u64,
        offsets: BTreeMap<i32, i64>,
    ) -> Result<(), ServiceError> {
        self.send(Job::Commit {
            write,
            events,
            offsets,
        })
    }

    /// Wait until every batch handed over is written.
    pub fn flush(&mut self) -> Result<(), ServiceError> {
        let (done, wait) = sync_channel(1);
        self.send(Job::Flush(done))?;
        wait.recv().map_err(|_| self.failure())
    }

    fn send(&mut self, job: Job) -> Result<(), ServiceError> {
        let sent = self.jobs.as_ref().map(|jobs| jobs.send(job));
        match sent {
            Some(Ok(())) => Ok(()),
            _ => Err(self.failure()),
        }
    }

    /// The writer stopped: a write failed. Its error, once; later calls
    /// find the writer gone.
    fn failure(&mut self) -> ServiceError {
        self.jobs = None;
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(Err(e))) => e.into(),
            Some(Err(_)) => ServiceError::CommitThread("panicked"),
            Some(Ok(Ok(()))) | None => ServiceError::CommitThread("has stopped"),
        }
    }
}

impl Drop for Committer {
    /// Write what was handed over (its outputs are acknowledged), then stop.
    fn drop(&mut self) {
        self.jobs = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
