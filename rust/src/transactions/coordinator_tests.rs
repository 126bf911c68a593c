use kafka_protocol::ResponseError;

use super::*;

const NOW: i64 = 1_000_000;

fn p(topic: &str, partition: i32) -> TxnPartition {
    TxnPartition(topic.to_string(), partition)
}

fn init_with(current: Option<&TxnRecord>, expected: Option<(i64, i16)>) -> Step<(i64, i16)> {
    let fresh_id = needs_producer_id(current).then_some(77);
    init(
        current,
        Init {
            timeout_ms: 60_000,
            expected,
            fresh_id,
            now_ms: NOW,
        },
    )
}

/// EndTxn of `protocol`, with a fresh producer id at hand when one may be needed.
fn ending(
    current: Option<&TxnRecord>,
    producer: (i64, i16),
    commit: bool,
    protocol: Protocol,
) -> Step<Ended> {
    let needs = protocol == Protocol::BumpEpoch && ending_needs_producer_id(current);
    let end_txn = End {
        producer,
        commit,
        protocol,
        fresh_id: needs.then_some(99),
        now_ms: NOW,
    };
    end(current, end_txn)
}

/// EndTxn v0–4, with only how it ended as the answer.
fn end_v1(current: Option<&TxnRecord>, producer: (i64, i16), commit: bool, _: i64) -> Step<Ending> {
    let Step { write, answer } = ending(current, producer, commit, Protocol::KeepEpoch);
    Step {
        write,
        answer: answer.map(|ended| ended.ending),
    }
}

/// The record after a first InitProducerId.
fn initialised() -> TxnRecord {
    init_with(None, None).write.unwrap()
}

/// The record with `partitions` added to an ongoing transaction.
fn ongoing(partitions: &[TxnPartition]) -> TxnRecord {
    let record = initialised();
    add(Some(&record), (77, 0), Members::Partitions(partitions), NOW)
        .write
        .unwrap()
}

#[test]
fn a_first_init_takes_a_fresh_id_and_each_next_one_bumps_the_epoch() {
    let first = init_with(None, None);
    assert_eq!(first.answer, Ok((77, 0)));
    let record = first.write.unwrap();
    assert_eq!(record.state, TxnState::Empty);
    let second = init_with(Some(&record), None);
    assert_eq!(second.answer, Ok((77, 1)));
    // Epochs used up: a new producer id at epoch 0.
    let worn = TxnRecord {
        epoch: i16::MAX - 1,
        ..record
    };
    assert!(needs_producer_id(Some(&worn)));
    let renewed = init(
        Some(&worn),
        Init {
            timeout_ms: 1,
            expected: None,
            fresh_id: Some(99),
            now_ms: NOW,
        },
    );
    assert_eq!(renewed.answer, Ok((99, 0)));
}

#[test]
fn init_during_an_ongoing_transaction_aborts_it_and_fences_the_old_producer() {
    let record = ongoing(&[p("t", 0), p("t", 1)]);
    let step = init_with(Some(&record), None);
    assert_eq!(step.answer, Err(ResponseError::ConcurrentTransactions));
    let aborting = step.write.unwrap();
    assert_eq!(aborting.state, TxnState::PrepareAbort);
    assert_eq!(aborting.epoch, 1);
    assert_eq!(aborting.unmarked.len(), 2);
    // The old producer's requests are refused from now on.
    let late = add(
        Some(&aborting),
        (77, 0),
        Members::Partitions(&[p("t", 2)]),
        NOW,
    );
    assert_eq!(late.answer, Err(ResponseError::ProducerFenced));
    // Until the markers are written, a new init waits too.
    assert_eq!(
        init_with(Some(&aborting), None).answer,
        Err(ResponseError::ConcurrentTransactions)
    );
    let done = marked(
        &aborting,
        (77, 1),
        Members::Partitions(&[p("t", 0), p("t", 1)]),
        NOW,
    )
    .unwrap();
    assert_eq!(done.state, TxnState::CompleteAbort);
    assert_eq!(init_with(Some(&done), None).answer, Ok((77, 2)));
}

