"""Transactions through the JVM: the Java client's transactional producer and read_committed
consumer (kafka-clients 4.4, pinned in tests/jvm/pom.xml), Kafka's ``kafka-transactions.sh``
and console consumer, and Kafka Streams with ``processing.guarantee=exactly_once_v2``: the
producer and consumer checks on one broker and on the 3-broker cluster, the tools and Streams
on one broker.

The Java side (tests/jvm's TransactionChecks and StreamsEosChecks) reports what it saw as
[partition, offset, value] rows; these tests decide what is right. A "read" is what a consumer
assigned every partition from the beginning showed, in order, until its position reached the
end offsets it was told (read_committed: the last stable offsets), so nothing is missed and
nothing stops the reading early.

The Java producer 4.x finds the feature ``transaction.version`` finalized at 2 in ApiVersions
and runs the second transaction protocol (KIP-890 part 2): no AddPartitionsToTxn or
AddOffsetsToTxn from the client (the brokers add what its Produce v12 and TxnOffsetCommit v5
name), an epoch bump with every EndTxn v5.

Streams (exactly_once_v2) is killed -9 with a transaction open in both of its tests, and its
restart ends that transaction two ways: the stateless application keeps no state directory, so
it restarts under a new process id, with a new transactional id, and the coordinator aborts the
killed run's transaction at its timeout (Streams' 10 s); the stateful one restarts with the
process id its state directory keeps, so its producer's InitProducerId fences the killed one
and aborts its transaction at once.
"""

from __future__ import annotations

import contextlib
import queue
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from support import jvm
from support import kafka_wire as kw
from support import transactions as tx
from support.clients import HANG_GUARD, Got, unique
from support.cluster import Cluster
from support.procs import Broker, assert_no_panic

PARTITIONS = 3  # of the topics TransactionChecks creates
STREAMS_PARTITIONS = 2  # the broker's default: Streams' input and output topics
FENCED = "ProducerFencedException"
WAIT = 120.0  # seconds: a liveness guard only (a killed Streams member leaves at its session end)

Row = tuple[int, int, str]  # (partition, offset, value)


@pytest.fixture(scope="module")
def jbroker(module_broker_factory: Callable[..., Broker]) -> Broker:
    return module_broker_factory(
        ["--default-partitions", str(STREAMS_PARTITIONS)], name="java-transactions"
    )


@pytest.fixture(scope="module")
def jcluster(module_cluster: Callable[..., Cluster]) -> Cluster:
    return module_cluster(3)


@pytest.fixture(params=["one broker", "three brokers"])
def bootstrap(request: pytest.FixtureRequest) -> Iterator[str]:
    """The producer and consumer checks run on one broker and on the 3-broker cluster (etcd,
    S3), where the transactional id's coordinator and the partitions' owners are spread over
    the brokers."""
    if request.param == "one broker":
        yield request.getfixturevalue("jbroker").bootstrap
        return
    c: Cluster = request.getfixturevalue("jcluster")
    yield c.bootstrap()
    for b in c.live:
        assert_no_panic(b)


@pytest.fixture(autouse=True)
def _broker_survives(jbroker: Broker) -> Iterator[None]:
    yield
    assert_no_panic(jbroker)


def described(bootstrap: str, transactional_id: str) -> tx.DescribedTxn:
    """DescribeTransactions of the id, asked of its coordinator."""
    with kw.RawConnection.to(bootstrap.split(",")[0]) as conn:
        found = tx.find_coordinator(conn, transactional_id, tx.TRANSACTION_KEY)
    assert found.error_code == kw.NONE, found
    with kw.RawConnection.to(f"{found.host}:{found.port}") as conn:
        return tx.describe_transactions(conn, [transactional_id])[transactional_id]


def checks(*args: str) -> dict[str, Any]:
    got: dict[str, Any] = jvm.run("TransactionChecks", list(args), timeout=240)
    return got


def rows(got: list[list[Any]], label: str | None = None) -> list[Row]:
    """The [partition, offset, value(, label)] rows (those with ``label``, if given)."""
    return [(r[0], r[1], r[2]) for r in got if label is None or r[3] == label]


def by_partition(placed: list[Row]) -> dict[int, list[Row]]:
    """What a read should show of these records: per partition, in offset order."""
    out: dict[int, list[Row]] = {}
    for row in sorted(placed):
        out.setdefault(row[0], []).append(row)
    return out


