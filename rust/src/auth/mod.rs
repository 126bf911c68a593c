//! Authorization: Kafka's ACLs (`acl`), kept in the metadata store (`store`) and checked for
//! every request by the authorizer (`authorizer`), which each connection asks through its
//! [`authorizer::Access`].

pub(crate) mod acl;
pub(crate) mod authorizer;
pub(crate) mod store;
