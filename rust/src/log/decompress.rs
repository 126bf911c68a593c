//! Decompression of a batch's records section, streaming and bounded. Kafka names the codec in
//! the low three bits of the batch attributes; the formats are gzip, snappy (raw, as librdkafka
//! and the kafka-protocol crate write it, or the xerial framing of the Java client and
//! kafka-python), lz4 (frame format) and zstd.
//!
//! Both the produce validator and the segment reader go through `Decompressed`, which fails as
//! soon as more than a given number of bytes come out: a few bytes of input that expand to
//! gigabytes (a decompression bomb) cost at most that many bytes of work, never an allocation
//! of the size the input claims.

use std::io::{self, Read};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

/// Why a records section could not be decompressed.
#[derive(Debug, thiserror::Error)]
pub enum DecompressError {
    #[error("unknown compression codec {0} (Kafka's are 0 to 4)")]
    UnknownCodec(i16),
    #[error("{codec:?} records cannot be decompressed: {source}")]
    Corrupt {
        codec: Codec,
        #[source]
        source: io::Error,
    },
}

impl Codec {
    /// The codec a batch's attributes name.
    pub fn from_attributes(attributes: i16) -> Result<Codec, DecompressError> {
        match attributes & 0x07 {
            0 => Ok(Codec::None),
            1 => Ok(Codec::Gzip),
            2 => Ok(Codec::Snappy),
            3 => Ok(Codec::Lz4),
            4 => Ok(Codec::Zstd),
            other => Err(DecompressError::UnknownCodec(other)),
        }
    }

    /// What went wrong reading a records section of this codec.
    pub(crate) fn failed(self, source: io::Error) -> DecompressError {
        DecompressError::Corrupt {
            codec: self,
            source,
        }
    }
}

/// xerial snappy-java's stream header: magic, then version and compatible-version (i32 each).
const XERIAL_MAGIC: &[u8; 8] = b"\x82SNAPPY\x00";
const XERIAL_HEADER_LEN: usize = 16;
/// The most a snappy block can expand: its densest element is a 3-byte copy of 64 bytes.
/// A block declaring more is corrupt, whatever the batch limit (so a few bytes cannot make
/// the broker allocate the whole limit).
const SNAPPY_MAX_EXPANSION: usize = 22;

/// The decompressed bytes of one records section, read as a stream. A read fails once more
/// than `limit` bytes came out in total.
pub struct Decompressed<'a> {
    inner: Box<dyn Read + 'a>,
    codec: Codec,
    limit: usize,
    remaining: usize,
}

impl<'a> Decompressed<'a> {
    pub fn new(
        codec: Codec,
        input: &'a [u8],
        limit: usize,
    ) -> Result<Decompressed<'a>, DecompressError> {
        let opened = || -> io::Result<Box<dyn Read + 'a>> {
            Ok(match codec {
                Codec::None => Box::new(input),
                Codec::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(input)),
                Codec::Snappy => Box::new(SnappyBlocks::new(input, limit)?),
                Codec::Lz4 => Box::new(lz4::Decoder::new(input)?),
                // zstd refuses frames asking for a window over 2^27 bytes (its default limit,
                // which Kafka's own reader shares); the window's pages are touched only as far
                // as output is written, so the output bound bounds memory too.
                Codec::Zstd => Box::new(zstd::stream::read::Decoder::with_buffer(input)?),
            })
        };
        let inner = opened().map_err(|e| codec.failed(e))?;
        Ok(Decompressed {
            inner,
            codec,
            limit,
            remaining: limit,
        })
    }

    /// Reads everything into `out` (cleared first, so one buffer serves a whole scan).
    pub fn read_all(mut self, out: &mut Vec<u8>) -> Result<(), DecompressError> {
        out.clear();
        let codec = self.codec;
        self.read_to_end(out).map(drop).map_err(|e| codec.failed(e))
    }
}