def assert_read(read: dict[str, Any], expected: list[Row], ends: dict[str, int]) -> None:
    """The read reached the ends and showed ``expected``: each record once, at the offset its
    producer was told, each partition in offset order."""
    assert read["reached_end"], read
    assert read["ends"] == ends, read
    shown: dict[int, list[Row]] = {}
    for row in rows(read["records"]):
        shown.setdefault(row[0], []).append(row)
    assert shown == by_partition(expected)


def all_partitions(offset: int, n: int = PARTITIONS) -> dict[str, int]:
    return {str(p): offset for p in range(n)}


# ---------------------------------------------------------------------------------------------
# the Java producer and consumer


def test_committed_and_aborted_transactions_seen_by_read_committed_and_uncommitted(
    bootstrap: str,
) -> None:
    """Five transactions of two records per partition, committed and aborted in turn: a
    read_committed consumer shows the committed ones once, in order, at their offsets; a
    read_uncommitted one shows the aborted ones too; both stop at the end, past the last
    marker (2 records and a marker per transaction and partition). The Java client finds the
    second transaction protocol (transaction.version 2, KIP-890 part 2) and uses it: each
    EndTxn bumped the producer's epoch, so the coordinator's record is at epoch 5."""
    transactional_id = unique("jtx")
    got = checks("commit-abort", bootstrap, unique("jtx"), transactional_id)
    sent = rows(got["sent"])
    assert len(sent) == 30 and len(set(sent)) == 30, sent
    ends = all_partitions(15)
    assert_read(got["read_committed"], rows(got["sent"], "committed"), ends)
    assert_read(got["read_uncommitted"], sent, ends)
    record = described(bootstrap, transactional_id)
    assert (record.state, record.producer_epoch) == ("CompleteCommit", 5), record


@pytest.mark.parametrize("next_step", ["commit", "send"])
def test_a_second_producer_fences_the_first_and_aborts_its_transaction(
    bootstrap: str, next_step: str
) -> None:
    """The first producer leaves a transaction open over partitions 0 and 1; a second with
    the same transactional.id initialises, which aborts it (a marker after its records, the
    last stable offset past it). The first's next step fails: its commit with
    ProducerFencedException, or a send to partition 2 (not in its transaction), which stores
    nothing, with InvalidProducerEpochException (which its commit then throws too): the Java
    client runs the second transaction protocol here, so the broker adds the partition and the
    coordinator refuses the old epoch (Kafka 4 answers the same). The second's transaction
    commits; read_committed shows only that one."""
    got = checks("fence", bootstrap, unique("jtx"), unique("jtx"), next_step)
    assert got["ends_old_open"] == {"0": 2, "1": 2, "2": 0}
    assert got["stable_old_open"] == all_partitions(0)
    after_init = {"0": 3, "1": 3, "2": 0}
    assert (got["ends_after_init"], got["stable_after_init"]) == (after_init, after_init)
    if next_step == "send":
        refused = "InvalidProducerEpochException"
        assert got["send_error"].startswith(refused), got["send_error"]
        # The client keeps the send's error and throws it from the commit.
        assert got["commit_error"] is not None and got["commit_error"].startswith(refused), got
    else:
        assert got["commit_error"] is not None and got["commit_error"].startswith(FENCED), got
    ends = {"0": 6, "1": 6, "2": 3}
    assert_read(got["read_committed"], rows(got["sent"], "committed"), ends)
    assert_read(got["read_uncommitted"], rows(got["sent"]), ends)


def test_the_coordinator_aborts_a_transaction_past_its_timeout(bootstrap: str) -> None:
    """A producer with transaction.timeout.ms=2000 writes and waits: the coordinator aborts
    the transaction (a marker in each partition, the last stable offset past it), and the
    producer's commit then fails with ProducerFencedException."""
    got = checks("timeout", bootstrap, unique("jtx"), unique("jtx"), "2000")
    assert got["stable_while_open"] == all_partitions(0)
    assert got["aborted_by_coordinator"], got
    assert got["commit_error"] is not None and got["commit_error"].startswith(FENCED), got
    ends = all_partitions(3)
    assert got["ends"] == ends, "nothing written after the abort"
    assert_read(got["read_committed"], [], ends)
    assert_read(got["read_uncommitted"], rows(got["sent"]), ends)


CTP_RECORDS = 300


