//! Leader and follower: a partition log is writable while this broker owns it; otherwise it is
//! a read-only follower that takes in what the owner committed.

use kafka_protocol::ResponseError;

use super::Partition;
use crate::log::{committed_segments, LogContext};
use crate::meta::catalog::{PartitionRecord, VersionedPartition};

impl Partition {
    /// True while this broker owns the partition and takes writes for it.
    pub fn is_leader(&self) -> bool {
        let state = self.state();
        state.committed.owner_revision != 0 && state.closed.is_none()
    }

    /// The committed state this broker owns the partition under (None on a follower).
    pub fn owned(&self) -> Option<VersionedPartition> {
        let state = self.state();
        (state.committed.owner_revision != 0).then(|| state.committed.clone())
    }

    /// The committed partition record as this broker has it, and its store revision.
    pub fn committed_record(&self) -> (PartitionRecord, i64) {
        let state = self.state();
        (state.committed.record.clone(), state.committed.revision)
    }

    /// A read-only copy for after this broker gave the partition up: same committed state
    /// and segments, no owner key.
    pub fn to_follower(&self) -> Partition {
        let state = self.state();
        let mut committed = state.committed.clone();
        committed.owner_revision = 0;
        Partition::new(
            self.topic.clone(),
            self.topic_id,
            self.id,
            self.limits.clone(),
            committed,
            state.segments.clone(),
        )
    }

    /// A follower takes in what the owner committed (as the metadata store reports it).
    pub fn follow(&self, record: &PartitionRecord, revision: i64) {
        let high_watermark = {
            let mut state = self.state();
            if state.committed.owner_revision != 0 || revision <= state.committed.revision {
                return;
            }
            state.committed.record = record.clone();
            state.committed.revision = revision;
            state.next_offset = record.high_watermark;
            let log_start = record.log_start_offset;
            state.segments.retain(|s| s.last_offset >= log_start);
            record.high_watermark
        };
        self.high_watermark.send_replace(high_watermark);
    }

    /// A follower's segment list trails the owner's commits: list the partition's objects
    /// again when the committed end lies beyond the last segment it knows.
    pub async fn sync_segments(&self, ctx: &LogContext) -> Result<(), ResponseError> {
        let (known_end, record) = {
            let state = self.state();
            if state.committed.owner_revision != 0 {
                return Ok(());
            }
            let end = state.segments.last().map_or(-1, |s| s.last_offset);
            (end, state.committed.record.clone())
        };
        if known_end + 1 >= record.high_watermark {
            return Ok(());
        }
        let listed = ctx
            .store
            .list_partition(&self.topic, self.id)
            .await
            .map_err(|_| ResponseError::KafkaStorageError)?;
        let segments = committed_segments(&listed, &record);
        let mut state = self.state();
        if state.committed.record.high_watermark == record.high_watermark {
            state.segments = segments;
        }
        Ok(())
    }
}
