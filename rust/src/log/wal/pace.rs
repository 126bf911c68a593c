//! Pacing of the metadata writes of a broker's write path: write-ahead commits and the
//! background writes of compaction and of the collection of compacted objects start at most
//! `WRITES_PER_INTERVAL` per flush interval together, so the broker's metadata writes per
//! second stay bounded whatever its partitions (a broker busy with bytes commits past it; see
//! `commit`).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Metadata writes that may start within one flush interval: the interval's own write-ahead
/// commit and one more (a commit the size cap brought early, or a background write).
const WRITES_PER_INTERVAL: usize = 2;

#[derive(Default)]
pub(crate) struct MetaWritePace {
    /// When the latest writes started, oldest first.
    recent: Mutex<VecDeque<Instant>>,
}

impl MetaWritePace {
    fn recent(&self) -> std::sync::MutexGuard<'_, VecDeque<Instant>> {
        self.recent.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A metadata write starts now, paced or not.
    pub(super) fn note(&self) {
        note(&mut self.recent());
    }

    /// Starts a write now if the pace allows it; else says when it will.
    pub(super) fn try_start(&self, interval: Duration) -> Result<(), Instant> {
        let mut recent = self.recent();
        if recent.len() == WRITES_PER_INTERVAL {
            let allowed = recent[0] + interval;
            if allowed > Instant::now() {
                return Err(allowed);
            }
        }
        note(&mut recent);
        Ok(())
    }

    /// Waits for the pace, then starts a write (background writes, which can wait) – but for
    /// one interval at most: commits taking every turn must not starve compaction, or the
    /// write-ahead data it would collect grows without end.
    pub(crate) async fn start(&self, interval: Duration) {
        let deadline = Instant::now() + interval;
        while let Err(allowed) = self.try_start(interval) {
            if Instant::now() >= deadline {
                self.note();
                return;
            }
            tokio::time::sleep_until(allowed.min(deadline)).await;
        }
    }
}

fn note(recent: &mut VecDeque<Instant>) {
    recent.push_back(Instant::now());
    while recent.len() > WRITES_PER_INTERVAL {
        recent.pop_front();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_third_write_within_an_interval_waits_for_the_first_to_age_out() {
        let pace = MetaWritePace::default();
        let interval = Duration::from_millis(250);
        let first = Instant::now();
        assert_eq!(pace.try_start(interval), Ok(()));
        tokio::time::advance(Duration::from_millis(100)).await;
        pace.start(interval).await; // a background write counts as well
        assert_eq!(pace.try_start(interval), Err(first + interval));
        pace.start(interval).await;
        assert_eq!(
            Instant::now(),
            first + interval,
            "it waited for the first to age out"
        );
        assert_eq!(
            pace.try_start(interval),
            Err(first + Duration::from_millis(100) + interval)
        );
        pace.note(); // unpaced (a busy broker's commit) still counts
        assert_eq!(pace.try_start(interval), Err(first + 2 * interval));
    }

    #[tokio::test(start_paused = true)]
    async fn a_background_write_waits_one_interval_at_most() {
        let pace = MetaWritePace::default();
        let interval = Duration::from_millis(250);
        pace.note();
        pace.note();
        let waiting = Instant::now();
        // commits keep taking every turn
        let hog = async {
            loop {
                pace.note();
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };
        let background = async {
            tokio::select! {
                biased;
                _ = hog => {}
                _ = pace.start(interval) => {}
            }
        };
        let started = tokio::time::timeout(Duration::from_secs(5), background).await;
        assert!(started.is_ok(), "the background write was starved");
        assert_eq!(Instant::now(), waiting + interval);
    }
}
