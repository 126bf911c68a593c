//! The records inside a v2 batch, read in place from its (decompressed) records section: the
//! one record decoder, used by the produce validator, timestamp searches and the segment
//! readers. Every record is checked as Kafka's LogValidator checks it: zigzag varints no
//! longer than their type allows (timestamp deltas are varlongs), length-prefixed fields that
//! never run past the record's length and leave nothing after them, offset deltas 0, 1, 2, ...
//! in order, header keys present and UTF-8 (consumers decode them into strings), and exactly
//! the records the batch declares. Nothing is copied: fields are slices of the section.
//!
//! Record: length varint | attributes i8 | timestamp delta varlong | offset delta varint |
//! key length varint (-1 = null) | key | value length varint | value | header count varint |
//! headers (key length varint | key | value length varint (-1 = null) | value).
//!
//! The readers walk a batch's section whole (they decompress it anyway). The validator reads a
//! compressed batch from its decompressor through a window (`walk_batch`): each record is
//! read by the same code once it is whole in the window, so what a batch holds in memory is
//! bounded by the window or its largest record, not by what the whole batch expands to.

use std::cell::Cell;
use std::io::Read;

use super::batch::{BatchHeader, BATCH_HEADER_LEN};
use super::decompress::{Codec, DecompressError, Decompressed};

/// Bytes a compressed batch is decompressed in at a time (a larger record grows it). Each
/// thread keeps one window for its next batch: a fresh buffer per batch would cost page
/// faults (and zeroing) on every one.
const WINDOW: usize = 64 * 1024;

thread_local! {
    static SPARE_WINDOW: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// Why a batch's records do not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("the batch declares {declared} records but holds {held}")]
    Fewer { declared: i32, held: i32 },
    #[error("the batch holds more than the {declared} records it declares")]
    More { declared: i32 },
    #[error("record {index} is malformed: {problem}")]
    Malformed { index: i32, problem: Malformed },
    #[error(
        "record {index} has offset delta {delta}; a batch's records are numbered 0, 1, 2, ... \
         in order (with gaps only where a cleaner removed records), up to its last offset delta"
    )]
    OutOfOrder { index: i32, delta: i32 },
    #[error("a header key of record {index} is not UTF-8")]
    HeaderKeyNotUtf8 { index: i32 },
}

impl RecordError {
    /// The record it is about, when it is about one (ProduceResponse's `record_errors`).
    pub(crate) fn record(&self) -> Option<i32> {
        match self {
            RecordError::Fewer { .. } | RecordError::More { .. } => None,
            RecordError::Malformed { index, .. }
            | RecordError::OutOfOrder { index, .. }
            | RecordError::HeaderKeyNotUtf8 { index } => Some(*index),
        }
    }
}

/// What is wrong inside one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    #[error("its fields run past its length")]
    PastLength,
    #[error("the batch ends inside it")]
    Ended,
    #[error("a varint longer than its type allows")]
    VarintTooLong,
    #[error("a varlong out of the int64 range")]
    VarlongOutOfRange,
    #[error("a varint out of the int32 range")]
    VarintOutOfRange,
    #[error("length {0}")]
    Length(i64),
    #[error("{what} length {length}")]
    FieldLength { what: &'static str, length: i32 },
    #[error("header count {0}")]
    HeaderCount(i32),
    #[error("{0} bytes of its length are left after its fields")]
    Leftover(usize),
}

/// One record, its fields lent from the records section (its headers went to
/// [`Visitor::header`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Record<'a> {
    /// Its place in the batch.
    pub(crate) index: i32,
    /// Its offset less the batch's base offset: its index, unless a cleaner removed records
    /// before it (a compacted topic's cleaned batches keep their records' offsets).
    pub(crate) offset_delta: i32,
    pub(crate) timestamp_delta: i64,
    pub(crate) key: Option<&'a [u8]>,
    pub(crate) value: Option<&'a [u8]>,
}

