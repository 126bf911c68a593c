"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs, per the ops spec.

Topics: the whitelist of :mod:`kafscale.admin.topic_configs`, each with its value and whether it
is the topic's own (DYNAMIC_TOPIC_CONFIG) or the broker default (DEFAULT_CONFIG). A change is
written to the topic's record in the metadata store, which every broker follows at once.
Brokers: their settings, read-only, under the names Kafka gives them where Kafka has one
(connections.max.reauth.ms, log.retention.ms, ...), else as ``kafscale.*``; altering a broker is
INVALID_CONFIG (broker settings are flags or KAFSCALE_* variables, read at start-up). Every
resource gets its own result; unknown keys are left out of a describe, refused in an alter.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from kafscale.admin.protocol import (
    AlterConfigsResourceResult,
    AlterConfigsResponse,
    ConfigOperation,
    ConfigSource,
    ConfigSynonym,
    ConfigType,
    DescribeConfigsResponse,
    DescribeConfigsResult,
    DescribedConfig,
    ResourceType,
)
from kafscale.admin.topic_configs import (
    CONFIG_RULES,
    BrokerDefaults,
    Rejected,
    default_value,
    normalise,
)
from kafscale.config import Settings, env_var, flag
from kafscale.errors import ErrorCode

if TYPE_CHECKING:
    from kafscale import _core

__all__ = ["alter_configs", "describe_configs", "topic_configs"]


# Kafka's broker configs this broker has, under Kafka's names (clients look settings up by
# them: librdkafka's KIP-368 test reads connections.max.reauth.ms), then KafScale's own: the
# setting each is read from and Kafka's type for it. listeners, advertised.listeners and
# authorizer.class.name are derived (_derived_configs).
_BROKER_KEYS: Mapping[str, tuple[str, ConfigType]] = {
    "broker.id": ("broker_id", ConfigType.INT),
    "sasl.enabled.mechanisms": ("sasl_enabled_mechanisms", ConfigType.LIST),
    "connections.max.reauth.ms": ("connections_max_reauth_ms", ConfigType.LONG),
    "connection.failed.authentication.delay.ms": (
        "connection_failed_authentication_delay_ms",
        ConfigType.INT,
    ),
    "sasl.server.max.receive.size": ("sasl_server_max_receive_size", ConfigType.INT),
    "ssl.client.auth": ("ssl_client_auth", ConfigType.STRING),
    "super.users": ("super_users", ConfigType.STRING),
    "allow.everyone.if.no.acl.found": ("allow_everyone_if_no_acl_found", ConfigType.BOOLEAN),
    "auto.create.topics.enable": ("auto_create_topics", ConfigType.BOOLEAN),
    "num.partitions": ("default_partitions", ConfigType.INT),
    "socket.request.max.bytes": ("max_request_bytes", ConfigType.INT),
    "message.max.bytes": ("max_message_bytes", ConfigType.INT),
    "log.segment.bytes": ("segment_bytes", ConfigType.INT),
    "log.retention.ms": ("retention_ms", ConfigType.LONG),
    "log.retention.bytes": ("retention_bytes", ConfigType.LONG),
    "log.retention.check.interval.ms": ("retention_check_interval_ms", ConfigType.LONG),
    "log.message.timestamp.before.max.ms": ("message_timestamp_before_max_ms", ConfigType.LONG),
    "log.message.timestamp.after.max.ms": ("message_timestamp_after_max_ms", ConfigType.LONG),
    "max.connections": ("max_connections", ConfigType.INT),
    "max.connections.per.ip": ("max_connections_per_ip", ConfigType.INT),
    "connections.max.idle.ms": ("connections_max_idle_ms", ConfigType.LONG),
    "queued.max.request.bytes": ("queued_max_request_bytes", ConfigType.LONG),
    "fetch.max.bytes": ("fetch_max_bytes", ConfigType.INT),
    "producer.id.expiration.ms": ("producer_id_expiration_ms", ConfigType.INT),
    "log.roll.ms": ("log_roll_ms", ConfigType.LONG),
    "log.cleaner.min.cleanable.ratio": ("log_cleaner_min_cleanable_ratio", ConfigType.DOUBLE),
    "log.cleaner.min.compaction.lag.ms": ("log_cleaner_min_compaction_lag_ms", ConfigType.LONG),
    "log.cleaner.max.compaction.lag.ms": ("log_cleaner_max_compaction_lag_ms", ConfigType.LONG),
    "log.cleaner.delete.retention.ms": ("log_cleaner_delete_retention_ms", ConfigType.LONG),
    "log.cleaner.dedupe.buffer.size": ("log_cleaner_dedupe_buffer_size", ConfigType.LONG),
    "log.cleaner.backoff.ms": ("log_cleaner_backoff_ms", ConfigType.LONG),
    "file.delete.delay.ms": ("file_delete_delay_ms", ConfigType.LONG),
    "transaction.max.timeout.ms": ("transaction_max_timeout_ms", ConfigType.INT),
    "transactional.id.expiration.ms": ("transactional_id_expiration_ms", ConfigType.INT),
    "group.initial.rebalance.delay.ms": ("group_initial_rebalance_delay_ms", ConfigType.INT),
    "group.min.session.timeout.ms": ("group_min_session_timeout_ms", ConfigType.INT),
    "group.max.session.timeout.ms": ("group_max_session_timeout_ms", ConfigType.INT),
    "group.max.size": ("group_max_size", ConfigType.INT),
    "kafscale.s3.bucket": ("s3_bucket", ConfigType.STRING),
    "kafscale.s3.region": ("s3_region", ConfigType.STRING),
    "kafscale.s3.endpoint": ("s3_endpoint", ConfigType.STRING),
    "kafscale.cache.bytes": ("cache_bytes", ConfigType.LONG),
    "kafscale.readahead.segments": ("readahead_segments", ConfigType.INT),
    "kafscale.segment.bytes": ("segment_bytes", ConfigType.INT),
    "kafscale.flush.interval.ms": ("flush_interval_ms", ConfigType.LONG),
}


