//! Write-ahead manifests: the metadata that commits one shared write-ahead object.
//!
//! ```text
//! /kafscale/{cluster}/wal/{broker}/{writer}-{seq}   WalManifest: the runs of one committed object
//! /kafscale/{cluster}/writers/{broker}              broker id (ephemeral): orders its commits
//! /kafscale/{cluster}/sweeps/{broker}               the sweeper's id: marks a sweep of the
//!                                                   broker's uncommitted objects
//! ```
//!
//! A broker's flush uploads one object holding a run of batches for every partition it wrote,
//! then commits it (with the other objects uploaded by then) in one transaction whatever the
//! number of partitions: the manifest keys appear, and the broker's writer key is rewritten under the condition that it is still at
//! the revision this broker last wrote. The writer key is ephemeral, so a broker whose session
//! ended (frozen, partitioned away: its lease expired and its owner keys are gone with it)
//! commits nothing; and since every commit moves the key, a commit whose outcome the broker
//! could not learn is settled by moving the key once more (see `log::wal::commit`).
//!
//! Every commit is also conditioned on the broker's sweep mark being where it was when the
//! flights were taken: the sweeper of uncommitted objects moves the mark before it deletes a
//! broker's objects, so a flight whose object may be gone never commits afterwards – however
//! long its commit was delayed (an etcd outage longer than the sweep's age).

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::catalog::{encode, Catalog, PartitionRecord, VersionedPartition};
use super::kv::{Compare, KeyValue, MetaError, Op};

/// One partition's batches inside a write-ahead object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "RunRow", into = "RunRow")]
pub(crate) struct WalRun {
    pub partition: i32,
    /// The leader epoch the batches were written under.
    pub leader_epoch: i32,
    pub base_offset: i64,
    pub last_offset: i64,
    /// Byte range of the run within the object.
    pub position: u64,
    pub length: u64,
    pub max_timestamp: i64,
}

/// A run as stored: a plain array, so a manifest of thousands of partitions stays small.
#[derive(Serialize, Deserialize)]
struct RunRow(i32, i32, i64, i64, u64, u64, i64);

impl From<RunRow> for WalRun {
    fn from(
        RunRow(partition, leader_epoch, base_offset, last_offset, position, length, max_timestamp): RunRow,
    ) -> Self {
        WalRun {
            partition,
            leader_epoch,
            base_offset,
            last_offset,
            position,
            length,
            max_timestamp,
        }
    }
}

impl From<WalRun> for RunRow {
    fn from(r: WalRun) -> Self {
        RunRow(
            r.partition,
            r.leader_epoch,
            r.base_offset,
            r.last_offset,
            r.position,
            r.length,
            r.max_timestamp,
        )
    }
}

/// The runs of one topic in an object; the id tells a re-created topic's runs apart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TopicRuns {
    pub topic: String,
    pub id: Uuid,
    pub runs: Vec<WalRun>,
    /// The partitions whose run holds a transaction's batches or markers (left out when none
    /// does, as in manifests written before transactions existed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub transactional: Vec<i32>,
}

/// What one committed write-ahead object holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct WalManifest {
    /// The object's path in the bucket.
    pub object: String,
    pub broker: i32,
    pub created_ms: i64,
    pub size: u64,
    pub topics: Vec<TopicRuns>,
}

impl Catalog {
    /// Where every manifest lives.
    pub(crate) fn manifests_prefix(&self) -> String {
        format!("{}/wal/", self.root())
    }

    /// The manifest key of a write-ahead object named `name` (`{writer}-{seq}`).
    pub(crate) fn manifest_key(&self, broker: i32, name: &str) -> String {
        format!("{}/wal/{broker}/{name}", self.root())
    }

    fn writer_key(&self, broker: i32) -> String {
        format!("{}{broker}", self.writers_prefix())
    }

    /// Where the writer keys are: each commit writes its broker's, so their revisions tell
    /// how far the commits have come (`broker::read_barrier`).
    pub(crate) fn writers_prefix(&self) -> String {
        format!("{}/writers/", self.root())
    }

    fn sweep_key(&self, broker: i32) -> String {
        format!("{}/sweeps/{broker}", self.root())
    }

