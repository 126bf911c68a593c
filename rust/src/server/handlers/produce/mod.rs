//! Produce v3–12 (v12: `implicit_add`). Validation and appends run synchronously in request order; the response waits
//! until every partition's segment is durable (acks 1 and -1 alike: durability is the object
//! store's, there are no followers), at most the request's timeout. acks=0 gets no response
//! but is flushed the same way, its bytes charged to the connection's budgets until then.

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use tokio::sync::oneshot;

use super::find_partition;
use super::{Handling, Reply, RequestContext};
use crate::auth::acl::{Operation, ResourceType};
use crate::auth::authorizer::Access;
use crate::broker::Broker;
use crate::cluster::racks::client_zone;
use crate::log::partition::{AppendResult, Appended, Partition};
use crate::log::validate::{validate_produce, Rejection};
use crate::log::wal::object::{sliced, slices_pay};
use crate::metrics::zones::Crossing;
use crate::protocol::header::{encode_response, Request};
use crate::server::budget::Charge;
use crate::transactions::TxnPartition;

pub(crate) mod implicit_add;
mod window;
pub(crate) use window::ProduceWindow;
use window::{Load, Waiting};

/// A partition's outcome: decided now (an error, or a retry of stored batches), or once its
/// flush completes.
enum Pending {
    Now(Rejection),
    Stored(Arc<Partition>, i64),
    Flush(Arc<Partition>, oneshot::Receiver<AppendResult>),
}

/// A topic needs WRITE (else TOPIC_AUTHORIZATION_FAILED for each of its partitions, nothing of
/// it appended, whether it exists or not); the request's other topics go on. A request with a
/// transactional id needs WRITE on it (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every
/// partition), and its transactional batches are checked against the coordinator's record of
/// that id (`log::partition::transactions`). `held`: where the request's
/// bytes stay charged until they are durable once its answer no longer holds them (acks=0,
/// answered at once; or answered REQUEST_TIMED_OUT before its flush).
pub(crate) fn start(
    broker: &Arc<Broker>,
    request: Request,
    (window, held): (&Arc<ProduceWindow>, Charge),
    access: &Access,
) -> BoxFuture<'static, Reply> {
    let body: ProduceRequest = match request.body() {
        Ok(body) => body,
        Err(reason) => return async move { Reply::Close(reason) }.boxed(),
    };
    let acks = body.acks;
    let acks_valid = matches!(acks, -1..=1);
    // How long the client lets us wait for durability before answering REQUEST_TIMED_OUT.
    let ack_timeout = std::time::Duration::from_millis(body.timeout_ms.max(0) as u64);
    let records = body.topic_data.iter().flat_map(|t| &t.partition_data);
    let records = records.filter_map(|p| p.records.as_deref());
    let slices_pay = slices_pay(records, request.body.len());
    let transactional_id = body.transactional_id.as_ref().map(|id| id.0.to_string());
    let transaction_allowed = transactional_id
        .as_deref()
        .is_none_or(|id| access.allows(Operation::Write, ResourceType::TransactionalId, id));
    let mut topics = Vec::with_capacity(body.topic_data.len());
    let mut load = Load::default();
    let zone = client_zone("", request.client_id.as_deref());
    let crossing = Crossing::between(broker.config.broker_rack.as_deref(), zone);
    for topic in body.topic_data {
        let name = topic.name.0.to_string();
        let mut totals = TopicTotals::default();
        let allowed = access.allows_topic(Operation::Write, &name);
        let partitions: Vec<(i32, Pending)> = topic
            .partition_data
            .into_iter()
            .map(|data| {
                let pending = if !transaction_allowed {
                    Pending::Now(ResponseError::TransactionalIdAuthorizationFailed.into())
                } else if !allowed {
                    Pending::Now(ResponseError::TopicAuthorizationFailed.into())
                } else if acks_valid {
                    let wanted = Wanted {
                        index: data.index,
                        want_ack: acks != 0,
                        slices_pay,
                        transactional_id: transactional_id.as_deref(),
                    };
                    append(
                        broker,
                        &name,
                        data.records,
                        wanted,
                        (&mut totals, &mut load),
                    )
                } else {
                    Pending::Now(ResponseError::InvalidRequiredAcks.into())
                };
                (data.index, pending)
            })
            .collect();
        if allowed {
            broker.count_produce(&name, totals.records, totals.bytes);
            broker
                .metrics
                .zone_traffic
                .count_produce(crossing, totals.bytes);
        }
        topics.push((name, partitions));
    }
    if acks == 0 {
        let flushes = topics.into_iter().flat_map(|(_, partitions)| partitions);
        let flushes = flushes.filter_map(|(_, pending)| match pending {
            Pending::Flush(_, receiver) => Some(receiver),
            _ => None,
        });
        hold_until_flushed(held, load.bytes, flushes.collect());
        return async { Reply::None }.boxed();
    }
    let waits = topics.iter().any(|(_, partitions)| {
        partitions
            .iter()
            .any(|(_, p)| matches!(p, Pending::Flush(..)))
    });
    let waiting = waits.then(|| {
        let (waiting, due) = Waiting::enter(window, load);
        if due {
            broker.wal.flush_soon();
        }
        waiting
    });
    // Not the request itself: its bytes are freed once the write-ahead object holds them.
    let (correlation_id, api_version) = (request.correlation_id, request.frame_version());
    async move {
        let _waiting = waiting;
        let deadline = tokio::time::Instant::now() + ack_timeout;
        let mut responses = Vec::with_capacity(topics.len());
        let mut unflushed = Vec::new();
        for (name, partitions) in topics {
            let mut partition_responses = Vec::with_capacity(partitions.len());
            for (index, pending) in partitions {
                let answer = outcome(index, pending, deadline, &mut unflushed);
                partition_responses.push(answer.await);
            }
            responses.push(
                TopicProduceResponse::default()
                    .with_name(crate::protocol::topic_name(&name))
                    .with_partition_responses(partition_responses),
            );
        }
        // Answered REQUEST_TIMED_OUT, but still buffered: charged until flushed, as acks=0.
        hold_until_flushed(held, load.bytes, unflushed);
        let response = ProduceResponse::default().with_responses(responses);
        encode_response(correlation_id, api_version, &response).into()
    }
    .boxed()
}

