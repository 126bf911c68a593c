//! DescribeConfigs, AlterConfigs and IncrementalAlterConfigs across the bridge: the requests
//! as the config handlers see them (both alter APIs as one `AlterConfigsRequest`), and their
//! answers (classes Python constructs, re-exported by `kafscale.admin.protocol`) encoded at the request's version.

use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult as WireConfig, DescribeConfigsResult as WireResult,
    DescribeConfigsSynonym as WireSynonym,
};
use kafka_protocol::messages::{
    self as wire, alter_configs_response, incremental_alter_configs_response,
};
use kafka_protocol::protocol::StrBytes;
use pyo3::prelude::*;

use crate::control::text::{read, read_opt, wire, wire_opt};

/// DescribeConfigs `config_source` of a value nobody set (v0 calls it `is_default`).
const DEFAULT_CONFIG: i8 = 5;

#[pyclass(frozen, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DescribeConfigsResource {
    resource_type: i8,
    resource_name: String,
    configuration_keys: Option<Vec<String>>,
}

#[pyclass(frozen, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DescribeConfigsRequest {
    resources: Vec<DescribeConfigsResource>,
    include_synonyms: bool,
    include_documentation: bool,
}

impl DescribeConfigsRequest {
    /// Synonyms can be asked for from v1, documentation from v3; the codec reads false before.
    pub(crate) fn new(request: &wire::DescribeConfigsRequest) -> Self {
        let resources = request.resources.iter().map(|r| DescribeConfigsResource {
            resource_type: r.resource_type,
            resource_name: read(&r.resource_name),
            configuration_keys: r
                .configuration_keys
                .as_ref()
                .map(|keys| keys.iter().map(read).collect()),
        });
        DescribeConfigsRequest {
            resources: resources.collect(),
            include_synonyms: request.include_synonyms,
            include_documentation: request.include_documentation,
        }
    }
}

#[pyclass(frozen, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AlterableConfig {
    name: String,
    value: Option<String>,
    config_operation: i8,
}

#[pyclass(frozen, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AlterConfigsResource {
    resource_type: i8,
    resource_name: String,
    configs: Vec<AlterableConfig>,
}

#[pyclass(frozen, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AlterConfigsRequest {
    resources: Vec<AlterConfigsResource>,
    validate_only: bool,
    incremental: bool,
}

/// IncrementalAlterConfigs' SET: what every AlterConfigs entry amounts to.
const SET: i8 = 0;

fn resource(
    resource_type: i8,
    name: &StrBytes,
    configs: impl Iterator<Item = AlterableConfig>,
) -> AlterConfigsResource {
    AlterConfigsResource {
        resource_type,
        resource_name: read(name),
        configs: configs.collect(),
    }
}

impl AlterConfigsRequest {
    /// AlterConfigs: each resource's configs replace its whole set.
    pub(crate) fn new(request: &wire::AlterConfigsRequest) -> Self {
        let resources = request.resources.iter().map(|r| {
            let configs = r.configs.iter().map(|c| AlterableConfig {
                name: read(&c.name),
                value: read_opt(&c.value),
                config_operation: SET,
            });
            resource(r.resource_type, &r.resource_name, configs)
        });
        AlterConfigsRequest {
            resources: resources.collect(),
            validate_only: request.validate_only,
            incremental: false,
        }
    }

    /// IncrementalAlterConfigs: each config is one operation on the resource's set.
    pub(crate) fn incremental(request: &wire::IncrementalAlterConfigsRequest) -> Self {
        let resources = request.resources.iter().map(|r| {
            let configs = r.configs.iter().map(|c| AlterableConfig {
                name: read(&c.name),
                value: read_opt(&c.value),
                config_operation: c.config_operation,
            });
            resource(r.resource_type, &r.resource_name, configs)
        });
        AlterConfigsRequest {
            resources: resources.collect(),
            validate_only: request.validate_only,
            incremental: true,
        }
    }
}

#[pyclass(frozen, eq, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ConfigSynonym {
    pub name: String,
    pub value: Option<String>,
    pub source: i8,
}

#[pymethods]
impl ConfigSynonym {
    #[new]
    #[pyo3(signature = (name, value, source))]
    fn new(name: String, value: Option<String>, source: i8) -> Self {
        ConfigSynonym {
            name,
            value,
            source,
        }
    }
}

#[pyclass(frozen, eq, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DescribedConfig {
    pub name: String,
    pub value: Option<String>,
    pub read_only: bool,
    pub config_source: i8,
    pub is_sensitive: bool,
    pub synonyms: Vec<ConfigSynonym>,
    pub config_type: i8,
    pub documentation: Option<String>,
}

#[pymethods]
impl DescribedConfig {
    #[new]
    #[pyo3(signature = (name, value, read_only, config_source, is_sensitive = false, synonyms = Vec::new(), config_type = 0, documentation = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        name: String,
        value: Option<String>,
        read_only: bool,
        config_source: i8,
        is_sensitive: bool,
        synonyms: Vec<ConfigSynonym>,
        config_type: i8,
        documentation: Option<String>,
    ) -> Self {
        DescribedConfig {
            name,
            value,
            read_only,
            config_source,
            is_sensitive,
            synonyms,
            config_type,
            documentation,
        }
    }
}

