"""The admin APIs through the real admin clients, behind one interface so that a test body runs
unchanged with confluent-kafka's ``AdminClient`` (librdkafka) and kafka-python's
``KafkaAdminClient``.

Every call goes through the client's own request encoding and response decoding; the wrappers
only bring the answers into one shape: error codes as ints (0: success), group states as Kafka
names ("Stable", "Dead", ...), config sources as Kafka's enum names ("DYNAMIC_TOPIC_CONFIG",
"DEFAULT_CONFIG", ...). Where a client's public method hides the broker's answer (kafka-python's
``describe_configs`` drops a resource's error code) the wrapper sends that client's own
request object through its connection manager and reads the decoded response.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field

from .admin_wire import BROKER_RESOURCE, TOPIC_RESOURCE

TIMEOUT_S = 30.0
_ERROR_PREFIX = re.compile(r"^\[Error (-?\d+)\]")


@dataclass(frozen=True)
class MemberView:
    member_id: str
    client_id: str
    host: str
    assignment: frozenset[tuple[str, int]]


@dataclass(frozen=True)
class GroupView:
    error_code: int
    state: str  # Kafka's name: Stable, Empty, Dead, PreparingRebalance, ...
    protocol: str | None  # the assignor ("range"); None when the client does not show it
    simple: bool | None  # no protocol type (confluent's is_simple_consumer_group)
    protocol_type: str | None  # kafka-python only
    members: list[MemberView] = field(default_factory=list)
    coordinator: int | None = None  # confluent only


@dataclass(frozen=True)
class Cfg:
    value: str | None
    source: str  # ConfigSource name: DYNAMIC_TOPIC_CONFIG, DEFAULT_CONFIG, STATIC_BROKER_CONFIG
    read_only: bool
    is_default: bool | None = None  # confluent only (kafka-python shows it for v0 alone)


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int = 1
    configs: dict[str, str] = field(default_factory=dict)


class Admin:
    """What both admin clients offer the tests."""

    kind: str
    describe_filters_keys: bool  # describe_configs honours a list of config keys

    def close(self) -> None:
        raise NotImplementedError

    def describe_groups(self, groups: list[str]) -> dict[str, GroupView]:
        raise NotImplementedError

    def list_groups(
        self, states: list[str] | None = None, types: list[str] | None = None
    ) -> dict[str, tuple[str, str | None]]:
        """{group id: (state, type or None when the client does not show it)}."""
        raise NotImplementedError

    def delete_groups(self, groups: list[str]) -> dict[str, int]:
        raise NotImplementedError

    def describe_configs(
        self, rtype: int, name: str, keys: list[str] | None = None
    ) -> tuple[int, dict[str, Cfg]]:
        raise NotImplementedError

    def alter_configs(
        self, rtype: int, name: str, configs: dict[str, str], validate_only: bool = False
    ) -> int:
        """The legacy AlterConfigs (the resource's whole config set)."""
        raise NotImplementedError

    def incremental_alter_configs(
        self, rtype: int, name: str, ops: dict[str, str | None], validate_only: bool = False
    ) -> int:
        """IncrementalAlterConfigs: a value SETs the key, None DELETEs it."""
        raise NotImplementedError

    def create_partitions(
        self,
        counts: dict[str, int],
        validate_only: bool = False,
        assignments: dict[str, list[list[int]]] | None = None,
    ) -> dict[str, int]:
        raise NotImplementedError

    def create_topics(
        self, topics: list[TopicSpec], validate_only: bool = False
    ) -> list[tuple[str, int]]:
        raise NotImplementedError

    def delete_topics(self, names: list[str]) -> dict[str, int]:
        raise NotImplementedError


# ---------------------------------------------------------------------------------------------
# confluent-kafka

_CK_STATES = {
    "UNKNOWN": "Unknown",
    "PREPARING_REBALANCING": "PreparingRebalance",
    "COMPLETING_REBALANCING": "CompletingRebalance",
    "STABLE": "Stable",
    "DEAD": "Dead",
    "EMPTY": "Empty",
}


class ConfluentAdmin(Admin):
    kind = "confluent"
    describe_filters_keys = False

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka.admin import AdminClient

        self.client = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 30000})

    def close(self) -> None:
        self.client = None

    @staticmethod
    def _code(fut) -> int:
        from confluent_kafka import KafkaException

        try:
            fut.result(TIMEOUT_S)
        except KafkaException as exc:
            return exc.args[0].code()
        return 0

    @staticmethod
    def _restype(rtype: int):
        from confluent_kafka.admin import ResourceType

        return {TOPIC_RESOURCE: ResourceType.TOPIC, BROKER_RESOURCE: ResourceType.BROKER}[rtype]

    def describe_groups(self, groups):
        from confluent_kafka import KafkaException

        out = {}
        for group, fut in self.client.describe_consumer_groups(
            groups, request_timeout=TIMEOUT_S
        ).items():
            try:
                d = fut.result(TIMEOUT_S)
            except KafkaException as exc:
                out[group] = GroupView(exc.args[0].code(), "", None, None, None)
                continue
            members = [
                MemberView(
                    m.member_id,
                    m.client_id,
                    m.host,
                    frozenset(
                        (tp.topic, tp.partition)
                        for tp in (m.assignment.topic_partitions if m.assignment else [])
                    ),
                )
                for m in d.members
            ]
            out[group] = GroupView(
                0,
                _CK_STATES[d.state.name],
                d.partition_assignor,
                d.is_simple_consumer_group,
                None,
                members,
                d.coordinator.id if d.coordinator is not None else None,
            )
        return out

    def list_groups(self, states=None, types=None):
        from confluent_kafka import ConsumerGroupState, ConsumerGroupType

        kwargs = {"request_timeout": TIMEOUT_S}
        if states:
            by_name = {v: k for k, v in _CK_STATES.items()}
            kwargs["states"] = {ConsumerGroupState[by_name[s]] for s in states}
        if types:
            kwargs["types"] = {ConsumerGroupType[t.upper()] for t in types}
        res = self.client.list_consumer_groups(**kwargs).result(TIMEOUT_S)
        assert not res.errors, f"list_consumer_groups errors: {res.errors}"
        return {
            g.group_id: (_CK_STATES[g.state.name], g.type.name.lower() if g.type else None)
            for g in res.valid
        }

    def delete_groups(self, groups):
        futs = self.client.delete_consumer_groups(groups, request_timeout=TIMEOUT_S)
        return {g: self._code(f) for g, f in futs.items()}

    def describe_configs(self, rtype, name, keys=None):
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import ConfigResource, ConfigSource

        resource = ConfigResource(self._restype(rtype), name)
        (fut,) = self.client.describe_configs([resource], request_timeout=TIMEOUT_S).values()
        try:
            entries = fut.result(TIMEOUT_S)
        except KafkaException as exc:
            return exc.args[0].code(), {}
        return 0, {
            key: Cfg(e.value, ConfigSource(e.source).name, e.is_read_only, e.is_default)
            for key, e in entries.items()
        }

    def alter_configs(self, rtype, name, configs, validate_only=False):
        from confluent_kafka.admin import ConfigResource

        resource = ConfigResource(self._restype(rtype), name, set_config=dict(configs))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # alter_configs is deprecated
            futs = self.client.alter_configs(
                [resource], validate_only=validate_only, request_timeout=TIMEOUT_S
            )
        (fut,) = futs.values()
        return self._code(fut)

    def incremental_alter_configs(self, rtype, name, ops, validate_only=False):
        from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

        entries = [
            ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
            if value is not None
            else ConfigEntry(key, None, incremental_operation=AlterConfigOpType.DELETE)
            for key, value in ops.items()
        ]
        resource = ConfigResource(self._restype(rtype), name, incremental_configs=entries)
        (fut,) = self.client.incremental_alter_configs(
            [resource], validate_only=validate_only, request_timeout=TIMEOUT_S
        ).values()
        return self._code(fut)

    def create_partitions(self, counts, validate_only=False, assignments=None):
        from confluent_kafka.admin import NewPartitions

        assignments = assignments or {}
        specs = [
            NewPartitions(t, n, replica_assignment=assignments[t])
            if t in assignments
            else NewPartitions(t, n)
            for t, n in counts.items()
        ]
        futs = self.client.create_partitions(
            specs, validate_only=validate_only, operation_timeout=TIMEOUT_S
        )
        return {t: self._code(f) for t, f in futs.items()}

    def create_topics(self, topics, validate_only=False):
        from confluent_kafka.admin import NewTopic

        specs = [NewTopic(t.name, t.partitions, 1, config=dict(t.configs)) for t in topics]
        futs = self.client.create_topics(
            specs, validate_only=validate_only, operation_timeout=TIMEOUT_S
        )
        return [(t, self._code(f)) for t, f in futs.items()]

    def delete_topics(self, names):
        futs = self.client.delete_topics(names, operation_timeout=TIMEOUT_S)
        return {t: self._code(f) for t, f in futs.items()}