def test_consume_transform_produce_copies_each_record_exactly_once(bootstrap: str) -> None:
    """A consume-transform-produce loop (read_committed consumer, manual offsets sent to the
    transaction with the consumer's group metadata): the first worker commits, aborts one
    transaction (and seeks back to the group's committed offsets), commits more and dies with
    one open; a second worker with the same group and transactional.id takes over to the
    input's end. The output, read_committed, holds every input record once, transformed, in
    its input partition's order; the aborted and the abandoned transactions' copies are there
    for read_uncommitted only; the group's committed offsets are the input's ends; the dead
    worker's producer is fenced."""
    group = unique("jtx-group")
    args = [unique("jtx-in"), unique("jtx-out"), group, unique("jtx"), str(CTP_RECORDS)]
    got = checks("consume-transform-produce", bootstrap, *args)
    steps = got["steps"]
    assert [s.split(":")[0] for s in steps[:6]] == [
        *("commit", "commit", "abort", "commit", "commit", "crash")
    ], steps
    assert all(int(s.split(":")[1]) > 0 for s in steps), steps
    # At the crash: four committed transactions are readable, the open one holds the LSO.
    stable, high = got["stable_after_crash"], got["ends_after_crash"]
    assert any(stable[p] < high[p] for p in stable), (stable, high)

    inputs = rows(got["input"])
    per_partition = {p: len(v) for p, v in by_partition(inputs).items()}
    assert got["input_ends"] == {str(p): n for p, n in per_partition.items()}
    assert got["group_offsets"] == got["input_ends"]
    assert got["zombie_commit_error"] is not None, got
    assert got["zombie_commit_error"].startswith(FENCED), got["zombie_commit_error"]

    read = got["read_committed"]
    assert read["reached_end"], read
    shown: dict[int, list[str]] = {}
    for p, _, value in rows(read["records"]):
        shown.setdefault(p, []).append(value)
    expected = {p: [f"out:{v}" for _, _, v in rs] for p, rs in by_partition(inputs).items()}
    assert shown == expected
    everything = [v for _, _, v in rows(got["read_uncommitted"]["records"])]
    assert got["read_uncommitted"]["reached_end"]
    # the aborted and the abandoned transactions' copies: a batch of records each
    assert len(everything) > CTP_RECORDS
    assert set(everything) == {v for vs in expected.values() for v in vs}


# ---------------------------------------------------------------------------------------------
# Kafka's tools

TOOLS = "org.apache.kafka.tools."
TRANSACTIONS = TOOLS + "TransactionsCommand"  # kafka-transactions.sh
CONSOLE_CONSUMER = TOOLS + "consumer.ConsoleConsumer"


def tool(main_class: str, *args: str) -> str:
    """The tool's standard output; a non-zero exit fails the test with its output."""
    proc: subprocess.CompletedProcess[str] = jvm.java(main_class, list(args), timeout=180)
    assert proc.returncode == 0, (
        f"{main_class.rsplit('.', 1)[-1]} {' '.join(args)} exited {proc.returncode}\n"
        f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    )
    return proc.stdout


def table(out: str) -> list[dict[str, str]]:
    """kafka-transactions.sh's tab-separated table: one dict per row, by column name."""
    lines = [line for line in out.splitlines() if "\t" in line]
    assert lines, out
    header = [name.strip() for name in lines[0].split("\t")]
    return [
        {name: cell.strip() for name, cell in zip(header, line.split("\t"), strict=False) if name}
        for line in lines[1:]
    ]


