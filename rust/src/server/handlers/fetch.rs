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
//! offset and gets the aborted transactions of what it read; only the owner answers it, unless
//! the store shows the log holds no transaction (`Partition::free_of_transactions`).
//!
//! Racks (KIP-392, v11+): the owner answers a consumer whose zone (`cluster::racks`) is not its
//! rack, for each partition a broker of that zone can serve, with no records and that broker as
//! the preferred read replica; the consumer then fetches there. The answer does not wait for
//! MinBytes, as Kafka's.
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
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse, ProducerId};
use kafka_protocol::ResponseError;
use tokio::sync::watch;
use uuid::Uuid;

use super::{check_leader_epoch, Handling, RequestContext, READ_COMMITTED};
use crate::auth::acl::Operation;
use crate::auth::authorizer::Access;
use crate::broker::{Broker, Slot};
use crate::cluster::racks::client_zone;
use crate::log::partition::Partition;
use crate::log::reader;
use crate::metrics::zones::Crossing;
use crate::protocol::header::{encode_response, Request, WireError};
use crate::protocol::splice::{encode_spliced, ResponseFrame, Splices};
use crate::protocol::topic_name;
use crate::quotas::entity::QuotaKind;
use crate::quotas::Client;
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
    /// The broker of the consumer's zone it should read this partition from (KIP-392's
    /// preferred read replica), named instead of reading.
    read_elsewhere: Option<i32>,
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
    let mut wanted = resolve(broker, &body, request.api_version, access);
    let consumer = !from_follower(&body, request.api_version);
    let zone = client_zone(&body.rack_id, request.client_id.as_deref());
    if request.api_version >= 11 && consumer {
        for w in &mut wanted {
            w.read_elsewhere = read_replica(broker, w, zone);
        }
    }
    let redirected = wanted.iter().any(|w| w.read_elsewhere.is_some());
    let deadline =
        tokio::time::Instant::now() + Duration::from_millis(body.max_wait_ms.max(0) as u64);
    let client = Client::new(access.principal(), request.client_id.as_deref());
    // No more than the consumer's byte rate lets through without a throttle (as Kafka bounds
    // it); KIP-74's first batch still goes whole.
    let quota_bytes = consumer.then(|| broker.quotas.fetch_window_bytes(client));
    let max_bytes = usize::try_from(body.max_bytes)
        .unwrap_or(0)
        .min(broker.config.fetch_max_bytes)
        .min(quota_bytes.flatten().unwrap_or(usize::MAX));
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
        let satisfied = total >= body.min_bytes.max(0) as usize
            || any_error
            || redirected
            || watches.is_empty();
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
    let throttle = match consumer {
        true => over_quota(broker, client, &mut responses),
        false => 0,
    };
    count_fetch(broker, &responses, zone);
    encode(
        (request.correlation_id, request.api_version),
        &responses,
        by_id,
        throttle,
    )
}

/// Meters the answer's bytes against the consumer's byte rate; over it, the answer is empty
/// and carries the throttle (Kafka's throttled fetch: its bytes are not counted as used).
fn over_quota(broker: &Broker, client: Client<'_>, responses: &mut Vec<Answered>) -> i32 {
    let bytes: usize = responses
        .iter()
        .flat_map(|a| a.records.iter().flatten())
        .map(Bytes::len)
        .sum();
    let kind = QuotaKind::ConsumerByteRate;
    let throttle = broker
        .quotas
        .record_unless_throttled(kind, client, bytes as f64);
    if throttle.is_zero() {
        return 0;
    }
    responses.clear();
    i32::try_from(throttle.as_millis()).unwrap_or(i32::MAX)
}

