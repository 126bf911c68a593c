//! Reading a batch's records from its (decompressed) stream, for the produce validator and
//! timestamp searches: every record is walked and checked, with zigzag varints no longer than
//! their type allows (timestamp deltas are varlongs), and length-prefixed fields that never run
//! past the current record's length. Nothing is copied except one header key at a time (its
//! UTF-8 is checked, as consumers decode it into a string).
//!
//! Record: length varint | attributes i8 | timestamp delta varlong | offset delta varint |
//! key length varint (-1 = null) | key | value length varint | value | header count varint |
//! headers (key length varint | key | value length varint (-1 = null) | value).

use std::fmt::Display;
use std::io::{BufRead, BufReader};

use super::batch::{BatchHeader, BATCH_HEADER_LEN};
use super::decompress::{Codec, Decompressed};
use super::rejection::{corrupt, invalid_record, Rejection};

/// Large enough that one read of a decompressor usually holds several records.
const STREAM_BUFFER: usize = 32 * 1024;

/// Walks the records of one batch (its bytes, whose header and CRC are checked): exactly
/// `record_count` records, each exactly its length, numbered 0, 1, 2, ... in order, and
/// nothing after them. Compressed records are read through a decompressor that fails past
/// `max_uncompressed` bytes. `visit` gets each record's index and timestamp, in order.
pub(super) fn walk_records(
    header: &BatchHeader,
    batch: &[u8],
    max_uncompressed: usize,
    visit: impl FnMut(i32, i64) -> Result<(), Rejection>,
) -> Result<(), Rejection> {
    let codec = Codec::from_attributes(header.attributes).map_err(corrupt)?;
    let section = &batch[BATCH_HEADER_LEN..header.size];
    match codec {
        Codec::None => walk(Records::new(section, codec), header, visit),
        _ => {
            let stream = Decompressed::new(codec, section, max_uncompressed).map_err(corrupt)?;
            let buffered = BufReader::with_capacity(STREAM_BUFFER, stream);
            walk(Records::new(buffered, codec), header, visit)
        }
    }
}

fn walk<R: BufRead>(
    mut records: Records<R>,
    header: &BatchHeader,
    mut visit: impl FnMut(i32, i64) -> Result<(), Rejection>,
) -> Result<(), Rejection> {
    let declared = header.record_count;
    for index in 0..declared {
        records.index = index;
        let Some(length) = records.record_length()? else {
            return Err(invalid_record(
                None,
                format!("the batch declares {declared} records but holds {index}"),
            ));
        };
        records.left = length;
        records.byte()?; // attributes: unused in v2
        let timestamp_delta = records.varlong()?;
        let offset_delta = records.varint()?;
        records.nullable_field("key")?;
        records.nullable_field("value")?;
        let headers = records.varint()?;
        if headers < 0 {
            return Err(records.malformed(format!("header count {headers}")));
        }
        for _ in 0..headers {
            records.header_key()?;
            records.nullable_field("header value")?;
        }
        if records.left != 0 {
            return Err(records.malformed(format!(
                "{} bytes of its length are left after its fields",
                records.left
            )));
        }
        if offset_delta != index {
            return Err(invalid_record(
                Some(index),
                format!(
                    "record {index} has offset delta {offset_delta}; a batch's records are \
                     numbered 0, 1, 2, ... in order"
                ),
            ));
        }
        visit(index, header.record_timestamp(timestamp_delta))?;
    }
    // Reading to the end also checks the compressed stream's own trailer and checksums.
    if records.next_byte()?.is_some() {
        return Err(invalid_record(
            None,
            format!("the batch holds more than the {declared} records it declares"),
        ));
    }
    Ok(())
}

/// Reads the records of one batch from its (decompressed) stream, never past the current
/// record's length.
struct Records<R> {
    src: R,
    codec: Codec,
    /// The record being read (for messages).
    index: i32,
    /// Bytes of the current record not read yet.
    left: usize,
    /// Holds one header key while its UTF-8 is checked.
    key: Vec<u8>,
}

impl<R: BufRead> Records<R> {
    fn new(src: R, codec: Codec) -> Records<R> {
        Records {
            src,
            codec,
            index: 0,
            left: 0,
            key: Vec::new(),
        }
    }

    fn malformed(&self, what: impl Display) -> Rejection {
        invalid_record(
            Some(self.index),
            format!("record {} is malformed: {what}", self.index),
        )
    }

