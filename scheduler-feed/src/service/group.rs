//! Consumer-group membership. Every instance reads every partition (the
//! predictor learns from all of them); the group only says which partitions
//! this instance *owns*: publishes the outputs of and stores the records
//! of. The member fetches nothing. When a partition is revoked, the member
//! commits where this instance's outputs end, so that the next owner
//! publishes from there.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jobcast_ingest::kafka::KafkaSettings;
use rdkafka::client::ClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{Offset, TopicPartitionList};
use tracing::{debug, error, info, warn};

use super::outbox::Outbox;
use super::partitions::{Handover, Partitions};
use super::peers::PeerSeal;
use crate::config::ServeConfig;
use crate::error::ServiceError;
use crate::shared::Shared;
use crate::telemetry::{self, log_librdkafka};

/// How long to wait for the group coordinator's committed offsets.
const COMMITTED_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the pipeline waits for them when only trimming the outbox.
const TRIM_TIMEOUT: Duration = Duration::from_millis(200);
/// How often offsets the coordinator has not confirmed are committed again.
pub(super) const RECOMMIT_EVERY: Duration = Duration::from_secs(1);
/// The group member's heartbeat interval (`-X heartbeat.interval.ms`
/// overrides it): a takeover measured about half a second on tansu with
/// it, 3 s with librdkafka's default 3 s (docs/performance.md).
const HEARTBEAT_MS: &str = "500";
/// How long a stopping instance waits for its partitions' revocation.
const LEAVE_WAIT: Duration = Duration::from_secs(2);

/// A change in the partitions the consumer group gives this instance.
enum MembershipChange {
    Added(Vec<i32>),
    Removed(Vec<i32>),
}

/// The offsets of the batches handed to the writer thread, committed to
/// the group only once the writer has made them durable. A group offset
/// ahead of the store would lose records on a kill: the next owner stores
/// a partition's records and decisions only from the group's offset on,
/// while the killed owner's store never got that batch.
#[derive(Default)]
struct GroupCommits {
    /// Batches the writer has committed (counted on its thread).
    written: Arc<AtomicU64>,
    /// Batches handed to the writer.
    submitted: u64,
    /// Each submitted batch not yet committed to the group: its number
    /// and the next offset of each partition it holds.
    waiting: VecDeque<(u64, BTreeMap<i32, i64>)>,
}

impl GroupCommits {
    /// A batch with `offsets` is handed to the writer; the returned call
    /// is for the writer to make once it is durable.
    fn submitted(&mut self, offsets: BTreeMap<i32, i64>) -> impl FnOnce() + Send + 'static {
        self.waiting.push_back((self.submitted, offsets));
        self.submitted += 1;
        let written = self.written.clone();
        move || {
            written.fetch_add(1, Ordering::Release);
        }
    }

    /// Whether a batch handed to the writer is not yet committed to the
    /// group.
    fn pending(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// The next offsets of the batches written since last asked.
    fn take_written(&mut self) -> BTreeMap<i32, i64> {
        let written = self.written.load(Ordering::Acquire);
        let mut offsets = BTreeMap::new();
        while self
            .waiting
            .front()
            .is_some_and(|(batch, _)| *batch < written)
        {
            let (_, batch_offsets) = self.waiting.pop_front().expect("not empty");
            offsets.extend(batch_offsets);
        }
        offsets
    }
}

/// The consumer-group member. It fetches nothing (its partitions are
/// paused at their end); the group's assignment says which partitions this
/// instance *owns*: publishes the outputs of and stores the records of.
struct MemberContext {
    topic: String,
    shared: Arc<Shared>,
    changes: Mutex<Vec<MembershipChange>>,
    /// Per owned partition, the offset below which its outputs are
    /// published and its records durable in the store. Committed to the
    /// group when the partition is revoked, so that its next owner
    /// publishes (and stores) from there.
    durable: Mutex<BTreeMap<i32, i64>>,
    /// Per owned partition, the latest offset the coordinator confirmed.
    confirmed: Mutex<BTreeMap<i32, i64>>,
    /// The partitions the group assigns this instance now: the pipeline
    /// hears of a revocation only after the poll that ran it, and must not
    /// note a durable offset for a partition given up meanwhile (a late
    /// commit would move its new owner's offset back).
    assigned: Mutex<BTreeSet<i32>>,
}

