//! Group commit: every flush interval, all dirty partitions are flushed in parallel (bounded);
//! a partition whose buffer reaches the segment size is flushed at once.

use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinSet;

use super::partition::Partition;
use super::LogContext;

pub struct Flusher {
    ctx: Arc<LogContext>,
    dirty: Mutex<Vec<Arc<Partition>>>,
    urgent: mpsc::UnboundedSender<Arc<Partition>>,
    uploads: Arc<Semaphore>,
}

impl Flusher {
    /// Starts the background flush loop on the current runtime.
    pub fn start(ctx: Arc<LogContext>) -> Arc<Flusher> {
        let (urgent, mut urgent_rx) = mpsc::unbounded_channel();
        let flusher = Arc::new(Flusher {
            uploads: Arc::new(Semaphore::new(ctx.settings.max_concurrent_flushes)),
            ctx,
            dirty: Mutex::new(Vec::new()),
            urgent,
        });
        let worker = flusher.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(worker.ctx.settings.flush_interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => { worker.round().await; }
                    Some(partition) = urgent_rx.recv() => worker.spawn_flush(partition),
                }
            }
        });
        flusher
    }

    /// Called after every append with the partition's buffered byte count.
    pub fn note_append(&self, partition: &Arc<Partition>, buffered_bytes: usize) {
        if partition.mark_dirty() {
            self.dirty
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(partition.clone());
        }
        if buffered_bytes >= self.ctx.settings.segment_bytes {
            let _ = self.urgent.send(partition.clone());
        }
    }

    fn spawn_flush(&self, partition: Arc<Partition>) {
        tokio::spawn(self.flush_in_slot(partition));
    }

    /// One partition's flush, once one of the bounded upload slots is free.
    fn flush_in_slot(&self, partition: Arc<Partition>) -> impl std::future::Future<Output = ()> {
        let (ctx, uploads) = (self.ctx.clone(), self.uploads.clone());
        async move {
            let _slot = uploads.acquire_owned().await;
            partition.flush(&ctx).await;
        }
    }

    /// Flushes every partition that was dirty when the round began; returns how many.
    async fn round(&self) -> usize {
        let partitions = std::mem::take(&mut *self.dirty.lock().unwrap_or_else(|p| p.into_inner()));
        let count = partitions.len();
        let mut flushes = JoinSet::new();
        for partition in partitions {
            flushes.spawn(self.flush_in_slot(partition));
        }
        while flushes.join_next().await.is_some() {}
        count
    }

    /// Flushes until nothing is buffered (shutdown). Gives up after a bounded number of rounds
    /// if flushes keep failing.
    pub async fn flush_all(&self) {
        for _ in 0..50 {
            if self.round().await == 0 {
                return;
            }
        }
        tracing::error!("buffered writes could not be flushed; they were not acknowledged");
    }
}