/// Keeps a request's `bytes` charged to the budgets until `flushes` are durable or failed:
/// for a request that gets no answer (acks=0) or one answered before its flush (its timeout
/// passed), whose batches stay buffered all the same. So no producer fills the write buffer
/// past the budgets while the object store is slow, whatever its acks and timeout.
fn hold_until_flushed(
    mut held: Charge,
    bytes: usize,
    flushes: Vec<oneshot::Receiver<AppendResult>>,
) {
    if flushes.is_empty() {
        return;
    }
    held.add(bytes);
    tokio::spawn(async move {
        let _held = held;
        futures::future::join_all(flushes).await;
    });
}

/// What one topic of a request added to the log, for the produce metrics.
#[derive(Default)]
struct TopicTotals {
    records: u64,
    bytes: u64,
}

/// How one partition's records are to be appended.
struct Wanted<'a> {
    index: i32,
    want_ack: bool,
    /// The request's large batches may stay slices of it (`wal::object::slices_pay`).
    slices_pay: bool,
    /// The request's, which its transactional batches are checked against.
    transactional_id: Option<&'a str>,
}

fn append(
    broker: &Broker,
    topic: &str,
    records: Option<bytes::Bytes>,
    wanted: Wanted<'_>,
    (totals, load): (&mut TopicTotals, &mut Load),
) -> Pending {
    let Wanted {
        index,
        want_ack,
        slices_pay,
        transactional_id,
    } = wanted;
    let partition = match find_partition(broker, topic, index) {
        Ok(partition) => partition,
        Err(error) => return Pending::Now(error.into()),
    };
    let records = records.unwrap_or_default();
    // Every record is checked before anything is appended: a bad batch stores nothing of
    // this partition's records.
    let mut batches = match validate_produce(&records, &partition.produce_rules()) {
        Ok(batches) => batches,
        Err(rejection) => {
            tracing::debug!(topic, partition = index, error = %rejection.error,
                reason = rejection.message, "produce rejected");
            return Pending::Now(rejection);
        }
    };
    if !slices_pay {
        for batch in batches.iter_mut().filter(|b| sliced(b.bytes.len())) {
            batch.bytes = bytes::Bytes::copy_from_slice(&batch.bytes);
        }
    }
    let mut batches_load = Load::default();
    let records = batches.iter().fold(0u64, |records, batch| {
        batches_load.add_batch(batch.bytes.len());
        records + batch.header.record_count.max(0) as u64
    });
    // Asked only for a transactional batch whose transaction is not open here yet.
    let verify = |producer_id: i64, epoch: i16| match transactional_id {
        Some(id) => {
            let this = TxnPartition(topic.to_string(), index);
            broker.transactions.verify(id, (producer_id, epoch), &this)
        }
        None => Err(ResponseError::InvalidTxnState),
    };
    match partition.append_verified(batches, want_ack, &verify) {
        Ok(Appended::Buffered(receiver, buffered)) => {
            if buffered > 0 {
                totals.records += records;
                totals.bytes += batches_load.bytes as u64;
                load.add(batches_load);
                broker.wal.note_append(&partition, buffered);
            }
            Pending::Flush(partition, receiver)
        }
        Ok(Appended::Stored(base_offset)) => Pending::Stored(partition, base_offset),
        Err(ResponseError::NotEnoughReplicas) => Pending::Now(Rejection {
            error: ResponseError::NotEnoughReplicas,
            message: format!(
                "the transaction coordinator's record does not (yet) show {topic}-{index} added \
                 to this producer's ongoing transaction; retry (send AddPartitionsToTxn first)"
            ),
            record: None,
        }),
        Err(error) => Pending::Now(error.into()),
    }
}