impl MemberContext {
    /// Note `offsets` as durable, for the partitions still assigned; those
    /// noted.
    fn note_durable(&self, offsets: impl IntoIterator<Item = (i32, i64)>) -> Vec<(i32, i64)> {
        let assigned = self.assigned.lock().expect("not poisoned");
        let mut durable = self.durable.lock().expect("not poisoned");
        let mut noted = Vec::new();
        for (partition, next) in offsets {
            if assigned.contains(&partition) {
                durable.insert(partition, next);
                noted.push((partition, next));
            }
        }
        noted
    }
}

impl ClientContext for MemberContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        log_librdkafka(level, fac, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        telemetry::kafka_error("member", &error);
        if error.rdkafka_error_code() != Some(RDKafkaErrorCode::AllBrokersDown) {
            warn!("Kafka group member: {error}: {reason}");
        }
    }
}

impl ConsumerContext for MemberContext {
    fn commit_callback(&self, result: KafkaResult<()>, offsets: &TopicPartitionList) {
        if let Err(e) = result {
            debug!("committing offsets to the group: {e}");
        }
        let mut confirmed = self.confirmed.lock().expect("not poisoned");
        for element in offsets.elements_for_topic(&self.topic) {
            if let (Ok(()), Offset::Offset(next)) = (element.error(), element.offset()) {
                let at = confirmed.entry(element.partition()).or_insert(next);
                *at = (*at).max(next);
            }
        }
    }

    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        let partitions: Vec<i32> = tpl
            .elements_for_topic(&self.topic)
            .iter()
            .map(|e| e.partition())
            .collect();
        let cooperative = matches!(
            consumer.rebalance_protocol(),
            RebalanceProtocol::Cooperative
        );
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                for &partition in &partitions {
                    // The member never reads: start at the end, paused.
                    let _ = tpl.set_partition_offset(&self.topic, partition, Offset::End);
                }
                let assigned = if cooperative {
                    consumer.incremental_assign(tpl)
                } else {
                    consumer.assign(tpl)
                };
                if let Err(e) = assigned.and_then(|()| consumer.pause(tpl)) {
                    error!("cannot take the assigned partitions: {e}");
                }
                self.assigned
                    .lock()
                    .expect("not poisoned")
                    .extend(&partitions);
                info!(?partitions, "partitions assigned to this instance");
                self.shared.assigned.store(true, Ordering::Relaxed);
                self.changes
                    .lock()
                    .expect("not poisoned")
                    .push(MembershipChange::Added(partitions));
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                // Tell the next owner where this instance's outputs end,
                // unless the coordinator has confirmed it already: this
                // commit waits for its answer inside the poll, and one sent
                // while the group is rebalancing waits for the rebalance.
                let mut commit = TopicPartitionList::new();
                // Forgotten here: this instance must never commit them again.
                self.assigned
                    .lock()
                    .expect("not poisoned")
                    .retain(|p| !partitions.contains(p));
                let mut durable = self.durable.lock().expect("not poisoned");
                let mut confirmed = self.confirmed.lock().expect("not poisoned");
                for partition in &partitions {
                    let done = confirmed.remove(partition);
                    if let Some(next) = durable.remove(partition)
                        && done < Some(next)
                    {
                        let _ = commit.add_partition_offset(
                            &self.topic,
                            *partition,
                            Offset::Offset(next),
                        );
                    }
                }
                drop((durable, confirmed));
                if commit.count() > 0
                    && let Err(e) = consumer.commit(&commit, CommitMode::Sync)
                {
                    warn!("cannot commit the revoked partitions' offsets: {e}");
                }
                let unassigned = if cooperative {
                    consumer.incremental_unassign(tpl)
                } else {
                    consumer.unassign()
                };
                if let Err(e) = unassigned {
                    error!("cannot give up the revoked partitions: {e}");
                }
                info!(?partitions, "partitions revoked from this instance");
                self.changes
                    .lock()
                    .expect("not poisoned")
                    .push(MembershipChange::Removed(partitions));
            }
            other => error!("rebalance failed: {other:?}"),
        }
    }
}

