//! DescribeAcls, CreateAcls and DeleteAcls v0–3 (KIP-140; prefixed patterns from v1,
//! KIP-290): the ACLs of the metadata store. Describing needs Describe on the cluster, the
//! others Alter; without an authorizer they answer SECURITY_DISABLED, as Kafka does. A
//! change is in force on this broker when the answer goes out, and on the others as soon as
//! their copy of the store has it.

use futures::FutureExt;
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::{Handling, RequestContext};
use crate::auth::acl::{AclBinding, AclFilter, Operation, PatternType, Permission, ResourceType};
use crate::auth::authorizer::Access;
use crate::auth::store;
use crate::broker::Broker;
use crate::protocol::header::{encode_response, Request, WireError};

type Refusal = (ResponseError, String);

fn text(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}

/// Why the request is refused as a whole: no authorizer, or the cluster permission missing.
fn refusal(broker: &Broker, access: &Access, needed: Operation) -> Option<Refusal> {
    if !broker.authorizer.enabled() {
        let hint = "no authorizer is configured: start the brokers with --authorizer acl";
        return Some((ResponseError::SecurityDisabled, hint.into()));
    }
    (!access.allows_cluster(needed)).then(|| {
        let reason = format!(
            "{} may not {needed:?} the cluster's ACLs",
            access.principal()
        );
        (ResponseError::ClusterAuthorizationFailed, reason)
    })
}

/// Puts the store's ACLs in force here once this broker's copy has `revision`.
async fn apply(broker: &Broker, revision: i64) {
    broker.mirror.caught_up(revision).await;
    broker.reload_acls();
}

