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
mod tests;