class Program:
    """A JVM program of tests/jvm that reads stdin: its stdout lines collected by a thread as
    they come, its stderr in a file."""

    def __init__(self, main_class: str, args: list[str], stderr: Path) -> None:
        self.main_class = main_class
        self.stderr_path = stderr
        self.err = stderr.open("w")
        self.proc = subprocess.Popen(
            jvm.command(f"{jvm.PACKAGE}.{main_class}", args),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.err,
            text=True,
        )
        self.queue: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        self.thread = threading.Thread(target=self._pump, daemon=True)
        self.thread.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.queue.put(line)
        self.queue.put(None)

    def stderr(self) -> str:
        return self.stderr_path.read_text()[-3000:]

    def alive(self, progress: str) -> None:
        if self.proc.poll() is not None:
            raise AssertionError(
                f"the JVM exited {self.proc.returncode} while {progress}:\n{self.stderr()}"
            )

    def line(self, wanted: Callable[[str], bool], what: str) -> str:
        """The first line from here on that is ``wanted`` (a bounded wait; fails if the
        program exits first)."""
        deadline = time.monotonic() + WAIT
        while True:
            try:
                line = self.queue.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                raise AssertionError(f"{what}: no line within {WAIT}s") from None
            if line is None:
                self.proc.wait()
                raise AssertionError(f"{what}: exited {self.proc.returncode}\n{self.stderr()}")
            self.seen.append(line)
            if wanted(line):
                return line

    def json(self, what: str) -> dict[str, Any]:
        got: dict[str, Any] = jvm.result(what, 0, self.line(lambda s: s[:1] == "{", what), "")
        return got

    def stop(self, line: str) -> dict[str, Any]:
        """Writes ``line`` and closes stdin; the JSON line the program printed last."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.close()
        self.proc.wait(timeout=120)
        self.thread.join(timeout=60)
        while not self.queue.empty():
            rest = self.queue.get()
            if rest is not None:
                self.seen.append(rest)
        got: dict[str, Any] = jvm.result(
            self.main_class, self.proc.returncode, "".join(self.seen), self.stderr()
        )
        return got

    def kill(self) -> None:
        """kill -9 (Process.destroyForcibly)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.err.close()


@contextlib.contextmanager
def program(main_class: str, args: list[str], stderr: Path) -> Iterator[Program]:
    running = Program(main_class, args, stderr)
    try:
        yield running
    finally:
        running.kill()


@contextlib.contextmanager
def held(
    bootstrap: str, topic: str, transactional_id: str, tmp: Path
) -> Iterator[tuple[Program, list[list[Any]]]]:
    """TransactionChecks hold: a committed, an aborted and an open transaction of five records
    each in a one-partition topic; the open one ends when told (``stop("commit")``)."""
    args = ["hold", bootstrap, topic, transactional_id]
    with program("TransactionChecks", args, tmp / "hold.stderr") as running:
        ready = running.json("the open transaction")
        assert ready["open"], ready
        yield running, ready["sent"]


def values(sent: list[list[Any]], label: str) -> list[str]:
    return [v for _, _, v in rows(sent, label)]


def console(bootstrap: str, topic: str, isolation: str, *limit: str) -> list[str]:
    """What kafka-console-consumer shows of the topic's partition 0 from its beginning (no
    group) under ``isolation``, until ``limit`` (--max-messages or --timeout-ms)."""
    out = tool(
        CONSOLE_CONSUMER,
        *("--bootstrap-server", bootstrap, "--topic", topic, "--partition", "0"),
        *("--offset", "earliest", "--isolation-level", isolation, *limit),
    )
    return out.split()


def test_kafka_transactions_lists_and_describes_an_open_transaction(
    jbroker: Broker, tmp_path: Path
) -> None:
    """While a transaction is open: ``kafka-transactions.sh list`` shows it Ongoing,
    ``describe --transactional-id`` shows it Ongoing over its partition with the producer's
    timeout, ``describe-producers`` the producer with the offset its transaction began at;
    kafka-console-consumer --isolation-level read_committed shows the committed records only
    (and waits at the open transaction), read_uncommitted every record. Once committed:
    describe shows CompleteCommit with no partitions, describe-producers no open transaction,
    and read_committed shows the committed transactions' records."""
    b = jbroker.bootstrap
    topic, txid = unique("jtx-tools"), unique("jtx-tools")
    with held(b, topic, txid, tmp_path) as (running, sent):
        listed = {r["TransactionalId"]: r for r in table(tool(TRANSACTIONS, *server(b), "list"))}
        assert txid in listed, listed
        assert listed[txid]["TransactionState"] == "Ongoing", listed[txid]
        described = table(tool(TRANSACTIONS, *server(b), "describe", "--transactional-id", txid))
        assert len(described) == 1, described
        row = described[0]
        assert row["TransactionalId"] == txid
        assert row["TransactionState"] == "Ongoing", row
        assert row["TopicPartitions"] == f"{topic}-0", row
        assert row["ProducerId"] == listed[txid]["ProducerId"]
        assert row["TransactionTimeoutMs"] == "60000", row  # the producer's default
        # after 5 committed records, a marker, 5 aborted ones and a marker
        assert producers(b, topic) == [(row["ProducerId"], "12")]
        committed = console(b, topic, "read_committed", "--timeout-ms", "8000")
        assert committed == values(sent, "committed")
        everything = console(b, topic, "read_uncommitted", "--max-messages", "15")
        assert everything == [v for _, _, v in rows(sent)]
        assert running.stop("commit")["ended"] == "commit"

    after = table(tool(TRANSACTIONS, *server(b), "describe", "--transactional-id", txid))
    assert [(r["TransactionState"], r["TopicPartitions"]) for r in after] == [
        ("CompleteCommit", "")
    ], after
    assert producers(b, topic) == [(row["ProducerId"], "None")]
    shown = console(b, topic, "read_committed", "--max-messages", "10")
    assert shown == values(sent, "committed") + values(sent, "open")