    /// The revision of the broker's sweep mark (0 while there is none): what its commits are
    /// conditioned on.
    pub(crate) async fn sweep_mark(&self, broker: i32) -> Result<i64, MetaError> {
        let mark = self.kv().get(&self.sweep_key(broker)).await?;
        Ok(mark.map_or(0, |kv| kv.mod_revision))
    }

    /// Marks a sweep of `broker`'s uncommitted objects by `sweeper`: no commit of that broker
    /// conditioned on an earlier mark lands from now on. Returns the mark's revision.
    pub(crate) async fn mark_sweep(&self, broker: i32, sweeper: i32) -> Result<i64, MetaError> {
        let put = Op::Put(self.sweep_key(broker), Bytes::from(sweeper.to_string()));
        let revision = self.kv().txn(vec![], vec![put]).await?;
        revision.ok_or_else(|| MetaError::Unavailable("unconditional write refused".into()))
    }

    /// The write that (re)creates the writer key under the current session, moving it on.
    fn move_writer(&self, broker: i32) -> Op {
        Op::PutEphemeral(self.writer_key(broker), Bytes::from(broker.to_string()))
    }

    /// (Re)creates this broker's writer key under session `session` (`KvStore::session`);
    /// returns its revision, the token the next commit is conditioned on, or None if that
    /// session ended (its flights may hold partitions this broker no longer owns). Rewriting
    /// the key also voids any earlier commit of this broker still on its way to the store.
    /// Like every commit, it is conditioned on the sweep mark at `sweep`.
    pub(crate) async fn open_writer(
        &self,
        broker: i32,
        session: u64,
        sweep: i64,
    ) -> Result<Option<i64>, MetaError> {
        let compares = vec![
            Compare::Session(session),
            Compare::ModRevision(self.sweep_key(broker), sweep),
        ];
        self.kv()
            .txn(compares, vec![self.move_writer(broker)])
            .await
    }

    /// Commits write-ahead objects in one transaction: their manifests (`(key, encoded)`, see
    /// `encode_manifest`) appear, conditioned on the writer key being at `guard.writer` and
    /// the sweep mark at `guard.sweep`. Returns the writer key's new revision, or None if the
    /// key moved (session lost: fenced) or a sweep was marked.
    pub(crate) async fn commit_manifests(
        &self,
        broker: i32,
        guard: CommitGuard,
        manifests: &[(String, Bytes)],
    ) -> Result<Option<i64>, MetaError> {
        let mut ops = Vec::with_capacity(manifests.len() + 1);
        ops.push(self.move_writer(broker));
        ops.extend(
            manifests
                .iter()
                .map(|(key, value)| Op::Put(key.clone(), value.clone())),
        );
        let compares = vec![
            Compare::ModRevision(self.writer_key(broker), guard.writer),
            Compare::ModRevision(self.sweep_key(broker), guard.sweep),
        ];
        self.kv().txn(compares, ops).await
    }

    /// Moves the writer key on if `guard` still holds (a commit of nothing): after this, no
    /// commit conditioned on it can land any more. None if it did not hold.
    pub(crate) async fn advance_writer(
        &self,
        broker: i32,
        guard: CommitGuard,
    ) -> Result<Option<i64>, MetaError> {
        self.commit_manifests(broker, guard, &[]).await
    }

    /// The manifest at `key`, if committed.
    pub(crate) async fn manifest(&self, key: &str) -> Result<Option<WalManifest>, MetaError> {
        match self.kv().get(key).await? {
            Some(kv) => parse_manifest(&kv).map(Some),
            None => Ok(None),
        }
    }

    /// Removes manifests whose objects are gone, as many per transaction as the store takes.
    pub(crate) async fn delete_manifests(&self, keys: &[String]) -> Result<(), MetaError> {
        for chunk in keys.chunks(self.kv().max_txn_ops().max(1)) {
            let ops = chunk.iter().map(|key| Op::Delete(key.clone())).collect();
            self.kv().txn(vec![], ops).await?;
        }
        Ok(())
    }

