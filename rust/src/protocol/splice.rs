//! Responses whose record data is not copied: a Fetch answer is the encoded response with the
//! records left where they are (slices of cached segment and write-ahead objects), written
//! with vectored writes.
//!
//! The codec copies a records field into its output with one `put_slice` of the field's
//! bytes. So the response body carries a stand-in in each records field: a slice of a
//! read-only, never-touched zero mapping whose offset names the slot holding the real
//! slices, with the real length (sizes and length prefixes come out right). The output
//! buffer recognises a stand-in by its address and puts the slot's slices in its place; any
//! other write is copied as usual. A stand-in that arrives any other way (split, or twice) is
//! reported, and the caller encodes the response the ordinary way instead.

use std::io;
use std::ops::Range;
use std::sync::OnceLock;

use bytes::buf::UninitSlice;
use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::protocol::buf::ByteBufMut;
use kafka_protocol::protocol::{Encodable, HeaderVersion};

use super::header::{ResponseEncoding, WireError};

/// Virtual size of the stand-in mapping: slot offsets plus the longest stand-in must fit.
/// Read-only and never touched, so it costs address space only.
const STAND_IN_SPACE: usize = 256 << 20;

/// An encoded response frame (size prefix included): its bytes in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ResponseFrame {
    chunks: Vec<Bytes>,
    len: usize,
}

impl ResponseFrame {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn chunks(&self) -> &[Bytes] {
        &self.chunks
    }

    /// Replaces the first chunk with one of the same length (a field set after encoding).
    pub(crate) fn replace_head(&mut self, head: Bytes) {
        debug_assert_eq!(head.len(), self.chunks[0].len());
        self.chunks[0] = head;
    }

    /// One contiguous copy.
    #[cfg(test)]
    pub(crate) fn to_bytes(&self) -> Bytes {
        match self.chunks.as_slice() {
            [one] => one.clone(),
            chunks => chunks.concat().into(),
        }
    }
}

impl From<Bytes> for ResponseFrame {
    fn from(bytes: Bytes) -> Self {
        ResponseFrame {
            len: bytes.len(),
            chunks: vec![bytes],
        }
    }
}

/// The record data of one response, by slot; hands out the stand-ins that name the slots.
#[derive(Debug, Default)]
pub(crate) struct Splices {
    slots: Vec<Option<Vec<Bytes>>>,
}

impl Splices {
    /// What to put in a records field for `slices`: a stand-in when the data can be spliced,
    /// else the data itself, in one piece.
    pub(crate) fn stand_in(&mut self, slices: Vec<Bytes>) -> Bytes {
        let len: usize = slices.iter().map(Bytes::len).sum();
        let slot = self.slots.len();
        match stand_in_space() {
            Some(space) if len > 0 && slot + len <= space.len() => {
                self.slots.push(Some(slices));
                Bytes::from_static(&space[slot..slot + len])
            }
            _ => match slices.as_slice() {
                [one] => one.clone(),
                _ => slices.concat().into(),
            },
        }
    }

    /// The data of the stand-in `slice`, once; None if `slice` is not one.
    fn take(&mut self, slice: &[u8]) -> Taken {
        let Some(space) = stand_in_space() else {
            return Taken::NotAStandIn;
        };
        let Some(slot) = (slice.as_ptr() as usize).checked_sub(space.as_ptr() as usize) else {
            return Taken::NotAStandIn;
        };
        if slot >= space.len() {
            return Taken::NotAStandIn;
        }
        match self.slots.get_mut(slot).and_then(Option::take) {
            Some(slices) if slices.iter().map(Bytes::len).sum::<usize>() == slice.len() => {
                Taken::Slices(slices)
            }
            _ => Taken::Mismatch,
        }
    }

    fn all_taken(&self) -> bool {
        self.slots.iter().all(Option::is_none)
    }
}

enum Taken {
    NotAStandIn,
    Slices(Vec<Bytes>),
    /// Part of a stand-in, or one already spliced: the codec wrote it some other way.
    Mismatch,
}

