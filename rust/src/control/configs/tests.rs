use kafka_protocol::messages::alter_configs_request::{
    AlterConfigsResource as WireAlterResource, AlterableConfig as WireAlterable,
};
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource as WireResource;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource as WireIncrementalResource, AlterableConfig as WireIncremental,
};
use kafka_protocol::messages::ApiKey;
use kafka_protocol::ResponseError;

use super::*;
use crate::control::body::ControlBody;
use crate::control::testing::{advertised, decoded, on_the_wire};

const TOPIC: i8 = 2;

fn s(text: &'static str) -> StrBytes {
    StrBytes::from_static_str(text)
}

#[test]
fn describe_configs_request_at_every_version() {
    for v in advertised(ApiKey::DescribeConfigs) {
        for keys in [Some(vec![s("retention.ms")]), None] {
            let request = wire::DescribeConfigsRequest::default()
                .with_resources(vec![WireResource::default()
                    .with_resource_type(TOPIC)
                    .with_resource_name(s("orders"))
                    .with_configuration_keys(keys.clone())])
                .with_include_synonyms(v >= 1)
                .with_include_documentation(v >= 3);
            let ControlBody::DescribeConfigs(body) = decoded(ApiKey::DescribeConfigs, v, &request)
            else {
                panic!("v{v} decoded as another API");
            };
            let expected = DescribeConfigsRequest {
                resources: vec![DescribeConfigsResource {
                    resource_type: TOPIC,
                    resource_name: "orders".into(),
                    configuration_keys: keys.map(|_| vec!["retention.ms".into()]),
                }],
                include_synonyms: v >= 1,
                include_documentation: v >= 3,
            };
            assert_eq!(DescribeConfigsRequest::new(&body), expected, "v{v}");
        }
    }
}

fn alterable(name: &str, value: Option<&str>, config_operation: i8) -> AlterableConfig {
    AlterableConfig {
        name: name.into(),
        value: value.map(Into::into),
        config_operation,
    }
}

#[test]
fn both_alter_apis_become_one_request() {
    for v in advertised(ApiKey::AlterConfigs) {
        let request = wire::AlterConfigsRequest::default()
            .with_resources(vec![WireAlterResource::default()
                .with_resource_type(TOPIC)
                .with_resource_name(s("orders"))
                .with_configs(vec![
                    WireAlterable::default()
                        .with_name(s("retention.ms"))
                        .with_value(Some(s("1000"))),
                    WireAlterable::default()
                        .with_name(s("segment.bytes"))
                        .with_value(None),
                ])])
            .with_validate_only(true);
        let ControlBody::AlterConfigs(body) = decoded(ApiKey::AlterConfigs, v, &request) else {
            panic!("v{v} decoded as another API");
        };
        let expected = AlterConfigsRequest {
            resources: vec![AlterConfigsResource {
                resource_type: TOPIC,
                resource_name: "orders".into(),
                configs: vec![
                    alterable("retention.ms", Some("1000"), SET),
                    alterable("segment.bytes", None, SET),
                ],
            }],
            validate_only: true,
            incremental: false,
        };
        assert_eq!(AlterConfigsRequest::new(&body), expected, "v{v}");
    }
    for v in advertised(ApiKey::IncrementalAlterConfigs) {
        let request = wire::IncrementalAlterConfigsRequest::default().with_resources(vec![
            WireIncrementalResource::default()
                .with_resource_type(TOPIC)
                .with_resource_name(s("orders"))
                .with_configs(vec![
                    WireIncremental::default()
                        .with_name(s("retention.ms"))
                        .with_config_operation(0)
                        .with_value(Some(s("1000"))),
                    WireIncremental::default()
                        .with_name(s("retention.bytes"))
                        .with_config_operation(1)
                        .with_value(None),
                ]),
        ]);
        let ControlBody::IncrementalAlterConfigs(body) =
            decoded(ApiKey::IncrementalAlterConfigs, v, &request)
        else {
            panic!("v{v} decoded as another API");
        };
        let request = AlterConfigsRequest::incremental(&body);
        assert!(request.incremental && !request.validate_only);
        assert_eq!(
            request.resources[0].configs,
            [
                alterable("retention.ms", Some("1000"), 0),
                alterable("retention.bytes", None, 1)
            ],
            "v{v}"
        );
    }
}

