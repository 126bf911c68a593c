"""DescribeCluster, what admin clients ask to describe the cluster, on one broker and on a
3-broker cluster: confluent-kafka's describe_cluster() names the cluster, a live controller and
the brokers Metadata lists; on the raw wire every broker answers the same at v0 and v1, and
refuses other endpoint types as Kafka does.
"""

from __future__ import annotations

from support import admin_env
from support import admin_wire as aw
from support import kafka_wire as kw
from support.admin_env import log
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
