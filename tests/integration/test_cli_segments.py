"""``kafscale segments ls|dump|verify`` on what brokers really stored: a broker keeping segments
in its local data directory, and one keeping them in a moto S3 bucket (every test runs on both).

ls is checked against the object listing, dump against what a confluent-kafka consumer reads
through the broker. verify gets damaged copies (in a temporary directory, or under another
namespace of the bucket; the broker's own objects are never touched), made the way
test_segment_reader.py makes them: a flipped byte inside a batch, a deleted middle segment, a
truncated segment, a missing .index, a segment deleted without its .index. Each must be
reported with its object and offset, exit 1.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import pty
import re
import select
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import segment_format as sf
from support.analytics_env import LocalObjects, S3Objects
from support.cli_runner import CLI_HANG_GUARD, Run, kafscale, one_error_line
from support.clients import Got, Msg, confluent_consume, confluent_produce, unique
from support.cluster import create_topic
from support.procs import S3_ENV

NAMESPACE = "default"
PARTITIONS = 2
ROUNDS = 3  # produce calls, each acknowledged (so in segments) before the next
PER_ROUND = 40  # records per partition per round
SMALL_BATCHES = {"batch.num.messages": 7, "linger.ms": 20}  # several batches per segment


@dataclass
class Place:
    """Segment objects under ``location``: keys ``{namespace}/{topic}/{partition}/...``."""

    location: str
    namespace: str
    store: LocalObjects | S3Objects
    flags: list[str]  # --s3-endpoint / --s3-region for S3
    env: dict[str, str] | None  # AWS credentials for S3

    def run(self, action: str, *args: str, location: str | None = None) -> Run:
        return kafscale(
            "segments", action, location or self.location, *args, *self.flags, env=self.env
        )

    def segment_keys(self, topic: str, partition: int) -> list[str]:
        """The partition's .kfs keys in offset order (names sort by base offset)."""
        prefix = f"{self.namespace}/{topic}/{partition}/"
        return [k for k in self.store.keys(prefix) if k.endswith(".kfs")]

    def delete(self, key: str) -> None:
        if isinstance(self.store, LocalObjects):
            (self.store.root / key).unlink()
        else:
            self.store.s3.delete_object(Bucket=self.store.bucket, Key=key)


@dataclass
class Stored:
    topic: str
    place: Place
    expected: list[Got]  # what a consumer reads, in (partition, offset) order


def messages(round_: int) -> list[Msg]:
    """Null and text keys, binary / null / empty / text values, headers with null values."""
    msgs = []
    for p in range(PARTITIONS):
        for i in range(PER_ROUND):
            key = None if i % 5 == 0 else f"key-{i}".encode()
            value = {0: bytes([0, 255, i]), 1: None, 2: b""}.get(i % 9, f"v{round_}-{i}".encode())
            headers = (("h", b"x"), ("none", None)) if i % 3 == 0 else ()
            msgs.append(Msg(p, key, value, headers))
    return msgs


@pytest.fixture(scope="module", params=["local", "s3"])
def stored(request, module_broker_factory) -> Stored:
    if request.param == "local":
        broker = module_broker_factory(name="seg-local", flush_interval_ms=100)
        place = Place(
            str(broker.data_dir / NAMESPACE), NAMESPACE, LocalObjects(broker.data_dir), [], None
        )
    else:
        moto = request.getfixturevalue("moto")
        bucket = f"kafscale-{uuid.uuid4().hex[:12]}"
        moto.create_bucket(bucket)
        broker = module_broker_factory(
            moto.broker_args(bucket), env=dict(S3_ENV), name="seg-s3", flush_interval_ms=100
        )
        place = Place(
            f"s3://{bucket}/{NAMESPACE}",
            NAMESPACE,
            S3Objects(moto, bucket),
            ["--s3-endpoint", moto.endpoint, "--s3-region", S3_ENV["AWS_REGION"]],
            os.environ | S3_ENV,
        )
    topic = unique("cli-seg")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    for r in range(ROUNDS):
        confluent_produce(broker.bootstrap, topic, messages(r), extra=SMALL_BATCHES)
    total = ROUNDS * PER_ROUND
    got = confluent_consume(broker.bootstrap, topic, dict.fromkeys(range(PARTITIONS), total))
    expected = sorted(got, key=lambda g: (g.partition, g.offset))
    data = Stored(topic, place, expected)
    for p in range(PARTITIONS):  # the damage below needs a middle segment of several batches
        keys = place.segment_keys(topic, p)
        assert len(keys) >= 3, f"partition {p}: only {keys}"
        assert len(sf.parse_segment(place.store.read(keys[1])).batches) >= 2, keys[1]
    return data


