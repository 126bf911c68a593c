"""Continuous load on a cluster, and the checks that nothing acknowledged went wrong under it.

A ``Workload`` runs, in background threads, while a test injects faults:

- two confluent-kafka producers (acks=all, no idempotence) sending unique values round-robin
  over the partitions at a steady rate, recording every acknowledged (partition, offset):
  * "retrying": the settings a real application would use (librdkafka retries on its own);
  * "single-shot": ``message.send.max.retries=0``, so every value is sent at most once;
  (``Workload(idempotent=True)`` runs an idempotent confluent-kafka producer and a kafka-python
  one with its defaults instead, both retrying: then no value may be stored twice at all, and
  each producer's values must be stored in the order it sent them);
- a consumer reading every partition from the beginning, recording what it saw;
- a watcher snapshotting the partitions' state in etcd and the bucket listing (ETags).

``Workload.verify()`` stops the producers and checks, from a raw fetch of the whole log:
  every acknowledged value is stored at exactly its acknowledged offset; offsets are contiguous;
  each single-shot value is stored at most once; stored values are values that were sent to
  that partition; leader epochs never go backwards along the log and agree with the epoch
  history in etcd; what the consumer saw matches the log and it never had to rewind or was
  told its offset was out of range; the storage invariants hold over etcd's whole history
  (support/invariants); no committed segment was overwritten or removed.

Why two producers: a non-idempotent client that retries may legitimately store a value twice:
when a request's outcome was unknown (response lost to a kill, a timeout) it sends the records
again, and librdkafka reports only the attempt that succeeded. It does not say which values
were in doubt, so for the retrying producer a value stored twice cannot be told apart from a
broker bug; only "acked value at its acked offset" is strict there. The single-shot producer
does not retry, so for its values a second copy is the broker's doing and fails the test, with
one exception that librdkafka causes and that has a recognisable shape: see
``resent_after_broker_left``. Tests where brokers only leave gracefully assert that nothing at
all is stored twice. The committed segments are also read back from S3 and must hold exactly
what Fetch served.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from . import kafka_wire as kw
from . import segment_format as sf
from .cluster import (
    Cluster,
    StoredRecord,
    etcd_or_none,
    missing_offsets,
    read_partition,
    segment_base,
)
from .etcd import EtcdError
from .invariants import check_history
from .load_clients import KafkaPythonLoadProducer, LiveConsumer, LoadProducer
from .log_check import LogChecker, LogReport

LIVENESS_TIMEOUT = 60.0  # generous guard for "the cluster makes progress again"

# Produce errors a client may retry (Kafka marks them retriable).
RETRIABLE = {
    kw.UNKNOWN_TOPIC_OR_PARTITION,
    kw.LEADER_NOT_AVAILABLE,
    kw.NOT_LEADER_OR_FOLLOWER,
    kw.REQUEST_TIMED_OUT,
    13,  # NETWORK_EXCEPTION
    19,  # NOT_ENOUGH_REPLICAS
    20,  # NOT_ENOUGH_REPLICAS_AFTER_APPEND
    kw.KAFKA_STORAGE_ERROR,
}


class SegmentWatcher:
    """Snapshots, every ``interval`` seconds, each partition's record in etcd and the bucket
    listing. A segment whose base offset is below the segment end (before issue 13: the high
    watermark) read just before the listing is committed; its ETag must never change and it
    must never disappear."""

    def __init__(self, cluster: Cluster, topic: str, interval: float = 0.5) -> None:
        self.cluster = cluster
        self.topic = topic
        self.interval = interval
        self.committed: dict[str, str] = {}  # key -> ETag when first seen committed
        self.hwm: dict[int, int] = {}
        self.epoch: dict[int, int] = {}
        self.violations: list[str] = []
        self._reported: set[str] = set()
        self.snapshots = 0
        self.s3 = cluster.moto.client(timeout=3.0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="segment-watcher", daemon=True)

    def start(self) -> SegmentWatcher:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.snapshot()

    def snapshot(self) -> bool:
        """One snapshot; False if etcd or S3 did not answer (nothing learned then)."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            records = self.cluster.meta.partitions(self.topic)
        except EtcdError:
            return False
        try:
            listing = self.cluster.objects(self.topic, self.s3)
        except (BotoCoreError, ClientError, OSError):
            return False
        self.snapshots += 1
        for p, rec in records.items():
            if rec.high_watermark < self.hwm.get(p, 0):
                self.violations.append(
                    f"partition {p}: high watermark went back from {self.hwm[p]} to "
                    f"{rec.high_watermark}"
                )
            if rec.leader_epoch < self.epoch.get(p, 0):
                self.violations.append(
                    f"partition {p}: leader epoch went back from {self.epoch[p]} to "
                    f"{rec.leader_epoch}"
                )
            self.hwm[p] = max(self.hwm.get(p, 0), rec.high_watermark)
            self.epoch[p] = max(self.epoch.get(p, 0), rec.leader_epoch)
        for key, (etag, _size) in listing.items():
            if sf.PRODUCER_SNAPSHOT_NAME.match(key.rsplit("/", 1)[-1]):
                continue  # replaced by the next compaction's, then deleted
            parsed = segment_base(key)
            if parsed is None:
                self.violations.append(f"unexpected object {key}")
                continue
            p, base, _kind = parsed
            rec = records.get(p)
            if rec is None or base >= rec.segment_end:
                continue  # not committed (yet): may be replaced or removed
            first = self.committed.setdefault(key, etag)
            if first != etag:
                self._violation(key, f"committed {key} overwritten: ETag {first} -> {etag}")
        for key in self.committed:
            if key not in listing:
                self._violation(key, f"committed {key} disappeared")
        return True

    def _violation(self, key: str, message: str) -> None:
        """Record one violation per object (later snapshots would repeat it)."""
        if key not in self._reported:
            self._reported.add(key)
            self.violations.append(message)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


