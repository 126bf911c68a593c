//! The analytics path (design.md §8): a topic's segments read straight from object storage
//! into Arrow record batches in the schema of Spark's Kafka source, without a broker.
//!
//! `reader` lists segments and finds timestamps, `scan` fetches and checks a partition's
//! bytes, `records` decodes batches into `columns` (after `log::decompress`), `bounds` reads the
//! committed high watermarks from etcd, `verify` checks a segment end to end (the CLI's
//! `segments verify`).

pub(crate) mod bounds;
pub mod columns;
pub(crate) mod error;
pub(crate) mod reader;
pub mod records;
pub(crate) mod scan;
pub(crate) mod verify;

#[cfg(test)]
mod tests;