/// The stand-in mapping: anonymous, read-only, reserved once for the process.
fn stand_in_space() -> Option<&'static [u8]> {
    static SPACE: OnceLock<Option<&'static [u8]>> = OnceLock::new();
    *SPACE.get_or_init(|| {
        // SAFETY: a fresh anonymous private mapping (no file, no address hint); it is never
        // unmapped, so the slice over it lives as long as the process, and PROT_READ keeps
        // its zero pages unwritten.
        unsafe {
            let at = libc::mmap(
                std::ptr::null_mut(),
                STAND_IN_SPACE,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            );
            if at == libc::MAP_FAILED {
                tracing::warn!(error = %io::Error::last_os_error(),
                    "no address space for spliced responses; fetch responses copy their records");
                return None;
            }
            Some(std::slice::from_raw_parts(at.cast::<u8>(), STAND_IN_SPACE))
        }
    })
}

/// Encodes a response frame with the record data of `splices` in place of its stand-ins.
/// `Err(None)`: a stand-in was not written in one piece; encode without stand-ins instead.
pub(crate) fn encode_spliced<T: Encodable + HeaderVersion>(
    correlation_id: i32,
    version: i16,
    body: &T,
    splices: Splices,
) -> Result<ResponseFrame, Option<WireError>> {
    let encoding = ResponseEncoding::new(correlation_id, version, body).map_err(Some)?;
    let spliced: usize = splices
        .slots
        .iter()
        .flatten()
        .flatten()
        .map(Bytes::len)
        .sum();
    let mut out = SplicingBuf {
        done: Vec::new(),
        done_len: 0,
        tail: BytesMut::with_capacity(encoding.len.saturating_sub(spliced)),
        splices,
        mismatch: false,
    };
    encoding.write(&mut out).map_err(Some)?;
    if out.mismatch || !out.splices.all_taken() {
        return Err(None);
    }
    let mut chunks = out.done;
    if !out.tail.is_empty() {
        chunks.push(out.tail.freeze());
    }
    Ok(ResponseFrame {
        len: encoding.len,
        chunks,
    })
}

/// The codec's output: bytes written so far, in chunks (spliced record data between copied
/// runs), and the run being written.
struct SplicingBuf {
    done: Vec<Bytes>,
    done_len: usize,
    tail: BytesMut,
    splices: Splices,
    mismatch: bool,
}

impl SplicingBuf {
    /// Copies every chunk back into one buffer: only for an encoder that goes back to patch
    /// bytes it wrote before (FetchResponse's never does).
    fn flatten(&mut self) {
        if self.done.is_empty() {
            return;
        }
        let mut all = BytesMut::with_capacity(self.done_len + self.tail.len());
        for chunk in self.done.drain(..) {
            all.extend_from_slice(&chunk);
        }
        all.extend_from_slice(&self.tail);
        self.tail = all;
        self.done_len = 0;
    }
}

// SAFETY: every method hands on to `tail`, a BytesMut, whose BufMut contract holds.
unsafe impl BufMut for SplicingBuf {
    fn remaining_mut(&self) -> usize {
        self.tail.remaining_mut()
    }

    unsafe fn advance_mut(&mut self, cnt: usize) {
        // SAFETY: the caller initialised `cnt` bytes of `chunk_mut`, which is the tail's.
        unsafe { self.tail.advance_mut(cnt) }
    }

    fn chunk_mut(&mut self) -> &mut UninitSlice {
        self.tail.chunk_mut()
    }

    fn put_slice(&mut self, src: &[u8]) {
        match self.splices.take(src) {
            Taken::Slices(slices) => {
                if !self.tail.is_empty() {
                    self.done_len += self.tail.len();
                    self.done.push(self.tail.split().freeze());
                }
                for slice in slices.into_iter().filter(|s| !s.is_empty()) {
                    self.done_len += slice.len();
                    self.done.push(slice);
                }
            }
            Taken::Mismatch => {
                self.mismatch = true;
                self.tail.extend_from_slice(src);
            }
            Taken::NotAStandIn => self.tail.extend_from_slice(src),
        }
    }
}

