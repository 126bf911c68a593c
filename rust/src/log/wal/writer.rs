//! Write-ahead flushes, per broker: the first append after a flush starts the flush interval;
//! when it ends (or the buffered bytes reach `wal_object_max_bytes` first) the buffered batches
//! of every partition become one write-ahead object, which starts uploading at once. Uploads
//! overlap; commits do not: `commit` commits the uploaded objects in the order they were taken,
//! several in one metadata transaction when they are ready together, and only then
//! acknowledges them. So a partition's runs follow each other without gaps, and when one
//! object fails, it and every object taken after it are failed together before anything new
//! is taken (they may hold the offsets that follow its batches).

use std::collections::{HashSet, VecDeque};
use std::ops::Range;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use object_store::path::Path;
use object_store::PutPayload;
use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::commit::{commit_loop, Failure};
use super::index::WalIndex;
use super::object::build_wal_object;
use crate::log::partition::{now_ms, Owed, Partition, Taken};
use crate::log::LogContext;
use crate::meta::wal::{encode_manifest, TopicRuns, WalManifest, WalRun};

/// How long a failed flush waits before the next, at most.
pub(super) const MAX_RETRY_BACKOFF: Duration = Duration::from_secs(5);

/// Shutdown and hand-off give up after this many failed flushes.
const DRAIN_ATTEMPTS: usize = 50;

/// Partitions one object carries at most: its manifest (about 40 bytes a run) stays far below
/// etcd's 1.5 MiB request limit. The rest waits for the next flush, due at once.
const MAX_RUNS_PER_OBJECT: usize = 16_384;

/// Objects taken and not yet committed, at most: past it no flush starts until one commits
/// (a slow store holds producers back instead of growing the broker).
const MAX_OBJECTS_IN_FLIGHT: usize = 16;

/// Partitions with buffered batches, waiting for the next flush.
#[derive(Default)]
struct Queue {
    partitions: Vec<Arc<Partition>>,
    bytes: usize,
    /// When the first of these batches was appended: the flush is due an interval later.
    since: Option<Instant>,
    /// A producer cannot send more until answered (`flush_soon`): the flush is due now.
    urgent: bool,
}

/// What one flush owes one partition once its object is committed or failed.
pub(super) struct Part {
    pub partition: Arc<Partition>,
    pub owed: Owed,
}

/// One object on its way: uploading, or uploaded and waiting for its commit.
pub(super) struct Flight {
    pub seq: u64,
    pub key: String,
    pub path: Path,
    /// The object in the pieces it is uploaded and cached as (`log::pieces`).
    pub object: PutPayload,
    /// The pieces of `object` that hold each part's run, in the order of `parts`.
    pub runs: Vec<Range<usize>>,
    pub manifest: WalManifest,
    /// The manifest as committed.
    pub encoded: Bytes,
    pub parts: Vec<Part>,
    pub started: std::time::Instant,
    /// Set once by the upload: Ok, or why it failed.
    pub upload: Arc<std::sync::OnceLock<Result<(), String>>>,
    /// Taken because a producer waits for it with its window full: committed without waiting
    /// for the pace.
    pub urgent: bool,
    /// The metadata session it was taken under: its partitions were owned in that session
    /// (their owner keys went with it), so it commits in that session or not at all.
    pub session: u64,
    /// The broker's sweep mark when it was taken: a later mark may have removed its object
    /// (if it stayed uncommitted long enough), so it commits under this mark or not at all.
    pub sweep: i64,
    _slot: OwnedSemaphorePermit,
}

/// The flights in the order they were taken, and what a failure left behind.
#[derive(Default)]
pub(super) struct Pipeline {
    next_seq: u64,
    pub flights: VecDeque<Flight>,
    /// The partitions of the flights being committed now (taken off `flights`).
    pub committing: Vec<Arc<Partition>>,
    /// When the objects of the last flush interval were taken, and their sizes.
    taken_lately: VecDeque<(Instant, usize)>,
    /// After a failure no flush starts before this.
    pub retry_at: Option<Instant>,
    pub backoff: Duration,
}

