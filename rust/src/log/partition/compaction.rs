//! Compaction of one owned partition: its write-ahead runs above the segment end become a
//! `.kfs` + `.index` segment once they hold `segment.bytes` or the oldest is
//! `wal_compaction_age` old. A commit that brings a partition's runs to a segment's worth
//! puts it on the due list (`CompactionDue`), so it is compacted at once, from the cache,
//! instead of at the next compaction interval, when its runs may have to be read back. The segment is uploaded here; the switch (the record's
//! `segment_end` moves past it) is committed by the caller together with other partitions'
//! (`meta::wal::commit_segment_ends`), fenced like any owner's change.
//!
//! A crash or a failed commit leaves a segment object at the old segment end that nothing
//! refers to. The next compaction of the partition (this owner or the next) finds it in its
//! way: made from the same committed batches it is a valid segment of the log and is taken as
//! it is; anything else there is deleted (nothing committed can be, and nothing can refer to
//! it) and the next round writes afresh.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::StreamExt;
use kafka_protocol::ResponseError;
use object_store::PutPayload;
use tokio::sync::Notify;

use super::Partition;
use crate::log::batch::BatchHeader;
use crate::log::occupant::{self, PutOutcome};
use crate::log::reader::load_run;
use crate::log::segment::{
    build_segment, BatchWalker, BuiltSegment, ParsedSegment, SegmentMeta, StoredBatch,
};
use crate::log::LogContext;
use crate::meta::catalog::{PartitionRecord, VersionedPartition};
use crate::store::SegmentObject;

/// A segment uploaded and ready to be committed, with the record lock still held.
pub(crate) struct Compacted {
    pub owned: VersionedPartition,
    /// The record with `segment_end` moved past the segments.
    pub record: PartitionRecord,
    /// The segments uploaded, in offset order. Their batch bytes wait in the cache under a
    /// pending name (`pending_key`) until the commit: the cache's bound covers them, and they
    /// count for nothing if the commit fails.
    segments: Vec<SegmentMeta>,
    /// It stopped at its limits (`SEGMENTS_PER_COMPACTION`, `BYTES_PER_COMPACTION`), not
    /// because nothing more was due.
    more_due: bool,
    _lock: tokio::sync::OwnedMutexGuard<()>,
}

/// How an upload of a segment ended.
enum Uploaded {
    /// Its objects were created.
    Created,
    /// An object of the same committed batches was there and is taken as the segment (its
    /// extent may differ from the one built).
    Occupant(SegmentMeta),
}

/// Segment uploads of one partition's compaction in flight at once.
const UPLOADS_IN_FLIGHT: usize = 8;

/// Segments one compaction of a partition uploads at most (the rest waits for the next
/// interval); they are committed together, in one metadata write.
const SEGMENTS_PER_COMPACTION: usize = 16;

/// Segment bytes one compaction uploads at most before its commit (at least one segment,
/// however large), so that large segments are committed as they come, not a round's worth at
/// once. Each compaction also stores the producer state anew (one more upload and one delete),
/// so its size is what keeps those few per GiB.
const BYTES_PER_COMPACTION: u64 = 64 << 20;

impl Compacted {
    /// Whether the partition has more due once this is committed.
    pub(crate) fn more_due(&self) -> bool {
        self.more_due
    }

    /// Commits the switch alone (the compaction loop batches it with others): its revision.
    #[cfg(test)]
    pub(crate) async fn commit_alone(&self, ctx: &LogContext, topic: &str, partition: i32) -> i64 {
        let change = (topic, partition, &self.owned, &self.record);
        let committed = ctx.catalog.commit_owned_records(&[change]).await;
        committed.unwrap().expect("committed")
    }
}

/// Partitions whose committed runs hold a segment's worth, waiting for the compaction loop.
#[derive(Default)]
pub(crate) struct CompactionDue {
    partitions: Mutex<Vec<Arc<Partition>>>,
    added: Notify,
    /// Nothing is put on the list: a test compacts when it says so.
    #[cfg(test)]
    held: std::sync::atomic::AtomicBool,
}

