//! A broker that does not own a partition answers reads of it (Fetch, ListOffsets latest,
//! OffsetForLeaderEpoch) from its view, which the metadata watch brings a moment after each
//! commit. Before such an answer the broker catches up with the store: its view then holds
//! every write-ahead commit acknowledged before the request came, so the end it answers is no
//! lower than any owner answered before (a consumer moving between brokers while a partition
//! changes hands is never told a lower high watermark, nor OFFSET_OUT_OF_RANGE for an offset
//! it was given).
//!
//! How: every commit also writes its broker's writer key (`meta::wal`), so the writer keys, a
//! few small keys, tell how far the commits have come. One read of them at revision R, then
//! wait until the mirror has each key at its read revision or later and has seen the deletion
//! of every key it holds from before R that the read no longer has (a broker that left: its
//! last commit came before its key went). Then one ownership pass applies what the mirror
//! holds to the followers. Requests waiting at once share one catch-up that began after they
//! came. A catch-up that cannot finish within `CATCH_UP_WAIT` (the store unreachable) leaves
//! the view as it is, and the next ones are skipped for `REST_AFTER_FAILURE`: reads go on
//! from the view through a store outage, when nothing new commits anyway.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::broker::Broker;
use crate::meta::kv::{KeyValue, Listing, MetaError};

/// How long a read waits for its view to catch up before it answers from the view as it is.
const CATCH_UP_WAIT: Duration = Duration::from_secs(1);
/// After a catch-up failed, how long reads answer from the view without trying again.
const REST_AFTER_FAILURE: Duration = Duration::from_secs(5);

/// Catch-ups begun and finished, numbered, one at a time.
#[derive(Default)]
pub(crate) struct ReadBarrier {
    one_at_a_time: tokio::sync::Mutex<()>,
    begun: AtomicU64,
    finished: AtomicU64,
    resting_until: Mutex<Option<Instant>>,
}

impl ReadBarrier {
    fn resting(&self) -> bool {
        let until = *self.resting_until.lock().unwrap_or_else(|p| p.into_inner());
        until.is_some_and(|until| Instant::now() < until)
    }

    fn rest(&self) {
        *self.resting_until.lock().unwrap_or_else(|p| p.into_inner()) =
            Some(Instant::now() + REST_AFTER_FAILURE);
    }
}

impl Broker {
    /// Returns once this broker's followers hold every write-ahead commit acknowledged before
    /// the call (or after `CATCH_UP_WAIT`, the store not answering).
    pub(crate) async fn catch_up_with_commits(self: &Arc<Self>) {
        let barrier = &self.ownership.barrier;
        if barrier.resting() {
            return;
        }
        // A catch-up under way may have read the store before this call: the next one.
        let wanted = barrier.begun.load(Ordering::Acquire) + 1;
        let _turn = barrier.one_at_a_time.lock().await;
        if barrier.finished.load(Ordering::Acquire) >= wanted {
            return;
        }
        let number = barrier.begun.fetch_add(1, Ordering::AcqRel) + 1;
        match tokio::time::timeout(CATCH_UP_WAIT, self.hold_every_commit()).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                tracing::warn!(%error, "answering reads of partitions owned elsewhere from \
                    this broker's view: the metadata store cannot be read");
                barrier.rest();
            }
            Err(_) => {
                tracing::warn!(
                    "answering reads of partitions owned elsewhere from this \
                    broker's view: it did not catch up with the metadata store within {} s",
                    CATCH_UP_WAIT.as_secs()
                );
                barrier.rest();
            }
        }
        barrier.finished.store(number, Ordering::Release);
    }

    async fn hold_every_commit(self: &Arc<Self>) -> Result<(), MetaError> {
        let prefix = self.log.catalog.writers_prefix();
        let read = self.log.catalog.kv().range(&prefix).await?;
        let mut reached = self.mirror.reached();
        loop {
            let revision = *reached.borrow_and_update();
            if mirror_holds(&read, &self.mirror.range(&prefix), revision) {
                break;
            }
            if reached.changed().await.is_err() {
                return Err(MetaError::Unavailable("the metadata mirror stopped".into()));
            }
        }
        self.reconcile().await;
        Ok(())
    }
}

