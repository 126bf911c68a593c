//! Ownership changes, logged as one line per kind of change instead of one per partition: a
//! broker joining a cluster of 100,000 partitions takes over a third of them, and as many
//! log lines hide everything else. Each change is logged at debug as it happens; the summary
//! ("took over 33,334 partitions: orders/0, orders/3, … and 33,324 more") goes out at the end
//! of the ownership pass or claim batch that saw it.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

/// Partitions named in a summary line; the rest are counted.
const NAMED: usize = 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Change {
    TookOver,
    HandedOff,
    /// Taken from this broker without a hand-off (its session or a commit was lost).
    Lost,
}

impl Change {
    fn verb(self) -> &'static str {
        match self {
            Change::TookOver => "took over",
            Change::HandedOff => "handed off",
            Change::Lost => "lost ownership of (serving reads only)",
        }
    }
}

/// The changes since the last summary.
#[derive(Debug, Default)]
pub(crate) struct OwnershipEvents {
    pending: Mutex<BTreeMap<Change, Vec<(String, i32)>>>,
}

impl OwnershipEvents {
    pub(crate) fn record(&self, change: Change, topic: &str, partition: i32) {
        tracing::debug!(topic, partition, "{} the partition", change.verb());
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(change)
            .or_default()
            .push((topic.to_string(), partition));
    }

    /// Logs one line per kind of change recorded since the last call (losses as warnings).
    pub(crate) fn summarise(&self) {
        let pending = std::mem::take(&mut *self.pending.lock().unwrap_or_else(|p| p.into_inner()));
        for (change, partitions) in pending {
            let line = summary(change, &partitions);
            match change {
                Change::Lost => tracing::warn!("{line}"),
                Change::TookOver | Change::HandedOff => tracing::info!("{line}"),
            }
        }
    }
}

fn summary(change: Change, partitions: &[(String, i32)]) -> String {
    let count = partitions.len();
    let noun = if count == 1 {
        "partition"
    } else {
        "partitions"
    };
    let mut line = format!("{} {count} {noun}: ", change.verb());
    for (i, (topic, id)) in partitions.iter().take(NAMED).enumerate() {
        let sep = if i == 0 { "" } else { ", " };
        let _ = write!(line, "{sep}{topic}/{id}");
    }
    if count > NAMED {
        let _ = write!(line, " and {} more", count - NAMED);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_names_the_first_partitions_and_counts_the_rest() {
        let one = [("orders".to_string(), 3)];
        assert_eq!(
            summary(Change::TookOver, &one),
            "took over 1 partition: orders/3"
        );
        let many: Vec<_> = (0..25).map(|i| ("t".to_string(), i)).collect();
        assert_eq!(
            summary(Change::HandedOff, &many),
            "handed off 25 partitions: t/0, t/1, t/2, t/3, t/4, t/5, t/6, t/7, t/8, t/9 and 15 more"
        );
    }

    #[test]
    fn summarising_empties_what_was_recorded() {
        let events = OwnershipEvents::default();
        events.record(Change::Lost, "t", 1);
        events.record(Change::TookOver, "t", 2);
        events.summarise();
        assert!(events.pending.lock().unwrap().is_empty());
    }
}