#[test]
fn kip_360_init_checks_the_producer_it_names() {
    let record = initialised();
    assert_eq!(init_with(Some(&record), Some((77, 0))).answer, Ok((77, 1)));
    assert_eq!(
        init_with(Some(&record), Some((78, 0))).answer,
        Err(ResponseError::ProducerFenced)
    );
    assert_eq!(
        init_with(Some(&record), Some((77, 5))).answer,
        Err(ResponseError::ProducerFenced)
    );
}

#[test]
fn a_commit_is_prepared_then_complete_once_every_marker_is_written() {
    let record = ongoing(&[p("t", 0)]);
    let more = add(
        Some(&record),
        (77, 0),
        Members::Partitions(&[p("t", 0), p("u", 3)]),
        NOW + 1,
    );
    let record = more.write.unwrap();
    assert_eq!(record.partitions.len(), 2);
    assert_eq!(
        record.started_ms, NOW,
        "the transaction began with its first partition"
    );
    // Partitions added already change nothing.
    assert_eq!(
        add(
            Some(&record),
            (77, 0),
            Members::Partitions(&[p("u", 3)]),
            NOW
        )
        .write,
        None
    );
    let step = end_v1(Some(&record), (77, 0), true, NOW);
    assert_eq!(step.answer, Ok(Ending::Decided));
    let prepared = step.write.unwrap();
    assert_eq!(prepared.state, TxnState::PrepareCommit);
    // Nothing joins a decided transaction; a retried EndTxn waits for it.
    assert_eq!(
        add(
            Some(&prepared),
            (77, 0),
            Members::Partitions(&[p("v", 0)]),
            NOW
        )
        .answer,
        Err(ResponseError::ConcurrentTransactions)
    );
    assert_eq!(
        end_v1(Some(&prepared), (77, 0), true, NOW).answer,
        Ok(Ending::Decided)
    );
    assert_eq!(
        end_v1(Some(&prepared), (77, 0), false, NOW).answer,
        Err(ResponseError::InvalidTxnState)
    );
    let half = marked(&prepared, (77, 0), Members::Partitions(&[p("t", 0)]), NOW).unwrap();
    assert_eq!(half.state, TxnState::PrepareCommit);
    assert_eq!(
        marked(&half, (77, 0), Members::Partitions(&[p("t", 0)]), NOW),
        None,
        "no change"
    );
    // A marker report of another epoch's transaction changes nothing.
    assert_eq!(
        marked(&half, (77, 1), Members::Partitions(&[p("u", 3)]), NOW),
        None
    );
    let complete = marked(&half, (77, 0), Members::Partitions(&[p("u", 3)]), NOW).unwrap();
    assert_eq!(complete.state, TxnState::CompleteCommit);
    assert!(complete.partitions.is_empty());
    assert_eq!(
        end_v1(Some(&complete), (77, 0), true, NOW).answer,
        Ok(Ending::Complete)
    );
    // The next transaction starts from the completed one, at the same epoch.
    let next = add(
        Some(&complete),
        (77, 0),
        Members::Partitions(&[p("v", 0)]),
        NOW + 5,
    );
    let next = next.write.unwrap();
    assert_eq!(next.state, TxnState::Ongoing);
    assert_eq!(next.partitions.len(), 1);
    assert_eq!(next.started_ms, NOW + 5);
}

#[test]
fn ending_a_transaction_without_partitions_completes_it_at_once() {
    let record = initialised();
    assert_eq!(
        end_v1(Some(&record), (77, 0), true, NOW).answer,
        Err(ResponseError::InvalidTxnState),
        "nothing began"
    );
    let empty_ongoing = TxnRecord {
        state: TxnState::Ongoing,
        started_ms: NOW,
        ..record
    };
    let step = end_v1(Some(&empty_ongoing), (77, 0), false, NOW);
    assert_eq!(step.answer, Ok(Ending::Complete));
    assert_eq!(step.write.unwrap().state, TxnState::CompleteAbort);
}

