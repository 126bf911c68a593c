//! The write-ahead object: a 24-byte header, then one run of record batches per partition,
//! back to back. Its manifest (`meta::wal`) says where each run lies; the batches are stored
//! exactly as a `.kfs` segment later holds them (final offsets and leader epoch).
//!
//! Header: `KWAL` | version u16 = 1 | flags u16 = 0 | created unix-ms i64 | broker id i32 |
//! reserved u32 = 0. All integers big-endian.

use bytes::{BufMut, Bytes, BytesMut};

use super::super::segment::StoredBatch;

pub(crate) const WAL_MAGIC: &[u8; 4] = b"KWAL";
pub(crate) const WAL_VERSION: u16 = 1;
pub(crate) const WAL_HEADER_LEN: usize = 24;

/// Where one run landed in the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Placement {
    pub position: u64,
    pub length: u64,
}

/// Builds the object from the runs in order; returns it and where each run lies. The batches
/// are copied once: the same bytes are uploaded and cached (as slices of the object).
pub(crate) fn build_wal_object<'a>(
    created_ms: i64,
    broker: i32,
    runs: impl Iterator<Item = &'a [StoredBatch]> + Clone,
) -> (Bytes, Vec<Placement>) {
    let size: usize = runs
        .clone()
        .flat_map(|run| run.iter().map(StoredBatch::size))
        .sum();
    let mut object = BytesMut::with_capacity(WAL_HEADER_LEN + size);
    object.put_slice(WAL_MAGIC);
    object.put_u16(WAL_VERSION);
    object.put_u16(0);
    object.put_i64(created_ms);
    object.put_i32(broker);
    object.put_u32(0);
    let mut placements = Vec::new();
    for run in runs {
        let position = object.len() as u64;
        for batch in run {
            object.put_slice(&batch.prefix);
            object.put_slice(&batch.body);
        }
        placements.push(Placement {
            position,
            length: object.len() as u64 - position,
        });
    }
    (object.freeze(), placements)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::segment::tests::stored;
    use crate::log::segment::BatchWalker;

    #[test]
    fn runs_are_placed_back_to_back_after_the_header() {
        let first = vec![stored(0, 2), stored(2, 3)];
        let second = vec![stored(40, 1)];
        let runs = [first.as_slice(), second.as_slice()];
        let (object, placements) = build_wal_object(9, 7, runs.iter().copied());
        assert_eq!(&object[0..8], b"KWAL\x00\x01\x00\x00");
        assert_eq!(&object[8..16], &9i64.to_be_bytes());
        assert_eq!(&object[16..20], &7i32.to_be_bytes());
        assert_eq!(placements[0].position, WAL_HEADER_LEN as u64);
        assert_eq!(
            placements[1].position,
            placements[0].position + placements[0].length
        );
        assert_eq!(
            object.len() as u64,
            placements[1].position + placements[1].length
        );
        let run = &object[placements[0].position as usize..][..placements[0].length as usize];
        let offsets: Vec<i64> = BatchWalker::new(run)
            .map(|b| b.unwrap().1.base_offset)
            .collect();
        assert_eq!(offsets, vec![0, 2]);
    }
}