impl Pipeline {
    fn note_taken(&mut self, bytes: usize, interval: Duration) {
        self.forget_taken_before(interval);
        self.taken_lately.push_back((Instant::now(), bytes));
    }

    /// When the latest object was taken, if within the last flush interval.
    fn last_taken(&self) -> Option<Instant> {
        self.taken_lately.back().map(|(at, _)| *at)
    }

    /// Forgets the objects taken more than `interval` ago.
    fn forget_taken_before(&mut self, interval: Duration) {
        let now = Instant::now();
        while self
            .taken_lately
            .front()
            .is_some_and(|(at, _)| now.duration_since(*at) > interval)
        {
            self.taken_lately.pop_front();
        }
    }
}

/// How far the commits got: every flight before `through` is settled; `failures` counts the
/// flights that failed so far.
#[derive(Clone, Copy, Default)]
pub(super) struct Settled {
    pub through: u64,
    pub failures: u64,
}

pub(crate) struct WalWriter {
    pub(super) ctx: Arc<LogContext>,
    pub(super) index: Arc<WalIndex>,
    pub(super) broker: i32,
    /// Random per process: object names of two runs of the same broker id never collide.
    writer_id: String,
    queue: Mutex<Queue>,
    /// Woken by the first append after a flush and by a full buffer.
    wake: Arc<Notify>,
    pipeline: Mutex<Pipeline>,
    /// Woken when an upload ends.
    pub(super) uploaded: Arc<Notify>,
    pub(super) settled: watch::Sender<Settled>,
    slots: Arc<Semaphore>,
    pub(super) fenced: Arc<FencedWriters>,
    /// The broker's sweep mark as this writer knows it (`Catalog::sweep_mark`), which the
    /// flights it takes carry.
    pub(super) sweep: AtomicI64,
}

/// Partitions whose flush was fenced and left them unwritable while this broker may still
/// hold their owner keys: the ownership reconciler looks at each again, gives it up and
/// claims it afresh. Nothing else would wake it.
#[derive(Default)]
pub(crate) struct FencedWriters {
    partitions: Mutex<Vec<(Arc<str>, i32)>>,
    reported: Notify,
}

impl FencedWriters {
    pub(super) fn report(&self, partition: &Partition) {
        let mut partitions = self.partitions.lock().unwrap_or_else(|p| p.into_inner());
        partitions.push((partition.topic.clone(), partition.id));
        self.reported.notify_one();
    }

