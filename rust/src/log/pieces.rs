//! Batches laid over pieces of memory without being copied together. A batch may start and
//! end anywhere in them: a run this broker wrote holds large batches as their rewritten prefix
//! and the produce request's bytes, and an object read back from the store is cached in the
//! chunks its body arrived in.

use bytes::Bytes;

use super::batch::{BatchHeader, BATCH_HEADER_LEN};
use super::segment::{Body, SegmentError, StoredBatch};

/// Walks the batches of `pieces` in order, each as a stored batch (the slices of the pieces it
/// lies in) with its header. Stops at an incomplete batch at the end (a ranged read may end
/// mid-batch); reports a malformed one as an error and stops.
pub(crate) struct PieceWalker<'a> {
    pieces: &'a [Bytes],
    /// Where the next batch starts: a piece, and a position in it.
    piece: usize,
    at: usize,
    /// Bytes walked before the current piece (for error positions).
    passed: usize,
}

impl<'a> PieceWalker<'a> {
    pub(crate) fn new(pieces: &'a [Bytes]) -> PieceWalker<'a> {
        PieceWalker {
            pieces,
            piece: 0,
            at: 0,
            passed: 0,
        }
    }

    fn fail(&mut self) -> Option<Result<(StoredBatch, BatchHeader), SegmentError>> {
        let position = self.passed + self.at;
        self.piece = self.pieces.len();
        Some(Err(SegmentError::BadBatch { position }))
    }

    /// The slices of the next `size` bytes and where they end (piece, position, bytes before
    /// that piece); None if the pieces end first.
    fn slices_of(&self, size: usize) -> Option<(Body, usize, usize, usize)> {
        let (mut piece, mut at, mut passed) = (self.piece, self.at, self.passed);
        let mut slices = Body::new();
        let mut left = size;
        while left > 0 {
            let bytes = self.pieces.get(piece)?;
            let take = (bytes.len() - at).min(left);
            if take > 0 {
                slices.push(bytes.slice(at..at + take));
            }
            left -= take;
            at += take;
            if left > 0 {
                passed += bytes.len();
                piece += 1;
                at = 0;
            }
        }
        Some((slices, piece, at, passed))
    }

    /// The header of the next batch, copied together when it spans pieces; None if the pieces
    /// end first.
    fn header(&self) -> Option<Option<BatchHeader>> {
        let rest = &self.pieces[self.piece][self.at..];
        if rest.len() >= BATCH_HEADER_LEN {
            return Some(BatchHeader::parse(rest));
        }
        let following = self.pieces[self.piece + 1..].iter().map(|p| &p[..]);
        let head: [u8; BATCH_HEADER_LEN] = first_bytes(std::iter::once(rest).chain(following))?;
        Some(BatchHeader::parse(&head))
    }
}

/// The first `N` bytes of `pieces` copied together; None if they hold fewer.
pub(super) fn first_bytes<'a, const N: usize>(
    pieces: impl IntoIterator<Item = &'a [u8]>,
) -> Option<[u8; N]> {
    let mut head = [0u8; N];
    let mut filled = 0;
    for piece in pieces {
        let take = piece.len().min(N - filled);
        head[filled..filled + take].copy_from_slice(&piece[..take]);
        filled += take;
        if filled == N {
            return Some(head);
        }
    }
    None
}

impl Iterator for PieceWalker<'_> {
    type Item = Result<(StoredBatch, BatchHeader), SegmentError>;

    fn next(&mut self) -> Option<Self::Item> {
        while self.at == self.pieces.get(self.piece)?.len() {
            self.passed += self.at;
            self.piece += 1;
            self.at = 0;
        }
        let Some(header) = self.header()? else {
            return self.fail();
        };
        // Cut short (a ranged read) when the pieces end within it.
        let (body, piece, at, passed) = self.slices_of(header.size)?;
        (self.piece, self.at, self.passed) = (piece, at, passed);
        let stored = StoredBatch {
            prefix: Bytes::new(),
            body,
            base_offset: header.base_offset,
            offset_count: header.offset_count(),
            max_timestamp: header.max_timestamp,
        };
        Some(Ok((stored, header)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::segment::tests::stored;

    /// The bytes of `pieces` cut again at every multiple of `every`.
    fn recut(pieces: &[Bytes], every: usize) -> Vec<Bytes> {
        let all: Bytes = pieces.concat().into();
        (0..all.len())
            .step_by(every)
            .map(|at| all.slice(at..(at + every).min(all.len())))
            .collect()
    }

    fn offsets_and_sizes(pieces: &[Bytes]) -> Vec<(i64, usize)> {
        PieceWalker::new(pieces)
            .map(|r| r.unwrap())
            .map(|(batch, header)| {
                assert_eq!(batch.size(), header.size);
                (header.base_offset, batch.size())
            })
            .collect()
    }

    #[test]
    fn batches_are_walked_alike_however_their_bytes_are_cut() {
        let (a, b, c) = (stored(0, 2), stored(2, 3), stored(5, 40));
        let together: Bytes = [a.joined(), b.joined()].concat().into();
        let pieces = [together, c.prefix.clone(), c.body[0].clone()];
        let expected = vec![(0, a.size()), (2, b.size()), (5, c.size())];
        assert_eq!(offsets_and_sizes(&pieces), expected);
        // a prefix and its body: the same slices, not copies
        let (split, _) = PieceWalker::new(&pieces).nth(2).unwrap().unwrap();
        let ptrs: Vec<_> = split.pieces().map(|p| p.as_ptr()).collect();
        assert_eq!(ptrs, [c.prefix.as_ptr(), c.body[0].as_ptr()]);
        // the chunks of a body read back, cut anywhere (headers included)
        for every in [1, 7, 60, 61, 62, 100, 4096] {
            let chunks = recut(&pieces, every);
            assert_eq!(offsets_and_sizes(&chunks), expected, "cut every {every}");
            let (batch, _) = PieceWalker::new(&chunks).nth(2).unwrap().unwrap();
            assert_eq!(batch.joined(), c.joined(), "cut every {every}");
        }
    }

    #[test]
    fn a_cut_tail_ends_the_walk_and_a_malformed_batch_is_an_error() {
        let (a, b) = (stored(0, 2).joined(), stored(2, 3).joined());
        for every in [10, 1000] {
            let cut = recut(&[a.clone(), b.slice(..b.len() - 1)], every);
            assert_eq!(PieceWalker::new(&cut).count(), 1, "cut every {every}");
            let header_cut = recut(&[a.clone(), b.slice(..30)], every);
            assert_eq!(
                PieceWalker::new(&header_cut).count(),
                1,
                "cut every {every}"
            );
        }
        let mut bad = b.to_vec();
        bad[8..12].copy_from_slice(&1i32.to_be_bytes());
        for every in [10, 1000] {
            let pieces = recut(&[a.clone(), Bytes::from(bad.clone())], every);
            let walked: Vec<_> = PieceWalker::new(&pieces).collect();
            assert!(matches!(
                walked[1],
                Err(SegmentError::BadBatch { position }) if position == a.len()
            ));
            assert_eq!(walked.len(), 2);
        }
    }
}