# ---------------------------------------------------------------------------------------------
# kafka-python


def _kp_code(result) -> int:
    """kafka-python reports per-resource results as 'OK', an error class name or str(error)."""
    if result in ("OK", None):
        return 0
    if isinstance(result, type):
        return result.errno
    text = str(result)
    m = _ERROR_PREFIX.match(text)
    if m:
        return int(m.group(1))
    import kafka.errors as errors

    for code, cls in errors.kafka_errors.items():
        if cls.__name__ == text:
            return code
    raise AssertionError(f"cannot tell the error code of {result!r}")


class KafkaPythonAdmin(Admin):
    kind = "kafka-python"
    describe_filters_keys = True

    def __init__(self, bootstrap: str) -> None:
        from kafka.admin import KafkaAdminClient

        self.client = KafkaAdminClient(
            bootstrap_servers=bootstrap, request_timeout_ms=int(TIMEOUT_S * 1000)
        )

    def close(self) -> None:
        self.client.close()

    @staticmethod
    def _resource(rtype: int, name: str, configs=None):
        from kafka.admin import ConfigResource, ConfigResourceType

        return ConfigResource(ConfigResourceType(rtype), name, configs)

    def _send(self, request, node_id=None):
        manager = self.client._manager

        async def go():
            return await manager.send(request, node_id=node_id)

        return manager.run(go)

    def describe_groups(self, groups):
        out = {}
        for group, d in self.client.describe_groups(groups).items():
            error = 0 if d.get("error") is None else _kp_code(d["error"])
            members = []
            for m in d.get("members") or []:
                assigned = (m.get("member_assignment") or {}).get("assigned_partitions") or []
                members.append(
                    MemberView(
                        m["member_id"],
                        m["client_id"],
                        m["client_host"],
                        frozenset((a["topic"], p) for a in assigned for p in a["partitions"]),
                    )
                )
            out[group] = GroupView(
                error,
                d.get("group_state", ""),
                d.get("protocol_data"),
                not d.get("protocol_type"),
                d.get("protocol_type"),
                members,
            )
        return out

    def list_groups(self, states=None, types=None):
        groups = self.client.list_groups(states_filter=states, types_filter=types)
        out = {}
        for g in groups:
            assert g["group_id"] not in out, f"group listed twice: {groups}"
            out[g["group_id"]] = (g.get("group_state"), g.get("group_type"))
        return out

    def delete_groups(self, groups):
        return {g: _kp_code(r) for g, r in self.client.delete_groups(groups).items()}

    def describe_configs(self, rtype, name, keys=None):
        client = self.client
        resource = self._resource(rtype, name, keys)
        request = client._describe_configs_request([resource])
        node = int(name) if rtype == BROKER_RESOURCE else None
        response = self._send(request, node)
        (result,) = response.results
        if result.error_code:
            return result.error_code, {}
        processed = client._describe_configs_process_responses([response], "all")
        configs = next(iter(next(iter(processed.values())).values()))
        return 0, {
            key: Cfg(c.get("value"), c["config_source"], bool(c["read_only"]))
            for key, c in configs.items()
        }

    def _alter(self, resource, validate_only: bool, incremental: bool) -> int:
        result = self.client.alter_configs(
            [resource], validate_only=validate_only, raise_on_unknown=False, incremental=incremental
        )
        ((_rtype, by_name),) = result.items()
        ((_name, outcome),) = by_name.items()
        return _kp_code(outcome)

    def alter_configs(self, rtype, name, configs, validate_only=False):
        return self._alter(self._resource(rtype, name, dict(configs)), validate_only, False)

    def incremental_alter_configs(self, rtype, name, ops, validate_only=False):
        from kafka.admin import AlterConfigOp

        configs = {
            key: (AlterConfigOp.SET, value) if value is not None else (AlterConfigOp.DELETE, None)
            for key, value in ops.items()
        }
        return self._alter(self._resource(rtype, name, configs), validate_only, True)

    def create_partitions(self, counts, validate_only=False, assignments=None):
        assignments = assignments or {}
        spec = {
            t: {"count": n, "assignments": assignments[t]} if t in assignments else n
            for t, n in counts.items()
        }
        response = self.client.create_partitions(
            spec, validate_only=validate_only, raise_errors=False, timeout_ms=int(TIMEOUT_S * 1000)
        )
        return {r.name: r.error_code for r in response.results}

    def create_topics(self, topics, validate_only=False):
        from kafka.admin import NewTopic

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # the NewTopic list form
            # the list form keeps a name given twice (the dict form could not)
            specs = [
                NewTopic(t.name, t.partitions, 1, topic_configs=dict(t.configs)) for t in topics
            ]
            result = self.client.create_topics(
                specs,
                validate_only=validate_only,
                raise_errors=False,
                timeout_ms=int(TIMEOUT_S * 1000),
            )
        return [(t["name"], t["error_code"]) for t in result["topics"]]

    def delete_topics(self, names):
        result = self.client.delete_topics(
            names, raise_errors=False, timeout_ms=int(TIMEOUT_S * 1000)
        )
        return {t["name"]: t["error_code"] for t in result["topics"]}


ADMINS = {"confluent": ConfluentAdmin, "kafka-python": KafkaPythonAdmin}