    /// Commits new partition records of owned partitions together (compaction moving their
    /// segment ends), each conditioned on its record and owner key as this broker last saw
    /// them – all or none. Returns the revision, or None if one of them changed (fenced).
    /// Callers keep a batch within `max_txn_ops() / 2` partitions.
    pub(crate) async fn commit_owned_records(
        &self,
        changes: &[OwnedChange<'_>],
    ) -> Result<Option<i64>, MetaError> {
        self.swap_owned_records(changes, |_, record| record).await
    }

    /// The answer to `commit_owned_records(changes)` was lost: whether it landed. First the
    /// records are written again as they were, under the same conditions – once that lands,
    /// the lost commit never can – and if that fails its conditions, the records are read
    /// back: the lost commit landed if one holds what it wrote (only the owner writes them,
    /// and it holds their record locks meanwhile).
    pub(crate) async fn settle_owned_records(
        &self,
        changes: &[OwnedChange<'_>],
    ) -> Result<Settled, MetaError> {
        let fence = self.swap_owned_records(changes, |owned, _| &owned.record);
        if let Some(revision) = fence.await? {
            return Ok(Settled::Rewritten(revision));
        }
        for (topic, partition, _, record) in changes {
            let stored = self
                .kv()
                .get(&self.partition_key(topic, *partition))
                .await?;
            if let Some(kv) = stored.filter(|kv| kv.value == encode(*record)) {
                return Ok(Settled::Landed(kv.mod_revision));
            }
        }
        Ok(Settled::Moved)
    }

    /// Writes, for each change, the record `pick` chooses, conditioned on its record and owner
    /// key as this broker last saw them – all or none.
    async fn swap_owned_records<'a>(
        &self,
        changes: &[OwnedChange<'a>],
        pick: impl Fn(&'a VersionedPartition, &'a PartitionRecord) -> &'a PartitionRecord,
    ) -> Result<Option<i64>, MetaError> {
        let mut compares = Vec::with_capacity(changes.len() * 2);
        let mut ops = Vec::with_capacity(changes.len());
        for (topic, partition, owned, record) in changes {
            let key = self.partition_key(topic, *partition);
            compares.push(Compare::ModRevision(key.clone(), owned.revision));
            compares.push(Compare::ModRevision(
                self.owner_key(topic, *partition),
                owned.owner_revision,
            ));
            ops.push(Op::Put(key, encode(pick(owned, record))));
        }
        self.kv().txn(compares, ops).await
    }
}

/// What a broker's commits are conditioned on: its writer key's revision and its sweep mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CommitGuard {
    pub writer: i64,
    pub sweep: i64,
}

/// A change of an owned partition's record: topic, partition, the record as committed before
/// and the new one.
pub(crate) type OwnedChange<'a> = (&'a str, i32, &'a VersionedPartition, &'a PartitionRecord);

/// How a commit of owned records whose answer was lost came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settled {
    /// It landed, at this revision.
    Landed(i64),
    /// It did not, and now cannot: the records were written again as they were, at this
    /// revision.
    Rewritten(i64),
    /// It did not, and a record or owner key changed meanwhile: the partition moved.
    Moved,
}

/// A manifest as stored (what `commit_manifests` takes).
pub(crate) fn encode_manifest(manifest: &WalManifest) -> Bytes {
    Bytes::from(serde_json::to_vec(manifest).expect("manifests serialize"))
}

