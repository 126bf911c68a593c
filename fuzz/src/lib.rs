//! What the fuzz targets share.

use kafscale::fuzzing::ProduceRules;

/// The broker's default produce limits, at a fixed clock (inputs stay reproducible); the
/// decompressed bound is lower than the broker's so a bomb costs the fuzzer little time.
pub const RULES: ProduceRules = ProduceRules {
    max_batch_bytes: 1024 * 1024,
    max_uncompressed_bytes: 16 * 1024 * 1024,
    timestamp_before_max_ms: i64::MAX,
    timestamp_after_max_ms: 3_600_000,
    keys_required: false,
    now_ms: 1_700_000_000_000,
};