#[pyclass(frozen, eq, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DescribeConfigsResult {
    pub error_code: i16,
    pub error_message: Option<String>,
    pub resource_type: i8,
    pub resource_name: String,
    pub configs: Vec<DescribedConfig>,
}

#[pymethods]
impl DescribeConfigsResult {
    #[new]
    #[pyo3(signature = (error_code, error_message, resource_type, resource_name, configs = Vec::new()))]
    fn new(
        error_code: i16,
        error_message: Option<String>,
        resource_type: i8,
        resource_name: String,
        configs: Vec<DescribedConfig>,
    ) -> Self {
        DescribeConfigsResult {
            error_code,
            error_message,
            resource_type,
            resource_name,
            configs,
        }
    }
}

#[pyclass(frozen, eq, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DescribeConfigsResponse {
    pub results: Vec<DescribeConfigsResult>,
    pub throttle_time_ms: i32,
}

#[pymethods]
impl DescribeConfigsResponse {
    #[new]
    #[pyo3(signature = (results, throttle_time_ms = 0))]
    fn new(results: Vec<DescribeConfigsResult>, throttle_time_ms: i32) -> Self {
        DescribeConfigsResponse {
            results,
            throttle_time_ms,
        }
    }
}

/// v0 says whether a value is the default (`is_default`); v1+ say where it comes from
/// (`config_source`) and list its synonyms; v3+ add its type and documentation.
pub(crate) fn describe_configs(
    answer: DescribeConfigsResponse,
    version: i16,
) -> wire::DescribeConfigsResponse {
    let config = |c: DescribedConfig| {
        let entry = WireConfig::default()
            .with_name(wire(c.name))
            .with_value(wire_opt(c.value))
            .with_read_only(c.read_only)
            .with_is_sensitive(c.is_sensitive);
        let entry = if version == 0 {
            entry.with_is_default(c.config_source == DEFAULT_CONFIG)
        } else {
            let synonyms = c.synonyms.into_iter().map(|s| {
                WireSynonym::default()
                    .with_name(wire(s.name))
                    .with_value(wire_opt(s.value))
                    .with_source(s.source)
            });
            entry
                .with_config_source(c.config_source)
                .with_synonyms(synonyms.collect())
        };
        if version >= 3 {
            entry
                .with_config_type(c.config_type)
                .with_documentation(wire_opt(c.documentation))
        } else {
            entry
        }
    };
    let results = answer.results.into_iter().map(|r| {
        WireResult::default()
            .with_error_code(r.error_code)
            .with_error_message(wire_opt(r.error_message))
            .with_resource_type(r.resource_type)
            .with_resource_name(wire(r.resource_name))
            .with_configs(r.configs.into_iter().map(config).collect())
    });
    wire::DescribeConfigsResponse::default()
        .with_throttle_time_ms(answer.throttle_time_ms)
        .with_results(results.collect())
}

#[pyclass(frozen, eq, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AlterConfigsResourceResult {
    pub error_code: i16,
    pub error_message: Option<String>,
    pub resource_type: i8,
    pub resource_name: String,
}

#[pymethods]
impl AlterConfigsResourceResult {
    #[new]
    #[pyo3(signature = (error_code, error_message, resource_type, resource_name))]
    fn new(
        error_code: i16,
        error_message: Option<String>,
        resource_type: i8,
        resource_name: String,
    ) -> Self {
        AlterConfigsResourceResult {
            error_code,
            error_message,
            resource_type,
            resource_name,
        }
    }
}

#[pyclass(frozen, eq, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AlterConfigsResponse {
    pub responses: Vec<AlterConfigsResourceResult>,
    pub throttle_time_ms: i32,
}

#[pymethods]
impl AlterConfigsResponse {
    #[new]
    #[pyo3(signature = (responses, throttle_time_ms = 0))]
    fn new(responses: Vec<AlterConfigsResourceResult>, throttle_time_ms: i32) -> Self {
        AlterConfigsResponse {
            responses,
            throttle_time_ms,
        }
    }
}

/// The one answer of both alter APIs, as either wire response (same fields, two schemas).
macro_rules! alter_response {
    ($answer:expr, $response:ident, $result:path) => {{
        let answer: AlterConfigsResponse = $answer;
        let results = answer.responses.into_iter().map(|r| {
            <$result>::default()
                .with_error_code(r.error_code)
                .with_error_message(wire_opt(r.error_message))
                .with_resource_type(r.resource_type)
                .with_resource_name(wire(r.resource_name))
        });
        wire::$response::default()
            .with_throttle_time_ms(answer.throttle_time_ms)
            .with_responses(results.collect())
    }};
}

pub(crate) fn alter_configs(answer: AlterConfigsResponse) -> wire::AlterConfigsResponse {
    alter_response!(
        answer,
        AlterConfigsResponse,
        alter_configs_response::AlterConfigsResourceResponse
    )
}

pub(crate) fn incremental_alter_configs(
    answer: AlterConfigsResponse,
) -> wire::IncrementalAlterConfigsResponse {
    alter_response!(
        answer,
        IncrementalAlterConfigsResponse,
        incremental_alter_configs_response::AlterConfigsResourceResponse
    )
}

#[cfg(test)]
mod tests {
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
                let ControlBody::DescribeConfigs(body) =
                    decoded(ApiKey::DescribeConfigs, v, &request)
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
}
