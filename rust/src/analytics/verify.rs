//! A full check of one segment and its index, for `kafscale segments verify`. Unlike a read,
//! which stops at the first problem, it walks on and reports every one it can see: header,
//! each batch's CRC, offsets that skip or repeat inside the segment, the footer and segment CRC,
//! and whether every index entry points at the batch it names. A length field that lies ends
//! the walk, since nothing after it can be located. Across a partition's listing,
//! [`orphan_indexes`] finds index objects whose segment is gone.

use std::collections::{HashMap, HashSet};

use bytes::Bytes;

use crate::log::batch::{BatchHeader, BATCH_HEADER_LEN, CRC_START};
use crate::log::checksum::crc32c;
use crate::log::index::SparseIndex;
use crate::log::segment::{
    CLEANED, FOOTER_MAGIC, SEGMENT_FOOTER_LEN, SEGMENT_HEADER_LEN, SEGMENT_MAGIC, SEGMENT_VERSION,
};
use crate::store::{SegmentObject, SegmentStore, StoreError};

/// `count(1, "byte")` is "1 byte", `count(3, "byte")` "3 bytes": counts in messages for people.
fn count(n: impl Into<i128>, word: &str) -> String {
    let n = n.into();
    if n == 1 {
        format!("{n} {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// "offset 7" or "offsets 7268 to 7911": an inclusive range of offsets for people (not Rust's
/// `7268..=7911`).
fn offsets(first: i64, last: i64) -> String {
    if first == last {
        format!("offset {first}")
    } else {
        format!("offsets {first} to {last}")
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Problem {
    /// The object it was found in (the segment or its index).
    pub object: String,
    /// The Kafka offset it concerns, when known.
    pub offset: Option<i64>,
    /// Byte position in the object, when known.
    pub byte: Option<u64>,
    pub message: String,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct SegmentCheck {
    pub object: String,
    pub base_offset: i64,
    /// First and last offsets of the batches that could be walked.
    pub first_offset: Option<i64>,
    pub last_offset: Option<i64>,
    pub batches: u64,
    pub records: u64,
    pub problems: Vec<Problem>,
}

impl SegmentCheck {
    fn problem(&mut self, offset: Option<i64>, byte: Option<usize>, message: String) {
        self.problems.push(Problem {
            object: self.object.clone(),
            offset,
            byte: byte.map(|b| b as u64),
            message,
        });
    }
}

/// Checks the segment of `topic`/`partition` starting at `base_offset`. Storage failures are
/// errors; everything wrong with the bytes is a problem in the result.
pub(crate) async fn verify_segment(
    store: &SegmentStore,
    topic: &str,
    partition: i32,
    base_offset: i64,
    generation: Option<u64>,
) -> Result<SegmentCheck, StoreError> {
    let path = |kind| store.object_path(topic, partition, base_offset, generation, kind);
    let (data_path, index_path) = (path(SegmentObject::Data), path(SegmentObject::Index));
    let object = store.get_mapped(&data_path).await?;
    let mut check = SegmentCheck {
        object: data_path.to_string(),
        base_offset,
        ..SegmentCheck::default()
    };
    let starts = check_segment(&mut check, &object);
    match store.get(&index_path).await {
        Ok(index) => check_index(&mut check, index_path.as_ref(), &index, &starts),
        Err(StoreError::NotFound(_)) => check.problems.push(Problem {
            object: index_path.to_string(),
            offset: Some(base_offset),
            byte: None,
            message: "the index object is missing (readers must scan the whole segment)".into(),
        }),
        Err(e) => return Err(e),
    }
    Ok(check)
}

/// Checks the segment bytes; returns each walked batch's base offset by byte position.
fn check_segment(check: &mut SegmentCheck, object: &Bytes) -> HashMap<usize, i64> {
    let base = check.base_offset;
    let len = object.len();
    if len < SEGMENT_HEADER_LEN + SEGMENT_FOOTER_LEN {
        let message = format!(
            "truncated: {}, shorter than a segment header and footer",
            count(len as u64, "byte")
        );
        check.problem(Some(base), Some(0), message);
        return HashMap::new();
    }
    if &object[0..4] != SEGMENT_MAGIC {
        check.problem(Some(base), Some(0), "header magic is not KAFS".into());
    }
    let version = u16::from_be_bytes([object[4], object[5]]);
    if version != SEGMENT_VERSION {
        check.problem(
            Some(base),
            Some(4),
            format!("unsupported segment version {version}"),
        );
    }
    // A cleaned segment's batches may skip offsets, and its footer names the last offset it
    // covers, records there or not.
    let cleaned = u16::from_be_bytes([object[6], object[7]]) & CLEANED != 0;
    let header_base = i64::from_be_bytes(object[8..16].try_into().unwrap());
    if header_base != base {
        let message = format!("header says base offset {header_base}, the object name {base}");
        check.problem(Some(base), Some(8), message);
    }
    let footer = &object[len - SEGMENT_FOOTER_LEN..];
    let footer_ok = &footer[12..16] == FOOTER_MAGIC;
    // Without a footer the object was cut short: walk everything after the header.
    let area_end = if footer_ok {
        len - SEGMENT_FOOTER_LEN
    } else {
        len
    };
    if !footer_ok {
        let message = "footer does not end in END! (truncated or partial upload)".to_string();
        check.problem(None, Some(len - 4), message);
    }
    let walk = walk_batches(check, &object[..area_end], cleaned);
    if !footer_ok {
        return walk.starts;
    }
    let expected = u32::from_be_bytes(footer[0..4].try_into().unwrap());
    let actual = crc32c(&object[SEGMENT_HEADER_LEN..area_end]);
    if expected != actual {
        let message = format!(
            "segment CRC-32C mismatch: footer says {expected:#010x}, batches hash to {actual:#010x}"
        );
        check.problem(None, Some(len - SEGMENT_FOOTER_LEN), message);
    }
    let footer_last = i64::from_be_bytes(footer[4..12].try_into().unwrap());
    let footer_wrong = |last: i64| match cleaned {
        true => last > footer_last,
        false => last != footer_last,
    };
    if check.last_offset.is_some_and(footer_wrong) {
        let message = format!(
            "footer says the last offset is {footer_last}, the batches end at {}",
            check.last_offset.unwrap_or_default()
        );
        check.problem(Some(footer_last), Some(len - 12), message);
    }
    let declared = i32::from_be_bytes(object[16..20].try_into().unwrap());
    // (a cleaned segment declares its records, compaction's its offsets: the same there)
    let (held, what) = match cleaned {
        true => (check.records as i64, "record"),
        false => (walk.offsets, "offset"),
    };
    if walk.complete && i64::from(declared) != held {
        let message = format!(
            "header declares {}, the batches hold {held}",
            count(declared, what),
        );
        check.problem(Some(base), Some(16), message);
    }
    walk.starts
}

struct Walk {
    /// Each walked batch's base offset by its byte position in the object.
    starts: HashMap<usize, i64>,
    /// Offsets the walked batches cover.
    offsets: i64,
    /// The walk reached the end of the batch area.
    complete: bool,
}

/// Walks the batches from the end of the header to `area.len()`; `gaps`: a cleaned segment's,
/// whose batches may skip offsets.
fn walk_batches(check: &mut SegmentCheck, area: &[u8], gaps: bool) -> Walk {
    let mut walk = Walk {
        starts: HashMap::new(),
        offsets: 0,
        complete: false,
    };
    let mut position = SEGMENT_HEADER_LEN;
    let mut expected_next = check.base_offset;
    while position < area.len() {
        let rest = &area[position..];
        let Some(header) = BatchHeader::parse(rest) else {
            let message = if rest.len() < BATCH_HEADER_LEN {
                format!(
                    "{} after the last batch",
                    count(rest.len() as u64, "stray byte")
                )
            } else {
                "malformed batch header (bad length); the rest of the segment is unreadable".into()
            };
            check.problem(Some(expected_next), Some(position), message);
            return walk;
        };
        if header.size > rest.len() {
            let missing = header.size - rest.len();
            let message = format!(
                "batch runs past the end of the segment ({} missing)",
                count(missing as u64, "byte")
            );
            check.problem(Some(header.base_offset), Some(position), message);
            return walk;
        }
        let batch = &rest[..header.size];
        if header.magic != 2 {
            let message = format!("batch magic is {}, not 2", header.magic);
            check.problem(Some(header.base_offset), Some(position), message);
        } else if crc32c(&batch[CRC_START..]) != header.crc {
            let message = format!(
                "batch CRC-32C mismatch (batch at byte {position}, {})",
                offsets(header.base_offset, header.last_offset())
            );
            check.problem(Some(header.base_offset), Some(position), message);
        }
        if header.base_offset > expected_next && !gaps {
            let message = format!(
                "gap inside the segment: {} missing",
                offsets(expected_next, header.base_offset - 1)
            );
            check.problem(Some(expected_next), Some(position), message);
        } else if header.base_offset < expected_next {
            let message = format!(
                "batch at offset {} repeats offsets below {expected_next}",
                header.base_offset
            );
            check.problem(Some(header.base_offset), Some(position), message);
        }
        walk.starts.insert(position, header.base_offset);
        check.first_offset.get_or_insert(header.base_offset);
        check.last_offset = Some(header.last_offset());
        check.batches += 1;
        check.records += header.record_count.max(0) as u64;
        walk.offsets += header.offset_count();
        expected_next = header.last_offset() + 1;
        position += header.size;
    }
    walk.complete = true;
    walk
}

fn check_index(check: &mut SegmentCheck, object: &str, index: &[u8], starts: &HashMap<usize, i64>) {
    let problem = |offset: Option<i64>, message: String| Problem {
        object: object.to_string(),
        offset,
        byte: None,
        message,
    };
    let parsed = match SparseIndex::parse(index) {
        Ok(parsed) => parsed,
        Err(e) => {
            check
                .problems
                .push(problem(Some(check.base_offset), format!("index: {e}")));
            return;
        }
    };
    for entry in &parsed.entries {
        match starts.get(&(entry.position as usize)) {
            Some(&offset) if offset == entry.offset => {}
            Some(&offset) => check.problems.push(problem(
                Some(entry.offset),
                format!(
                    "index entry for offset {} points at byte {}, where the batch at offset \
                     {offset} starts",
                    entry.offset, entry.position
                ),
            )),
            None => check.problems.push(problem(
                Some(entry.offset),
                format!(
                    "index entry for offset {} points at byte {}, which is not a batch start",
                    entry.offset, entry.position
                ),
            )),
        }
    }
}

/// Index objects of `topic`/`partition` without their segment object, as problems: the
/// segment was deleted (or never uploaded) but its index was left behind, so the offsets it
/// indexed are gone. One listing of the partition; no object is read.
pub(crate) async fn orphan_indexes(
    store: &SegmentStore,
    topic: &str,
    partition: i32,
) -> Result<Vec<Problem>, StoreError> {
    let listed = store.list_partition(topic, partition).await?;
    let segments: HashSet<(i64, Option<u64>)> = listed
        .iter()
        .filter(|s| s.kind == SegmentObject::Data)
        .map(|s| (s.base_offset, s.generation))
        .collect();
    Ok(listed
        .iter()
        .filter(|s| {
            s.kind == SegmentObject::Index && !segments.contains(&(s.base_offset, s.generation))
        })
        .map(|s| {
            let path =
                |kind| store.object_path(topic, partition, s.base_offset, s.generation, kind);
            let (data, index) = (path(SegmentObject::Data), path(SegmentObject::Index));
            Problem {
                object: index.to_string(),
                offset: Some(s.base_offset),
                byte: None,
                message: format!(
                    "the index has no segment: {data} is missing (deleted, or never stored)"
                ),
            }
        })
        .collect())
}