@dataclass
class Probe:
    """Raw produce requests sent to one broker without waiting (e.g. while it is frozen);
    ``collect`` reads whatever answers come back."""

    broker_addr: str
    topic: str
    sent: dict[bytes, int] = field(default_factory=dict)  # value -> partition
    answers: dict[bytes, tuple[int, int]] = field(default_factory=dict)  # value -> (err, base)
    unanswered: list[bytes] = field(default_factory=list)
    conn: kw.RawConnection | None = field(default=None, repr=False)
    order: list[bytes] = field(default_factory=list)

    def send(self, partitions: list[int], tag: str, timeout_ms: int = 30000) -> Probe:
        """One acks=-1 produce per partition; ``timeout_ms`` is the request's own timeout."""
        self.conn = kw.RawConnection.to(self.broker_addr, timeout=10)
        for p in partitions:
            value = f"probe-{tag}-{p}".encode()
            batch = sf.build_record_batch(
                [(None, value, [])], base_timestamp=int(time.time() * 1000)
            )
            body = kw.produce_body(self.topic, p, batch, acks=-1, timeout_ms=timeout_ms)
            self.conn.send(kw.PRODUCE, 3, body)
            self.sent[value] = p
            self.order.append(value)
        return self

    def collect(self, timeout: float) -> Probe:
        """Responses come back in request order; stop at the first missing one."""
        assert self.conn is not None
        deadline = time.monotonic() + timeout
        try:
            for value in self.order:
                self.conn.sock.settimeout(max(0.1, deadline - time.monotonic()))
                _cid, reader = self.conn.recv_response()
                (res,) = kw.parse_produce_v3(reader).values()
                self.answers[value] = (res.error_code, res.base_offset)
        except (TimeoutError, kw.ConnectionClosed, OSError):
            pass
        finally:
            self.conn.close()
        self.unanswered = [v for v in self.order if v not in self.answers]
        return self

    def acked(self) -> dict[bytes, tuple[int, int]]:
        return {v: (self.sent[v], base) for v, (err, base) in self.answers.items() if err == 0}

    def errors(self) -> dict[bytes, int]:
        return {v: err for v, (err, _base) in self.answers.items() if err != 0}


