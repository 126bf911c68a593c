//! Client quotas in the metadata store: one key per entity, `{root}/quotas/{part}/...` with a
//! part `{type}:d` for a type's default or `{type}:n{name}` (percent-encoded, so `/` stays one
//! segment), holding the entity and its values as JSON. Every broker's mirror follows the
//! prefix and puts changes in force at once; AlterClientQuotas changes one entity's key by
//! compare-and-swap, so concurrent changes of different quotas of it both land.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::entity::{Name, QuotaEntity, QuotaTable};
use crate::meta::catalog::{encode, key_segment, Catalog};
use crate::meta::kv::{Compare, MetaError, Op};
use crate::meta::mirror::Mirror;

/// What one key holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct StoredQuotas {
    pub entity: QuotaEntity,
    /// By quota name (`producer_byte_rate`, ...).
    pub values: BTreeMap<String, f64>,
}

pub(crate) fn quotas_prefix(catalog: &Catalog) -> String {
    format!("{}/quotas/", catalog.root())
}

fn key(catalog: &Catalog, entity: &QuotaEntity) -> String {
    let parts: Vec<String> = entity
        .parts()
        .into_iter()
        .map(|(kind, name)| match name {
            Name::Default => format!("{kind}:d"),
            Name::Named(name) => format!("{kind}:n{}", key_segment(name)),
        })
        .collect();
    format!("{}{}", quotas_prefix(catalog), parts.join("/"))
}

fn parse(key: &str, value: &[u8]) -> Option<StoredQuotas> {
    match serde_json::from_slice(value) {
        Ok(stored) => Some(stored),
        Err(error) => {
            tracing::error!(%key, %error, "ignoring a client quota record that does not parse");
            None
        }
    }
}

/// Every quota the mirror holds.
pub(crate) fn mirrored(catalog: &Catalog, mirror: &Mirror) -> QuotaTable {
    let kvs = mirror.range(&quotas_prefix(catalog));
    let stored = kvs.iter().filter_map(|kv| parse(&kv.key, &kv.value));
    QuotaTable::new(stored.map(|s| (s.entity, s.values)))
}

/// Every quota in the store now.
pub(crate) async fn stored(catalog: &Catalog) -> Result<Vec<StoredQuotas>, MetaError> {
    let listing = catalog.kv().range(&quotas_prefix(catalog)).await?;
    Ok(listing
        .kvs
        .iter()
        .filter_map(|kv| parse(&kv.key, &kv.value))
        .collect())
}

/// Sets (`Some`) or removes (`None`) quotas of `entity`; an entity left without any loses its
/// key. Retried while another change of the same entity lands in between.
pub(crate) async fn alter(
    catalog: &Catalog,
    entity: &QuotaEntity,
    changes: &[(String, Option<f64>)],
) -> Result<(), MetaError> {
    let key = key(catalog, entity);
    loop {
        let current = catalog.kv().get(&key).await?;
        let revision = current.as_ref().map_or(0, |kv| kv.mod_revision);
        let mut values = current
            .and_then(|kv| parse(&kv.key, &kv.value))
            .map(|s| s.values)
            .unwrap_or_default();
        for (name, value) in changes {
            match value {
                Some(value) => values.insert(name.clone(), *value),
                None => values.remove(name),
            };
        }
        let op = if values.is_empty() {
            Op::Delete(key.clone())
        } else {
            let stored = StoredQuotas {
                entity: entity.clone(),
                values,
            };
            Op::Put(key.clone(), encode(&stored))
        };
        let compare = Compare::ModRevision(key.clone(), revision);
        if catalog.kv().txn(vec![compare], vec![op]).await?.is_some() {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::embedded::EmbeddedStore;
    use std::sync::Arc;

    #[tokio::test]
    async fn quotas_of_an_entity_are_set_and_removed_one_by_one() {
        let dir = tempfile::tempdir().unwrap();
        let kv = Arc::new(EmbeddedStore::open(&dir.path().join("m.redb")).unwrap());
        let catalog = Catalog::new(kv, "c");
        let alice = QuotaEntity::from_wire([("user", Some("a/b")), ("client-id", None)]).unwrap();
        let set = |name: &str, v| (name.to_string(), Some(v));
        alter(&catalog, &alice, &[set("producer_byte_rate", 1024.0)])
            .await
            .unwrap();
        alter(&catalog, &alice, &[set("request_percentage", 50.0)])
            .await
            .unwrap();
        let all = stored(&catalog).await.unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].entity, alice);
        assert_eq!(all[0].values.len(), 2);
        let key = key(&catalog, &alice);
        assert!(key.ends_with("/quotas/user:na%2Fb/client-id:d"), "{key}");
        let removals: Vec<_> = ["producer_byte_rate", "request_percentage"]
            .iter()
            .map(|n| (n.to_string(), None))
            .collect();
        alter(&catalog, &alice, &removals).await.unwrap();
        assert!(stored(&catalog).await.unwrap().is_empty());
        assert!(catalog.kv().get(&key).await.unwrap().is_none());
    }
}
