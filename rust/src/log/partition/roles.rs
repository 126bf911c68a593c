//! Leader and follower: a partition log is writable while this broker owns it; otherwise it is
//! a read-only follower that takes in what the owner committed.

use std::sync::Arc;

use kafka_protocol::ResponseError;

use super::Partition;
use crate::log::{committed_segments, LogContext};
use crate::meta::catalog::{PartitionRecord, VersionedPartition};
use crate::store::{ListedSegment, SegmentObject};

impl Partition {
    /// True while this broker owns the partition and takes writes for it.
    pub(crate) fn is_leader(&self) -> bool {
        let state = self.state();
        state.committed.owner_revision != 0 && state.closed.is_none()
    }

    /// The committed state this broker owns the partition under (None on a follower).
    pub(crate) fn owned(&self) -> Option<VersionedPartition> {
        let state = self.state();
        (state.committed.owner_revision != 0).then(|| state.committed.clone())
    }

    /// The metadata session this broker owns the partition in (0 on a follower).
    pub(crate) fn owner_session(&self) -> u64 {
        self.state().committed.session
    }

    /// The committed partition record as this broker has it, and its store revision.
    pub(crate) fn committed_record(&self) -> (PartitionRecord, i64) {
        let state = self.state();
        (state.committed.record.clone(), state.committed.revision)
    }

    /// A read-only copy for after this broker gave the partition up: same committed state
    /// and segments, no owner key, committed up to `committed_end` (what the write-ahead
    /// index knows) if that is further. A commit of this log whose outcome was still unknown
    /// reaches the copy when it is settled (`complete_flush`): its end never lies below what
    /// a reader of this log was shown.
    pub(crate) fn to_follower(&self, committed_end: i64) -> Arc<Partition> {
        let follower = {
            let state = self.state();
            let mut committed = state.committed.clone();
            committed.owner_revision = 0;
            committed.session = 0;
            Arc::new(Partition::new(
                self.topic.clone(),
                self.topic_id,
                self.id,
                self.limits.clone(),
                committed,
                self.high_watermark().max(committed_end),
                state.segments.clone(),
            ))
        };
        *self.successor.lock().unwrap_or_else(|p| p.into_inner()) = Arc::downgrade(&follower);
        follower
    }

    /// A follower takes in what the owner committed (as the metadata store reports it).
    pub(crate) fn follow(&self, record: &PartitionRecord, revision: i64) {
        {
            let mut state = self.state();
            if state.committed.owner_revision != 0 || revision <= state.committed.revision {
                return;
            }
            if state.committed.record.cleaned != record.cleaned {
                // A cleaning replaced segments: the list is made again when next needed.
                state.segments = None;
            }
            state.committed.record = record.clone();
            state.committed.revision = revision;
            let log_start = record.log_start_offset;
            if let Some(segments) = state.segments.as_mut() {
                segments.retain(|s| s.last_offset >= log_start);
            }
        }
        self.observe_end(record.high_watermark);
    }

    /// An owner learns of a newer record under its own owner key. Only the owner writes that
    /// record, so this is a change of its own (compaction, retention) whose answer was lost
    /// (etcd timed out or restarted, yet committed it). Taken as committed: otherwise every
    /// later change would be fenced by the record's revision, and once the write-ahead objects
    /// the change compacted are deleted, reads would miss the segments it added. The segment
    /// list is made again from a fresh listing (`list_owned`, which also removes a producer
    /// snapshot the record no longer names).
    pub(crate) async fn adopt_landed_record(&self, record: &PartitionRecord, revision: i64) {
        let _one_at_a_time = self.record_lock.lock().await;
        let mut state = self.state();
        let committed = &state.committed;
        if committed.owner_revision == 0 || revision <= committed.revision {
            return; // given up meanwhile, or its own commit was taken in meanwhile
        }
        tracing::warn!(topic = %self.topic, partition = self.id, revision,
            known = committed.revision, segment_end = record.segment_end(),
            "taking in a change of the partition record whose commit seemed to fail");
        state.producers.truncate_below(record.log_start_offset);
        state.committed.record = record.clone();
        state.committed.revision = revision;
        state.segments = None;
    }

    /// A follower learns that the log is committed up to `end` (a write-ahead manifest of its
    /// owner); an owner's end moves only with its own commits.
    pub(crate) fn observe_end(&self, end: i64) {
        let mut state = self.state();
        if state.committed.owner_revision != 0 {
            return;
        }
        state.next_offset = state.next_offset.max(end);
        drop(state);
        self.raise_high_watermark(end);
    }

    /// Lists the partition's objects when the segment list is behind. A follower's trails the
    /// owner's commits: it lists again when the committed end lies beyond the last segment it
    /// knows. An owner's is unknown until first needed (claims do not list; see `list_owned`).
    pub(crate) async fn sync_segments(&self, ctx: &LogContext) -> Result<(), ResponseError> {
        let behind = {
            let state = self.state();
            let owned = state.committed.owner_revision != 0;
            let known_end = match &state.segments {
                Some(_) if owned => return Ok(()),
                Some(segments) => segments.last().map_or(-1, |s| s.last_offset),
                None => -1,
            };
            let record = &state.committed.record;
            (owned || known_end + 1 < record.segment_end()).then(|| (owned, record.clone()))
        };
        let Some((owned, record)) = behind else {
            return Ok(());
        };
        if owned {
            return self.list_owned(ctx).await;
        }
        self.relist_segments(ctx, &record).await
    }