impl ByteBufMut for SplicingBuf {
    fn offset(&self) -> usize {
        self.done_len + self.tail.len()
    }

    fn seek(&mut self, offset: usize) {
        if offset < self.done_len {
            self.flatten();
        }
        self.tail.resize(offset - self.done_len, 0);
    }

    fn range(&mut self, r: Range<usize>) -> &mut [u8] {
        if r.start < self.done_len {
            self.flatten();
        }
        let base = self.done_len;
        &mut self.tail[r.start - base..r.end - base]
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
    use kafka_protocol::messages::FetchResponse;

    use super::*;
    use crate::protocol::header::encode_response;
    use crate::protocol::topic_name;

    /// Partition `p`'s records as the reader hands them over: a few slices of "objects".
    fn slices(p: usize) -> Vec<Bytes> {
        (0..p % 4)
            .map(|i| Bytes::from(vec![(p * 7 + i) as u8; 100 + 37 * i + p]))
            .collect()
    }

    fn response(mut records: impl FnMut(usize) -> Option<Bytes>) -> FetchResponse {
        let topics = (0..3)
            .map(|t| {
                let partitions = (0..5)
                    .map(|i| {
                        let p = t * 5 + i;
                        PartitionData::default()
                            .with_partition_index(i as i32)
                            .with_high_watermark(p as i64 * 11)
                            .with_records(records(p))
                    })
                    .collect();
                FetchableTopicResponse::default()
                    .with_topic(topic_name(&format!("t{t}")))
                    .with_partitions(partitions)
            })
            .collect();
        FetchResponse::default().with_responses(topics)
    }

    /// Byte for byte what the codec writes with the records copied, at every Fetch version
    /// served, with record data in place and not copied.
    #[test]
    fn a_spliced_fetch_response_is_the_copied_one() {
        let whole = |p: usize| (p % 5 != 4).then(|| Bytes::from(slices(p).concat()));
        for version in 4..=17 {
            let copied = encode_response(9, version, &response(whole)).unwrap();
            let mut splices = Splices::default();
            let body = response(|p| (p % 5 != 4).then(|| splices.stand_in(slices(p))));
            let frame = encode_spliced(9, version, &body, splices).unwrap();
            assert_eq!(frame.to_bytes(), copied, "v{version}");
            assert_eq!(frame.len(), copied.len());
        }
    }

    #[test]
    fn the_record_slices_go_out_as_they_are() {
        let data = Bytes::from(vec![5u8; 4096]);
        let mut splices = Splices::default();
        let records = splices.stand_in(vec![data.slice(..1000), data.slice(2000..)]);
        let body = FetchResponse::default().with_responses(vec![FetchableTopicResponse::default()
            .with_partitions(vec![PartitionData::default().with_records(Some(records))])]);
        let frame = encode_spliced(1, 12, &body, splices).unwrap();
        let pointers: Vec<*const u8> = frame.chunks().iter().map(|c| c.as_ptr()).collect();
        assert!(pointers.contains(&data.as_ptr()));
        assert!(pointers.contains(&data[2000..].as_ptr()));
    }

    #[test]
    fn a_stand_in_written_twice_is_reported() {
        let mut splices = Splices::default();
        let records = splices.stand_in(vec![Bytes::from_static(b"0123456789")]);
        let partition = PartitionData::default().with_records(Some(records));
        let twice = vec![partition.clone(), partition];
        let body = FetchResponse::default().with_responses(vec![
            FetchableTopicResponse::default().with_partitions(twice)
        ]);
        assert_eq!(encode_spliced(1, 12, &body, splices), Err(None));
    }

    #[test]
    fn empty_records_need_no_stand_in() {
        let mut splices = Splices::default();
        assert!(splices.stand_in(Vec::new()).is_empty());
        assert!(splices.stand_in(vec![Bytes::new()]).is_empty());
        assert!(splices.all_taken());
    }
}
