//! A response's `throttle_time_ms`, set after the response is encoded: quotas (`crate::quotas`)
//! are metered once a request has been handled, when its answer exists. In nearly every
//! response that has the field it is the body's first (after the header); Produce has it
//! last, OffsetDelete after its error code. The table below says where, per API and version,
//! and a test checks it against the codec for every version served.

#[cfg(test)]
use bytes::Bytes;
use bytes::BytesMut;
use kafka_protocol::messages::ApiKey;

use super::splice::ResponseFrame;

/// The size prefix of a frame.
const SIZE_PREFIX: usize = 4;

/// Where the field lies in a response body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// At this offset from the body's start.
    At(usize),
    /// Last, before the top-level tagged fields of a flexible version (which must be none).
    Last { flexible: bool },
}

/// Where `api`'s response at `version` holds `throttle_time_ms`; None if it has none (or it is
/// left out here: ApiVersions, which a client sends before anything else, and the SASL APIs).
fn place(api: ApiKey, version: i16) -> Option<Place> {
    use ApiKey::*;
    let from = match api {
        Produce => {
            let flexible = version >= 9;
            return (version >= 1).then_some(Place::Last { flexible });
        }
        OffsetDelete => return Some(Place::At(2)),
        Fetch | FindCoordinator | Heartbeat | LeaveGroup | SyncGroup | DescribeGroups
        | ListGroups | DeleteTopics => 1,
        ListOffsets | JoinGroup | CreateTopics | OffsetForLeaderEpoch => 2,
        Metadata | OffsetCommit | OffsetFetch => 3,
        DeleteRecords
        | InitProducerId
        | AddPartitionsToTxn
        | AddOffsetsToTxn
        | EndTxn
        | TxnOffsetCommit
        | DescribeAcls
        | CreateAcls
        | DeleteAcls
        | DescribeConfigs
        | AlterConfigs
        | DescribeLogDirs
        | CreatePartitions
        | DeleteGroups
        | IncrementalAlterConfigs
        | DescribeClientQuotas
        | AlterClientQuotas
        | DescribeUserScramCredentials
        | AlterUserScramCredentials
        | DescribeCluster
        | DescribeProducers
        | DescribeTransactions
        | ListTransactions
        | DescribeTopicPartitions
        | ConsumerGroupHeartbeat
        | ConsumerGroupDescribe => 0,
        _ => return None,
    };
    (version >= from).then_some(Place::At(0))
}

/// Sets the `throttle_time_ms` of `frame` (an encoded response of `api` at `version`) to
/// `ms` if that is more than it holds (a Fetch sets its own); returns what it holds then (0
/// for a response without the field).
pub(crate) fn raise_throttle(frame: &mut ResponseFrame, api: ApiKey, version: i16, ms: i32) -> i32 {
    let Some(at) = field_offset(frame, api, version) else {
        return 0;
    };
    let head = &frame.chunks()[0];
    let held = i32::from_be_bytes(head[at..at + 4].try_into().unwrap_or_default());
    if ms <= held {
        return held;
    }
    let mut patched = BytesMut::from(&head[..]);
    patched[at..at + 4].copy_from_slice(&ms.to_be_bytes());
    frame.replace_head(patched.freeze());
    ms
}

/// The field's offset in the frame's first chunk, if the response has it there.
fn field_offset(frame: &ResponseFrame, api: ApiKey, version: i16) -> Option<usize> {
    let header = 4 + usize::from(api.response_header_version(version) >= 1);
    let body = SIZE_PREFIX + header;
    let head = frame.chunks().first()?;
    let at = match place(api, version)? {
        Place::At(offset) => body + offset,
        Place::Last { flexible } => {
            // Produce's answer is one chunk (no record data in it).
            if frame.chunks().len() != 1 {
                return None;
            }
            let tags = usize::from(flexible);
            if flexible && head.last() != Some(&0) {
                return None; // top-level tagged fields: not where it is looked for
            }
            head.len().checked_sub(4 + tags)?
        }
    };
    (at + 4 <= head.len() && at >= body).then_some(at)
}

