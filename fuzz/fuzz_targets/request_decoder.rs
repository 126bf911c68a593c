//! Request bytes as a connection reads them: frames (size prefix and limits), the request
//! header, and the body of every API at the version the header names, decoded as the server's
//! handlers decode it; a Produce also has each partition's records validated. Whatever the
//! input, this must return (an error is fine), never panic or allocate without bound.

#![no_main]

use bytes::Bytes;
use kafka_protocol::messages::*;
use kafscale::log::validate::validate_produce;
use kafscale::protocol::frame::FrameReader;
use kafscale::protocol::header::Request;
use kafscale_fuzz::RULES;
use libfuzzer_sys::fuzz_target;

/// The broker's default request size limit (max.request.bytes).
const MAX_REQUEST_BYTES: usize = 100 * 1024 * 1024;

fn produce(request: &Request) {
    let Ok(body) = request.body::<ProduceRequest>() else {
        return;
    };
    for topic in body.topic_data {
        for partition in topic.partition_data {
            let records: Bytes = partition.records.unwrap_or_default();
            let _ = validate_produce(&records, &RULES);
        }
    }
}

fn decode_body(request: &Request) {
    macro_rules! decode {
        ($($key:ident => $body:ty),* $(,)?) => {
            match request.api_key {
                ApiKey::Produce => produce(request),
                $(ApiKey::$key => drop(request.body::<$body>()),)*
                _ => {}
            }
        };
    }
    decode! {
        Fetch => FetchRequest,
        ListOffsets => ListOffsetsRequest,
        Metadata => MetadataRequest,
        OffsetCommit => OffsetCommitRequest,
        OffsetFetch => OffsetFetchRequest,
        FindCoordinator => FindCoordinatorRequest,
        JoinGroup => JoinGroupRequest,
        Heartbeat => HeartbeatRequest,
        LeaveGroup => LeaveGroupRequest,
        SyncGroup => SyncGroupRequest,
        DescribeGroups => DescribeGroupsRequest,
        ListGroups => ListGroupsRequest,
        ApiVersions => ApiVersionsRequest,
        CreateTopics => CreateTopicsRequest,
        DeleteTopics => DeleteTopicsRequest,
        OffsetForLeaderEpoch => OffsetForLeaderEpochRequest,
        DescribeConfigs => DescribeConfigsRequest,
        AlterConfigs => AlterConfigsRequest,
        CreatePartitions => CreatePartitionsRequest,
        DeleteGroups => DeleteGroupsRequest,
        IncrementalAlterConfigs => IncrementalAlterConfigsRequest,
        OffsetDelete => OffsetDeleteRequest,
        InitProducerId => InitProducerIdRequest,
    }
}

fuzz_target!(|data: &[u8]| {
    let mut frames = FrameReader::new(data, MAX_REQUEST_BYTES);
    // The whole input arrives at once. The server closes the connection at the first bad
    // frame; so does this loop.
    if futures::executor::block_on(frames.fill(data.len())).is_err() {
        return;
    }
    while let Ok(Some(frame)) = frames.next_frame() {
        if let Ok(request) = Request::decode(frame) {
            decode_body(&request);
        }
    }
});
