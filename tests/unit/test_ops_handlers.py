"""Config and partition admin handlers against a fake core (no extension)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from kafscale.admin.configs import alter_configs, describe_configs
from kafscale.admin.partitions import create_partitions
from kafscale.admin.protocol import ConfigSource, ConfigType, ResourceType
from kafscale.config import Settings
from kafscale.errors import ErrorCode


class ApiError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(code, message)
        self.code, self.message = code, message


class FakeCore:
    def __init__(self) -> None:
        self.topics = {"t": SimpleNamespace(name="t", partitions=2, configs={"retention.ms": "5"})}
        self.altered: list[tuple[str, dict[str, str]]] = []
        self.grown: list[tuple[str, int]] = []

    async def topic(self, name: str) -> Any:
        return self.topics.get(name)

    async def alter_topic_configs(self, name: str, configs: dict[str, str]) -> Any:
        self.altered.append((name, configs))
        self.topics[name].configs = configs

    async def create_partitions(self, name: str, count: int) -> Any:
        self.grown.append((name, count))
        self.topics[name].partitions = count


SETTINGS = Settings(broker_id=7, s3_bucket="b", s3_region="r")


def resource(kind: int, name: str, keys: list[str] | None = None) -> Any:
    return SimpleNamespace(resource_type=kind, resource_name=name, configuration_keys=keys)


def describe(*resources: Any, synonyms: bool = False) -> Any:
    req = SimpleNamespace(
        resources=list(resources), include_synonyms=synonyms, include_documentation=True
    )
    return asyncio.run(describe_configs(FakeCore(), SETTINGS, req))


def alter(core: FakeCore, *resources: Any, incremental=False, validate_only=False) -> list:
    req = SimpleNamespace(
        resources=list(resources), validate_only=validate_only, incremental=incremental
    )
    answer = asyncio.run(alter_configs(core, req, api_error=ApiError))
    return [(r.resource_name, r.error_code) for r in answer.responses]


def configs(kind: int, name: str, *entries: tuple[str, str | None, int]) -> Any:
    return SimpleNamespace(
        resource_type=kind,
        resource_name=name,
        configs=[SimpleNamespace(name=n, value=v, config_operation=op) for n, v, op in entries],
    )


SET, DELETE, APPEND = 0, 1, 2


def test_describe_topic_shows_overrides_and_defaults_and_ignores_unknown_keys() -> None:
    (result,) = describe(resource(ResourceType.TOPIC, "t")).results
    got = {c.name: (c.value, c.config_source, c.read_only) for c in result.configs}
    assert got == {
        "retention.ms": ("5", ConfigSource.DYNAMIC_TOPIC_CONFIG, False),
        "retention.bytes": ("-1", ConfigSource.DEFAULT_CONFIG, False),
        "segment.bytes": (str(4 * 1024 * 1024), ConfigSource.DEFAULT_CONFIG, False),
        "max.message.bytes": (str(1024 * 1024), ConfigSource.DEFAULT_CONFIG, False),
        "message.timestamp.before.max.ms": (str(2**63 - 1), ConfigSource.DEFAULT_CONFIG, False),
        "message.timestamp.after.max.ms": ("3600000", ConfigSource.DEFAULT_CONFIG, False),
        "cleanup.policy": ("delete", ConfigSource.DEFAULT_CONFIG, False),
        "min.cleanable.dirty.ratio": ("0.5", ConfigSource.DEFAULT_CONFIG, False),
        "min.compaction.lag.ms": ("0", ConfigSource.DEFAULT_CONFIG, False),
        "max.compaction.lag.ms": (str(2**63 - 1), ConfigSource.DEFAULT_CONFIG, False),
        "delete.retention.ms": ("86400000", ConfigSource.DEFAULT_CONFIG, False),
        "segment.ms": ("604800000", ConfigSource.DEFAULT_CONFIG, False),
        "message.timestamp.type": ("CreateTime", ConfigSource.DEFAULT_CONFIG, False),
    }
    (some,) = describe(resource(ResourceType.TOPIC, "t", ["retention.ms", "no.such"])).results
    assert [c.name for c in some.configs] == ["retention.ms"]
    (missing,) = describe(resource(ResourceType.TOPIC, "nope")).results
    assert missing.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_describe_broker_shows_the_read_only_keys() -> None:
    (result,) = describe(resource(ResourceType.BROKER, "7"), synonyms=True).results
    got = {c.name: c.value for c in result.configs}
    assert got["broker.id"] == "7"
    assert got["kafscale.s3.bucket"] == "b" and got["kafscale.s3.endpoint"] is None
    assert got["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9092"
    assert set(got) >= {"kafscale.cache.bytes", "kafscale.flush.interval.ms"}
    assert all(c.read_only and c.synonyms for c in result.configs)
    (other,) = describe(resource(ResourceType.BROKER, "3")).results
    assert other.error_code == ErrorCode.INVALID_REQUEST


def test_describe_broker_lists_its_settings_under_kafkas_names() -> None:
    settings = Settings(
        broker_id=7,
        connections_max_reauth_ms=60_000,
        authorizer="acl",
        super_users="User:admin",
        max_connections_per_ip=50,
    )
    req = SimpleNamespace(
        resources=[resource(ResourceType.BROKER, "7")],
        include_synonyms=False,
        include_documentation=True,
    )
    (result,) = asyncio.run(describe_configs(FakeCore(), settings, req)).results
    got = {c.name: c for c in result.configs}
    values = {
        "connections.max.reauth.ms": ("60000", ConfigType.LONG),
        "sasl.enabled.mechanisms": ("PLAIN,SCRAM-SHA-256,SCRAM-SHA-512", ConfigType.LIST),
        "sasl.server.max.receive.size": (str(512 * 1024), ConfigType.INT),
        "authorizer.class.name": ("acl", ConfigType.STRING),
        "super.users": ("User:admin", ConfigType.STRING),
        "allow.everyone.if.no.acl.found": ("false", ConfigType.BOOLEAN),
        "auto.create.topics.enable": ("true", ConfigType.BOOLEAN),
        "max.connections.per.ip": ("50", ConfigType.INT),
        "listeners": ("PLAINTEXT://127.0.0.1:9092", ConfigType.STRING),
        "log.retention.ms": (str(7 * 24 * 3600 * 1000), ConfigType.LONG),
        "message.max.bytes": (str(1024 * 1024), ConfigType.INT),
        "num.partitions": ("1", ConfigType.INT),
    }
    assert {k: (got[k].value, got[k].config_type) for k in values} == values
    assert "--connections-max-reauth-ms" in (got["connections.max.reauth.ms"].documentation or "")
    assert all(c.read_only and not c.is_sensitive for c in result.configs)
    assert not any("password" in name for name in got)


def test_alter_configs_replaces_the_whole_set_and_validates() -> None:
    core = FakeCore()
    ok = configs(ResourceType.TOPIC, "t", ("retention.bytes", " 100 ", SET))
    assert alter(core, ok) == [("t", 0)]
    assert core.altered == [("t", {"retention.bytes": "100"})], "retention.ms reverts"
    bad = [
        configs(ResourceType.TOPIC, "t", ("retention.ms", "-5", SET)),
        configs(ResourceType.TOPIC, "t", ("segment.bytes", "0", SET)),
        configs(ResourceType.TOPIC, "t", ("cleanup.policy", "compress", SET)),
        configs(ResourceType.TOPIC, "t", ("retention.ms", "soon", SET)),
    ]
    for item in bad:
        assert alter(core, item) == [("t", ErrorCode.INVALID_CONFIG)]
    assert alter(core, configs(ResourceType.BROKER, "7", ("x", "1", SET))) == [
        ("7", ErrorCode.INVALID_CONFIG)
    ]
    assert alter(core, configs(ResourceType.TOPIC, "nope", ("retention.ms", "1", SET))) == [
        ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    ]
    assert len(core.altered) == 1
    delete = configs(ResourceType.TOPIC, "t", ("cleanup.policy", "delete", SET))
    assert alter(core, delete) == [("t", 0)]
    assert core.altered[-1] == ("t", {"cleanup.policy": "delete"})
    compact = configs(ResourceType.TOPIC, "t", ("cleanup.policy", "delete,compact", SET))
    assert alter(core, compact, incremental=True) == [("t", 0)]
    assert core.altered[-1] == ("t", {"cleanup.policy": "compact,delete"})


def test_incremental_set_and_delete_and_validate_only() -> None:
    core = FakeCore()
    item = configs(
        ResourceType.TOPIC, "t", ("segment.bytes", "1000", SET), ("retention.ms", None, DELETE)
    )
    assert alter(core, item, incremental=True, validate_only=True) == [("t", 0)]
    assert core.altered == []
    assert alter(core, item, incremental=True) == [("t", 0)]
    assert core.altered == [("t", {"segment.bytes": "1000"})]
    append = configs(ResourceType.TOPIC, "t", ("retention.ms", "1", APPEND))
    assert alter(core, append, incremental=True) == [("t", ErrorCode.INVALID_CONFIG)]
    policy = configs(ResourceType.TOPIC, "t", ("cleanup.policy", "delete", APPEND))
    assert alter(core, policy, incremental=True) == [("t", ErrorCode.INVALID_CONFIG)]
    twice = configs(ResourceType.TOPIC, "t", ("retention.ms", "1", SET), ("retention.ms", "2", SET))
    assert alter(core, twice, incremental=True) == [("t", ErrorCode.INVALID_REQUEST)]


def test_a_resource_altered_twice_in_one_request_is_refused_each_time() -> None:
    """Kafka's INVALID_REQUEST for every entry of a repeated resource; nothing is altered."""
    core = FakeCore()
    one = configs(ResourceType.TOPIC, "t", ("retention.ms", "1", SET))
    other = configs(ResourceType.TOPIC, "t", ("retention.ms", "2", SET))
    for incremental in (False, True):
        refused = [("t", ErrorCode.INVALID_REQUEST)] * 2
        assert alter(core, one, other, incremental=incremental) == refused
    assert core.altered == []


def grow(core: FakeCore, *items: tuple[str, int, Any], validate_only: bool = False) -> list:
    req = SimpleNamespace(
        topics=[SimpleNamespace(name=n, count=c, assignments=a) for n, c, a in items],
        timeout_ms=5000,
        validate_only=validate_only,
    )
    answer = asyncio.run(create_partitions(core, req, api_error=ApiError))
    return [(r.name, r.error_code) for r in answer.results]


def test_create_partitions_is_additive_only() -> None:
    core = FakeCore()
    assert grow(core, ("t", 5, None), validate_only=True) == [("t", 0)]
    assert core.grown == []
    assert grow(core, ("t", 2, None), ("nope", 3, None), ("t2", 3, [[1], [2]])) == [
        ("t", ErrorCode.INVALID_PARTITIONS),
        ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("t2", ErrorCode.INVALID_REPLICA_ASSIGNMENT),
    ]
    assert grow(core, ("t", 5, None), ("t", 6, None)) == [("t", ErrorCode.INVALID_REQUEST)]
    assert grow(core, ("t", 5, None)) == [("t", 0)]
    assert core.grown == [("t", 5)]