/// Whether a mirror at `reached`, holding `mirrored` under the writer keys, has every commit
/// the store had when it answered `read` with those keys.
fn mirror_holds(read: &Listing, mirrored: &[KeyValue], reached: i64) -> bool {
    let newest = read.kvs.iter().map(|kv| kv.mod_revision).max().unwrap_or(0);
    let gone_since = |kv: &&KeyValue| {
        kv.mod_revision <= read.revision && !read.kvs.iter().any(|r| r.key == kv.key)
    };
    reached >= newest && !mirrored.iter().any(|kv| gone_since(&kv))
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    use kafka_protocol::messages::{ApiKey, BrokerId, ListOffsetsRequest, ListOffsetsResponse};
    use kafka_protocol::ResponseError;

    use super::*;
    use crate::broker::tests::{faulty_broker, produce};
    use crate::meta::kv::{KvStore, Op};
    use crate::meta::wal::{encode_manifest, TopicRuns, WalManifest, WalRun};
    use crate::protocol::header::testing::{read_response, request};
    use crate::protocol::topic_name;
    use crate::server::handlers::list_offsets;
    use crate::server::handlers::testing::open;

    /// The latest offset of partition 0 of "t" as ListOffsets answers it.
    async fn latest(broker: &Arc<Broker>) -> i64 {
        let partition = ListOffsetsPartition::default()
            .with_timestamp(-1)
            .with_current_leader_epoch(-1);
        let topic = ListOffsetsTopic::default()
            .with_name(topic_name("t"))
            .with_partitions(vec![partition]);
        let body = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![topic]);
        let asked = request(ApiKey::ListOffsets, 7, &body);
        let frame = list_offsets::answer(broker, asked, &open()).await.unwrap();
        let (_, answer): (_, ListOffsetsResponse) = read_response(frame, 7);
        answer.topics[0].partitions[0].offset
    }

    #[tokio::test]
    async fn a_follower_answers_with_every_commit_made_before_the_request() {
        let (t, kv) = faulty_broker(1 << 20).await;
        let b = &t.broker;
        b.create_topic("t", 1, Default::default()).await.unwrap();
        produce(b, "t", 0, 5).await;
        // This broker hands partition 0 off (the pass stays away from it meanwhile) ...
        let slot = b.topic("t").unwrap().partitions[0].clone();
        assert!(slot.begin_change());
        let owned = slot.current();
        owned.close(ResponseError::NotLeaderOrFollower);
        slot.replace(owned.to_follower(5));
        // ... and broker 2, its new owner, commits offsets 5..=7, which this broker's watch
        // has not brought yet.
        kv.pause_watches();
        let runs = vec![WalRun {
            partition: 0,
            leader_epoch: owned.leader_epoch() + 1,
            base_offset: 5,
            last_offset: 7,
            position: 0,
            length: 100,
            max_timestamp: 0,
        }];
        let manifest = WalManifest {
            object: "elsewhere".into(),
            broker: 2,
            created_ms: 1,
            size: 100,
            topics: vec![TopicRuns {
                topic: "t".into(),
                id: owned.topic_id,
                runs,
                transactional: Vec::new(),
            }],
        };
        let catalog = &b.log.catalog;
        let commit = vec![
            Op::Put(format!("{}2", catalog.writers_prefix()), "2".into()),
            Op::Put(catalog.manifest_key(2, "1-1"), encode_manifest(&manifest)),
        ];
        kv.txn(vec![], commit).await.unwrap().unwrap();
        assert_eq!(slot.current().high_watermark(), 5, "the watch is held back");

        // The watch goes on once the broker has asked the store how far commits have come.
        let resumed = tokio::spawn({
            let kv = kv.clone();
            async move {
                kv.listed("/writers/").await;
                kv.resume_watches();
            }
        });
        assert_eq!(latest(b).await, 8);
        resumed.await.unwrap();
    }

    fn key(name: &str, mod_revision: i64) -> KeyValue {
        KeyValue {
            key: format!("/c/writers/{name}"),
            value: bytes::Bytes::new(),
            mod_revision,
        }
    }

    #[test]
    fn the_mirror_holds_the_commits_once_it_reached_each_writer_key() {
        let read = Listing {
            kvs: vec![key("1", 10), key("2", 14)],
            revision: 20,
        };
        let behind = [key("1", 10), key("2", 12)];
        assert!(!mirror_holds(&read, &behind, 13));
        let caught_up = [key("1", 10), key("2", 14)];
        assert!(mirror_holds(&read, &caught_up, 14));
        // a later commit than the read's is no reason to wait
        assert!(mirror_holds(&read, &[key("1", 10), key("2", 25)], 25));
    }

    #[test]
    fn a_broker_that_left_is_waited_for_until_its_key_is_gone_from_the_mirror() {
        // broker 3 committed at 18 and left at 19; the read at 20 no longer has its key
        let read = Listing {
            kvs: vec![key("1", 10)],
            revision: 20,
        };
        assert!(!mirror_holds(&read, &[key("1", 10), key("3", 15)], 16));
        assert!(mirror_holds(&read, &[key("1", 10)], 19));
        // a broker that joined after the read is not waited for
        assert!(mirror_holds(&read, &[key("1", 10), key("4", 21)], 21));
    }
}
