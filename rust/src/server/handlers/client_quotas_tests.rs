//! Client quotas set and described through the APIs of a broker over its own store.

use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
use kafka_protocol::messages::ApiKey;

use super::*;
use crate::auth::acl::ResourceType::Cluster;
use crate::auth::acl::CLUSTER_NAME;
use crate::meta::mirror::tests::eventually;
use crate::protocol::header::testing::{read_response, request};
use crate::quotas::Client;
use crate::server::handlers::testing::{alice, allow, open};

fn entity(parts: &[(&str, Option<&str>)]) -> Vec<EntityData> {
    parts
        .iter()
        .map(|(kind, name)| {
            EntityData::default()
                .with_entity_type(text(*kind))
                .with_entity_name(name.map(text))
        })
        .collect()
}

fn set(key: &str, value: f64) -> OpData {
    OpData::default().with_key(text(key)).with_value(value)
}

fn remove(key: &str) -> OpData {
    OpData::default().with_key(text(key)).with_remove(true)
}

type Entry<'a> = (&'a [(&'a str, Option<&'a str>)], Vec<OpData>);

/// The error code of each entry of an AlterClientQuotas at `version`.
async fn altered(
    broker: &Broker,
    version: i16,
    entries: Vec<Entry<'_>>,
    validate_only: bool,
    access: &Access,
) -> Vec<i16> {
    let entries = entries.into_iter().map(|(parts, ops)| {
        EntryData::default()
            .with_entity(entity(parts))
            .with_ops(ops)
    });
    let body = AlterClientQuotasRequest::default()
        .with_entries(entries.collect())
        .with_validate_only(validate_only);
    let asked = request(ApiKey::AlterClientQuotas, version, &body);
    let frame = alter(broker, &asked, access).await.unwrap();
    let (_, response): (_, AlterClientQuotasResponse) = read_response(frame, version);
    response.entries.iter().map(|e| e.error_code).collect()
}

/// (error, entities as "type=name,..." with their values) of a DescribeClientQuotas.
async fn described(
    broker: &Broker,
    version: i16,
    filter: &[(&str, i8, Option<&str>)],
    strict: bool,
    access: &Access,
) -> (i16, Vec<(String, Vec<(String, f64)>)>) {
    let components = filter.iter().map(|(kind, match_type, name)| {
        ComponentData::default()
            .with_entity_type(text(*kind))
            .with_match_type(*match_type)
            .with_match(name.map(text))
    });
    let body = DescribeClientQuotasRequest::default()
        .with_components(components.collect())
        .with_strict(strict);
    let asked = request(ApiKey::DescribeClientQuotas, version, &body);
    let frame = describe(broker, &asked, access).await.unwrap();
    let (_, response): (_, DescribeClientQuotasResponse) = read_response(frame, version);
    let entries = response.entries.unwrap_or_default().into_iter().map(|e| {
        let names: Vec<String> = e
            .entity
            .iter()
            .map(|p| {
                let name = p.entity_name.as_deref().unwrap_or("<default>");
                format!("{}={name}", p.entity_type.as_str())
            })
            .collect();
        let values = e.values.iter().map(|v| (v.key.to_string(), v.value));
        (names.join(","), values.collect())
    });
    (response.error_code, entries.collect())
}

#[tokio::test]
async fn quotas_set_are_described_by_filter_and_put_in_force() {
    let t = crate::broker::tests::broker(1 << 20).await;
    let b = &t.broker;
    let all = &open();
    for v in 0..=1 {
        let codes = altered(
            b,
            v,
            vec![
                (
                    &[("user", Some("alice")), ("client-id", None)],
                    vec![set("producer_byte_rate", 1024.0)],
                ),
                (
                    &[("client-id", Some("app"))],
                    vec![
                        set("consumer_byte_rate", 2048.0),
                        set("request_percentage", 12.5),
                    ],
                ),
                (&[("ip", None)], vec![set("connection_creation_rate", 10.0)]),
            ],
            false,
            all,
        )
        .await;
        assert_eq!(codes, [0, 0, 0], "v{v}");
    }
    let names = |found: &[(String, Vec<(String, f64)>)]| -> Vec<String> {
        found.iter().map(|(n, _)| n.clone()).collect()
    };
    let (code, found) = described(b, 1, &[], false, all).await;
    assert_eq!(code, 0);
    assert_eq!(
        names(&found),
        [
            "client-id=app",
            "ip=<default>",
            "user=alice,client-id=<default>"
        ]
    );
    assert_eq!(
        found[0].1,
        [
            ("consumer_byte_rate".into(), 2048.0),
            ("request_percentage".into(), 12.5)
        ]
    );
    let (_, found) = described(b, 0, &[("user", EXACT, Some("alice"))], false, all).await;
    assert_eq!(names(&found), ["user=alice,client-id=<default>"]);
    // strict: only entities of exactly the filter's types
    let (_, found) = described(b, 0, &[("user", ANY, None)], true, all).await;
    assert!(found.is_empty());
    let (_, found) = described(b, 0, &[("client-id", DEFAULT, None)], false, all).await;
    assert_eq!(names(&found), ["user=alice,client-id=<default>"]);
    let (_, found) = described(b, 0, &[("client-id", ANY, None)], true, all).await;
    assert_eq!(names(&found), ["client-id=app"]);
    for bad in [
        vec![("user", EXACT, None)],
        vec![("group", ANY, None)],
        vec![("ip", ANY, None), ("user", ANY, None)],
        vec![("user", ANY, None), ("user", DEFAULT, None)],
    ] {
        let (code, _) = described(b, 1, &bad, false, all).await;
        assert_eq!(code, ResponseError::InvalidRequest.code(), "{bad:?}");
    }
    // The broker follows the store: the quotas are in force here.
    let app = Client::new("User:ANONYMOUS", Some("app"));
    assert!(eventually(|| b.quotas.fetch_window_bytes(app).is_some()).await);
    // Removing every quota of an entity removes it.
    let codes = altered(
        b,
        1,
        vec![(
            &[("client-id", Some("app"))],
            vec![remove("consumer_byte_rate"), remove("request_percentage")],
        )],
        false,
        all,
    )
    .await;
    assert_eq!(codes, [0]);
    let (_, found) = described(b, 1, &[], false, all).await;
    assert_eq!(
        names(&found),
        ["ip=<default>", "user=alice,client-id=<default>"]
    );
    assert!(eventually(|| b.quotas.fetch_window_bytes(app).is_none()).await);
}

