//! Fetch v4–17: committed data only. When less than MinBytes is available the request waits
//! for a high-watermark change on any of its partitions (a notification, not a polling loop)
//! or MaxWaitMs, whichever comes first. The response is bounded by the request's MaxBytes,
//! the broker's `fetch_max_bytes` and the room left in the connection's and broker's budgets
//! of bytes in flight, each partition by its MaxBytes; the first batch is returned whole even
//! if larger (KIP-74), so a consumer always progresses. Record data is not copied into the
//! response: the encoded frame holds slices of the cached objects it was read from, written
//! with vectored writes (protocol/splice.rs).
//!
//! A read_committed consumer (isolation level 1) reads below the partition's last stable
//! offset and gets the aborted transactions of what it read; only the owner answers it.
//!
//! A partition named twice is read once: like Kafka (which builds the request's partitions
//! into a map keyed by topic-partition), the last entry's offset and MaxBytes win and the
//! answer has one entry per partition, where the partition was first named.
//!
//! Authorization as in Kafka: a consumer needs READ on each topic (a topic id is resolved
//! first; an unknown one stays UNKNOWN_TOPIC_ID), a follower (replica id 0 or more) CLUSTER_ACTION
//! for all; else TOPIC_AUTHORIZATION_FAILED for the partitions, which are not read and, like in
//! Kafka, do not end the wait for MinBytes.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::select_all;
use futures::FutureExt;
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, PartitionData,
};
use kafka_protocol::messages::{FetchRequest, FetchResponse, ProducerId};
use kafka_protocol::ResponseError;
use tokio::sync::watch;
use uuid::Uuid;

use super::{check_leader_epoch, Handling, RequestContext, READ_COMMITTED};
use crate::auth::acl::Operation;
use crate::auth::authorizer::Access;
use crate::broker::{Broker, Slot};
use crate::log::partition::Partition;
use crate::log::reader;
use crate::protocol::header::{encode_response, Request, WireError};
use crate::protocol::splice::{encode_spliced, ResponseFrame, Splices};
use crate::protocol::topic_name;
use crate::server::budget::Charge;

/// One partition's answer: its response entry, and the record data read for it (None: an
/// error, or a partition the client may not read), which goes into the records field when the
/// response is encoded.
struct Answered {
    topic: String,
    topic_id: Uuid,
    data: PartitionData,
    records: Option<Vec<Bytes>>,
    /// Records in `records` (for the per-topic metrics).
    record_count: u64,
}

struct Wanted {
    topic: String,
    topic_id: Uuid,
    /// The partition's slot: its log is looked up for every read, as ownership may move while
    /// the request waits.
    slot: Result<Arc<Slot>, ResponseError>,
    /// Whether this broker owned the partition when the request came.
    owned_at_start: bool,
    index: i32,
    offset: i64,
    max_bytes: usize,
    client_epoch: i32,
    /// A consumer's read_committed fetch: below the last stable offset, with the aborted
    /// transactions listed (only the partition's owner knows them).
    read_committed: bool,
}

/// What a read_committed read adds to its answer: the last stable offset it read below and the
/// aborted transactions of what it read.
struct Committed {
    last_stable: i64,
    aborted: Vec<AbortedTransaction>,
}

/// `room` charges the records read while the request holds them (the encoded response is
/// charged by the caller once it exists).
pub(crate) async fn answer(
    broker: &Arc<Broker>,
    request: Request,
    mut room: Charge,
    access: &Access,
) -> Result<ResponseFrame, WireError> {
    let body: FetchRequest = request.body()?;
    let by_id = request.api_version >= 13;
    let wanted = resolve(broker, &body, request.api_version, access);
    let deadline =
        tokio::time::Instant::now() + Duration::from_millis(body.max_wait_ms.max(0) as u64);
    let max_bytes = usize::try_from(body.max_bytes)
        .unwrap_or(0)
        .min(broker.config.fetch_max_bytes);
    let responses = loop {
        if wanted.iter().any(Wanted::reads_a_follower) {
            broker.catch_up_with_commits().await;
        }
        let logs: Vec<_> = wanted.iter().map(Wanted::log).collect();
        // Subscribe before reading, so a commit landing between read and wait is not missed
        // (and a log replaced meanwhile wakes its readers, who then read its successor).
        let mut watches: Vec<watch::Receiver<i64>> = logs
            .iter()
            .filter_map(|log| log.as_ref().ok().map(|p| p.subscribe()))
            .collect();
        room.resize(0); // the previous round's records are gone
        let granted = room.take_up_to(max_bytes);
        let (responses, total, any_error) = read_all(broker, &wanted, &logs, granted).await;
        room.resize(total);
        let satisfied = total >= body.min_bytes.max(0) as usize || any_error || watches.is_empty();
        if satisfied || tokio::time::Instant::now() >= deadline {
            break responses;
        }
        let changed = select_all(watches.iter_mut().map(|w| Box::pin(w.changed())));
        if tokio::time::timeout_at(deadline, changed).await.is_err() {
            break responses; // nothing was committed meanwhile: what we read is current
        }
    };
    let mut responses = responses;
    if wanted.iter().any(Wanted::reads_a_follower) {
        broker.catch_up_with_commits().await;
    }
    settle(&wanted, &mut responses);
    count_fetch(broker, &responses);
    encode(
        request.correlation_id,
        request.api_version,
        &responses,
        by_id,
    )
}

