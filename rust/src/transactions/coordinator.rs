//! The transaction coordinator's rules, as Kafka's TransactionCoordinator applies them: each
//! request is a pure step from the stored record (or none) to the record to store and the
//! answer. `service` reads the record, takes the step and stores it with a compare-and-swap,
//! taking the step again from the newer record when another write came first.
//!
//! States: Empty → Ongoing (AddPartitionsToTxn, AddOffsetsToTxn) → PrepareCommit or
//! PrepareAbort (EndTxn, a timeout, or a new producer fencing the old one) → CompleteCommit or
//! CompleteAbort once every partition's owner wrote its marker and every group's coordinator
//! made the transaction's offsets committed or dropped them (`marked`) → Ongoing again with
//! the next transaction.
//! While a transaction is decided, nothing else may change it (CONCURRENT_TRANSACTIONS, which
//! clients retry).

use kafka_protocol::ResponseError;

use super::record::{TxnPartition, TxnRecord, TxnState};

/// The epoch past which a producer id is replaced by a new one (Kafka keeps the last for
/// fencing its transaction).
const LAST_EPOCH: i16 = i16::MAX - 1;

/// What a request does: the record to store first (None: nothing changes), and the answer.
#[derive(Debug, PartialEq)]
pub(crate) struct Step<A> {
    pub write: Option<TxnRecord>,
    pub answer: Result<A, ResponseError>,
}

fn answer<A>(answer: A) -> Step<A> {
    Step {
        write: None,
        answer: Ok(answer),
    }
}

fn refuse<A>(error: ResponseError) -> Step<A> {
    Step {
        write: None,
        answer: Err(error),
    }
}

fn store<A>(record: TxnRecord, answer: A) -> Step<A> {
    Step {
        write: Some(record),
        answer: Ok(answer),
    }
}

/// How EndTxn ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    /// Decided: the markers are being written.
    Decided,
    /// Complete already (a transaction without partitions, or a retry of a finished one).
    Complete,
}

/// Whether an InitProducerId over `current` needs a new producer id (a first one, or the
/// epochs of the current one are used up).
pub(crate) fn needs_producer_id(current: Option<&TxnRecord>) -> bool {
    current.is_none_or(|r| r.epoch >= LAST_EPOCH)
}

/// What InitProducerId asks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Init {
    pub timeout_ms: i32,
    /// v3+ (KIP-360): the producer id and epoch the producer has, when it has them.
    pub expected: Option<(i64, i16)>,
    /// A producer id nobody has, when `needs_producer_id`.
    pub fresh_id: Option<i64>,
    pub now_ms: i64,
}

/// InitProducerId with a transactional id: the producer's id and its next epoch, which
/// fences every older instance. An ongoing transaction is aborted first (the answer is then
/// CONCURRENT_TRANSACTIONS: the producer asks again once the abort is complete).
pub(crate) fn init(current: Option<&TxnRecord>, init: Init) -> Step<(i64, i16)> {
    let fresh = |producer_id| TxnRecord {
        producer_id,
        epoch: 0,
        fenced_epoch: None,
        timeout_ms: init.timeout_ms,
        state: TxnState::Empty,
        partitions: Default::default(),
        unmarked: Default::default(),
        groups: Default::default(),
        unmarked_groups: Default::default(),
        started_ms: -1,
        updated_ms: init.now_ms,
    };
    let Some(current) = current else {
        return match init.fresh_id {
            Some(id) => store(fresh(id), (id, 0)),
            None => refuse(ResponseError::CoordinatorNotAvailable),
        };
    };
    if let Some((producer_id, epoch)) = init.expected {
        let known_epoch = epoch == current.epoch || Some(epoch) == current.fenced_epoch;
        if producer_id != current.producer_id || !known_epoch {
            return refuse(ResponseError::ProducerFenced);
        }
    }
    match current.state {
        TxnState::PrepareCommit | TxnState::PrepareAbort => {
            refuse(ResponseError::ConcurrentTransactions)
        }
        TxnState::Ongoing => Step {
            write: Some(TxnRecord {
                fenced_epoch: None,
                ..decide(current, false, true, init.now_ms)
            }),
            answer: Err(ResponseError::ConcurrentTransactions),
        },
        TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {
            let next = match (current.epoch >= LAST_EPOCH, init.fresh_id) {
                (false, _) => TxnRecord {
                    epoch: current.epoch + 1,
                    ..fresh(current.producer_id)
                },
                (true, Some(id)) => fresh(id),
                (true, None) => return refuse(ResponseError::CoordinatorNotAvailable),
            };
            let answer = (next.producer_id, next.epoch);
            store(next, answer)
        }
    }
}

/// The checks every request of a producer's transaction starts with.
fn check_producer(
    current: Option<&TxnRecord>,
    producer_id: i64,
    epoch: i16,
) -> Result<&TxnRecord, ResponseError> {
    let current = current
        .filter(|r| r.producer_id == producer_id)
        .ok_or(ResponseError::InvalidProducerIdMapping)?;
    if epoch != current.epoch {
        return Err(ResponseError::ProducerFenced);
    }
    Ok(current)
}

