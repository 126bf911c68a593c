"""A short randomized fault run with a fixed seed (support/fault_run: three brokers on etcd and
S3 under idempotent load, a consumer group and random commits and aborts of a transactional
producer). The seed's schedule covers a broker killed, S3
answering 503 and slow, a broker's session expiring alone and etcd frozen past the lease.
bench/fault_runs.py runs many seeds through this test (KAFSCALE_FAULT_RUN_SEED and
KAFSCALE_FAULT_RUN_FAULTS choose another run)."""

from __future__ import annotations

import os

from support.fault_run import run, schedule

SEED = 14
FAULTS = 5


def test_the_seed_draws_the_schedule_described_above():
    assert schedule(SEED, FAULTS) == [
        "broker_killed",
        "s3_unavailable",
        "session_expired",
        "s3_slow",
        "etcd_frozen_past_the_lease",
    ]


def test_a_randomized_fault_run(cluster, moto):
    seed = int(os.environ.get("KAFSCALE_FAULT_RUN_SEED", SEED))
    faults = int(os.environ.get("KAFSCALE_FAULT_RUN_FAULTS", FAULTS))
    print(run(cluster, moto, seed, faults))
