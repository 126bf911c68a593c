"""Where a consumer group runs in the integration tests: one broker or a 3-broker cluster,
behind one interface (bootstrap, topics, the group's coordinator, taking it away)."""

from __future__ import annotations

import time
from collections.abc import Iterable

from . import group_wire as gw
from . import kafka_wire as kw
from .cluster import Cluster, create_topic
from .procs import Broker

HANG_GUARD = 60.0  # seconds; stops a hung client or a group that never settles, nothing else
# group errors a client retries after finding the coordinator again
RETRIABLE = {
    gw.COORDINATOR_LOAD_IN_PROGRESS,
    gw.COORDINATOR_NOT_AVAILABLE,
    gw.NOT_COORDINATOR,
}


class GroupEnv:
    """One broker or a cluster: bootstrap addresses, topics, the coordinator of a group and how
    to take that coordinator away (and bring the cluster back to full strength)."""

    kind: str

    @property
    def live(self) -> list[Broker]:
        raise NotImplementedError

    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.live)

    def new_topic(self, topic: str, partitions: int) -> str:
        raise NotImplementedError

    def broker(self, node_id: int) -> Broker:
        raise NotImplementedError

    def find_coordinator(self, group: str, via: Broker | None = None) -> gw.Coordinator:
        """FindCoordinator for ``group`` through ``via`` (default: any live broker), retried
        while the answer is COORDINATOR_NOT_AVAILABLE (the cluster view is settling)."""
        deadline = time.monotonic() + HANG_GUARD
        while True:
            target = via or self.live[0]
            with kw.RawConnection.to(target.bootstrap, timeout=10) as conn:
                found = gw.find_coordinator(conn, group)
            if found.error_code == gw.NONE or time.monotonic() > deadline:
                return found
            time.sleep(0.1)

    def coordinator(self, group: str) -> Broker:
        found = self.find_coordinator(group)
        assert found.error_code == gw.NONE, f"FindCoordinator({group!r}): {found}"
        broker = self.broker(found.node_id)
        assert found.address == broker.bootstrap, f"{found} names {broker.name} at another address"
        return broker

    def take_coordinator_away(self, group: str, hard: bool) -> Broker:
        """Single node: stop the broker (SIGKILL if ``hard``, else SIGTERM) and start it again.
        Cluster: stop the group's coordinator that way (it stays down until ``heal``). Returns
        the broker hit."""
        raise NotImplementedError

    def heal(self) -> None:
        """Every broker running again, the cluster agreeing on it."""

    def offsets(
        self, group: str, topic: str, partitions: Iterable[int], timeout: float = HANG_GUARD
    ) -> dict[int, gw.FetchedOffset]:
        """{partition: committed offset} through OffsetFetch v5 to the group's coordinator, as
        FindCoordinator names it; retried while the coordinator cannot be reached or answers
        with a retriable error (it moved, or is loading the group)."""
        parts = list(partitions)
        deadline = time.monotonic() + timeout
        while True:
            try:
                coordinator = self.coordinator(group)
                with kw.RawConnection.to(coordinator.bootstrap, timeout=10) as conn:
                    res = gw.offset_fetch(conn, group, {topic: parts})
                problem = f"OffsetFetch {group}: {res}"
                if res.error_code == gw.NONE:
                    return {p: res.partitions[(topic, p)] for p in parts}
                if res.error_code not in RETRIABLE:
                    raise AssertionError(problem)
            except (OSError, kw.ConnectionClosed) as exc:
                problem = f"OffsetFetch {group}: {exc!r}"
            if time.monotonic() > deadline:
                raise AssertionError(f"no answer within {timeout}s: {problem}")
            time.sleep(0.1)


class SingleNode(GroupEnv):
    kind = "single"

    def __init__(self, broker: Broker) -> None:
        self.node = broker

    @property
    def live(self) -> list[Broker]:
        return [self.node]

    def new_topic(self, topic: str, partitions: int) -> str:
        create_topic(self.node.bootstrap, topic, partitions)
        kw.ensure_topic(self.node.bootstrap, topic, partitions)
        return topic

    def broker(self, node_id: int) -> Broker:
        return self.node

    def take_coordinator_away(self, group: str, hard: bool) -> Broker:
        self.node.restart(hard=hard)
        return self.node


class ClusterNodes(GroupEnv):
    kind = "cluster"

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    @property
    def live(self) -> list[Broker]:
        return self.cluster.live

    def new_topic(self, topic: str, partitions: int) -> str:
        create_topic(self.cluster.bootstrap(), topic, partitions)
        self.cluster.wait_converged([topic], {topic: partitions}, until=self.cluster.claimed)
        return topic

    def broker(self, node_id: int) -> Broker:
        return self.cluster.brokers[node_id]

    def take_coordinator_away(self, group: str, hard: bool) -> Broker:
        victim = self.coordinator(group)
        if hard:
            victim.kill()
        else:
            victim.terminate()
        return victim

    def heal(self) -> None:
        for b in self.cluster.brokers.values():
            if not b.running:
                b.start()
        self.cluster.wait_converged()
