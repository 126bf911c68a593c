//! Metadata: the key-value contract, its embedded and etcd implementations, the in-memory
//! mirror of the store, and the typed catalog.

pub(crate) mod catalog;
pub(crate) mod embedded;
pub(crate) mod etcd;
mod etcd_limits;
#[cfg(test)]
pub(crate) mod faulty_kv;
pub(crate) mod kv;
pub(crate) mod metered;
pub(crate) mod mirror;
pub(crate) mod producer_ids;
pub(crate) mod published;
#[cfg(test)]
mod test_etcd;
pub(crate) mod wal;