#[tokio::test]
async fn entries_are_checked_one_by_one_as_kafka_does() {
    let t = crate::broker::tests::broker(1 << 20).await;
    let b = &t.broker;
    let invalid = ResponseError::InvalidRequest.code();
    let codes = altered(
        b,
        1,
        vec![
            (
                &[("user", Some("a"))],
                vec![set("producer_byte_rate", 100.0)],
            ),
            (
                &[("user", Some("a"))],
                vec![set("connection_creation_rate", 1.0)],
            ),
            (
                &[("ip", Some("10.0.0.1"))],
                vec![set("producer_byte_rate", 1.0)],
            ),
            (
                &[("ip", Some("10.0.0.1")), ("user", Some("a"))],
                vec![set("connection_creation_rate", 1.0)],
            ),
            (&[("user", Some("b"))], vec![set("producer_byte_rate", 1.5)]),
            (
                &[("user", Some("b"))],
                vec![set("producer_byte_rate", -1.0)],
            ),
            (
                &[("user", Some("b"))],
                vec![set("producer_byte_rate", 1.0), remove("producer_byte_rate")],
            ),
            (
                &[("user", Some("b"))],
                vec![set("controller_mutation_rate", 1.0)],
            ),
            (&[("user", Some("b"))], vec![set("no_such_quota", 1.0)]),
            (&[], vec![set("producer_byte_rate", 1.0)]),
        ],
        false,
        &open(),
    )
    .await;
    assert_eq!(
        codes,
        [0, invalid, invalid, invalid, invalid, invalid, invalid, invalid, invalid, invalid]
    );
    let (_, found) = described(b, 1, &[], false, &open()).await;
    assert_eq!(
        found,
        [(
            "user=a".to_string(),
            vec![("producer_byte_rate".to_string(), 100.0)]
        )]
    );
    // validate_only stores nothing
    let codes = altered(
        b,
        1,
        vec![(&[("user", Some("c"))], vec![set("producer_byte_rate", 1.0)])],
        true,
        &open(),
    )
    .await;
    assert_eq!(codes, [0]);
    assert_eq!(described(b, 1, &[], false, &open()).await.1.len(), 1);
}

#[tokio::test]
async fn quotas_need_the_cluster_config_operations() {
    let t = crate::broker::tests::secured_broker().await;
    let b = &t.broker;
    let denied = ResponseError::ClusterAuthorizationFailed.code();
    let reader = alice(vec![allow(
        Cluster,
        CLUSTER_NAME,
        Operation::DescribeConfigs,
    )]);
    let entry: Entry<'_> = (&[("user", Some("x"))], vec![set("producer_byte_rate", 1.0)]);
    assert_eq!(
        altered(b, 1, vec![entry.clone(), entry.clone()], false, &reader).await,
        [denied, denied]
    );
    assert_eq!(described(b, 1, &[], false, &reader).await, (0, vec![]));
    let nobody = alice(vec![]);
    assert_eq!(described(b, 1, &[], false, &nobody).await.0, denied);
    let admin = alice(vec![allow(Cluster, CLUSTER_NAME, Operation::AlterConfigs)]);
    assert_eq!(altered(b, 1, vec![entry], false, &admin).await, [0]);
    // ALTER_CONFIGS implies DESCRIBE_CONFIGS
    assert_eq!(described(b, 1, &[], false, &admin).await.1.len(), 1);
}
