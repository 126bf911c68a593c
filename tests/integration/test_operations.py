"""The operations endpoint (KAFSCALE_METRICS_ADDR: /metrics, /healthz, /readyz) and the log
format settings, against real brokers, etcd and moto."""

from __future__ import annotations

import http.client
import json
import re
import ssl
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.openmetrics.parser import text_string_to_metric_families
from prometheus_client.parser import text_string_to_metric_families as prometheus_text_families
from support import admin_wire as aw
from support import group_wire as gw
from support import kafka_wire as kw
from support import quotas
from support import segment_format as sf
from support.admin_clients import ConfluentAdmin
from support.group_traffic import consumed_and_committed, produce
from support.kafka_wire import RawConnection
from support.procs import free_port, paused
from support.tls import make_pki

pytestmark = pytest.mark.timeout(180)


def get(url: str) -> tuple[int, str, str]:
    """(status, content type, body) of a GET; HTTP errors are answers too."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read().decode()


class Endpoint:
    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"

    def get(self, path: str) -> tuple[int, str, str]:
        return get(self.base + path)

    def samples(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """Every sample of /metrics, parsed by the OpenMetrics parser (which rejects a
        malformed exposition), keyed by (name, sorted labels)."""
        status, content_type, body = self.get("/metrics")
        assert status == 200, body
        assert content_type.startswith("application/openmetrics-text"), content_type
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(body)
            for s in family.samples
        }

    def wait_sample(self, name: str, labels: dict[str, str], want: float, timeout: float = 15):
        key = (name, tuple(sorted(labels.items())))
        deadline = time.monotonic() + timeout
        while True:
            value = self.samples().get(key)
            if value == want or time.monotonic() > deadline:
                return value
            time.sleep(0.2)

    def wait_ready(self, want: int, timeout: float = 20) -> str:
        deadline = time.monotonic() + timeout
        while True:
            status, _, body = self.get("/readyz")
            if status == want or time.monotonic() > deadline:
                assert status == want, f"/readyz answered {status}, not {want}:\n{body}"
                return body
            time.sleep(0.2)


OPERATIONS_DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def served_families(endpoint: Endpoint) -> dict[str, tuple[str, frozenset[str]]]:
    """Each metric family of /metrics as docs/operations.md names it (counters with their _total),
    with its type and label names."""
    status, _, body = endpoint.get("/metrics")
    assert status == 200, body
    out = {}
    for family in text_string_to_metric_families(body):
        name = family.name + ("_total" if family.type == "counter" else "")
        labels = {label for sample in family.samples for label in sample.labels}
        out[name] = (family.type, frozenset(labels - {"le"}))  # le: a histogram's buckets
    return out


def documented_metrics_table() -> dict[str, tuple[str, frozenset[str]]]:
    """docs/operations.md's metrics table: metric, type and label names of each row."""
    rows = {}
    in_table = False
    for line in OPERATIONS_DOC.read_text().splitlines():
        if line.startswith("| Metric | Type | Labels |"):
            in_table = True
            continue
        if in_table and not line.startswith("|"):
            break
        if in_table and not line.startswith("|---"):
            metric, kind, labels = (cell.strip() for cell in line.strip("|").split("|")[:3])
            rows[metric.strip("`")] = (kind, frozenset(re.findall(r"`([a-z_]+)`", labels)))
    assert rows, "no metrics table in docs/operations.md"
    return rows


def with_endpoint(start, args: list[str] | None = None, **kw) -> tuple[object, Endpoint]:
    port = free_port()
    broker = start(["--metrics-addr", f"127.0.0.1:{port}", *(args or [])], **kw)
    return broker, Endpoint(port)


def test_group_lag_is_reported_after_a_restart_without_any_group_request(broker_factory):
    """A group whose consumers are down sends nothing: after a restart its coordinator takes
    it up from the store on its own, so the lag series (the one an alert watches) exists."""
    broker, endpoint = with_endpoint(broker_factory, env={"KAFSCALE_DEFAULT_PARTITIONS": "2"})
    topic, group = f"adopt-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    produce(broker.bootstrap, topic, 40)  # 20 records per partition
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        committed = [TopicPartition(topic, 0, 15), TopicPartition(topic, 1, 18)]
        consumer.commit(offsets=committed, asynchronous=False)
    finally:
        consumer.close()
    broker.restart()
    endpoint.wait_ready(200)
    for partition, lag in (("0", 5), ("1", 2)):
        labels = {"group": group, "topic": topic, "partition": partition}
        assert endpoint.wait_sample("kafscale_consumer_group_lag", labels, lag) == lag
    assert "took up 1 stored group(s)" in broker.log_text()


