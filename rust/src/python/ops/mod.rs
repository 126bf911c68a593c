//! The operator APIs on the Python side of the control bridge: group visibility and cleanup,
//! topic configs and partition growth – requests as typed objects, answers encoded at the
//! request's version.

pub mod configs;
pub mod groups;
pub mod partitions;
