//! KafScale core: a Kafka-compatible broker whose log lives in object storage and whose
//! metadata lives in a key-value store (embedded, or etcd), exposed to Python as
//! `kafscale._core`.

pub mod alloc;
pub mod analytics;
pub mod broker;
pub mod cluster;
pub mod config;
pub(crate) mod control;
pub mod error;
pub mod log;
pub mod meta;
pub mod metrics;
pub mod protocol;
pub mod python;
pub mod server;
pub mod store;

#[global_allocator]
static ALLOCATOR: alloc::GuardedAllocator = alloc::GuardedAllocator;