    /// The partitions reported since the last call.
    pub(crate) fn take(&self) -> Vec<(Arc<str>, i32)> {
        std::mem::take(&mut *self.partitions.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Returns once a partition was reported (since the last wait).
    pub(crate) async fn reported(&self) {
        self.reported.notified().await;
    }
}

impl WalWriter {
    /// The writer, and its flush and commit loops running in the background; `sweep_mark` is
    /// the broker's sweep mark as the store has it now.
    pub(crate) fn start(
        ctx: Arc<LogContext>,
        index: Arc<WalIndex>,
        broker: i32,
        sweep_mark: i64,
    ) -> Arc<WalWriter> {
        let writer = Arc::new(WalWriter {
            ctx,
            index,
            broker,
            writer_id: format!("{:016x}", uuid::Uuid::new_v4().as_u64_pair().0),
            queue: Mutex::default(),
            wake: Arc::default(),
            pipeline: Mutex::default(),
            uploaded: Arc::default(),
            settled: watch::Sender::new(Settled::default()),
            slots: Arc::new(Semaphore::new(MAX_OBJECTS_IN_FLIGHT)),
            fenced: Arc::default(),
            sweep: AtomicI64::new(sweep_mark),
        });
        tokio::spawn(flush_loop(Arc::downgrade(&writer)));
        tokio::spawn(commit_loop(Arc::downgrade(&writer)));
        writer
    }

    /// Where partitions left unwritable by a fenced flush are reported.
    pub(crate) fn fenced(&self) -> &FencedWriters {
        &self.fenced
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn pipeline(&self) -> std::sync::MutexGuard<'_, Pipeline> {
        self.pipeline.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Called after every append with the bytes it added.
    pub(crate) fn note_append(&self, partition: &Arc<Partition>, appended: usize) {
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

    /// Makes the buffered batches due now (a producer waits for them with its window full).
    pub(crate) fn flush_soon(&self) {
        let mut queue = self.queue();
        if queue.since.is_some() && !queue.urgent {
            queue.urgent = true;
            self.wake.notify_one();
        }
    }

    /// Flushes until none of `partitions` has buffered batches and no object on its way holds
    /// any of theirs (hand-off and shutdown; they take no more writes). Gives up after a
    /// bounded number of failed flushes.
    pub(crate) async fn drain(&self, partitions: &[Arc<Partition>]) {
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
            let flushed = self.flush().await;
            if !partitions.iter().any(|p| p.has_pending()) && !self.holds_any(partitions) {
                return;
            }
            if !flushed {
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

    /// Whether an object on its way (uploading, waiting or being committed) holds batches of
    /// one of `partitions`.
    fn holds_any(&self, partitions: &[Arc<Partition>]) -> bool {
        // By address: a hand-off may drain thousands of partitions against thousands of runs.
        let asked: HashSet<*const Partition> = partitions.iter().map(Arc::as_ptr).collect();
        let pipeline = self.pipeline();
        let taken = pipeline.flights.iter().flat_map(|f| &f.parts);
        let mut held = taken
            .map(|part| &part.partition)
            .chain(&pipeline.committing);
        held.any(|held| asked.contains(&Arc::as_ptr(held)))
    }

    /// Takes what is queued now (at most one object's worth; what is left stays queued and due
    /// at once), then waits until it and every object taken before it are committed or
    /// failed. False if one of them failed.
    pub(crate) async fn flush(&self) -> bool {
        let failures = self.settled.borrow().failures;
        self.launch(false).await;
        let target = self.pipeline().next_seq;
        let mut settled = self.settled.subscribe();
        let now = match settled.wait_for(|s| s.through >= target).await {
            Ok(now) => *now,
            Err(_) => return false,
        };
        now.failures == failures
    }

    /// Takes the queued batches into an object and starts its upload; `on_schedule` keeps the
    /// flush interval's schedule for what comes next (a flush the size cap brought early does
    /// not push the next interval flush back, so the objects per second stay within
    /// intervals + bytes ÷ cap).
    async fn launch(&self, on_schedule: bool) {
        let Ok(slot) = self.slots.clone().acquire_owned().await else {
            return;
        };
        // Taken under the pipeline's lock: a failure fails every flight taken before it
        // rebases the partitions (see `commit`), never one taken in between.
        let mut pipeline = self.pipeline();
        let session = *self.ctx.catalog.kv().session().borrow();
        let (parts, urgent) = self.take_parts(on_schedule, session);
        if parts.is_empty() {
            return;
        }
        let seq = pipeline.next_seq;
        pipeline.next_seq += 1;
        let mut flight = self.flight(seq, parts, session, slot);
        flight.urgent = urgent;
        pipeline.note_taken(
            flight.object.content_length(),
            self.ctx.settings.flush_interval,
        );
        let (store, path, object) = (
            self.ctx.store.clone(),
            flight.path.clone(),
            flight.object.clone(),
        );
        let (metrics, upload, uploaded) = (
            self.ctx.metrics.clone(),
            flight.upload.clone(),
            self.uploaded.clone(),
        );
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            let put = store.put_new(&path, object).await;
            metrics
                .upload_duration
                .observe(started.elapsed().as_secs_f64());
            if put.is_err() {
                metrics.upload_errors.inc();
            }
            let _ = upload.set(put.map_err(|e| format!("object storage: {e}")));
            uploaded.notify_one();
        });
        pipeline.flights.push_back(flight);
    }

    /// The object and manifest of what was `taken` under `session`, named by `seq`.
    fn flight(
        &self,
        seq: u64,
        taken: Vec<(Arc<Partition>, Taken)>,
        session: u64,
        slot: OwnedSemaphorePermit,
    ) -> Flight {
        let created_ms = now_ms();
        let runs = taken.iter().map(|(_, t)| t.batches.as_slice());
        let (pieces, placements) = build_wal_object(created_ms, self.broker, runs);
        let object = PutPayload::from_iter(pieces);
        let name = format!("{}-{seq:012}", self.writer_id);
        let path = self.ctx.store.wal_path(self.broker, &name);
        let manifest = manifest_of(
            &taken,
            &placements,
            path.as_ref(),
            self.broker,
            created_ms,
            object.content_length() as u64,
        );
        // The object holds the batches now (copies, or slices of the same requests): kept
        // here too, they would keep every request whose batches were copied alive until the
        // commit.
        let parts = taken
            .into_iter()
            .map(|(partition, taken)| Part {
                partition,
                owed: taken.owed,
            })
            .collect();
        Flight {
            seq,
            key: self.ctx.catalog.manifest_key(self.broker, &name),
            path,
            object,
            runs: placements.into_iter().map(|p| p.pieces).collect(),
            encoded: encode_manifest(&manifest),
            manifest,
            parts,
            started: std::time::Instant::now(),
            upload: Arc::default(),
            urgent: false,
            session,
            sweep: self.sweep.load(Ordering::Acquire),
            _slot: slot,
        }
    }

    /// Bytes of the objects taken within the last flush interval.
    pub(super) fn bytes_taken_lately(&self) -> usize {
        let mut pipeline = self.pipeline();
        pipeline.forget_taken_before(self.ctx.settings.flush_interval);
        pipeline.taken_lately.iter().map(|(_, bytes)| bytes).sum()
    }

    /// Takes buffered batches of the queued partitions owned in `session`, within one
    /// object's size; and whether a producer waits for them with its window full.
    fn take_parts(&self, on_schedule: bool, session: u64) -> (Vec<(Arc<Partition>, Taken)>, bool) {
        let (queued, since, urgent) = {
            let mut queue = self.queue();
            let since = queue.since;
            queue.bytes = 0;
            queue.since = if on_schedule { since } else { None };
            let urgent = std::mem::take(&mut queue.urgent);
            (std::mem::take(&mut queue.partitions), since, urgent)
        };
        let mut budget = self.ctx.settings.wal_object_max_bytes;
        let mut parts = Vec::new();
        let mut left = Vec::new();
        let mut queued = queued;
        // Grouped by topic, so the manifest names each topic once.
        queued.sort_by(|a, b| (&a.topic, a.id).cmp(&(&b.topic, b.id)));
        for partition in queued {
            let owned_in = partition.owner_session();
            if budget == 0 || parts.len() == MAX_RUNS_PER_OBJECT || owned_in > session {
                // (one claimed since `session` was read goes with the next flush, due at once)
                left.push(partition);
                continue;
            }
            partition.dequeue();
            if owned_in < session {
                // Its owner key went with the session it was claimed in: nothing buffered for
                // it can be committed any more (the reconciler drops the partition too).
                partition.abandon(kafka_protocol::ResponseError::NotLeaderOrFollower);
                continue;
            }
            if let Some(taken) = partition.take_for_flush(budget) {
                budget = budget.saturating_sub(taken.bytes);
                if partition.has_pending() && partition.enqueue() {
                    left.push(partition.clone());
                }
                parts.push((partition, taken));
            }
        }
        if !left.is_empty() {
            // Over one object's worth. After an interval's flush the rest is due at once; after
            // one the size cap brought it keeps the interval's schedule (unless it is another
            // object's worth): a remainder is not worth an object of its own.
            let mut queue = self.queue();
            queue.bytes += left.iter().map(|p| p.pending_bytes()).sum::<usize>();
            let interval = self.ctx.settings.flush_interval;
            queue.since = Some(match since {
                Some(since) if on_schedule => since,
                // (shortly after boot the clock may not reach that far back: then it waits)
                Some(since) => since.checked_sub(interval).unwrap_or(since),
                None => Instant::now(),
            });
            queue.partitions.extend(left);
            self.wake.notify_one();
        }
        (parts, urgent)
    }

    /// Fails `failed` and every flight still on its way (they may hold the offsets after its
    /// batches); no flush starts again before a backoff.
    pub(super) fn fail_from(&self, failed: Vec<Flight>, failure: &Failure) {
        let mut pipeline = self.pipeline();
        let rest: Vec<Flight> = pipeline.flights.drain(..).collect();
        // Locked until every producer is told: a hand-off (`holds_any`) never sees them gone
        // before, and no flight is taken in between.
        let interval = self.ctx.settings.flush_interval;
        pipeline.backoff = (pipeline.backoff * 2)
            .clamp(interval.max(Duration::from_millis(100)), MAX_RETRY_BACKOFF);
        pipeline.retry_at = Some(Instant::now() + pipeline.backoff);
        let count = (failed.len() + rest.len()) as u64;
        for flight in failed.into_iter().chain(rest) {
            tracing::warn!(
                object = %flight.path, partitions = flight.parts.len(), error = %failure.message,
                "write-ahead flush failed; nothing in it was acknowledged"
            );
            self.ctx.metrics.flush_errors.inc();
            for Part { partition, owed } in flight.parts {
                partition.fail_flush(owed, failure.error, failure.fenced);
                if failure.fenced {
                    self.fenced.report(&partition);
                }
            }
        }
        pipeline.committing.clear();
        let through = pipeline.next_seq;
        drop(pipeline);
        self.settled.send_modify(|s| {
            s.through = through;
            s.failures += count;
        });
    }
}

/// The manifest of an object holding the batches `taken` at `placements`.
fn manifest_of(
    taken: &[(Arc<Partition>, Taken)],
    placements: &[super::object::Placement],
    object: &str,
    broker: i32,
    created_ms: i64,
    size: u64,
) -> WalManifest {
    let mut topics: Vec<TopicRuns> = Vec::new();
    for ((p, taken), placement) in taken.iter().zip(placements) {
        let batches = &taken.batches;
        let last = &batches[batches.len() - 1];
        let run = WalRun {
            partition: p.id,
            leader_epoch: taken.leader_epoch,
            base_offset: batches[0].base_offset,
            last_offset: last.base_offset + last.offset_count - 1,
            position: placement.position,
            length: placement.length,
            max_timestamp: batches.iter().map(|b| b.max_timestamp).max().unwrap_or(-1),
        };
        let runs = match topics.last_mut() {
            Some(t) if t.id == p.topic_id => t,
            _ => {
                topics.push(TopicRuns {
                    topic: p.topic.to_string(),
                    id: p.topic_id,
                    runs: Vec::new(),
                    transactional: Vec::new(),
                });
                topics.last_mut().expect("just pushed")
            }
        };
        runs.runs.push(run);
        if taken.transactional {
            runs.transactional.push(p.id);
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

/// Starts a flush whenever the oldest queued append is a flush interval old (flushing on
/// arrival: as soon as an append is queued, a flush interval after the last flush at the
/// earliest), or at once when the queue holds an object's worth or a producer waits with its
/// window full; after a failure, not before its backoff. Ends with the writer.
async fn flush_loop(writer: std::sync::Weak<WalWriter>) {
    loop {
        let Some(strong) = writer.upgrade() else {
            return;
        };
        let retry_at = strong.pipeline().retry_at;
        if let Some(at) = retry_at.filter(|at| *at > Instant::now()) {
            drop(strong);
            tokio::time::sleep_until(at).await;
            continue;
        }
        // (the pipeline's lock is taken before the queue's, as `launch` does)
        let last_taken = strong.pipeline().last_taken();
        let (due, full) = {
            let queue = strong.queue();
            let settings = &strong.ctx.settings;
            let full = queue.urgent || queue.bytes >= settings.wal_object_max_bytes;
            let due = queue.since.map(|since| {
                if full {
                    Instant::now()
                } else if settings.flush_on_arrival {
                    last_taken.map_or(since, |last| since.max(last + settings.flush_interval))
                } else {
                    since + settings.flush_interval
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
        strong.launch(full).await;
    }
}