/// What joins a transaction: partitions it writes to (AddPartitionsToTxn), or a consumer
/// group whose offsets it commits (AddOffsetsToTxn).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Members<'a> {
    Partitions(&'a [TxnPartition]),
    Group(&'a str),
}

impl Members<'_> {
    fn in_record(&self, record: &TxnRecord) -> bool {
        match self {
            Members::Partitions(partitions) => {
                partitions.iter().all(|p| record.partitions.contains(p))
            }
            Members::Group(group) => record.groups.contains(*group),
        }
    }

    fn add_to(&self, record: &mut TxnRecord) {
        match self {
            Members::Partitions(partitions) => record.partitions.extend(partitions.iter().cloned()),
            Members::Group(group) => {
                record.groups.insert(group.to_string());
            }
        }
    }
}

/// AddPartitionsToTxn and AddOffsetsToTxn: the members join the transaction, which begins if
/// it had not.
pub(crate) fn add(
    current: Option<&TxnRecord>,
    (producer_id, epoch): (i64, i16),
    members: Members<'_>,
    now_ms: i64,
) -> Step<()> {
    let current = match check_producer(current, producer_id, epoch) {
        Ok(current) => current,
        Err(error) => return refuse(error),
    };
    match current.state {
        TxnState::PrepareCommit | TxnState::PrepareAbort => {
            refuse(ResponseError::ConcurrentTransactions)
        }
        TxnState::Ongoing if members.in_record(current) => answer(()),
        state => {
            let mut next = current.clone();
            if state != TxnState::Ongoing {
                next.state = TxnState::Ongoing;
                next.started_ms = now_ms;
                next.partitions.clear();
                next.groups.clear();
            }
            members.add_to(&mut next);
            next.updated_ms = now_ms;
            store(next, ())
        }
    }
}

/// EndTxn: commit or abort the ongoing transaction.
pub(crate) fn end(
    current: Option<&TxnRecord>,
    (producer_id, epoch): (i64, i16),
    commit: bool,
    now_ms: i64,
) -> Step<Ending> {
    let current = match check_producer(current, producer_id, epoch) {
        Ok(current) => current,
        Err(error) => return refuse(error),
    };
    match (current.state, commit) {
        (TxnState::Ongoing, _) => {
            let next = decide(current, commit, false, now_ms);
            let ending = if next.state.preparing().is_some() {
                Ending::Decided
            } else {
                Ending::Complete
            };
            store(next, ending)
        }
        // A retry of the request that decided it.
        (TxnState::PrepareCommit, true) | (TxnState::PrepareAbort, false) => {
            answer(Ending::Decided)
        }
        (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false) => {
            answer(Ending::Complete)
        }
        _ => refuse(ResponseError::InvalidTxnState),
    }
}

/// The ongoing transaction decided: its markers are to be written (complete at once when it
/// has no partitions). `fence` bumps the epoch first, so that the producer's requests at the
/// old one are refused (a new instance of it, or the transaction timed out).
fn decide(current: &TxnRecord, commit: bool, fence: bool, now_ms: i64) -> TxnRecord {
    let mut next = current.clone();
    if fence && next.epoch < i16::MAX {
        next.epoch += 1;
    }
    next.unmarked = next.partitions.clone();
    next.unmarked_groups = next.groups.clone();
    next.state = if commit {
        TxnState::PrepareCommit
    } else {
        TxnState::PrepareAbort
    };
    if next.all_marked() {
        complete(&mut next, commit);
    }
    next.updated_ms = now_ms;
    next
}

/// The decided transaction is complete: it has no members any more.
fn complete(record: &mut TxnRecord, commit: bool) {
    record.state = if commit {
        TxnState::CompleteCommit
    } else {
        TxnState::CompleteAbort
    };
    record.partitions.clear();
    record.groups.clear();
    record.started_ms = -1;
}

/// A transaction that has run longer than its timeout is aborted, its producer fenced (it
/// may resume with InitProducerId at the epoch it had, KIP-360). None if it has not.
pub(crate) fn expire(current: &TxnRecord, now_ms: i64) -> Option<TxnRecord> {
    let overdue = now_ms.saturating_sub(current.started_ms) > i64::from(current.timeout_ms);
    (current.state == TxnState::Ongoing && overdue).then(|| TxnRecord {
        fenced_epoch: Some(current.epoch),
        ..decide(current, false, true, now_ms)
    })
}

/// Whether the transactional id of `current` has been idle past `expiration_ms`: no
/// transaction under way and no change for that long.
pub(crate) fn idle(current: &TxnRecord, now_ms: i64, expiration_ms: i64) -> bool {
    let settled = matches!(
        current.state,
        TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
    );
    settled && now_ms.saturating_sub(current.updated_ms) > expiration_ms
}

/// The markers of `done` are written (or its groups told) for the decided transaction of
/// (`producer_id`, `epoch`): the record once they are taken off the ones still to write
/// (complete when none are left). None if the record is past that transaction already.
pub(crate) fn marked(
    current: &TxnRecord,
    (producer_id, epoch): (i64, i16),
    done: Members<'_>,
    now_ms: i64,
) -> Option<TxnRecord> {
    let commit = current.state.preparing()?;
    if current.producer_id != producer_id || current.epoch != epoch {
        return None;
    }
    let mut next = current.clone();
    match done {
        Members::Partitions(partitions) => {
            for partition in partitions {
                next.unmarked.remove(partition);
            }
        }
        Members::Group(group) => {
            next.unmarked_groups.remove(group);
        }
    }
    if next.all_marked() {
        complete(&mut next, commit);
    }
    next.updated_ms = now_ms;
    (next != *current).then_some(next)
}

#[cfg(test)]
#[path = "coordinator_tests.rs"]
mod tests;
