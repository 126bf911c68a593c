//! Length-prefixed Kafka frames: a 4-byte big-endian size, then that many bytes.
//!
//! Memory follows the bytes that actually arrive, never the size a header declares: a client
//! announcing 100 MiB and sending 2 MiB costs at most twice that, and the caller counts what
//! arrives against its budgets (server/budget.rs) before asking for more.
//!
//! A frame of `OWN_BUFFER_FROM` bytes or more ends up in a buffer of its own, exactly its
//! size: its produced batches may stay cached as slices of it (`wal::object::slices_pay`),
//! and a slice keeps its whole allocation alive. Grown by doubling it would keep up to twice
//! its size, and the start of the next request with it. Up to `ALLOCATE_AHEAD` of it is
//! allocated before it arrives, so a typical produce request is received into its final
//! buffer without a copy: an allocation is address space until written to (pages the
//! allocator recycles were resident already), so what is resident still follows what arrived.
//! Before each read, the pages it may fill (at most the read's limit) are mapped in one call
//! (`alloc::prefault`) rather than faulted in one at a time as the kernel copies bytes in.

use bytes::{Buf, Bytes, BytesMut};
use std::future::poll_fn;
use std::pin::Pin;
use std::task::Poll;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio_util::io::poll_read_buf;

/// Smallest possible request: api key, api version, correlation id, client id length.
const MIN_REQUEST_LEN: usize = 10;
/// The size prefix of every frame.
pub(crate) const FRAME_HEADER_LEN: usize = 4;

/// Frames from this size on are read into a buffer of their own (smaller ones share one).
pub(crate) const OWN_BUFFER_FROM: usize = 64 * 1024;
/// How far ahead of the bytes received a large frame's buffer is allocated: all of a typical
/// produce request (clients send at most about 1 MiB by default) at once; beyond, the buffer
/// doubles with what arrived, a copy each time.
const ALLOCATE_AHEAD: usize = 8 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("request of {size} bytes exceeds the limit of {limit} (KAFSCALE_MAX_REQUEST_BYTES)")]
    TooLarge { size: usize, limit: usize },
    #[error("request of {0} bytes is too short to hold a request header")]
    TooSmall(usize),
    #[error("connection closed in the middle of a request")]
    Truncated,
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

pub struct FrameReader<R> {
    reader: R,
    buffer: BytesMut,
    max_frame: usize,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    pub fn new(reader: R, max_frame: usize) -> FrameReader<R> {
        FrameReader {
            reader,
            buffer: BytesMut::new(),
            max_frame,
        }
    }

    pub fn get_ref(&self) -> &R {
        &self.reader
    }

    /// Bytes received and not yet handed out as a frame: the start of the next request.
    pub fn buffered(&self) -> usize {
        self.buffer.len()
    }

    /// Bytes still to arrive before the next frame is whole: the rest of its size prefix, or
    /// of its declared size once the prefix is in (0 when it is whole already, or invalid).
    pub fn missing(&self) -> usize {
        match self.declared() {
            Some(whole) => whole.saturating_sub(self.buffer.len()),
            None => FRAME_HEADER_LEN.saturating_sub(self.buffer.len()),
        }
    }

    /// The size the next frame's prefix declares, once the prefix is in (`None` before, or
    /// for a negative size, which [`Self::next_frame`] refuses).
    pub fn declared_size(&self) -> Option<usize> {
        let prefix = self.buffer.get(..FRAME_HEADER_LEN)?;
        usize::try_from(i32::from_be_bytes(prefix.try_into().unwrap())).ok()
    }

    /// The next frame's length with its prefix, once the prefix is in (0 if it is invalid).
    fn declared(&self) -> Option<usize> {
        let prefix = self.buffer.get(..FRAME_HEADER_LEN)?;
        let size = i32::from_be_bytes(prefix.try_into().unwrap());
        let whole = usize::try_from(size)
            .ok()
            .filter(|size| *size <= self.max_frame)
            .map_or(0, |size| FRAME_HEADER_LEN + size);
        Some(whole)
    }

    /// Makes room for the next read of at most `limit` bytes and returns how many it may
    /// take. The rest of a large frame goes into a buffer of its own, of up to
    /// `ALLOCATE_AHEAD` more than arrived or twice that (a copy of it each time it grows) and
    /// of exactly the frame's size in the end; a read never runs past its end, so the next
    /// request starts in a buffer of its own too.
    fn make_room(&mut self, limit: usize) -> usize {
        let whole = self.declared().unwrap_or(0);
        let have = self.buffer.len();
        if whole < FRAME_HEADER_LEN + OWN_BUFFER_FROM || have >= whole {
            self.buffer.reserve(limit);
            return limit;
        }
        let limit = limit.min(whole - have);
        // (A buffer larger than the frame: one a dropped request left, taken back by `reserve`.)
        if self.buffer.capacity() - have < limit || self.buffer.capacity() > whole {
            let capacity = whole.min((have + limit.max(ALLOCATE_AHEAD)).max(2 * have));
            let mut own = BytesMut::with_capacity(capacity);
            own.extend_from_slice(&self.buffer);
            self.buffer = own;
        }
        crate::alloc::prefault(&mut self.buffer.spare_capacity_mut()[..limit]);
        limit
    }