def damaged_copy(data: Stored, tmp_path: Path) -> Place:
    """A copy of the topic's objects to damage: a temporary data dir, or another namespace of
    the same bucket."""
    src = data.place
    if isinstance(src.store, LocalObjects):
        place = Place(str(tmp_path / NAMESPACE), NAMESPACE, LocalObjects(tmp_path), [], None)
    else:
        ns = f"copy-{uuid.uuid4().hex[:8]}"
        place = Place(src.location.rsplit("/", 1)[0] + "/" + ns, ns, src.store, src.flags, src.env)
    for key in src.store.keys(f"{src.namespace}/{data.topic}/"):
        place.store.write(place.namespace + key.removeprefix(src.namespace), src.store.read(key))
    return place


def problem_lines(run: Run) -> list[str]:
    return [line for line in run.out.splitlines() if line.startswith("PROBLEM ")]


def offsets(first: int, last: int) -> str:
    """How the CLI says an inclusive range of offsets (never Rust's 7268..=7911)."""
    return f"offset {first}" if first == last else f"offsets {first} to {last}"


# sizes with decimal units (kB, MB) or tqdm's SI letters on 1024-based counts ("3.00M")
NOT_BINARY = re.compile(r"\d ?(kB|MB|GB|[kMG](?![a-zA-Z]))")


# ---------------------------------------------------------------------------------------------
# ls and dump


def test_ls(stored):
    place, topic = stored.place, stored.topic
    rows = json.loads(place.run("ls", "-o", "json").out)
    mine = [r for r in rows if r["topic"] == topic]
    end = ROUNDS * PER_ROUND
    assert [(r["partition"], r["segments"], r["first_offset"], r["end_offset"]) for r in mine] == [
        (p, len(place.segment_keys(topic, p)), 0, end) for p in range(PARTITIONS)
    ]
    run = place.run("ls", "--topic", topic, "--partition", "1", "-o", "json")
    assert run.code == 0, run.err
    segs = json.loads(run.out)
    keys = place.segment_keys(topic, 1)
    assert [f"{NAMESPACE}/{s['object']}" for s in segs] == keys
    assert [s["size"] for s in segs] == [len(place.store.read(k)) for k in keys]
    assert [s["end_offset"] for s in segs[:-1]] == [s["base_offset"] for s in segs[1:]]
    text = place.run("ls", "--topic", topic).out.splitlines()
    assert text[0].split() == ["TOPIC", "PARTITION", "BASE-OFFSET", "END-OFFSET", "SIZE", "OBJECT"]
    assert len(text) == 1 + sum(len(place.segment_keys(topic, p)) for p in range(PARTITIONS))

    run = place.run("ls", "--topic", "cli-seg-missing")
    assert run.code == 1 and "no segments of topic cli-seg-missing" in run.err, run
    assert place.run("ls", "--partition", "0").code == 2


def decoded(record: dict, name: str) -> bytes | None:
    if record[name] is None:
        return None
    if record.get(f"{name}_encoding") == "base64":
        return base64.b64decode(record[name])
    return record[name].encode()


def test_dump_matches_a_consumer(stored):
    place, topic = stored.place, stored.topic
    for p in range(PARTITIONS):
        run = place.run("dump", "--topic", topic, "--partition", str(p), "-o", "json")
        assert run.code == 0, run.err
        got = []
        for line in run.out.splitlines():
            r = json.loads(line)
            stamp = dt.datetime.fromisoformat(r["timestamp"].replace("Z", "+00:00"))
            headers = tuple((h["key"], decoded(h, "value")) for h in r["headers"])
            got.append(
                Got(
                    p,
                    r["offset"],
                    decoded(r, "key"),
                    decoded(r, "value"),
                    headers,
                    int(stamp.timestamp() * 1000),
                )
            )
        assert got == [g for g in stored.expected if g.partition == p], f"partition {p}"

    run = place.run(
        "dump", "--topic", topic, "--partition", "0", "--from-offset", "50", "--max-records", "7"
    )
    lines = run.out.splitlines()
    assert [int(line.split()[0]) for line in lines] == list(range(50, 57)), run.out
    first = next(g for g in stored.expected if (g.partition, g.offset) == (0, 50))
    shown = "null" if first.key is None else json.dumps(first.key.decode())
    assert f"key={shown}" in lines[0], lines[0]
    run = place.run("dump", "--topic", topic, "--partition", "5")
    assert run.code == 1 and f"no segments of {topic}/5" in run.err, run


