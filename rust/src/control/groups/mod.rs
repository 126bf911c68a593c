//! The consumer-group protocol's APIs: requests as typed objects for the Python coordinator,
//! and its answers encoded at the request's version.

pub(crate) mod answers;
pub(crate) mod requests;
pub(crate) mod txn_offsets;