/// The response frame, with the record data spliced in as slices of the objects it was read
/// from (no copy) wherever the codec lets it.
fn encode(
    correlation_id: i32,
    version: i16,
    responses: &[Answered],
    by_id: bool,
) -> Result<ResponseFrame, WireError> {
    let mut splices = Splices::default();
    let spliced = group(responses, by_id, |slices| splices.stand_in(slices.to_vec()));
    let body = FetchResponse::default().with_responses(spliced);
    match encode_spliced(correlation_id, version, &body, splices) {
        Ok(frame) => Ok(frame),
        Err(Some(error)) => Err(error),
        Err(None) => {
            tracing::warn!(
                "the codec did not write a fetch response's records in one piece; copying them"
            );
            let copied = group(responses, by_id, |slices| Bytes::from(slices.concat()));
            let body = FetchResponse::default().with_responses(copied);
            encode_response(correlation_id, version, &body).map(ResponseFrame::from)
        }
    }
}

impl Wanted {
    /// The log to read now. A request that came while this broker owned the partition is
    /// answered NOT_LEADER_OR_FOLLOWER once it no longer does (handed off or lost while the
    /// request waited), as Kafka answers a fetch whose leader moved: the follower view that
    /// replaced the log knows the end only as far as this broker's watch has brought it, which
    /// can lie below what the new owner already answered the same consumer.
    fn log(&self) -> Result<Arc<Partition>, ResponseError> {
        let log = self.slot.as_ref().map_err(|e| *e)?.current();
        if self.owned_at_start && !log.is_leader() {
            return Err(ResponseError::NotLeaderOrFollower);
        }
        Ok(log)
    }

    /// Whether the read goes to a log this broker does not own, whose end trails the owner's
    /// commits by the metadata watch (`Broker::catch_up_with_commits`).
    fn reads_a_follower(&self) -> bool {
        let slot = self.slot.as_ref();
        !self.owned_at_start && slot.is_ok_and(|s| !s.current().is_leader())
    }

    fn answer(&self, data: PartitionData, records: Option<Vec<Bytes>>) -> Answered {
        Answered {
            topic: self.topic.clone(),
            topic_id: self.topic_id,
            data,
            records,
            record_count: 0,
        }
    }
}

fn resolve(broker: &Broker, body: &FetchRequest, version: i16, access: &Access) -> Vec<Wanted> {
    let by_id = version >= 13;
    let replica = if version >= 15 {
        body.replica_state.replica_id
    } else {
        body.replica_id
    };
    let follower = replica.0 >= 0;
    let cluster_action = follower && access.allows_cluster(Operation::ClusterAction);
    let mut wanted: Vec<Wanted> = Vec::new();
    let mut seen: HashMap<(Uuid, String, i32), usize> = HashMap::new();
    for topic in &body.topics {
        let found = if by_id {
            broker.topic_by_id(topic.topic_id)
        } else {
            broker.topic(&topic.topic)
        };
        let name = found
            .as_ref()
            .map_or_else(|| topic.topic.0.to_string(), |t| t.record.name.clone());
        let missing = if by_id {
            ResponseError::UnknownTopicId
        } else {
            ResponseError::UnknownTopicOrPartition
        };
        // An id no topic has is UNKNOWN_TOPIC_ID before any check; a name is checked whether
        // the topic exists or not.
        let allowed = (by_id && found.is_none())
            || if follower {
                cluster_action
            } else {
                access.allows_topic(Operation::Read, &name)
            };
        for p in &topic.partitions {
            let slot = if allowed {
                found.as_ref().ok_or(missing).and_then(|t| {
                    usize::try_from(p.partition)
                        .ok()
                        .and_then(|i| t.partitions.get(i).cloned())
                        .ok_or(ResponseError::UnknownTopicOrPartition)
                })
            } else {
                Err(ResponseError::TopicAuthorizationFailed)
            };
            let owned_at_start = slot.as_ref().is_ok_and(|s| s.current().is_leader());
            let entry = Wanted {
                topic: name.clone(),
                topic_id: topic.topic_id,
                slot,
                owned_at_start,
                index: p.partition,
                offset: p.fetch_offset,
                max_bytes: usize::try_from(p.partition_max_bytes).unwrap_or(0),
                client_epoch: p.current_leader_epoch,
                read_committed: !follower && body.isolation_level == READ_COMMITTED,
            };
            // By id from v13 on, by name before: the key the request names topics by.
            let key = if by_id {
                (topic.topic_id, String::new(), p.partition)
            } else {
                (Uuid::nil(), topic.topic.0.to_string(), p.partition)
            };
            match seen.get(&key) {
                Some(&index) => wanted[index] = entry,
                None => {
                    seen.insert(key, wanted.len());
                    wanted.push(entry);
                }
            }
        }
    }
    wanted
}

