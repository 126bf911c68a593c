//! The cluster: who is alive, who owns which partition, and keeping this broker's share.

pub mod assignment;
mod claims;
pub mod compaction;
mod events;
mod extras;
#[cfg(test)]
mod fault_tests;
pub mod ownership;
mod placement;
mod read_barrier;
pub mod retention;
pub mod state;
