//! The record decoder on hand-built records: what it lends out, what it refuses and why, and
//! a compressed batch read a window at a time.

use super::*;
use crate::log::batch::tests::{framed, raw_batch, raw_record, zigzag_varint, RawHeader};
use crate::log::decompress::tests::{codec_id, compress, CODECS};

type Header<'a> = (&'a str, Option<&'a [u8]>);

/// Each record with its headers.
#[derive(Default)]
struct Collect<'a> {
    records: Vec<(Record<'a>, Vec<Header<'a>>)>,
    headers: Vec<Header<'a>>,
}

impl<'a> Visitor<'a> for Collect<'a> {
    type Error = RecordError;
    fn wants_headers(&mut self, _: i32) -> bool {
        true
    }
    fn header(&mut self, key: &'a str, value: Option<&'a [u8]>) {
        self.headers.push((key, value));
    }
    fn record(&mut self, record: Record<'a>) -> Result<(), RecordError> {
        self.records
            .push((record, std::mem::take(&mut self.headers)));
        Ok(())
    }
}

fn decoded(count: i32, section: &[u8]) -> Result<Vec<(Record<'_>, Vec<Header<'_>>)>, RecordError> {
    decoded_up_to(count, count - 1, section)
}

/// The records of a batch whose last offset delta is `last_delta` (a cleaned batch's may lie
/// past its record count).
fn decoded_up_to(
    count: i32,
    last_delta: i32,
    section: &[u8],
) -> Result<Vec<(Record<'_>, Vec<Header<'_>>)>, RecordError> {
    let mut collect = Collect::default();
    walk_records(count, last_delta, section, &mut collect)?;
    Ok(collect.records)
}

#[test]
fn fields_and_headers_are_lent_from_the_section() {
    let mut body = vec![0u8];
    zigzag_varint(&mut body, 7); // timestamp delta
    zigzag_varint(&mut body, 0); // offset delta
    zigzag_varint(&mut body, -1); // null key
    zigzag_varint(&mut body, 2);
    body.extend_from_slice(b"v0");
    zigzag_varint(&mut body, 2); // two headers: ("a", "x"), ("é", null)
    zigzag_varint(&mut body, 1);
    body.push(b'a');
    zigzag_varint(&mut body, 1);
    body.push(b'x');
    zigzag_varint(&mut body, 2);
    body.extend_from_slice("é".as_bytes());
    zigzag_varint(&mut body, -1);
    let mut section = framed(&body);
    section.extend(raw_record(1, 9, b"v1"));

    let records = decoded(2, &section).unwrap();
    let ((first, first_headers), (second, second_headers)) = (&records[0], &records[1]);
    assert_eq!(
        (first.index, first.timestamp_delta, first.key, first.value),
        (0, 7, None, Some(&b"v0"[..]))
    );
    assert_eq!(first_headers, &[("a", Some(&b"x"[..])), ("é", None)]);
    assert_eq!(
        (
            second.index,
            second.timestamp_delta,
            second.key,
            second.value
        ),
        (1, 9, Some(&b"k1"[..]), Some(&b"v1"[..]))
    );
    assert_eq!(second_headers, &[("h", None)]);
}

#[test]
fn an_error_names_what_is_wrong_and_the_record_when_it_is_about_one() {
    let two: Vec<u8> = (0..2).flat_map(|i| raw_record(i, 0, b"v")).collect();
    assert_eq!(
        decoded(3, &two).unwrap_err(),
        RecordError::Fewer {
            declared: 3,
            held: 2
        }
    );
    assert_eq!(
        decoded(1, &two).unwrap_err(),
        RecordError::More { declared: 1 }
    );
    assert_eq!(decoded(1, &two).unwrap_err().record(), None);

    let mut leftover = raw_record(0, 0, b"v")[1..].to_vec();
    leftover.push(0);
    let error = decoded(1, &framed(&leftover)).unwrap_err();
    assert_eq!(
        error,
        RecordError::Malformed {
            index: 0,
            problem: Malformed::Leftover(1)
        }
    );
    assert_eq!(
        error.to_string(),
        "record 0 is malformed: 1 bytes of its length are left after its fields"
    );

    let mut swapped = raw_record(1, 0, b"v");
    swapped.extend(raw_record(0, 0, b"v"));
    let error = decoded(2, &swapped).unwrap_err();
    assert_eq!(error, RecordError::OutOfOrder { index: 0, delta: 1 });
    assert_eq!(error.record(), Some(0));

    // a record longer than what is left of the section, and a length past int32
    let mut cut = raw_record(0, 0, b"value");
    cut.truncate(cut.len() - 2);
    let problem = |section: &[u8]| match decoded(1, section).unwrap_err() {
        RecordError::Malformed { problem, .. } => problem,
        other => panic!("{other}"),
    };
    assert_eq!(problem(&cut), Malformed::Ended);
    let mut huge = Vec::new();
    zigzag_varint(&mut huge, 1 << 31);
    assert_eq!(problem(&huge), Malformed::Length(1 << 31));
    assert_eq!(problem(&[0x81]), Malformed::Ended);
}

