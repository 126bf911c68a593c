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
//!
//! Two protocols (Kafka's `transaction.version`): in the first, a producer keeps its epoch
//! from one InitProducerId to the next. In the second (KIP-890 part 2, EndTxn v5) EndTxn bumps
//! the epoch as it decides, the markers carry the bumped epoch and the producer goes on with
//! it: a late batch of an ended transaction is then of an older epoch than the marker, which
//! every partition refuses, so it can never slip into the producer's next transaction.

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

/// EndTxn's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ended {
    pub ending: Ending,
    /// The producer id and epoch the markers carry (while `Decided`).
    pub marking: (i64, i16),
    /// The producer id and epoch of the producer's next transaction (EndTxn v5's answer).
    pub next: (i64, i16),
}

impl Ended {
    fn of(record: &TxnRecord) -> Ended {
        let ending = match record.state.preparing() {
            Some(_) => Ending::Decided,
            None => Ending::Complete,
        };
        Ended {
            ending,
            marking: (record.producer_id, record.epoch),
            next: record.next_producer(),
        }
    }
}

/// Which transaction protocol a request is of (see the module's comment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protocol {
    /// EndTxn v0–4: the epoch stays.
    KeepEpoch,
    /// EndTxn v5: an epoch bump per transaction.
    BumpEpoch,
}

/// Whether an InitProducerId over `current` needs a new producer id (a first one, or the
/// epochs of the current one are used up).
pub(crate) fn needs_producer_id(current: Option<&TxnRecord>) -> bool {
    current.is_none_or(|r| r.epoch >= LAST_EPOCH)
}

/// Whether an EndTxn v5 over `current` may need a new producer id: its bump would use up the
/// epochs of the current one.
pub(crate) fn ending_needs_producer_id(current: Option<&TxnRecord>) -> bool {
    current.is_some_and(|r| r.epoch.saturating_add(1) >= LAST_EPOCH)
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
        previous: None,
        next_producer_id: None,
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
                previous: None,
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
    /// Whether all of them are in the record's transaction.
    pub(crate) fn in_record(&self, record: &TxnRecord) -> bool {
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

/// What EndTxn asks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct End {
    pub producer: (i64, i16),
    pub commit: bool,
    pub protocol: Protocol,
    /// A producer id nobody has, when `ending_needs_producer_id`.
    pub fresh_id: Option<i64>,
    pub now_ms: i64,
}

/// AddPartitionsToTxn v4+ with VerifyOnly: for each partition, None if the producer's ongoing
/// transaction has it, else INVALID_TXN_STATE (Kafka's answer); Err for the producer itself
/// (unknown, or fenced).
pub(crate) fn check(
    current: Option<&TxnRecord>,
    (producer_id, epoch): (i64, i16),
    partitions: &[TxnPartition],
) -> Result<Vec<Option<ResponseError>>, ResponseError> {
    let current = check_producer(current, producer_id, epoch)?;
    let ongoing = current.state == TxnState::Ongoing;
    let has = |p: &TxnPartition| ongoing && current.partitions.contains(p);
    let missing = |p| (!has(p)).then_some(ResponseError::InvalidTxnState);
    Ok(partitions.iter().map(missing).collect())
}

/// EndTxn: commit or abort the ongoing transaction.
pub(crate) fn end(current: Option<&TxnRecord>, end: End) -> Step<Ended> {
    let End {
        producer,
        commit,
        protocol,
        fresh_id,
        now_ms,
    } = end;
    let bump = protocol == Protocol::BumpEpoch;
    // A retry of the EndTxn v5 that ended the last transaction (the bump moved the producer
    // on), or an abort after the coordinator aborted it on its timeout.
    if let Some(current) = current.filter(|r| bump && r.previous == Some(producer)) {
        return match (current.state, commit) {
            (TxnState::PrepareCommit | TxnState::CompleteCommit, true)
            | (TxnState::PrepareAbort | TxnState::CompleteAbort, false) => {
                answer(Ended::of(current))
            }
            _ => refuse(ResponseError::ProducerFenced),
        };
    }
    let current = match check_producer(current, producer.0, producer.1) {
        Ok(current) => current,
        Err(error) => return refuse(error),
    };
    let settled = matches!(
        current.state,
        TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
    );
    match (current.state, commit) {
        (TxnState::Ongoing, _) if bump => match bumped(current, fresh_id) {
            Some(base) => {
                let next = decide(&base, commit, true, now_ms);
                let ended = Ended::of(&next);
                store(next, ended)
            }
            None => refuse(ResponseError::CoordinatorNotAvailable),
        },
        (TxnState::Ongoing, _) => {
            let next = TxnRecord {
                // No retry of the second protocol's EndTxn is answered once the producer uses
                // the first.
                previous: None,
                ..decide(current, commit, false, now_ms)
            };
            let ended = Ended::of(&next);
            store(next, ended)
        }
        // The second protocol's producer does not know whether its partitions reached the
        // coordinator (the brokers add them): it may abort a transaction the coordinator never
        // saw, which bumps the epoch all the same.
        (_, false) if bump && settled => match bumped(current, fresh_id) {
            Some(base) => {
                let next = decide(&base, false, true, now_ms);
                let ended = Ended::of(&next);
                store(next, ended)
            }
            None => refuse(ResponseError::CoordinatorNotAvailable),
        },
        // The producer's next transaction, before the markers of the last are all written.
        (TxnState::PrepareCommit | TxnState::PrepareAbort, _) if bump => {
            refuse(ResponseError::ConcurrentTransactions)
        }
        // A retry of the request that decided it.
        (TxnState::PrepareCommit, true)
        | (TxnState::PrepareAbort, false)
        | (TxnState::CompleteCommit, true)
        | (TxnState::CompleteAbort, false)
            if !bump =>
        {
            answer(Ended::of(current))
        }
        _ => refuse(ResponseError::InvalidTxnState),
    }
}

/// `current` about to be decided with an epoch bump (EndTxn v5): remembers the producer's
/// id and epoch for retries, and takes `fresh_id` for its next transactions when the bump
/// uses up the current id's epochs (None if one is needed and there is none).
fn bumped(current: &TxnRecord, fresh_id: Option<i64>) -> Option<TxnRecord> {
    let mut base = current.clone();
    base.previous = Some((current.producer_id, current.epoch));
    if ending_needs_producer_id(Some(current)) {
        base.next_producer_id = Some(fresh_id?);
    }
    Some(base)
}

/// The ongoing transaction decided: its markers are to be written (complete at once when it
/// has no partitions). `bump` raises the epoch first, so that the producer's requests at the
/// old one are refused (a new instance of it, a timeout, or the second protocol's EndTxn).
fn decide(current: &TxnRecord, commit: bool, bump: bool, now_ms: i64) -> TxnRecord {
    let mut next = current.clone();
    if bump && next.epoch < i16::MAX {
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

/// The decided transaction is complete: it has no members any more, and its producer goes on
/// with a new id if the decision used up the epochs of the old one.
fn complete(record: &mut TxnRecord, commit: bool) {
    if let Some(id) = record.next_producer_id.take() {
        record.producer_id = id;
        record.epoch = 0;
    }
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
        previous: Some((current.producer_id, current.epoch)),
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
