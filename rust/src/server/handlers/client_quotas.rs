//! DescribeClientQuotas v0–1 and AlterClientQuotas v0–1: the client quotas in the metadata
//! store (`quotas::store`), with Kafka's rules. Describing needs DESCRIBE_CONFIGS on the
//! cluster, altering ALTER_CONFIGS (else CLUSTER_AUTHORIZATION_FAILED: for the request, or for
//! every entry). A filter matches an entity type exactly (a name), its default, or any name;
//! a strict filter only entities of exactly its types. An altered entity must be a user, a
//! client id, both, or an IP address (each at most once; an IP with nothing else), its quotas
//! ones an entity of that sort can have, set to a positive value (whole for byte and connection
//! rates), each named once; else INVALID_REQUEST for that entry, which changes nothing.

use std::collections::HashSet;

use futures::FutureExt;
use kafka_protocol::messages::alter_client_quotas_response::{
    EntityData as AlteredEntity, EntryData as AlteredEntry,
};
use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
use kafka_protocol::messages::describe_client_quotas_response::{EntityData, EntryData, ValueData};
use kafka_protocol::messages::{
    AlterClientQuotasRequest, AlterClientQuotasResponse, DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::{Handling, RequestContext};
use crate::auth::acl::Operation;
use crate::auth::authorizer::Access;
use crate::broker::Broker;
use crate::protocol::header::{encode_response, Request, WireError};
use crate::quotas::entity::{Name, QuotaEntity, QuotaKind, CLIENT_ID, IP, USER};
use crate::quotas::store::{self, StoredQuotas};

/// DescribeClientQuotas' match types.
const EXACT: i8 = 0;
const DEFAULT: i8 = 1;
const ANY: i8 = 2;

fn text(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}

async fn describe(
    broker: &Broker,
    request: &Request,
    access: &Access,
) -> Result<bytes::Bytes, WireError> {
    let body: DescribeClientQuotasRequest = request.body()?;
    let refused = |error: ResponseError, message: String| {
        DescribeClientQuotasResponse::default()
            .with_error_code(error.code())
            .with_error_message(Some(text(message)))
            .with_entries(None)
    };
    let response = if !access.allows_cluster(Operation::DescribeConfigs) {
        let denied = ResponseError::ClusterAuthorizationFailed;
        refused(
            denied,
            "describing client quotas needs DescribeConfigs on the cluster".into(),
        )
    } else {
        match Filter::new(&body.components, body.strict) {
            Err(message) => refused(ResponseError::InvalidRequest, message),
            Ok(filter) => match store::stored(&broker.log.catalog).await {
                Ok(stored) => {
                    let mut matching: Vec<&StoredQuotas> = stored
                        .iter()
                        .filter(|s| filter.matches(&s.entity))
                        .collect();
                    matching.sort_by_key(|s| s.entity.to_string());
                    let entries = matching.into_iter().map(described).collect();
                    DescribeClientQuotasResponse::default()
                        .with_error_message(None)
                        .with_entries(Some(entries))
                }
                Err(error) => refused(
                    ResponseError::KafkaStorageError,
                    format!("cannot read the client quotas: {error}"),
                ),
            },
        }
    };
    encode_response(request.correlation_id, request.api_version, &response)
}

fn described(stored: &StoredQuotas) -> EntryData {
    let entity = stored.entity.parts().into_iter().map(|(kind, name)| {
        EntityData::default()
            .with_entity_type(StrBytes::from_static_str(kind))
            .with_entity_name(name.as_wire().map(text))
    });
    let values = stored.values.iter().map(|(key, value)| {
        ValueData::default()
            .with_key(text(key.as_str()))
            .with_value(*value)
    });
    EntryData::default()
        .with_entity(entity.collect())
        .with_values(values.collect())
}

/// A DescribeClientQuotas filter: per entity type, what its name must be.
struct Filter {
    components: Vec<(&'static str, Wanted)>,
    strict: bool,
}

enum Wanted {
    Exactly(String),
    Default,
    Any,
}

impl Filter {
    fn new(components: &[ComponentData], strict: bool) -> Result<Filter, String> {
        let mut parsed = Vec::new();
        for c in components {
            let kind = [USER, CLIENT_ID, IP]
                .into_iter()
                .find(|k| *k == c.entity_type.as_str())
                .ok_or_else(|| format!("unknown entity type {:?}", c.entity_type.as_str()))?;
            if parsed.iter().any(|(k, _)| *k == kind) {
                return Err(format!("entity type {kind} filtered twice"));
            }
            let wanted = match (c.match_type, &c._match) {
                (EXACT, Some(name)) => Wanted::Exactly(name.to_string()),
                (EXACT, None) => return Err(format!("an exact match of {kind} needs a name")),
                (DEFAULT, _) => Wanted::Default,
                (ANY, _) => Wanted::Any,
                (other, _) => return Err(format!("unknown match type {other}")),
            };
            parsed.push((kind, wanted));
        }
        let has = |kind: &str| parsed.iter().any(|(k, _)| *k == kind);
        if has(IP) && (has(USER) || has(CLIENT_ID)) {
            return Err("an IP address cannot be combined with a user or client id".into());
        }
        Ok(Filter {
            components: parsed,
            strict,
        })
    }

    fn matches(&self, entity: &QuotaEntity) -> bool {
        let parts = entity.parts();
        let each = self.components.iter().all(|(kind, wanted)| {
            let name = parts.iter().find(|(k, _)| k == kind).map(|(_, n)| *n);
            match (wanted, name) {
                (_, None) => false,
                (Wanted::Any, Some(_)) => true,
                (Wanted::Default, Some(name)) => *name == Name::Default,
                (Wanted::Exactly(wanted), Some(name)) => name.as_wire() == Some(wanted.as_str()),
            }
        });
        each && (!self.strict || parts.len() == self.components.len())
    }
}

async fn alter(
    broker: &Broker,
    request: &Request,
    access: &Access,
) -> Result<bytes::Bytes, WireError> {
    let body: AlterClientQuotasRequest = request.body()?;
    let allowed = access.allows_cluster(Operation::AlterConfigs);
    let mut entries = Vec::with_capacity(body.entries.len());
    for entry in &body.entries {
        let outcome = if allowed {
            let parts = entry
                .entity
                .iter()
                .map(|e| (e.entity_type.as_str(), e.entity_name.as_deref()));
            match QuotaEntity::from_wire(parts).and_then(|entity| {
                let changes = changes(&entity, &entry.ops)?;
                Ok((entity, changes))
            }) {
                Err(message) => Err((ResponseError::InvalidRequest, message)),
                Ok(_) if body.validate_only => Ok(()),
                Ok((entity, changes)) => store::alter(&broker.log.catalog, &entity, &changes)
                    .await
                    .map_err(|e| {
                        let message = format!("cannot store the client quotas: {e}");
                        (ResponseError::KafkaStorageError, message)
                    }),
            }
        } else {
            let denied = ResponseError::ClusterAuthorizationFailed;
            let message = "altering client quotas needs AlterConfigs on the cluster";
            Err((denied, message.to_string()))
        };
        let echoed = entry.entity.iter().map(|e| {
            AlteredEntity::default()
                .with_entity_type(e.entity_type.clone())
                .with_entity_name(e.entity_name.clone())
        });
        let (code, message) = match outcome {
            Ok(()) => (0, None),
            Err((error, message)) => (error.code(), Some(text(message))),
        };
        entries.push(
            AlteredEntry::default()
                .with_error_code(code)
                .with_error_message(message)
                .with_entity(echoed.collect()),
        );
    }
    let response = AlterClientQuotasResponse::default().with_entries(entries);
    encode_response(request.correlation_id, request.api_version, &response)
}

/// An entry's operations as changes of named quotas (None: remove).
fn changes(
    entity: &QuotaEntity,
    ops: &[kafka_protocol::messages::alter_client_quotas_request::OpData],
) -> Result<Vec<(String, Option<f64>)>, String> {
    let mut seen = HashSet::new();
    let mut changes = Vec::with_capacity(ops.len());
    for op in ops {
        let kind = QuotaKind::for_entity(op.key.as_str(), entity)?;
        if !seen.insert(kind) {
            return Err(format!("{} named twice", kind.name()));
        }
        if op.remove {
            changes.push((kind.name().to_string(), None));
        } else {
            kind.check(op.value)?;
            changes.push((kind.name().to_string(), Some(op.value)));
        }
    }
    Ok(changes)
}

/// Dispatch's entry for DescribeClientQuotas (a [`super::Handler`]).
pub(crate) fn handle_describe(cx: &RequestContext, request: Request) -> Handling {
    let cx = cx.clone();
    async move { describe(&cx.broker, &request, &cx.access).await.into() }.boxed()
}

/// Dispatch's entry for AlterClientQuotas (a [`super::Handler`]).
pub(crate) fn handle_alter(cx: &RequestContext, request: Request) -> Handling {
    let cx = cx.clone();
    async move { alter(&cx.broker, &request, &cx.access).await.into() }.boxed()
}

#[cfg(test)]
#[path = "client_quotas_tests.rs"]
mod tests;
