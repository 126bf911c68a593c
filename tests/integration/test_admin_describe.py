"""DescribeCluster and DescribeTopicPartitions, what admin clients ask to describe the cluster
and its topics, on one broker and on a 3-broker cluster: confluent-kafka's describe_cluster()
names the cluster, a live controller and the brokers Metadata lists; on the raw wire every
broker answers the same at v0 and v1, and refuses other endpoint types as Kafka does.
kafka-python's describe_topic_partitions() gets topics in name order with Metadata's leaders,
pages through them with the cursor, and the errors Kafka gives.
"""

from __future__ import annotations

from support import admin_env
from support import admin_wire as aw
from support import kafka_wire as kw
from support.admin_env import log
from support.clients import unique
from support.cluster import METADATA_VERSION

# one broker, then a 3-broker cluster (etcd + moto): every test runs on both
genv = admin_env.genv

TIMEOUT_S = 30.0


def metadata_view(bootstrap: str) -> kw.MetadataResponse:
    with kw.RawConnection.to(bootstrap, timeout=10) as conn:
        return kw.metadata(conn, [], version=METADATA_VERSION, allow_auto_topic_creation=False)


def test_confluent_describe_cluster(genv):
    """describe_cluster(): the cluster id and brokers (id, host, port) Metadata gives, and a
    controller that is one of them."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": genv.bootstrap()})
    described = admin.describe_cluster(request_timeout=TIMEOUT_S).result(TIMEOUT_S)
    md = metadata_view(genv.live[0].bootstrap)
    nodes = sorted((n.id, n.host, n.port) for n in described.nodes)
    assert nodes == sorted(md.brokers), (nodes, md.brokers)
    assert len(nodes) == len(genv.live), nodes
    assert described.cluster_id == md.cluster_id, (described.cluster_id, md.cluster_id)
    assert described.controller is not None and described.controller.id == md.controller_id
    log(genv, f"describe_cluster: {described.cluster_id} controller {described.controller.id}")


def test_describe_cluster_on_the_wire(genv):
    """Every broker, v0 and v1: no error, the same cluster id, controller and brokers as its
    Metadata, authorized operations 'unknown'; v1 answers a broker endpoint (1). Asked for the
    controllers' endpoints (2): MISMATCHED_ENDPOINT_TYPE; an unknown type:
    UNSUPPORTED_ENDPOINT_TYPE; each with a message and no brokers."""
    for b in genv.live:
        md = metadata_view(b.bootstrap)
        with kw.RawConnection.to(b.bootstrap) as conn:
            for version in (0, 1):
                got = aw.describe_cluster(conn, version=version)
                assert (got.error_code, got.error_message) == (aw.NONE, None), got
                assert got.endpoint_type == (1 if version else None), got
                assert (got.cluster_id, got.controller_id) == (md.cluster_id, md.controller_id)
                brokers = [(node, host, port) for node, host, port, _ in got.brokers]
                assert brokers == sorted(md.brokers), f"{b.name} v{version}: {got.brokers}"
                assert all(rack is None for *_, rack in got.brokers), got.brokers
                assert got.authorized_operations == -(2**31), got
            for endpoint, code in (
                (2, aw.MISMATCHED_ENDPOINT_TYPE),
                (0, aw.UNSUPPORTED_ENDPOINT_TYPE),
                (9, aw.UNSUPPORTED_ENDPOINT_TYPE),
            ):
                got = aw.describe_cluster(conn, endpoint_type=endpoint)
                assert (got.error_code, got.brokers) == (code, []), f"{b.name}: {got}"
                assert got.error_message, got


# ---------------------------------------------------------------------------------------------
# DescribeTopicPartitions (KIP-966), through kafka-python's describe_topic_partitions


def topic_partitions(client, topics: list[str], limit: int = 2000, cursor=None) -> dict:
    return client.describe_topic_partitions(topics, response_partition_limit=limit, cursor=cursor)


def test_describe_topic_partitions(genv):
    """Topics answered in name order with their ids and every partition's leader, epoch and
    replicas as Metadata has them; a missing topic UNKNOWN_TOPIC_OR_PARTITION, a bad name
    INVALID_TOPIC_EXCEPTION; with no topic named, every topic. Paging: a limit of 2 walks
    the topics with next_cursor, every partition exactly once; a cursor on a topic not asked
    for is INVALID_REQUEST for every topic asked."""
    from kafka.admin import KafkaAdminClient

    tag = unique("dtp")
    a, b = genv.new_topic(f"{tag}-a", 3), genv.new_topic(f"{tag}-b", 2)
    missing = f"{tag}-c"
    with kw.RawConnection.to(genv.live[0].bootstrap, timeout=10) as conn:
        md = kw.metadata(conn, [a, b], version=METADATA_VERSION, allow_auto_topic_creation=False)
    client = KafkaAdminClient(bootstrap_servers=genv.bootstrap())
    try:
        got = topic_partitions(client, [missing, b, a, "bad/name"])
        assert got["next_cursor"] is None, got
        names = [(t["name"], t["error_code"]) for t in got["topics"]]
        assert names == [
            ("bad/name", aw.INVALID_TOPIC_EXCEPTION),
            (a, 0),
            (b, 0),
            (missing, aw.UNKNOWN_TOPIC_OR_PARTITION),
        ], names
        by_name = {t["name"]: t for t in got["topics"]}
        for name in (a, b):
            topic = by_name[name]
            assert topic["topic_id"] is not None and not topic["is_internal"], topic
            leaders = {p.partition: (p.leader, p.leader_epoch) for p in md.topics[name].partitions}
            answered = {
                p["partition_index"]: (p["leader_id"], p["leader_epoch"])
                for p in topic["partitions"]
            }
            assert answered == leaders, f"{name}: {answered} != Metadata's {leaders}"
            for p in topic["partitions"]:
                assert p["error_code"] == 0 and p["replica_nodes"] == [p["leader_id"]], p
                assert p["isr_nodes"] == [p["leader_id"]] and p["offline_replicas"] == [], p
        assert by_name[missing]["partitions"] == [], by_name[missing]

        every = {t["name"] for t in topic_partitions(client, [])["topics"]}
        assert {a, b} <= every and missing not in every, every

        seen, cursor, pages = [], None, 0
        while True:
            page = topic_partitions(client, [a, b], limit=2, cursor=cursor)
            pages += 1
            seen += [
                (t["name"], p["partition_index"]) for t in page["topics"] for p in t["partitions"]
            ]
            cursor = page["next_cursor"]
            if cursor is None:
                break
            assert pages < 10, f"paging does not end: {page}"
        assert seen == [(a, 0), (a, 1), (a, 2), (b, 0), (b, 1)], seen
        assert pages == 3, pages

        refused = topic_partitions(client, [a], cursor={"topic_name": b, "partition_index": 0})
        codes = [(t["name"], t["error_code"], t["partitions"]) for t in refused["topics"]]
        assert codes == [(a, aw.INVALID_REQUEST, [])], refused
    finally:
        client.close()