def _text(value: object) -> str | None:
    """A setting's value as Kafka writes it (booleans in lower case)."""
    if isinstance(value, bool):
        return str(value).lower()
    return None if value is None else str(value)


def _derived_configs(s: Settings) -> dict[str, tuple[str | None, ConfigType, str]]:
    """The broker keys whose value is not one setting's: value, type, the setting behind it."""
    specs = s.listener_specs
    return {
        "listeners": (
            ",".join(f"{spec.name}://{spec.bind}" for spec in specs),
            ConfigType.STRING,
            "listeners",
        ),
        "advertised.listeners": (
            ",".join(
                f"{spec.name}://{spec.advertised_host}:{spec.advertised_port}" for spec in specs
            ),
            ConfigType.STRING,
            "advertised_listeners",
        ),
        # Kafka's default, empty, is no authorizer; acl is KafScale's ACL authorizer.
        "authorizer.class.name": (
            "" if s.authorizer == "none" else s.authorizer,
            ConfigType.STRING,
            "authorizer",
        ),
    }


def _broker_configs(s: Settings) -> dict[str, tuple[str | None, ConfigType, str]]:
    """Every broker key: its value, type and the setting it comes from."""
    configs = {
        key: (_text(getattr(s, setting)), config_type, setting)
        for key, (setting, config_type) in _BROKER_KEYS.items()
    }
    return {**configs, **_derived_configs(s)}


def _wanted(keys: Sequence[str] | None, known: Sequence[str]) -> list[str]:
    # The spec: unknown keys are ignored (left out), not errors.
    return list(known) if keys is None else [k for k in dict.fromkeys(keys) if k in known]


def _entry(
    name: str,
    value: str | None,
    source: ConfigSource,
    read_only: bool,
    config_type: ConfigType,
    doc: str | None,
    *,
    synonyms: bool,
    documentation: bool,
) -> DescribedConfig:
    return DescribedConfig(
        name=name,
        value=value,
        read_only=read_only,
        config_source=source,
        synonyms=[ConfigSynonym(name, value, source)] if synonyms else [],
        config_type=config_type,
        documentation=doc if documentation else None,
    )


def topic_configs(
    own: Mapping[str, str],
    settings: BrokerDefaults,
    keys: Sequence[str] | None = None,
    *,
    synonyms: bool = False,
    documentation: bool = False,
) -> list[DescribedConfig]:
    """The configs of a topic whose overrides are ``own`` (all, or those of ``keys`` that
    exist), as DescribeConfigs lists them: the override (DYNAMIC_TOPIC_CONFIG) or the broker
    default (DEFAULT_CONFIG). CreateTopics v5+ list them without synonyms or documentation."""
    entries = []
    for key in _wanted(keys, list(CONFIG_RULES)):
        rule = CONFIG_RULES[key]
        if key in own:
            value, source = own[key], ConfigSource.DYNAMIC_TOPIC_CONFIG
        else:
            value, source = default_value(key, settings), ConfigSource.DEFAULT_CONFIG
        entries.append(
            _entry(
                key,
                value,
                source,
                False,
                rule.config_type,
                rule.doc,
                synonyms=synonyms,
                documentation=documentation,
            )
        )
    return entries


async def _describe_topic(
    core: _core.Broker,
    settings: Settings,
    resource: _core.DescribeConfigsResource,
    req: _core.DescribeConfigsRequest,
) -> list[DescribedConfig]:
    topic = await core.topic(resource.resource_name)
    if topic is None:
        raise Rejected(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {resource.resource_name!r} does not exist"
        )
    return topic_configs(
        topic.configs,
        settings,
        resource.configuration_keys,
        synonyms=req.include_synonyms,
        documentation=req.include_documentation,
    )