/// Join `config`'s consumer group, subscribed to the input topic. Only the
/// partitions that move change hands (cooperative-sticky), so a rebalance
/// costs the instances that keep theirs nothing. A member hears that the
/// group is rebalancing from its next heartbeat's answer, so the heartbeat
/// interval bounds how late a survivor takes a leaving instance's
/// partitions over: [`HEARTBEAT_MS`] rather than librdkafka's 3 s.
fn join(
    config: &ServeConfig,
    shared: Arc<Shared>,
) -> Result<BaseConsumer<MemberContext>, ServiceError> {
    let topic = &config.topics.events;
    let member: BaseConsumer<MemberContext> = consumer_config(
        &config.kafka,
        &config.consumer.group,
        &[
            ("partition.assignment.strategy", "cooperative-sticky"),
            ("heartbeat.interval.ms", HEARTBEAT_MS),
        ],
    )
    .create_with_context(MemberContext {
        topic: topic.clone(),
        shared,
        changes: Mutex::new(Vec::new()),
        durable: Mutex::new(BTreeMap::new()),
        confirmed: Mutex::new(BTreeMap::new()),
        assigned: Mutex::new(BTreeSet::new()),
    })
    .map_err(|e| config.kafka.redact(e))?;
    member.subscribe(&[topic])?;
    Ok(member)
}

/// The URL a commit's metadata advertises, if any, and if `peers`
/// believes it (`peers.rs`). rdkafka panics on metadata that is not UTF-8,
/// which only a foreign client committing to this group could write: that
/// names no owner.
fn advertised(
    element: &rdkafka::topic_partition_list::TopicPartitionListElem<'_>,
    peers: &PeerSeal,
) -> Option<String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        element.metadata().to_owned()
    }))
    .ok()
    .and_then(|metadata| peers.open(&metadata))
}

/// A consumer's settings: `group`, no automatic commits, `extra`, then
/// the configured client properties (which win).
pub(super) fn consumer_config(
    kafka: &KafkaSettings,
    group: &str,
    extra: &[(&str, &str)],
) -> ClientConfig {
    let mut config = kafka.client_config();
    config
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false");
    for (key, value) in extra {
        config.set(*key, *value);
    }
    for (key, value) in &kafka.client {
        config.set(key, value);
    }
    config
}

/// This instance's membership of the consumer group: the member, the
/// partitions the group gives it, and the offsets on their way to the
/// group.
pub(super) struct Group {
    member: BaseConsumer<MemberContext>,
    /// The input topic.
    topic: String,
    shared: Arc<Shared>,
    /// The URL this instance advertises in its commits, if any.
    advertised_url: Option<String>,
    /// The input partitions this instance owns, is assigned, and stores.
    partitions: Partitions,
    /// Offsets waiting for the writer before they go to the group.
    commits: GroupCommits,
    /// Signs the URL this instance commits with, and checks the others'.
    peers: PeerSeal,
}

impl Group {
    /// Join `config`'s consumer group, whose store holds the records of
    /// the `stored` partitions.
    pub(super) fn join(
        config: &ServeConfig,
        shared: Arc<Shared>,
        stored: BTreeSet<i32>,
    ) -> Result<Group, ServiceError> {
        let mut partitions = Partitions::default();
        partitions.set_stored(stored);
        Ok(Group {
            member: join(config, shared.clone())?,
            topic: config.topics.events.clone(),
            shared,
            advertised_url: config.http.advertised_url.clone(),
            partitions,
            commits: GroupCommits::default(),
            peers: PeerSeal::new(config.http.token.as_ref()),
        })
    }

    /// Which partitions are this instance's.
    pub(super) fn partitions(&self) -> &Partitions {
        &self.partitions
    }

    /// Serve the member's callbacks (rebalances, commit answers) without
    /// waiting: the group evicts a member not polled for
    /// `max.poll.interval.ms`.
    pub(super) fn poll(&self) {
        let _ = self.member.poll(Duration::ZERO);
    }

    /// Wait for the group's first assignment (false if stopped first).
    pub(super) fn await_assignment(&mut self) -> bool {
        while !self.shared.shutdown.load(Ordering::Relaxed) {
            let _ = self.member.poll(Duration::from_millis(100));
            if self.membership_changes() {
                return true;
            }
        }
        false
    }

    /// Take the group's news: a revoked partition stops being published at
    /// once; an added one waits for the next takeover
    /// ([`Group::take_over`]). True if anything changed.
    pub(super) fn membership_changes(&mut self) -> bool {
        let changes =
            std::mem::take(&mut *self.member.context().changes.lock().expect("not poisoned"));
        if changes.is_empty() {
            return false;
        }
        for change in &changes {
            match change {
                MembershipChange::Added(partitions) => {
                    self.partitions.assigned(partitions.iter().copied())
                }
                MembershipChange::Removed(partitions) => {
                    for &partition in partitions {
                        self.partitions.revoked(partition);
                    }
                }
            }
        }
        self.show_owned();
        true
    }

