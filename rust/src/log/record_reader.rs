//! The one decoder of a batch's records, for the produce validator, timestamp searches and the
//! analytics readers: every record is walked and checked, with zigzag varints no longer than
//! their type allows (timestamp deltas are varlongs), and length-prefixed fields that never run
//! past the current record's length. A [`RecordVisitor`] gets each record; the key, value and
//! headers of the records it wants are handed to it as slices (of the input where they lie in
//! one piece, else of a buffer that holds one field). Header keys are checked to be UTF-8, as
//! consumers decode them into strings.
//!
//! Record: length varint | attributes i8 | timestamp delta varlong | offset delta varint |
//! key length varint (-1 = null) | key | value length varint | value | header count varint |
//! headers (key length varint | key | value length varint (-1 = null) | value).

use std::fmt::Display;
use std::io::{BufRead, BufReader};

use super::batch::{BatchHeader, BATCH_HEADER_LEN};
use super::decompress::{Codec, Decompressed};
use super::validate::{corrupt, invalid_record, Rejection};

/// Large enough that one read of a decompressor usually holds several records.
const STREAM_BUFFER: usize = 32 * 1024;

/// What a walk of a batch's records hands out, record by record, in order.
pub(crate) trait RecordVisitor {
    /// Whether the key, value and headers of record `index` (timestamp `timestamp`) are wanted;
    /// those not wanted are checked and skipped.
    fn wants(&mut self, index: i32, timestamp: i64) -> Result<bool, Rejection>;

    /// A wanted record's key, then its value.
    fn key(&mut self, _key: Option<&[u8]>) {}
    fn value(&mut self, _value: Option<&[u8]>) {}

    /// A header of a wanted record.
    fn header(&mut self, _key: &str, _value: Option<&[u8]>) {}

    /// Record `index` was read whole and is well-formed.
    fn done(&mut self, index: i32, timestamp: i64) -> Result<(), Rejection>;
}

/// A visitor that wants no record's fields: it gets each record's index and timestamp once
/// the record is checked.
impl<F: FnMut(i32, i64) -> Result<(), Rejection>> RecordVisitor for F {
    fn wants(&mut self, _: i32, _: i64) -> Result<bool, Rejection> {
        Ok(false)
    }

    fn done(&mut self, index: i32, timestamp: i64) -> Result<(), Rejection> {
        self(index, timestamp)
    }
}

/// Walks the records of one batch (its bytes, whose header and CRC are checked): exactly
/// `record_count` records, each exactly its length, numbered 0, 1, 2, ... in order, and
/// nothing after them. Compressed records are read through a decompressor that fails past
/// `max_uncompressed` bytes.
pub(crate) fn walk_records(
    header: &BatchHeader,
    batch: &[u8],
    max_uncompressed: usize,
    visitor: &mut impl RecordVisitor,
) -> Result<(), Rejection> {
    let codec = Codec::from_attributes(header.attributes).map_err(corrupt)?;
    let section = &batch[BATCH_HEADER_LEN..header.size];
    match codec {
        Codec::None => walk(Records::new(section, codec), header, visitor),
        _ => {
            let stream = Decompressed::new(codec, section, max_uncompressed).map_err(corrupt)?;
            let buffered = BufReader::with_capacity(STREAM_BUFFER, stream);
            walk(Records::new(buffered, codec), header, visitor)
        }
    }
}

/// Walks the records of a batch whose records section is `records`, already decompressed.
pub(crate) fn walk_decompressed(
    header: &BatchHeader,
    records: &[u8],
    visitor: &mut impl RecordVisitor,
) -> Result<(), Rejection> {
    walk(Records::new(records, Codec::None), header, visitor)
}

