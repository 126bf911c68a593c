//! Length-prefixed Kafka frames: a 4-byte big-endian size, then that many bytes.

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Smallest possible request: api key, api version, correlation id, client id length.
const MIN_REQUEST_LEN: usize = 10;

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
            buffer: BytesMut::with_capacity(64 * 1024),
            max_frame,
        }
    }

    /// The next frame's payload, or `None` when the peer closed the connection cleanly.
    pub async fn read_frame(&mut self) -> Result<Option<Bytes>, FrameError> {
        loop {
            if let Some(frame) = self.parse_frame()? {
                return Ok(Some(frame));
            }
            if self.reader.read_buf(&mut self.buffer).await? == 0 {
                return if self.buffer.is_empty() {
                    Ok(None)
                } else {
                    Err(FrameError::Truncated)
                };
            }
        }
    }

    fn parse_frame(&mut self) -> Result<Option<Bytes>, FrameError> {
        if self.buffer.len() < 4 {
            return Ok(None);
        }
        let size = i32::from_be_bytes(self.buffer[..4].try_into().unwrap());
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
        if self.buffer.len() < 4 + size {
            self.buffer.reserve(4 + size - self.buffer.len());
            return Ok(None);
        }
        self.buffer.advance(4);
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

    #[tokio::test]
    async fn reads_back_to_back_frames_then_eof() {
        let mut input = framed(&[1; 12]);
        input.extend(framed(&[2; 20]));
        let mut reader = FrameReader::new(&input[..], 100);
        assert_eq!(reader.read_frame().await.unwrap().unwrap().len(), 12);
        assert_eq!(reader.read_frame().await.unwrap().unwrap()[0], 2);
        assert!(reader.read_frame().await.unwrap().is_none());
    }

    #[tokio::test]
    async fn rejects_oversize_negative_tiny_and_truncated() {
        let big = framed(&[0; 101]);
        let err = FrameReader::new(&big[..], 100)
            .read_frame()
            .await
            .unwrap_err();
        assert!(matches!(err, FrameError::TooLarge { size: 101, .. }));
        let negative = (-5i32).to_be_bytes();
        assert!(FrameReader::new(&negative[..], 100)
            .read_frame()
            .await
            .is_err());
        let tiny = framed(&[0; 3]);
        assert!(FrameReader::new(&tiny[..], 100).read_frame().await.is_err());
        let cut = &framed(&[0; 40])[..30];
        let err = FrameReader::new(cut, 100).read_frame().await.unwrap_err();
        assert!(matches!(err, FrameError::Truncated));
    }
}