# ---------------------------------------------------------------------------------------------
# verify


def test_verify_clean(stored):
    """Exit 0 and a summary with every segment and record; progress as whole lines on a
    stderr that is not a terminal (no carriage returns)."""
    run = stored.place.run("verify", "--topic", stored.topic)
    assert run.code == 0, f"{run.out}\n{run.err}"
    segments = sum(len(stored.place.segment_keys(stored.topic, p)) for p in range(PARTITIONS))
    summary = run.out.strip().splitlines()[-1]
    assert summary.startswith(f"verified {PARTITIONS} partitions, {segments} segments, "), summary
    assert f"{ROUNDS * PER_ROUND * PARTITIONS} records" in summary, summary
    assert summary.endswith("no problems"), summary
    assert not problem_lines(run)
    assert f"verify: {segments}/{segments} segments, " in run.err and "\r" not in run.err, run.err
    assert re.search(r"segments, \d+(\.\d)? [KMG]iB of \d+(\.\d)? [KMG]iB \(100%\)", run.err)
    assert not NOT_BINARY.search(run.err + summary), run.err
    every = stored.place.run("verify", "-o", "json", "--no-progress")
    assert every.code == 0 and json.loads(every.out)["problems"] == [], every.out


def middle(place: Place, topic: str, p: int) -> tuple[str, sf.Segment]:
    key = place.segment_keys(topic, p)[1]
    return key, sf.parse_segment(place.store.read(key))


def test_verify_reports_a_flipped_byte(stored, tmp_path):
    place = damaged_copy(stored, tmp_path)
    key, seg = middle(place, stored.topic, 0)
    batch = seg.batches[1]
    raw = bytearray(place.store.read(key))
    raw[batch.position + sf.BATCH_HEADER.size + 3] ^= 0x5A
    place.store.write(key, bytes(raw))
    run = place.run("verify", "--topic", stored.topic)
    assert run.code == 1, run
    name = key.rsplit("/", 1)[1]
    hits = [line for line in problem_lines(run) if name in line]
    assert hits, run.out
    crc = f"batch CRC-32C mismatch (batch at byte {batch.position}, "
    crc += f"{offsets(batch.base_offset, batch.last_offset)})"
    assert any(crc in line for line in hits), run.out
    assert ".." not in run.out, run.out
    assert run.out.strip().splitlines()[-1].endswith("found"), run.out
    report = json.loads(place.run("verify", "--topic", stored.topic, "-o", "json").out)
    at = [p["offset"] for p in report["problems"] if p["object"].endswith(name)]
    assert any(batch.base_offset <= o <= batch.last_offset for o in at if o is not None), report
    assert all(p["partition"] == 0 for p in report["problems"]), report


def test_verify_reports_a_gap(stored, tmp_path):
    place = damaged_copy(stored, tmp_path)
    key, seg = middle(place, stored.topic, 1)
    place.delete(key)
    place.delete(key.removesuffix(".kfs") + ".index")
    run = place.run("verify", "--topic", stored.topic)
    assert run.code == 1, run
    gap = f"gap: {offsets(seg.base_offset, seg.last_offset)} missing"
    assert any(
        gap in line and line.startswith(f"PROBLEM {stored.topic}/1 ") for line in problem_lines(run)
    ), run.out


