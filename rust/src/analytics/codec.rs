//! Decompression of a batch's records section. Kafka names the codec in the low three bits of
//! the batch attributes; the formats are gzip, snappy (raw, or the xerial framing that the Java
//! client and kafka-python write), lz4 (frame format) and zstd.

use std::io::Read;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl Codec {
    pub fn from_attributes(attributes: i16) -> Result<Codec, String> {
        match attributes & 0x07 {
            0 => Ok(Codec::None),
            1 => Ok(Codec::Gzip),
            2 => Ok(Codec::Snappy),
            3 => Ok(Codec::Lz4),
            4 => Ok(Codec::Zstd),
            other => Err(format!("unknown compression codec {other}")),
        }
    }
}

/// xerial snappy-java's stream header: magic, then version and compatible-version (i32 each).
const XERIAL_MAGIC: &[u8; 8] = b"\x82SNAPPY\x00";
const XERIAL_HEADER_LEN: usize = 16;

/// Decompresses `input` into `out` (cleared first, so one buffer serves a whole scan).
pub fn decompress(codec: Codec, input: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
    out.clear();
    let outcome = match codec {
        Codec::None => {
            out.extend_from_slice(input);
            Ok(())
        }
        Codec::Gzip => flate2::read::GzDecoder::new(input)
            .read_to_end(out)
            .map(drop)
            .map_err(|e| e.to_string()),
        Codec::Snappy => snappy(input, out),
        Codec::Lz4 => lz4::Decoder::new(input)
            .and_then(|mut d| d.read_to_end(out))
            .map(drop)
            .map_err(|e| e.to_string()),
        Codec::Zstd => zstd::stream::copy_decode(input, &mut *out).map_err(|e| e.to_string()),
    };
    outcome.map_err(|e| format!("{codec:?} decompression failed: {e}"))
}

fn snappy(input: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
    let mut decoder = snap::raw::Decoder::new();
    let mut append = |block: &[u8]| -> Result<(), String> {
        let len = snap::raw::decompress_len(block).map_err(|e| e.to_string())?;
        let at = out.len();
        out.resize(at + len, 0);
        decoder
            .decompress(block, &mut out[at..])
            .map(drop)
            .map_err(|e| e.to_string())
    };
    if !input.starts_with(XERIAL_MAGIC) {
        return append(input);
    }
    let mut rest = input
        .get(XERIAL_HEADER_LEN..)
        .ok_or("xerial snappy header is truncated")?;
    while !rest.is_empty() {
        let (len, body) = rest
            .split_first_chunk::<4>()
            .ok_or("xerial snappy block length is truncated")?;
        let len = u32::from_be_bytes(*len) as usize;
        let block = body
            .get(..len)
            .ok_or("xerial snappy block runs past the batch")?;
        append(block)?;
        rest = &body[len..];
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    const TEXT: &[u8] = b"the same words again and again and again and again";

    #[test]
    fn every_codec_round_trips() {
        let gzip = {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(TEXT).unwrap();
            e.finish().unwrap()
        };
        let lz4 = {
            let mut e = lz4::EncoderBuilder::new().build(Vec::new()).unwrap();
            e.write_all(TEXT).unwrap();
            e.finish().0
        };
        let zstd = zstd::encode_all(TEXT, 1).unwrap();
        let snappy = snap::raw::Encoder::new().compress_vec(TEXT).unwrap();
        let mut out = Vec::new();
        for (codec, input) in [
            (Codec::None, TEXT.to_vec()),
            (Codec::Gzip, gzip),
            (Codec::Lz4, lz4),
            (Codec::Zstd, zstd),
            (Codec::Snappy, snappy),
        ] {
            decompress(codec, &input, &mut out).unwrap();
            assert_eq!(out, TEXT, "{codec:?}");
        }
    }

    #[test]
    fn xerial_framed_snappy_is_read_block_by_block() {
        let mut framed = XERIAL_MAGIC.to_vec();
        framed.extend_from_slice(&1i32.to_be_bytes());
        framed.extend_from_slice(&1i32.to_be_bytes());
        for half in TEXT.chunks(TEXT.len() / 2 + 1) {
            let block = snap::raw::Encoder::new().compress_vec(half).unwrap();
            framed.extend_from_slice(&(block.len() as u32).to_be_bytes());
            framed.extend_from_slice(&block);
        }
        let mut out = Vec::new();
        decompress(Codec::Snappy, &framed, &mut out).unwrap();
        assert_eq!(out, TEXT);
        framed.pop();
        assert!(decompress(Codec::Snappy, &framed, &mut out).is_err());
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let mut out = Vec::new();
        for codec in [Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd] {
            assert!(decompress(codec, b"\x01\x02\x03 not compressed", &mut out).is_err());
        }
        assert!(Codec::from_attributes(5).is_err());
    }
}