/// What is done with each record of a batch, as it is read.
pub(crate) trait Visitor<'a> {
    type Error: From<RecordError>;

    /// Whether [`Visitor::header`] gets the headers of the record at `offset_delta` (asked
    /// before they are read; they are checked either way).
    fn wants_headers(&mut self, offset_delta: i32) -> bool;

    /// A header of the record being read, before [`Visitor::record`] gets the record.
    fn header(&mut self, key: &'a str, value: Option<&'a [u8]>);

    /// A record, once all of it is read and checked.
    fn record(&mut self, record: Record<'a>) -> Result<(), Self::Error>;
}

/// The offset deltas the next record of a batch may have: growing with each record and
/// leaving room for the records after it below the batch's last offset delta. A produced
/// batch declares one record per offset, so its deltas can only be 0, 1, 2, ...; a cleaned
/// one may skip some.
struct Numbering {
    next: i64,
    last: i64,
    declared: i64,
}

impl Numbering {
    fn of(header: &BatchHeader) -> Numbering {
        Numbering::new(header.record_count, header.last_offset_delta)
    }

    fn new(declared: i32, last: i32) -> Numbering {
        Numbering {
            next: 0,
            last: last.into(),
            declared: declared.into(),
        }
    }

    fn take(&mut self, index: i32, delta: i32) -> Result<(), RecordError> {
        let after = self.declared - 1 - i64::from(index);
        let at = i64::from(delta);
        if at < self.next || at > self.last - after {
            return Err(RecordError::OutOfOrder { index, delta });
        }
        self.next = at + 1;
        Ok(())
    }
}

/// Reads the `declared` records of a records section (decompressed) in order, once, handing
/// each to `visitor`; fails at the first record that is malformed or out of order (offset
/// deltas growing up to `last_delta`), and when the section holds fewer or more records than
/// declared.
pub(crate) fn walk_records<'a, V: Visitor<'a>>(
    declared: i32,
    last_delta: i32,
    section: &'a [u8],
    visitor: &mut V,
) -> Result<(), V::Error> {
    let mut rest = Fields {
        bytes: section,
        pos: 0,
    };
    let mut numbering = Numbering::new(declared, last_delta);
    for index in 0..declared {
        if rest.pos == rest.bytes.len() {
            return Err(fewer(declared, index).into());
        }
        next_record(&mut rest, index, &mut numbering, visitor)?;
    }
    if rest.pos != rest.bytes.len() {
        return Err(RecordError::More { declared }.into());
    }
    Ok(())
}

/// Walks the records of one batch (its whole bytes, header and CRC checked) for a caller that
/// wants each record but no headers: in place when uncompressed, else from a decompressor
/// that fails past `max_uncompressed` bytes, through a window. Reading to the end also checks
/// the compressed stream's own trailer and checksums.
pub(crate) fn walk_batch<E>(
    header: &BatchHeader,
    batch: &[u8],
    max_uncompressed: usize,
    visit: impl for<'b> FnMut(Record<'b>) -> Result<(), E>,
) -> Result<(), E>
where
    E: From<RecordError> + From<DecompressError>,
{
    let codec = Codec::from_attributes(header.attributes)?;
    let section = &batch[BATCH_HEADER_LEN..header.size];
    let mut each = Each(visit);
    if codec == Codec::None {
        return walk_records(
            header.record_count,
            header.last_offset_delta,
            section,
            &mut each,
        );
    }
    let mut numbering = Numbering::of(header);
    let stream = Decompressed::new(codec, section, max_uncompressed)?;
    let mut window = Window::new(stream, codec);
    let declared = header.record_count;
    for index in 0..declared {
        // The record's length (a varint of at most five bytes), then the whole record.
        let available = window.fill(5)?;
        if available == 0 {
            return Err(fewer(declared, index).into());
        }
        let mut length = Fields {
            bytes: window.bytes(),
            pos: 0,
        };
        let total = record_length(&mut length)
            .map_err(|problem| RecordError::Malformed { index, problem })?
            .saturating_add(length.pos);
        window.fill(total)?;
        let read = {
            let mut record = Fields {
                bytes: window.bytes(),
                pos: 0,
            };
            next_record(&mut record, index, &mut numbering, &mut each)?;
            record.pos
        };
        window.consume(read);
    }
    if window.fill(1)? != 0 {
        return Err(RecordError::More { declared }.into());
    }
    Ok(())
}

/// A visitor of each record without its headers.
struct Each<F>(F);