pub(crate) fn parse_manifest(kv: &KeyValue) -> Result<WalManifest, MetaError> {
    serde_json::from_slice(&kv.value).map_err(|e| MetaError::Corrupt {
        key: kv.key.clone(),
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::meta::embedded::EmbeddedStore;

    fn manifest() -> WalManifest {
        WalManifest {
            object: "ns/!wal/0/ab-000000000001.wal".into(),
            broker: 0,
            created_ms: 5,
            size: 124,
            topics: vec![TopicRuns {
                topic: "t".into(),
                id: Uuid::nil(),
                runs: vec![WalRun {
                    partition: 3,
                    leader_epoch: 2,
                    base_offset: 10,
                    last_offset: 11,
                    position: 24,
                    length: 100,
                    max_timestamp: 7,
                }],
                transactional: Vec::new(),
            }],
        }
    }

    #[test]
    fn runs_are_stored_as_plain_arrays() {
        let json = serde_json::to_string(&manifest()).unwrap();
        assert!(json.contains(r#""runs":[[3,2,10,11,24,100,7]]"#), "{json}");
        let back: WalManifest = serde_json::from_str(&json).unwrap();
        assert_eq!(back, manifest());
    }

    /// A catalog over an embedded store in a directory of its own (kept while it is used).
    fn catalog() -> (tempfile::TempDir, Catalog) {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(&dir.path().join("m.redb")).unwrap();
        (dir, Catalog::new(Arc::new(store), "test"))
    }

    #[tokio::test]
    async fn a_commit_needs_the_writer_key_where_this_broker_left_it() {
        let (_dir, catalog) = catalog();
        let writer = catalog.open_writer(0, 1, 0).await.unwrap().unwrap();
        let token = CommitGuard { writer, sweep: 0 };
        let key = catalog.manifest_key(0, "ab-000000000001");
        let next = catalog
            .commit_manifests(0, token, &[(key.clone(), encode_manifest(&manifest()))])
            .await
            .unwrap()
            .expect("committed");
        let next = CommitGuard {
            writer: next,
            sweep: 0,
        };
        assert_eq!(catalog.manifest(&key).await.unwrap(), Some(manifest()));
        // a stale commit (conditioned on the old token) is refused and writes nothing
        let other = catalog.manifest_key(0, "ab-000000000002");
        let stale = [(other.clone(), encode_manifest(&manifest()))];
        let refused = catalog.commit_manifests(0, token, &stale).await;
        assert_eq!(refused.unwrap(), None);
        assert_eq!(catalog.manifest(&other).await.unwrap(), None);
        // moving the key on voids the current token too
        assert!(catalog.advance_writer(0, next).await.unwrap().is_some());
        let voided = catalog.commit_manifests(0, next, &stale).await;
        assert_eq!(voided.unwrap(), None);
        // a writer key is never opened for a session that is not the store's current one
        assert_eq!(catalog.open_writer(0, 2, 0).await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_sweep_mark_voids_every_commit_conditioned_on_an_earlier_one() {
        let (_dir, catalog) = catalog();
        assert_eq!(catalog.sweep_mark(0).await.unwrap(), 0);
        let writer = catalog.open_writer(0, 1, 0).await.unwrap().unwrap();
        let mark = catalog.mark_sweep(0, 7).await.unwrap();
        assert_eq!(catalog.sweep_mark(0).await.unwrap(), mark);
        let key = catalog.manifest_key(0, "ab-000000000001");
        let one = [(key.clone(), encode_manifest(&manifest()))];
        let stale = CommitGuard { writer, sweep: 0 };
        assert_eq!(
            catalog.commit_manifests(0, stale, &one).await.unwrap(),
            None
        );
        assert_eq!(catalog.advance_writer(0, stale).await.unwrap(), None);
        assert_eq!(catalog.open_writer(0, 1, 0).await.unwrap(), None);
        assert_eq!(catalog.manifest(&key).await.unwrap(), None);
        // under the new mark, commits go on
        let writer = catalog.open_writer(0, 1, mark).await.unwrap().unwrap();
        let guard = CommitGuard {
            writer,
            sweep: mark,
        };
        assert!(catalog
            .commit_manifests(0, guard, &one)
            .await
            .unwrap()
            .is_some());
        // another broker's mark is another key
        catalog.mark_sweep(1, 7).await.unwrap();
        assert_eq!(catalog.sweep_mark(0).await.unwrap(), mark);
    }

    #[tokio::test]
    async fn one_commit_carries_several_objects_or_none() {
        let (_dir, catalog) = catalog();
        let writer = catalog.open_writer(0, 1, 0).await.unwrap().unwrap();
        let token = CommitGuard { writer, sweep: 0 };
        let group = |seqs: std::ops::RangeInclusive<u64>| -> Vec<(String, Bytes)> {
            seqs.map(|seq| {
                let key = catalog.manifest_key(0, &format!("ab-{seq:012}"));
                (key, encode_manifest(&manifest()))
            })
            .collect()
        };
        let first = group(1..=3);
        let next = catalog.commit_manifests(0, token, &first).await.unwrap();
        assert!(next.is_some());
        for (key, _) in &first {
            assert_eq!(catalog.manifest(key).await.unwrap(), Some(manifest()));
        }
        // refused as a whole: none of a stale group's manifests appears
        let late = group(4..=5);
        assert_eq!(
            catalog.commit_manifests(0, token, &late).await.unwrap(),
            None
        );
        for (key, _) in &late {
            assert_eq!(catalog.manifest(key).await.unwrap(), None);
        }
    }
}