#[test]
fn requests_of_another_producer_or_epoch_are_refused() {
    let record = ongoing(&[p("t", 0)]);
    assert_eq!(
        end_v1(Some(&record), (78, 0), true, NOW).answer,
        Err(ResponseError::InvalidProducerIdMapping)
    );
    assert_eq!(
        end_v1(None, (77, 0), true, NOW).answer,
        Err(ResponseError::InvalidProducerIdMapping)
    );
    assert_eq!(
        end_v1(Some(&record), (77, 1), true, NOW).answer,
        Err(ResponseError::ProducerFenced)
    );
}

#[test]
fn a_transaction_past_its_timeout_is_aborted_and_its_producer_may_resume() {
    let record = ongoing(&[p("t", 0)]);
    assert_eq!(expire(&record, NOW + 60_000), None, "not past it yet");
    let aborting = expire(&record, NOW + 60_001).unwrap();
    assert_eq!(aborting.state, TxnState::PrepareAbort);
    assert_eq!(aborting.epoch, 1);
    assert_eq!(aborting.fenced_epoch, Some(0));
    assert_eq!(
        end_v1(Some(&aborting), (77, 0), true, NOW).answer,
        Err(ResponseError::ProducerFenced)
    );
    let done = marked(&aborting, (77, 1), Members::Partitions(&[p("t", 0)]), NOW).unwrap();
    // KIP-360: the producer names the epoch it had and gets the next one.
    assert_eq!(init_with(Some(&done), Some((77, 0))).answer, Ok((77, 2)));
    assert_eq!(expire(&done, i64::MAX), None, "only ongoing ones expire");
}

#[test]
fn a_group_joins_and_its_offsets_complete_the_transaction_with_its_markers() {
    let record = ongoing(&[p("out", 0)]);
    let step = add(Some(&record), (77, 0), Members::Group("g"), NOW);
    let record = step.write.unwrap();
    assert!(record.groups.contains("g"));
    assert_eq!(
        add(Some(&record), (77, 0), Members::Group("g"), NOW).write,
        None
    );
    let prepared = end_v1(Some(&record), (77, 0), true, NOW).write.unwrap();
    assert_eq!(prepared.unmarked_groups.len(), 1);
    let partitions_done = marked(&prepared, (77, 0), Members::Partitions(&[p("out", 0)]), NOW);
    let partitions_done = partitions_done.unwrap();
    assert_eq!(
        partitions_done.state,
        TxnState::PrepareCommit,
        "the group is still to be told"
    );
    let complete = marked(&partitions_done, (77, 0), Members::Group("g"), NOW).unwrap();
    assert_eq!(complete.state, TxnState::CompleteCommit);
    assert!(complete.groups.is_empty());
    // A transaction of offsets alone begins with AddOffsetsToTxn.
    let offsets_only = add(Some(&complete), (77, 0), Members::Group("g"), NOW)
        .write
        .unwrap();
    assert_eq!(offsets_only.state, TxnState::Ongoing);
    assert!(offsets_only.partitions.is_empty());
}

#[test]
fn only_a_settled_transactional_id_expires() {
    let record = initialised();
    assert!(!idle(&record, NOW + 10, 10), "not past the expiration");
    assert!(idle(&record, NOW + 11, 10));
    let running = ongoing(&[p("t", 0)]);
    assert!(!idle(&running, i64::MAX, 10), "a transaction is under way");
}

// The second transaction protocol (EndTxn v5, KIP-890 part 2).

