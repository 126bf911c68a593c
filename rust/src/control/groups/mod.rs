//! The consumer-group APIs on the Python side of the control bridge: requests as typed objects
//! for the coordinator, and its answers encoded at the request's version.

pub mod answers;
pub mod requests;