def throttle_a_client(bootstrap: str, endpoint: Endpoint) -> None:
    """The quota series exist once a quota meters a client: a request_percentage so small
    that any request of client id `ops-quota` is throttled (a request throttle is at most 1 s)."""
    entity = (("client-id", "ops-quota"),)
    quotas.alter(bootstrap, entity, {"request_percentage": 0.0001})
    labels = (("entity", quotas.label(entity)), ("quota", "request_percentage"))
    deadline = time.monotonic() + 30  # the broker follows the store within moments
    while ("kafscale_quota_throttled_total", labels) not in endpoint.samples():
        assert time.monotonic() < deadline, "the quota never throttled its client"
        with kw.RawConnection.to(bootstrap) as conn:
            conn.request(kw.METADATA, 1, kw.metadata_body(1, []), client_id="ops-quota")


def test_metrics_health_and_group_lag_on_a_single_broker(broker_factory):
    cleaner = ["--log-cleaner-backoff-ms", "200"]  # its gauges of a compacted topic, below
    broker, endpoint = with_endpoint(
        broker_factory, cleaner, env={"KAFSCALE_DEFAULT_PARTITIONS": "2"}
    )
    assert endpoint.get("/healthz")[0::2] == (200, "ok\n")
    body = endpoint.wait_ready(200)
    assert body.splitlines() == ["metadata store: ok", "object store: ok", "serving: ok"]
    assert endpoint.get("/nope")[0] == 404

    topic, group = f"ops-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    produce(broker.bootstrap, topic, 40)
    with consumed_and_committed(broker.bootstrap, topic, group, 40):
        produce(broker.bootstrap, topic, 10)  # 5 more per partition, not yet consumed

        for partition in ("0", "1"):
            labels = {"group": group, "topic": topic, "partition": partition}
            assert endpoint.wait_sample("kafscale_consumer_group_lag", labels, 5) == 5
        samples = endpoint.samples()
        assert samples[("kafscale_group_members", (("group", group), ("state", "Stable")))] == 1
        assert samples[("kafscale_coordinated_groups", ())] == 1

    compacted = f"ops-compacted-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    new = NewTopic(compacted, 1, 1, config={"cleanup.policy": "compact"})
    admin.create_topics([new])[compacted].result(timeout=30)
    labels = {"topic": compacted, "partition": "0"}
    assert endpoint.wait_sample("kafscale_cleaner_dirty_ratio", labels, 0.0) == 0.0
    throttle_a_client(broker.bootstrap, endpoint)
    assert served_families(endpoint) == documented_metrics_table()
    assert samples[("kafscale_partitions_without_owner", ())] == 0

    by_topic = (("topic", topic),)
    assert samples[("kafscale_produce_records_total", by_topic)] == 50
    assert samples[("kafscale_produce_bytes_total", by_topic)] > 50 * 100
    assert samples[("kafscale_produce_requests_total", by_topic)] >= 2
    assert samples[("kafscale_fetch_requests_total", by_topic)] >= 1
    assert samples[("kafscale_fetch_records_total", by_topic)] >= 40
    assert samples[("kafscale_fetch_bytes_total", by_topic)] > 40 * 100
    assert samples[("kafscale_owned_partitions", ())] >= 2
    for api in ("Produce", "Fetch", "Metadata", "JoinGroup", "SyncGroup", "OffsetCommit"):
        assert samples[("kafscale_request_duration_seconds_count", (("api", api),))] >= 1, api
    assert samples[("kafscale_flush_duration_seconds_count", ())] >= 2
    assert samples[("kafscale_object_store_upload_duration_seconds_count", ())] >= 4
    assert samples[("kafscale_flush_errors_total", ())] == 0
    assert samples[("kafscale_object_store_upload_errors_total", ())] == 0
    # the embedded default is metered like etcd: every commit is a metadata txn
    txns = (("operation", "txn"), ("store", "embedded"))
    txn_count = samples[("kafscale_metadata_request_duration_seconds_count", txns)]
    assert txn_count >= samples[("kafscale_wal_commits_total", ())] >= 1
    hits, misses = (samples[(f"kafscale_cache_{kind}_total", ())] for kind in ("hits", "misses"))
    assert hits + misses >= 1
    assert samples[("kafscale_cache_bytes", ())] >= 0


