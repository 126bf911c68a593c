//! Compression of a records section, for the batches the cleaner of a compacted topic
//! rewrites: each keeps the codec its producer chose, written as Kafka's own producer writes
//! it (lz4: the frame format with independent 64 KiB blocks and no content checksum, which
//! the Java client's reader requires; snappy: raw, as librdkafka writes it).

use std::io::{self, Write};

use super::decompress::Codec;

pub(crate) fn compress(codec: Codec, data: &[u8]) -> io::Result<Vec<u8>> {
    match codec {
        Codec::None => Ok(data.to_vec()),
        Codec::Gzip => {
            let mut encoder =
                flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            encoder.write_all(data)?;
            encoder.finish()
        }
        Codec::Snappy => snap::raw::Encoder::new()
            .compress_vec(data)
            .map_err(io::Error::other),
        Codec::Lz4 => {
            let mut encoder = lz4::EncoderBuilder::new()
                .block_size(lz4::BlockSize::Max64KB)
                .block_mode(lz4::BlockMode::Independent)
                .checksum(lz4::ContentChecksum::NoChecksum)
                .build(Vec::new())?;
            encoder.write_all(data)?;
            let (out, finished) = encoder.finish();
            finished.map(|()| out)
        }
        Codec::Zstd => zstd::encode_all(data, 3),
    }
}