/// A frame's bytes with the throttle set (tests).
#[cfg(test)]
pub(crate) fn with_throttle(frame: Bytes, api: ApiKey, version: i16, ms: i32) -> Bytes {
    let mut frame = ResponseFrame::from(frame);
    raise_throttle(&mut frame, api, version, ms);
    frame.to_bytes()
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::*;

    use super::*;
    use crate::protocol::header::encode_response;
    use crate::server::apis::served;

    const MARK: i32 = 0x0A0B_0C0D;

    /// Every served version of `$key`'s response, encoded with `throttle_time_ms` 0 and with
    /// MARK: raising 0 to MARK must give the second.
    macro_rules! check {
        ($key:expr, $response:ty) => {
            for v in versions($key) {
                let plain = encode_response(7, v, &<$response>::default()).unwrap();
                let marked = <$response>::default().with_throttle_time_ms(MARK);
                let marked = encode_response(7, v, &marked).unwrap();
                let raised = with_throttle(plain.clone(), $key, v, MARK);
                let has_field = marked != plain;
                let expected = if has_field { marked } else { plain };
                let skipped = matches!($key, ApiKey::ApiVersions);
                if !skipped {
                    assert_eq!(raised, expected, "{:?} v{v}", $key);
                }
            }
        };
    }

    fn versions(key: ApiKey) -> Vec<i16> {
        served()
            .filter(|s| s.key == key)
            .flat_map(|s| s.min..=s.max)
            .filter(|v| *v <= key.valid_versions().max)
            .collect()
    }

    #[test]
    fn the_throttle_is_found_in_every_served_response_that_has_one() {
        check!(ApiKey::Produce, ProduceResponse);
        check!(ApiKey::Fetch, FetchResponse);
        check!(ApiKey::ListOffsets, ListOffsetsResponse);
        check!(ApiKey::Metadata, MetadataResponse);
        check!(ApiKey::OffsetCommit, OffsetCommitResponse);
        check!(ApiKey::OffsetFetch, OffsetFetchResponse);
        check!(ApiKey::FindCoordinator, FindCoordinatorResponse);
        check!(ApiKey::JoinGroup, JoinGroupResponse);
        check!(ApiKey::Heartbeat, HeartbeatResponse);
        check!(ApiKey::LeaveGroup, LeaveGroupResponse);
        check!(ApiKey::SyncGroup, SyncGroupResponse);
        check!(ApiKey::DescribeGroups, DescribeGroupsResponse);
        check!(ApiKey::ListGroups, ListGroupsResponse);
        check!(ApiKey::CreateTopics, CreateTopicsResponse);
        check!(ApiKey::DeleteTopics, DeleteTopicsResponse);
        check!(ApiKey::DeleteRecords, DeleteRecordsResponse);
        check!(ApiKey::InitProducerId, InitProducerIdResponse);
        check!(ApiKey::OffsetForLeaderEpoch, OffsetForLeaderEpochResponse);
        check!(ApiKey::AddPartitionsToTxn, AddPartitionsToTxnResponse);
        check!(ApiKey::AddOffsetsToTxn, AddOffsetsToTxnResponse);
        check!(ApiKey::EndTxn, EndTxnResponse);
        check!(ApiKey::TxnOffsetCommit, TxnOffsetCommitResponse);
        check!(ApiKey::DescribeAcls, DescribeAclsResponse);
        check!(ApiKey::CreateAcls, CreateAclsResponse);
        check!(ApiKey::DeleteAcls, DeleteAclsResponse);
        check!(ApiKey::DescribeConfigs, DescribeConfigsResponse);
        check!(ApiKey::AlterConfigs, AlterConfigsResponse);
        check!(ApiKey::DescribeLogDirs, DescribeLogDirsResponse);
        check!(ApiKey::CreatePartitions, CreatePartitionsResponse);
        check!(ApiKey::DeleteGroups, DeleteGroupsResponse);
        check!(
            ApiKey::IncrementalAlterConfigs,
            IncrementalAlterConfigsResponse
        );
        check!(ApiKey::OffsetDelete, OffsetDeleteResponse);
        check!(ApiKey::DescribeClientQuotas, DescribeClientQuotasResponse);
        check!(ApiKey::AlterClientQuotas, AlterClientQuotasResponse);
        check!(
            ApiKey::DescribeUserScramCredentials,
            DescribeUserScramCredentialsResponse
        );
        check!(
            ApiKey::AlterUserScramCredentials,
            AlterUserScramCredentialsResponse
        );
        check!(ApiKey::DescribeCluster, DescribeClusterResponse);
        check!(ApiKey::DescribeProducers, DescribeProducersResponse);
        check!(ApiKey::DescribeTransactions, DescribeTransactionsResponse);
        check!(ApiKey::ListTransactions, ListTransactionsResponse);
        check!(
            ApiKey::DescribeTopicPartitions,
            DescribeTopicPartitionsResponse
        );
        check!(
            ApiKey::ConsumerGroupHeartbeat,
            ConsumerGroupHeartbeatResponse
        );
        check!(ApiKey::ConsumerGroupDescribe, ConsumerGroupDescribeResponse);
    }

    #[test]
    fn a_lower_throttle_leaves_a_higher_one_as_it_is() {
        let body = FetchResponse::default().with_throttle_time_ms(500);
        let mut frame = ResponseFrame::from(encode_response(7, 12, &body).unwrap());
        assert_eq!(raise_throttle(&mut frame, ApiKey::Fetch, 12, 100), 500);
        assert_eq!(raise_throttle(&mut frame, ApiKey::Fetch, 12, 900), 900);
        assert_eq!(raise_throttle(&mut frame, ApiKey::ApiVersions, 3, 900), 0);
    }
}
