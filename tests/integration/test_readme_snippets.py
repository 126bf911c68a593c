"""The code blocks of README.md, and of the docs/ pages that hold blocks run here, run, or say
why not.

Every fenced block of the ``DOCUMENTS`` gets a stable id (the nearest heading above it and the
block's first line; for a docs/ page, the page's path first: ``docs/cli.md ## Examples :: …``)
and is either run here, against real processes the test starts, or listed in ``NOT_RUN`` with the
reason. A block that is neither fails ``test_every_block_is_run_or_listed``, and so does a listed
id that no longer matches a block, so the documents cannot grow untested snippets silently and
the lists cannot go stale.

Running a block means: its fixed addresses (``127.0.0.1:9092``, the S3 server on ``:9000``, etcd
on ``:2379``, ``s3://bucket/namespace``, ``./kafscale-data/default``) are replaced by the test's
own brokers, moto and etcd (``Env.substitutions``, ``BLOCK_SUBSTITUTIONS``), the topics it reads
hold records, and then shell blocks run under ``bash -euo pipefail`` and Python blocks in a fresh
interpreter, in a temporary working directory with the venv's ``bin`` first on PATH. They must
exit 0 without a traceback, and ``EPILOGUES`` check what the Python blocks computed. Usage lines
of a shell block (``list | describe [TOPIC…]``) are not commands and are left out.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from support.clients import Msg, confluent_produce
from support.cluster import create_topic
from support.procs import S3_ENV, free_port, port_open, tail

ROOT = Path(__file__).resolve().parents[2]
README = "README.md"
# the documents whose blocks are accounted for here: the README, and the docs/ pages that hold
# blocks this test runs (their other blocks are then listed too)
DOCUMENTS = (README, "docs/cli.md", "docs/analytics.md")
VENV_BIN = Path(sys.executable).parent
HANG_GUARD = 180.0  # seconds; stops a hung snippet, never a performance limit
TOPIC = "orders"  # the topic the examples read
PARTITIONS = 6  # as docs/cli.md's `kafscale topics create orders --partitions 6`
RECORDS_P0 = 1500  # the segment example reads partition 0 from offset 1200
PASSWORD = "readme-secret"  # the `$PASSWORD` the users example pipes in

# the README's Spark example, which docs/analytics.md shows too
SPARK_EXAMPLE = (
    "starts Spark, well over the budget of this test on a 2-core machine; "
    "covered by tests/integration/test_spark_source.py::"
    "test_batch_read_equals_what_a_consumer_reads, "
    "::test_etcd_bound_hides_objects_above_the_committed_high_watermark and "
    "::test_stream_restarts_from_its_checkpoint_without_loss_or_duplicates"
)

# id -> why the block is not run here. An id is "heading :: first line of the block", after the
# page's path for a docs/ page.
NOT_RUN = {
    "## Quickstart :: bash tests/run.sh": (
        "runs the whole suite, this test included (it is what CI runs)"
    ),
    "## Running a cluster :: python -m kafscale.broker --broker-id 1 "
    "--broker-addr 0.0.0.0:9092 --broker-host kafka-1 \\": (
        "names hosts kafka-1 and etcd and a real AWS bucket in eu-west-1; the same flags start "
        "every cluster of the suite (tests/support/cluster.py, tests/integration/test_cluster.py)"
    ),
    '### A 3-broker cluster on one machine :: pip install . "moto[server]"        '
    "# KafScale and moto's S3 server": (
        "pip install builds the Rust core (~11 min) and apt-get needs root; "
        "deploy/local-cluster.sh is run by tests/integration/test_local_cluster_script.py"
    ),
    "### Kubernetes :: docker build -f deploy/Dockerfile -t kafscale:0.1.0 .     "
    "# push it where your cluster pulls": "needs docker and a Kubernetes cluster",
    "## Security :: echo 'admin:change-me' > users.txt        "
    "# or a SCRAM user stored with `kafscale users set`": (
        "needs broker.pem/broker.key/ca.pem and the host name `broker`, and starts a "
        "long-running broker on :9093; SASL_SSL with ACLs is covered by "
        "tests/integration/test_acls.py and tests/integration/test_sasl.py"
    ),
    "### Spark :: import os, sys": SPARK_EXAMPLE,
    "docs/analytics.md ## Spark :: import os, sys": SPARK_EXAMPLE,
    'docs/analytics.md ## Spark :: pip install ".[spark,polars,iceberg]"    '
    "# the analytics extras (pyspark, polars, pyiceberg)": (
        "pip installs the extras from PyPI and the jobs start Spark (> 60 s here); the jobs are "
        "covered by "
        "tests/integration/test_iceberg.py::"
        "test_runs_are_incremental_and_the_table_is_what_a_consumer_reads, "
        "tests/integration/test_spark_source.py::test_topic_to_parquet_job_is_incremental and "
        "::test_stream_counts_job_restarts_from_its_checkpoint"
    ),
    "docs/analytics.md ## Iceberg tables :: pyspark --packages "
    "org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:1.11.0,org.xerial:sqlite-jdbc:3.46.1.3 \\": (
        "downloads the Iceberg Spark runtime and sqlite-jdbc jars from Maven Central and starts "
        "an interactive pyspark shell (docs/analytics.md says this set-up is not tested)"
    ),
    "docs/analytics.md ## Iceberg tables :: "
    'spark.table("kafscale.kafscale.orders").where("timestamp >= current_date()").show()': (
        "needs the pyspark session of the block above, with the Iceberg Spark runtime jar"
    ),
    "docs/cli.md # The `kafscale` command :: kafscale topics   list | create | describe | alter | "
    "delete      --bootstrap-server HOST:PORT": "a synopsis of the commands, not command lines",
    "docs/cli.md ## ACLs :: kafscale acls add --allow --principal User:alice --operation Read "
    "--operation Write \\": (
        "a reference with optional parts in brackets (`[--if-exists]`); the Examples block runs "
        "the acls commands, tests/integration/test_acls.py::test_acls_command the others"
    ),
    "docs/cli.md ## Topics :: kafscale topics list": (
        "a reference with optional parts in brackets (`[--partitions 6]`); the Examples block "
        "runs the topics commands, tests/integration/test_cli.py::test_topic_lifecycle the others"
    ),
    "docs/cli.md ## Consumer groups :: kafscale groups list [--state Stable]": (
        "a reference with optional parts in brackets and a group my-group; covered by "
        "tests/integration/test_cli.py::test_group_with_a_live_member and ::test_reset_offsets"
    ),
    "docs/cli.md ## Segments :: kafscale segments ls s3://bucket/default "
    "--s3-endpoint http://127.0.0.1:9000": (
        "a reference with optional parts in brackets (`[--partition 0]`); the Examples block "
        "runs ls, dump and verify, tests/integration/test_cli_segments.py the rest"
    ),
    "docs/cli.md ## For scripts :: kafscale topics list -o json | jq -r '.[].topic'": (
        "needs jq and a group my-group; the JSON output is checked by "
        "tests/integration/test_cli.py and tests/integration/test_cli_segments.py"
    ),
}

# id -> how the block is run here (in the order of DOCUMENTS, each in its own order)
RUN = {
    "## Quickstart :: pip install . && python -m kafscale.broker": "quickstart",
    "## Quickstart :: from confluent_kafka import Consumer, Producer": "python",
    "### polars :: import polars as pl": "python",
    "docs/cli.md ## Examples :: kafscale topics create orders --partitions 6 "
    "--config retention.ms=86400000 --bootstrap-server 127.0.0.1:9092": "shell",
    "docs/analytics.md ## Arrow batches: `kafscale.segment` :: "
    "from kafscale.segment import SegmentSource, committed_bounds": "python",
    "docs/analytics.md ## polars :: import polars as pl": "python",
    "docs/analytics.md ## Iceberg tables :: from pyiceberg.catalog import load_catalog": "iceberg",
}

# text substitutions per block (after the common ones), each must match
BLOCK_SUBSTITUTIONS = {
    # the test produced to `orders` before, so the Examples block's create of it gets a namesake
    "docs/cli.md ## Examples :: kafscale topics create orders --partitions 6 "
    "--config retention.ms=86400000 --bootstrap-server 127.0.0.1:9092": [
        ("kafscale topics create orders ", "kafscale topics create orders-readme "),
    ],
    # the test's venv is the `pip install .`; the broker is stopped by the test
    "## Quickstart :: pip install . && python -m kafscale.broker": [
        ("pip install . && python -m kafscale.broker", "exec python -m kafscale.broker"),
    ],
}

# what each block must hold after the test's substitutions: none of the documents' fixed
# addresses (a snippet must never reach a real service on this machine's default ports)
README_ADDRESSES = (
    "127.0.0.1:9092",
    "127.0.0.1:9000",
    "127.0.0.1:2379",
    "s3://bucket/",
    "./kafscale-data",
    "/abs/path/",
)

RUNNABLE_LANGS = {
    "quickstart": ("sh",),
    "shell": ("sh", "bash", "shell", "console"),
    "python": ("python",),
    "iceberg": ("python",),
}

# what the polars example (the README's, and docs/analytics.md's) must have counted
POLARS_COUNT = f"""
assert orders.select(pl.len()).collect().item() == {RECORDS_P0 + PARTITIONS - 1}
"""

# Python appended to a block after it ran: what it computed is what the test's data says
EPILOGUES = {
    "## Quickstart :: from confluent_kafka import Consumer, Producer": """