def test_readiness_follows_the_metadata_and_object_stores(cluster, moto, etcd):
    # A long lease, so pausing etcd for a few seconds does not end the broker's session.
    c = cluster(1, lease_ttl_ms=20_000)
    broker, endpoint = with_endpoint(lambda args: c.add(args=args))
    c.wait_converged()
    endpoint.wait_ready(200)

    with paused(moto):
        body = endpoint.wait_ready(503)
        assert "object store: no answer" in body and "metadata store: ok" in body, body
        assert endpoint.get("/healthz")[0] == 200, "liveness must not follow a store outage"
    endpoint.wait_ready(200)

    with paused(etcd):
        body = endpoint.wait_ready(503)
        assert "metadata store: no answer" in body, body
    endpoint.wait_ready(200)

    samples = endpoint.samples()
    for operation in ("get", "range", "txn"):
        labels = (("operation", operation), ("store", "etcd"))
        assert samples[("kafscale_metadata_request_duration_seconds_count", labels)] >= 1, operation
    assert broker.running


def test_json_logs_from_both_sides_share_one_shape(broker_factory):
    broker = broker_factory(env={"KAFSCALE_LOG_FORMAT": "json", "KAFSCALE_LOG_LEVEL": "debug"})
    produce(broker.bootstrap, f"logs-{uuid.uuid4().hex[:8]}", 2)
    assert broker.terminate() == 0
    lines = [
        line
        for line in broker.log_text().splitlines()
        if line.strip() and not line.startswith("=====")
    ]
    entries = [json.loads(line) for line in lines]  # every line is one JSON object
    for entry in entries:
        assert {"timestamp", "level", "target", "message"} <= entry.keys(), entry
    targets = {e["target"] for e in entries}
    assert any(t.startswith("kafscale::") for t in targets), targets  # the Rust core
    assert "kafscale.broker" in targets  # the Python control plane
    assert "DEBUG" in {e["level"] for e in entries}


def test_metrics_address_problems_are_reported(broker_factory):
    bad = broker_factory(["--metrics-addr", "nonsense"], start=False).start(wait=False)
    assert bad.wait_exit() == 2
    assert "metrics" in bad.log_text().lower() and "nonsense" in bad.log_text()

    taken, endpoint = with_endpoint(broker_factory)
    port = endpoint.base.rsplit(":", 1)[1]
    clash = broker_factory(["--metrics-addr", f"127.0.0.1:{port}"], start=False)
    assert clash.start(wait=False).wait_exit() == 1
    assert (
        f"127.0.0.1:{port} is in use by another process: stop it or pass --metrics-addr HOST:PORT"
    ) in clash.log_text()
    assert taken.running


# Group ids have no character rules: each of these once forged a series or broke the page.
HOSTILE_GROUPS = [
    'quote"',
    "new\nline",
    "back\\slash",
    'x"} 1\nkafscale_forged_total{topic="y',
    '\\n\\"',
]


