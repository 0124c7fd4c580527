//! Commits [`StateBatch`]es on a thread of its own, in the order given.
//!
//! Writing a batch to RocksDB (memtable inserts, the write-ahead log, an
//! fsync when syncing) needs nothing from the thread that built it, so the
//! service hands each batch to a [`Writer`] and goes on with the next one:
//! the write of one batch overlaps the apply of the next. Batches are
//! committed in the order they were submitted, each atomically as before,
//! so a crash still leaves a prefix of them; what is lost is at most the
//! batches handed over and not yet written (two at most: one being written,
//! one waiting), which the service consumes and applies again on restart,
//! exactly as a batch lost before its commit.
//!
//! Whoever reads the store and needs every submitted batch in it calls
//! [`Writer::flush`] first. A failed write stops the writer: the error
//! comes back from the next [`Writer::submit`], [`Writer::flush`] or
//! [`Writer::finish`], and nothing submitted after the failed batch is
//! written.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, channel, sync_channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rocksdb::WriteBatch;

use crate::state::{StateBatch, StateStore, StoreError};

/// Run after a batch is committed, with how long the write took.
pub type AfterCommit = Box<dyn FnOnce(Duration) + Send>;

enum Request {
    Commit(WriteBatch, AfterCommit),
    /// Answered once everything before it is committed.
    Flush(std::sync::mpsc::Sender<()>),
}

/// The writer thread's handle; dropping it waits for what was submitted.
pub struct Writer {
    store: Arc<StateStore>,
    requests: Option<SyncSender<Request>>,
    thread: Option<JoinHandle<Result<(), StoreError>>>,
}

impl Writer {
    /// Start the writer thread for `store`.
    pub fn start(store: Arc<StateStore>) -> std::io::Result<Self> {
        // One batch waiting while another is written: enough to overlap,
        // and the pipeline is held back when the disk falls behind.
        let (requests, queue) = sync_channel(1);
        let thread_store = store.clone();
        let thread = std::thread::Builder::new()
            .name("writer".into())
            .spawn(move || write_all(&thread_store, queue))?;
        Ok(Writer {
            store,
            requests: Some(requests),
            thread: Some(thread),
        })
    }

    /// Queue `batch` (built on this writer's store) for commit after every
    /// batch submitted before it, then run `after`. Waits while two
    /// batches are ahead of it.
    pub fn submit(&mut self, batch: StateBatch<'_>, after: AfterCommit) -> Result<(), StoreError> {
        debug_assert!(std::ptr::eq(batch.store(), &*self.store));
        self.send(Request::Commit(batch.into_write_batch(), after))
    }

    /// Wait until every submitted batch is committed.
    pub fn flush(&mut self) -> Result<(), StoreError> {
        let (done, flushed) = channel();
        self.send(Request::Flush(done))?;
        match flushed.recv() {
            Ok(()) => Ok(()),
            // The thread stopped before answering: a write failed.
            Err(_) => Err(self.stopped()),
        }
    }

    /// Commit everything submitted and stop the thread.
    pub fn finish(mut self) -> Result<(), StoreError> {
        self.join()
    }

    fn send(&mut self, request: Request) -> Result<(), StoreError> {
        let Some(requests) = &self.requests else {
            return Err(StoreError::WriterStopped);
        };
        match requests.send(request) {
            Ok(()) => Ok(()),
            Err(_) => Err(self.stopped()),
        }
    }

    /// The thread has ended (only a failed write ends it early): its error.
    fn stopped(&mut self) -> StoreError {
        match self.join() {
            Err(e) => e,
            Ok(()) => StoreError::WriterStopped,
        }
    }

