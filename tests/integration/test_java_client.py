"""The Java client (Apache kafka-clients, pinned in tests/jvm/pom.xml) in its defaults against
a broker: an idempotent producer with acks=all, a consumer group, seeks and timestamp lookups,
and the AdminClient. The JVM side (tests/jvm's ClientChecks) reports what it saw; these tests
decide what is right."""

from __future__ import annotations

from typing import Any

import pytest
from support import jvm

RECORDS = 500


@pytest.fixture(scope="module")
def jbroker(module_broker_factory):
    return module_broker_factory()


def checks(*args: str) -> dict[str, Any]:
    return jvm.run("ClientChecks", list(args), timeout=240)


def test_default_producer_and_consumer_group_see_every_record_once_in_order(jbroker):
    got = checks("produce-consume", jbroker.bootstrap, "java-defaults", str(RECORDS))
    assert got == {
        "assigned": 3,
        "sent": RECORDS,
        "received": RECORDS,
        "distinct": RECORDS,
        "duplicates": 0,
        "out_of_order": 0,
        "committed_at_end": True,
        "reread_after_seek": RECORDS,
        "offsets_for_times_found": True,
    }


def test_admin_client_manages_topics_configs_records_and_group_offsets(jbroker):
    got = checks("admin", jbroker.bootstrap, "java-admin")
    assert got == {
        "cluster_id_set": True,
        "nodes": 1,
        "controller_set": True,
        "partitions": 2,
        "retention_ms": "3600000",
        "retention_ms_altered": "7200000",
        "partitions_increased": 4,
        "low_watermark": 5,
        "first_offset_after_delete": 5,
        "group_offset": 7,
        "deleted": True,
    }
