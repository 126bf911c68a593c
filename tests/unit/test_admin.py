"""CreateTopics / DeleteTopics handlers, against a fake core (no extension)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest

from kafscale.admin import topics
from kafscale.admin.configs import topic_configs
from kafscale.admin.protocol import (
    ConfigSource,
    CreateTopicsResponse,
    DeletableTopicResult,
    DeleteTopicsResponse,
)
from kafscale.admin.topic_configs import CONFIG_RULES
from kafscale.admin.topics import DeletedTopic, TopicResult
from kafscale.api_keys import ApiKey
from kafscale.config import Settings
from kafscale.control import ControlPlane
from kafscale.errors import ErrorCode

# --- fakes shaped like the _core.pyi types -------------------------------------------------------


class FakeKafkaApiError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class CreatableTopic:
    name: str
    num_partitions: int = 1
    replication_factor: int = -1
    assignments: list[tuple[int, list[int]]] = field(default_factory=list)
    configs: dict[str, str | None] = field(default_factory=dict)


@dataclass
class CreateTopicsRequest:
    topics: list[CreatableTopic]
    timeout_ms: int = 5000
    validate_only: bool = False


@dataclass
class DeletableTopic:
    name: str | None
    topic_id: str | None = None


@dataclass
class DeleteTopicsRequest:
    topics: list[DeletableTopic]
    timeout_ms: int = 5000


def by_name(*names: str) -> list[DeletableTopic]:
    return [DeletableTopic(n) for n in names]


@dataclass
class ControlRequest:
    api_key: int
    body: Any
    api_version: int = 1
    correlation_id: int = 7
    client_id: str | None = "test"
    responses: list[Any] = field(default_factory=list)
    respond_error: Exception | None = None

    def respond(self, response: Any) -> None:
        self.responses.append(response)
        if self.respond_error is not None:
            raise self.respond_error


SETTINGS = Settings(default_partitions=3)


@dataclass
class TopicInfo:
    name: str
    topic_id: str
    partitions: int
    configs: dict[str, str]


def id_of(name: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_DNS, name))


class FakeCore:
    def __init__(self) -> None:
        self.existing: dict[str, TopicInfo] = {}
        self.created: list[tuple[str, int, dict[str, str]]] = []
        self.deleted: list[str] = []
        self.fail: dict[str, Exception] = {}  # name -> exception to raise
        self.gate: asyncio.Event | None = None  # when set, operations wait for it
        # names re-created (a new id) by another client just before this broker deletes them
        self.recreated: set[str] = set()

    async def _maybe_wait(self, name: str) -> None:
        if self.gate is not None:
            await self.gate.wait()
        if name in self.fail:
            raise self.fail[name]

    async def create_topic(self, name: str, partitions: int, configs: dict[str, str]) -> Any:
        await self._maybe_wait(name)
        if name in self.existing:
            raise FakeKafkaApiError(36, f"topic {name!r} already exists")
        self.existing[name] = TopicInfo(name, id_of(name), partitions, configs)
        self.created.append((name, partitions, configs))
        return self.existing[name]

    def add(self, *names: str) -> None:
        for name in names:
            self.existing[name] = TopicInfo(name, id_of(name), 1, {})

    async def delete_topic(self, name: str, topic_id: str | None = None) -> None:
        await self._maybe_wait(name)
        if name in self.recreated:
            self.existing[name] = TopicInfo(name, str(uuid.uuid4()), 1, {})
        if topic_id is not None and getattr(self.existing.get(name), "topic_id", None) != topic_id:
            raise FakeKafkaApiError(100, f"no topic has the id {topic_id}")
        if name not in self.existing:
            raise FakeKafkaApiError(3, f"unknown topic {name!r}")
        del self.existing[name]
        self.deleted.append(name)

    async def topic(self, name: str) -> TopicInfo | None:
        return self.existing.get(name)

    async def topic_by_id(self, topic_id: str) -> TopicInfo | None:
        return next((t for t in self.existing.values() if t.topic_id == topic_id), None)


def create(core: FakeCore, *items: CreatableTopic, **kw: Any) -> dict[str, TopicResult]:
    req = CreateTopicsRequest(list(items), **kw)
    results = asyncio.run(
        topics.create_topics(core, req, default_partitions=3, api_error=FakeKafkaApiError)
    )
    return {r.name: r for r in results}


def delete(core: FakeCore, *entries: DeletableTopic, timeout_ms: int = 5000) -> list[DeletedTopic]:
    req = DeleteTopicsRequest(list(entries), timeout_ms)
    return asyncio.run(topics.delete_topics(core, req, api_error=FakeKafkaApiError))


# --- CreateTopics --------------------------------------------------------------------------------


def test_create_and_default_partitions() -> None:
    core = FakeCore()
    res = create(core, CreatableTopic("a", 4), CreatableTopic("b", -1))
    assert [r.error_code for r in res.values()] == [0, 0]
    assert core.created == [("a", 4, {}), ("b", 3, {})]


@pytest.mark.parametrize("partitions", [0, -2, -100])
def test_invalid_partitions(partitions: int) -> None:
    core = FakeCore()
    res = create(core, CreatableTopic("a", partitions))
    assert res["a"].error_code == ErrorCode.INVALID_PARTITIONS
    assert str(partitions) in (res["a"].error_message or "")
    assert core.created == []


@pytest.mark.parametrize(("rf", "ok"), [(-1, True), (1, True), (3, True), (0, False), (-2, False)])
def test_replication_factor(rf: int, ok: bool) -> None:
    res = create(FakeCore(), CreatableTopic("a", replication_factor=rf))
    expected = ErrorCode.NONE if ok else ErrorCode.INVALID_REPLICATION_FACTOR
    assert res["a"].error_code == expected


def test_manual_assignment_rejected() -> None:
    core = FakeCore()
    res = create(core, CreatableTopic("a", -1, -1, assignments=[(0, [0])]))
    assert res["a"].error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert "places partitions itself" in (res["a"].error_message or "")
    both = create(core, CreatableTopic("b", 3, -1, assignments=[(0, [0])]))
    assert both["b"].error_code == ErrorCode.INVALID_REQUEST
    assert core.created == []


def test_duplicate_names_are_rejected_others_created() -> None:
    core = FakeCore()
    req = CreateTopicsRequest([CreatableTopic("d"), CreatableTopic("ok"), CreatableTopic("d", 2)])
    results = asyncio.run(
        topics.create_topics(core, req, default_partitions=1, api_error=FakeKafkaApiError)
    )
    assert [(r.name, r.error_code) for r in results] == [
        ("d", ErrorCode.INVALID_REQUEST),
        ("ok", ErrorCode.NONE),
    ]
    assert [c[0] for c in core.created] == ["ok"]


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "sp ace", "x" * 250, "ünï"])
def test_invalid_topic_name(name: str) -> None:
    core = FakeCore()
    res = create(core, CreatableTopic(name))
    assert res[name].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert core.created == []


def test_configs_whitelisted_and_normalised() -> None:
    core = FakeCore()
    configs: dict[str, str | None] = {
        "retention.ms": "-1",
        "retention.bytes": " 1000 ",
        "segment.bytes": "+1048576",
        "max.message.bytes": "0",
        "message.timestamp.before.max.ms": "604800000",
        "message.timestamp.after.max.ms": "0",
        "message.timestamp.type": " CreateTime",
    }
    res = create(core, CreatableTopic("a", configs=configs))
    assert res["a"].error_code == ErrorCode.NONE
    assert core.created[0][2] == {
        "retention.ms": "-1",
        "retention.bytes": "1000",
        "segment.bytes": "1048576",
        "max.message.bytes": "0",
        "message.timestamp.before.max.ms": "604800000",
        "message.timestamp.after.max.ms": "0",
        "message.timestamp.type": "CreateTime",
    }


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("cleanup.policy", "compact,forever"),
        ("cleanup.policy", "none"),
        ("min.cleanable.dirty.ratio", "1.5"),
        ("min.cleanable.dirty.ratio", "half"),
        ("max.compaction.lag.ms", "0"),
        ("delete.retention.ms", "-1"),
        ("cleanup.policy", None),
        ("message.timestamp.type", "LogAppendTime"),
        ("message.timestamp.type", "createtime"),
        ("message.timestamp.type", None),
        ("retention.ms", "-2"),
        ("retention.ms", "1h"),
        ("retention.bytes", "9223372036854775808"),
        ("segment.bytes", "0"),
        ("segment.bytes", "2147483648"),
        ("max.message.bytes", "-1"),
        ("message.timestamp.before.max.ms", "-1"),
        ("message.timestamp.after.max.ms", "9223372036854775808"),
        ("retention.ms", None),
    ],
)
def test_bad_configs(key: str, value: str | None) -> None:
    core = FakeCore()
    res = create(core, CreatableTopic("a", configs={key: value}))
    assert res["a"].error_code == ErrorCode.INVALID_CONFIG
    assert key in (res["a"].error_message or "")
    assert core.created == []


def test_unknown_config_message_lists_supported_keys() -> None:
    res = create(FakeCore(), CreatableTopic("a", configs={"compression.type": "lz4"}))
    assert res["a"].error_code == ErrorCode.INVALID_CONFIG
    assert "retention.ms" in (res["a"].error_message or "")


@pytest.mark.parametrize("policy", ["delete", " delete", "delete,delete"])
def test_cleanup_policy_delete_is_accepted(policy: str) -> None:
    core = FakeCore()
    res = create(core, CreatableTopic("a", configs={"cleanup.policy": policy}))
    assert res["a"].error_code == ErrorCode.NONE
    assert core.created[0][2] == {"cleanup.policy": "delete"}


@pytest.mark.parametrize(
    ("policy", "stored"),
    [
        ("compact", "compact"),
        ("compact,delete", "compact,delete"),
        ("delete, compact", "compact,delete"),
        ("compact,compact", "compact"),
    ],
)
def test_cleanup_policy_compact_is_accepted_as_kafka_writes_it(policy: str, stored: str) -> None:
    core = FakeCore()
    res = create(core, CreatableTopic("a", configs={"cleanup.policy": policy}))
    assert res["a"].error_code == ErrorCode.NONE
    assert core.created[0][2] == {"cleanup.policy": stored}


def test_the_cleaner_configs_are_accepted_in_canonical_form() -> None:
    core = FakeCore()
    wanted = {
        "min.cleanable.dirty.ratio": " .25",
        "min.compaction.lag.ms": "1000",
        "max.compaction.lag.ms": "60000",
        "delete.retention.ms": "0",
        "segment.ms": "600000",
    }
    res = create(core, CreatableTopic("a", configs=dict(wanted)))
    assert res["a"].error_code == ErrorCode.NONE
    assert core.created[0][2] == {**wanted, "min.cleanable.dirty.ratio": "0.25"}


def test_validate_only_creates_nothing() -> None:
    core = FakeCore()
    core.add("old")
    res = create(
        core,
        CreatableTopic("new"),
        CreatableTopic("old"),
        CreatableTopic("bad", 0),
        validate_only=True,
    )
    assert res["new"].error_code == ErrorCode.NONE
    assert res["old"].error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    assert res["bad"].error_code == ErrorCode.INVALID_PARTITIONS
    assert core.created == []


def test_core_errors_are_mapped_per_topic() -> None:
    core = FakeCore()
    core.add("dup")
    core.fail["boom"] = RuntimeError("disk on fire")
    core.fail["bad"] = FakeKafkaApiError(17, "core says no")
    names = ("dup", "boom", "bad", "fine")
    res = create(core, *(CreatableTopic(n) for n in names))
    assert (res["dup"].error_code, res["dup"].error_message) == (36, "topic 'dup' already exists")
    assert res["boom"].error_code == ErrorCode.UNKNOWN_SERVER_ERROR
    assert "broker log" in (res["boom"].error_message or "")
    assert (res["bad"].error_code, res["bad"].error_message) == (17, "core says no")
    assert res["fine"].error_code == ErrorCode.NONE


def test_timeout_reports_request_timed_out_and_keeps_going() -> None:
    async def scenario() -> tuple[list[TopicResult], FakeCore]:
        core = FakeCore()
        core.gate = asyncio.Event()
        req = CreateTopicsRequest([CreatableTopic("slow")], timeout_ms=20)
        results = await topics.create_topics(
            core, req, default_partitions=1, api_error=FakeKafkaApiError
        )
        core.gate.set()  # the operation outlives the request and still completes
        for _ in range(10):
            await asyncio.sleep(0)
        return results, core

    results, core = asyncio.run(scenario())
    assert results[0].error_code == ErrorCode.REQUEST_TIMED_OUT
    assert "20 ms" in (results[0].error_message or "")
    assert core.created == [("slow", 1, {})]


def test_zero_timeout_still_returns_the_final_result() -> None:
    core = FakeCore()
    res = create(core, CreatableTopic("a"), timeout_ms=0)
    assert res["a"].error_code == ErrorCode.NONE
    assert core.created == [("a", 1, {})]


# --- DeleteTopics --------------------------------------------------------------------------------


def test_delete() -> None:
    core = FakeCore()
    core.add("a", "b")
    core.fail["b"] = RuntimeError("etcd went away")
    results = delete(core, *by_name("a", "missing", "a", "b"))
    assert [(r.name, r.topic_id, r.error_code) for r in results] == [
        ("a", id_of("a"), ErrorCode.NONE),
        ("missing", None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("b", id_of("b"), ErrorCode.UNKNOWN_SERVER_ERROR),
    ]
    assert core.deleted == ["a"]  # duplicates deleted once


def test_delete_by_id_as_kafka_checks_it() -> None:
    core = FakeCore()
    core.add("a", "b", "c")
    unknown = str(uuid.uuid4())
    results = delete(
        core,
        DeletableTopic(None, id_of("a")),
        DeletableTopic(None, unknown),
        DeletableTopic("b", id_of("b")),
        DeletableTopic(None, None),
        DeletableTopic("c"),
        DeletableTopic(None, id_of("c")),
    )
    assert [(r.name, r.topic_id, r.error_code) for r in results] == [
        ("a", id_of("a"), ErrorCode.NONE),
        (None, unknown, ErrorCode.UNKNOWN_TOPIC_ID),
        ("b", id_of("b"), ErrorCode.INVALID_REQUEST),  # a name and an id: neither is used
        (None, None, ErrorCode.INVALID_REQUEST),
        ("c", id_of("c"), ErrorCode.NONE),  # named twice, by name and by id: deleted once
        ("c", id_of("c"), ErrorCode.NONE),
    ]
    assert core.deleted == ["a", "c"]
    assert unknown in (results[1].error_message or "")


def test_delete_by_id_never_takes_a_topic_recreated_under_the_name() -> None:
    core = FakeCore()
    core.add("a", "b")
    core.recreated = {"a", "b"}
    results = delete(core, DeletableTopic(None, id_of("a")), DeletableTopic("b"))
    assert [(r.name, r.error_code) for r in results] == [
        ("a", ErrorCode.UNKNOWN_TOPIC_ID),
        ("b", ErrorCode.NONE),  # by name: whatever topic has the name goes
    ]
    assert core.deleted == ["b"]
    assert core.existing["a"].topic_id != id_of("a")


def test_delete_timeout() -> None:
    async def scenario() -> list[DeletedTopic]:
        core = FakeCore()
        core.add("a")
        core.gate = asyncio.Event()
        req = DeleteTopicsRequest(by_name("a"), timeout_ms=10)
        results = await topics.delete_topics(core, req, api_error=FakeKafkaApiError)
        core.gate.set()
        await asyncio.sleep(0)
        return results

    assert asyncio.run(scenario())[0].error_code == ErrorCode.REQUEST_TIMED_OUT


# --- the control plane's router ------------------------------------------------------------------


def plane(core: FakeCore) -> ControlPlane:
    # Groups are not routed in these tests; the router only keeps a reference.
    return ControlPlane(core, SETTINGS, groups=object(), api_error=FakeKafkaApiError)  # type: ignore[arg-type]


def route(core: FakeCore, req: ControlRequest) -> None:
    asyncio.run(plane(core).dispatch(req))


def test_the_router_answers_topic_requests_with_dataclasses_once() -> None:
    core = FakeCore()
    body = CreateTopicsRequest(
        [CreatableTopic("t", -1, configs={"retention.ms": "60000"}), CreatableTopic("t2", 0)]
    )
    req = ControlRequest(ApiKey.CREATE_TOPICS, body)
    route(core, req)
    assert core.created == [("t", 3, {"retention.ms": "60000"})]  # settings.default_partitions
    [answer] = req.responses
    assert isinstance(answer, CreateTopicsResponse)
    created, refused = answer.topics
    # v5+: the topic as created, its configs as DescribeConfigs lists them; v7: its id
    assert (created.name, created.error_code, created.topic_id) == ("t", 0, id_of("t"))
    assert (created.num_partitions, created.replication_factor) == (3, 1)
    assert created.configs == topic_configs({"retention.ms": "60000"}, SETTINGS)
    assert [c.name for c in created.configs] == list(CONFIG_RULES)
    assert (refused.name, refused.error_code) == ("t2", ErrorCode.INVALID_PARTITIONS)
    assert (refused.topic_id, refused.num_partitions, refused.replication_factor) == (None, -1, -1)
    assert refused.configs == []

    req = ControlRequest(ApiKey.DELETE_TOPICS, DeleteTopicsRequest(by_name("t", "t")))
    route(core, req)
    assert req.responses == [DeleteTopicsResponse([DeletableTopicResult("t", 0, None, id_of("t"))])]


def test_validate_only_answers_the_topic_it_would_create() -> None:
    core = FakeCore()
    body = CreateTopicsRequest(
        [CreatableTopic("t", -1, configs={"cleanup.policy": "delete"})], validate_only=True
    )
    req = ControlRequest(ApiKey.CREATE_TOPICS, body)
    route(core, req)
    [answer] = req.responses
    [topic] = answer.topics
    assert (topic.error_code, topic.topic_id, topic.num_partitions) == (0, None, 3)
    policy = next(c for c in topic.configs if c.name == "cleanup.policy")
    assert (policy.value, policy.config_source) == ("delete", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    retention = next(c for c in topic.configs if c.name == "retention.ms")
    assert (retention.value, retention.config_source) == (
        str(SETTINGS.retention_ms),
        ConfigSource.DEFAULT_CONFIG,
    )
    assert core.created == []


def test_the_router_answers_unknown_server_error_when_a_handler_raises(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(*args: Any, **kwargs: Any) -> list[TopicResult]:
        raise KeyError("bug")

    monkeypatch.setattr(topics, "create_topics", broken)
    body = CreateTopicsRequest([CreatableTopic("a"), CreatableTopic("b"), CreatableTopic("a")])
    req = ControlRequest(ApiKey.CREATE_TOPICS, body)
    with caplog.at_level(logging.ERROR):
        route(FakeCore(), req)
    [answer] = req.responses
    assert [(r.name, r.error_code) for r in answer.topics] == [("a", -1), ("b", -1)]
    assert "CreateTopics v1 failed" in caplog.text and "KeyError" in caplog.text


def test_the_router_survives_a_failing_respond() -> None:
    req = ControlRequest(
        ApiKey.DELETE_TOPICS,
        DeleteTopicsRequest(by_name("x")),
        respond_error=ConnectionError("gone"),
    )
    route(FakeCore(), req)  # must not raise
    assert len(req.responses) == 1


def test_an_api_key_without_a_route_is_dropped_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    req = ControlRequest(3, object())
    with caplog.at_level(logging.ERROR):
        route(FakeCore(), req)
    assert req.responses == []
    assert "api_key 3" in caplog.text


def test_the_router_covers_every_api_the_core_hands_over() -> None:
    from kafscale import _core

    router = plane(FakeCore())
    assert router.unanswered(_core.CONTROL_API_KEYS) == []
    assert {ApiKey(k) for k in _core.CONTROL_API_KEYS} <= set(ApiKey)
    assert router.unanswered([ApiKey.CREATE_TOPICS, 3, 99]) == [3, 99]


def test_error_codes_match_the_protocol() -> None:
    assert ErrorCode.UNKNOWN_SERVER_ERROR == -1
    assert ErrorCode.UNKNOWN_TOPIC_OR_PARTITION == 3
    assert ErrorCode.REQUEST_TIMED_OUT == 7
    assert ErrorCode.INVALID_TOPIC_EXCEPTION == 17
    assert ErrorCode.UNSUPPORTED_VERSION == 35
    assert (ErrorCode.TOPIC_ALREADY_EXISTS, ErrorCode.INVALID_PARTITIONS) == (36, 37)
    assert (ErrorCode.INVALID_REPLICATION_FACTOR, ErrorCode.INVALID_REPLICA_ASSIGNMENT) == (38, 39)
    assert (ErrorCode.INVALID_CONFIG, ErrorCode.INVALID_REQUEST) == (40, 42)