    fn join(&mut self) -> Result<(), StoreError> {
        drop(self.requests.take());
        match self.thread.take().map(JoinHandle::join) {
            None => Ok(()),
            Some(Ok(result)) => result,
            Some(Err(panic)) => std::panic::resume_unwind(panic),
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        if let Err(e) = self.join() {
            tracing::error!("the last state batches were not written: {e}");
        }
    }
}

fn write_all(store: &StateStore, queue: Receiver<Request>) -> Result<(), StoreError> {
    for request in queue {
        match request {
            Request::Commit(batch, after) => {
                let started = Instant::now();
                store.commit_write_batch(batch)?;
                after(started.elapsed());
            }
            // The sender may have given up waiting.
            Request::Flush(done) => drop(done.send(())),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn store() -> (tempfile::TempDir, Arc<StateStore>) {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(StateStore::open(&dir.path().join("state"), false).unwrap());
        (dir, store)
    }

    #[test]
    fn batches_are_committed_in_order_and_flush_waits_for_them() {
        let (_dir, store) = store();
        let mut writer = Writer::start(store.clone()).unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        for i in 0..50u32 {
            let mut batch = store.batch();
            // Every batch moves the same offset: the last one must win.
            batch.set_offset("t", 0, i64::from(i));
            batch.set_meta(&format!("m{i}"), &i.to_be_bytes());
            let order = order.clone();
            writer
                .submit(batch, Box::new(move |_| order.lock().unwrap().push(i)))
                .unwrap();
        }
        writer.flush().unwrap();
        assert_eq!(*order.lock().unwrap(), (0..50).collect::<Vec<_>>());
        assert_eq!(store.offsets("t").unwrap()[&0], 49);
        assert_eq!(
            store.meta("m49").unwrap(),
            Some(49u32.to_be_bytes().to_vec())
        );

        let mut batch = store.batch();
        batch.set_offset("t", 0, 50);
        writer.submit(batch, Box::new(|_| {})).unwrap();
        writer.finish().unwrap();
        assert_eq!(store.offsets("t").unwrap()[&0], 50);
    }

    #[test]
    fn a_failed_write_stops_the_writer_and_nothing_after_it_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = StateStore::open(&dir.path().join("state"), false).unwrap();
        // A batch whose column family is gone by the time it is written.
        let mut doomed = store.batch();
        doomed.put_job(1, b"job 1");
        doomed.set_offset("t", 0, 1);
        let doomed = doomed.into_write_batch();
        store.drop_family(crate::state::JOBS);
        let store = Arc::new(store);

        let mut writer = Writer::start(store.clone()).unwrap();
        let mut first = store.batch();
        first.set_offset("t", 0, 0);
        writer.submit(first, Box::new(|_| {})).unwrap();
        writer.flush().unwrap();
        let ran = Arc::new(Mutex::new(false));
        let after = ran.clone();
        writer
            .send(Request::Commit(
                doomed,
                Box::new(move |_| *after.lock().unwrap() = true),
            ))
            .unwrap();
        let err = writer.flush().unwrap_err();
        assert!(matches!(err, StoreError::Rocks { .. }), "{err}");
        assert!(err.to_string().contains("Invalid column family"), "{err}");
        assert!(!*ran.lock().unwrap(), "the failed batch's callback ran");
        // Stopped: later batches are refused and not written.
        let mut later = store.batch();
        later.set_offset("t", 0, 2);
        assert!(matches!(
            writer.submit(later, Box::new(|_| {})),
            Err(StoreError::WriterStopped)
        ));
        assert!(matches!(
            writer.finish(),
            Ok(()) | Err(StoreError::WriterStopped)
        ));
        assert_eq!(store.offsets("t").unwrap()[&0], 0);
    }

    #[test]
    fn dropping_the_writer_writes_what_was_submitted() {
        let (_dir, store) = store();
        let mut writer = Writer::start(store.clone()).unwrap();
        let mut batch = store.batch();
        batch.set_offset("t", 3, 7);
        writer.submit(batch, Box::new(|_| {})).unwrap();
        drop(writer);
        assert_eq!(store.offsets("t").unwrap()[&3], 7);
    }
}