fn walk<R: BufRead>(
    mut records: Records<R>,
    header: &BatchHeader,
    visitor: &mut impl RecordVisitor,
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
        if offset_delta != index {
            return Err(invalid_record(
                Some(index),
                format!(
                    "record {index} has offset delta {offset_delta}; a batch's records are \
                     numbered 0, 1, 2, ... in order"
                ),
            ));
        }
        let timestamp = header.record_timestamp(timestamp_delta);
        let wanted = visitor.wants(index, timestamp)?;
        records.key_or_value(Field::Key, wanted, visitor)?;
        records.key_or_value(Field::Value, wanted, visitor)?;
        let headers = records.varint()?;
        if headers < 0 {
            return Err(records.malformed(format!("header count {headers}")));
        }
        for _ in 0..headers {
            records.header(wanted, visitor)?;
        }
        if records.left != 0 {
            return Err(records.malformed(format!(
                "{} bytes of its length are left after its fields",
                records.left
            )));
        }
        visitor.done(index, timestamp)?;
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

#[derive(Clone, Copy)]
enum Field {
    Key,
    Value,
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
    /// Holds one header key while its UTF-8 is checked (and its value is read).
    key: Vec<u8>,
    /// Holds a wanted field that does not lie in one piece of the stream's buffer.
    field: Vec<u8>,
}

impl<R: BufRead> Records<R> {
    fn new(src: R, codec: Codec) -> Records<R> {
        Records {
            src,
            codec,
            index: 0,
            left: 0,
            key: Vec::new(),
            field: Vec::new(),
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

    /// The length of a field that may be null (-1: `None`).
    fn nullable_length(&mut self, what: &str) -> Result<Option<usize>, Rejection> {
        let len = self.varint()?;
        if len < -1 {
            return Err(self.malformed(format!("{what} length {len}")));
        }
        Ok(usize::try_from(len).ok())
    }

    /// A record's key or value, handed to `visitor` if `wanted`.
    fn key_or_value(
        &mut self,
        field: Field,
        wanted: bool,
        visitor: &mut impl RecordVisitor,
    ) -> Result<(), Rejection> {
        let what = match field {
            Field::Key => "key",
            Field::Value => "value",
        };
        let len = self.nullable_length(what)?;
        if !wanted {
            return self.skip(len.unwrap_or(0));
        }
        let mut hand = |bytes: Option<&[u8]>| match field {
            Field::Key => visitor.key(bytes),
            Field::Value => visitor.value(bytes),
        };
        match len {
            None => {
                hand(None);
                Ok(())
            }
            Some(len) => self.field(len, |bytes| hand(Some(bytes))),
        }
    }

    /// A header: its key present and UTF-8, its value nullable; handed to `visitor` if
    /// `wanted`.
    fn header(&mut self, wanted: bool, visitor: &mut impl RecordVisitor) -> Result<(), Rejection> {
        self.header_key()?;
        let len = self.nullable_length("header value")?;
        if !wanted {
            return self.skip(len.unwrap_or(0));
        }
        let key = std::mem::take(&mut self.key);
        let name = std::str::from_utf8(&key).unwrap_or_default(); // checked by header_key
        let read = match len {
            None => {
                visitor.header(name, None);
                Ok(())
            }
            Some(len) => self.field(len, |value| visitor.header(name, Some(value))),
        };
        self.key = key;
        read
    }

    /// `n` bytes of the current record as one slice: of the stream's buffer where they lie in
    /// one piece of it (always, for records already in memory), else copied together.
    fn field(&mut self, n: usize, visit: impl FnOnce(&[u8])) -> Result<(), Rejection> {
        self.check_room(n)?;
        let codec = self.codec;
        let buf = self.src.fill_buf().map_err(|e| corrupt(codec.failed(e)))?;
        if buf.len() >= n {
            visit(&buf[..n]);
            self.src.consume(n);
            self.left -= n;
            return Ok(());
        }
        let mut field = std::mem::take(&mut self.field);
        field.clear();
        let read = self.read_into(n, &mut field);
        if read.is_ok() {
            visit(&field);
        }
        self.field = field;
        read
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
        self.check_room(n)?;
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

impl<R> Records<R> {
    /// A field of `n` bytes fits in what is left of the current record.
    fn check_room(&self, n: usize) -> Result<(), Rejection> {
        if n > self.left {
            return Err(invalid_record(
                Some(self.index),
                format!(
                    "record {} is malformed: a field of {n} bytes runs past its length ({} \
                     bytes left)",
                    self.index, self.left
                ),
            ));
        }
        Ok(())
    }
}

fn zigzag(raw: u64) -> i64 {
    (raw >> 1) as i64 ^ -((raw & 1) as i64)
}