#[test]
fn v2_end_bumps_the_epoch_and_the_markers_and_next_transaction_carry_it() {
    let record = ongoing(&[p("t", 0)]);
    let step = ending(Some(&record), (77, 0), true, Protocol::BumpEpoch);
    let prepared = step.write.unwrap();
    let decided = Ended {
        ending: Ending::Decided,
        marking: (77, 1),
        next: (77, 1),
    };
    assert_eq!(step.answer, Ok(decided));
    assert_eq!(
        (prepared.state, prepared.epoch),
        (TxnState::PrepareCommit, 1)
    );
    assert_eq!(prepared.previous, Some((77, 0)));
    assert_eq!(
        prepared.transaction_epoch(),
        0,
        "the offsets were committed at epoch 0"
    );
    // The next transaction waits for the markers, which carry the bumped epoch.
    let next_add = add(
        Some(&prepared),
        (77, 1),
        Members::Partitions(&[p("t", 1)]),
        NOW,
    );
    assert_eq!(next_add.answer, Err(ResponseError::ConcurrentTransactions));
    let next_end = ending(Some(&prepared), (77, 1), false, Protocol::BumpEpoch);
    assert_eq!(next_end.answer, Err(ResponseError::ConcurrentTransactions));
    let parts = [p("t", 0)];
    let late = marked(&prepared, (77, 0), Members::Partitions(&parts), NOW);
    assert_eq!(
        late, None,
        "a report of the old epoch is not this decision's"
    );
    let complete = marked(&prepared, (77, 1), Members::Partitions(&parts), NOW).unwrap();
    assert_eq!(
        (complete.state, complete.epoch),
        (TxnState::CompleteCommit, 1)
    );
    assert_eq!(complete.transaction_epoch(), 1);
    // Only the bumped epoch goes on: a late request of the old one is fenced.
    let old = add(Some(&complete), (77, 0), Members::Partitions(&parts), NOW);
    assert_eq!(old.answer, Err(ResponseError::ProducerFenced));
    let new = add(Some(&complete), (77, 1), Members::Partitions(&parts), NOW);
    assert_eq!(new.write.unwrap().state, TxnState::Ongoing);
}

#[test]
fn a_retried_v2_end_gets_the_same_answer_and_a_contrary_one_is_fenced() {
    let record = ongoing(&[p("t", 0)]);
    let prepared = ending(Some(&record), (77, 0), true, Protocol::BumpEpoch)
        .write
        .unwrap();
    let retried = ending(Some(&prepared), (77, 0), true, Protocol::BumpEpoch);
    assert_eq!(retried.write, None);
    assert_eq!(retried.answer.unwrap().ending, Ending::Decided);
    let parts = [p("t", 0)];
    let complete = marked(&prepared, (77, 1), Members::Partitions(&parts), NOW).unwrap();
    let retried = ending(Some(&complete), (77, 0), true, Protocol::BumpEpoch);
    let complete_answer = Ended {
        ending: Ending::Complete,
        marking: (77, 1),
        next: (77, 1),
    };
    assert_eq!(retried.answer, Ok(complete_answer));
    assert_eq!(retried.write, None, "no second bump");
    let contrary = ending(Some(&complete), (77, 0), false, Protocol::BumpEpoch);
    assert_eq!(contrary.answer, Err(ResponseError::ProducerFenced));
}

#[test]
fn a_v2_abort_of_a_transaction_the_coordinator_never_saw_bumps_the_epoch() {
    let empty = initialised();
    let step = ending(Some(&empty), (77, 0), false, Protocol::BumpEpoch);
    let aborted = step.write.unwrap();
    assert_eq!((aborted.state, aborted.epoch), (TxnState::CompleteAbort, 1));
    assert_eq!(step.answer.unwrap().next, (77, 1));
    let commit = ending(Some(&empty), (77, 0), true, Protocol::BumpEpoch);
    assert_eq!(commit.answer, Err(ResponseError::InvalidTxnState));
    // The first protocol has nothing to abort there.
    let v1 = end_v1(Some(&empty), (77, 0), false, NOW);
    assert_eq!(v1.answer, Err(ResponseError::InvalidTxnState));
}