impl Read for Decompressed<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n > self.remaining {
            return Err(too_large(self.limit));
        }
        self.remaining -= n;
        Ok(n)
    }
}

fn too_large(limit: usize) -> io::Error {
    io::Error::other(format!("they expand past the limit of {limit} bytes"))
}

fn invalid(reason: impl ToString) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, reason.to_string())
}

/// Snappy as Kafka clients write it: one raw block, or xerial framing (a header, then blocks
/// each preceded by its compressed length). Raw snappy cannot be decoded in parts, so a block
/// is decoded whole into `block`, after its declared size was checked against what may still
/// come out; blocks are 32 KiB in xerial streams, and a raw block expands at most about 21
/// times its compressed size.
struct SnappyBlocks<'a> {
    rest: &'a [u8],
    xerial: bool,
    decoder: snap::raw::Decoder,
    block: Vec<u8>,
    pos: usize,
    budget: usize,
    limit: usize,
}

impl<'a> SnappyBlocks<'a> {
    fn new(input: &'a [u8], limit: usize) -> io::Result<SnappyBlocks<'a>> {
        let xerial = input.starts_with(XERIAL_MAGIC);
        let rest = if xerial {
            input
                .get(XERIAL_HEADER_LEN..)
                .ok_or_else(|| invalid("the xerial snappy header is truncated"))?
        } else {
            input
        };
        Ok(SnappyBlocks {
            rest,
            xerial,
            decoder: snap::raw::Decoder::new(),
            block: Vec::new(),
            pos: 0,
            budget: limit,
            limit,
        })
    }

    /// Decodes the next block into `block`; false when the input is used up.
    fn next_block(&mut self) -> io::Result<bool> {
        if self.rest.is_empty() {
            return Ok(false);
        }
        let compressed = if self.xerial {
            let (len, body) = self
                .rest
                .split_first_chunk::<4>()
                .ok_or_else(|| invalid("a xerial snappy block length is truncated"))?;
            let len = u32::from_be_bytes(*len) as usize;
            let block = body
                .get(..len)
                .ok_or_else(|| invalid("a xerial snappy block runs past the batch"))?;
            self.rest = &body[len..];
            block
        } else {
            std::mem::take(&mut self.rest)
        };
        let len = snap::raw::decompress_len(compressed).map_err(invalid)?;
        if len > self.budget {
            return Err(too_large(self.limit));
        }
        if len > compressed.len().saturating_mul(SNAPPY_MAX_EXPANSION) {
            return Err(invalid(format!(
                "a snappy block of {} bytes declares {len} bytes, more than snappy can encode",
                compressed.len()
            )));
        }
        self.budget -= len;
        self.block.resize(len, 0);
        self.decoder
            .decompress(compressed, &mut self.block)
            .map_err(invalid)?;
        self.pos = 0;
        Ok(true)
    }
}

impl Read for SnappyBlocks<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.pos == self.block.len() {
            if !self.next_block()? {
                return Ok(0);
            }
        }
        let n = buf.len().min(self.block.len() - self.pos);
        buf[..n].copy_from_slice(&self.block[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    const TEXT: &[u8] = b"the same words again and again and again and again";

    pub(crate) fn compress(codec: Codec, data: &[u8]) -> Vec<u8> {
        crate::log::compress::compress(codec, data).unwrap()
    }

    /// The attributes' codec id of `codec`.
    pub(crate) fn codec_id(codec: Codec) -> i16 {
        CODECS.iter().position(|c| *c == codec).unwrap() as i16
    }

    pub(crate) const CODECS: [Codec; 5] = [
        Codec::None,
        Codec::Gzip,
        Codec::Snappy,
        Codec::Lz4,
        Codec::Zstd,
    ];

    fn decompress(codec: Codec, input: &[u8], limit: usize) -> Result<Vec<u8>, DecompressError> {
        let mut out = Vec::new();
        Decompressed::new(codec, input, limit)?.read_all(&mut out)?;
        Ok(out)
    }

    #[test]
    fn every_codec_round_trips() {
        for codec in CODECS {
            let out = decompress(codec, &compress(codec, TEXT), 1 << 20).unwrap();
            assert_eq!(out, TEXT, "{codec:?}");
        }
    }

    #[test]
    fn xerial_framed_snappy_is_read_block_by_block() {
        let mut framed = XERIAL_MAGIC.to_vec();
        framed.extend_from_slice(&1i32.to_be_bytes());
        framed.extend_from_slice(&1i32.to_be_bytes());
        for half in TEXT.chunks(TEXT.len() / 2 + 1) {
            let block = compress(Codec::Snappy, half);
            framed.extend_from_slice(&(block.len() as u32).to_be_bytes());
            framed.extend_from_slice(&block);
        }
        assert_eq!(decompress(Codec::Snappy, &framed, 1 << 20).unwrap(), TEXT);
        framed.pop();
        assert!(decompress(Codec::Snappy, &framed, 1 << 20).is_err());
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for codec in [Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd] {
            assert!(decompress(codec, b"\x01\x02\x03 not compressed", 1 << 20).is_err());
        }
        assert!(Codec::from_attributes(5).is_err());
        assert!(Codec::from_attributes(7).is_err());
    }

    #[test]
    fn output_past_the_limit_fails_at_the_limit() {
        let zeros = vec![0u8; 1 << 20];
        for codec in CODECS {
            let input = compress(codec, &zeros);
            assert_eq!(decompress(codec, &input, 1 << 20).unwrap().len(), 1 << 20);
            let error = decompress(codec, &input, (1 << 20) - 1).unwrap_err();
            assert!(
                error.to_string().contains("expand past the limit"),
                "{codec:?}: {error}"
            );
        }
    }

    /// A raw snappy block declaring 1 GiB: refused from its header, before any allocation.
    #[test]
    fn a_snappy_bomb_is_refused_before_allocating() {
        let mut bomb = Vec::new();
        let mut len: u32 = 1 << 30;
        while len >= 0x80 {
            bomb.push((len as u8) | 0x80);
            len >>= 7;
        }
        bomb.push(len as u8);
        bomb.extend_from_slice(&[0u8; 60]);
        let error = decompress(Codec::Snappy, &bomb, 128 << 20).unwrap_err();
        assert!(
            error.to_string().contains("expand past the limit"),
            "{error}"
        );
    }

    #[test]
    fn a_snappy_block_declaring_more_than_the_format_can_hold_is_corrupt() {
        // 100 MiB declared in 64 bytes: under the limit, but no snappy encoder can write it
        let mut block = Vec::new();
        let mut len: u32 = 100 << 20;
        while len >= 0x80 {
            block.push((len as u8) | 0x80);
            len >>= 7;
        }
        block.push(len as u8);
        block.resize(64, 0);
        let error = decompress(Codec::Snappy, &block, 128 << 20).unwrap_err();
        assert!(
            error.to_string().contains("more than snappy can encode"),
            "{error}"
        );
        // what snappy really makes of 1 MiB of zeros is within the bound
        let zeros = vec![0u8; 1 << 20];
        let packed = compress(Codec::Snappy, &zeros);
        assert_eq!(
            decompress(Codec::Snappy, &packed, 128 << 20).unwrap(),
            zeros
        );
    }

    /// 2 GiB of zeros in about 100 KiB of zstd (2048 frames of 1 MiB): stops at the limit.
    #[test]
    fn a_zstd_bomb_stops_at_the_limit() {
        let frame = compress(Codec::Zstd, &vec![0u8; 1 << 20]);
        let bomb = frame.repeat(2048);
        assert!(bomb.len() < 128 * 1024, "{}", bomb.len());
        let error = decompress(Codec::Zstd, &bomb, 4 << 20).unwrap_err();
        assert!(
            error.to_string().contains("expand past the limit"),
            "{error}"
        );
    }
}
