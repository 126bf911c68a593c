//! Metadata: the key-value contract, its embedded and etcd implementations, the in-memory
//! mirror of the store, and the typed catalog.

pub mod catalog;
pub mod embedded;
pub mod etcd;
mod etcd_limits;
#[cfg(test)]
pub(crate) mod faulty_kv;
pub mod kv;
pub mod metered;
pub mod mirror;
pub(crate) mod producer_ids;
pub mod published;
#[cfg(test)]
mod test_etcd;
pub mod wal;
