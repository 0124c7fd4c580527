//! Outputs the broker will never take (a message larger than the topic
//! allows, a topic that does not exist, a producer not allowed to write
//! it): parked in the `parked` family instead of retried forever.
//!
//! Retrying such an output would stop the instance for good, the group
//! would then move its partitions to the next instance, which would stop
//! on the same output: the whole group halted while every probe said
//! healthy. A parked output is written with the batch that made it, so it
//! is as durable as the offsets committed past it; an operator fixes the
//! cause (creates the topic, grants the ACL, raises the limit) and
//! publishes the parked outputs again with `jobcast admin parked
//! --republish`, which deletes each one the broker acknowledged.

use std::sync::atomic::Ordering;

use rocksdb::{Direction, IteratorMode};
use serde::{Deserialize, Serialize};

use super::{PARKED, StateBatch, StateStore, StoreError};

/// An output the broker refused for good, with why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParkedOutput {
    pub topic: String,
    pub key: Vec<u8>,
    pub payload: Vec<u8>,
    pub headers: Vec<(String, Vec<u8>)>,
    /// The kind of refusal, as `jobcast_outputs_parked_total` labels it:
    /// `too_large`, `unknown_topic`, `not_authorized`, `invalid`.
    pub reason: String,
    /// The error the producer reported.
    pub error: String,
    /// When it was parked, seconds since the Unix epoch.
    pub parked_at: u64,
}

impl StateStore {
    /// The number the next parked output is stored under: one after the
    /// highest stored.
    pub(super) fn first_free_parked_id(&self) -> Result<u64, StoreError> {
        let mut last = self.db.raw_iterator_cf(self.cf(PARKED));
        last.seek_to_last();
        last.status().map_err(|e| self.rocks(e))?;
        Ok(match last.key() {
            Some(key) => parked_id(key)? + 1,
            None => 0,
        })
    }

    /// Every parked output, oldest first, with the id that deletes it.
    pub fn parked(&self) -> Result<Vec<(u64, ParkedOutput)>, StoreError> {
        let mut parked = Vec::new();
        let start = IteratorMode::From(&[], Direction::Forward);
        for item in self.db.iterator_cf(self.cf(PARKED), start) {
            let (key, value) = item.map_err(|e| self.rocks(e))?;
            let output = serde_json::from_slice(&value).map_err(|e| StoreError::Corrupt {
                family: PARKED,
                key: key.to_vec(),
                reason: e.to_string(),
            })?;
            parked.push((parked_id(&key)?, output));
        }
        Ok(parked)
    }
}

impl StateBatch<'_> {
    /// Park `output`, under the next free id.
    pub fn park(&mut self, output: &ParkedOutput) {
        let id = self.store.parked_next.fetch_add(1, Ordering::Relaxed);
        let value = serde_json::to_vec(output).expect("a parked output serialises");
        self.batch
            .put_cf(self.store.cf(PARKED), id.to_be_bytes(), value);
    }

    /// Delete the parked output `id` (published at last).
    pub fn delete_parked(&mut self, id: u64) {
        self.batch
            .delete_cf(self.store.cf(PARKED), id.to_be_bytes());
    }
}

fn parked_id(key: &[u8]) -> Result<u64, StoreError> {
    key.try_into()
        .map(u64::from_be_bytes)
        .map_err(|_| StoreError::Corrupt {
            family: PARKED,
            key: key.to_vec(),
            reason: "not a parked output's id (u64 BE)".into(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output(topic: &str) -> ParkedOutput {
        ParkedOutput {
            topic: topic.into(),
            key: b"7".to_vec(),
            payload: vec![0, 159, 146, 150],
            headers: vec![("jobcast.reason".into(), b"x".to_vec())],
            reason: "too_large".into(),
            error: "Message size too large".into(),
            parked_at: 1,
        }
    }

    #[test]
    fn parked_outputs_keep_their_order_across_a_reopen_and_leave_when_deleted() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = StateStore::open(dir.path(), false).unwrap();
            let mut write = store.batch();
            write.park(&output("a"));
            write.park(&output("b"));
            store.commit(write).unwrap();
        }
        let store = StateStore::open(dir.path(), false).unwrap();
        let mut write = store.batch();
        write.park(&output("c"));
        store.commit(write).unwrap();
        let parked = store.parked().unwrap();
        let topics: Vec<_> = parked.iter().map(|(_, o)| o.topic.as_str()).collect();
        assert_eq!(topics, ["a", "b", "c"]);
        assert_eq!(parked[0].1, output("a"));
        assert_eq!(store.summary().unwrap().parked, 3);

        let mut write = store.batch();
        write.delete_parked(parked[1].0);
        store.commit(write).unwrap();
        let left: Vec<_> = store
            .parked()
            .unwrap()
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        assert_eq!(left, [parked[0].0, parked[2].0]);
    }
}
