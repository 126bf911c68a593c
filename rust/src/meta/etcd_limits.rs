//! etcd refusals that no retry cures: a request beyond one of etcd's configured limits. They
//! are reported as the limit they are (naming the etcd flag and what to do), not as an
//! unavailable store – a client told "unavailable" retries the same request forever.

use etcd_client as etcd;

use super::kv::MetaError;

/// etcd's answers (gRPC status messages) for each limit, and what to tell the operator.
const LIMITS: &[(&[&str], &str)] = &[
    (
        &["too many operations in txn request"],
        "etcd refused a transaction with more operations than its --max-txn-ops allows (128 \
         by default). KafScale splits its own writes to stay within 128; start every etcd \
         member with a larger --max-txn-ops if it was lowered",
    ),
    (
        // etcd's own check, and gRPC's (etcd accepts messages up to 512 KiB above the limit)
        &["request is too large", "received message larger than max"],
        "etcd refused a request larger than its --max-request-bytes allows (1.5 MiB by \
         default). Start every etcd member with a larger --max-request-bytes (e.g. 10485760), \
         or send smaller requests (fewer topics, configs or offsets per request)",
    ),
    (
        &["database space exceeded"],
        "etcd's database reached its --quota-backend-bytes (2 GiB by default) and takes no \
         more writes. Compact and defragment etcd (etcdctl compact, etcdctl defrag) or raise \
         --quota-backend-bytes, then clear the alarm with `etcdctl alarm disarm`",
    ),
    (
        // tonic's own limit on what this client decodes (MAX_RESPONSE_BYTES in `etcd`)
        &["decoded message length too large"],
        "an etcd response is larger than a broker reads at once (256 MiB): this cluster's \
         metadata has outgrown one listing. Delete topics that are no longer used",
    ),
];

/// The error for a failed etcd call: `Limit` when etcd (or this client) refused it for a
/// configured limit, `Unavailable` otherwise.
pub(crate) fn classify(error: etcd::Error) -> MetaError {
    if let etcd::Error::GRpcStatus(status) = &error {
        let answer = status.message();
        if let Some((_, advice)) = LIMITS
            .iter()
            .find(|(texts, _)| texts.iter().any(|text| answer.contains(text)))
        {
            return MetaError::Limit(format!("{advice} (etcd: {answer})"));
        }
    }
    MetaError::Unavailable(format!("etcd: {error}"))
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::meta::etcd::EtcdStore;
    use crate::meta::kv::{KvStore, Op};
    use crate::meta::test_etcd::TestEtcd;

    #[tokio::test]
    async fn limits_of_a_real_etcd_are_named_not_unavailable() {
        let etcd = TestEtcd::start().await;
        let ttl = std::time::Duration::from_secs(5);
        let store = EtcdStore::connect(&etcd.endpoints(), None, ttl)
            .await
            .unwrap();
        let put = |i: usize, size: usize| Op::Put(format!("l/{i}"), Bytes::from(vec![b'x'; size]));

        let too_many: Vec<Op> = (0..129).map(|i| put(i, 1)).collect();
        let error = store.txn(vec![], too_many).await.unwrap_err();
        assert!(matches!(&error, MetaError::Limit(_)), "{error}");
        assert!(error.to_string().contains("--max-txn-ops"), "{error}");

        // above etcd's 1.5 MiB, and above what its gRPC server takes at all
        for size in [1_800_000, 3 << 20] {
            let error = store.txn(vec![], vec![put(0, size)]).await.unwrap_err();
            assert!(matches!(&error, MetaError::Limit(_)), "{size}: {error}");
            assert!(error.to_string().contains("--max-request-bytes"), "{error}");
        }

        // within the limits the same store works
        let fits: Vec<Op> = (0..128).map(|i| put(i, 1)).collect();
        assert!(store.txn(vec![], fits).await.unwrap().is_some());
    }

    #[test]
    fn other_failures_stay_unavailable() {
        let error = classify(etcd::Error::InvalidArgs("no endpoint".into()));
        assert!(matches!(error, MetaError::Unavailable(_)), "{error}");
    }
}