class Workload:
    """Producers, a live consumer and a segment watcher on one topic of ``cluster``."""

    def __init__(
        self,
        cluster: Cluster,
        topic: str,
        partitions: int,
        *,
        bootstrap: str | None = None,
        rate: int = 120,
        idempotent: bool = False,
    ) -> None:
        self.cluster = cluster
        self.topic = topic
        self.partitions = partitions
        self.idempotent = idempotent
        bootstrap = bootstrap or cluster.bootstrap()
        self.retrying: LoadProducer
        self.single: LoadProducer
        if idempotent:
            # Two clients' idempotent producers, both retrying: every value at most once.
            self.retrying = LoadProducer(
                bootstrap,
                topic,
                partitions,
                name="confluent",
                retries=True,
                rate=rate,
                idempotent=True,
            )
            self.single = KafkaPythonLoadProducer(
                bootstrap, topic, partitions, name="kafka-python", rate=rate
            )
        else:
            self.retrying = LoadProducer(
                bootstrap, topic, partitions, name="retrying", retries=True, rate=rate
            )
            self.single = LoadProducer(
                bootstrap, topic, partitions, name="single", retries=False, rate=rate
            )
        self.consumer = LiveConsumer(bootstrap, topic, partitions)
        self.watcher = SegmentWatcher(cluster, topic)
        self.probes: list[Probe] = []
        self.resent = 0  # single-shot values librdkafka resent after dropping a broker

    def __enter__(self) -> Workload:
        self.retrying.start()
        self.single.start()
        self.consumer.start()
        self.watcher.start()
        return self

    def __exit__(self, *exc) -> None:
        # on an exception, stop the threads quietly; verify() reports the normal way
        for stop in (self.retrying.stop, self.single.stop, self.consumer.stop, self.watcher.stop):
            with contextlib.suppress(AssertionError):
                stop()

    def acked(self) -> dict[bytes, tuple[int, int | None]]:
        """Every acknowledged value: {value: (partition, offset)} (producers and probes); the
        offset is None when the client acknowledged without one (see ``_check_values``)."""
        acked = {**self.retrying.acked, **self.single.acked}
        for probe in self.probes:
            acked.update(probe.acked())
        return acked

    def acks(self) -> dict[int, int]:
        r, s = self.retrying.counts(), self.single.counts()
        return {p: r.get(p, 0) + s.get(p, 0) for p in range(self.partitions)}

    def wait_acks(
        self, n: int, partitions: list[int] | None = None, timeout: float = LIVENESS_TIMEOUT
    ) -> None:
        """Wait until each of ``partitions`` (default all) has ``n`` more acks than now."""
        parts = range(self.partitions) if partitions is None else partitions
        base = self.acks()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            now = self.acks()
            if all(now[p] >= base[p] + n for p in parts):
                return
            for prod in (self.retrying, self.single):
                if prod.crash is not None:
                    raise AssertionError(f"producer {prod.name} crashed: {prod.crash!r}")
            time.sleep(0.05)
        now = self.acks()
        behind = {p: now[p] - base[p] for p in parts if now[p] < base[p] + n}
        raise AssertionError(
            f"no progress within {timeout}s: new acks per lagging partition {behind} "
            f"(wanted {n}); recent failures: {self.recent_failures()}"
        )

    def recent_failures(self) -> list[str]:
        out = []
        for prod in (self.retrying, self.single):
            with prod.lock:
                out += [f"{prod.name}:{v.decode()}:{e}" for v, e in list(prod.failed.items())[-3:]]
        return out

    def probe(self, broker, partitions: list[int], tag: str, timeout_ms: int = 30000) -> Probe:
        """Send one raw produce per partition to ``broker`` (answers are read later)."""
        probe = Probe(broker.bootstrap, self.topic).send(partitions, tag, timeout_ms)
        self.probes.append(probe)
        return probe

    # --- the checks ----------------------------------------------------------------------------

    def verify(self) -> dict[str, int]:
        """Stop producing, read the whole log and check every property in the module doc.
        Returns counters for the test to print or assert on."""
        self.retrying.stop()
        self.single.stop()
        problems: list[str] = []

        # the committed ends come from etcd and the write-ahead manifests, read by the
        # independent checker; every broker must come to report the same
        stored = wait_for(
            lambda: etcd_or_none(lambda: LogChecker.for_cluster(self.cluster).check([self.topic])),
            LIVENESS_TIMEOUT,
            "etcd to answer",
        )
        ends = {p: stored.ends[(self.topic, p)] for p in range(self.partitions)}
        for b in self.cluster.live:
            problems += self._check_list_offsets(b, ends)
        reader = self.cluster.any_live().bootstrap
        log: dict[int, list[StoredRecord]] = {}
        for p, (start, end) in ends.items():
            if start != 0:
                problems.append(f"partition {p}: log starts at {start}, not 0 (no retention here)")
            log[p] = read_partition(reader, self.topic, p, start, end, strict=False)
            gaps = missing_offsets(log[p], start, end)
            if gaps:
                problems.append(f"partition {p}: offsets missing below the end {end}: {gaps}")

        where: dict[bytes | None, list[tuple[int, int]]] = defaultdict(list)
        for p, recs in log.items():
            for r in recs:
                where[r.value].append((p, r.offset))

        sent = {**self.retrying.sent, **self.single.sent}
        acked = self.acked()
        at_most_once = set(sent) if self.idempotent else set(self.single.sent)
        for probe in self.probes:
            sent.update(probe.sent)
            at_most_once |= set(probe.sent)

        self.watcher.stop()
        if self.cluster.live and not self.watcher.snapshot():
            problems.append("final snapshot of etcd and the bucket failed")
        groups = {
            "log and offsets": problems,
            "storage invariants over etcd's history": check_history(
                self.cluster.etcd.endpoint, self.cluster.namespace
            ),
            "segments in S3 and state in etcd": self.watcher.violations,
            "objects read back from S3": self._check_objects(stored, log),
            "leader epochs": self._check_epochs(ends, log),
            "live consumer": self._check_consumer(ends, log),
            "records": self._check_values(where, sent, acked, at_most_once, log),
        }
        if self.idempotent:
            groups["order per producer"] = self._check_order(log)

        retried = self.retrying.sent
        stats = {
            "records": sum(len(recs) for recs in log.values()),
            "acked": len(acked),
            "failed": len(self.retrying.failed) + len(self.single.failed),
            "failed_by_error": dict(
                Counter([*self.retrying.failed.values(), *self.single.failed.values()])
            ),
            "unresolved": self.retrying.unresolved + self.single.unresolved,
            "duplicates": sum(len(locs) - 1 for locs in where.values()),
            "duplicate_sample": [(v, locs) for v, locs in where.items() if len(locs) > 1][:3],
            "retrying_duplicates": sum(len(where[v]) - 1 for v in retried if v in where),
            "single_shot_resent": self.resent,
            "consumer_errors": len(self.consumer.errors),
            "consumer_stalls": len(self.consumer.stalls),
            "snapshots": self.watcher.snapshots,
            "committed_objects": len(self.watcher.committed),
            **{f"stored_{k}": v for k, v in stored.summary().items()},
        }
        total = sum(len(g) for g in groups.values())
        if total:
            text = [f"{total} problems; {stats}"]
            for name, found in groups.items():
                if found:
                    text.append(f"{name} ({len(found)}):")
                    text += [f"  {line}" for line in found[:10]]
                    if len(found) > 10:
                        text.append(f"  ... and {len(found) - 10} more")
            raise AssertionError("\n".join(text))
        return stats

    def _check_objects(self, stored: LogReport, log) -> list[str]:
        """The log rebuilt from the objects themselves (support/log_check: committed segments
        and write-ahead runs, every format checked) is whole and is exactly what Fetch
        served."""
        problems = list(stored.problems)
        for p, recs in log.items():
            fetched = [(r.offset, r.value) for r in recs]
            objects = stored.records(self.topic, p)
            if objects != fetched:
                diff = next(
                    (i for i, (a, b) in enumerate(zip(objects, fetched, strict=False)) if a != b),
                    min(len(objects), len(fetched)),
                )
                problems.append(
                    f"partition {p}: S3 and Fetch differ from record #{diff}: S3 has "
                    f"{objects[diff : diff + 2]}, Fetch gave {fetched[diff : diff + 2]}"
                )
        return problems

    def _check_list_offsets(self, broker, ends) -> list[str]:
        """ListOffsets on ``broker`` comes to agree with etcd's log start and high watermark."""

        def offsets():
            with kw.RawConnection.to(broker.bootstrap) as conn:
                return {
                    p: (
                        kw.list_offsets(conn, self.topic, p, kw.EARLIEST).offset,
                        kw.list_offsets(conn, self.topic, p, kw.LATEST).offset,
                    )
                    for p in ends
                }

        deadline = time.monotonic() + LIVENESS_TIMEOUT
        got = offsets()
        while got != ends and time.monotonic() < deadline:
            time.sleep(0.1)
            got = offsets()
        if got != ends:
            return [f"{broker.name}: ListOffsets (earliest, latest) {got}, etcd says {ends}"]
        return []

    def _check_order(self, log: dict[int, list[StoredRecord]]) -> list[str]:
        """Each idempotent producer's values are stored in the order it sent them."""
        problems = []
        for p, recs in log.items():
            last: dict[str, tuple[int, int]] = {}  # producer -> (send index, offset)
            for r in recs:
                name, _, index = (r.value or b"").decode().rpartition("-")
                if not index.isdigit():
                    continue
                before = last.get(name)
                if before is not None and int(index) <= before[0]:
                    problems.append(
                        f"partition {p}: {name} value #{index} at offset {r.offset} after "
                        f"#{before[0]} at {before[1]}"
                    )
                last[name] = (int(index), r.offset)
        return problems

    def _check_values(self, where, sent, acked, at_most_once, log) -> list[str]:
        epoch_at = {(p, r.offset): r.leader_epoch for p, recs in log.items() for r in recs}
        problems = []
        for value, (p, offset) in sorted(acked.items()):
            locs = where.get(value, [])
            if offset is None:
                # librdkafka's implicit ack: an idempotent request whose answer was lost is
                # settled by the answer to a later one ("persisted", offset unknown)
                if [loc[0] for loc in locs] != [p]:
                    problems.append(
                        f"acked {value!r} in partition {p} (offset unknown) is stored at "
                        f"{locs or 'nowhere'}"
                    )
            elif (p, offset) not in locs:
                problems.append(f"acked {value!r} at {p}/{offset} is stored at {locs or 'nowhere'}")
        for value, locs in where.items():
            if value not in sent:
                problems.append(f"stored value {value!r} at {locs} was never sent")
                continue
            wrong = [loc for loc in locs if loc[0] != sent[value]]
            if wrong:
                problems.append(f"{value!r} sent to partition {sent[value]}, stored at {wrong}")
            if value in at_most_once and len(locs) > 1:
                # (an idempotent producer's resend is recognised by the broker: no exception)
                if not self.idempotent and resent_after_broker_left(
                    locs, acked.get(value), epoch_at
                ):
                    self.resent += 1
                    continue
                copies = [f"{p}/{off} (epoch {epoch_at[(p, off)]})" for p, off in locs]
                fate = f"acked at {acked[value]}" if value in acked else "not acked"
                problems.append(
                    f"{value!r} was sent once but is stored at {', '.join(copies)}; {fate}"
                )
        return problems

    def _check_epochs(self, ends, log: dict[int, list[StoredRecord]]) -> list[str]:
        """Leader epochs never decrease along a partition's log, and each record lies in the
        range its epoch's history entry gives (no later epoch started at or before it)."""
        problems = []
        try:
            records = self.cluster.meta.partitions(self.topic)
        except EtcdError as exc:
            return [f"etcd unreadable for the epoch check: {exc}"]
        for p, recs in log.items():
            rec = records.get(p)
            if rec is None:
                problems.append(f"partition {p}: no record in etcd")
                continue
            end = recs[-1].offset + 1 if recs else 0
            if ends[p][1] != end or rec.high_watermark > end:
                problems.append(
                    f"partition {p}: committed end {ends[p][1]} (record's high watermark "
                    f"{rec.high_watermark}), log {end}"
                )
            starts = dict(rec.epoch_history)
            prev = None
            for r in recs:
                if r.leader_epoch < 1 or r.leader_epoch > rec.leader_epoch:
                    problems.append(
                        f"partition {p} offset {r.offset}: epoch {r.leader_epoch} outside "
                        f"1..{rec.leader_epoch}"
                    )
                if prev is not None and r.leader_epoch < prev.leader_epoch:
                    problems.append(
                        f"partition {p}: epoch {r.leader_epoch} at offset {r.offset} after "
                        f"epoch {prev.leader_epoch} at {prev.offset} (a stale owner wrote)"
                    )
                if prev is None or r.leader_epoch != prev.leader_epoch:
                    problems += self._history_problems(p, r, starts)
                prev = r
        return problems

    @staticmethod
    def _history_problems(p: int, r: StoredRecord, starts: dict[int, int]) -> list[str]:
        if not starts or r.leader_epoch < min(starts):
            return []  # history may be trimmed; nothing to compare with
        if r.leader_epoch not in starts:
            return [f"partition {p}: epoch {r.leader_epoch} (offset {r.offset}) not in history"]
        problems = []
        if starts[r.leader_epoch] > r.offset:
            problems.append(
                f"partition {p}: offset {r.offset} has epoch {r.leader_epoch}, which starts at "
                f"{starts[r.leader_epoch]}"
            )
        later = {e: s for e, s in starts.items() if e > r.leader_epoch and s <= r.offset}
        if later:
            problems.append(
                f"partition {p}: offset {r.offset} written in epoch {r.leader_epoch} although "
                f"epochs {later} had started by then"
            )
        return problems

    def _check_consumer(self, ends, log) -> list[str]:
        """The live consumer catches up, and everything it saw is what the log holds."""
        deadline = time.monotonic() + LIVENESS_TIMEOUT
        while time.monotonic() < deadline:
            pos = self.consumer.positions()
            if all(pos.get(p, 0) >= end for p, (_s, end) in ends.items()):
                break
            time.sleep(0.1)
        self.consumer.stop()
        problems = []
        pos = self.consumer.positions()
        lagging = {p: (pos.get(p, 0), end) for p, (_s, end) in ends.items() if pos.get(p, 0) < end}
        if lagging:
            problems.append(f"live consumer never caught up: (position, end) {lagging}")
        for p, seen in self.consumer.seen.items():
            stored = {r.offset: r.value for r in log.get(p, [])}
            for s in seen:
                if stored.get(s.offset, b"<missing>") != s.value:
                    problems.append(
                        f"consumer saw {s.value!r} at {p}/{s.offset}; the log has "
                        f"{stored.get(s.offset, 'nothing')!r} there"
                    )
                    break
        if self.consumer.rewinds:
            problems.append(
                "live consumer was sent back (offset reset) as (partition, last, next): "
                f"{self.consumer.rewinds[:5]}; consumer errors: {self.consumer.errors[:5]}"
            )
        if self.consumer.watermarks_back:
            problems.append(
                "a fetch answered the live consumer a lower high watermark than an earlier one "
                f"(partition, before, now): {self.consumer.watermarks_back[:5]}"
            )
        resets = [e for e in self.consumer.errors if "OFFSET" in e]
        if resets:
            problems.append(f"live consumer was told its offset was out of range: {resets[:5]}")
        return problems


