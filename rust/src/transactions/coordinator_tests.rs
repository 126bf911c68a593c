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
    let step = end(Some(&record), (77, 0), true, NOW);
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
        end(Some(&prepared), (77, 0), true, NOW).answer,
        Ok(Ending::Decided)
    );
    assert_eq!(
        end(Some(&prepared), (77, 0), false, NOW).answer,
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
        end(Some(&complete), (77, 0), true, NOW).answer,
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
        end(Some(&record), (77, 0), true, NOW).answer,
        Err(ResponseError::InvalidTxnState),
        "nothing began"
    );
    let empty_ongoing = TxnRecord {
        state: TxnState::Ongoing,
        started_ms: NOW,
        ..record
    };
    let step = end(Some(&empty_ongoing), (77, 0), false, NOW);
    assert_eq!(step.answer, Ok(Ending::Complete));
    assert_eq!(step.write.unwrap().state, TxnState::CompleteAbort);
}

#[test]
fn requests_of_another_producer_or_epoch_are_refused() {
    let record = ongoing(&[p("t", 0)]);
    assert_eq!(
        end(Some(&record), (78, 0), true, NOW).answer,
        Err(ResponseError::InvalidProducerIdMapping)
    );
    assert_eq!(
        end(None, (77, 0), true, NOW).answer,
        Err(ResponseError::InvalidProducerIdMapping)
    );
    assert_eq!(
        end(Some(&record), (77, 1), true, NOW).answer,
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
        end(Some(&aborting), (77, 0), true, NOW).answer,
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
    let prepared = end(Some(&record), (77, 0), true, NOW).write.unwrap();
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
