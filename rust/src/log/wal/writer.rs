//! Group commit, per broker: the first append after a flush starts the flush interval; when it
//! ends (or the buffered bytes reach `wal_object_max_bytes` first) one flush takes the
//! buffered batches of every partition, uploads them as one write-ahead object and commits its
//! manifest in one metadata transaction, then acknowledges them. Flushes run one at a time, so
//! commits are ordered and a partition's runs follow each other without gaps.
//!
//! A commit is conditioned on the broker's writer key (`meta::wal`). When the store's answer is
//! lost (timeout, connection reset), the commit may or may not have landed: the writer moves
//! its key on – after that, the lost commit can no longer land – and then looks for the
//! manifest to learn which it was. A failed flush acknowledges nothing; its object is never
//! part of any log (the sweep removes it).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kafka_protocol::ResponseError;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::index::{run_cache_key, WalIndex};
use super::object::build_wal_object;
use crate::log::cache::CachedBatches;
use crate::log::partition::{now_ms, Partition, Taken};
use crate::log::LogContext;
use crate::meta::kv::MetaError;
use crate::meta::wal::{TopicRuns, WalManifest, WalRun};
use crate::store::StoreError;

/// How long a failed flush waits before the next, at most.
const MAX_RETRY_BACKOFF: Duration = Duration::from_secs(5);

/// Shutdown and hand-off give up after this many failed flushes.
const DRAIN_ATTEMPTS: usize = 50;

/// Partitions one object carries at most: its manifest (about 40 bytes a run) stays far below
/// etcd's 1.5 MiB request limit. The rest waits for the next flush, due at once.
const MAX_RUNS_PER_OBJECT: usize = 16_384;

/// Partitions with buffered batches, waiting for the next flush.
#[derive(Default)]
struct Queue {
    partitions: Vec<Arc<Partition>>,
    bytes: usize,
    /// When the first of these batches was appended: the flush is due an interval later.
    since: Option<Instant>,
}

pub struct WalWriter {
    ctx: Arc<LogContext>,
    index: Arc<WalIndex>,
    broker: i32,
    /// Random per process: object names of two runs of the same broker id never collide.
    writer_id: String,
    queue: Mutex<Queue>,
    /// Woken by the first append after a flush and by a full buffer.
    wake: Arc<Notify>,
    /// One flush at a time; holds the writer key's revision (None until opened or after the
    /// key was lost) and the next object's sequence number.
    flushing: tokio::sync::Mutex<WriterState>,
    fenced: Arc<FencedWriters>,
}

#[derive(Default)]
struct WriterState {
    token: Option<i64>,
    seq: u64,
}

/// Partitions whose flush was fenced and left them unwritable while this broker may still
/// hold their owner keys: the ownership reconciler looks at each again, gives it up and
/// claims it afresh. Nothing else would wake it.
#[derive(Default)]
pub struct FencedWriters {
    partitions: Mutex<Vec<(Arc<str>, i32)>>,
    reported: Notify,
}

impl FencedWriters {
    fn report(&self, partition: &Partition) {
        let mut partitions = self.partitions.lock().unwrap_or_else(|p| p.into_inner());
        partitions.push((partition.topic.clone(), partition.id));
        self.reported.notify_one();
    }

