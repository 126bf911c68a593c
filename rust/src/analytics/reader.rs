//! A topic's segments as object storage holds them: listing, end offsets, and the offset of a
//! timestamp. Reads never go through a broker.

use std::sync::Arc;

use super::error::ReadError;
use super::records::first_offset_at_or_after;
use super::scan::{fetch_segment, BatchCursor, SegmentRef};
use crate::log::segment::{FOOTER_MAGIC, SEGMENT_FOOTER_LEN};
use crate::store::{SegmentObject, SegmentStore};

pub struct TopicReader {
    store: Arc<SegmentStore>,
    /// Largest size one Kafka batch's records may decompress to: a segment holding a bigger
    /// batch (a decompression bomb) fails the read instead of allocating.
    max_uncompressed: usize,
}

impl TopicReader {
    pub fn new(store: SegmentStore, max_uncompressed: usize) -> TopicReader {
        TopicReader {
            store: Arc::new(store),
            max_uncompressed,
        }
    }

    pub fn max_uncompressed(&self) -> usize {
        self.max_uncompressed
    }

    pub fn store(&self) -> &Arc<SegmentStore> {
        &self.store
    }

    /// Topics with at least one object (the write-ahead folder is no topic's).
    pub async fn topics(&self) -> Result<Vec<String>, ReadError> {
        let mut folders = self.store.list_folders("").await?;
        folders.retain(|f| f != crate::store::WAL_FOLDER);
        Ok(folders)
    }

    pub async fn partitions(&self, topic: &str) -> Result<Vec<i32>, ReadError> {
        let folders = self.store.list_folders(topic).await?;
        let mut ids: Vec<i32> = folders.iter().filter_map(|f| f.parse().ok()).collect();
        ids.sort_unstable();
        Ok(ids)
    }

    /// The partition's segments in offset order. Each ends where the next begins; the last
    /// one's end comes from its footer (one 16-byte ranged read).
    pub async fn segments(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<Vec<SegmentRef>, ReadError> {
        let listed = self.store.list_partition(topic, partition).await?;
        let indexed: std::collections::HashSet<i64> = listed
            .iter()
            .filter(|s| s.kind == SegmentObject::Index)
            .map(|s| s.base_offset)
            .collect();
        let data: Vec<_> = listed
            .iter()
            .filter(|s| s.kind == SegmentObject::Data)
            .collect();
        let mut segments = Vec::with_capacity(data.len());
        for (i, listed) in data.iter().enumerate() {
            let end_offset = match data.get(i + 1) {
                Some(next) => next.base_offset,
                None => {
                    self.footer_end(topic, partition, listed.base_offset, listed.size)
                        .await?
                }
            };
            segments.push(SegmentRef {
                base_offset: listed.base_offset,
                end_offset,
                size: listed.size,
                has_index: indexed.contains(&listed.base_offset),
            });
        }
        Ok(segments)
    }

    async fn footer_end(
        &self,
        topic: &str,
        partition: i32,
        base: i64,
        size: u64,
    ) -> Result<i64, ReadError> {
        let path = self
            .store
            .segment_path(topic, partition, base, SegmentObject::Data);
        let corrupt = |reason: &str| ReadError::corrupt(path.as_ref(), base, reason);
        if size < SEGMENT_FOOTER_LEN as u64 {
            return Err(corrupt("the object is shorter than a segment footer"));
        }
        let footer = self.store.get_range(&path, size - 16..size).await?;
        if &footer[12..16] != FOOTER_MAGIC {
            return Err(corrupt(
                "the footer does not end in END! (truncated upload?)",
            ));
        }
        Ok(i64::from_be_bytes(footer[4..12].try_into().unwrap()) + 1)
    }

    /// The first offset whose record timestamp is at or after `timestamp` (what ListOffsets
    /// answers for a timestamp); `None` when every record is older. Batch headers carry each
    /// batch's max timestamp, so only the matching batch is decompressed.
    pub async fn offset_for_timestamp(
        &self,
        topic: &str,
        partition: i32,
        timestamp: i64,
    ) -> Result<Option<i64>, ReadError> {
        let mut scratch = Vec::new();
        for segment in self.segments(topic, partition).await? {
            let wanted = segment.base_offset..segment.end_offset;
            let fetched = fetch_segment(&self.store, topic, partition, &segment, &wanted).await?;
            let mut cursor = BatchCursor::new(fetched, self.max_uncompressed);
            while let Some(batch) = cursor.next_batch()? {
                if batch.header.max_timestamp < timestamp {
                    continue;
                }
                let records = cursor.records_of(&batch, &mut scratch)?;
                let found = first_offset_at_or_after(&batch.header, records, timestamp)
                    .map_err(|reason| cursor.corrupt_at(&batch, &reason))?;
                if found.is_some() {
                    return Ok(found);
                }
            }
        }
        Ok(None)
    }
}