    fn next_byte(&mut self) -> Result<Option<u8>, Rejection> {
        let codec = self.codec;
        let buf = self.src.fill_buf().map_err(|e| corrupt(codec.failed(e)))?;
        let byte = buf.first().copied();
        if byte.is_some() {
            self.src.consume(1);
        }
        Ok(byte)
    }

    /// A byte of the current record.
    fn byte(&mut self) -> Result<u8, Rejection> {
        if self.left == 0 {
            return Err(self.malformed("its fields run past its length"));
        }
        self.left -= 1;
        self.next_byte()?
            .ok_or_else(|| self.malformed("the batch ends inside it"))
    }

    /// The next record's length; `None` when the records end before it.
    fn record_length(&mut self) -> Result<Option<usize>, Rejection> {
        let Some(first) = self.next_byte()? else {
            return Ok(None);
        };
        // The length is read outside any record: let `byte` take the rest of a 5-byte varint.
        self.left = 4;
        let length = zigzag(self.raw_varint(first, 5)?);
        usize::try_from(length)
            .ok()
            .and_then(|l| i32::try_from(length).is_ok().then_some(l))
            .map(Some)
            .ok_or_else(|| self.malformed(format!("length {length}")))
    }

    /// Little-endian base-128 digits starting with `first`, at most `max_bytes` of them.
    fn raw_varint(&mut self, first: u8, max_bytes: u32) -> Result<u64, Rejection> {
        let mut raw = u64::from(first & 0x7f);
        let mut byte = first;
        let mut shift = 0;
        while byte & 0x80 != 0 {
            shift += 7;
            if shift >= 7 * max_bytes {
                return Err(self.malformed("a varint longer than its type allows"));
            }
            byte = self.byte()?;
            // The 10th byte of a varlong may carry only the 64th bit.
            if shift == 63 && byte & 0x7e != 0 {
                return Err(self.malformed("a varlong out of the int64 range"));
            }
            raw |= u64::from(byte & 0x7f) << shift;
        }
        Ok(raw)
    }

    fn varlong(&mut self) -> Result<i64, Rejection> {
        let first = self.byte()?;
        Ok(zigzag(self.raw_varint(first, 10)?))
    }

    fn varint(&mut self) -> Result<i32, Rejection> {
        let first = self.byte()?;
        let value = zigzag(self.raw_varint(first, 5)?);
        i32::try_from(value).map_err(|_| self.malformed("a varint out of the int32 range"))
    }

    /// A length-prefixed field that may be null (-1).
    fn nullable_field(&mut self, what: &str) -> Result<(), Rejection> {
        let len = self.varint()?;
        if len < -1 {
            return Err(self.malformed(format!("{what} length {len}")));
        }
        self.skip(len.max(0) as usize)
    }

    /// A header key: present and UTF-8, as consumers decode it into a string.
    fn header_key(&mut self) -> Result<(), Rejection> {
        let len = self.varint()?;
        if len < 0 {
            return Err(self.malformed(format!("header key length {len}")));
        }
        let mut key = std::mem::take(&mut self.key);
        key.clear();
        let read = self.read_into(len as usize, &mut key);
        let utf8 = std::str::from_utf8(&key).is_ok();
        self.key = key;
        read?;
        if !utf8 {
            return Err(invalid_record(
                Some(self.index),
                format!("a header key of record {} is not UTF-8", self.index),
            ));
        }
        Ok(())
    }

    fn skip(&mut self, n: usize) -> Result<(), Rejection> {
        self.take(n, |_| {})
    }

    fn read_into(&mut self, n: usize, out: &mut Vec<u8>) -> Result<(), Rejection> {
        self.take(n, |chunk| out.extend_from_slice(chunk))
    }

    /// Consumes `n` bytes of the current record, handing each buffered chunk to `sink`.
    fn take(&mut self, n: usize, mut sink: impl FnMut(&[u8])) -> Result<(), Rejection> {
        if n > self.left {
            return Err(self.malformed(format!(
                "a field of {n} bytes runs past its length ({} bytes left)",
                self.left
            )));
        }
        self.left -= n;
        let mut n = n;
        while n > 0 {
            let codec = self.codec;
            let buf = self.src.fill_buf().map_err(|e| corrupt(codec.failed(e)))?;
            if buf.is_empty() {
                return Err(self.malformed("the batch ends inside it"));
            }
            let k = n.min(buf.len());
            sink(&buf[..k]);
            self.src.consume(k);
            n -= k;
        }
        Ok(())
    }
}

fn zigzag(raw: u64) -> i64 {
    (raw >> 1) as i64 ^ -((raw & 1) as i64)
}