    /// The partitions reported since the last call.
    pub fn take(&self) -> Vec<(Arc<str>, i32)> {
        std::mem::take(&mut *self.partitions.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Returns once a partition was reported (since the last wait).
    pub async fn reported(&self) {
        self.reported.notified().await;
    }
}

/// Why a flush committed nothing, and what its producers are told.
struct Failure {
    error: ResponseError,
    /// This broker may not commit any more (its writer key moved): nothing buffered can.
    fenced: bool,
    message: String,
}

impl Failure {
    fn storage(message: String) -> Failure {
        Failure {
            error: ResponseError::KafkaStorageError,
            fenced: false,
            message,
        }
    }

    fn fenced() -> Failure {
        Failure {
            error: ResponseError::NotLeaderOrFollower,
            fenced: true,
            message: "the writer key moved: this broker's session ended".into(),
        }
    }
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        Failure::storage(format!("object storage: {e}"))
    }
}

impl From<MetaError> for Failure {
    fn from(e: MetaError) -> Self {
        Failure::storage(e.to_string())
    }
}

/// What one flush took from one partition.
struct Part {
    partition: Arc<Partition>,
    taken: Taken,
}

impl WalWriter {
    /// The writer, and its flush loop running in the background.
    pub fn start(ctx: Arc<LogContext>, index: Arc<WalIndex>, broker: i32) -> Arc<WalWriter> {
        let writer = Arc::new(WalWriter {
            ctx,
            index,
            broker,
            writer_id: format!("{:016x}", uuid::Uuid::new_v4().as_u64_pair().0),
            queue: Mutex::default(),
            wake: Arc::default(),
            flushing: tokio::sync::Mutex::default(),
            fenced: Arc::default(),
        });
        tokio::spawn(flush_loop(Arc::downgrade(&writer)));
        writer
    }

    /// Where partitions left unwritable by a fenced flush are reported.
    pub fn fenced(&self) -> &FencedWriters {
        &self.fenced
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Called after every append with the bytes it added.
    pub fn note_append(&self, partition: &Arc<Partition>, appended: usize) {
        let mut queue = self.queue();
        if partition.enqueue() {
            queue.partitions.push(partition.clone());
        }
        queue.bytes += appended;
        let first = queue.since.is_none();
        queue.since.get_or_insert_with(Instant::now);
        if first || queue.bytes >= self.ctx.settings.wal_object_max_bytes {
            self.wake.notify_one();
        }
    }

    /// Flushes until none of `partitions` has buffered batches (hand-off and shutdown; they
    /// take no more writes). Gives up after a bounded number of failed flushes.
    pub async fn drain(&self, partitions: &[Arc<Partition>]) {
        let mut backoff = self
            .ctx
            .settings
            .flush_interval
            .max(Duration::from_millis(100));
        for _ in 0..DRAIN_ATTEMPTS {
            {
                let mut queue = self.queue();
                for partition in partitions {
                    if partition.has_pending() && partition.enqueue() {
                        queue.partitions.push(partition.clone());
                    }
                }
            }
            {
                // No flush under way (one that fails puts its batches back).
                let _idle = self.flushing.lock().await;
                if !partitions.iter().any(|p| p.has_pending()) {
                    return;
                }
            }
            if !self.flush().await {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_RETRY_BACKOFF);
            }
        }
        for partition in partitions.iter().filter(|p| p.has_pending()) {
            tracing::error!(
                topic = %partition.topic, partition = partition.id,
                "buffered writes could not be flushed; they were not acknowledged"
            );
        }
    }

    /// Runs one flush of what is queued now (at most one object's worth; what is left stays
    /// queued and due at once). False if it failed.
    pub async fn flush(&self) -> bool {
        self.flush_queued(false).await
    }

    /// One flush; `on_schedule` keeps the flush interval's schedule for what comes next (a
    /// flush the size cap brought early does not push the next interval flush back, so the
    /// objects per second stay within intervals + bytes ÷ cap).
    async fn flush_queued(&self, on_schedule: bool) -> bool {
        let mut state = self.flushing.lock().await;
        let parts = self.take_parts(on_schedule);
        if parts.is_empty() {
            return true;
        }
        let started = std::time::Instant::now();
        let flushed = self.write(&mut state, parts).await;
        let metrics = &self.ctx.metrics;
        metrics
            .flush_duration
            .observe(started.elapsed().as_secs_f64());
        if !flushed {
            metrics.flush_errors.inc();
        }
        flushed
    }

