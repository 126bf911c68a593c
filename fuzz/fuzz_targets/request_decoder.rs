//! Request bytes as a connection reads them: frames (size prefix and limits), the request
//! header, and the body at the version the header names, decoded with the codec the server's
//! handlers use; a Produce also has each partition's records validated. Whatever the input,
//! this must return (an error is fine), never panic or allocate without bound.
//!
//! Bodies are decoded for every API the codec knows (`RequestKind::decode`), a superset of
//! what the broker serves: an API the broker starts serving is covered without an edit here.
//! (The broker's served table is private to the `kafscale` crate, so the target cannot narrow
//! itself to it.)

#![no_main]

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, ProduceRequest, RequestKind};
use kafscale::fuzzing::{validate_produce, FrameReader, Request};
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
    if request.api_key == ApiKey::Produce {
        return produce(request);
    }
    // What `Request::body::<T>()` does for the API's request type T: the codec's decoder,
    // which refuses a version outside T's range, on a copy of the body.
    let mut body = request.body.clone();
    drop(RequestKind::decode(
        request.api_key,
        &mut body,
        request.api_version,
    ));
}

fuzz_target!(|data: &[u8]| {
    let mut frames = FrameReader::new(data, MAX_REQUEST_BYTES);
    // The whole input arrives at once. The server closes the connection at the first bad
    // frame; so does this loop.
    if futures::executor::block_on(frames.fill(data.len(), |_, _| ())).is_err() {
        return;
    }
    while let Ok(Some(frame)) = frames.next_frame() {
        if let Ok(request) = Request::decode(frame) {
            decode_body(&request);
        }
    }
});