/// Why an ACL or a filter of a request is refused (INVALID_REQUEST, with this message).
#[derive(Debug, thiserror::Error)]
enum InvalidAcl {
    #[error("{code} is not a Kafka {what} code")]
    UnknownCode { what: &'static str, code: i8 },
    /// Its fields do not go together (`AclBinding::problem`, `AclFilter::problem`).
    #[error("{0}")]
    Inconsistent(String),
}

impl InvalidAcl {
    fn refusal(self) -> Refusal {
        (ResponseError::InvalidRequest, self.to_string())
    }
}

fn unknown_code(what: &'static str, code: i8) -> InvalidAcl {
    InvalidAcl::UnknownCode { what, code }
}

fn filter(
    resource_type: i8,
    resource_name: Option<&StrBytes>,
    pattern_type: i8,
    principal: Option<&StrBytes>,
    host: Option<&StrBytes>,
    operation: i8,
    permission: i8,
) -> Result<AclFilter, InvalidAcl> {
    let filter = AclFilter {
        resource_type: ResourceType::from_code(resource_type)
            .ok_or_else(|| unknown_code("resource type", resource_type))?,
        resource_name: resource_name.map(|s| s.to_string()),
        pattern_type: PatternType::from_code(pattern_type)
            .ok_or_else(|| unknown_code("pattern type", pattern_type))?,
        principal: principal.map(|s| s.to_string()),
        host: host.map(|s| s.to_string()),
        operation: Operation::from_code(operation)
            .ok_or_else(|| unknown_code("operation", operation))?,
        permission: Permission::from_code(permission)
            .ok_or_else(|| unknown_code("permission type", permission))?,
    };
    match filter.problem() {
        Some(problem) => Err(InvalidAcl::Inconsistent(problem)),
        None => Ok(filter),
    }
}

pub(crate) async fn describe(
    broker: &Broker,
    request: &Request,
    access: &Access,
) -> Result<bytes::Bytes, WireError> {
    let body: DescribeAclsRequest = request.body()?;
    let response = match described(broker, access, &body).await {
        Ok(resources) => DescribeAclsResponse::default().with_resources(resources),
        Err((error, message)) => DescribeAclsResponse::default()
            .with_error_code(error.code())
            .with_error_message(Some(text(message))),
    };
    encode_response(request.correlation_id, request.api_version, &response)
}

async fn described(
    broker: &Broker,
    access: &Access,
    body: &DescribeAclsRequest,
) -> Result<Vec<DescribeAclsResource>, Refusal> {
    if let Some(refused) = refusal(broker, access, Operation::Describe) {
        return Err(refused);
    }
    let asked = filter(
        body.resource_type_filter,
        body.resource_name_filter.as_ref(),
        body.pattern_type_filter,
        body.principal_filter.as_ref(),
        body.host_filter.as_ref(),
        body.operation,
        body.permission_type,
    )
    .map_err(InvalidAcl::refusal)?;
    let mut found = store::matching(&broker.log.catalog, &[asked])
        .await
        .map_err(|e| {
            (
                ResponseError::KafkaStorageError,
                format!("cannot read ACLs: {e}"),
            )
        })?
        .remove(0);
    found.sort_by(|a, b| a.1.cmp(&b.1));
    let mut resources: Vec<DescribeAclsResource> = Vec::new();
    for (_, acl) in found {
        let entry = AclDescription::default()
            .with_principal(text(acl.principal))
            .with_host(text(acl.host))
            .with_operation(acl.operation.code())
            .with_permission_type(acl.permission.code());
        let same = resources.last_mut().filter(|r| {
            r.resource_type == acl.resource_type.code()
                && r.pattern_type == acl.pattern_type.code()
                && r.resource_name.as_str() == acl.resource_name
        });
        match same {
            Some(resource) => resource.acls.push(entry),
            None => resources.push(
                DescribeAclsResource::default()
                    .with_resource_type(acl.resource_type.code())
                    .with_resource_name(text(acl.resource_name))
                    .with_pattern_type(acl.pattern_type.code())
                    .with_acls(vec![entry]),
            ),
        }
    }
    Ok(resources)
}

pub(crate) async fn create(
    broker: &Broker,
    request: &Request,
    access: &Access,
) -> Result<bytes::Bytes, WireError> {
    let body: CreateAclsRequest = request.body()?;
    let outcomes = created(broker, access, &body.creations).await;
    let results = outcomes
        .into_iter()
        .map(|outcome| match outcome {
            Ok(()) => AclCreationResult::default(),
            Err((error, message)) => AclCreationResult::default()
                .with_error_code(error.code())
                .with_error_message(Some(text(message))),
        })
        .collect();
    let response = CreateAclsResponse::default().with_results(results);
    encode_response(request.correlation_id, request.api_version, &response)
}

/// One outcome per creation: the valid ones are stored together.
async fn created(
    broker: &Broker,
    access: &Access,
    creations: &[AclCreation],
) -> Vec<Result<(), Refusal>> {
    if let Some(refused) = refusal(broker, access, Operation::Alter) {
        return creations.iter().map(|_| Err(refused.clone())).collect();
    }
    let parsed: Vec<Result<AclBinding, Refusal>> = creations
        .iter()
        .map(|c| binding(c).map_err(InvalidAcl::refusal))
        .collect();
    let valid: Vec<AclBinding> = parsed
        .iter()
        .filter_map(|p| p.as_ref().ok())
        .cloned()
        .collect();
    if valid.is_empty() {
        return parsed.into_iter().map(|p| p.map(|_| ())).collect();
    }
    let stored = store::create(&broker.log.catalog, &valid).await;
    let stored = match stored {
        Ok(revision) => {
            tracing::info!(principal = access.principal(), acls = ?valid, "ACLs created");
            apply(broker, revision).await;
            Ok(())
        }
        Err(e) => Err((
            ResponseError::KafkaStorageError,
            format!("cannot store ACLs: {e}"),
        )),
    };
    parsed
        .into_iter()
        .map(|p| p.and_then(|_| stored.clone()))
        .collect()
}

fn binding(c: &AclCreation) -> Result<AclBinding, InvalidAcl> {
    let acl = AclBinding {
        resource_type: ResourceType::from_code(c.resource_type)
            .ok_or_else(|| unknown_code("resource type", c.resource_type))?,
        resource_name: c.resource_name.to_string(),
        pattern_type: PatternType::from_code(c.resource_pattern_type)
            .ok_or_else(|| unknown_code("pattern type", c.resource_pattern_type))?,
        principal: c.principal.to_string(),
        host: c.host.to_string(),
        operation: Operation::from_code(c.operation)
            .ok_or_else(|| unknown_code("operation", c.operation))?,
        permission: Permission::from_code(c.permission_type)
            .ok_or_else(|| unknown_code("permission type", c.permission_type))?,
    };
    match acl.problem() {
        Some(problem) => Err(InvalidAcl::Inconsistent(problem)),
        None => Ok(acl),
    }
}

pub(crate) async fn delete(
    broker: &Broker,
    request: &Request,
    access: &Access,
) -> Result<bytes::Bytes, WireError> {
    let body: DeleteAclsRequest = request.body()?;
    let results = deleted(broker, access, &body.filters).await;
    let response = DeleteAclsResponse::default().with_filter_results(results);
    encode_response(request.correlation_id, request.api_version, &response)
}

/// One result per filter, listing the ACLs it deleted (an ACL two filters match is deleted
/// once and listed under both, as Kafka does).
async fn deleted(
    broker: &Broker,
    access: &Access,
    filters: &[DeleteAclsFilter],
) -> Vec<DeleteAclsFilterResult> {
    let failed = |(error, message): Refusal| {
        DeleteAclsFilterResult::default()
            .with_error_code(error.code())
            .with_error_message(Some(text(message)))
    };
    if let Some(refused) = refusal(broker, access, Operation::Alter) {
        return filters.iter().map(|_| failed(refused.clone())).collect();
    }
    let parsed: Vec<Result<AclFilter, InvalidAcl>> = filters
        .iter()
        .map(|f| {
            filter(
                f.resource_type_filter,
                f.resource_name_filter.as_ref(),
                f.pattern_type_filter,
                f.principal_filter.as_ref(),
                f.host_filter.as_ref(),
                f.operation,
                f.permission_type,
            )
        })
        .collect();
    let valid: Vec<AclFilter> = parsed
        .iter()
        .filter_map(|p| p.as_ref().ok())
        .cloned()
        .collect();
    let matched = match store::matching(&broker.log.catalog, &valid).await {
        Ok(matched) => matched,
        Err(e) => {
            let refused = (
                ResponseError::KafkaStorageError,
                format!("cannot read ACLs: {e}"),
            );
            return filters.iter().map(|_| failed(refused.clone())).collect();
        }
    };
    let mut keys: Vec<String> = matched.iter().flatten().map(|(k, _)| k.clone()).collect();
    keys.sort();
    keys.dedup();
    if !keys.is_empty() {
        match store::delete(&broker.log.catalog, keys).await {
            Ok(revision) => apply(broker, revision).await,
            Err(e) => {
                let refused = (
                    ResponseError::KafkaStorageError,
                    format!("cannot delete ACLs: {e}"),
                );
                return filters.iter().map(|_| failed(refused.clone())).collect();
            }
        }
    }
    let mut matched = matched.into_iter();
    parsed
        .into_iter()
        .map(|p| match p {
            Err(reason) => failed(reason.refusal()),
            Ok(_) => {
                let acls = matched.next().unwrap_or_default();
                if !acls.is_empty() {
                    tracing::info!(principal = access.principal(),
                        acls = ?acls.iter().map(|(_, a)| a).collect::<Vec<_>>(), "ACLs deleted");
                }
                DeleteAclsFilterResult::default().with_matching_acls(
                    acls.into_iter().map(|(_, acl)| matching_acl(acl)).collect(),
                )
            }
        })
        .collect()
}

fn matching_acl(acl: AclBinding) -> DeleteAclsMatchingAcl {
    DeleteAclsMatchingAcl::default()
        .with_resource_type(acl.resource_type.code())
        .with_resource_name(text(acl.resource_name))
        .with_pattern_type(acl.pattern_type.code())
        .with_principal(text(acl.principal))
        .with_host(text(acl.host))
        .with_operation(acl.operation.code())
        .with_permission_type(acl.permission.code())
}

/// Dispatch's entry for DescribeAcls (a [`super::Handler`]).
pub(crate) fn handle_describe(cx: &RequestContext, request: Request) -> Handling {
    let cx = cx.clone();
    async move { describe(&cx.broker, &request, &cx.access).await.into() }.boxed()
}

/// Dispatch's entry for CreateAcls (a [`super::Handler`]).
pub(crate) fn handle_create(cx: &RequestContext, request: Request) -> Handling {
    let cx = cx.clone();
    async move { create(&cx.broker, &request, &cx.access).await.into() }.boxed()
}

/// Dispatch's entry for DeleteAcls (a [`super::Handler`]).
pub(crate) fn handle_delete(cx: &RequestContext, request: Request) -> Handling {
    let cx = cx.clone();
    async move { delete(&cx.broker, &request, &cx.access).await.into() }.boxed()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use kafka_protocol::messages::ApiKey;

    use super::*;
    use crate::auth::acl::CLUSTER_NAME;
    use crate::protocol::header::testing::{read_response, request};

    fn access(broker: &Broker, principal: &str) -> Access {
        Access::new(
            broker.authorizer.clone(),
            principal.into(),
            "127.0.0.1".into(),
        )
    }

    fn creation(
        kind: i8,
        name: &str,
        pattern: i8,
        principal: &str,
        op: i8,
        perm: i8,
    ) -> AclCreation {
        AclCreation::default()
            .with_resource_type(kind)
            .with_resource_name(text(name))
            .with_resource_pattern_type(pattern)
            .with_principal(text(principal))
            .with_host(text("*"))
            .with_operation(op)
            .with_permission_type(perm)
    }

    async fn create_as(
        broker: &Arc<Broker>,
        who: &Access,
        creations: Vec<AclCreation>,
    ) -> Vec<i16> {
        let asked = request(
            ApiKey::CreateAcls,
            3,
            &CreateAclsRequest::default().with_creations(creations),
        );
        let frame = create(broker, &asked, who).await.unwrap();
        let (_, read): (_, CreateAclsResponse) = read_response(frame, 3);
        read.results.iter().map(|r| r.error_code).collect()
    }

    fn everything() -> DescribeAclsRequest {
        DescribeAclsRequest::default()
            .with_resource_name_filter(None)
            .with_principal_filter(None)
            .with_host_filter(None)
            .with_resource_type_filter(1)
            .with_pattern_type_filter(1)
            .with_operation(1)
            .with_permission_type(1)
    }

    #[tokio::test]
    async fn acls_are_created_described_in_force_and_deleted() {
        let t = crate::broker::tests::secured_broker().await;
        let b = &t.broker;
        let admin = access(b, "User:admin");
        let alice = access(b, "User:alice");
        assert!(!alice.allows_topic(Operation::Read, "orders-eu"));
        let codes = create_as(
            b,
            &admin,
            vec![
                creation(2, "orders-", 4, "User:alice", 3, 3),
                creation(2, "orders-", 4, "alice", 3, 3),
                creation(9, "x", 3, "User:alice", 3, 3),
            ],
        )
        .await;
        assert_eq!(
            codes,
            [0, 42, 42],
            "a bad principal and an unknown type are refused"
        );
        assert!(
            alice.allows_topic(Operation::Read, "orders-eu"),
            "in force at once"
        );
        // described, grouped by resource, at v0 too (literal patterns only there)
        let asked = request(ApiKey::DescribeAcls, 3, &everything());
        let (_, read): (_, DescribeAclsResponse) =
            read_response(describe(b, &asked, &admin).await.unwrap(), 3);
        assert_eq!(read.error_code, 0);
        assert_eq!(read.resources.len(), 1);
        assert_eq!(read.resources[0].resource_name.as_str(), "orders-");
        assert_eq!(read.resources[0].pattern_type, 4);
        // alice may not look at or change ACLs
        let (_, read): (_, DescribeAclsResponse) =
            read_response(describe(b, &asked, &alice).await.unwrap(), 3);
        assert_eq!(read.error_code, 31);
        let refused = create_as(
            b,
            &alice,
            vec![creation(4, CLUSTER_NAME, 3, "User:alice", 2, 3)],
        );
        assert_eq!(refused.await, [31]);
        // deleted by a MATCH filter naming a topic the prefix covers
        let filter = DeleteAclsFilter::default()
            .with_resource_type_filter(2)
            .with_resource_name_filter(Some(text("orders-eu")))
            .with_principal_filter(None)
            .with_host_filter(None)
            .with_pattern_type_filter(2)
            .with_operation(1)
            .with_permission_type(1);
        let asked = request(
            ApiKey::DeleteAcls,
            3,
            &DeleteAclsRequest::default().with_filters(vec![filter]),
        );
        let (_, read): (_, DeleteAclsResponse) =
            read_response(delete(b, &asked, &admin).await.unwrap(), 3);
        assert_eq!(read.filter_results[0].matching_acls.len(), 1);
        assert!(
            !alice.allows_topic(Operation::Read, "orders-eu"),
            "gone at once"
        );
    }

    #[tokio::test]
    async fn without_an_authorizer_the_acl_apis_answer_security_disabled() {
        let t = crate::broker::tests::broker(1 << 20).await;
        let anyone = access(&t.broker, "User:ANONYMOUS");
        let asked = request(ApiKey::DescribeAcls, 1, &everything());
        let (_, read): (_, DescribeAclsResponse) =
            read_response(describe(&t.broker, &asked, &anyone).await.unwrap(), 1);
        assert_eq!(read.error_code, ResponseError::SecurityDisabled.code());
        let codes = create_as(
            &t.broker,
            &anyone,
            vec![creation(2, "t", 3, "User:a", 3, 3)],
        );
        assert_eq!(codes.await, [ResponseError::SecurityDisabled.code()]);
    }
}
