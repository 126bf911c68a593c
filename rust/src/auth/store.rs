//! ACLs in the metadata store: one key per binding, `{root}/acls/{type}/{pattern}/{name}/
//! {principal}/{host}/{operation}/{permission}` (names percent-encoded, so `/` in them stays
//! one segment), holding the binding as JSON. A binding is its key, so creating one twice is
//! one key; every broker's mirror follows the prefix and puts changes in force at once.

use bytes::Bytes;

use super::acl::{AclBinding, AclFilter};
use crate::meta::catalog::{key_segment, Catalog};
use crate::meta::kv::{MetaError, Op};
use crate::meta::mirror::Mirror;

pub(crate) fn acls_prefix(catalog: &Catalog) -> String {
    format!("{}/acls/", catalog.root())
}

fn key(catalog: &Catalog, acl: &AclBinding) -> String {
    format!(
        "{}{}/{}/{}/{}/{}/{}/{}",
        acls_prefix(catalog),
        acl.resource_type.code(),
        acl.pattern_type.code(),
        key_segment(&acl.resource_name),
        key_segment(&acl.principal),
        key_segment(&acl.host),
        acl.operation.code(),
        acl.permission.code(),
    )
}

/// Every ACL the mirror holds (a key that does not parse is logged and left out).
pub(crate) fn mirrored(catalog: &Catalog, mirror: &Mirror) -> Vec<AclBinding> {
    mirror
        .range(&acls_prefix(catalog))
        .iter()
        .filter_map(|kv| match serde_json::from_slice(&kv.value) {
            Ok(acl) => Some(acl),
            Err(error) => {
                tracing::error!(key = %kv.key, %error, "ignoring an ACL record that does not parse");
                None
            }
        })
        .collect()
}

/// Every ACL in the store now, with its key.
async fn stored(catalog: &Catalog) -> Result<Vec<(String, AclBinding)>, MetaError> {
    let listing = catalog.kv().range(&acls_prefix(catalog)).await?;
    Ok(listing
        .kvs
        .into_iter()
        .filter_map(|kv| Some((kv.key, serde_json::from_slice(&kv.value).ok()?)))
        .collect())
}

/// Stores `acls` (in transactions the store allows); the revision of the last write.
pub(crate) async fn create(catalog: &Catalog, acls: &[AclBinding]) -> Result<i64, MetaError> {
    let ops: Vec<Op> = acls
        .iter()
        .map(|acl| {
            let json = serde_json::to_vec(acl).expect("an ACL binding serializes");
            Op::Put(key(catalog, acl), Bytes::from(json))
        })
        .collect();
    commit(catalog, ops).await
}

/// The stored ACLs each filter matches, in filter order.
pub(crate) async fn matching(
    catalog: &Catalog,
    filters: &[AclFilter],
) -> Result<Vec<Vec<(String, AclBinding)>>, MetaError> {
    let all = stored(catalog).await?;
    Ok(filters
        .iter()
        .map(|f| {
            all.iter()
                .filter(|(_, acl)| f.matches(acl))
                .cloned()
                .collect()
        })
        .collect())
}

/// Deletes the ACLs of `keys`; the revision of the last write.
pub(crate) async fn delete(catalog: &Catalog, keys: Vec<String>) -> Result<i64, MetaError> {
    commit(catalog, keys.into_iter().map(Op::Delete).collect()).await
}

async fn commit(catalog: &Catalog, ops: Vec<Op>) -> Result<i64, MetaError> {
    let kv = catalog.kv();
    let mut revision = 0;
    let mut ops = ops.into_iter().peekable();
    while ops.peek().is_some() {
        let chunk: Vec<Op> = ops.by_ref().take(kv.max_txn_ops()).collect();
        revision = kv.txn(vec![], chunk).await?.unwrap_or(revision);
    }
    Ok(revision)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::acl::tests::acl;
    use super::super::acl::{Operation, PatternType, Permission, ResourceType};
    use super::*;
    use crate::meta::embedded::EmbeddedStore;

    #[tokio::test]
    async fn acls_are_stored_once_matched_by_filters_and_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let kv = EmbeddedStore::open(&dir.path().join("m.redb")).unwrap();
        let catalog = Catalog::new(Arc::new(kv), "t");
        let slashed = acl(
            ResourceType::Topic,
            "a/b%",
            PatternType::Literal,
            "User:CN=x/y",
            Operation::Read,
            Permission::Allow,
        );
        let group = acl(
            ResourceType::Group,
            "g",
            PatternType::Prefixed,
            "User:alice",
            Operation::All,
            Permission::Deny,
        );
        create(&catalog, &[slashed.clone(), group.clone()])
            .await
            .unwrap();
        create(&catalog, std::slice::from_ref(&slashed))
            .await
            .unwrap();
        let everything = AclFilter {
            resource_type: ResourceType::Any,
            resource_name: None,
            pattern_type: PatternType::Any,
            principal: None,
            host: None,
            operation: Operation::Any,
            permission: Permission::Any,
        };
        let topics = AclFilter {
            resource_type: ResourceType::Topic,
            ..everything.clone()
        };
        let found = matching(&catalog, &[everything, topics]).await.unwrap();
        assert_eq!(found[0].len(), 2, "stored once each");
        assert_eq!(found[1].len(), 1);
        assert_eq!(found[1][0].1, slashed);
        let key = found[1][0].0.clone();
        assert!(key.contains("a%2Fb%25"), "{key}");
        delete(&catalog, vec![key]).await.unwrap();
        let left = stored(&catalog).await.unwrap();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].1, group);
    }
}