    /// Reads what has arrived, at most `limit` bytes (at least one, and never past the end of
    /// a large frame): everything the reader hands over without waiting, so that a TLS stream,
    /// which yields one record per read, costs one call per chunk and not one per record. `Ok(0)`: the peer closed between two
    /// requests. Each time it must wait for the peer it first calls `on_wait` with the reader
    /// and the bytes the next frame still misses ([`Self::missing`]). Cancel-safe: bytes
    /// read are kept for the next call.
    pub async fn fill(
        &mut self,
        limit: usize,
        mut on_wait: impl FnMut(&R, usize),
    ) -> Result<usize, FrameError> {
        let limit = self.make_room(limit.max(1));
        let mut read = 0;
        poll_fn(|cx| loop {
            let mut room = (&mut self.reader).take((limit - read) as u64);
            match poll_read_buf(Pin::new(&mut room), cx, &mut self.buffer) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Ok(read)),
                Poll::Ready(Ok(more)) if read + more == limit => {
                    return Poll::Ready(Ok(limit));
                }
                Poll::Ready(Ok(more)) => read += more,
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                Poll::Pending if read > 0 => return Poll::Ready(Ok(read)),
                Poll::Pending => {
                    on_wait(&self.reader, self.missing());
                    return Poll::Pending;
                }
            }
        })
        .await
        .map_err(FrameError::Io)
        .and_then(|read| {
            if read == 0 && !self.buffer.is_empty() {
                Err(FrameError::Truncated)
            } else {
                Ok(read)
            }
        })
    }

    /// The next whole frame's payload among the bytes received, if there is one. A header
    /// declaring an impossible size is an error as soon as it arrives.
    pub fn next_frame(&mut self) -> Result<Option<Bytes>, FrameError> {
        if self.buffer.len() < FRAME_HEADER_LEN {
            return Ok(None);
        }
        let size = i32::from_be_bytes(self.buffer[..FRAME_HEADER_LEN].try_into().unwrap());
        let size = usize::try_from(size).map_err(|_| FrameError::TooSmall(0))?;
        if size > self.max_frame {
            return Err(FrameError::TooLarge {
                size,
                limit: self.max_frame,
            });
        }
        if size < MIN_REQUEST_LEN {
            return Err(FrameError::TooSmall(size));
        }
        if self.buffer.len() < FRAME_HEADER_LEN + size {
            return Ok(None);
        }
        self.buffer.advance(FRAME_HEADER_LEN);
        Ok(Some(self.buffer.split_to(size).freeze()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(payload: &[u8]) -> Vec<u8> {
        let mut out = (payload.len() as i32).to_be_bytes().to_vec();
        out.extend_from_slice(payload);
        out
    }

    /// Reads with `chunk`-byte fills until a frame, EOF (`None`) or an error.
    async fn read_frame<R: AsyncRead + Unpin>(
        reader: &mut FrameReader<R>,
        chunk: usize,
    ) -> Result<Option<Bytes>, FrameError> {
        loop {
            if let Some(frame) = reader.next_frame()? {
                return Ok(Some(frame));
            }
            if reader.fill(chunk, |_, _| ()).await? == 0 {
                return Ok(None);
            }
        }
    }

    #[tokio::test]
    async fn missing_counts_down_to_the_end_of_the_next_frame() {
        let mut input = framed(&[1; 20]);
        input.extend((1000i32).to_be_bytes());
        let mut reader = FrameReader::new(&input[..], 100);
        assert_eq!(reader.missing(), FRAME_HEADER_LEN);
        reader.fill(2, |_, _| ()).await.unwrap();
        assert_eq!(reader.missing(), 2);
        reader.fill(7, |_, _| ()).await.unwrap();
        assert_eq!(reader.missing(), 24 - 9);
        reader.fill(100, |_, _| ()).await.unwrap();
        assert_eq!(reader.missing(), 0, "a whole frame is buffered");
        reader.next_frame().unwrap().unwrap();
        // The next prefix declares more than the limit: nothing is waited for.
        assert_eq!(reader.missing(), 0);
    }

    #[tokio::test]
    async fn the_declared_size_is_known_from_the_prefix_alone() {
        let mut input = (1i32 << 20).to_be_bytes().to_vec();
        input.extend_from_slice(&[0; 10]);
        let mut reader = FrameReader::new(&input[..], 100 << 20);
        assert_eq!(reader.declared_size(), None);
        reader.fill(3, |_, _| ()).await.unwrap();
        assert_eq!(reader.declared_size(), None);
        reader.fill(1, |_, _| ()).await.unwrap();
        assert_eq!(
            (reader.declared_size(), reader.buffered()),
            (Some(1 << 20), 4)
        );
        let negative = (-5i32).to_be_bytes();
        let mut reader = FrameReader::new(&negative[..], 100);
        reader.fill(4, |_, _| ()).await.unwrap();
        assert_eq!(reader.declared_size(), None);
    }

    #[tokio::test]
    async fn reads_back_to_back_frames_then_eof() {
        let mut input = framed(&[1; 12]);
        input.extend(framed(&[2; 20]));
        for chunk in [1, 7, 4096] {
            let mut reader = FrameReader::new(&input[..], 100);
            assert_eq!(
                read_frame(&mut reader, chunk).await.unwrap().unwrap().len(),
                12
            );
            assert_eq!(read_frame(&mut reader, chunk).await.unwrap().unwrap()[0], 2);
            assert!(read_frame(&mut reader, chunk).await.unwrap().is_none());
        }
    }

    #[tokio::test]
    async fn rejects_oversize_negative_tiny_and_truncated() {
        let big = framed(&[0; 101]);
        let err = read_frame(&mut FrameReader::new(&big[..], 100), 64)
            .await
            .unwrap_err();
        assert!(matches!(err, FrameError::TooLarge { size: 101, .. }));
        let negative = (-5i32).to_be_bytes();
        assert!(read_frame(&mut FrameReader::new(&negative[..], 100), 64)
            .await
            .is_err());
        let tiny = framed(&[0; 3]);
        assert!(read_frame(&mut FrameReader::new(&tiny[..], 100), 64)
            .await
            .is_err());
        let cut = &framed(&[0; 40])[..30];
        let err = read_frame(&mut FrameReader::new(cut, 100), 64)
            .await
            .unwrap_err();
        assert!(matches!(err, FrameError::Truncated));
    }

    #[tokio::test]
    async fn a_large_frame_gets_a_buffer_of_exactly_its_size() {
        let mut input = framed(&[1; 100_000]);
        input.extend(framed(&[2; 20]));
        input.extend(framed(&[3; OWN_BUFFER_FROM]));
        for chunk in [1000, 4096, 65536] {
            let mut reader = FrameReader::new(&input[..], 1 << 20);
            let large = read_frame(&mut reader, chunk).await.unwrap().unwrap();
            let small = read_frame(&mut reader, chunk).await.unwrap().unwrap();
            let last = read_frame(&mut reader, chunk).await.unwrap().unwrap();
            drop(reader);
            assert_eq!(small.len(), 20);
            // Each large frame is the only holder of its buffer, and fills it.
            for frame in [large, last] {
                assert_fills_its_own_buffer(frame, chunk);
            }
        }
    }

    fn assert_fills_its_own_buffer(frame: Bytes, chunk: usize) {
        let len = frame.len();
        let own = frame.try_into_mut().expect("a buffer of its own");
        assert_eq!((own.len(), own.capacity()), (len, len), "chunk {chunk}");
    }

    #[tokio::test]
    async fn a_large_frame_is_not_read_into_the_larger_buffer_a_dropped_one_left() {
        let mut input = framed(&[1; 300_000]);
        input.extend(framed(&[2; 100_000]));
        for chunk in [4096, 65536] {
            let mut reader = FrameReader::new(&input[..], 1 << 20);
            drop(read_frame(&mut reader, chunk).await.unwrap().unwrap());
            let next = read_frame(&mut reader, chunk).await.unwrap().unwrap();
            drop(reader);
            assert_fills_its_own_buffer(next, chunk);
        }
    }

    #[tokio::test]
    async fn a_typical_large_frame_is_received_into_its_final_buffer() {
        let input = framed(&[1; 1_000_000]);
        let mut reader = FrameReader::new(&input[..], 1 << 20);
        reader.fill(65536, |_, _| ()).await.unwrap();
        reader.fill(65536, |_, _| ()).await.unwrap();
        let final_buffer = reader.buffer.as_ptr();
        let frame = read_frame(&mut reader, 65536).await.unwrap().unwrap();
        drop(reader);
        assert_eq!(frame.as_ptr(), final_buffer.wrapping_add(FRAME_HEADER_LEN));
        assert_fills_its_own_buffer(frame, 65536);
    }

    #[tokio::test]
    async fn memory_follows_the_bytes_received_not_the_declared_size() {
        // A header declaring 100 MiB followed by 1 KiB: the buffer holds about what arrived
        // and the address space allocated ahead of it.
        let mut input = (100i32 << 20).to_be_bytes().to_vec();
        input.extend_from_slice(&[7; 1024]);
        let mut reader = FrameReader::new(&input[..], 200 << 20);
        let mut total = 0;
        loop {
            let read = reader.fill(256, |_, _| ()).await;
            match read {
                Ok(n) => {
                    assert!(n <= 256);
                    total += n;
                }
                Err(FrameError::Truncated) => break,
                Err(other) => panic!("{other}"),
            }
            assert!(reader.next_frame().unwrap().is_none());
        }
        assert_eq!(total, input.len());
        assert_eq!(reader.buffered(), input.len());
        assert!(
            reader.buffer.capacity() <= input.len() + ALLOCATE_AHEAD,
            "{}",
            reader.buffer.capacity()
        );
    }
}
