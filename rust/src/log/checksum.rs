//! CRC-32C (Castagnoli), the checksum of Kafka record batches and of KafScale segment footers.
//!
//! `crc-fast` folds with carry-less multiplication (PCLMULQDQ/AVX): about 10 GB/s here against
//! 3.5 GB/s for the `crc32c` crate's CRC32-instruction loop. Every produced byte is read once
//! for its checksum, when its batch is validated; a segment's footer checksum is combined from
//! its batches' checksums ([`crc32c_combine`]) instead of a second pass.

use crc_fast::CrcAlgorithm::Crc32Iscsi;

pub fn crc32c(bytes: &[u8]) -> u32 {
    crc_fast::checksum(Crc32Iscsi, bytes) as u32
}

/// The CRC-32C of `a ‖ b`, from the CRC-32Cs of `a` and `b` and the length of `b`.
pub fn crc32c_combine(a: u32, b: u32, b_len: usize) -> u32 {
    crc_fast::checksum_combine(Crc32Iscsi, a.into(), b.into(), b_len as u64) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vectors() {
        // RFC 3720 (iSCSI) test vector and the classic check value.
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(crc32c(&[0u8; 32]), 0x8a91_36aa);
        assert_eq!(crc32c(b""), 0);
    }

    #[test]
    fn combined_checksums_are_those_of_the_whole() {
        let bytes: Vec<u8> = (0..3000u32).map(|i| (i * 7 % 251) as u8).collect();
        for cut in [0, 1, 21, 1500, 3000] {
            let (a, b) = bytes.split_at(cut);
            assert_eq!(
                crc32c_combine(crc32c(a), crc32c(b), b.len()),
                crc32c(&bytes)
            );
        }
    }
}