    /// Replaces the segment list with the committed segments storage holds for `record`,
    /// unless the segment end moved meanwhile (a newer list is then on its way). Deletes
    /// nothing, so it is safe for an owner too: a read that finds a hole in its view of the
    /// log calls it.
    pub(crate) async fn relist_segments(
        &self,
        ctx: &LogContext,
        record: &PartitionRecord,
    ) -> Result<(), ResponseError> {
        let listed = ctx
            .store
            .list_partition(&self.topic, self.id)
            .await
            .map_err(|_| ResponseError::KafkaStorageError)?;
        let segments = committed_segments(&listed, record);
        let mut state = self.state();
        if state.committed.record.segment_end() == record.segment_end() {
            state.segments = Some(segments);
        }
        Ok(())
    }

    /// Bytes the log occupies in object storage: its committed segments and the write-ahead
    /// runs above them (a run shared with other data counts whole).
    pub(crate) async fn stored_bytes(&self, ctx: &LogContext) -> Result<u64, ResponseError> {
        self.sync_segments(ctx).await?;
        let segments: u64 = self.segments().iter().map(|s| s.size).sum();
        let runs = ctx
            .wal
            .runs_from((self.topic_id, self.id), self.segment_end());
        Ok(segments + runs.iter().map(|r| r.run.length).sum::<u64>())
    }

    /// An owner's first listing, under the record lock so no compaction or retention moves
    /// the record meanwhile. Objects below the first kept segment are what retention dropped
    /// when a crash came before it deleted them, and producer snapshots other than the
    /// record's were replaced by a later one (or never committed): they go now. (Segment
    /// objects at or above the segment end are compaction's business, see
    /// `log::partition::compaction`.)
    async fn list_owned(&self, ctx: &LogContext) -> Result<(), ResponseError> {
        let _one_at_a_time = self.record_lock.lock().await;
        let record = {
            let state = self.state();
            if state.segments.is_some() {
                return Ok(());
            }
            state.committed.record.clone()
        };
        let listed = ctx
            .store
            .list_partition(&self.topic, self.id)
            .await
            .map_err(|error| {
                tracing::warn!(topic = %self.topic, partition = self.id, %error,
                    "listing the partition's segments failed");
                ResponseError::KafkaStorageError
            })?;
        let segments = committed_segments(&listed, &record);
        let first_kept = segments
            .first()
            .map_or(record.segment_end(), |s| s.base_offset);
        let stale = |o: &&ListedSegment| match o.kind {
            SegmentObject::ProducerSnapshot => Some(o.base_offset) != record.producer_snapshot,
            SegmentObject::Data | SegmentObject::Index => {
                o.base_offset < first_kept || superseded(o, &record)
            }
        };
        for object in listed.iter().filter(stale) {
            let (base, generation) = (object.base_offset, object.generation);
            let path = ctx
                .store
                .object_path(&self.topic, self.id, base, generation, object.kind);
            tracing::info!(object = %path, "removing an object the log no longer uses");
            if let Err(error) = ctx.store.delete(&path).await {
                tracing::warn!(object = %path, %error,
                    "removing an object the log no longer uses failed; the next owner retries");
            }
        }
        self.state().segments = Some(segments);
        Ok(())
    }
}

/// A segment object the cleaned part of the log does not use: a cleaning's of another
/// generation (superseded, or never committed), or compaction's below the cleaned end. (Above
/// it, compaction's objects are compaction's business.)
fn superseded(object: &ListedSegment, record: &PartitionRecord) -> bool {
    match (object.generation, record.cleaned) {
        (Some(generation), Some(cleaned)) => {
            generation != cleaned.generation || object.base_offset >= cleaned.end
        }
        (Some(_), None) => true,
        (None, Some(cleaned)) => object.base_offset < cleaned.end,
        (None, None) => false,
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::records::Compression;

    use crate::log::batch::tests::encoded_batch;
    use crate::log::batch::validate_batches;
    use crate::log::tests::{fixture, open};

    #[tokio::test]
    async fn a_commit_settled_after_the_log_was_given_up_reaches_its_successor() {
        let f = fixture(1 << 20).await;
        let owner = open(&f).await;
        let batch = encoded_batch(3, 100, Compression::None);
        let batches = validate_batches(&batch, 1 << 20).unwrap();
        let (ack, _) = owner.append(batches, true).unwrap().buffered();
        // taken by a flush whose commit's outcome is unknown when the log is given up
        let taken = owner.take_for_flush(usize::MAX).unwrap();
        let follower = owner.to_follower(0);
        assert_eq!(follower.high_watermark(), 0);
        let grown = follower.subscribe();
        // settled as landed: whoever is shown offset 3 on the old log finds it on the new one
        owner.complete_flush(taken.owed, 3);
        assert_eq!(ack.await.unwrap(), Ok(0));
        assert!(grown.has_changed().unwrap());
        assert_eq!(follower.high_watermark(), 3);
        assert!(follower.read_view(3).is_ok());
        // a follower starts at the committed end it is given when that is further
        assert_eq!(owner.to_follower(7).high_watermark(), 7);
    }
}