impl<'a, E, F> Visitor<'a> for Each<F>
where
    E: From<RecordError>,
    F: FnMut(Record<'a>) -> Result<(), E>,
{
    type Error = E;

    fn wants_headers(&mut self, _: i32) -> bool {
        false
    }

    fn header(&mut self, _: &'a str, _: Option<&'a [u8]>) {}

    fn record(&mut self, record: Record<'a>) -> Result<(), E> {
        (self.0)(record)
    }
}

/// The decompressed records of a batch, a window of them at a time.
struct Window<'a> {
    stream: Decompressed<'a>,
    codec: Codec,
    /// Bytes `start..end` are read and not consumed yet.
    buf: Vec<u8>,
    start: usize,
    end: usize,
    ended: bool,
}

impl<'a> Window<'a> {
    fn new(stream: Decompressed<'a>, codec: Codec) -> Window<'a> {
        let mut buf = SPARE_WINDOW.take();
        buf.resize(WINDOW, 0);
        Window {
            stream,
            codec,
            buf,
            start: 0,
            end: 0,
            ended: false,
        }
    }

    /// Reads until `n` bytes are available (fewer only at the end of the stream), growing the
    /// window as the bytes come for a record larger than it: how many are.
    fn fill(&mut self, n: usize) -> Result<usize, DecompressError> {
        while self.end - self.start < n && !self.ended {
            if self.end == self.buf.len() {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
                if self.end == self.buf.len() {
                    let grown = (self.buf.len() * 2).min(n.max(self.buf.len()));
                    self.buf.resize(grown, 0);
                }
            }
            let read = self.stream.read(&mut self.buf[self.end..]);
            match read.map_err(|e| self.codec.failed(e))? {
                0 => self.ended = true,
                got => self.end += got,
            }
        }
        Ok(self.end - self.start)
    }

    fn bytes(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    fn consume(&mut self, n: usize) {
        self.start += n;
    }
}

impl Drop for Window<'_> {
    /// Keeps the buffer for the thread's next batch, unless a large record grew it.
    fn drop(&mut self) {
        if self.buf.len() == WINDOW {
            SPARE_WINDOW.set(std::mem::take(&mut self.buf));
        }
    }
}

fn fewer(declared: i32, held: i32) -> RecordError {
    RecordError::Fewer { declared, held }
}

/// Reads the record at `index` from `rest` and hands it to `visitor`.
#[inline(always)]
fn next_record<'a, V: Visitor<'a>>(
    rest: &mut Fields<'a>,
    index: i32,
    numbering: &mut Numbering,
    visitor: &mut V,
) -> Result<(), V::Error> {
    let record = read_record(rest, index, numbering, visitor).map_err(|problem| match problem {
        Problem::Malformed(problem) => RecordError::Malformed { index, problem },
        Problem::Rule(error) => error,
    })?;
    visitor.record(record)
}

/// A record's length: at most five bytes of varint, within 0..=i32::MAX. It is read outside
/// the record: running out there is the batch ending inside it.
#[inline(always)]
fn record_length(rest: &mut Fields<'_>) -> Result<usize, Malformed> {
    let length = zigzag(rest.raw_varint(5, Malformed::Ended)?);
    i32::try_from(length)
        .ok()
        .and_then(|l| usize::try_from(l).ok())
        .ok_or(Malformed::Length(length))
}

enum Problem {
    Malformed(Malformed),
    Rule(RecordError),
}

impl From<Malformed> for Problem {
    fn from(problem: Malformed) -> Problem {
        Problem::Malformed(problem)
    }
}

/// Reads and checks the record at `index`, its headers going to `visitor` if it wants them.
#[inline(always)]
fn read_record<'a, V: Visitor<'a>>(
    rest: &mut Fields<'a>,
    index: i32,
    numbering: &mut Numbering,
    visitor: &mut V,
) -> Result<Record<'a>, Problem> {
    let length = record_length(rest)?;
    let mut fields = Fields {
        bytes: rest.take(length, Malformed::Ended)?,
        pos: 0,
    };
    fields.byte()?; // attributes: unused in v2
    let timestamp_delta = fields.varlong()?;
    let delta = fields.varint(Malformed::PastLength)?;
    let key = fields.nullable("key")?;
    let value = fields.nullable("value")?;
    let count = fields.varint(Malformed::PastLength)?;
    if count < 0 {
        return Err(Malformed::HeaderCount(count).into());
    }
    let wanted = visitor.wants_headers(delta);
    for _ in 0..count {
        let key_length = fields.varint(Malformed::PastLength)?;
        if key_length < 0 {
            return Err(Malformed::FieldLength {
                what: "header key",
                length: key_length,
            }
            .into());
        }
        let key = fields.take(key_length as usize, Malformed::PastLength)?;
        let Ok(key) = std::str::from_utf8(key) else {
            return Err(Problem::Rule(RecordError::HeaderKeyNotUtf8 { index }));
        };
        let value = fields.nullable("header value")?;
        if wanted {
            visitor.header(key, value);
        }
    }
    let left = fields.bytes.len() - fields.pos;
    if left != 0 {
        return Err(Malformed::Leftover(left).into());
    }
    numbering.take(index, delta).map_err(Problem::Rule)?;
    Ok(Record {
        index,
        offset_delta: delta,
        timestamp_delta,
        key,
        value,
    })
}