def test_metrics_escape_names_and_keep_series_only_for_what_exists(broker_factory):
    broker, endpoint = with_endpoint(broker_factory, ["--no-auto-create-topics"])
    topic = f"ops-{uuid.uuid4().hex[:8]}"
    with RawConnection.to(broker.bootstrap) as conn:
        # Kafka's topic name rules keep quotes and newlines out of topic labels altogether.
        refused = aw.create_topics(conn, [aw.NewTopicSpec('bad"\nname\\', 1)])
        assert [t.error_code for t in refused] == [aw.INVALID_TOPIC_EXCEPTION]
        assert aw.create_topics(conn, [aw.NewTopicSpec(topic, 2)])[0].error_code == aw.NONE
        produce(broker.bootstrap, topic, 4)  # 2 records per partition
        for group in HOSTILE_GROUPS:
            commit = gw.offset_commit(conn, group, {(topic, 0): gw.CommitOffset(1)})
            assert commit == {(topic, 0): gw.NONE}, group

        # Requests naming topics that do not exist (long names, no auto-create) add no series.
        ghosts = [f"{i}-" + "g" * 30_000 for i in range(20)]
        for ghost in ghosts:
            assert kw.produce(conn, ghost, 0, one_record()).error_code in (
                kw.UNKNOWN_TOPIC_OR_PARTITION,
                kw.INVALID_TOPIC_EXCEPTION,
            )
            assert kw.fetch(conn, ghost, 0, 0, max_wait_ms=0).error_code == (
                kw.UNKNOWN_TOPIC_OR_PARTITION
            )

        for group in HOSTILE_GROUPS:
            labels = {"group": group, "topic": topic, "partition": "0"}
            assert endpoint.wait_sample("kafscale_consumer_group_lag", labels, 1) == 1, group
        body = endpoint.get("/metrics")[2]
        # Both parsers read the page back: the OpenMetrics one (via samples) and the classic one.
        samples = endpoint.samples()
        classic = {s.name for f in prometheus_text_families(body) for s in f.samples}
        assert "kafscale_forged_total" not in classic
        assert not any(name.startswith("kafscale_forged") for name, _ in samples)
        groups = {
            dict(labels)["group"] for name, labels in samples if name.startswith("kafscale_group")
        }
        assert groups == set(HOSTILE_GROUPS)
        topics = {dict(labels).get("topic") for _, labels in samples} - {None}
        assert topics == {topic}, "series only for the served topic"
        assert len(body) < 100_000, f"a {len(body)}-byte page"

        # A deleted topic's series, and a deleted group's, go with them.
        assert aw.delete_topics(conn, [topic])[0].error_code == aw.NONE
        deleted = ConfluentAdmin(broker.bootstrap).delete_groups(HOSTILE_GROUPS[:2])
        assert deleted == dict.fromkeys(HOSTILE_GROUPS[:2], 0)
    deadline = time.monotonic() + 15
    while True:
        samples = endpoint.samples()
        left = [labels for _, labels in samples if ("topic", topic) in labels]
        groups = {dict(labels).get("group") for _, labels in samples} - {None}
        if (not left and groups == set(HOSTILE_GROUPS[2:])) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert left == [], left
    assert groups == set(HOSTILE_GROUPS[2:])


def one_record() -> bytes:
    return sf.build_record_batch([(None, b"v", [])])


def test_the_endpoint_over_tls_with_a_bearer_token(broker_factory, tmp_path):
    """--metrics-tls serves the endpoint with the SSL listeners' certificate; with
    --metrics-token-file, /metrics wants the token (read on each request, so a rotation
    applies at once) while the probes stay open; plain HTTP gets no answer."""
    pki = make_pki(tmp_path / "pki")
    token = tmp_path / "metrics-token"
    token.write_text("s3cret\n")
    port = free_port()
    args = ["--metrics-addr", f"127.0.0.1:{port}", "--metrics-tls"]
    broker_factory([*args, "--metrics-token-file", str(token), *pki.broker_args()])
    context = ssl.create_default_context(cafile=str(pki.ca.cert))

    def fetch(path: str, bearer: str | None = None) -> tuple[int, str]:
        request = urllib.request.Request(f"https://127.0.0.1:{port}{path}")
        if bearer is not None:
            request.add_header("Authorization", f"Bearer {bearer}")
        try:
            with urllib.request.urlopen(request, timeout=10, context=context) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    assert fetch("/healthz") == (200, "ok\n")
    assert fetch("/readyz")[0] in (200, 503)  # answered without a token either way
    assert fetch("/metrics")[0] == 401
    assert fetch("/metrics", "wrong")[0] == 401
    status, body = fetch("/metrics", "s3cret")
    assert status == 200 and "kafscale_" in body, body[:200]
    token.write_text("rotated\n")
    assert fetch("/metrics", "s3cret")[0] == 401
    assert fetch("/metrics", "rotated")[0] == 200
    with pytest.raises((urllib.error.URLError, ConnectionError, http.client.HTTPException)):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10)
