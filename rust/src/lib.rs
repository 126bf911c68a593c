//! KafScale core: a Kafka-compatible broker whose log lives in object storage and whose
//! metadata lives in a key-value store (embedded, or etcd), exposed to Python as
//! `kafscale._core`.

pub(crate) mod alloc;
pub mod analytics;
pub(crate) mod auth;
pub(crate) mod broker;
pub(crate) mod cluster;
pub(crate) mod config;
pub(crate) mod control;
pub(crate) mod error;
pub mod log;
pub(crate) mod meta;
pub(crate) mod metrics;
pub mod protocol;
pub(crate) mod python;
pub(crate) mod server;
pub(crate) mod store;

#[global_allocator]
static ALLOCATOR: alloc::GuardedAllocator = alloc::GuardedAllocator;