    /// Own the partitions assigned since the last takeover, each from the
    /// offset the group says its previous owner's outputs end at, and say
    /// what that changes against what the store holds.
    pub(super) fn take_over(&mut self) -> Result<Handover, ServiceError> {
        let added = self.partitions.take_assigned();
        let publish_from = self.committed_offsets(&added)?;
        Ok(self.partitions.take_over(publish_from))
    }

    /// The store now holds the records of `owned`, and has made each
    /// owned partition's outputs durable up to its `stored_offsets`:
    /// where their next owner starts, committed now (the outputs of a
    /// partition just taken over end there too).
    pub(super) fn stored(&mut self, owned: BTreeSet<i32>, stored_offsets: &BTreeMap<i32, i64>) {
        self.partitions.set_stored(owned);
        self.member.context().note_durable(
            self.partitions
                .owned()
                .map(|(p, from)| (p, from.max(stored_offsets.get(&p).copied().unwrap_or(0)))),
        );
        self.recommit_unconfirmed();
        self.show_owned();
    }

    fn show_owned(&self) {
        let owned: Vec<i32> = self.partitions.owned().map(|(p, _)| p).collect();
        metrics::gauge!(telemetry::OWNED_PARTITIONS).set(owned.len() as f64);
        *self.shared.owned.lock().expect("not poisoned") = owned;
    }