/// Reads varints and length-prefixed fields from a slice, never past its end.
#[derive(Debug, Clone, Copy)]
struct Fields<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Fields<'a> {
    #[inline(always)]
    fn byte(&mut self) -> Result<u8, Malformed> {
        let byte = *self.bytes.get(self.pos).ok_or(Malformed::PastLength)?;
        self.pos += 1;
        Ok(byte)
    }

    /// Little-endian base-128 digits, at most `max_bytes` of them; `short` when the bytes end
    /// inside.
    #[inline(always)]
    fn raw_varint(&mut self, max_bytes: u32, short: Malformed) -> Result<u64, Malformed> {
        let first = *self.bytes.get(self.pos).ok_or(short)?;
        self.pos += 1;
        if first & 0x80 == 0 {
            return Ok(u64::from(first));
        }
        self.raw_varint_rest(first, max_bytes, short)
    }

    #[inline(always)]
    fn raw_varint_rest(
        &mut self,
        first: u8,
        max_bytes: u32,
        short: Malformed,
    ) -> Result<u64, Malformed> {
        let mut raw = u64::from(first & 0x7f);
        let mut byte = first;
        let mut shift = 0;
        while byte & 0x80 != 0 {
            shift += 7;
            if shift >= 7 * max_bytes {
                return Err(Malformed::VarintTooLong);
            }
            byte = *self.bytes.get(self.pos).ok_or(short)?;
            self.pos += 1;
            // The 10th byte of a varlong may carry only the 64th bit.
            if shift == 63 && byte & 0x7e != 0 {
                return Err(Malformed::VarlongOutOfRange);
            }
            raw |= u64::from(byte & 0x7f) << shift;
        }
        Ok(raw)
    }

    #[inline(always)]
    fn varlong(&mut self) -> Result<i64, Malformed> {
        Ok(zigzag(self.raw_varint(10, Malformed::PastLength)?))
    }

    #[inline(always)]
    fn varint(&mut self, short: Malformed) -> Result<i32, Malformed> {
        let value = zigzag(self.raw_varint(5, short)?);
        i32::try_from(value).map_err(|_| Malformed::VarintOutOfRange)
    }

    #[inline(always)]
    fn take(&mut self, n: usize, short: Malformed) -> Result<&'a [u8], Malformed> {
        let end = self.pos.checked_add(n).ok_or(short)?;
        let field = self.bytes.get(self.pos..end).ok_or(short)?;
        self.pos = end;
        Ok(field)
    }

    /// A length-prefixed field that may be null (-1).
    #[inline(always)]
    fn nullable(&mut self, what: &'static str) -> Result<Option<&'a [u8]>, Malformed> {
        let length = self.varint(Malformed::PastLength)?;
        if length < 0 {
            if length < -1 {
                return Err(Malformed::FieldLength { what, length });
            }
            return Ok(None);
        }
        self.take(length as usize, Malformed::PastLength).map(Some)
    }
}

fn zigzag(raw: u64) -> i64 {
    (raw >> 1) as i64 ^ -((raw & 1) as i64)
}

#[cfg(test)]
mod tests;