def producers(bootstrap: str, topic: str) -> list[tuple[str, str]]:
    """``kafka-transactions.sh describe-producers`` of the topic's partition 0: (producer id,
    the first offset of its open transaction) of each producer."""
    args = ["describe-producers", "--topic", topic, "--partition", "0"]
    listed = table(tool(TRANSACTIONS, *server(bootstrap), *args))
    return [(r["ProducerId"], r["CurrentTransactionStartOffset"]) for r in listed]


def server(bootstrap: str) -> list[str]:
    return ["--bootstrap-server", bootstrap]


# ---------------------------------------------------------------------------------------------
# Kafka Streams, exactly_once_v2


@contextlib.contextmanager
def streams_app(
    kind: str, bootstrap: str, app: str, topics: tuple[str, str], tmp: Path, stall_on: str = ""
) -> Iterator[Program]:
    """StreamsEosChecks in a JVM of its own: stopped when told (``stop("stop")``), or killed."""
    args = [kind, bootstrap, app, *topics, str(tmp / "state"), *([stall_on] if stall_on else [])]
    with program("StreamsEosChecks", args, tmp / f"{app}-{time.monotonic_ns()}.stderr") as app_:
        yield app_


def produce(bootstrap: str, topic: str, records: list[tuple[str, str]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for key, value in records:
        producer.produce(topic, key=key, value=value)
    assert producer.flush(HANG_GUARD) == 0


class Reader:
    """A confluent-kafka consumer of every partition of a topic from its beginning
    (read_committed or read_uncommitted), keeping what it has shown."""

    def __init__(self, bootstrap: str, topic: str, committed: bool) -> None:
        self.consumer = tx.ConfluentConsumer(
            bootstrap, topic, list(range(STREAMS_PARTITIONS)), committed
        )
        self.got: list[Got] = []

    def until(self, done: Callable[[list[Got]], bool], app: Program, what: str) -> None:
        deadline = time.monotonic() + WAIT
        while not done(self.got):
            app.alive(what)
            assert time.monotonic() < deadline, f"{what}: not within {WAIT}s"
            self.got += self.consumer.poll()

    def close(self) -> None:
        self.consumer.close()


@contextlib.contextmanager
def reader(bootstrap: str, topic: str, committed: bool) -> Iterator[Reader]:
    r = Reader(bootstrap, topic, committed)
    try:
        yield r
    finally:
        r.close()


def final_output(bootstrap: str, topic: str) -> tuple[list[Got], list[Got]]:
    """The whole output, read_committed and read_uncommitted, once the application stopped
    (its transactions all ended: the last stable offsets are the ends)."""
    parts = range(STREAMS_PARTITIONS)
    ends = tx.ends(bootstrap, topic, parts, tx.READ_UNCOMMITTED)
    assert tx.ends(bootstrap, topic, parts, tx.READ_COMMITTED) == ends, "a transaction open"
    return (
        tx.read_all("confluent", bootstrap, topic, ends, committed=True),
        tx.read_all("confluent", bootstrap, topic, ends, committed=False),
    )


def text(b: bytes | None) -> str:
    assert b is not None
    return b.decode()


def run_through_a_kill(
    bootstrap: str,
    kind: str,
    tmp: Path,
    batches: list[list[tuple[str, str]]],
    stall: tuple[str, str],
    shows_stall: Callable[[Got], bool],
    outputs: tuple[int, int],
) -> tuple[list[Got], list[Got]]:
    """Runs a Streams application through a kill -9 with a transaction open: batches[0] is
    written and handled (its output committed); then batches[1], the stall record and
    batches[2]; once the application has sent the stall record's output in a transaction
    (read_uncommitted shows it) and stalled, it is killed -9, restarted with the same
    application id and state directory, batches[3] is written, and once read_committed shows
    ``outputs[1]`` records (``outputs[0]``: those of batches[0]) it is stopped. The whole
    output, read_committed and read_uncommitted."""
    src, dst, app = unique("jtx-streams-in"), unique("jtx-streams-out"), unique("jtx-eos")
    for topic in (src, dst):
        kw.ensure_topic(bootstrap, topic, STREAMS_PARTITIONS)
    topics = (src, dst)
    write = partial(produce, bootstrap, src)
    with (
        reader(bootstrap, dst, committed=True) as committed,
        reader(bootstrap, dst, committed=False) as uncommitted,
    ):
        with streams_app(kind, bootstrap, app, topics, tmp, stall_on=stall[1]) as first:
            write(batches[0])
            committed.until(lambda got: len(got) >= outputs[0], first, "the first batch's output")
            write(batches[1] + [stall] + batches[2])
            first.line(lambda s: s.strip() == "STALLED", "the stall")
            uncommitted.until(lambda got: any(map(shows_stall, got)), first, "the stall's output")
            first.kill()
        with streams_app(kind, bootstrap, app, topics, tmp) as second:
            write(batches[3])
            committed.until(lambda got: len(got) >= outputs[1], second, "all the output")
            got = second.stop("stop")
        assert (got["state"], got["error"]) == ("NOT_RUNNING", None), got
    return final_output(bootstrap, dst)


def per_key(got: list[Got]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for g in got:
        out.setdefault(text(g.key), []).append(text(g.value))
    return out


def test_streams_exactly_once_stateless_through_a_kill(jbroker: Broker, tmp_path: Path) -> None:
    """Filter and upper-case under exactly_once_v2, killed -9 with a transaction open (the
    output of a record sent in it) and restarted: read_committed shows every kept record once,
    transformed, each key's records in their input order; the killed run's open transaction
    is there for read_uncommitted only."""

    def batch(start: int) -> list[tuple[str, str]]:
        return [
            (f"k{i % 5}", ("skip" if i % 4 == 0 else "keep") + f"-{i}")
            for i in range(start, start + 80)
        ]

    batches = [batch(n * 80) for n in range(4)]
    stall = ("k0", "keep-stall")
    inputs = [*batches[0], *batches[1], stall, *batches[2], *batches[3]]
    kept = [(k, v.upper()) for k, v in inputs if v.startswith("keep")]
    committed, uncommitted = run_through_a_kill(
        jbroker.bootstrap,
        "stateless",
        tmp_path,
        batches,
        stall,
        shows_stall=lambda g: g.value == b"KEEP-STALL",
        outputs=(60, len(kept)),
    )
    expected: dict[str, list[str]] = {}
    for k, v in kept:
        expected.setdefault(k, []).append(v)
    assert per_key(committed) == expected
    everything = [text(g.value) for g in uncommitted]
    assert everything.count("KEEP-STALL") >= 2, "the killed run's copy and the committed one"
    assert set(everything) == {v for _, v in kept}


def test_streams_exactly_once_counts_through_a_kill(jbroker: Broker, tmp_path: Path) -> None:
    """Counts per word under exactly_once_v2 (a repartition topic, a count store and its
    changelog), killed -9 with a transaction open (a count sent in it) and restarted, its counts
    coming back from what the changelog committed: read_committed shows one count per input
    record, each word's counts 1, 2, 3... once each, in order, ending at the word's total; the
    killed run's open transaction (a second count 1 of the stalled word) is there for
    read_uncommitted only."""

    def batch(start: int) -> list[tuple[str, str]]:
        return [(f"k{i % 5}", f"word-{i % 7}") for i in range(start, start + 70)]

    batches = [batch(n * 70) for n in range(4)]
    stall = ("k0", "stall")
    words = [v for _, v in [*batches[0], *batches[1], stall, *batches[2], *batches[3]]]
    committed, uncommitted = run_through_a_kill(
        jbroker.bootstrap,
        "stateful",
        tmp_path,
        batches,
        stall,
        shows_stall=lambda g: g.key == b"stall",
        outputs=(70, len(words)),
    )
    counts = per_key(committed)
    assert counts == {w: [str(n) for n in range(1, words.count(w) + 1)] for w in set(words)}
    assert per_key(uncommitted)["stall"].count("1") >= 2, "the killed run's count and the new"
