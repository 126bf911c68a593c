//! The produce validator on arbitrary record batches. Input byte 0 chooses whether each
//! batch's CRC is fixed up first (so mutations reach the record walker instead of stopping at
//! the CRC); the rest is a partition's records field.
//!
//! Besides never panicking, what it accepts must be readable: every accepted batch is decoded
//! as the segment reader decodes it (decompressed whole, the record decoder walking the whole
//! section into Arrow columns, where the validator walked a window at a time), which must
//! succeed and yield the declared records.
//!
//! Found and fixed so far: an offset addition in the segment reader that overflowed on a batch
//! whose base offset was near the largest offset (now an error).

#![no_main]

use bytes::Bytes;
use kafscale::fuzzing::{
    crc32c, decode_records, validate_produce, BatchHeader, Codec, Columns, Decompressed,
    BATCH_HEADER_LEN, CRC_START,
};
use kafscale_fuzz::RULES;
use libfuzzer_sys::fuzz_target;

/// Rewrites the CRC of every batch whose length fields can be followed.
fn fix_crcs(records: &mut [u8]) {
    let mut pos = 0;
    while let Some(header) = BatchHeader::parse(&records[pos..]) {
        let end = pos + header.size;
        if end > records.len() {
            return;
        }
        let crc = crc32c(&records[pos + CRC_START..end]);
        records[pos + 17..pos + 21].copy_from_slice(&crc.to_be_bytes());
        pos = end;
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut records = rest.to_vec();
    if mode & 1 == 1 {
        fix_crcs(&mut records);
    }
    let Ok(batches) = validate_produce(&Bytes::from(records), &RULES) else {
        return;
    };
    let mut scratch = Vec::new();
    for batch in batches {
        // Stored, the batch gets the log's next offset (the client's base offset is ignored).
        let header = BatchHeader {
            base_offset: 0,
            ..batch.header
        };
        let codec = Codec::from_attributes(header.attributes).expect("accepted codec");
        let section = &batch.bytes[BATCH_HEADER_LEN..];
        Decompressed::new(codec, section, RULES.max_uncompressed_bytes)
            .and_then(|stream| stream.read_all(&mut scratch))
            .expect("an accepted batch decompresses");
        let mut columns = Columns::new("fuzz", 0, true);
        decode_records(&header, &scratch, &(i64::MIN..i64::MAX), &mut columns)
            .expect("the segment reader reads an accepted batch");
        assert_eq!(columns.len() as i64, header.offset_count());
    }
});
