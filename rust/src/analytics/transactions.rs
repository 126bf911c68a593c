//! What a read_committed reader outside the brokers may see of a partition: its last stable
//! offset and its aborted transactions, worked out as a new owner does (`log::producers`):
//! from the producer snapshot the partition record names (the state of the log below its end,
//! aborted transactions included) and the committed runs after it that hold a transaction's
//! batches or markers (their manifests say which). A partition without either has no
//! transaction: nothing is read for it.

use bytes::Bytes;

use super::error::ReadError;
use super::metadata::RunRef;
use crate::log::batch::BatchHeader;
use crate::log::producers::{replay_batch, AbortedTxn, ProducerSnapshot, ProducerStates};
use crate::log::segment::BatchWalker;
use crate::meta::catalog::PartitionRecord;
use crate::store::{SegmentObject, SegmentStore, StoreError};

/// A partition's transactions as a read_committed reader needs them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Committed {
    /// Where the oldest transaction still open began, if one is: nothing from it on is read.
    pub first_unstable: Option<i64>,
    pub aborted: Vec<AbortedTxn>,
}

impl Committed {
    /// Whether the batch of `header` belongs to an aborted transaction (a producer has one
    /// transaction at a time in a partition: its batches from the transaction's first offset
    /// to its abort marker).
    pub(crate) fn aborted(&self, header: &BatchHeader) -> bool {
        header.attributes & crate::log::batch::TRANSACTIONAL != 0
            && self.aborted.iter().any(|a| {
                a.producer_id == header.producer_id
                    && (a.first_offset..=a.last_offset).contains(&header.base_offset)
            })
    }
}

/// Whether the partition may hold transactions: a producer snapshot, or a run that says so.
pub(crate) fn may_hold_transactions(record: &PartitionRecord, runs: &[RunRef]) -> bool {
    record.producer_snapshot.is_some() || runs.iter().any(|r| r.transactional)
}

/// The partition's transactions, from its snapshot and the transactional runs of `runs` (the
/// committed runs after its segments). A run whose object is gone (compacted meanwhile) is
/// `ReadError::Moved`: the reader takes the log again.
pub(crate) async fn committed(
    store: &SegmentStore,
    (topic, partition): (&str, i32),
    record: &PartitionRecord,
    runs: &[RunRef],
) -> Result<Committed, ReadError> {
    let (mut producers, mut aborted, from) = match record.producer_snapshot {
        Some(end) => {
            let path = store.segment_path(topic, partition, end, SegmentObject::ProducerSnapshot);
            let bytes = store
                .get(&path)
                .await
                .map_err(|e| moved(e, topic, partition))?;
            let snapshot: ProducerSnapshot = serde_json::from_slice(&bytes).map_err(|e| {
                ReadError::corrupt(path.as_ref(), end, &format!("not a producer snapshot: {e}"))
            })?;
            (snapshot.producers, snapshot.aborted, snapshot.end)
        }
        None => (
            ProducerStates::default(),
            Vec::new(),
            record.log_start_offset,
        ),
    };
    for run in runs
        .iter()
        .filter(|r| r.transactional && r.end_offset > from)
    {
        let path = object_store::path::Path::from(run.object.as_str());
        let area = store
            .get_range(&path, run.position..run.position + run.length)
            .await
            .map_err(|e| moved(e, topic, partition))?;
        for walked in BatchWalker::new(&area) {
            let (at, header) = walked
                .map_err(|e| ReadError::corrupt(&run.object, run.base_offset, &e.to_string()))?;
            if header.base_offset < from {
                continue;
            }
            let bytes = || Bytes::copy_from_slice(&area[at..at + header.size]);
            replay_batch(&mut producers, &mut aborted, &header, bytes, 0);
        }
    }
    aborted.retain(|a| a.last_offset >= record.log_start_offset);
    Ok(Committed {
        first_unstable: producers.first_unstable(),
        aborted,
    })
}

fn moved(error: StoreError, topic: &str, partition: i32) -> ReadError {
    match error {
        StoreError::NotFound(_) => ReadError::Moved {
            topic: topic.to_string(),
            partition,
        },
        e => e.into(),
    }
}
