//! The shared write-ahead path: each broker writes one object per flush interval holding the
//! batches of every partition it owns that received data, and commits it with one manifest
//! (`meta::wal`); compaction later rewrites the runs into per-partition segments and the
//! sweep deletes objects nothing needs any more.

pub mod index;
pub(crate) mod object;
pub mod writer;