/// A partition's answer; a flush still to come when `deadline` passes goes to `unflushed`.
async fn outcome(
    index: i32,
    pending: Pending,
    deadline: tokio::time::Instant,
    unflushed: &mut Vec<oneshot::Receiver<AppendResult>>,
) -> PartitionProduceResponse {
    let response = PartitionProduceResponse::default()
        .with_index(index)
        .with_log_append_time_ms(-1);
    let (result, log_start) = match pending {
        Pending::Now(rejection) => (Err(rejection), -1),
        // A retry of a batch stored already: its offset as first answered.
        Pending::Stored(partition, base_offset) => (Ok(base_offset), partition.log_start_offset()),
        Pending::Flush(partition, mut receiver) => {
            // A dropped sender means the broker is going away: the write was not acknowledged.
            // Past the request's timeout the answer is REQUEST_TIMED_OUT, as in Kafka: the
            // records stay buffered and may still be written ("possibly persisted").
            let result = match tokio::time::timeout_at(deadline, &mut receiver).await {
                Ok(answer) => answer.unwrap_or(Err(ResponseError::NotLeaderOrFollower)),
                Err(_) => {
                    unflushed.push(receiver);
                    Err(ResponseError::RequestTimedOut)
                }
            };
            (
                result.map_err(Rejection::from),
                partition.log_start_offset(),
            )
        }
    };
    match result {
        Ok(base_offset) => response
            .with_base_offset(base_offset)
            .with_log_start_offset(log_start),
        Err(rejection) => {
            // ProduceResponse v8+ names the record that broke a rule (Kafka's record_errors).
            let record_errors = rejection.record.map(|record| {
                BatchIndexAndErrorMessage::default()
                    .with_batch_index(record)
                    .with_batch_index_error_message(Some(StrBytes::from_string(
                        rejection.message.clone(),
                    )))
            });
            response
                .with_error_code(rejection.error.code())
                .with_base_offset(-1)
                .with_log_start_offset(-1)
                .with_record_errors(record_errors.into_iter().collect())
                .with_error_message(Some(StrBytes::from_string(rejection.message)))
        }
    }
}

