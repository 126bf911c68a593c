//! Group commit, per partition: the first append to a clean partition schedules its flush one
//! flush interval later, so every append in that window shares one segment upload; a buffer
//! that reaches the topic's segment size (as it is at that append) is flushed at once. Partitions flush independently (bounded
//! by upload slots): a slow or busy partition never holds up another one's acks.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

use super::partition::Partition;
use super::LogContext;

/// How long a failed flush waits before it retries the rest of the buffer, at most.
const MAX_RETRY_BACKOFF: Duration = Duration::from_secs(5);

/// Shutdown gives up on a partition whose flushes keep failing after this many attempts.
const SHUTDOWN_ATTEMPTS: usize = 50;

pub struct Flusher {
    ctx: Arc<LogContext>,
    uploads: Arc<Semaphore>,
}

impl Flusher {
    pub fn new(ctx: Arc<LogContext>) -> Arc<Flusher> {
        Arc::new(Flusher {
            uploads: Arc::new(Semaphore::new(ctx.settings.max_concurrent_flushes)),
            ctx,
        })
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
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let mut backoff = ctx.settings.flush_interval.max(Duration::from_millis(100));
            while !flush_in_slot(&ctx, &uploads, &partition).await && partition.has_pending() {
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
                if flush_in_slot(&self.ctx, &self.uploads, &partition).await
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
async fn flush_in_slot(ctx: &LogContext, uploads: &Semaphore, partition: &Partition) -> bool {
    let _slot = uploads.acquire().await;
    let started = std::time::Instant::now();
    let flushed = partition.flush(ctx).await;
    ctx.metrics
        .flush_duration
        .observe(started.elapsed().as_secs_f64());
    if !flushed {
        ctx.metrics.flush_errors.inc();
    }
    flushed
}
