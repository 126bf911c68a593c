//! The write-ahead object: a 24-byte header, then one run of record batches per partition,
//! back to back. Its manifest (`meta::wal`) says where each run lies; the batches are stored
//! exactly as a `.kfs` segment later holds them (final offsets and leader epoch).
//!
//! Header: `KWAL` | version u16 = 1 | flags u16 = 0 | created unix-ms i64 | broker id i32 |
//! reserved u32 = 0. All integers big-endian.

use std::ops::Range;

use bytes::{BufMut, Bytes, BytesMut};

use super::super::batch::BatchHeader;
use super::super::segment::StoredBatch;
use crate::protocol::frame::OWN_BUFFER_FROM;

pub(crate) const WAL_MAGIC: &[u8; 4] = b"KWAL";
pub(crate) const WAL_VERSION: u16 = 1;
pub(crate) const WAL_HEADER_LEN: usize = 24;

/// Batches from this size on go into the object as the slices they are (their rewritten
/// prefix and the produce request's bytes); smaller ones are copied together, so that an
/// object of many small batches is not thousands of pieces (a local-dir store writes each
/// piece with a call of its own).
const SLICED_FROM: usize = 16 * 1024;

/// Whether the large batches of a produce request of `request_len` bytes should go on as
/// slices of it: a slice keeps the whole request in memory for as long as its run is cached,
/// so only where they make up at least half of it, and only where the request has a buffer
/// of its own (a smaller one shares its buffer with the requests around it; see
/// `protocol::frame`). Otherwise the caller copies them out.
pub(crate) fn slices_pay<'a>(records: impl Iterator<Item = &'a [u8]>, request_len: usize) -> bool {
    if request_len < OWN_BUFFER_FROM {
        return false;
    }
    let mut sliced = 0;
    for mut rest in records {
        while let Some(header) = BatchHeader::parse(rest) {
            if header.size > rest.len() {
                break;
            }
            if header.size >= SLICED_FROM {
                sliced += header.size;
            }
            rest = &rest[header.size..];
        }
    }
    2 * sliced >= request_len
}

/// Whether a batch of `size` bytes goes into the object as the slice it is.
pub(crate) fn sliced(size: usize) -> bool {
    size >= SLICED_FROM
}

/// Where one run landed in the object, and the pieces that hold it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Placement {
    pub position: u64,
    pub length: u64,
    pub pieces: Range<usize>,
}

/// Builds the object from the runs in order: its pieces (`log::pieces` describes how batches
/// lie in them) and where each run lies. Large batches are not copied: the same slices are
/// uploaded and cached.
pub(crate) fn build_wal_object<'a>(
    created_ms: i64,
    broker: i32,
    runs: impl Iterator<Item = &'a [StoredBatch]> + Clone,
) -> (Vec<Bytes>, Vec<Placement>) {
    let copied: usize = runs
        .clone()
        .flat_map(|run| run.iter().map(StoredBatch::size))
        .filter(|&size| size < SLICED_FROM)
        .sum();
    // One buffer for the header and every small batch; a piece is split off it (no copy)
    // wherever a run ends or a large batch comes between.
    let mut staging = BytesMut::with_capacity(WAL_HEADER_LEN + copied);
    staging.put_slice(WAL_MAGIC);
    staging.put_u16(WAL_VERSION);
    staging.put_u16(0);
    staging.put_i64(created_ms);
    staging.put_i32(broker);
    staging.put_u32(0);
    let mut pieces = vec![staging.split().freeze()];
    let mut placements = Vec::new();
    let mut position = WAL_HEADER_LEN as u64;
    for run in runs {
        let first_piece = pieces.len();
        let mut length = 0;
        for batch in run {
            length += batch.size() as u64;
            if !sliced(batch.size()) {
                batch.pieces().for_each(|piece| staging.put_slice(piece));
                continue;
            }
            if !staging.is_empty() {
                pieces.push(staging.split().freeze());
            }
            pieces.extend(batch.pieces().cloned());
        }
        if !staging.is_empty() {
            pieces.push(staging.split().freeze());
        }
        placements.push(Placement {
            position,
            length,
            pieces: first_piece..pieces.len(),
        });
        position += length;
    }
    (pieces, placements)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::pieces::PieceWalker;
    use crate::log::segment::tests::stored;

    #[test]
    fn runs_are_placed_back_to_back_after_the_header() {
        let first = vec![stored(0, 2), stored(2, 3)];
        let second = vec![stored(40, 1)];
        let runs = [first.as_slice(), second.as_slice()];
        let (pieces, placements) = build_wal_object(9, 7, runs.iter().copied());
        let object = pieces.concat();
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
        for (placement, run) in placements.iter().zip(runs) {
            let run_pieces = &pieces[placement.pieces.clone()];
            let at = placement.position as usize;
            assert_eq!(
                run_pieces.concat(),
                object[at..][..placement.length as usize]
            );
            let offsets: Vec<i64> = PieceWalker::new(run_pieces)
                .map(|b| b.unwrap().1.base_offset)
                .collect();
            let expected: Vec<i64> = run.iter().map(|b| b.base_offset).collect();
            assert_eq!(offsets, expected);
        }
    }

    #[test]
    fn slices_pay_where_large_batches_are_most_of_the_request() {
        let large = stored(0, 2000).joined();
        let small = stored(0, 100).joined();
        let (l, s) = (&large[..], &small[..]);
        let request = OWN_BUFFER_FROM.max(l.len() + s.len() + 100);
        assert!(slices_pay([l, l, l, l, s].into_iter(), request));
        // a request too small for a buffer of its own shares one with its neighbours
        assert!(!slices_pay([l, s].into_iter(), l.len() + s.len() + 100));
        assert!(!slices_pay([s, s].into_iter(), 2 * s.len()));
        // one large batch among many small ones would keep them all in memory
        let smalls = [s; 200];
        let request = l.len() + 200 * s.len();
        assert!(!slices_pay(smalls.into_iter().chain([l]), request));
    }

    #[test]
    fn large_batches_are_the_slices_they_are_and_small_ones_share_a_buffer() {
        let run = [
            stored(0, 2),
            stored(2, 2000),
            stored(2002, 1),
            stored(2003, 1),
        ];
        assert!(run[1].size() >= SLICED_FROM && run[0].size() < SLICED_FROM);
        let (pieces, placements) = build_wal_object(9, 7, [&run[..]].into_iter());
        let ours = &pieces[placements[0].pieces.clone()];
        assert_eq!(
            ours.len(),
            4,
            "small, prefix, body, small and small together"
        );
        assert_eq!(ours[1].as_ptr(), run[1].prefix.as_ptr());
        assert_eq!(ours[2].as_ptr(), run[1].body[0].as_ptr());
        assert_eq!(ours[3].len(), run[2].size() + run[3].size());
        let walked: Vec<_> = PieceWalker::new(ours).map(|b| b.unwrap().0).collect();
        assert_eq!(walked.len(), 4);
        let walked_pieces: Vec<_> = walked[1].pieces().map(|p| p.as_ptr()).collect();
        let run_pieces: Vec<_> = run[1].pieces().map(|p| p.as_ptr()).collect();
        assert_eq!(walked_pieces, run_pieces);
    }
}