/// Dispatch's entry for Produce (a [`super::Handler`]): appends now, in the connection's
/// request order; the future only waits for the flush.
pub(crate) fn handle(cx: &RequestContext, request: Request) -> Handling {
    let held = Charge::new(&cx.connection.budgets);
    let window = (&cx.connection.produce_window, held);
    start(&cx.broker, request, window, &cx.access)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::ApiKey;
    use kafka_protocol::records::Compression;

    use super::*;
    use crate::auth::acl::ResourceType::Topic;
    use crate::auth::authorizer::Access;
    use crate::log::batch::tests::{encoded_batch, raw_batch, stamped_batch, RawHeader};
    use crate::log::batch::{validate_batches, BATCH_HEADER_LEN};
    use crate::protocol::header::testing::{read_response, request};
    use crate::protocol::topic_name;
    use crate::server::budget::{Budgets, ByteBudget};
    use crate::server::handlers::testing::{alice, allow, broker_with, open};

    /// A charge to budgets without limits.
    fn uncharged() -> Charge {
        let broker = Arc::new(ByteBudget::new(usize::MAX));
        Charge::new(&Budgets::new(usize::MAX, broker))
    }

    /// Sends 3 records with `acks` and `timeout_ms`; asserts that they stay charged to the
    /// budgets after the reply until they are durable. The reply.
    async fn stays_charged_until_durable(acks: i16, timeout_ms: i32) -> Reply {
        let t = broker_with(&["t"], 1, 0).await;
        let broker_budget = Arc::new(ByteBudget::new(1 << 30));
        let held = Charge::new(&Budgets::new(1 << 30, broker_budget.clone()));
        let records = encoded_batch(3, 10, Compression::None);
        let data = PartitionProduceData::default()
            .with_index(0)
            .with_records(Some(records.clone()));
        let body = ProduceRequest::default()
            .with_acks(acks)
            .with_timeout_ms(timeout_ms)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(topic_name("t"))
                .with_partition_data(vec![data])]);
        let window = Arc::new(ProduceWindow::default());
        let asked = request(ApiKey::Produce, 9, &body);
        let reply = start(&t.broker, asked, (&window, held), &open()).await;
        assert_eq!(
            broker_budget.used(),
            records.len(),
            "released before the flush"
        );
        let partition = t.broker.topic("t").unwrap().partitions[0].current();
        let released = async {
            while broker_budget.used() > 0 {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(10), released)
            .await
            .expect("the charge outlived the flush");
        assert_eq!(partition.high_watermark(), 3);
        reply
    }

    #[tokio::test]
    async fn records_answered_before_their_flush_stay_charged_until_it() {
        let unanswered = stays_charged_until_durable(0, 10_000).await;
        assert!(matches!(unanswered, Reply::None));
        let Reply::Response(frame) = stays_charged_until_durable(-1, 0).await else {
            panic!("no response");
        };
        let (_, response): (_, ProduceResponse) = read_response(frame, 9);
        let answer = &response.responses[0].partition_responses[0];
        assert_eq!(answer.error_code, ResponseError::RequestTimedOut.code());
    }

    /// (topic, error, base offset) of each partition answered for `records` to partition 0 of
    /// each topic, in one request.
    async fn produce(
        broker: &Arc<Broker>,
        topics: &[&str],
        records: &Bytes,
        access: &Access,
    ) -> Vec<(String, i16, i64)> {
        let data = topics.iter().map(|t| {
            TopicProduceData::default()
                .with_name(topic_name(t))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(records.clone()))])
        });
        let body = ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(10_000)
            .with_topic_data(data.collect());
        let window = Arc::new(ProduceWindow::default());
        let asked = request(ApiKey::Produce, 9, &body);
        let Reply::Response(frame) = start(broker, asked, (&window, uncharged()), access).await
        else {
            panic!("no response");
        };
        let (_, response): (_, ProduceResponse) = read_response(frame, 9);
        let answers = response.responses.iter().flat_map(|t| {
            t.partition_responses
                .iter()
                .map(|p| (t.name.to_string(), p.error_code, p.base_offset))
        });
        answers.collect()
    }

    #[tokio::test]
    async fn a_topic_without_write_gets_nothing_appended_and_the_others_go_on() {
        let t = broker_with(&["t", "u"], 1, 0).await;
        let denied = ResponseError::TopicAuthorizationFailed.code();
        let writer = alice(vec![allow(Topic, "t", Operation::Write)]);
        let three = encoded_batch(3, 10, Compression::None);
        assert_eq!(
            produce(&t.broker, &["u", "t", "missing"], &three, &writer).await,
            [
                ("u".to_string(), denied, -1),
                ("t".to_string(), 0, 0),
                // not revealed to be missing
                ("missing".to_string(), denied, -1),
            ]
        );
        // Nothing of "u" was appended: the next records start at offset 0.
        let answered = produce(&t.broker, &["u", "t"], &three, &open()).await;
        assert_eq!(answered, [("u".to_string(), 0, 0), ("t".to_string(), 0, 3)]);
    }

    /// A batch whose max timestamp is not its records' largest (librdkafka sends such) is
    /// stored with the largest, as Kafka stores it, under the CRC of its new bytes.
    #[tokio::test]
    async fn a_batch_is_stored_with_its_records_largest_timestamp() {
        let t = broker_with(&["t"], 1, 0).await;
        let now = crate::log::partition::now_ms();
        let records = stamped_batch(&[now - 10, now, now - 5]);
        let lying = RawHeader {
            attributes: 0,
            count: 3,
            base_timestamp: now - 10,
            max_timestamp: 0,
            producer_id: -1,
        };
        let sent = raw_batch(&lying, &records[BATCH_HEADER_LEN..]);
        let answered = produce(&t.broker, &["t"], &sent, &open()).await;
        assert_eq!(answered, [("t".to_string(), 0, 0)]);
        let p = t.broker.topic("t").unwrap().partitions[0].current();
        let read = crate::log::reader::read(&t.broker.log, &p, 0, 1 << 20, true);
        let read = Bytes::from(read.await.unwrap().records.concat());
        // read back as a batch: the CRC is checked
        let stored = validate_batches(&read, 1 << 20).unwrap();
        assert_eq!(stored[0].header.max_timestamp, now);
        assert_eq!(read[BATCH_HEADER_LEN..], records[BATCH_HEADER_LEN..]);
    }

    /// Partition 0 of `t` gets one large batch, partitions 1..=`smalls` a small one each, in
    /// one request; where partition 0's batch body lies, and the request's bytes.
    async fn large_batch_among(t: &Arc<Broker>, smalls: i32) -> (Bytes, Bytes) {
        let data = (0..=smalls).map(|index| {
            let records =
                encoded_batch(if index == 0 { 1000 } else { 100 }, 100, Compression::None);
            PartitionProduceData::default()
                .with_index(index)
                .with_records(Some(records))
        });
        let topic = TopicProduceData::default()
            .with_name(topic_name("t"))
            .with_partition_data(data.collect());
        let body = ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(10_000)
            .with_topic_data(vec![topic]);
        let asked = request(ApiKey::Produce, 9, &body);
        let sent = asked.body.clone();
        let window = Arc::new(ProduceWindow::default());
        let Reply::Response(_) = start(t, asked, (&window, uncharged()), &open()).await else {
            panic!("no response");
        };
        let p = t.topic("t").unwrap().partitions[0].current();
        let read = crate::log::reader::read(&t.log, &p, 0, 1 << 20, true);
        let read = read.await.unwrap();
        (read.records.last().unwrap().clone(), sent)
    }

    #[tokio::test]
    async fn a_large_batch_stays_a_slice_of_the_request_only_where_it_is_most_of_it() {
        let t = broker_with(&["t"], 41, 0).await;
        let within =
            |body: &Bytes, request: &Bytes| request.as_ptr_range().contains(&body.as_ptr());
        let (body, request) = large_batch_among(&t.broker, 1).await;
        assert!(
            within(&body, &request),
            "copied although most of the request"
        );
        let (body, request) = large_batch_among(&t.broker, 40).await;
        assert!(
            !within(&body, &request),
            "keeps a request of small batches alive"
        );
    }
}
