//! A topic as this broker serves it: one slot per partition holding this broker's current
//! log for it – the writable log while it owns the partition, a read-only follower otherwise.
//! Ownership changes swap the slot's log; requests always use whatever is current. When the
//! topic record changes (configs, more partitions) the topic is replaced by one with the new
//! record over the same slots and limits, so work under way on the old one lands in the new.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use crate::log::limits::TopicLimits;
use crate::log::partition::Partition;
use crate::meta::catalog::TopicRecord;

pub(crate) struct Topic {
    pub record: TopicRecord,
    pub partitions: Vec<Arc<Slot>>,
    /// Shared by every partition's log; follows `record.configs`.
    pub limits: Arc<TopicLimits>,
}

pub(crate) struct Slot {
    current: RwLock<Arc<Partition>>,
    /// Set while a claim or hand-off of this partition is under way.
    changing: AtomicBool,
}

impl Slot {
    pub(crate) fn new(partition: Partition) -> Slot {
        Slot {
            current: RwLock::new(Arc::new(partition)),
            changing: AtomicBool::new(false),
        }
    }

    pub(crate) fn current(&self) -> Arc<Partition> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub(crate) fn replace(&self, partition: impl Into<Arc<Partition>>) {
        let old = std::mem::replace(
            &mut *self.current.write().unwrap_or_else(|p| p.into_inner()),
            partition.into(),
        );
        // Fetches long-polling the old log would otherwise sleep out their whole wait.
        old.wake_readers();
    }

    /// Marks an ownership change as started; false if one already is.
    pub(crate) fn begin_change(&self) -> bool {
        !self.changing.swap(true, Ordering::AcqRel)
    }

    pub(crate) fn is_changing(&self) -> bool {
        self.changing.load(Ordering::Acquire)
    }

    pub(crate) fn end_change(&self) {
        self.changing.store(false, Ordering::Release);
    }
}
