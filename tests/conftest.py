"""Shared fixtures: real broker processes, a moto S3 server, etcd, clusters of brokers, log
capture on failure."""

from __future__ import annotations

import contextlib
import sys
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from support.cluster import Cluster
from support.procs import Broker, EtcdServer, ManagedProcess, MotoServer, assert_no_panic, tail

_ACTIVE: list[ManagedProcess] = []  # every process started by a fixture and not yet cleaned up


class BrokerFactory:
    """Starts brokers, each with its own data dir and log file; stops them all at teardown."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.brokers: list[Broker] = []

    def __call__(
        self,
        args: list[str] | None = None,
        *,
        env: dict[str, str] | None = None,
        data_dir: Path | None = None,
        port: int | None = None,
        flush_interval_ms: int = 20,
        start: bool = True,
        name: str | None = None,
    ) -> Broker:
        n = len(self.brokers)
        label = name or f"broker{n}"
        broker = Broker(
            data_dir or self.root / f"{label}-data",
            self.root / f"{label}.log",
            port=port,
            args=args,
            env=env,
            flush_interval_ms=flush_interval_ms,
            name=name or "broker",
        )
        self.brokers.append(broker)
        _ACTIVE.append(broker)
        if start:
            broker.start()
        return broker

    def close(self) -> None:
        problems = []
        for b in self.brokers:
            if b.proc is not None and b.proc.poll() is not None:
                problems.append(
                    f"broker {b.bootstrap} died during the test with exit code "
                    f"{b.proc.returncode}:\n{tail(b.log_path)}"
                )
            try:
                b.cleanup()
            finally:
                if b in _ACTIVE:
                    _ACTIVE.remove(b)
        if problems:
            raise AssertionError("\n\n".join(problems))


@pytest.fixture
def broker_factory(tmp_path):
    factory = BrokerFactory(tmp_path)
    yield factory
    factory.close()


@pytest.fixture
def broker(broker_factory):
    """A default broker (auto-create on, 1 partition per new topic) for one test."""
    return broker_factory()


@pytest.fixture(scope="module")
def module_broker_factory(tmp_path_factory):
    factory = BrokerFactory(tmp_path_factory.mktemp("brokers"))
    yield factory
    factory.close()


@pytest.fixture(autouse=True)
def _tbroker_survives(request):
    """A module whose tests share a broker as the ``tbroker`` fixture: after each test that
    uses it, the broker has not panicked."""
    yield
    if "tbroker" in request.fixturenames:
        assert_no_panic(request.getfixturevalue("tbroker"))


@pytest.fixture(scope="session")
def moto(tmp_path_factory):
    root = tmp_path_factory.mktemp("moto")
    server = MotoServer(root, root / "moto.log")
    _ACTIVE.append(server)
    try:
        yield server.start()
    finally:
        server.cleanup()
        _ACTIVE.remove(server)


@pytest.fixture
def s3_bucket(moto):
    name = f"kafscale-{uuid.uuid4().hex[:12]}"
    moto.create_bucket(name)
    return name


@contextlib.contextmanager
def _etcd_server(root: Path):
    server = EtcdServer(root / "etcd", root / "etcd.log")
    _ACTIVE.append(server)
    try:
        yield server.start()
    finally:
        server.cleanup()
        _ACTIVE.remove(server)


@pytest.fixture
def etcd(tmp_path):
    """A fresh single-member etcd for one test (tests may stop, start and pause it)."""
    with _etcd_server(tmp_path) as server:
        yield server


@pytest.fixture(scope="module")
def module_etcd(tmp_path_factory):
    with _etcd_server(tmp_path_factory.mktemp("etcd")) as server:
        yield server


@contextlib.contextmanager
def _cluster_factory(root: Path, etcd: EtcdServer, moto: MotoServer):
    """make(n, **options) starts a Cluster of n brokers on ``etcd`` and a fresh bucket; every
    broker is stopped (and checked for an unexpected death) before etcd goes away."""
    factories: list[BrokerFactory] = []

    def make(n: int = 3, **options) -> Cluster:
        factory = BrokerFactory(root / f"cluster{len(factories)}")
        factory.root.mkdir(parents=True, exist_ok=True)
        factories.append(factory)
        bucket = f"kafscale-{uuid.uuid4().hex[:12]}"
        moto.create_bucket(bucket)
        return Cluster(factory, etcd, moto, bucket, **options).start(n)

    try:
        yield make
    finally:
        problems = []
        for factory in factories:
            try:
                factory.close()
            except AssertionError as exc:
                problems.append(str(exc))
        if problems:
            raise AssertionError("\n\n".join(problems))


@pytest.fixture
def cluster(tmp_path, etcd, moto):
    """Factory: ``cluster(n=3, lease_ttl_ms=..., args=[...])`` starts n brokers (ids 1..n)
    sharing this test's etcd and a fresh moto bucket, and waits until they agree."""
    with _cluster_factory(tmp_path, etcd, moto) as make:
        yield make


@pytest.fixture(scope="module")
def module_cluster(tmp_path_factory, module_etcd, moto):
    """The same factory for a module: clusters that live as long as the module's tests."""
    with _cluster_factory(tmp_path_factory.mktemp("cluster"), module_etcd, moto) as make:
        yield make


def pytest_configure(config):
    # kafka-python loads its protocol schemas through a deprecated importlib API
    config.addinivalue_line(
        "filterwarnings", "ignore:.*is deprecated. Use files:DeprecationWarning"
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for proc in list(_ACTIVE):
            report.sections.append(
                (f"{proc.name} log {proc.log_path} (tail)", tail(proc.log_path, 150))
            )


def pytest_sessionfinish(session, exitstatus):
    for proc in list(_ACTIVE):
        proc.cleanup()