impl CompactionDue {
    fn partitions(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Partition>>> {
        self.partitions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a run of `bytes` just committed for `partition`, and puts the partition on the
    /// list if its runs now hold a segment's worth.
    pub(crate) fn note_committed_run(&self, partition: &Arc<Partition>, bytes: u64) {
        #[cfg(test)]
        if self.held.load(Ordering::Acquire) {
            return;
        }
        let before = partition
            .uncompacted_bytes
            .fetch_add(bytes, Ordering::AcqRel);
        let worth = partition.segment_bytes() as u64;
        if before + bytes >= worth && !partition.compaction_queued.swap(true, Ordering::AcqRel) {
            self.partitions().push(partition.clone());
            self.added.notify_one();
        }
    }

    /// The partitions put on the list since the last call (each may be put on it again).
    pub(crate) fn take(&self) -> Vec<Arc<Partition>> {
        let taken = std::mem::take(&mut *self.partitions());
        for partition in &taken {
            partition.compaction_queued.store(false, Ordering::Release);
        }
        taken
    }

    /// Returns once a partition was put on the list (at once if one was since the last wait).
    pub(crate) async fn added(&self) {
        self.added.notified().await;
    }

    /// From now on nothing is put on the list (the compaction loop would race a test's own).
    #[cfg(test)]
    pub(crate) fn hold(&self) {
        self.held.store(true, Ordering::Release);
    }
}

impl Partition {
    /// Uploads the next segments while the write-ahead runs above the segment end are due
    /// (at most `SEGMENTS_PER_COMPACTION`); None if none is (or the log takes no writes here).
    pub(crate) async fn compact(&self, ctx: &LogContext, now_ms: i64) -> Option<Compacted> {
        let lock = self.record_lock.clone().lock_owned().await;
        // A log that stopped taking writes (handed off, shutting down) is no longer this
        // broker's to compact, even while its owner key is; nor one whose producer state is
        // not rebuilt yet (the next snapshot is made from it).
        if !self.is_leader() || !self.state().producers.loaded {
            return None;
        }
        let owned = self.owned()?;
        let end = self.high_watermark();
        // Records deleted before they were compacted (DeleteRecords past the segment end) are
        // not written again: segments go on from the batch that holds the log start.
        let from = owned
            .record
            .segment_end()
            .max(owned.record.log_start_offset);
        let (segments, more_due) = self.upload_segments(ctx, from, end, now_ms).await;
        let from = segments.last()?.last_offset + 1;
        let mut record = owned.record.clone();
        record.segment_end = Some(from);
        record.high_watermark = record.high_watermark.max(from);
        // The segment end must not pass the stored producer state: store it anew.
        record.producer_snapshot = self
            .store_producer_snapshot(ctx, record.producer_snapshot)
            .await
            .ok()?;
        Some(Compacted {
            owned,
            record,
            segments,
            more_due,
            _lock: lock,
        })
    }

    /// Uploads the segments due from `from` on, within one compaction's limits, in offset
    /// order; whether it stopped at those limits (more is due). Each segment is built (from the
    /// cache, mostly) while the ones before it upload, `UPLOADS_IN_FLIGHT` at most: a segment's
    /// upload takes a round trip or two to the object store, during which the next one's bytes
    /// are ready, and a burst of writes must be compacted as fast as it comes, or its runs
    /// leave the cache before compaction reads them (read back, a GET each).
    async fn upload_segments(
        &self,
        ctx: &LogContext,
        from: i64,
        end: i64,
        now_ms: i64,
    ) -> (Vec<SegmentMeta>, bool) {
        let at_limits = AtomicBool::new(false);
        let planned = futures::stream::unfold((from, 0, 0), |(from, count, bytes)| {
            let at_limits = &at_limits;
            async move {
                if count >= SEGMENTS_PER_COMPACTION || bytes >= BYTES_PER_COMPACTION {
                    at_limits.store(true, Ordering::Relaxed);
                    return None;
                }
                let built = self.build_next_segment(ctx, from, end, now_ms).await?;
                let next = (
                    built.meta.last_offset + 1,
                    count + 1,
                    bytes + built.meta.size,
                );
                Some((built, next))
            }
        });
        let mut uploads = planned
            .map(|built| self.upload_segment(ctx, built, end))
            .buffered(UPLOADS_IN_FLIGHT)
            // (boxed: the compiler cannot tell on its own that these closures' futures are Send)
            .boxed();
        let mut segments = Vec::new();
        while let Some(uploaded) = uploads.next().await {
            if !self.take_uploaded(ctx, uploaded, &mut segments) {
                // The uploads after it are not part of this compaction: what they created is
                // found in the way by a later one (see the module's comment).
                return (segments, false);
            }
        }
        (segments, at_limits.load(Ordering::Relaxed))
    }

    /// Takes an upload's outcome into `segments` (its batches into the cache, under its pending
    /// name); false if the segments planned after it no longer follow on (it failed, or an
    /// occupant of other extent took its place).
    fn take_uploaded(
        &self,
        ctx: &LogContext,
        (built, uploaded): (BuiltSegment, Option<Uploaded>),
        segments: &mut Vec<SegmentMeta>,
    ) -> bool {
        match uploaded {
            Some(Uploaded::Created) => {
                ctx.cache
                    .insert_segment(self.pending_key(built.meta.base_offset), &built);
                segments.push(built.meta);
                true
            }
            Some(Uploaded::Occupant(meta)) => {
                let follows = meta.last_offset == built.meta.last_offset;
                segments.push(meta);
                follows
            }
            None => false,
        }
    }

    /// Builds the segment that starts at `from` if the runs from there are due; None if they
    /// are not (or cannot be read now).
    async fn build_next_segment(
        &self,
        ctx: &LogContext,
        from: i64,
        end: i64,
        now_ms: i64,
    ) -> Option<BuiltSegment> {
        let runs = ctx.wal.runs_from((self.topic_id, self.id), from);
        let runs: Vec<_> = runs
            .into_iter()
            .filter(|r| r.run.base_offset < end)
            .collect();
        let segment_bytes = self.segment_bytes() as u64;
        // (A run that straddles `from` counts whole: close enough for the size trigger.)
        let bytes: u64 = runs.iter().map(|r| r.run.length).sum();
        let age = self
            .limits
            .roll_age(ctx.settings.wal_compaction_age)
            .as_millis() as i64;
        let due = runs
            .first()
            .is_some_and(|r| bytes >= segment_bytes || now_ms - r.created_ms >= age);
        if !due {
            // What is left is counted anew: what the commits counted may be gone (a log start
            // moved past it), and the partition must not be due by size again for it.
            self.uncompacted_bytes.store(bytes, Ordering::Release);
            return None;
        }
        let mut taken = 0;
        let runs = runs.into_iter().take_while(|r| {
            let more = taken < segment_bytes;
            taken += r.run.length;
            more
        });
        let last = runs.last()?.run.last_offset;
        let mut batches = self.committed_batches(ctx, from, last).await?;
        // Cut at the first batch boundary at or past segment.bytes (a run may be larger).
        let mut size = 0;
        let cut = batches.iter().position(|b| {
            size += b.size() as u64;
            size >= segment_bytes
        });
        batches.truncate(cut.map_or(batches.len(), |i| i + 1));
        Some(build_segment(&batches, now_ms, ctx.settings.index_interval))
    }

    /// Uploads a built segment; None if an upload failed (logged; the next round retries).
    async fn upload_segment(
        &self,
        ctx: &LogContext,
        built: BuiltSegment,
        end: i64,
    ) -> (BuiltSegment, Option<Uploaded>) {
        let base = built.meta.base_offset;
        let uploaded = match self
            .put_segment(ctx, base, built.payload(), &built.index)
            .await
        {
            Some(true) => Some(Uploaded::Created),
            Some(false) => self
                .take_occupant(ctx, base, end)
                .await
                .map(Uploaded::Occupant),
            None => None,
        };
        (built, uploaded)
    }

    /// The committed switch to the new segments: the record as written and its revision.
    pub(crate) fn compacted(&self, ctx: &LogContext, compacted: Compacted, revision: i64) {
        let Compacted {
            owned,
            record,
            segments,
            ..
        } = compacted;
        // The runs compacted are cached as part of their segments now (the same slices):
        // entries of their own would only count those bytes twice.
        // What is left above the new segment end is counted anew.
        let (compacted_from, compacted_to) = (owned.record.segment_end(), record.segment_end());
        let mut left = 0;
        for run in ctx.wal.runs_from((self.topic_id, self.id), compacted_from) {
            if run.run.last_offset >= compacted_to {
                left += run.run.length;
            } else {
                ctx.cache.remove(&run.cache_key());
            }
        }
        self.uncompacted_bytes.store(left, Ordering::Release);
        for segment in &segments {
            ctx.metrics.compaction_segments_written.inc();
            ctx.metrics.compaction_bytes_written.inc_by(segment.size);
            let base = segment.base_offset;
            ctx.cache
                .rename(&self.pending_key(base), self.object_key(base));
        }
        if let Some(old) = owned.record.producer_snapshot {
            if record.producer_snapshot != Some(old) {
                self.drop_producer_snapshot(ctx, old);
            }
        }
        let mut state = self.state();
        state.committed = VersionedPartition {
            record,
            revision,
            owner_revision: owned.owner_revision,
            session: owned.session,
        };
        if let Some(listed) = state.segments.as_mut() {
            listed.extend(segments);
        }
    }

    /// The record was written again as it was, at `revision` (settling a compaction commit
    /// whose answer was lost): only its revision moved, which later changes are conditioned on.
    pub(crate) fn record_rewritten(&self, before: &VersionedPartition, revision: i64) {
        let mut state = self.state();
        if state.committed.owner_revision == before.owner_revision
            && state.committed.revision == before.revision
        {
            state.committed.revision = revision;
        }
    }

    /// The committed batches from the one holding `from` through the one holding `last` (see
    /// `visit_committed_batches`); None if they cannot be read now.
    pub(super) async fn committed_batches(
        &self,
        ctx: &LogContext,
        from: i64,
        last: i64,
    ) -> Option<Vec<StoredBatch>> {
        let mut batches = Vec::new();
        let read = self.visit_committed_batches(ctx, from, last, |batch, _| batches.push(batch));
        read.await.then_some(batches)
    }

    /// Visits the committed batches from the one holding `from` through the one holding
    /// `last` (and the rest of its run), from the write-ahead runs (all there: runs above the
    /// segment end are never deleted), loading one run at a time. False if a run cannot be
    /// read now, or is malformed or leaves a gap (logged).
    pub(super) async fn visit_committed_batches(
        &self,
        ctx: &LogContext,
        from: i64,
        last: i64,
        mut visit: impl FnMut(StoredBatch, &BatchHeader),
    ) -> bool {
        let mut next = from;
        let mut first = true;
        for run in ctx.wal.runs_from((self.topic_id, self.id), from) {
            if next > last {
                break;
            }
            let Ok((run, loaded)) = load_run(ctx, run).await else {
                return false;
            };
            for item in loaded.batches() {
                let Ok((batch, header)) = item else {
                    tracing::error!(object = %run.object, "write-ahead run is malformed");
                    return false;
                };
                if header.last_offset() < next {
                    continue;
                }
                // The first batch may begin below `from` (a log start inside a batch).
                let first_holds_from = first && header.base_offset < next;
                if header.base_offset != next && !first_holds_from {
                    self.runs_gap(ctx, next, header.base_offset).await;
                    return false;
                }
                first = false;
                next = header.last_offset() + 1;
                visit(batch, &header);
            }
        }
        next > last
    }

    /// A gap in the committed runs as this broker's write-ahead index has them. Expected on an
    /// owner that lost the partition without seeing it yet (frozen, or cut off from the store,
    /// past its lease): the new owner compacted the log and the manifests below its segment
    /// end went, which the index (following the store) shows before the ownership reconciler
    /// acts. The store's owner key then is not the one this broker wrote: it stops taking
    /// writes at once (it could commit none of them) until the reconciler makes it a
    /// follower. Otherwise the log has a hole: logged as the error it is.
    async fn runs_gap(&self, ctx: &LogContext, expected: i64, found: i64) {
        let owner_revision = self.owned().map_or(0, |owned| owned.owner_revision);
        let owner_key = ctx.catalog.owner_key(&self.topic, self.id);
        let still_owner = match ctx.catalog.kv().get(&owner_key).await {
            Ok(owner) => owner.is_some_and(|kv| kv.mod_revision == owner_revision),
            Err(_) => true, // cannot tell: reported as the gap it may be
        };
        if owner_revision != 0 && !still_owner {
            tracing::info!(topic = %self.topic, partition = self.id,
                "the partition has another owner already (its write-ahead runs moved on): \
                 no longer taking writes for it");
            self.close(ResponseError::NotLeaderOrFollower);
            return;
        }
        tracing::error!(topic = %self.topic, partition = self.id, expected, found,
            "write-ahead runs have a gap");
    }

    /// Where an uploaded segment's batches wait in the cache until its commit.
    fn pending_key(&self, base_offset: i64) -> String {
        format!("pending:{}", self.object_key(base_offset))
    }

    /// Creates the segment's objects; false if the data object's name is taken by other bytes.
    /// None if an upload failed (logged; the next round retries).
    async fn put_segment(
        &self,
        ctx: &LogContext,
        base: i64,
        object: PutPayload,
        index: &Bytes,
    ) -> Option<bool> {
        let data = self.segment_path(ctx, base, SegmentObject::Data);
        let index_path = self.segment_path(ctx, base, SegmentObject::Index);
        for (path, payload) in [(&data, object), (&index_path, index.clone().into())] {
            match occupant::put_new(ctx, path, payload).await {
                Ok(PutOutcome::Created) => {}
                Ok(PutOutcome::Occupied) if path == &data => return Some(false),
                // The index of an occupant: rewritten with the occupant (see `take_occupant`).
                Ok(PutOutcome::Occupied) => return Some(false),
                Err(error) => {
                    tracing::warn!(topic = %self.topic, partition = self.id, base, %error,
                        "compaction upload failed; retrying next round");
                    return None;
                }
            }
        }
        Some(true)
    }

    /// An object sits at the segment's name already. Taken as the segment (with an index made
    /// for it) if it holds exactly the committed batches from `from` on – a compaction of the
    /// same runs that did not get to commit, maybe by an earlier owner. Deleted only when it is
    /// provably no segment of this log: unreadable, or other bytes than the committed batches
    /// at its offsets (committed batches never change, so no committed segment can differ from
    /// them). One that reaches past what this broker knows is committed is left alone: this
    /// broker may be a stale owner looking at a newer owner's committed segment.
    async fn take_occupant(&self, ctx: &LogContext, from: i64, end: i64) -> Option<SegmentMeta> {
        let data = self.segment_path(ctx, from, SegmentObject::Data);
        let found = ctx.store.get(&data).await.ok()?;
        let foreign = match ParsedSegment::parse(found.clone()) {
            Ok(theirs) if theirs.base_offset == from && theirs.last_offset >= end => {
                tracing::warn!(object = %data, end,
                    "a segment reaching past the committed end known here is in the way; leaving it");
                return None;
            }
            Ok(theirs) if theirs.base_offset == from => {
                let ours = self
                    .committed_batches(ctx, from, theirs.last_offset)
                    .await?;
                let mut bytes = theirs.batches.clone();
                let same = ours.iter().flat_map(StoredBatch::pieces).all(|piece| {
                    let size = piece.len().min(bytes.len());
                    bytes.split_to(size) == piece
                }) && bytes.is_empty();
                if same {
                    return self.take_as_segment(ctx, theirs, found.len() as u64).await;
                }
                true
            }
            _ => true,
        };
        if foreign {
            tracing::warn!(object = %data, "removing an uncommitted object that is not this log's segment");
            let _ = ctx.store.delete(&data).await;
        }
        None
    }

    /// Makes an occupant that holds the committed batches the segment: writes its index, or
    /// keeps the one there if it is a readable index (made with another interval, say).
    async fn take_as_segment(
        &self,
        ctx: &LogContext,
        theirs: ParsedSegment,
        size: u64,
    ) -> Option<SegmentMeta> {
        let index = segment_index(&theirs, ctx.settings.index_interval);
        let index_path = self.segment_path(ctx, theirs.base_offset, SegmentObject::Index);
        if let PutOutcome::Occupied = occupant::put_new(ctx, &index_path, index).await.ok()? {
            let existing = ctx.store.get(&index_path).await.ok()?;
            if crate::log::index::SparseIndex::parse(&existing).is_err() {
                tracing::warn!(object = %index_path, "an unreadable index is in the way; not compacting");
                return None;
            }
        }
        Some(SegmentMeta {
            base_offset: theirs.base_offset,
            last_offset: theirs.last_offset,
            generation: None,
            size,
            max_timestamp: None,
        })
    }
}

/// The index of a parsed segment.
fn segment_index(parsed: &ParsedSegment, interval: i32) -> Bytes {
    let mut index = crate::log::index::IndexBuilder::new(interval);
    let mut position = crate::log::segment::SEGMENT_HEADER_LEN as u32;
    for (_, header) in BatchWalker::new(&parsed.batches).flatten() {
        index.add_batch(header.base_offset, position, header.offset_count());
        position += header.size as u32;
    }
    index.encode()
}