#[test]
fn a_v2_end_that_uses_up_the_epochs_moves_the_producer_to_a_new_id() {
    let worn = TxnRecord {
        epoch: i16::MAX - 2,
        ..ongoing(&[p("t", 0)])
    };
    assert!(ending_needs_producer_id(Some(&worn)));
    let without = end(
        Some(&worn),
        End {
            producer: (77, i16::MAX - 2),
            commit: true,
            protocol: Protocol::BumpEpoch,
            fresh_id: None,
            now_ms: NOW,
        },
    );
    assert_eq!(without.answer, Err(ResponseError::CoordinatorNotAvailable));
    let step = ending(Some(&worn), (77, i16::MAX - 2), true, Protocol::BumpEpoch);
    let prepared = step.write.unwrap();
    let decided = Ended {
        ending: Ending::Decided,
        marking: (77, i16::MAX - 1),
        next: (99, 0),
    };
    assert_eq!(step.answer, Ok(decided));
    let parts = [p("t", 0)];
    let marking = (77, i16::MAX - 1);
    let complete = marked(&prepared, marking, Members::Partitions(&parts), NOW).unwrap();
    assert_eq!((complete.producer_id, complete.epoch), (99, 0));
    assert_eq!(complete.next_producer_id, None);
    let retried = ending(
        Some(&complete),
        (77, i16::MAX - 2),
        true,
        Protocol::BumpEpoch,
    );
    assert_eq!(retried.answer.unwrap().next, (99, 0));
    let next = add(Some(&complete), (99, 0), Members::Partitions(&parts), NOW);
    assert_eq!(next.write.unwrap().state, TxnState::Ongoing);
}

#[test]
fn after_a_timeout_a_v2_producer_may_abort_and_go_on_but_not_commit() {
    let record = TxnRecord {
        started_ms: 0,
        ..ongoing(&[p("t", 0)])
    };
    let expired = expire(&record, NOW).unwrap();
    assert_eq!((expired.state, expired.epoch), (TxnState::PrepareAbort, 1));
    let commit = ending(Some(&expired), (77, 0), true, Protocol::BumpEpoch);
    assert_eq!(commit.answer, Err(ResponseError::ProducerFenced));
    let abort = ending(Some(&expired), (77, 0), false, Protocol::BumpEpoch);
    assert_eq!(abort.answer.unwrap().next, (77, 1));
    // The first protocol's producer is fenced as before (KIP-360 lets it init again).
    let v1 = end_v1(Some(&expired), (77, 0), false, NOW);
    assert_eq!(v1.answer, Err(ResponseError::ProducerFenced));
}

#[test]
fn a_v1_end_answers_no_v2_retry_afterwards() {
    let record = ongoing(&[p("t", 0)]);
    let v2 = ending(Some(&record), (77, 0), false, Protocol::BumpEpoch);
    let parts = [p("t", 0)];
    let v2_done = marked(
        &v2.write.unwrap(),
        (77, 1),
        Members::Partitions(&parts),
        NOW,
    )
    .unwrap();
    let again = add(Some(&v2_done), (77, 1), Members::Partitions(&parts), NOW);
    let v1 = end_v1(Some(&again.write.unwrap()), (77, 1), true, NOW);
    let decided = v1.write.unwrap();
    assert_eq!((decided.epoch, decided.previous), (1, None));
    assert_eq!(decided.transaction_epoch(), 1);
}

#[test]
fn verify_only_answers_each_partition_without_adding_it() {
    let record = ongoing(&[p("t", 0)]);
    let invalid = Some(ResponseError::InvalidTxnState);
    let asked = [p("t", 0), p("t", 1)];
    assert_eq!(
        check(Some(&record), (77, 0), &asked),
        Ok(vec![None, invalid])
    );
    assert_eq!(
        check(Some(&record), (77, 1), &asked),
        Err(ResponseError::ProducerFenced)
    );
    assert_eq!(
        check(None, (77, 0), &asked),
        Err(ResponseError::InvalidProducerIdMapping)
    );
    let empty = initialised();
    assert_eq!(check(Some(&empty), (77, 0), &asked[..1]), Ok(vec![invalid]));
}
