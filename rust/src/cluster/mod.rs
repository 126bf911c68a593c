//! The cluster: who is alive, who owns which partition, and keeping this broker's share.

pub mod assignment;
pub mod ownership;
pub mod state;
