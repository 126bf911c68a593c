"""A KafScale cluster for tests: N broker processes sharing one etcd and one S3 bucket (moto).

Brokers get ids 1, 2, 3, ... Views of the cluster come from the brokers (Metadata through the
raw wire client) and from etcd (``ClusterMeta``); ``wait_converged`` polls until every live
broker tells the same story.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from . import kafka_wire as kw
from . import segment_format as sf
from .etcd import ClusterMeta, EtcdError
from .procs import S3_ENV, Broker, EtcdServer, MotoServer, free_port

CONVERGE_TIMEOUT = 60.0  # liveness guard only
METADATA_VERSION = 8  # the newest non-flexible version: has leader epochs

SEGMENT_KEY = re.compile(r"(?:.*/)?(\d+)/segment-(\d{20})\.(kfs|index)$")


@dataclass(frozen=True)
class Leader:
    broker_id: int
    epoch: int


class Cluster:
    """Brokers of one cluster; ``factory`` starts a Broker (conftest's BrokerFactory)."""

    def __init__(
        self,
        factory: Callable[..., Broker],
        etcd: EtcdServer,
        moto: MotoServer,
        bucket: str,
        *,
        namespace: str = "default",
        s3_endpoint: str | None = None,
        lease_ttl_ms: int = 3000,
        flush_interval_ms: int = 50,
        args: list[str] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.factory = factory
        self.etcd = etcd
        self.moto = moto
        self.bucket = bucket
        self.namespace = namespace
        self.s3_endpoint = s3_endpoint  # where the brokers reach moto (a proxy), if not directly
        self.lease_ttl_ms = lease_ttl_ms
        self.flush_interval_ms = flush_interval_ms
        self.args = list(args or [])
        self.env = {**S3_ENV, **(env or {})}  # every broker's environment (KAFSCALE_* settings)
        self.brokers: dict[int, Broker] = {}
        self.meta = ClusterMeta(etcd.client(), namespace)

    # --- brokers -----------------------------------------------------------------------------

    def broker_args(self, broker_id: int) -> list[str]:
        return [
            *self.moto.broker_args(self.bucket, self.namespace, self.s3_endpoint),
            "--etcd-endpoints",
            self.etcd.endpoint,
            "--broker-id",
            str(broker_id),
            "--lease-ttl-ms",
            str(self.lease_ttl_ms),
            *self.args,
        ]

    def add(self, *, args: list[str] | None = None, start: bool = True) -> Broker:
        """A new broker with the next id (not started when ``start`` is False)."""
        broker_id = max(self.brokers, default=0) + 1
        broker = self.factory(
            [*self.broker_args(broker_id), *(args or [])],
            env=dict(self.env),
            flush_interval_ms=self.flush_interval_ms,
            name=f"broker{broker_id}",
            start=start,
        )
        broker.broker_id = broker_id
        self.brokers[broker_id] = broker
        return broker

    def start(self, n: int) -> Cluster:
        for _ in range(n):
            self.add()
        self.wait_converged()
        return self

    def start_with_listener(self, n: int, protocol: str, args: list[str]) -> dict[int, int]:
        """Starts ``n`` more brokers, each with its PLAINTEXT listener and a ``protocol`` one on
        a port of its own (and ``args``), and waits until they agree: {broker id: that port}."""
        ports = {}
        for _ in range(n):
            b = self.add(start=False)
            ports[b.broker_id] = free_port()
            listeners = f"PLAINTEXT://{b.bootstrap},{protocol}://127.0.0.1:{ports[b.broker_id]}"
            b.args += ["--listeners", listeners, *args]
            b.start()
        self.wait_converged()
        return ports

    @property
    def live(self) -> list[Broker]:
        """Running brokers (a paused one counts as not live)."""
        return [b for b in self.brokers.values() if b.running and not b.paused]

    @property
    def live_ids(self) -> set[int]:
        return {b.broker_id for b in self.live}

    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.live)

    def any_live(self) -> Broker:
        return self.live[0]

    # --- views -------------------------------------------------------------------------------

    def metadata(self, broker: Broker, topics: list[str] | None) -> kw.MetadataResponse:
        with kw.RawConnection.to(broker.bootstrap, timeout=10) as conn:
            return kw.metadata(
                conn, topics, version=METADATA_VERSION, allow_auto_topic_creation=False
            )

    def leaders(self, topic: str, broker: Broker | None = None) -> dict[int, Leader]:
        """{partition: Leader} as ``broker`` (default: any live one) reports it."""
        md = self.metadata(broker or self.any_live(), [topic])
        tm = md.topics[topic]
        assert tm.error_code == kw.NONE, f"Metadata for {topic}: error {tm.error_code}"
        return {p.partition: Leader(p.leader, p.leader_epoch) for p in tm.partitions}

    def owner(self, topic: str, partition: int) -> Broker:
        return self.brokers[self.leaders(topic)[partition].broker_id]

    def non_owners(self, topic: str, partition: int) -> list[Broker]:
        owner = self.leaders(topic)[partition].broker_id
        return [b for b in self.live if b.broker_id != owner]

    def partitions_of(self, topic: str, broker_id: int) -> list[int]:
        return sorted(p for p, lead in self.leaders(topic).items() if lead.broker_id == broker_id)

    def _converged(self, topics: list[str], partitions: dict[str, int]) -> str | None:
        """None when every live broker lists exactly the live brokers and, for each topic,
        the same leader and epoch per partition, every leader live; else what is off."""
        live = self.live
        want_ids = self.live_ids
        views = {}
        for b in live:
            try:
                md = self.metadata(b, topics)
            except (OSError, kw.ConnectionClosed) as exc:
                return f"broker{b.broker_id}: {exc}"
            ids = {node for node, _, _ in md.brokers}
            if ids != want_ids:
                return f"broker{b.broker_id} lists brokers {sorted(ids)}, live {sorted(want_ids)}"
            addrs = {node: f"{host}:{port}" for node, host, port in md.brokers}
            for bid in want_ids:
                if addrs[bid] != self.brokers[bid].bootstrap:
                    return f"broker{b.broker_id} gives {addrs[bid]} for broker{bid}"
            view = {}
            for t in topics:
                tm = md.topics.get(t)
                if tm is None or tm.error_code != kw.NONE:
                    return f"broker{b.broker_id}: topic {t}: {tm}"
                if t in partitions and len(tm.partitions) != partitions[t]:
                    return f"broker{b.broker_id}: {t} has {len(tm.partitions)} partitions"
                for p in tm.partitions:
                    if p.error_code != kw.NONE or p.leader not in want_ids or p.leader_epoch < 1:
                        return f"broker{b.broker_id}: {t}/{p.partition}: {p}"
                    view[(t, p.partition)] = (p.leader, p.leader_epoch)
            views[b.broker_id] = view
        distinct = {tuple(sorted(v.items())) for v in views.values()}
        if len(distinct) > 1:
            return f"brokers disagree on leaders: {views}"
        return None

    def wait_converged(
        self,
        topics: list[str] | None = None,
        partitions: dict[str, int] | None = None,
        timeout: float = CONVERGE_TIMEOUT,
        until: Callable[[dict[str, dict[int, Leader]]], str | None] | None = None,
    ) -> dict[str, dict[int, Leader]]:
        """Poll until the live brokers agree (see ``_converged``) and ``until(leaders)``, if
        given, returns None (else it says what is still off); returns {topic: leaders}."""
        topics = list(topics or [])
        deadline = time.monotonic() + timeout
        problem: str | None = "never checked"
        while time.monotonic() < deadline:
            problem = self._converged(topics, partitions or {})
            if problem is None:
                leaders = {t: self.leaders(t) for t in topics}
                problem = until(leaders) if until else None
                if problem is None:
                    return leaders
            time.sleep(0.1)
        raise AssertionError(f"cluster did not converge within {timeout}s: {problem}")

    def claimed(self, leaders: dict[str, dict[int, Leader]]) -> str | None:
        """An ``until`` check: every partition's owner key in etcd names its reported leader
        (the leader has claimed it, so it takes writes now rather than NOT_LEADER)."""
        for topic, by_partition in leaders.items():
            owners = self.meta.owners(topic)
            for p, lead in by_partition.items():
                if owners.get(p) != lead.broker_id:
                    return f"{topic}/{p}: leader {lead}, owner key {owners.get(p)}"
        return None

    # --- reading partitions ------------------------------------------------------------------

    def end_offsets(self, topic: str, partitions: int, broker: Broker | None = None):
        """{partition: (earliest, latest)} through ListOffsets."""
        out = {}
        with kw.RawConnection.to((broker or self.any_live()).bootstrap) as conn:
            for p in range(partitions):
                lo = kw.list_offsets(conn, topic, p, kw.EARLIEST)
                hi = kw.list_offsets(conn, topic, p, kw.LATEST)
                assert lo.error_code == hi.error_code == kw.NONE, (p, lo, hi)
                out[p] = (lo.offset, hi.offset)
        return out

    def wait_seen_everywhere(self, topic: str, ends: dict[int, int], timeout: float = 30) -> None:
        """Waits until every live broker answers ListOffsets latest with at least ``ends``:
        a broker that does not own a partition learns its commits through the metadata
        store's watch, a moment after the owner."""
        deadline = time.monotonic() + timeout
        for b in self.live:
            behind = dict(ends)
            while behind:
                with kw.RawConnection.to(b.bootstrap) as conn:
                    for p in list(behind):
                        res = kw.list_offsets(conn, topic, p, kw.LATEST)
                        if res.error_code == kw.NONE and res.offset >= behind[p]:
                            del behind[p]
                if behind and time.monotonic() > deadline:
                    raise AssertionError(f"{b.name} has not seen the commits of {behind}")
                if behind:
                    time.sleep(0.05)

    def objects(self, topic: str, client=None) -> dict[str, tuple[str, int]]:
        """{key: (ETag, size)} of every object of ``topic`` in the bucket."""
        return self.moto.listing(self.bucket, f"{self.namespace}/{topic}/", client)


def moved_away(
    before: dict[str, dict[int, Leader]], gone_id: int
) -> Callable[[dict[str, dict[int, Leader]]], str | None]:
    """An ``until`` check for a broker leaving: its partitions have new owners with higher
    epochs; every other partition keeps owner and epoch (placement moves nothing
    else)."""

    def check(now: dict[str, dict[int, Leader]]) -> str | None:
        for topic, leaders in before.items():
            for p, old in leaders.items():
                new = now[topic][p]
                if old.broker_id == gone_id:
                    if new.broker_id == gone_id or new.epoch <= old.epoch:
                        return f"{topic}/{p}: {old} -> {new}, wanted a new owner and epoch"
                elif new != old:
                    return f"{topic}/{p} moved for no reason: {old} -> {new}"
        return None

    return check


def moved_to(
    before: dict[str, dict[int, Leader]], newcomers: set[int]
) -> Callable[[dict[str, dict[int, Leader]]], str | None]:
    """An ``until`` check for brokers joining: some partitions moved to the newcomers (with a
    higher epoch) and every other partition kept its owner and epoch."""

    def check(now: dict[str, dict[int, Leader]]) -> str | None:
        gained = 0
        for topic, leaders in before.items():
            for p, old in leaders.items():
                new = now[topic][p]
                if new == old:
                    continue
                if new.broker_id not in newcomers or new.epoch <= old.epoch:
                    return f"{topic}/{p}: {old} -> {new}, wanted unchanged or a newcomer"
                gained += 1
        return None if gained else f"no partition moved to brokers {sorted(newcomers)} yet"

    return check


@dataclass(frozen=True)
class StoredRecord:
    offset: int
    leader_epoch: int  # the batch's partition leader epoch, as the broker stamped it
    value: bytes | None


def _served_batches(
    bootstrap: str, topic: str, partition: int, start: int, end: int
) -> Iterator[sf.Batch]:
    """The batches one broker serves for [start, end) of a partition, in order (raw Fetch
    v4); fails when it stops making progress for a minute."""
    offset = start
    deadline = time.monotonic() + 60
    with kw.RawConnection.to(bootstrap) as conn:
        while offset < end:
            if time.monotonic() > deadline:
                raise AssertionError(f"{topic}/{partition}: stuck at offset {offset} of {end}")
            res = kw.fetch(conn, topic, partition, offset, max_wait_ms=200)
            assert res.error_code == kw.NONE, f"fetch {topic}/{partition}@{offset}: {res}"
            for batch in whole_batches(res.records or b""):
                if batch.last_offset >= offset:
                    yield batch
                    offset = batch.last_offset + 1


def read_partition(
    bootstrap: str, topic: str, partition: int, start: int, end: int, *, strict: bool = True
) -> list[StoredRecord]:
    """Every record in [start, end) of one partition through raw Fetch v4, with the leader
    epoch of its batch (record batches parsed by support/segment_format, not by a client).

    ``strict``: a missing offset fails at once; otherwise reading goes on after the gap and
    the caller checks the offsets."""
    out: list[StoredRecord] = []
    offset = start
    for batch in _served_batches(bootstrap, topic, partition, start, end):
        for rec in batch.records():
            if offset <= rec.offset < end:
                assert rec.offset == offset or not strict, (
                    f"{topic}/{partition}: offset {rec.offset} after {offset - 1}"
                )
                out.append(StoredRecord(rec.offset, batch.partition_leader_epoch, rec.value))
                offset = rec.offset + 1
    return out


def served_offsets(bootstrap: str, topic: str, partition: int, end: int) -> list[int]:
    """The offsets in [0, end) one broker serves for a partition, from the batch headers:
    readable, without decoding every record (reading a wide topic from each broker must fit
    in a short outage)."""
    return [
        o
        for batch in _served_batches(bootstrap, topic, partition, 0, end)
        for o in range(batch.base_offset, min(batch.last_offset + 1, end))
    ]


def missing_offsets(recs: list[StoredRecord], start: int, end: int) -> list[tuple[int, int]]:
    """The [first, last] ranges of offsets in [start, end) that ``recs`` lacks."""
    have = {r.offset for r in recs}
    gaps: list[tuple[int, int]] = []
    for off in range(start, end):
        if off in have:
            continue
        if gaps and gaps[-1][1] == off - 1:
            gaps[-1] = (gaps[-1][0], off)
        else:
            gaps.append((off, off))
    return gaps


def whole_batches(data: bytes) -> list[sf.Batch]:
    """The complete record batches of a fetch response (a truncated last one is dropped)."""
    batches = []
    pos = 0
    while pos + 12 <= len(data):
        length = int.from_bytes(data[pos + 8 : pos + 12], "big", signed=True)
        if pos + 12 + length > len(data):
            break
        batch = sf.parse_batch(data, pos)
        batches.append(batch)
        pos += batch.size
    return batches


def segment_base(key: str) -> tuple[int, int, str] | None:
    """(partition, base offset, "kfs"|"index") of a segment object key."""
    m = SEGMENT_KEY.match(key)
    return None if m is None else (int(m.group(1)), int(m.group(2)), m.group(3))


def create_topic(
    bootstrap: str, topic: str, partitions: int, config: dict[str, str] | None = None
) -> None:
    """CreateTopics through confluent-kafka's AdminClient (configs as given)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(topic, partitions, 1, config=config or {})], operation_timeout=30
    )
    futures[topic].result(timeout=60)


def delete_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic], operation_timeout=30)[topic].result(timeout=60)


def etcd_or_none(fn: Callable[[], object]):
    """``fn()``, or None while etcd does not answer."""
    try:
        return fn()
    except EtcdError:
        return None