def test_verify_reports_truncated_segments(stored, tmp_path):
    """A truncated middle segment, and a truncated last one: each is reported, and the damaged
    last one hides none of its partition's other segments."""
    place = damaged_copy(stored, tmp_path)
    key, _ = middle(place, stored.topic, 0)
    last = place.segment_keys(stored.topic, 1)[-1]
    for k in (key, last):
        raw = place.store.read(k)
        place.store.write(k, raw[: len(raw) // 2])
    run = place.run("verify", "--topic", stored.topic)
    assert run.code == 1, run
    for k, p in ((key, 0), (last, 1)):
        name = k.rsplit("/", 1)[1]
        assert any(
            line.startswith(f"PROBLEM {stored.topic}/{p} ") and name in line
            for line in problem_lines(run)
        ), f"{name}:\n{run.out}"
    segments = sum(len(place.segment_keys(stored.topic, p)) for p in range(PARTITIONS))
    assert f"{segments} segments" in run.out, run.out  # every one was walked


def test_verify_reports_a_missing_index(stored, tmp_path):
    place = damaged_copy(stored, tmp_path)
    key, _ = middle(place, stored.topic, 0)
    place.delete(key.removesuffix(".kfs") + ".index")
    run = place.run("verify", "--topic", stored.topic, "--partition", "0")
    assert run.code == 1, run
    stem = key.rsplit("/", 1)[1].removesuffix(".kfs")
    assert any(stem in line and "index" in line.lower() for line in problem_lines(run)), run.out


def test_verify_reports_an_index_without_its_segment(stored, tmp_path):
    """A segment deleted while its .index stays: the last one of a partition (nothing else
    shows that its offsets are gone) and a middle one (also a gap) are each reported at the
    index object, exit 1."""
    place = damaged_copy(stored, tmp_path)
    last = place.segment_keys(stored.topic, 1)[-1]
    mid, seg = middle(place, stored.topic, 0)
    for key in (last, mid):
        place.delete(key)
    run = place.run("verify", "--topic", stored.topic, "--no-progress")
    assert run.code == 1, run
    for key, p in ((last, 1), (mid, 0)):
        index = key.removesuffix(".kfs") + ".index"
        base = int(key.rsplit("-", 1)[1].removesuffix(".kfs"))
        assert any(
            line.startswith(f"PROBLEM {stored.topic}/{p} {index} (offset {base}): ")
            and f"the index has no segment: {key} is missing" in line
            for line in problem_lines(run)
        ), f"{index}:\n{run.out}"
    gap = f"gap: {offsets(seg.base_offset, seg.last_offset)} missing"
    assert any(gap in line for line in problem_lines(run)), run.out
    assert run.out.strip().splitlines()[-1].endswith("3 problems found"), run.out
    report = json.loads(place.run("verify", "--topic", stored.topic, "-o", "json").out)
    orphans = [p for p in report["problems"] if p["object"].endswith(".index")]
    assert sorted(p["partition"] for p in orphans) == [0, 1], report


def test_verify_progress_bar_on_a_terminal(stored):
    """With stderr on a terminal (a pty that reports no size, as some CI runners do) the
    progress is a bar that reaches 100%."""
    place = stored.place
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "kafscale.cli", "segments", "verify", place.location, *place.flags],
        stdout=subprocess.PIPE,
        stderr=follower,
        env=place.env,
    )
    os.close(follower)
    screen = b""
    deadline = time.monotonic() + CLI_HANG_GUARD
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # EIO: the child closed its end
                break
            if not chunk:
                break
            screen += chunk
        elif proc.poll() is not None:
            break
    os.close(leader)
    out = proc.communicate(timeout=CLI_HANG_GUARD)[0].decode()
    assert proc.returncode == 0, (out, screen)
    assert b"100%" in screen and b"verify" in screen, screen
    # sizes and rate in binary units, like every size the CLI prints
    text = screen.decode(errors="replace")
    assert re.search(r"\d B/s|\d(\.\d)? [KMG]iB/s", text), text
    assert re.search(r"[KMG]iB/\d+(\.\d)? [KMG]iB", text), text
    assert not NOT_BINARY.search(text), text
    assert out.strip().endswith("no problems"), out


def test_segments_errors_say_what_to_do(stored, tmp_path):
    place = stored.place
    run = place.run("ls", location=str(tmp_path / "nowhere"))
    assert run.code == 1 and "no such directory" in run.err, run
    if isinstance(place.store, LocalObjects):
        # the broker's data directory without its namespace: one line naming the directory
        # to pass, from ls (with and without --topic) and verify alike
        data_dir = str(Path(place.location).parent)
        for args in (["ls"], ["ls", "--topic", stored.topic], ["verify"]):
            run = place.run(*args, location=data_dir)
            assert run.code == 1 and run.out == "", f"{args}: {run}"
            line = one_error_line(run)
            assert f"{data_dir} is a broker's data directory" in line, line
            assert line.endswith(f"; pass {place.location}"), line
    else:
        for action in ("ls", "verify"):
            run = place.run(action, location=place.location + "-missing")
            assert run.code == 1 and run.out == "", run
            line = one_error_line(run)
            assert f"no segments under {place.location}-missing; " in line, line
            assert "s3://BUCKET/NAMESPACE" in line, line
    if place.env is not None:
        run = place.run("ls", location="s3://kafscale-no-such-bucket/default")
        assert run.code == 1 and "cannot read s3://kafscale-no-such-bucket" in run.err, run
        assert "--s3-endpoint" in run.err, run.err
    empty = tmp_path / "empty"
    empty.mkdir()
    run = kafscale("segments", "verify", str(empty))
    assert run.code == 1 and "no segments under" in run.err, run