/// Reads every wanted partition once from its log in `logs`; returns responses, bytes
/// gathered, and whether any partition answered with an error (which ends the wait, as in
/// Kafka; not a partition the client may not read, which Kafka answers without reading it).
async fn read_all(
    broker: &Broker,
    wanted: &[Wanted],
    logs: &[Result<Arc<Partition>, ResponseError>],
    max_bytes: usize,
) -> (Vec<Answered>, usize, bool) {
    let mut responses = Vec::with_capacity(wanted.len());
    let mut total = 0usize;
    let mut any_error = false;
    for (w, log) in wanted.iter().zip(logs) {
        let data = nothing_known(w.index);
        let budget = w.max_bytes.min(max_bytes.saturating_sub(total));
        let read = match log {
            Ok(partition) => read_one(broker, w, partition, budget, total == 0).await,
            Err(ResponseError::TopicAuthorizationFailed) => {
                let denied = data.with_error_code(ResponseError::TopicAuthorizationFailed.code());
                responses.push(w.answer(denied, None));
                continue;
            }
            Err(e) => Err(*e),
        };
        let answer = match read {
            Ok((result, committed)) => {
                total += result.records.iter().map(Bytes::len).sum::<usize>();
                let data = data
                    .with_high_watermark(result.high_watermark)
                    .with_last_stable_offset(result.high_watermark)
                    .with_log_start_offset(result.log_start_offset);
                let data = match committed {
                    Some(c) => data
                        .with_last_stable_offset(c.last_stable)
                        .with_aborted_transactions(Some(c.aborted)),
                    None => data,
                };
                Answered {
                    record_count: result.record_count,
                    ..w.answer(data, Some(result.records))
                }
            }
            Err(error) => {
                any_error = true;
                let data = data.with_error_code(error.code());
                let data = match (log, error) {
                    // Consumers use the log bounds to reset after OFFSET_OUT_OF_RANGE.
                    (Ok(p), ResponseError::OffsetOutOfRange) => data
                        .with_high_watermark(p.high_watermark())
                        .with_last_stable_offset(p.high_watermark())
                        .with_log_start_offset(p.log_start_offset()),
                    // Any other error (a leader moved or fenced, storage failing) says nothing
                    // of the log: -1, as Kafka answers (a client takes what it is given as the
                    // partition's end, even from a broker it no longer fetches from).
                    _ => data,
                };
                w.answer(data, None)
            }
        };
        responses.push(answer);
    }
    (responses, total, any_error)
}

/// Reads one partition from `partition`, its log now: below the last stable offset for a
/// read_committed fetch, which only the owner answers (a follower view has no producer state:
/// NOT_LEADER_OR_FOLLOWER sends the consumer to the owner, as Kafka's followers answer).
async fn read_one(
    broker: &Broker,
    w: &Wanted,
    partition: &Arc<Partition>,
    budget: usize,
    must_progress: bool,
) -> Result<(reader::ReadResult, Option<Committed>), ResponseError> {
    check_leader_epoch(broker, partition, w.client_epoch)?;
    if !w.read_committed {
        let read = reader::read(&broker.log, partition, w.offset, budget, must_progress).await?;
        return Ok((read, None));
    }
    let last_stable = partition.last_stable_offset()?;
    let wanted = (w.offset, last_stable);
    let read = reader::read_below(&broker.log, partition, wanted, budget, must_progress).await?;
    let aborted = partition
        .aborted_between(w.offset, read.next_offset)
        .into_iter()
        .map(|a| {
            AbortedTransaction::default()
                .with_producer_id(ProducerId(a.producer_id))
                .with_first_offset(a.first_offset)
        })
        .collect();
    Ok((
        read,
        Some(Committed {
            last_stable,
            aborted,
        }),
    ))
}

