//! Producer ids for idempotent producers, unique across the cluster and its restarts: one
//! counter key holds the next free id, and each broker takes a block of ids from it with a
//! compare-and-swap (Kafka's AllocateProducerIds, 1000 at a time). A broker that stops
//! loses the rest of its block; ids are 63-bit, so that never runs out.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;

use super::catalog::Catalog;
use super::kv::{Compare, MetaError, Op};

/// Ids a broker takes at once.
const BLOCK: i64 = 1000;

pub(crate) struct ProducerIds {
    catalog: Arc<Catalog>,
    /// The rest of this broker's block.
    block: tokio::sync::Mutex<Range<i64>>,
}

impl ProducerIds {
    pub(crate) fn new(catalog: Arc<Catalog>) -> ProducerIds {
        ProducerIds {
            catalog,
            block: tokio::sync::Mutex::new(0..0),
        }
    }

    /// A producer id no other producer of the cluster got or will get.
    pub(crate) async fn next(&self) -> Result<i64, MetaError> {
        let mut block = self.block.lock().await;
        if block.is_empty() {
            *block = self.take_block().await?;
        }
        Ok(block.next().expect("a fresh block is not empty"))
    }

    async fn take_block(&self) -> Result<Range<i64>, MetaError> {
        let key = format!("{}/producer-ids", self.catalog.root());
        let kv = self.catalog.kv();
        loop {
            let (start, revision) = match kv.get(&key).await? {
                None => (0, 0),
                Some(found) => {
                    let start = std::str::from_utf8(&found.value)
                        .ok()
                        .and_then(|v| v.parse::<i64>().ok())
                        .filter(|&v| v >= 0)
                        .ok_or_else(|| MetaError::Corrupt {
                            key: key.clone(),
                            reason: "not a producer id".into(),
                        })?;
                    (start, found.mod_revision)
                }
            };
            let end = start + BLOCK;
            let ops = vec![Op::Put(key.clone(), Bytes::from(end.to_string()))];
            let compares = vec![Compare::ModRevision(key.clone(), revision)];
            // Another broker took the block first: take the next one.
            if kv.txn(compares, ops).await?.is_some() {
                return Ok(start..end);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::meta::embedded::EmbeddedStore;

    #[tokio::test]
    async fn brokers_sharing_a_store_never_hand_out_the_same_id() {
        let dir = tempfile::tempdir().unwrap();
        let kv: Arc<dyn crate::meta::kv::KvStore> =
            Arc::new(EmbeddedStore::open(&dir.path().join("m.redb")).unwrap());
        let catalog = Arc::new(Catalog::new(kv, "c"));
        let brokers: Vec<Arc<ProducerIds>> = (0..3)
            .map(|_| Arc::new(ProducerIds::new(catalog.clone())))
            .collect();
        let tasks = brokers.iter().map(|ids| {
            let ids = ids.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                for _ in 0..1500 {
                    got.push(ids.next().await.unwrap());
                }
                got
            })
        });
        let mut seen = HashSet::new();
        for task in tasks {
            for id in task.await.unwrap() {
                assert!(id >= 0);
                assert!(seen.insert(id), "{id} handed out twice");
            }
        }
        // A broker that starts again (a fresh allocator) continues after every block taken.
        let restarted = ProducerIds::new(catalog);
        assert!(restarted.next().await.unwrap() >= 6000);
    }
}
