//! The fetch path's collection of batches: what it takes, skips and refuses.

use bytes::{BufMut, BytesMut};
use kafka_protocol::records::Compression;

use super::*;
use crate::log::batch::tests::encoded_batch;

/// `count` records in one batch at `base`, followed by the next batches given.
fn batches(ranges: &[(i64, usize)]) -> CachedBatches {
    CachedBatches::pieces(0, vec![encoded(ranges)])
}

fn encoded(ranges: &[(i64, usize)]) -> Bytes {
    let mut all = BytesMut::new();
    for &(base, count) in ranges {
        let batch = encoded_batch(count, 10, Compression::None);
        all.put_i64(base);
        all.extend_from_slice(&batch[8..]);
    }
    all.freeze()
}

fn collecting_from(next: i64) -> Collected {
    Collected {
        slices: Vec::new(),
        records: 0,
        total: 0,
        next,
        max_bytes: 1 << 20,
        must_progress: true,
        limit: i64::MAX,
    }
}

#[test]
fn a_read_below_a_limit_stops_at_the_first_batch_starting_there() {
    let mut collected = Collected {
        limit: 5,
        ..collecting_from(0)
    };
    assert_eq!(
        collected.take(&batches(&[(0, 2), (2, 3), (5, 1)]), false),
        Ok(false)
    );
    assert_eq!(collected.next, 5);
    assert_eq!(collected.records, 5);
}

#[test]
fn batches_below_the_offset_are_skipped_and_the_one_holding_it_is_taken_whole() {
    let mut collected = collecting_from(3);
    assert_eq!(
        collected.take(&batches(&[(0, 2), (2, 3), (5, 1)]), false),
        Ok(true)
    );
    assert_eq!(collected.slices.len(), 2);
    assert_eq!(collected.next, 6);
}

#[test]
fn batches_are_taken_across_pieces_as_slices_of_them() {
    let pieces = [encoded(&[(0, 2)]), encoded(&[(2, 3), (5, 1)])];
    let mut collected = collecting_from(3);
    let cached = CachedBatches::pieces(0, &pieces[..]);
    assert_eq!(collected.take(&cached, false), Ok(true));
    assert_eq!(collected.next, 6);
    assert_eq!(collected.records, 4);
    assert_eq!(collected.slices.len(), 2);
    assert_eq!(collected.slices[0].as_ptr(), pieces[1].as_ptr());
    // a gap between pieces is one too
    let pieces = [encoded(&[(0, 2)]), encoded(&[(4, 1)])];
    let found = collecting_from(0).take(&CachedBatches::pieces(0, &pieces[..]), false);
    assert_eq!(
        found,
        Err(TakeError::Gap {
            expected: 2,
            found: 4
        })
    );
}

#[test]
fn a_batch_past_the_offset_asked_for_is_a_gap_not_data() {
    let mut collected = collecting_from(0);
    let found = collected.take(&batches(&[(18, 2)]), false);
    assert_eq!(
        found,
        Err(TakeError::Gap {
            expected: 0,
            found: 18
        })
    );
    assert!(collected.slices.is_empty());
    // ... and between two batches of one read as well
    let mut collected = collecting_from(0);
    let found = collected.take(&batches(&[(0, 2), (5, 1)]), false);
    assert_eq!(
        found,
        Err(TakeError::Gap {
            expected: 2,
            found: 5
        })
    );
}

#[test]
fn a_cleaned_segment_skips_the_offsets_its_cleaning_removed() {
    let mut collected = collecting_from(1);
    let found = collected.take(&batches(&[(0, 2), (5, 1), (9, 2)]), true);
    assert_eq!(found, Ok(true));
    assert_eq!(
        (collected.slices.len(), collected.records, collected.next),
        (3, 5, 11)
    );
}