fn config(name: &str, value: &str, config_source: i8) -> DescribedConfig {
    DescribedConfig {
        name: name.into(),
        value: Some(value.into()),
        read_only: false,
        config_source,
        is_sensitive: false,
        synonyms: vec![ConfigSynonym {
            name: format!("log.{name}"),
            value: Some(value.into()),
            source: config_source,
        }],
        config_type: 5, // LONG
        documentation: Some(format!("about {name}")),
    }
}

#[test]
fn describe_configs_answer_at_every_version() {
    let dynamic = 1;
    let answer = DescribeConfigsResponse {
        results: vec![
            DescribeConfigsResult {
                error_code: 0,
                error_message: None,
                resource_type: TOPIC,
                resource_name: "orders".into(),
                configs: vec![
                    config("retention.ms", "1000", dynamic),
                    config("retention.bytes", "-1", DEFAULT_CONFIG),
                ],
            },
            DescribeConfigsResult {
                error_code: ResponseError::UnknownTopicOrPartition.code(),
                error_message: Some("no such topic".into()),
                resource_type: TOPIC,
                resource_name: "missing".into(),
                configs: vec![],
            },
        ],
        throttle_time_ms: 5,
    };
    for v in advertised(ApiKey::DescribeConfigs) {
        let wire = on_the_wire(&describe_configs(answer.clone(), v), v);
        assert_eq!(wire.throttle_time_ms, 5);
        let [found, missing] = &wire.results[..] else {
            panic!("v{v}: two results expected");
        };
        assert_eq!((found.error_code, found.resource_type), (0, TOPIC));
        assert_eq!(found.resource_name.as_str(), "orders");
        assert_eq!(
            missing.error_code,
            ResponseError::UnknownTopicOrPartition.code()
        );
        assert_eq!(missing.error_message.as_deref(), Some("no such topic"));
        let [set, default] = &found.configs[..] else {
            panic!("v{v}: two configs expected");
        };
        assert_eq!(set.name.as_str(), "retention.ms");
        assert_eq!(set.value.as_deref(), Some("1000"));
        if v == 0 {
            assert!(!set.is_default && default.is_default);
            assert!(set.synonyms.is_empty());
        } else {
            assert!(!set.is_default && !default.is_default, "v{v}");
            let sources = (set.config_source, default.config_source);
            assert_eq!(sources, (dynamic, DEFAULT_CONFIG), "v{v}");
            let synonym = &set.synonyms[0];
            assert_eq!(synonym.name.as_str(), "log.retention.ms");
            assert_eq!(
                (synonym.value.as_deref(), synonym.source),
                (Some("1000"), dynamic)
            );
        }
        if v >= 3 {
            assert_eq!(set.config_type, 5);
            assert_eq!(set.documentation.as_deref(), Some("about retention.ms"));
        } else {
            // not on the wire: what the client reads is the schema's default
            let absent = WireConfig::default();
            assert_eq!(set.config_type, absent.config_type);
            assert_eq!(set.documentation, absent.documentation);
        }
    }
}

#[test]
fn alter_configs_answers_at_every_version_of_both_apis() {
    let invalid = ResponseError::InvalidConfig.code();
    let answer = AlterConfigsResponse {
        responses: vec![
            AlterConfigsResourceResult {
                error_code: 0,
                error_message: None,
                resource_type: TOPIC,
                resource_name: "orders".into(),
            },
            AlterConfigsResourceResult {
                error_code: invalid,
                error_message: Some("broker configs are read-only".into()),
                resource_type: 4,
                resource_name: "1".into(),
            },
        ],
        throttle_time_ms: 5,
    };
    let expected = [
        (0, None, TOPIC, "orders"),
        (invalid, Some("broker configs are read-only"), 4, "1"),
    ];
    // The two wire responses are distinct types with the same fields.
    macro_rules! results {
        ($wire:expr) => {
            $wire
                .responses
                .iter()
                .map(|r| {
                    let message = r.error_message.as_deref();
                    (
                        r.error_code,
                        message,
                        r.resource_type,
                        r.resource_name.as_str(),
                    )
                })
                .collect::<Vec<_>>()
        };
    }
    for v in advertised(ApiKey::AlterConfigs) {
        let wire = on_the_wire(&alter_configs(answer.clone()), v);
        assert_eq!(wire.throttle_time_ms, 5);
        assert_eq!(results!(wire), expected, "v{v}");
    }
    for v in advertised(ApiKey::IncrementalAlterConfigs) {
        let wire = on_the_wire(&incremental_alter_configs(answer.clone()), v);
        assert_eq!(wire.throttle_time_ms, 5);
        assert_eq!(results!(wire), expected, "v{v}");
    }
}