    /// Takes buffered batches of the queued partitions, within one object's size.
    fn take_parts(&self, on_schedule: bool) -> Vec<Part> {
        let (queued, since) = {
            let mut queue = self.queue();
            let since = queue.since;
            queue.bytes = 0;
            queue.since = if on_schedule { since } else { None };
            (std::mem::take(&mut queue.partitions), since)
        };
        let mut budget = self.ctx.settings.wal_object_max_bytes;
        let mut parts = Vec::new();
        let mut left = Vec::new();
        let mut queued = queued;
        // Grouped by topic, so the manifest names each topic once.
        queued.sort_by(|a, b| (&a.topic, a.id).cmp(&(&b.topic, b.id)));
        for partition in queued {
            if budget == 0 || parts.len() == MAX_RUNS_PER_OBJECT {
                left.push(partition);
                continue;
            }
            partition.dequeue();
            if let Some(taken) = partition.take_for_flush(budget) {
                budget = budget.saturating_sub(taken.bytes);
                if partition.has_pending() && partition.enqueue() {
                    left.push(partition.clone());
                }
                parts.push(Part { partition, taken });
            }
        }
        if !left.is_empty() {
            // Over one object's worth: the rest is due at once.
            let mut queue = self.queue();
            queue.bytes += left.iter().map(|p| p.pending_bytes()).sum::<usize>();
            queue.since =
                Some(since.map_or(Instant::now(), |s| s - self.ctx.settings.flush_interval));
            queue.partitions.extend(left);
            self.wake.notify_one();
        }
        parts
    }

    /// Uploads and commits one object, then answers its producers. False if it failed.
    async fn write(&self, state: &mut WriterState, parts: Vec<Part>) -> bool {
        let created_ms = now_ms();
        let runs = parts.iter().map(|p| p.taken.batches.as_slice());
        let (object, placements) = build_wal_object(created_ms, self.broker, runs);
        let name = format!("{}-{:012}", self.writer_id, state.seq);
        state.seq += 1;
        let path = self.ctx.store.wal_path(self.broker, &name);
        let manifest = manifest_of(
            &parts,
            &placements,
            path.as_ref(),
            self.broker,
            created_ms,
            object.len() as u64,
        );
        let key = self.ctx.catalog.manifest_key(self.broker, &name);
        let outcome = self
            .upload_and_commit(state, &path, object.clone(), &key, &manifest)
            .await;
        match outcome {
            Ok(()) => {
                self.index.insert(&key, manifest.clone());
                let metrics = &self.ctx.metrics;
                metrics.wal_objects_written.inc();
                metrics.wal_bytes_written.inc_by(object.len() as u64);
                let runs = manifest.topics.iter().flat_map(|t| &t.runs);
                for (part, run) in parts.into_iter().zip(runs) {
                    let key = run_cache_key(path.as_ref(), run.position);
                    let bytes =
                        object.slice(run.position as usize..(run.position + run.length) as usize);
                    self.ctx.cache.insert(
                        key,
                        CachedBatches {
                            start: run.position,
                            bytes,
                        },
                    );
                    part.partition
                        .complete_flush(part.taken.replies, run.last_offset + 1);
                }
                true
            }
            Err(failure) => {
                tracing::warn!(
                    object = %path, partitions = parts.len(), error = %failure.message,
                    "write-ahead flush failed; nothing in it was acknowledged"
                );
                for part in parts {
                    let Part { partition, taken } = part;
                    partition.fail_flush(taken.replies, failure.error, failure.fenced);
                    if failure.fenced {
                        self.fenced.report(&partition);
                    }
                }
                false
            }
        }
    }

    async fn upload_and_commit(
        &self,
        state: &mut WriterState,
        path: &object_store::path::Path,
        object: bytes::Bytes,
        key: &str,
        manifest: &WalManifest,
    ) -> Result<(), Failure> {
        let catalog = &self.ctx.catalog;
        let token = match state.token {
            Some(token) => token,
            None => *state.token.insert(catalog.open_writer(self.broker).await?),
        };
        let started = std::time::Instant::now();
        let put = self.ctx.store.put_new(path, object).await;
        let metrics = &self.ctx.metrics;
        metrics
            .upload_duration
            .observe(started.elapsed().as_secs_f64());
        if put.is_err() {
            metrics.upload_errors.inc();
        }
        put?;
        match catalog
            .commit_manifest(self.broker, token, key, manifest)
            .await
        {
            Ok(Some(next)) => {
                state.token = Some(next);
                Ok(())
            }
            Ok(None) => {
                state.token = None;
                Err(Failure::fenced())
            }
            Err(error) => self.settle(state, token, key, error).await,
        }
    }