def resent_after_broker_left(
    locs: list[tuple[int, int]], acked_at: tuple[int, int] | None, epoch_at: dict
) -> bool:
    """The one way a single-shot value may be stored twice without a broker bug.

    When a broker leaves the cluster (killed, frozen past its lease), librdkafka drops its
    connection to it once Metadata no longer lists it and fails the requests it was still
    waiting on as "not persisted" (log: "Broker handle destroyed without termination: actions
    Refresh,MsgNotPersisted"), which it resends even with message.send.max.retries=0. That broker
    may have committed them before it stopped answering. The pattern: two copies in one
    partition, the first never acknowledged and written in an older leader epoch, the second the
    acknowledged one."""
    if len(locs) != 2 or acked_at is None or len({p for p, _ in locs}) != 1:
        return False
    first, second = sorted(locs, key=lambda loc: loc[1])
    return acked_at == second and epoch_at[first] < epoch_at[second]


def busiest(cluster: Cluster, topic: str) -> tuple[object, list[int]]:
    """The live broker that leads the most partitions of ``topic``, and those partitions."""
    leaders = cluster.leaders(topic)
    by_broker: dict[int, list[int]] = defaultdict(list)
    for p, lead in leaders.items():
        by_broker[lead.broker_id].append(p)
    broker_id = max(by_broker, key=lambda b: (len(by_broker[b]), -b))
    return cluster.brokers[broker_id], sorted(by_broker[broker_id])


def wait_for(condition, timeout: float, what, interval: float = 0.1):
    """Poll ``condition()`` until it returns something truthy (returned); else fail, saying
    ``what`` was waited for (a string, or a callable that describes the state at the end)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(interval)
    described = what() if callable(what) else what
    raise AssertionError(f"timed out after {timeout}s waiting for {described}")


def tcp_reachable(addr: str) -> bool:
    host, port = addr.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=0.5):
            return True
    except OSError:
        return False
