//! Taking a cleaning of the log in (`log::cleaner`): its commit, fenced like every change of
//! the partition record, and the segment list it leaves.

use super::Partition;
use crate::log::segment::SegmentMeta;
use crate::log::LogContext;
use crate::meta::catalog::{CatalogError, CleanedLog, PartitionRecord};

impl Partition {
    /// Commits `cleaned` if the log below its end is still what the cleaning read (`read`, the
    /// record it started from: the same log start and cleaned part; compaction only adds
    /// segments above), and puts `segments` in place of those below `cleaned.end`. Returns the
    /// segments replaced, whose objects can go once readers are done with them; None when the
    /// log moved meanwhile or the partition was given up (nothing is committed then).
    pub(crate) async fn commit_cleaning(
        &self,
        ctx: &LogContext,
        read: &PartitionRecord,
        cleaned: CleanedLog,
        segments: Vec<SegmentMeta>,
    ) -> Result<Option<Vec<SegmentMeta>>, CatalogError> {
        let _one_at_a_time = self.record_lock.lock().await;
        let Some(current) = self.owned() else {
            return Ok(None);
        };
        let record = &current.record;
        if record.log_start_offset != read.log_start_offset || record.cleaned != read.cleaned {
            return Ok(None);
        }
        let next = ctx
            .catalog
            .commit_cleaning(&self.topic, self.id, &current, cleaned)
            .await?;
        let mut state = self.state();
        state.committed = next;
        let Some(list) = state.segments.as_mut() else {
            return Ok(Some(Vec::new())); // listed afresh, from the committed record, when needed
        };
        let below = list.partition_point(|s| s.base_offset < cleaned.end);
        Ok(Some(list.splice(..below, segments).collect()))
    }
}