/// The response frame, with the record data spliced in as slices of the objects it was read
/// from (no copy) wherever the codec lets it.
fn encode(
    (correlation_id, version): (i32, i16),
    responses: &[Answered],
    by_id: bool,
    throttle_ms: i32,
) -> Result<ResponseFrame, WireError> {
    let mut splices = Splices::default();
    let spliced = group(responses, by_id, |slices| splices.stand_in(slices.to_vec()));
    let body = FetchResponse::default()
        .with_throttle_time_ms(throttle_ms)
        .with_responses(spliced);
    match encode_spliced(correlation_id, version, &body, splices) {
        Ok(frame) => Ok(frame),
        Err(Some(error)) => Err(error),
        Err(None) => {
            tracing::warn!(
                "the codec did not write a fetch response's records in one piece; copying them"
            );
            let copied = group(responses, by_id, |slices| Bytes::from(slices.concat()));
            let body = FetchResponse::default()
                .with_throttle_time_ms(throttle_ms)
                .with_responses(copied);
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

    /// The answer naming the broker to read from instead: the log's bounds, no records.
    fn sent_elsewhere(&self, log: &Partition, replica: i32) -> Answered {
        let end = log.high_watermark();
        let stable = match self.read_committed {
            true => log.last_stable_offset().unwrap_or(end),
            false => end,
        };
        let data = nothing_known(self.index)
            .with_high_watermark(end)
            .with_last_stable_offset(stable)
            .with_log_start_offset(log.log_start_offset())
            .with_preferred_read_replica(BrokerId(replica));
        self.answer(data, Some(Vec::new()))
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
    let follower = from_follower(body, version);
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
                read_elsewhere: None,
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

/// Whether the fetch comes from a replica (Kafka's followers; a replica id of 0 or more, in
/// the request's state from v15 on), not a consumer.
fn from_follower(body: &FetchRequest, version: i16) -> bool {
    let replica = if version >= 15 {
        body.replica_state.replica_id
    } else {
        body.replica_id
    };
    replica.0 >= 0
}

/// The broker of the consumer's zone that should serve its read of `w`, if this broker owns
/// the partition, is in another rack and a live broker is in the consumer's (as Kafka's
/// RackAwareReplicaSelector, without a setting: racks set are what turns it on). A
/// read_committed read only where that broker can answer it: a log without transactions.
fn read_replica(broker: &Broker, w: &Wanted, zone: Option<&str>) -> Option<i32> {
    let zone = zone?;
    if !w.owned_at_start || broker.config.broker_rack.as_deref() == Some(zone) {
        return None;
    }
    let log = w.log().ok()?;
    if w.read_committed && !log.free_of_transactions(&broker.log.wal) {
        return None;
    }
    let reader = broker.cluster().reader_in_rack(zone, &w.topic, w.index)?;
    (reader != broker.config.broker_id).then_some(reader)
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
        if let (Ok(partition), Some(replica)) = (log, w.read_elsewhere) {
            responses.push(w.sent_elsewhere(partition, replica));
            continue;
        }
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
/// NOT_LEADER_OR_FOLLOWER sends the consumer to the owner, as Kafka's followers answer) unless
/// the log holds no transaction: then everything up to the end is stable.
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
    if !partition.is_leader() {
        let read = reader::read(&broker.log, partition, w.offset, budget, must_progress).await?;
        // Asked after the read: the index then holds at least the runs it read.
        if !partition.free_of_transactions(&broker.log.wal) {
            return Err(ResponseError::NotLeaderOrFollower);
        }
        let committed = Committed {
            last_stable: read.high_watermark,
            aborted: Vec::new(),
        };
        return Ok((read, Some(committed)));
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
        .with_preferred_read_replica(BrokerId(-1))
        .with_aborted_transactions(Some(Vec::new()))
}

/// Per topic named in the request and not refused: one request, and the records and bytes it
/// returns; the bytes also by zone crossing.
fn count_fetch(broker: &Broker, responses: &[Answered], zone: Option<&str>) {
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
    let crossing = Crossing::between(broker.config.broker_rack.as_deref(), zone);
    let total = per_topic.iter().map(|(_, _, bytes)| bytes).sum();
    broker.metrics.zone_traffic.count_fetch(crossing, total);
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
#[path = "fetch_tests.rs"]
mod tests;