def _describe_broker(
    settings: Settings, resource: _core.DescribeConfigsResource, req: _core.DescribeConfigsRequest
) -> list[DescribedConfig]:
    if resource.resource_name not in ("", str(settings.broker_id)):
        raise Rejected(
            ErrorCode.INVALID_REQUEST,
            f"this is broker {settings.broker_id}; send DescribeConfigs for broker "
            f"{resource.resource_name!r} to that broker",
        )
    configs = _broker_configs(settings)
    entries = []
    for key in _wanted(resource.configuration_keys, list(configs)):
        value, config_type, setting = configs[key]
        doc = f"read-only: the broker's {flag(setting)} ({env_var(setting)}), read at start-up"
        entries.append(
            _entry(
                key,
                value,
                ConfigSource.STATIC_BROKER_CONFIG,
                True,
                config_type,
                doc,
                synonyms=req.include_synonyms,
                documentation=req.include_documentation,
            )
        )
    return entries


async def describe_configs(
    core: _core.Broker, settings: Settings, req: _core.DescribeConfigsRequest
) -> DescribeConfigsResponse:
    results = []
    for resource in req.resources:
        try:
            if resource.resource_type == ResourceType.TOPIC:
                configs = await _describe_topic(core, settings, resource, req)
            elif resource.resource_type == ResourceType.BROKER:
                configs = _describe_broker(settings, resource, req)
            else:
                raise Rejected(
                    ErrorCode.INVALID_REQUEST,
                    f"resource type {resource.resource_type} is not supported; KafScale "
                    "describes topics (2) and brokers (4)",
                )
        except Rejected as r:
            results.append(
                DescribeConfigsResult(
                    r.code, r.message, resource.resource_type, resource.resource_name
                )
            )
            continue
        results.append(
            DescribeConfigsResult(
                ErrorCode.NONE, None, resource.resource_type, resource.resource_name, configs
            )
        )
    return DescribeConfigsResponse(results)


# --- alter -------------------------------------------------------------------------------------


def _new_topic_configs(
    current: dict[str, str], resource: _core.AlterConfigsResource, incremental: bool
) -> dict[str, str]:
    """The topic's configs after the request: AlterConfigs replaces the whole set (what it
    leaves out returns to the default), IncrementalAlterConfigs applies one operation per key."""
    names = Counter(c.name for c in resource.configs)
    repeated = [n for n, count in names.items() if count > 1]
    if repeated:
        raise Rejected(
            ErrorCode.INVALID_REQUEST,
            f"config {', '.join(map(repr, repeated))} appears more than once; give each once",
        )
    configs = dict(current) if incremental else {}
    for c in resource.configs:
        if c.config_operation == ConfigOperation.SET:
            configs[c.name] = normalise(c.name, c.value)
        elif c.config_operation == ConfigOperation.DELETE:
            if c.name not in CONFIG_RULES:
                normalise(c.name, None)  # raises: the key is not a KafScale topic config
            configs.pop(c.name, None)
        else:
            raise Rejected(
                ErrorCode.INVALID_CONFIG,
                f"operation {c.config_operation} (APPEND/SUBTRACT) on {c.name!r} is not "
                "supported: the one list config, cleanup.policy, has one allowed value "
                "(delete); use SET or DELETE",
            )
    return configs


async def _alter_one(
    core: _core.Broker, resource: _core.AlterConfigsResource, validate_only: bool, incremental: bool
) -> None:
    if resource.resource_type in (ResourceType.BROKER, _BROKER_LOGGER):
        raise Rejected(
            ErrorCode.INVALID_CONFIG,
            "broker configs are read-only in KafScale: set the broker's KAFSCALE_* settings "
            "and restart it",
        )
    if resource.resource_type != ResourceType.TOPIC:
        raise Rejected(
            ErrorCode.INVALID_REQUEST,
            f"resource type {resource.resource_type} is not supported; KafScale alters topics (2)",
        )
    topic = await core.topic(resource.resource_name)
    if topic is None:
        raise Rejected(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {resource.resource_name!r} does not exist"
        )
    configs = _new_topic_configs(dict(topic.configs), resource, incremental)
    if not validate_only:
        await core.alter_topic_configs(resource.resource_name, configs)


# Kafka's BROKER_LOGGER resource type: also a broker-side mutation, also refused.
_BROKER_LOGGER = 8


async def alter_configs(
    core: _core.Broker, req: _core.AlterConfigsRequest, *, api_error: type[BaseException]
) -> AlterConfigsResponse:
    """AlterConfigs and IncrementalAlterConfigs (``req.incremental``)."""
    seen = Counter((r.resource_type, r.resource_name) for r in req.resources)
    results = []
    for resource in req.resources:
        key = (resource.resource_type, resource.resource_name)
        code: int
        message: str | None
        try:
            if seen[key] > 1:
                raise Rejected(
                    ErrorCode.INVALID_REQUEST,
                    f"resource {resource.resource_name!r} appears more than once in one request",
                )
            await _alter_one(core, resource, req.validate_only, req.incremental)
        except Rejected as r:
            code, message = r.code, r.message
        except api_error as exc:
            code, message = int(getattr(exc, "code", -1)), getattr(exc, "message", str(exc))
        else:
            code, message = ErrorCode.NONE, None
        results.append(
            AlterConfigsResourceResult(
                code, message, resource.resource_type, resource.resource_name
            )
        )
    return AlterConfigsResponse(results)
