//! Which input partitions are this instance's: those it owns (publishes
//! the outputs of, from a first offset on), those the group has assigned
//! but not yet handed over, and those whose records its store holds. The
//! group's news and the takeover ([`super::recovery`]) change them; the
//! pipeline asks them whose a message is.

use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Default)]
pub(super) struct Partitions {
    /// Each owned partition with the first offset whose outputs are this
    /// instance's to publish (those before were published by the
    /// partition's previous owner).
    owned: BTreeMap<i32, i64>,
    /// Assigned by the group but not yet taken over.
    added: BTreeSet<i32>,
    /// Whose records the store holds.
    stored: BTreeSet<i32>,
}

/// What a takeover changes: the partitions owned once it is done, those
/// newly owned and those given up.
pub(super) struct Handover {
    pub(super) owned: BTreeSet<i32>,
    pub(super) taken: BTreeSet<i32>,
    pub(super) dropped: BTreeSet<i32>,
}

impl Partitions {
    /// The first offset of `partition` whose outputs this instance
    /// publishes, if it owns it.
    pub(super) fn publish_from(&self, partition: i32) -> Option<i64> {
        self.owned.get(&partition).copied()
    }

    pub(super) fn owns(&self, partition: i32) -> bool {
        self.owned.contains_key(&partition)
    }

    /// Each owned partition with its first offset to publish.
    pub(super) fn owned(&self) -> impl Iterator<Item = (i32, i64)> + '_ {
        self.owned.iter().map(|(&p, &from)| (p, from))
    }

    pub(super) fn stored(&self) -> &BTreeSet<i32> {
        &self.stored
    }

    /// The store's own word on which partitions' records it holds.
    pub(super) fn set_stored(&mut self, stored: BTreeSet<i32>) {
        self.stored = stored;
    }

    /// The group assigned `partitions`: taken over at the next reconcile.
    pub(super) fn assigned(&mut self, partitions: impl IntoIterator<Item = i32>) {
        self.added.extend(partitions);
    }

    /// The group revoked `partition`: not published from now on.
    pub(super) fn revoked(&mut self, partition: i32) {
        self.added.remove(&partition);
        self.owned.remove(&partition);
    }

    /// The partitions assigned since the last takeover, handed over.
    pub(super) fn take_assigned(&mut self) -> BTreeSet<i32> {
        std::mem::take(&mut self.added)
    }

    /// Own the partitions of `publish_from` from their offsets on, and say
    /// what that changes against what the store holds.
    pub(super) fn take_over(&mut self, publish_from: BTreeMap<i32, i64>) -> Handover {
        self.owned.extend(publish_from);
        let owned: BTreeSet<i32> = self.owned.keys().copied().collect();
        let taken = owned.difference(&self.stored).copied().collect();
        let dropped = self.stored.difference(&owned).copied().collect();
        Handover {
            owned,
            taken,
            dropped,
        }
    }
}