assert msg is not None and msg.error() is None, msg and msg.error()
assert (msg.key(), msg.value()) == (b"hello", b"Hello, KafScale!"), (msg.key(), msg.value())
""",
    "### polars :: import polars as pl": POLARS_COUNT,
    "docs/analytics.md ## Arrow batches: `kafscale.segment` :: "
    "from kafscale.segment import SegmentSource, committed_bounds": f"""
assert bounds[0].high_watermark == {RECORDS_P0}, bounds
rows = sum(b.num_rows for b in source.read("orders", 0, 1200, bounds[0].high_watermark))
assert rows == {RECORDS_P0} - 1200, rows
assert batch.column("headers").to_pylist()[0] == [{{"key": "h", "value": b"v"}}]
""",
    "docs/analytics.md ## polars :: import polars as pl": POLARS_COUNT,
    "docs/analytics.md ## Iceberg tables :: from pyiceberg.catalog import load_catalog": f"""
assert rows.num_rows == {RECORDS_P0} and sorted(rows.column_names) == ["offset", "value"]
assert df.height == {RECORDS_P0}
""",
}

KAFKA_SUBCOMMANDS = ("topics", "groups", "brokers", "users", "acls", "quotas")


@dataclass(frozen=True)
class Block:
    doc: str  # the document's path from the repository root
    heading: str
    lang: str
    text: str
    line: int  # 1-based line of the opening fence

    @property
    def id(self) -> str:
        first = self.text.split("\n", 1)[0].strip()
        page = "" if self.doc == README else f"{self.doc} "
        return f"{page}{self.heading} :: {first}"


def document_blocks(doc: str, text: str) -> list[Block]:
    blocks: list[Block] = []
    heading = "(top)"
    fence: tuple[str, int, list[str]] | None = None
    for n, line in enumerate(text.splitlines(), 1):
        m = re.match(r"^\s*```(\S*)\s*$", line)
        if fence is None:
            if m:
                fence = (m.group(1), n, [])
            elif re.match(r"^#{1,6} ", line):
                heading = line.strip()
        elif m and not m.group(1):
            lang, start, body = fence
            blocks.append(Block(doc, heading, lang, "\n".join(body), start))
            fence = None
        else:
            fence[2].append(line)
    assert fence is None, f"{doc}: the block opened on line {fence[1]} is never closed"
    return blocks


def read_documents() -> dict[str, str]:
    return {doc: (ROOT / doc).read_text() for doc in DOCUMENTS}


def all_blocks(texts: dict[str, str]) -> list[Block]:
    return [b for doc, text in texts.items() for b in document_blocks(doc, text)]


BLOCKS = {b.id: b for b in all_blocks(read_documents())}


def accounting_problems(blocks: list[Block]) -> list[str]:
    """What is wrong between the documents' blocks and this test's lists (nothing: [])."""
    ids = [b.id for b in blocks]
    problems = [
        f"two blocks with the id (heading :: first line) {i!r}"
        for i in sorted({i for i in ids if ids.count(i) > 1})
    ]
    problems += [
        f"{b.doc} line {b.line}: block {b.id!r} ({b.lang or 'no language'}) is neither run by "
        "this test (RUN) nor listed in NOT_RUN with a reason"
        for b in blocks
        if b.id not in RUN and b.id not in NOT_RUN
    ]
    listed = set(RUN) | set(NOT_RUN) | set(BLOCK_SUBSTITUTIONS) | set(EPILOGUES)
    problems += [
        f"{i!r} is listed in this test but is no longer a block of {', '.join(DOCUMENTS)}"
        for i in sorted(listed - set(ids))
    ]
    problems += [f"{i!r} is both in RUN and in NOT_RUN" for i in sorted(set(RUN) & set(NOT_RUN))]
    problems += [
        f"{b.id!r} is run but is a {b.lang or 'no-language'} block"
        for b in blocks
        if b.id in RUN and b.lang not in RUNNABLE_LANGS.get(RUN[b.id], ())
    ]
    return problems


def test_every_block_is_run_or_listed():
    problems = accounting_problems(all_blocks(read_documents()))
    assert not problems, "\n".join(problems)


def test_a_new_or_removed_block_fails_the_accounting():
    """The guard itself: an extra block, in the README or a docs/ page, and a listed block gone
    are all reported."""
    texts = read_documents()
    new = "\n## Something new\n\n```sh\nkafscale topics list\n```\n"
    for doc, page in ((README, ""), ("docs/analytics.md", "docs/analytics.md ")):
        extra = {**texts, doc: texts[doc] + new}
        assert accounting_problems(all_blocks(extra)) == [
            f"{doc} line {len(texts[doc].splitlines()) + 4}: block '{page}## Something new :: "
            "kafscale topics list' (sh) is neither run by this test (RUN) nor listed in NOT_RUN "
            "with a reason"
        ]
    gone = texts[README].replace("```sh\nbash tests/run.sh\n```\n", "")
    assert gone != texts[README]
    assert accounting_problems(all_blocks({**texts, README: gone})) == [
        "'## Quickstart :: bash tests/run.sh' is listed in this test but is no longer a block of "
        f"{', '.join(DOCUMENTS)}"
    ]


# ---------------------------------------------------------------------------------------------
# the processes the snippets talk to


@dataclass
class Env:
    bootstrap: str  # the cluster broker (S3 + etcd)
    bucket: str
    s3_endpoint: str
    etcd_endpoint: str
    local_data: Path  # the single broker's data dir (segments on local disk)

    def substitutions(self) -> list[tuple[str, str]]:
        return [
            ("s3://bucket/namespace", f"s3://{self.bucket}/default"),
            ("s3://bucket/default", f"s3://{self.bucket}/default"),
            ("http://127.0.0.1:9000", self.s3_endpoint),
            ("http://127.0.0.1:2379", self.etcd_endpoint),
            ('"namespace", "orders"', '"default", "orders"'),  # committed_bounds' namespace
            ("./kafscale-data/default", str(self.local_data / "default")),
            ("127.0.0.1:9092", self.bootstrap),
        ]


def produce_orders(bootstrap: str) -> None:
    create_topic(bootstrap, TOPIC, PARTITIONS)
    base = int(time.time() * 1000) - 60_000
    msgs = [
        Msg(0, f"k{i}".encode(), f"order {i}".encode(), (("h", b"v"),), base + i)
        for i in range(RECORDS_P0)
    ]
    msgs += [Msg(p, b"k", f"order on {p}".encode(), (), base) for p in range(1, PARTITIONS)]
    confluent_produce(bootstrap, TOPIC, msgs)


# the end offset of each partition of `orders` once produced
ENDS = {p: RECORDS_P0 if p == 0 else 1 for p in range(PARTITIONS)}


def wait_until(what: str, check) -> None:
    """Until ``check()`` is true (compaction catches up within moments; the limit is a
    liveness guard only)."""
    deadline = time.monotonic() + HANG_GUARD
    while not check():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.2)


def segment_ends(location: str, **kwargs) -> dict[int, int]:
    from kafscale.segment import SegmentSource

    source = SegmentSource.open(location, **kwargs)
    return {
        p: max((s.end_offset for s in source.segments(TOPIC, p)), default=0)
        for p in range(PARTITIONS)
    }


def committed_ends(etcd_endpoint: str) -> dict[int, int]:
    from kafscale.segment import committed_bounds

    bounds = committed_bounds(etcd_endpoint, "default", TOPIC)
    return {p: b.high_watermark for p, b in bounds.items()}


@pytest.fixture(scope="module")
def env(module_cluster, module_broker_factory, moto):
    # ACLs need an authorizer; the test's clients connect as User:ANONYMOUS, a super user
    cluster = module_cluster(
        1,
        args=[
            "--default-partitions",
            str(PARTITIONS),
            "--authorizer",
            "acl",
            "--super-users",
            "User:ANONYMOUS",
        ],
    )
    local = module_broker_factory(["--default-partitions", str(PARTITIONS)], name="local")
    for b in (cluster.bootstrap(), local.bootstrap):
        produce_orders(b)
    local_segments = str(local.data_dir / "default")
    wait_until(
        f"segments of {TOPIC} up to {ENDS} in {local_segments}",
        lambda: segment_ends(local_segments) == ENDS,
    )
    # the README's readers stop at the committed end in etcd: wait until it is the topic's end
    wait_until(
        f"committed segments of {TOPIC} up to {ENDS} in etcd",
        lambda: committed_ends(cluster.etcd.endpoint) == ENDS,
    )
    return Env(
        cluster.bootstrap(), cluster.bucket, moto.endpoint, cluster.etcd.endpoint, local.data_dir
    )


def snippet_env(s3_endpoint: str) -> dict[str, str]:
    """The snippets' environment: moto's credentials, and its endpoint for the commands that
    name none (`kafscale segments verify s3://bucket/default`), as docs/analytics.md says S3
    settings not given come from the AWS variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KAFSCALE_", "AWS_"))}
    env.update(S3_ENV)
    env["AWS_ENDPOINT_URL_S3"] = s3_endpoint
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PASSWORD"] = PASSWORD
    env["PYSPARK_PYTHON"] = sys.executable
    return env