/// A record's index, timestamp delta, key and value.
type Owned = (i32, i64, Vec<u8>, Vec<u8>);

/// What `walk_batch` reads of a batch.
fn walked(batch: &[u8], limit: usize) -> Result<Vec<Owned>, String> {
    let header = BatchHeader::parse(batch).unwrap();
    let mut out = Vec::new();
    walk_batch(&header, batch, limit, |record| {
        let key = record.key.unwrap_or_default().to_vec();
        let value = record.value.unwrap_or_default().to_vec();
        out.push((record.index, record.timestamp_delta, key, value));
        Ok::<(), Fault>(())
    })
    .map_err(|fault| fault.0)?;
    Ok(out)
}

#[derive(Debug)]
struct Fault(String);

impl From<RecordError> for Fault {
    fn from(error: RecordError) -> Fault {
        Fault(error.to_string())
    }
}

impl From<DecompressError> for Fault {
    fn from(error: DecompressError) -> Fault {
        Fault(error.to_string())
    }
}

#[test]
fn a_compressed_batch_is_walked_a_window_at_a_time_like_the_plain_one() {
    // Records of uneven sizes that straddle the window's edges, and one three windows long.
    let mut plain = Vec::new();
    let mut expected = Vec::new();
    for i in 0..400 {
        let value = vec![
            b'a' + (i % 26) as u8;
            if i == 200 {
                3 * WINDOW
            } else {
                37 * i as usize
            }
        ];
        plain.extend(raw_record(i, 2 * i, &value));
        expected.push((i as i32, 2 * i, format!("k{i}").into_bytes(), value));
    }
    for codec in CODECS {
        let spec = |count| RawHeader {
            attributes: codec_id(codec),
            count,
            base_timestamp: 0,
            max_timestamp: 798,
            producer_id: -1,
        };
        let batch = raw_batch(&spec(400), &compress(codec, &plain));
        assert_eq!(walked(&batch, 16 << 20).unwrap(), expected, "{codec:?}");
        // past the bound, the decompressor fails
        if codec != Codec::None {
            let refused = walked(&batch, plain.len() - 1).unwrap_err();
            assert!(refused.contains("limit"), "{codec:?}: {refused}");
        }
        // fewer and more records than the batch declares, read through the window too
        for (count, problem) in [(401, "holds 400"), (399, "more than the 399")] {
            let batch = raw_batch(&spec(count), &compress(codec, &plain));
            let refused = walked(&batch, 16 << 20).unwrap_err();
            assert!(refused.contains(problem), "{codec:?}: {refused}");
        }
    }
}

#[test]
fn a_record_cut_short_by_the_end_of_a_compressed_batch_is_malformed() {
    let mut plain = raw_record(0, 0, &[7; 1000]);
    plain.truncate(plain.len() - 10);
    let spec = RawHeader {
        attributes: codec_id(Codec::Zstd),
        count: 1,
        base_timestamp: 0,
        max_timestamp: 0,
        producer_id: -1,
    };
    let refused = walked(&raw_batch(&spec, &compress(Codec::Zstd, &plain)), 1 << 20);
    assert_eq!(
        refused.unwrap_err(),
        "record 0 is malformed: the batch ends inside it"
    );
}

#[test]
fn a_cleaned_batch_skips_offsets_but_never_goes_back_or_past_its_last_delta() {
    let section = |deltas: &[i64]| -> Vec<u8> {
        deltas
            .iter()
            .flat_map(|&d| raw_record(d, 0, b"v"))
            .collect()
    };
    // three records left of six offsets: deltas 0, 3, 5
    let kept = section(&[0, 3, 5]);
    let records = decoded_up_to(3, 5, &kept).unwrap();
    let deltas: Vec<(i32, i32)> = records
        .iter()
        .map(|(r, _)| (r.index, r.offset_delta))
        .collect();
    assert_eq!(deltas, [(0, 0), (1, 3), (2, 5)]);
    assert!(
        decoded_up_to(2, 5, &section(&[4, 5])).is_ok(),
        "the first ones removed"
    );
    let back = decoded_up_to(3, 5, &section(&[0, 3, 2])).unwrap_err();
    assert_eq!(back, RecordError::OutOfOrder { index: 2, delta: 2 });
    let past = decoded_up_to(3, 5, &section(&[0, 3, 6])).unwrap_err();
    assert_eq!(past, RecordError::OutOfOrder { index: 2, delta: 6 });
    // no room left below the last delta for the records after it
    let crowded = decoded_up_to(3, 5, &section(&[0, 5, 5])).unwrap_err();
    assert_eq!(crowded, RecordError::OutOfOrder { index: 1, delta: 5 });
    // a produced batch (one record per offset) is numbered 0, 1, 2 exactly
    let skipped = decoded(3, &section(&[0, 2, 3])).unwrap_err();
    assert_eq!(skipped, RecordError::OutOfOrder { index: 1, delta: 2 });
}
