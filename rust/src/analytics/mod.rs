//! The analytics path (docs/analytics.md, docs/design.md): a topic's segments read straight
//! from object storage into Arrow record batches in the schema of Spark's Kafka source, without
//! a broker.
//!
//! `metadata` learns what is committed (from etcd, or what a single-node broker publishes),
//! `reader` makes a partition's log of it (segments, then write-ahead runs) and finds
//! timestamps, `scan` fetches and checks a partition's bytes, `records` decodes batches into
//! `columns` (after `log::decompress`, with the log's record decoder), `verify` checks a
//! segment end to end (the CLI's `segments verify`).

pub(crate) mod columns;
pub(crate) mod error;
pub(crate) mod metadata;
pub(crate) mod reader;
pub(crate) mod records;
pub(crate) mod scan;
pub(crate) mod transactions;
pub(crate) mod verify;

#[cfg(test)]
mod fresh_tests;
#[cfg(test)]
mod tests;