def prepared(block: Block, env: Env) -> str:
    text = block.text
    for old, new in BLOCK_SUBSTITUTIONS.get(block.id, []):
        assert old in text, f"{block.id}: the test replaces {old!r}, no longer in the block"
        text = text.replace(old, new)
    for old, new in env.substitutions():
        text = text.replace(old, new)
    left = [a for a in README_ADDRESSES if a in text]
    assert not left, f"{block.id}: the test does not replace {left} in:\n{text}"
    return text + EPILOGUES.get(block.id, "")


def shell_script(text: str, bootstrap: str) -> str:
    """A shell block with ``--bootstrap-server`` added where a Kafka command relies on the
    default 127.0.0.1:9092."""
    run = []
    for line in text.splitlines():
        if re.search(rf"\bkafscale ({'|'.join(KAFKA_SUBCOMMANDS)})\b", line) and (
            "--bootstrap-server" not in line
        ):
            code, sep, comment = line.partition("  #")
            line = f"{code.rstrip()} --bootstrap-server {bootstrap}{'  #' if sep else ''}{comment}"
        run.append(line)
    return "\n".join(run)


def run_checked(argv: list[str], env: Env, cwd: Path, what: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        argv,
        cwd=cwd,
        env=snippet_env(env.s3_endpoint),
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=HANG_GUARD,
        check=False,
    )
    report = (
        f"{what}\n--- exit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    )
    assert proc.returncode == 0, report
    assert "Traceback" not in proc.stderr, report
    return proc


def run_shell(block: Block, env: Env, cwd: Path) -> None:
    script = shell_script(prepared(block, env), env.bootstrap)
    run_checked(["bash", "-euo", "pipefail", "-c", script], env, cwd, script)


def run_python(block: Block, env: Env, cwd: Path) -> subprocess.CompletedProcess:
    code = prepared(block, env)
    path = cwd / "snippet.py"
    path.write_text(code)
    return run_checked([sys.executable, str(path)], env, cwd, code)


def run_quickstart(block: Block, env: Env, cwd: Path) -> None:
    """The broker of the Quickstart, in the background on a free port (set through its
    KAFSCALE_* variable, the command stays the README's): it listens, and SIGTERM stops it
    with exit code 0."""
    script = prepared(block, env)
    port = free_port()
    penv = snippet_env(env.s3_endpoint)
    penv["KAFSCALE_BROKER_ADDR"] = f"127.0.0.1:{port}"
    log = cwd / "quickstart.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=cwd,
            env=penv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + HANG_GUARD
        marker = f"listening on 127.0.0.1:{port}"
        while not (marker in log.read_text(errors="replace") and port_open("127.0.0.1", port)):
            assert proc.poll() is None, f"the broker exited {proc.returncode}:\n{tail(log)}"
            assert time.monotonic() < deadline, f"the broker never listened:\n{tail(log)}"
            time.sleep(0.1)
        assert (cwd / "kafscale-data").is_dir(), tail(log)
        listed = run_checked(
            ["kafscale", "brokers", "list", "--bootstrap-server", f"127.0.0.1:{port}"],
            env,
            cwd,
            "kafscale brokers list against the Quickstart's broker",
        )
        assert f"127.0.0.1:{port}" in listed.stdout, listed.stdout
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=HANG_GUARD)
        assert code == 0, f"SIGTERM: exit {code}:\n{tail(log)}"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def write_iceberg_table(env: Env, warehouse: Path) -> None:
    """The table spark/topic_to_iceberg.py keeps for `orders` (its columns and its
    `kafscale.offsets` snapshot property), written with pyiceberg from the topic's segments
    instead of by the Spark job (Spark alone is over a minute here)."""
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog

    from kafscale.segment import SegmentSource

    source = SegmentSource.open(str(env.local_data / "default"))
    batches, ends = [], {}
    for p in source.partitions(TOPIC):
        end = source.segments(TOPIC, p)[-1].end_offset
        ends[str(p)] = end
        batches += list(source.read(TOPIC, p, 0, end))
    rows = pa.Table.from_batches(batches)
    rows = rows.set_column(
        rows.schema.get_field_index("timestamp"),
        "timestamp",
        rows.column("timestamp").cast(pa.timestamp("us", tz="UTC")),
    )
    warehouse.mkdir()
    catalog = SqlCatalog(
        "kafscale", uri=f"sqlite:///{warehouse}/catalog.db", warehouse=f"file://{warehouse}"
    )
    catalog.create_namespace("kafscale")
    table = catalog.create_table("kafscale.orders", schema=rows.schema)
    table.append(rows, snapshot_properties={"kafscale.offsets": json.dumps({TOPIC: ends})})


def run_iceberg(block: Block, env: Env, cwd: Path) -> None:
    warehouse = cwd / "iceberg-warehouse"
    write_iceberg_table(env, warehouse)
    abs_path = "file:///abs/path/iceberg-warehouse"
    assert abs_path in block.text, f"{block.id}: no {abs_path!r} for the test to replace"
    block = replace(block, text=block.text.replace(abs_path, f"file://{warehouse}"))
    proc = run_python(block, env, cwd)
    assert f'"{TOPIC}"' in proc.stdout, proc.stdout  # the offsets the snippet prints


RUNNERS = {
    "quickstart": run_quickstart,
    "shell": run_shell,
    "python": run_python,
    "iceberg": run_iceberg,
}


@pytest.mark.parametrize("block_id", list(RUN))
def test_readme_block_runs(block_id, env, tmp_path):
    block = BLOCKS.get(block_id)
    if block is None:
        pytest.fail(f"no block {block_id!r} any more (see test_every_block_is_run_or_listed)")
    RUNNERS[RUN[block_id]](block, env, tmp_path)