/// Brings the answers up to the moment they are sent. A read may wait for the object store
/// (seconds under load) while its partition is handed off, or committed further: a partition
/// this broker owned when the request came and has given up since is answered
/// NOT_LEADER_OR_FOLLOWER with high watermark -1 (the end its read began with may lie below
/// what the new owner has answered the same client meanwhile); any other answer carries the
/// log's end as it is now (for a partition owned elsewhere, after catching up with the store),
/// never the one its read began with.
fn settle(wanted: &[Wanted], responses: &mut [Answered]) {
    for (w, answered) in wanted.iter().zip(responses) {
        if answered.data.error_code != 0 {
            continue;
        }
        match w.log() {
            Ok(log) => {
                let end = answered.data.high_watermark.max(log.high_watermark());
                answered.data.high_watermark = end;
                // A read_committed answer keeps the last stable offset it read below.
                if !w.read_committed {
                    answered.data.last_stable_offset = end;
                }
            }
            Err(error) => {
                answered.data = nothing_known(w.index).with_error_code(error.code());
                answered.records = None;
                answered.record_count = 0;
            }
        }
    }
}

/// A partition's answer before anything is known of its log: no end, no records.
fn nothing_known(index: i32) -> PartitionData {
    PartitionData::default()
        .with_partition_index(index)
        .with_high_watermark(-1)
        .with_last_stable_offset(-1)
        .with_log_start_offset(-1)
        .with_preferred_read_replica(kafka_protocol::messages::BrokerId(-1))
        .with_aborted_transactions(Some(Vec::new()))
}

/// Per topic named in the request and not refused: one request, and the records and bytes it
/// returns.
fn count_fetch(broker: &Broker, responses: &[Answered]) {
    let mut per_topic: Vec<(&str, u64, u64)> = Vec::new();
    let denied = ResponseError::TopicAuthorizationFailed.code();
    for answered in responses.iter().filter(|a| a.data.error_code != denied) {
        let slices = answered.records.as_deref().unwrap_or_default();
        let records = answered.record_count;
        let bytes = slices.iter().map(|s| s.len() as u64).sum();
        match per_topic.iter_mut().find(|(t, ..)| *t == answered.topic) {
            Some(entry) => {
                entry.1 += records;
                entry.2 += bytes;
            }
            None => per_topic.push((&answered.topic, records, bytes)),
        }
    }
    for (topic, records, bytes) in per_topic {
        broker.count_fetch(topic, records, bytes);
    }
}

/// Groups partition responses by topic, keeping request order; `records` makes a records
/// field of the data read.
fn group(
    responses: &[Answered],
    by_id: bool,
    mut records: impl FnMut(&[Bytes]) -> Bytes,
) -> Vec<FetchableTopicResponse> {
    let mut topics: Vec<FetchableTopicResponse> = Vec::new();
    for answered in responses {
        let same = topics.last().is_some_and(|t| {
            if by_id {
                t.topic_id == answered.topic_id
            } else {
                t.topic.0.as_str() == answered.topic
            }
        });
        if !same {
            topics.push(
                FetchableTopicResponse::default()
                    .with_topic(topic_name(&answered.topic))
                    .with_topic_id(answered.topic_id),
            );
        }
        let data = answered.data.clone();
        let data = match &answered.records {
            Some(slices) => data.with_records(Some(records(slices))),
            None => data,
        };
        topics.last_mut().unwrap().partitions.push(data);
    }
    topics
}

