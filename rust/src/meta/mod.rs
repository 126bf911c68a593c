//! Metadata: the key-value contract, its embedded implementation, and the typed catalog.

pub mod catalog;
pub mod embedded;
pub mod kv;
