//! The sparse `.index` object: offset → byte position of a batch start in the `.kfs` object.
//!
//! Header (16 B): `IDX\0` | version u16 = 1 | entry count i32 | interval i32 | reserved u16,
//! then entries of offset i64 + position i32. One entry for the first batch, then one at the
//! next batch start after `interval` messages have passed since the last entry.

use bytes::{BufMut, Bytes, BytesMut};

pub(crate) const INDEX_MAGIC: &[u8; 4] = b"IDX\0";
pub(crate) const INDEX_VERSION: u16 = 1;
pub(crate) const INDEX_HEADER_LEN: usize = 16;
pub(crate) const INDEX_ENTRY_LEN: usize = 12;
pub(crate) const DEFAULT_INDEX_INTERVAL: i32 = 100;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IndexEntry {
    pub offset: i64,
    pub position: u32,
}

/// Collects entries while a segment is assembled, batch by batch.
#[derive(Debug)]
pub(crate) struct IndexBuilder {
    interval: i32,
    entries: Vec<IndexEntry>,
    messages_since_entry: i64,
}

impl IndexBuilder {
    pub(crate) fn new(interval: i32) -> IndexBuilder {
        IndexBuilder {
            interval,
            entries: Vec::new(),
            messages_since_entry: 0,
        }
    }

    /// Called for every batch in order with its base offset, start position and message count.
    pub(crate) fn add_batch(&mut self, offset: i64, position: u32, messages: i64) {
        if self.entries.is_empty() || self.messages_since_entry >= self.interval as i64 {
            self.entries.push(IndexEntry { offset, position });
            self.messages_since_entry = 0;
        }
        self.messages_since_entry += messages;
    }

    pub(crate) fn encode(&self) -> Bytes {
        let mut buf =
            BytesMut::with_capacity(INDEX_HEADER_LEN + self.entries.len() * INDEX_ENTRY_LEN);
        buf.put_slice(INDEX_MAGIC);
        buf.put_u16(INDEX_VERSION);
        buf.put_i32(self.entries.len() as i32);
        buf.put_i32(self.interval);
        buf.put_u16(0);
        for entry in &self.entries {
            buf.put_i64(entry.offset);
            buf.put_u32(entry.position);
        }
        buf.freeze()
    }
}

/// A parsed index, used to turn an offset into a byte position for ranged reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SparseIndex {
    pub interval: i32,
    pub entries: Vec<IndexEntry>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum IndexError {
    #[error("index shorter than its 16-byte header")]
    Truncated,
    #[error("index magic is not IDX\\0")]
    BadMagic,
    #[error("unsupported index version {0}")]
    BadVersion(u16),
    #[error("index declares {declared} entr{} but holds {present}", if *declared == 1 { "y" } else { "ies" })]
    EntryCount { declared: i32, present: usize },
}

impl SparseIndex {
    pub(crate) fn parse(buf: &[u8]) -> Result<SparseIndex, IndexError> {
        if buf.len() < INDEX_HEADER_LEN {
            return Err(IndexError::Truncated);
        }
        if &buf[0..4] != INDEX_MAGIC {
            return Err(IndexError::BadMagic);
        }
        let version = u16::from_be_bytes([buf[4], buf[5]]);
        if version != INDEX_VERSION {
            return Err(IndexError::BadVersion(version));
        }
        let count = i32::from_be_bytes(buf[6..10].try_into().unwrap());
        let interval = i32::from_be_bytes(buf[10..14].try_into().unwrap());
        let body = &buf[INDEX_HEADER_LEN..];
        if count < 0 || body.len() != count as usize * INDEX_ENTRY_LEN {
            return Err(IndexError::EntryCount {
                declared: count,
                present: body.len() / INDEX_ENTRY_LEN,
            });
        }
        let entries = body
            .chunks_exact(INDEX_ENTRY_LEN)
            .map(|e| IndexEntry {
                offset: i64::from_be_bytes(e[0..8].try_into().unwrap()),
                position: u32::from_be_bytes(e[8..12].try_into().unwrap()),
            })
            .collect();
        Ok(SparseIndex { interval, entries })
    }

    /// Position of the last indexed batch starting at or before `offset`: a batch holding
    /// `offset` starts there or later.
    pub(crate) fn position_for(&self, offset: i64) -> Option<u32> {
        self.entry_for(offset).map(|e| e.position)
    }

    /// The last entry at or before `offset`.
    pub(crate) fn entry_for(&self, offset: i64) -> Option<IndexEntry> {
        let after = self.entries.partition_point(|e| e.offset <= offset);
        after.checked_sub(1).map(|i| self.entries[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn entry_for_first_batch_then_every_interval_messages() {
        let mut builder = IndexBuilder::new(100);
        // batches of 60 messages: entries at batch 0, then after >= 100 messages (batch 2), ...
        for i in 0..6 {
            builder.add_batch(i * 60, 32 + i as u32 * 1000, 60);
        }
        let index = SparseIndex::parse(&builder.encode()).unwrap();
        let offsets: Vec<i64> = index.entries.iter().map(|e| e.offset).collect();
        assert_eq!(offsets, vec![0, 120, 240]);
        assert_eq!(index.interval, 100);
    }

    #[test]
    fn header_bytes_are_exact() {
        let mut builder = IndexBuilder::new(100);
        builder.add_batch(5, 32, 1);
        let bytes = builder.encode();
        assert_eq!(
            &bytes[..16],
            &[b'I', b'D', b'X', 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 100, 0, 0]
        );
        assert_eq!(&bytes[16..], &[0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 32]);
    }

    #[test]
    fn rejects_damaged_indexes() {
        assert_eq!(SparseIndex::parse(b"IDX"), Err(IndexError::Truncated));
        let mut builder = IndexBuilder::new(100);
        builder.add_batch(0, 32, 1);
        let mut bytes = builder.encode().to_vec();
        bytes.pop();
        assert!(matches!(
            SparseIndex::parse(&bytes),
            Err(IndexError::EntryCount { .. })
        ));
        bytes[0] = b'X';
        assert_eq!(SparseIndex::parse(&bytes), Err(IndexError::BadMagic));
    }

    proptest! {
        #[test]
        fn lookup_never_overshoots(sizes in proptest::collection::vec(1i64..250, 1..60), probe in 0i64..10_000) {
            let mut builder = IndexBuilder::new(100);
            let (mut offset, mut position) = (0i64, 32u32);
            let mut starts = Vec::new();
            for n in &sizes {
                builder.add_batch(offset, position, *n);
                starts.push((offset, position));
                offset += n;
                position += 100;
            }
            let index = SparseIndex::parse(&builder.encode()).unwrap();
            let probe = probe % offset;
            let pos = index.position_for(probe).unwrap();
            // the batch starting at `pos` begins at or before the probe
            let (start_offset, _) = starts.iter().find(|(_, p)| *p == pos).unwrap();
            prop_assert!(*start_offset <= probe);
            // gaps between entries are bounded by one interval plus one batch
            for pair in index.entries.windows(2) {
                prop_assert!(pair[1].offset - pair[0].offset < 100 + 250);
            }
        }
    }
}
