//! The cluster as this broker sees it: who is alive, which partition each broker owns and
//! should own, and where partitions go. A model only: what the broker does about it (claims,
//! hand-offs, compaction, retention) is the broker module's.

pub(crate) mod assignment;
mod extras;
mod placement;
pub(crate) mod racks;
pub(crate) mod state;