    /// The group's committed offset of each partition (0 where none is):
    /// outputs of earlier offsets were published by a previous owner.
    fn committed_offsets(
        &self,
        partitions: &BTreeSet<i32>,
    ) -> Result<BTreeMap<i32, i64>, ServiceError> {
        if partitions.is_empty() {
            return Ok(BTreeMap::new());
        }
        let mut backoff = Duration::from_millis(100);
        loop {
            match self.commits_of(partitions, COMMITTED_TIMEOUT) {
                Ok(commits) => {
                    return Ok(commits
                        .into_iter()
                        .map(|(partition, (next, _))| (partition, next))
                        .collect());
                }
                // Without them the new partitions' outputs could be lost
                // or all published again: wait for the coordinator.
                Err(e) if !self.shared.shutdown.load(Ordering::Relaxed) => {
                    warn!("cannot read the group's committed offsets ({e}); retrying");
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// The group's last commit of each of `partitions`: its offset (0 where
    /// none is) and the URL the committing owner advertised, if any.
    fn commits_of(
        &self,
        partitions: &BTreeSet<i32>,
        timeout: Duration,
    ) -> Result<BTreeMap<i32, (i64, Option<String>)>, KafkaError> {
        let mut tpl = TopicPartitionList::new();
        for &partition in partitions {
            tpl.add_partition(&self.topic, partition);
        }
        let committed = self.member.committed_offsets(tpl, timeout)?;
        Ok(committed
            .elements_for_topic(&self.topic)
            .iter()
            .map(|e| {
                let next = match e.offset() {
                    Offset::Offset(next) => next,
                    _ => 0,
                };
                (e.partition(), (next, advertised(e, &self.peers)))
            })
            .collect())
    }

    /// Read the group's commits: drop the outputs `outbox` holds that
    /// other owners have published, and, with `http.advertised_url` set,
    /// tell the HTTP API who owns what ([`Shared::owners`]) for every
    /// partition the topic has (a partition this instance has not read yet
    /// may hold another's jobs). Without it nothing is asked while nothing
    /// is held: each request waits behind the member's heartbeats to the
    /// coordinator. A broker that does not answer at once leaves both for
    /// the next try: the pipeline does not wait on it.
    pub(super) fn read(&self, outbox: &mut Outbox) {
        let listed: Option<Vec<i32>> = self
            .advertised_url
            .as_ref()
            .and_then(|_| {
                self.member
                    .fetch_metadata(Some(&self.topic), TRIM_TIMEOUT)
                    .map_err(|e| debug!("reading the input topic's partitions: {e}"))
                    .ok()
            })
            .and_then(|metadata| {
                let listed = metadata.topics().iter().find(|t| t.name() == self.topic)?;
                Some(listed.partitions().iter().map(|p| p.id()).collect())
            });
        let partitions: BTreeSet<i32> = outbox
            .partitions()
            .chain(listed.iter().flatten().copied())
            .collect();
        if !partitions.is_empty() {
            match self.commits_of(&partitions, TRIM_TIMEOUT) {
                Ok(commits) => {
                    let offsets: BTreeMap<i32, i64> =
                        commits.iter().map(|(&p, (next, _))| (p, *next)).collect();
                    outbox.trim(&offsets);
                    if listed.is_some() {
                        *self.shared.owners.lock().expect("not poisoned") = commits
                            .into_iter()
                            .map(|(partition, (_, owner))| (partition, owner))
                            .collect();
                    }
                }
                Err(e) => debug!("reading the group's committed offsets: {e}"),
            }
        }
        metrics::gauge!(telemetry::TAKEOVER_BUFFER_BYTES).set(outbox.bytes() as f64);
    }

    /// A batch with `offsets` is handed to the writer; the returned call
    /// is for the writer to make once it is durable
    /// ([`GroupCommits::submitted`]).
    pub(super) fn submitted(
        &mut self,
        offsets: BTreeMap<i32, i64>,
    ) -> impl FnOnce() + Send + 'static {
        self.commits.submitted(offsets)
    }

    /// Whether a batch handed to the writer is not yet committed to the
    /// group.
    pub(super) fn commit_pending(&self) -> bool {
        self.commits.pending()
    }

    /// Commit to the group the owned partitions' offsets of every batch
    /// the writer has made durable since last called: where their next
    /// owner would start publishing and storing (and what monitoring tools
    /// and the closed loop read).
    pub(super) fn commit_written(&mut self) {
        let offsets = self.commits.take_written();
        if offsets.is_empty() {
            return;
        }
        let noted = self.member.context().note_durable(
            offsets
                .into_iter()
                .filter_map(|(p, next)| Some((p, next.max(self.partitions.publish_from(p)?)))),
        );
        self.commit_async(noted);
    }

    /// Commit again each owned partition's durable offset the coordinator
    /// has not confirmed: a commit sent during a rebalance fails and is not
    /// retried, and a partition with no new input commits nothing more.
    pub(super) fn recommit_unconfirmed(&self) {
        let context = self.member.context();
        let durable = context.durable.lock().expect("not poisoned");
        let confirmed = context.confirmed.lock().expect("not poisoned");
        let unconfirmed: Vec<(i32, i64)> = durable
            .iter()
            .filter(|(p, next)| confirmed.get(p) < Some(next))
            .map(|(&p, &next)| (p, next))
            .collect();
        drop((durable, confirmed));
        self.commit_async(unconfirmed);
    }

    /// Commit `offsets` of the input topic without waiting, each with the
    /// URL this instance advertises as its metadata (whoever commits a
    /// partition owns it); the coordinator's answer reaches
    /// `MemberContext::commit_callback`.
    fn commit_async(&self, offsets: Vec<(i32, i64)>) {
        let advertised = self
            .advertised_url
            .as_deref()
            .map(|url| self.peers.seal(url))
            .unwrap_or_default();
        let mut tpl = TopicPartitionList::new();
        for (partition, next) in offsets {
            if tpl
                .add_partition_offset(&self.topic, partition, Offset::Offset(next))
                .is_err()
            {
                return;
            }
            if let Some(mut element) = tpl.find_partition(&self.topic, partition) {
                element.set_metadata(&advertised);
            }
        }
        if tpl.count() > 0
            && let Err(e) = self.member.commit(&tpl, CommitMode::Async)
        {
            debug!("committing offsets to the group: {e}");
        }
    }

    /// Leave the group now rather than when the session times out, so
    /// that the partitions move to the other members at once (the
    /// revocation commits where this instance's outputs end).
    ///
    /// The revocation runs in a poll; once nothing is assigned, it has run
    /// (the assignment shrinks only in its unassign, after its commit) and
    /// the leave request follows (closing the member waits for it), so an
    /// instance that owned nothing, or gave its partitions up in the first
    /// poll, leaves at once. [`LEAVE_WAIT`] bounds the polls for a
    /// revocation that has not come; it cannot bound the revocation's own
    /// commit, which waits for the coordinator's answer inside the poll.
    pub(super) fn leave(&self) {
        self.member.unsubscribe();
        let leaving = Instant::now();
        while leaving.elapsed() < LEAVE_WAIT {
            let _ = self.member.poll(Duration::from_millis(10));
            if self
                .member
                .assignment()
                .is_ok_and(|owned| owned.count() == 0)
            {
                info!(
                    milliseconds = leaving.elapsed().as_millis() as u64,
                    "left the group"
                );
                return;
            }
        }
        warn!(
            "partitions still assigned {} ms after leaving the group; closing anyway",
            LEAVE_WAIT.as_millis()
        );
    }
}

#[cfg(test)]
mod tests {
    use jobcast_ingest::kafka::Topics;
    use jobcast_storage::state::StateStore;
    use rdkafka::mocking::MockCluster;

    use super::*;

    /// What `member`'s context heard from the group since last asked.
    fn changes(member: &BaseConsumer<MemberContext>) -> Vec<MembershipChange> {
        std::mem::take(&mut *member.context().changes.lock().unwrap())
    }

    #[test]
    fn the_group_gives_partitions_and_takes_them_back_saying_where_outputs_end() {
        let mock = MockCluster::new(1).unwrap();
        let topics = Topics::default();
        mock.create_topic(&topics.events, 4, 1).unwrap();
        let mut config = ServeConfig {
            kafka: KafkaSettings::new(mock.bootstrap_servers()),
            ..ServeConfig::default()
        };
        config.consumer.group = "group-test".into();
        let dir = tempfile::tempdir().unwrap();
        let shared = Shared::new(Arc::new(StateStore::open(dir.path(), false).unwrap()));

        let first = join(&config, shared.clone()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut owned = Vec::new();
        while owned.len() < 4 {
            assert!(Instant::now() < deadline, "the group gave {owned:?}");
            let _ = first.poll(Duration::from_millis(100));
            for change in changes(&first) {
                match change {
                    MembershipChange::Added(p) => owned.extend(p),
                    MembershipChange::Removed(p) => panic!("revoked {p:?} with one member"),
                }
            }
        }
        owned.sort_unstable();
        assert_eq!(owned, [0, 1, 2, 3]);
        assert!(shared.assigned.load(Ordering::Relaxed));
        // This instance has published every partition up to offset 42.
        first
            .context()
            .durable
            .lock()
            .unwrap()
            .extend((0..4).map(|p| (p, 42)));

        // Leaving, the member gives every partition back and commits, for
        // each, where its outputs end: the next owner publishes from there.
        first.unsubscribe();
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut revoked = Vec::new();
        while revoked.len() < 4 {
            assert!(Instant::now() < deadline, "revoked only {revoked:?}");
            let _ = first.poll(Duration::from_millis(100));
            for change in changes(&first) {
                if let MembershipChange::Removed(p) = change {
                    revoked.extend(p);
                }
            }
        }
        revoked.sort_unstable();
        assert_eq!(revoked, [0, 1, 2, 3]);
        let mut tpl = TopicPartitionList::new();
        for partition in 0..4 {
            tpl.add_partition(&topics.events, partition);
        }
        let next_owner: BaseConsumer = consumer_config(&config.kafka, "group-test", &[])
            .create()
            .unwrap();
        let committed = next_owner
            .committed_offsets(tpl, Duration::from_secs(10))
            .unwrap();
        for element in committed.elements_for_topic(&topics.events) {
            assert_eq!(
                element.offset(),
                Offset::Offset(42),
                "{}",
                element.partition()
            );
        }
    }

    #[test]
    fn offsets_reach_the_group_only_once_their_batch_is_written() {
        let mut commits = GroupCommits::default();
        let first = commits.submitted(BTreeMap::from([(0, 10), (1, 5)]));
        let second = commits.submitted(BTreeMap::from([(0, 20)]));
        assert!(commits.take_written().is_empty(), "nothing written yet");
        first();
        assert_eq!(commits.take_written(), BTreeMap::from([(0, 10), (1, 5)]));
        assert!(commits.take_written().is_empty(), "each batch taken once");
        let third = commits.submitted(BTreeMap::from([(1, 7)]));
        second();
        third();
        // The later batch's offset of a partition wins.
        assert_eq!(commits.take_written(), BTreeMap::from([(0, 20), (1, 7)]));
    }

    #[test]
    fn configured_client_properties_win_over_the_members_own() {
        let mut kafka = KafkaSettings::new("b:9092");
        kafka
            .client
            .insert("enable.auto.commit".into(), "true".into());
        let config = consumer_config(&kafka, "g", &[("session.timeout.ms", "6000")]);
        assert_eq!(config.get("group.id"), Some("g"));
        assert_eq!(config.get("session.timeout.ms"), Some("6000"));
        assert_eq!(config.get("enable.auto.commit"), Some("true"));
        assert_eq!(config.get("enable.auto.offset.store"), Some("false"));
    }
}