    /// The store's answer to a commit was lost. Moves the writer key on (so the commit cannot
    /// land later), then reads whether it landed before. Retries until the store answers: the
    /// outcome decides what the producers are told, and later flushes wait for it.
    async fn settle(
        &self,
        state: &mut WriterState,
        token: i64,
        key: &str,
        error: MetaError,
    ) -> Result<(), Failure> {
        tracing::warn!(manifest = key, %error, "commit outcome unknown; settling it");
        let catalog = &self.ctx.catalog;
        let mut backoff = Duration::from_millis(100);
        loop {
            let settled = match catalog.advance_writer(self.broker, token).await {
                Ok(Some(next)) => {
                    state.token = Some(next);
                    return Err(Failure::storage(format!("commit failed: {error}")));
                }
                Ok(None) => catalog.manifest(key).await,
                Err(e) => Err(e),
            };
            match settled {
                Ok(Some(_)) => {
                    // It landed, and moved the key: open it afresh for the next commit.
                    state.token = None;
                    return Ok(());
                }
                Ok(None) => {
                    state.token = None;
                    return Err(Failure::fenced());
                }
                Err(e) => {
                    tracing::warn!(manifest = key, error = %e, "settling a commit failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_RETRY_BACKOFF);
                }
            }
        }
    }
}

/// The manifest of an object holding `parts` at `placements`.
fn manifest_of(
    parts: &[Part],
    placements: &[super::object::Placement],
    object: &str,
    broker: i32,
    created_ms: i64,
    size: u64,
) -> WalManifest {
    let mut topics: Vec<TopicRuns> = Vec::new();
    for (part, placement) in parts.iter().zip(placements) {
        let (p, batches) = (&part.partition, &part.taken.batches);
        let last = &batches[batches.len() - 1];
        let run = WalRun {
            partition: p.id,
            leader_epoch: part.taken.leader_epoch,
            base_offset: batches[0].base_offset,
            last_offset: last.base_offset + last.offset_count - 1,
            position: placement.position,
            length: placement.length,
            max_timestamp: batches.iter().map(|b| b.max_timestamp).max().unwrap_or(-1),
        };
        match topics.last_mut() {
            Some(t) if t.id == p.topic_id => t.runs.push(run),
            _ => topics.push(TopicRuns {
                topic: p.topic.to_string(),
                id: p.topic_id,
                runs: vec![run],
            }),
        }
    }
    WalManifest {
        object: object.to_string(),
        broker,
        created_ms,
        size,
        topics,
    }
}

/// Flushes whenever the oldest queued append is a flush interval old, or at once when the
/// queue holds an object's worth. Ends with the writer.
async fn flush_loop(writer: std::sync::Weak<WalWriter>) {
    let mut backoff = Duration::ZERO;
    loop {
        let Some(strong) = writer.upgrade() else {
            return;
        };
        let (due, full) = {
            let queue = strong.queue();
            let full = queue.bytes >= strong.ctx.settings.wal_object_max_bytes;
            let due = queue.since.map(|since| {
                if full {
                    Instant::now()
                } else {
                    since + strong.ctx.settings.flush_interval
                }
            });
            (due, full)
        };
        let notify = strong.wake.clone();
        let wake = notify.notified();
        match due {
            None => {
                drop(strong);
                // Woken by the first append (the writer is dropped only at exit).
                wake.await;
                continue;
            }
            Some(due) if due > Instant::now() => {
                tokio::select! {
                    _ = tokio::time::sleep_until(due) => {}
                    _ = wake => continue,
                }
            }
            Some(_) => {}
        }
        if strong.flush_queued(full).await {
            backoff = Duration::ZERO;
        } else {
            let interval = strong.ctx.settings.flush_interval;
            backoff =
                (backoff * 2).clamp(interval.max(Duration::from_millis(100)), MAX_RETRY_BACKOFF);
            drop(strong);
            tokio::time::sleep(backoff).await;
        }
    }
}
