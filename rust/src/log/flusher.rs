//! Group commit, per partition: the first append to a clean partition schedules its flush one
//! flush interval later, so every append in that window shares one segment upload; a buffer
//! that reaches the topic's segment size (as it is at that append) is flushed at once. Partitions flush independently (bounded
//! by upload slots): a slow or busy partition never holds up another one's acks.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, Semaphore};

use super::partition::Partition;
use super::LogContext;

/// How long a failed flush waits before it retries the rest of the buffer, at most.
const MAX_RETRY_BACKOFF: Duration = Duration::from_secs(5);

/// Shutdown gives up on a partition whose flushes keep failing after this many attempts.
const SHUTDOWN_ATTEMPTS: usize = 50;

pub struct Flusher {
    ctx: Arc<LogContext>,
    uploads: Arc<Semaphore>,
    fenced: Arc<FencedWriters>,
}

/// Partitions whose flush failed and left them unwritable while this broker still holds
/// their claim (a commit found the record changed under it): the ownership reconciler looks
/// at each again, gives it up and claims it afresh. Nothing else would wake it: the change
/// that fenced the flush may have reached the reconciler before the flush noticed.
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

impl Flusher {
    pub fn new(ctx: Arc<LogContext>) -> Arc<Flusher> {
        Arc::new(Flusher {
            uploads: Arc::new(Semaphore::new(ctx.settings.max_concurrent_flushes)),
            ctx,
            fenced: Arc::default(),
        })
    }

    /// Where partitions left unwritable by a failed flush are reported.
    pub fn fenced(&self) -> &FencedWriters {
        &self.fenced
    }

    /// Called after every append with the partition's buffered byte count.
    pub fn note_append(&self, partition: &Arc<Partition>, buffered_bytes: usize) {
        if buffered_bytes >= partition.segment_bytes() && partition.schedule_urgent_flush() {
            self.spawn_flush(partition, Duration::ZERO);
        }
        if partition.schedule_flush() {
            self.spawn_flush(partition, self.ctx.settings.flush_interval);
        }
    }

    /// Flushes `partition` after `delay`, then retries with backoff while a flush fails and
    /// writes are still buffered (a transient storage error must not strand them).
    fn spawn_flush(&self, partition: &Arc<Partition>, delay: Duration) {
        let (ctx, uploads, partition) = (self.ctx.clone(), self.uploads.clone(), partition.clone());
        let fenced = self.fenced.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let mut backoff = ctx.settings.flush_interval.max(Duration::from_millis(100));
            while !flush_in_slot(&ctx, &uploads, &partition, &fenced).await
                && partition.has_pending()
            {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_RETRY_BACKOFF);
            }
        });
    }

    /// Flushes every partition until nothing is buffered (shutdown; the partitions no longer
    /// take writes). Gives up on a partition after a bounded number of failed attempts.
    pub async fn flush_all(&self, partitions: Vec<Arc<Partition>>) {
        let flushes = partitions.into_iter().map(|partition| async move {
            for _ in 0..SHUTDOWN_ATTEMPTS {
                if flush_in_slot(&self.ctx, &self.uploads, &partition, &self.fenced).await
                    && !partition.has_pending()
                {
                    return;
                }
            }
            tracing::error!(
                topic = %partition.topic, partition = partition.id,
                "buffered writes could not be flushed; they were not acknowledged"
            );
        });
        futures::future::join_all(flushes).await;
    }
}

/// One flush of one partition, once one of the bounded upload slots is free.
async fn flush_in_slot(
    ctx: &LogContext,
    uploads: &Semaphore,
    partition: &Partition,
    fenced: &FencedWriters,
) -> bool {
    let _slot = uploads.acquire().await;
    let started = std::time::Instant::now();
    let flushed = partition.flush(ctx).await;
    ctx.metrics
        .flush_duration
        .observe(started.elapsed().as_secs_f64());
    if !flushed {
        ctx.metrics.flush_errors.inc();
        if partition.owned().is_some() && !partition.is_leader() {
            fenced.report(partition);
        }
    }
    flushed
}
