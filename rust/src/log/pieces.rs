//! Batches laid over pieces of memory without being copied together: a piece holds whole
//! batches, or the rewritten prefix of one batch with the next piece holding the rest of it
//! (a run this broker wrote holds large batches as the prefix and the produce request's bytes).

use bytes::Bytes;

use super::batch::{BatchHeader, BATCH_HEADER_LEN};
use super::segment::{SegmentError, StoredBatch};

/// Walks the batches of `pieces` in order, each as a stored batch (a prefix piece and its body,
/// or one slice) with its header. Stops at an incomplete batch at the end (a ranged read may
/// end mid-batch); reports a malformed one as an error and stops.
pub struct PieceWalker<'a> {
    pieces: &'a [Bytes],
    piece: usize,
    at: usize,
    /// Bytes walked before the current piece (for error positions).
    passed: usize,
}

impl<'a> PieceWalker<'a> {
    pub fn new(pieces: &'a [Bytes]) -> PieceWalker<'a> {
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
}

impl Iterator for PieceWalker<'_> {
    type Item = Result<(StoredBatch, BatchHeader), SegmentError>;

    fn next(&mut self) -> Option<Self::Item> {
        while self.at == self.pieces.get(self.piece)?.len() {
            self.passed += self.at;
            self.piece += 1;
            self.at = 0;
        }
        let rest = self.pieces[self.piece].slice(self.at..);
        let next = self.pieces.get(self.piece + 1);
        let header = if rest.len() >= BATCH_HEADER_LEN {
            BatchHeader::parse(&rest)
        } else {
            // A prefix: the header goes on in the next piece.
            let next = next.filter(|n| rest.len() + n.len() >= BATCH_HEADER_LEN)?;
            let mut head = [0u8; BATCH_HEADER_LEN];
            head[..rest.len()].copy_from_slice(&rest);
            head[rest.len()..].copy_from_slice(&next[..BATCH_HEADER_LEN - rest.len()]);
            BatchHeader::parse(&head)
        };
        let Some(header) = header else {
            return self.fail();
        };
        let (prefix, body) = if header.size <= rest.len() {
            self.at += header.size;
            (Bytes::new(), rest.slice(..header.size))
        } else {
            let Some(next) = next.filter(|n| rest.len() + n.len() >= header.size) else {
                // Cut short (a ranged read), unless the batch should have gone on in the
                // next piece: then the pieces do not describe batches.
                return if next.is_some() { self.fail() } else { None };
            };
            let body = next.slice(..header.size - rest.len());
            self.passed += self.pieces[self.piece].len();
            self.piece += 1;
            self.at = body.len();
            (rest, body)
        };
        let stored = StoredBatch {
            prefix,
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

    fn joined(b: &StoredBatch) -> Bytes {
        [b.prefix.clone(), b.body.clone()].concat().into()
    }

    #[test]
    fn batches_in_one_piece_and_split_after_their_prefix_are_walked_alike() {
        let (a, b, c) = (stored(0, 2), stored(2, 3), stored(5, 1));
        let together: Bytes = [joined(&a), joined(&b)].concat().into();
        let pieces = [together, c.prefix.clone(), c.body.clone()];
        let walked: Vec<_> = PieceWalker::new(&pieces).map(|r| r.unwrap()).collect();
        let offsets: Vec<i64> = walked.iter().map(|(_, h)| h.base_offset).collect();
        assert_eq!(offsets, vec![0, 2, 5]);
        let (split, header) = &walked[2];
        assert_eq!(
            split.prefix.as_ptr(),
            c.prefix.as_ptr(),
            "the prefix was copied"
        );
        assert_eq!(split.body.as_ptr(), c.body.as_ptr(), "the body was copied");
        assert_eq!(split.size(), header.size);
        assert!(walked[0].0.prefix.is_empty() && walked[1].0.prefix.is_empty());
    }

    #[test]
    fn a_cut_tail_ends_the_walk_and_a_malformed_batch_is_an_error() {
        let (a, b) = (joined(&stored(0, 2)), joined(&stored(2, 3)));
        let cut = [a.clone(), b.slice(..b.len() - 1)];
        assert_eq!(PieceWalker::new(&cut).count(), 1);
        let mut bad = b.to_vec();
        bad[8..12].copy_from_slice(&1i32.to_be_bytes());
        let pieces = [a.clone(), Bytes::from(bad)];
        let walked: Vec<_> = PieceWalker::new(&pieces).collect();
        assert!(matches!(
            walked[1],
            Err(SegmentError::BadBatch { position }) if position == a.len()
        ));
        assert_eq!(walked.len(), 2);
        // a prefix whose next piece is too short for its batch
        let c = stored(5, 20);
        let short = [c.prefix.clone(), c.body.slice(..100), a];
        assert!(matches!(
            PieceWalker::new(&short).next(),
            Some(Err(SegmentError::BadBatch { position: 0 }))
        ));
    }
}
