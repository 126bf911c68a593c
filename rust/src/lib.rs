//! KafScale core: a Kafka-compatible broker whose log lives in object storage and whose
//! metadata lives in a key-value store (embedded, or etcd), exposed to Python as
//! `kafscale._core`.
//!
//! The modules form layers, each using only those below it: `protocol`, `meta`, `store`,
//! `log`, `metrics` at the bottom; then `auth`, `config`, `cluster` (the model of the
//! cluster), `transactions` (the transaction coordinator), `control` (the control-plane APIs
//! and their bridge to Python), `broker` (the
//! broker and the tasks that keep its share of the cluster), `server` (connections and the
//! data-plane handlers), `running` (where they are wired together and started) and `python`
//! (the extension module). `analytics` reads the log's objects without a broker.

#![warn(unreachable_pub)]

pub(crate) mod alloc;
pub(crate) mod analytics;
pub(crate) mod auth;
pub(crate) mod broker;
pub(crate) mod cluster;
pub(crate) mod config;
pub(crate) mod control;
pub(crate) mod error;
pub(crate) mod log;
pub(crate) mod meta;
pub(crate) mod metrics;
pub(crate) mod protocol;
pub(crate) mod python;
pub(crate) mod quotas;
pub(crate) mod running;
pub(crate) mod server;
pub(crate) mod store;
pub(crate) mod transactions;

#[global_allocator]
static ALLOCATOR: alloc::GuardedAllocator = alloc::GuardedAllocator;

/// What the fuzz targets (`fuzz/`) call: the decoders and validators that take client bytes.
/// The crate's only public Rust API; everything else is `pub(crate)`.
pub mod fuzzing {
    pub use crate::analytics::columns::Columns;
    pub use crate::analytics::records::{decode_records, DecodeError};
    pub use crate::log::batch::{BatchHeader, BATCH_HEADER_LEN, CRC_START};
    pub use crate::log::checksum::crc32c;
    pub use crate::log::decompress::{Codec, Decompressed};
    pub use crate::log::records::{Malformed, RecordError};
    pub use crate::log::validate::{validate_produce, ProduceRules};
    pub use crate::protocol::frame::FrameReader;
    pub use crate::protocol::header::Request;
}
