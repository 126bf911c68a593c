//! Fetch v4–17: committed data only. When less than MinBytes is available the request waits
//! for a high-watermark change on any of its partitions (a notification, not a polling loop)
//! or MaxWaitMs, whichever comes first. The response is bounded by the request's MaxBytes,
//! the broker's `fetch_max_bytes` and the room left in the connection's and broker's budgets
//! of bytes in flight, each partition by its MaxBytes; the first batch is returned whole even
//! if larger (KIP-74), so a consumer always progresses.
//!
//! A partition named twice is read once: like Kafka (which builds the request's partitions
//! into a map keyed by topic-partition), the last entry's offset and MaxBytes win and the
//! answer has one entry per partition, where the partition was first named.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::select_all;
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::{FetchRequest, FetchResponse};
use kafka_protocol::ResponseError;
use tokio::sync::watch;
use uuid::Uuid;

use super::check_leader_epoch;
use crate::broker::Broker;
use crate::log::partition::Partition;
use crate::log::reader;
use crate::protocol::header::{encode_response, Request, WireError};
use crate::protocol::topic_name;
use crate::server::budget::Charge;

struct Wanted {
    topic: String,
    topic_id: Uuid,
    partition: Result<Arc<Partition>, ResponseError>,
    index: i32,
    offset: i64,
    max_bytes: usize,
    client_epoch: i32,
}

/// `room` charges the records read while the request holds them (the encoded response is
/// charged by the caller once it exists).
pub(crate) async fn handle(
    broker: &Arc<Broker>,
    request: Request,
    mut room: Charge,
) -> Result<Bytes, WireError> {
    let body: FetchRequest = request.body()?;
    let by_id = request.api_version >= 13;
    let wanted = resolve(broker, &body, by_id);
    let deadline =
        tokio::time::Instant::now() + Duration::from_millis(body.max_wait_ms.max(0) as u64);
    let max_bytes = usize::try_from(body.max_bytes)
        .unwrap_or(0)
        .min(broker.config.fetch_max_bytes);
    // Subscribe before reading, so a commit landing between read and wait is not missed.
    let mut watches: Vec<watch::Receiver<i64>> = wanted
        .iter()
        .filter_map(|w| w.partition.as_ref().ok().map(|p| p.subscribe()))
        .collect();
    let responses = loop {
        for w in watches.iter_mut() {
            w.mark_unchanged();
        }
        room.resize(0); // the previous round's records are gone
        let granted = room.take_up_to(max_bytes);
        let (responses, total, any_error) = read_all(broker, &wanted, granted).await;
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
    count_fetch(broker, &responses);
    let response = FetchResponse::default().with_responses(group(responses, by_id));
    encode_response(request.correlation_id, request.api_version, &response)
}

fn resolve(broker: &Broker, body: &FetchRequest, by_id: bool) -> Vec<Wanted> {
    let mut wanted: Vec<Wanted> = Vec::new();
    let mut seen: HashMap<(Uuid, String, i32), usize> = HashMap::new();
    for topic in &body.topics {
        let found = if by_id {
            broker.topic_by_id(topic.topic_id)
        } else {
            broker.topic(&topic.topic)
        };
        let missing = if by_id {
            ResponseError::UnknownTopicId
        } else {
            ResponseError::UnknownTopicOrPartition
        };
        for p in &topic.partitions {
            let partition = found.as_ref().ok_or(missing).and_then(|t| {
                usize::try_from(p.partition)
                    .ok()
                    .and_then(|i| t.partitions.get(i).map(|s| s.current()))
                    .ok_or(ResponseError::UnknownTopicOrPartition)
            });
            let entry = Wanted {
                topic: found
                    .as_ref()
                    .map_or_else(|| topic.topic.0.to_string(), |t| t.record.name.clone()),
                topic_id: topic.topic_id,
                partition,
                index: p.partition,
                offset: p.fetch_offset,
                max_bytes: usize::try_from(p.partition_max_bytes).unwrap_or(0),
                client_epoch: p.current_leader_epoch,
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

/// Reads every wanted partition once; returns responses, bytes gathered, and whether any
/// partition answered with an error (which ends the wait, as in Kafka).
async fn read_all(
    broker: &Broker,
    wanted: &[Wanted],
    max_bytes: usize,
) -> (Vec<(String, Uuid, PartitionData)>, usize, bool) {
    let mut responses = Vec::with_capacity(wanted.len());
    let mut total = 0usize;
    let mut any_error = false;
    for w in wanted {
        let data = PartitionData::default()
            .with_partition_index(w.index)
            .with_high_watermark(-1)
            .with_last_stable_offset(-1)
            .with_log_start_offset(-1)
            .with_preferred_read_replica(kafka_protocol::messages::BrokerId(-1))
            .with_aborted_transactions(Some(Vec::new()));
        let budget = w.max_bytes.min(max_bytes.saturating_sub(total));
        let read = match &w.partition {
            Ok(partition) => match check_leader_epoch(broker, partition, w.client_epoch) {
                Ok(()) => reader::read(&broker.log, partition, w.offset, budget, total == 0).await,
                Err(e) => Err(e),
            },
            Err(e) => Err(*e),
        };
        let data = match read {
            Ok(result) => {
                total += result.records.len();
                data.with_high_watermark(result.high_watermark)
                    .with_last_stable_offset(result.high_watermark)
                    .with_log_start_offset(result.log_start_offset)
                    .with_records(Some(result.records))
            }
            Err(error) => {
                any_error = true;
                let data = data.with_error_code(error.code());
                match &w.partition {
                    // Consumers use the log bounds to reset after OFFSET_OUT_OF_RANGE.
                    Ok(p) => data
                        .with_high_watermark(p.high_watermark())
                        .with_last_stable_offset(p.high_watermark())
                        .with_log_start_offset(p.log_start_offset()),
                    Err(_) => data,
                }
            }
        };
        responses.push((w.topic.clone(), w.topic_id, data));
    }
    (responses, total, any_error)
}

/// Per topic named in the request: one request, and the records and bytes it returns.
fn count_fetch(broker: &Broker, responses: &[(String, Uuid, PartitionData)]) {
    let mut per_topic: Vec<(&str, u64, u64)> = Vec::new();
    for (topic, _, data) in responses {
        let (records, bytes) = data.records.as_ref().map_or((0, 0), |r| {
            (crate::log::segment::count_records(r), r.len() as u64)
        });
        match per_topic.iter_mut().find(|(t, ..)| t == topic) {
            Some(entry) => {
                entry.1 += records;
                entry.2 += bytes;
            }
            None => per_topic.push((topic, records, bytes)),
        }
    }
    for (topic, records, bytes) in per_topic {
        broker.count_fetch(topic, records, bytes);
    }
}

/// Groups partition responses by topic, keeping request order.
fn group(
    responses: Vec<(String, Uuid, PartitionData)>,
    by_id: bool,
) -> Vec<FetchableTopicResponse> {
    let mut topics: Vec<FetchableTopicResponse> = Vec::new();
    for (name, id, data) in responses {
        let same = topics.last().is_some_and(|t| {
            if by_id {
                t.topic_id == id
            } else {
                t.topic.0.as_str() == name
            }
        });
        if !same {
            topics.push(
                FetchableTopicResponse::default()
                    .with_topic(topic_name(&name))
                    .with_topic_id(id),
            );
        }
        topics.last_mut().unwrap().partitions.push(data);
    }
    topics
}