/// Dispatch's entry for Fetch (a [`super::Handler`]): the response's bytes are charged to the
/// connection's budget as they are read.
pub(crate) fn handle(cx: &RequestContext, request: Request) -> Handling {
    let cx = cx.clone();
    let room = Charge::new(&cx.connection.budgets);
    async move { answer(&cx.broker, request, room, &cx.access).await.into() }.boxed()
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ReplicaState};
    use kafka_protocol::messages::{ApiKey, BrokerId};

    use super::*;
    use crate::auth::acl::ResourceType::{Cluster, Topic};
    use crate::auth::acl::CLUSTER_NAME;
    use crate::broker::tests::produce;
    use crate::protocol::header::testing::{read_response, request};
    use crate::server::budget::{Budgets, ByteBudget};
    use crate::server::handlers::testing::{alice, allow, broker_with};

    /// A topic asked for by name (before v13) or id.
    type Asked<'a> = (&'a str, Uuid);

    /// (error, bytes of records) of partition 0 of each topic, fetched from offset 0 at
    /// `version` by `replica` (-1: a consumer), waiting at most `wait_ms` for a byte.
    async fn fetch(
        broker: &Arc<Broker>,
        version: i16,
        topics: &[Asked<'_>],
        replica: i32,
        wait_ms: i32,
        access: &Access,
    ) -> Vec<(i16, usize)> {
        let got = answers(broker, version, topics, replica, 0, wait_ms, access).await;
        let sizes = got
            .iter()
            .map(|p| p.records.as_ref().map_or(0, |r| r.len()));
        got.iter().map(|p| p.error_code).zip(sizes).collect()
    }

    /// The answers for partition 0 of each topic, fetched from `offset` (see `fetch`).
    async fn answers(
        broker: &Arc<Broker>,
        version: i16,
        topics: &[Asked<'_>],
        replica: i32,
        offset: i64,
        wait_ms: i32,
        access: &Access,
    ) -> Vec<PartitionData> {
        let topics = topics.iter().map(|&(name, id)| {
            let partition = FetchPartition::default()
                .with_fetch_offset(offset)
                .with_partition_max_bytes(1 << 20);
            let topic = FetchTopic::default().with_partitions(vec![partition]);
            match version {
                13.. => topic.with_topic_id(id),
                _ => topic.with_topic(topic_name(name)),
            }
        });
        let mut body = FetchRequest::default()
            .with_max_wait_ms(wait_ms)
            .with_min_bytes(1)
            .with_max_bytes(1 << 20)
            .with_topics(topics.collect());
        match version {
            15.. => body.replica_state = ReplicaState::default().with_replica_id(BrokerId(replica)),
            _ => body.replica_id = BrokerId(replica),
        }
        let budgets = Budgets::new(1 << 24, Arc::new(ByteBudget::new(1 << 24)));
        let asked = request(ApiKey::Fetch, version, &body);
        let frame = answer(broker, asked, Charge::new(&budgets), access).await;
        let (_, response): (_, FetchResponse) = read_response(frame.unwrap(), version);
        let partitions = response.responses.into_iter().flat_map(|t| t.partitions);
        partitions.collect()
    }

    #[tokio::test]
    async fn a_consumer_reads_only_topics_it_has_read_on() {
        let t = broker_with(&["t", "u"], 1, 5).await;
        let id = |name| t.broker.topic(name).unwrap().record.id;
        let reader = alice(vec![
            allow(Topic, "u", Operation::Read),
            allow(Topic, "t", Operation::Describe),
        ]);
        let denied = ResponseError::TopicAuthorizationFailed.code();
        let by_name = [
            ("t", Uuid::nil()),
            ("u", Uuid::nil()),
            ("missing", Uuid::nil()),
        ];
        let got = fetch(&t.broker, 12, &by_name, -1, 0, &reader).await;
        assert_eq!(got[0], (denied, 0), "DESCRIBE is not READ");
        assert_eq!(got[1].0, 0);
        assert!(got[1].1 > 0, "u is read");
        assert_eq!(got[2], (denied, 0), "a missing topic is not revealed");
        // By id: the name is checked; an id no topic has stays UNKNOWN_TOPIC_ID.
        let by_id = [("", id("t")), ("", id("u")), ("", Uuid::new_v4())];
        let got = fetch(&t.broker, 13, &by_id, -1, 0, &reader).await;
        let unknown_id = ResponseError::UnknownTopicId.code();
        let codes: Vec<i16> = got.iter().map(|g| g.0).collect();
        assert_eq!(codes, [denied, 0, unknown_id]);
        // A follower needs CLUSTER_ACTION, READ or not.
        let got = fetch(&t.broker, 15, &[("", id("u"))], 2, 0, &reader).await;
        assert_eq!(got, [(denied, 0)]);
        let broker_like = alice(vec![allow(Cluster, CLUSTER_NAME, Operation::ClusterAction)]);
        let got = fetch(&t.broker, 15, &[("", id("t"))], 2, 0, &broker_like).await;
        assert_eq!(got[0].0, 0);
        assert!(got[0].1 > 0, "a follower reads t");
    }

    #[tokio::test]
    async fn a_refused_topic_does_not_end_the_wait_for_data() {
        let t = broker_with(&["t", "empty"], 1, 0).await;
        produce(&t.broker, "t", 0, 5).await;
        let reader = alice(vec![allow(Topic, "empty", Operation::Read)]);
        let asked = [("t", Uuid::nil()), ("empty", Uuid::nil())];
        let started = Instant::now();
        let got = fetch(&t.broker, 12, &asked, -1, 300, &reader).await;
        let denied = ResponseError::TopicAuthorizationFailed.code();
        assert_eq!(got, [(denied, 0), (0, 0)]);
        assert!(
            started.elapsed() >= Duration::from_millis(250),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn a_fetch_waiting_while_its_partition_is_handed_off_answers_not_leader() {
        let t = broker_with(&["t"], 1, 5).await;
        let slot = t.broker.topic("t").unwrap().partitions[0].clone();
        let owned = slot.current();
        assert!(owned.is_leader());
        let readers_before = owned.readers();
        let broker = t.broker.clone();
        let reader = alice(vec![allow(Topic, "t", Operation::Read)]);
        let asked = [("t", Uuid::nil())];
        let waiting =
            tokio::spawn(async move { answers(&broker, 12, &asked, -1, 5, 60_000, &reader).await });
        while owned.readers() == readers_before {
            tokio::task::yield_now().await; // the fetch has not looked at the log yet
        }
        // A hand-off: the log stops taking writes, the owner key goes, a follower view takes
        // its place (`ownership::spawn_hand_off`).
        owned.close(ResponseError::NotLeaderOrFollower);
        slot.replace(owned.to_follower(5));
        let answered = tokio::time::timeout(Duration::from_secs(10), waiting);
        let got = answered
            .await
            .expect("answered when the log was replaced")
            .unwrap();
        let not_leader = ResponseError::NotLeaderOrFollower.code();
        assert_eq!((got[0].error_code, got[0].high_watermark), (not_leader, -1));
    }

    /// A broker caching nothing with five records in partition 0 of "t", and a fetch of them
    /// from offset 0 whose read of the write-ahead object is held at the store.
    async fn fetch_held_at_the_store() -> (
        crate::broker::tests::TestBroker,
        Arc<tokio::sync::Semaphore>,
        tokio::task::JoinHandle<Vec<PartitionData>>,
    ) {
        let (t, objects) = crate::broker::tests::broker_over_faulty_store().await;
        t.broker
            .create_topic("t", 1, Default::default())
            .await
            .unwrap();
        produce(&t.broker, "t", 0, 5).await;
        let gets = objects.hold_gets(".wal");
        let broker = t.broker.clone();
        let reader = alice(vec![allow(Topic, "t", Operation::Read)]);
        let fetching = tokio::spawn(async move {
            answers(&broker, 12, &[("t", Uuid::nil())], -1, 0, 0, &reader).await
        });
        while objects.held_gets() == 0 {
            tokio::task::yield_now().await;
        }
        (t, gets, fetching)
    }

    #[tokio::test]
    async fn a_fetch_whose_read_waits_while_its_partition_is_handed_off_answers_not_leader() {
        let (t, gets, fetching) = fetch_held_at_the_store().await;
        let slot = t.broker.topic("t").unwrap().partitions[0].clone();
        let owned = slot.current();
        owned.close(ResponseError::NotLeaderOrFollower);
        slot.replace(owned.to_follower(5));
        gets.add_permits(10);
        let got = fetching.await.unwrap();
        let not_leader = ResponseError::NotLeaderOrFollower.code();
        assert_eq!((got[0].error_code, got[0].high_watermark), (not_leader, -1));
        let records = got[0].records.as_ref();
        assert!(
            records.is_none_or(|r| r.is_empty()),
            "nothing read from the log given up"
        );
    }

    #[tokio::test]
    async fn a_fetch_answers_the_end_its_log_has_when_it_answers() {
        let (t, gets, fetching) = fetch_held_at_the_store().await;
        produce(&t.broker, "t", 0, 3).await; // committed while the read waits
        gets.add_permits(10);
        let got = fetching.await.unwrap();
        assert_eq!((got[0].error_code, got[0].high_watermark), (0, 8));
        assert!(got[0].records.as_ref().is_some_and(|r| !r.is_empty()));
    }
}
