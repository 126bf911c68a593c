//! The shared write-ahead path: each broker writes one object per flush interval holding the
//! batches of every partition it owns that received data, and commits it with one manifest
//! (`meta::wal`; objects uploaded together share one commit); compaction later rewrites the runs into per-partition segments and the
//! sweep deletes objects nothing needs any more.

mod commit;
pub(crate) mod index;
pub(crate) mod object;
pub(crate) mod pace;
pub(crate) mod writer;
