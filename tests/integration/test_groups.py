"""Consumer groups (the classic group protocol) through real clients, on one broker and on a
3-broker cluster (etcd + moto S3): every test runs on both, against one broker / one cluster per
module, each test with its own topic and group.

- the raw requests: FindCoordinator, JoinGroup (MEMBER_ID_REQUIRED first), SyncGroup,
  Heartbeat, OffsetCommit, OffsetFetch (-1 for no commit), LeaveGroup; NOT_COORDINATOR from a
  broker that does not coordinate the group (cluster);
- confluent-kafka (librdkafka): eager range groups split, grow and shrink (LeaveGroup: within
  about a second; SIGKILL: after the session timeout); cooperative-sticky moves only what has
  to move; range and roundrobin end up with the assignment the client computed; a static member
  (group.instance.id) that restarts gets its partitions back with nobody else revoked;
- committed offsets: with metadata, from a simple consumer (assign()) and from group members;
  they survive the coordinator going away (single node: SIGKILL + restart; cluster: SIGKILL of
  the coordinator) and consumption resumes exactly after the last commit;
- kafka-python and aiokafka groups split, commit and resume; kcat -G commits what it read.

Brokers run with --group-initial-rebalance-delay-ms 300 (members started together join one
generation) and the default session timeout bounds (6 s .. 30 min). Consumers heartbeat every
200 ms so that they learn of a rebalance quickly. Times are printed (pytest -s shows them);
only generous liveness bounds are asserted.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from support import group_wire as gw
from support import kafka_wire as kw
from support.clients import Msg, confluent_produce, unique
from support.group_env import HANG_GUARD, ClusterNodes, SingleNode
from support.groups import (
    MEMBER_KINDS,
    ChildMember,
    ConfluentMember,
    close_all,
    wait_records,
    wait_split,
)

REBALANCE_DELAY_MS = 300
GROUP_ARGS = ["--group-initial-rebalance-delay-ms", str(REBALANCE_DELAY_MS)]
SESSION_S = 6.0  # the consumers' session.timeout.ms (the broker's minimum)
LEAVE_BOUND_S = 5.0  # a member that leaves: "within about a second", asserted generously
EXPIRY_BOUND_S = SESSION_S + 20.0  # a member that dies: after the session timeout, generously

# confluent-kafka-python hands librdkafka commit metadata with its C string terminator
# (metadata_size = strlen + 1), so the broker stores and OffsetFetch returns "text\0"; the
# client's own committed() reads it back as a C string, without it.
CONFLUENT_MD_END = "\x00"

# versions the wire test sends (non-flexible; every client in these tests uses at least these)
WIRE_VERSIONS = {
    gw.FIND_COORDINATOR: 2,
    gw.JOIN_GROUP: 4,
    gw.SYNC_GROUP: 3,
    gw.HEARTBEAT: 3,
    gw.LEAVE_GROUP: 3,
    gw.OFFSET_COMMIT: 7,
    gw.OFFSET_FETCH: 5,
}


@pytest.fixture(scope="module", params=["single", "cluster"])
def genv(request, module_broker_factory):
    """Where the groups run: one broker (embedded metadata store, local segments) or three
    brokers sharing etcd and a moto bucket."""
    if request.param == "single":
        broker = module_broker_factory(GROUP_ARGS, name="single")
        yield SingleNode(broker)
        broker.cleanup()
    else:
        make = request.getfixturevalue("module_cluster")
        yield ClusterNodes(make(3, args=GROUP_ARGS))


def log(genv, what: str) -> None:
    print(f"[groups/{genv.kind}] {what}")


def produce(genv, topic: str, partitions: int, per_partition: int, tag: str) -> None:
    msgs = [
        Msg(p, None, f"{tag}-{p}-{i}".encode())
        for i in range(per_partition)
        for p in range(partitions)
    ]
    confluent_produce(genv.bootstrap(), topic, msgs)


def union(sets) -> frozenset[int]:
    return frozenset().union(*sets)


# ---------------------------------------------------------------------------------------------
# the raw requests


def test_group_requests_on_the_wire(genv):
    """The whole protocol by hand: JoinGroup v4 without a member id answers MEMBER_ID_REQUIRED
    with one; joining with it makes a generation with this member as leader; SyncGroup hands
    back the leader's assignment verbatim; Heartbeat, OffsetCommit (with metadata) and
    OffsetFetch work, and a wrong generation is ILLEGAL_GENERATION; a partition without a
    commit and a group without commits read back -1; after LeaveGroup the member is unknown and
    the offsets stay. On a cluster every broker names the same coordinator and the others answer
    NOT_COORDINATOR to every group request."""
    topic = genv.new_topic(unique("wire"), 2)
    group = unique("wire")
    with kw.RawConnection.to(genv.live[0].bootstrap) as conn:
        apis = kw.api_versions(conn).apis
    for key, version in WIRE_VERSIONS.items():
        assert key in apis, f"ApiVersions does not list api {key}"
        lo, hi = apis[key]
        assert lo <= version <= hi, f"api {key}: v{version} not in advertised {lo}..{hi}"

    coordinator = genv.coordinator(group)
    for b in genv.live:  # every broker names the same coordinator
        found = genv.find_coordinator(group, via=b)
        assert (found.error_code, found.address) == (gw.NONE, coordinator.bootstrap), b.name

    sub = gw.subscription([topic])
    protocols = [("range", sub)]
    with kw.RawConnection.to(coordinator.bootstrap, timeout=30) as conn:
        res = gw.join_group(conn, group, protocols=protocols, session_timeout_ms=1000)
        assert res.error_code == gw.INVALID_SESSION_TIMEOUT, f"session 1 s < minimum: {res}"

        first = gw.join_group(conn, group, protocols=protocols, version=4)
        assert first.error_code == gw.MEMBER_ID_REQUIRED, first
        member = first.member_id
        assert member, f"MEMBER_ID_REQUIRED without a member id: {first}"

        joined = gw.join_group(conn, group, member, protocols=protocols, version=4)
        assert joined.error_code == gw.NONE, joined
        generation = joined.generation_id
        assert generation >= 1, joined
        assert (joined.member_id, joined.leader, joined.protocol_name) == (member, member, "range")
        assert joined.members == [(member, None, sub)], "the leader gets every member's metadata"

        plan = gw.assignment({topic: [0, 1]}, user_data=b"client-chosen")
        synced = gw.sync_group(conn, group, generation, member, {member: plan})
        assert synced.error_code == gw.NONE, synced
        assert synced.assignment == plan, "SyncGroup must hand back the leader's bytes"
        assert gw.parse_assignment(synced.assignment) == {topic: [0, 1]}

        assert gw.heartbeat(conn, group, generation, member) == gw.NONE
        assert gw.heartbeat(conn, group, generation + 1, member) == gw.ILLEGAL_GENERATION
        assert gw.heartbeat(conn, group, generation, "nobody") == gw.UNKNOWN_MEMBER_ID

        commit = {(topic, 0): gw.CommitOffset(1, "wire-0", leader_epoch=0)}
        stale = gw.offset_commit(
            conn, group, commit, generation_id=generation + 1, member_id=member
        )
        assert stale == {(topic, 0): gw.ILLEGAL_GENERATION}, stale
        done = gw.offset_commit(conn, group, commit, generation_id=generation, member_id=member)
        assert done == {(topic, 0): gw.NONE}, done

        fetched = gw.offset_fetch(conn, group, {topic: [0, 1]})
        assert fetched.error_code == gw.NONE, fetched
        p0, p1 = fetched.partitions[(topic, 0)], fetched.partitions[(topic, 1)]
        assert (p0.offset, p0.leader_epoch, p0.metadata, p0.error_code) == (1, 0, "wire-0", 0)
        assert (p1.offset, p1.error_code) == (gw.NO_OFFSET, gw.NONE), f"no commit: {p1}"
        every = gw.offset_fetch(conn, group, None)  # null topics: all the group committed
        assert list(every.partitions) == [(topic, 0)], every

        left = gw.leave_group(conn, group, [(member, None)])
        assert left.error_code == gw.NONE, left
        assert left.members == [(member, None, gw.NONE)], left
        assert gw.heartbeat(conn, group, generation, member) == gw.UNKNOWN_MEMBER_ID
        after = gw.offset_fetch(conn, group, {topic: [0]}).partitions[(topic, 0)]
        assert (after.offset, after.metadata) == (1, "wire-0"), "offsets outlive the members"

    # a group without commits, asked at its own coordinator: -1 everywhere
    nothing = unique("no-commits")
    offsets = genv.offsets(nothing, topic, [0, 1])
    assert {p: (o.offset, o.error_code) for p, o in offsets.items()} == {
        0: (gw.NO_OFFSET, gw.NONE),
        1: (gw.NO_OFFSET, gw.NONE),
    }

    # v8-9: several groups in one request, each answered on its own
    for version in (8, 9):
        with kw.RawConnection.to(coordinator.bootstrap, timeout=30) as conn:
            asked: dict[str, dict[str, list[int]] | None] = {group: {topic: [0, 1]}}
            if genv.coordinator(nothing) is coordinator:
                asked[nothing] = None
            got = gw.offset_fetch_groups(conn, asked, version=version)
        assert list(got) == list(asked), got
        p0, p1 = got[group].partitions[(topic, 0)], got[group].partitions[(topic, 1)]
        assert (got[group].error_code, p0.offset, p0.metadata, p1.offset) == (
            gw.NONE,
            1,
            "wire-0",
            gw.NO_OFFSET,
        ), got
        if nothing in got:
            assert (got[nothing].error_code, got[nothing].partitions) == (gw.NONE, {}), got

    if genv.kind != "cluster":
        return
    for b in genv.live:
        if b is coordinator:
            continue
        with kw.RawConnection.to(b.bootstrap, timeout=30) as conn:
            elsewhere = gw.offset_fetch_groups(conn, {group: {topic: [0]}}, version=9)
            assert elsewhere[group].error_code == gw.NOT_COORDINATOR, elsewhere
            res = gw.join_group(conn, group, protocols=protocols, version=4)
            assert res.error_code == gw.NOT_COORDINATOR, f"JoinGroup at {b.name}: {res}"
            res = gw.join_group(conn, group, member, protocols=protocols, version=4)
            assert res.error_code == gw.NOT_COORDINATOR, f"JoinGroup at {b.name}: {res}"
            fetched = gw.offset_fetch(conn, group, {topic: [0, 1]})
            assert fetched.error_code == gw.NOT_COORDINATOR, f"OffsetFetch at {b.name}: {fetched}"
            lo, _ = apis[gw.OFFSET_FETCH]
            if lo <= 1:  # v1 has no top-level error: every partition carries it
                v1 = gw.offset_fetch(conn, group, {topic: [0, 1]}, version=1)
                assert {got.error_code for got in v1.partitions.values()} == {gw.NOT_COORDINATOR}, (
                    f"OffsetFetch v1 at {b.name}: {v1}"
                )
                assert len(v1.partitions) == 2, v1
            commit = {(topic, 0): gw.CommitOffset(5)}
            assert gw.offset_commit(conn, group, commit) == {(topic, 0): gw.NOT_COORDINATOR}
            assert gw.sync_group(conn, group, 1, member).error_code == gw.NOT_COORDINATOR
            assert gw.heartbeat(conn, group, 1, member) == gw.NOT_COORDINATOR
            left = gw.leave_group(conn, group, [(member, None)])
            assert left.error_code == gw.NOT_COORDINATOR, left


# ---------------------------------------------------------------------------------------------
# committed offsets without group membership


def test_simple_consumer_commits_and_fetches_offsets(genv):
    """A consumer that assign()s partitions commits offsets with metadata (generation -1, no
    member id); committed() and raw OffsetFetch read them back, partitions without a commit as
    -1 (OFFSET_INVALID), not 0; a new consumer of the group starts at the committed offsets
    (and at the beginning where nothing was committed)."""
    from confluent_kafka import OFFSET_INVALID, Consumer, TopicPartition

    topic = genv.new_topic(unique("assign"), 6)
    produce(genv, topic, 6, 10, "assign")
    group = unique("assign")
    conf = {
        "bootstrap.servers": genv.bootstrap(),
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }
    consumer = Consumer(conf)
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(6)])
        results = consumer.commit(
            offsets=[
                TopicPartition(topic, 0, 3, metadata="zero"),
                TopicPartition(topic, 2, 7),
            ],
            asynchronous=False,
        )
        assert all(tp.error is None for tp in results), results
        got = consumer.committed([TopicPartition(topic, p) for p in range(6)], timeout=30)
    finally:
        consumer.close()
    by_partition = {tp.partition: tp for tp in got}
    assert all(tp.error is None for tp in got), got
    assert (by_partition[0].offset, by_partition[0].metadata) == (3, "zero")
    assert by_partition[2].offset == 7
    for p in (1, 3, 4, 5):
        assert by_partition[p].offset == OFFSET_INVALID, f"partition {p}: {by_partition[p]}"

    wire = genv.offsets(group, topic, range(6))
    assert (wire[0].offset, wire[0].metadata) == (3, "zero" + CONFLUENT_MD_END)
    assert wire[2].offset == 7 and wire[2].metadata in ("", None)
    for p in (1, 3, 4, 5):
        assert (wire[p].offset, wire[p].error_code) == (gw.NO_OFFSET, gw.NONE), wire[p]

    # a new consumer of the group, assign() without offsets: it starts where the group is
    consumer = Consumer(conf)
    first: dict[int, int] = {}
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(6)])
        deadline = time.monotonic() + HANG_GUARD
        while len(first) < 6:
            assert time.monotonic() < deadline, f"first offsets seen: {first}"
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                first.setdefault(msg.partition(), msg.offset())
    finally:
        consumer.close()
    assert first == {0: 3, 1: 0, 2: 7, 3: 0, 4: 0, 5: 0}


# ---------------------------------------------------------------------------------------------
# membership with confluent-kafka


def test_eager_group_splits_grows_and_shrinks(genv):
    """3 members of a 6-partition topic own 2 partitions each; a 4th joins: a 4-way split; one
    member with 2 partitions closes (LeaveGroup): the other three cover everything again within
    about a second."""
    topic = genv.new_topic(unique("eager"), 6)
    group = unique("eager")
    members = [ConfluentMember(f"eager{i}", genv.bootstrap(), group, topic) for i in range(4)]
    try:
        t0 = time.monotonic()
        for m in members[:3]:
            m.start()
        at = wait_split(members[:3], 6, [2, 2, 2])
        log(genv, f"3 members split 6 partitions {at - t0:.2f}s after starting: {members[:3]}")

        t0 = time.monotonic()
        members[3].start()
        at = wait_split(members, 6, [1, 1, 2, 2])
        log(genv, f"4th member: 4-way split {at - t0:.2f}s after it started: {members}")

        leaving = next(m for m in members[:3] if len(m.owned) == 2)
        moved = leaving.owned
        rest = [m for m in members if m is not leaving]
        t0 = time.monotonic()
        leaving.close()
        at = wait_split(rest, 6, [2, 2, 2])
        took = at - t0
        log(genv, f"{leaving.name} left; its partitions {sorted(moved)} moved in {took:.2f}s")
        assert took <= LEAVE_BOUND_S, f"partitions of a leaving member took {took:.2f}s to move"
    finally:
        close_all(members)


def test_killed_member_partitions_move_after_session_timeout(genv, tmp_path):
    """A member in a child process is SIGKILLed (no LeaveGroup): its partitions go to the two
    others once its session (6 s) expires."""
    topic = genv.new_topic(unique("killed"), 6)
    group = unique("killed")
    boot = genv.bootstrap()
    child = ChildMember("doomed", boot, group, topic, tmp_path / "doomed.log")
    members = [ConfluentMember(f"survivor{i}", boot, group, topic) for i in range(2)]
    try:
        child.start()
        for m in members:
            m.start()
        wait_split([*members, child], 6, [2, 2, 2])
        lost = child.owned
        t0 = time.monotonic()
        child.kill()
        at = wait_split(members, 6, [3, 3], timeout=EXPIRY_BOUND_S + 10)
        took = at - t0
        log(genv, f"SIGKILLed member's {sorted(lost)} moved {took:.2f}s after the kill")
        assert took <= EXPIRY_BOUND_S, f"took {took:.2f}s (session timeout {SESSION_S}s)"
    finally:
        close_all([*members, child])


def test_cooperative_sticky_moves_only_what_it_must(genv):
    """cooperative-sticky: when a 4th member joins, the three existing ones keep their
    partitions except the ones handed over: only those are revoked (incrementally), nothing is
    assigned twice and nothing is lost, and each client's assignment() is what its
    incremental_assign/incremental_unassign calls added up to; when the 4th leaves again, its
    partitions are added to the others without any revoke."""
    topic = genv.new_topic(unique("coop"), 6)
    group = unique("coop")
    extra = {"partition.assignment.strategy": "cooperative-sticky"}
    members = [ConfluentMember(f"coop{i}", genv.bootstrap(), group, topic, extra) for i in range(4)]
    old, newcomer = members[:3], members[3]
    try:
        for m in old:
            m.start()
        wait_split(old, 6, [2, 2, 2])
        before = {m.name: m.owned for m in old}
        mark = time.monotonic()
        newcomer.start()
        at = wait_split(members, 6, [1, 1, 2, 2])
        log(genv, f"cooperative join settled in {at - mark:.2f}s: {members}")
        revoked_all = []
        for m in old:
            events = m.events_since(mark)
            revoked = union(e.partitions for e in events if e.kind == "revoke")
            assigned = union(e.partitions for e in events if e.kind == "assign")
            assert not [e for e in events if e.kind == "lost"], f"{m.name}: {events}"
            assert m.owned <= before[m.name], f"{m.name} gained partitions: {events}"
            assert revoked == before[m.name] - m.owned, (
                f"{m.name} had {sorted(before[m.name])}, kept {sorted(m.owned)}, "
                f"revoked {sorted(revoked)}: a partition that stays must not be revoked"
            )
            assert not assigned & before[m.name], f"{m.name} re-assigned what it held: {events}"
            revoked_all.append(revoked)
        assert newcomer.owned == union(revoked_all), "the newcomer got exactly what was revoked"
        for m in members:  # the client's own view: what incremental_assign/unassign added up to
            held = m.call(lambda c: {tp.partition for tp in c.assignment()})
            assert held == m.owned, f"{m.name}: assignment() {sorted(held)}, callbacks {m}"

        before = {m.name: m.owned for m in old}
        mark = time.monotonic()
        newcomer.close()
        at = wait_split(old, 6, [2, 2, 2])
        log(genv, f"cooperative leave settled in {at - mark:.2f}s: {old}")
        for m in old:
            events = m.events_since(mark)
            assert not [e for e in events if e.kind != "assign"], f"{m.name}: {events}"
            assert m.owned >= before[m.name], f"{m.name} lost partitions: {events}"
    finally:
        close_all(members)


@pytest.mark.parametrize("strategy", ["range", "roundrobin"])
def test_assignment_is_what_the_client_computed(genv, strategy):
    """3 members of a 7-partition topic with one strategy: the leader's assignment reaches every
    member unchanged. librdkafka orders members by member id: range gives [0,1,2] [3,4] [5,6],
    roundrobin [0,3,6] [1,4] [2,5]."""
    topic = genv.new_topic(unique(strategy), 7)
    group = unique(strategy)
    extra = {"partition.assignment.strategy": strategy}
    members = [
        ConfluentMember(f"{strategy}{i}", genv.bootstrap(), group, topic, extra) for i in range(3)
    ]
    try:
        for m in members:
            m.start()
        wait_split(members, 7, [3, 2, 2])
        ids = {m.name: m.call(lambda c: c.memberid()) for m in members}
        ordered = sorted(members, key=lambda m: ids[m.name])
        want = [{0, 1, 2}, {3, 4}, {5, 6}] if strategy == "range" else [{0, 3, 6}, {1, 4}, {2, 5}]
        assert [set(m.owned) for m in ordered] == want, {ids[m.name]: m.owned for m in ordered}
    finally:
        close_all(members)


def test_static_member_restart_keeps_partitions(genv):
    """Static members (group.instance.id): one closes (no LeaveGroup for a static member) and
    a new consumer with the same instance id joins within the session timeout: it owns the same
    partitions again and the other members see no rebalance at all, also after the old
    session would have expired."""
    topic = genv.new_topic(unique("static"), 6)
    group = unique("static")
    session_ms = 8000

    def member(i: int, name: str) -> ConfluentMember:
        extra = {"group.instance.id": f"{group}-{i}", "session.timeout.ms": session_ms}
        return ConfluentMember(name, genv.bootstrap(), group, topic, extra)

    members = [member(i, f"static{i}") for i in range(3)]
    again = member(1, "static1-again")
    try:
        for m in members:
            m.start()
        wait_split(members, 6, [2, 2, 2])
        before = {m.name: m.owned for m in members}
        mark = time.monotonic()
        members[1].close()
        again.start()
        now = [members[0], again, members[2]]
        at = wait_split(
            now,
            6,
            [2, 2, 2],
            also=lambda: None if again.owned == before["static1"] else f"{again} != before",
        )
        log(genv, f"restarted static member owns {sorted(again.owned)} after {at - mark:.2f}s")
        assert at - mark < session_ms / 1000, "the restart must beat the session timeout"
        # past the old session's expiry: still nobody else rebalanced
        time.sleep(max(0.0, mark + session_ms / 1000 + 1.0 - time.monotonic()))
        for m in (members[0], members[2]):
            assert m.events_since(mark) == [], f"{m.name} rebalanced: {m.events_since(mark)}"
            assert m.owned == before[m.name]
        assert again.owned == before["static1"]
    finally:
        close_all([*members, again])


# ---------------------------------------------------------------------------------------------
# other clients


def commit_positions(client: str):
    """``fn(consumer)`` that commits the consumer's positions with metadata ``{client}-{p}``."""
    if client == "kafka-python":
        from kafka.structs import OffsetAndMetadata

        def commit(c):
            offsets = {
                tp: OffsetAndMetadata(c.position(tp), f"{client}-{tp.partition}", -1)
                for tp in c.assignment()
            }
            c.commit(offsets)

        return commit

    async def commit_async(c):
        offsets = {tp: (await c.position(tp), f"{client}-{tp.partition}") for tp in c.assignment()}
        await c.commit(offsets)

    return commit_async


@pytest.mark.parametrize("client", ["kafka-python", "aiokafka"])
def test_python_client_group_commits_and_resumes(genv, client):
    """Two members split 6 partitions 3/3 and each reads only its own; they commit (with
    metadata) and close; two new members of the group read exactly what was produced since."""
    kind = MEMBER_KINDS[client]
    topic = genv.new_topic(unique(client), 6)
    group = unique(client)
    first = [kind(f"{client}-{x}", genv.bootstrap(), group, topic) for x in "ab"]
    second = []
    try:
        for m in first:
            m.start()
        t0 = time.monotonic()
        at = wait_split(first, 6, [3, 3])
        log(genv, f"{client}: 2 members split 3/3 after {at - t0:.2f}s: {first}")
        produce(genv, topic, 6, 10, "round1")
        wait_records(first, 60)
        for m in first:
            seen = m.seen()
            assert set(seen) == set(m.owned), f"{m.name} read {sorted(seen)}, owns {m.owned}"
            for p, offsets in seen.items():
                assert offsets == list(range(10)), f"{m.name} p{p}: {offsets}"
        for m in first:
            m.call(commit_positions(client))
        committed = genv.offsets(group, topic, range(6))
        assert {p: (o.offset, o.metadata) for p, o in committed.items()} == {
            p: (10, f"{client}-{p}") for p in range(6)
        }
        close_all(first)

        produce(genv, topic, 6, 5, "round2")
        second = [kind(f"{client}-{x}", genv.bootstrap(), group, topic) for x in "cd"]
        for m in second:
            m.start()
        wait_records(second, 30)
        time.sleep(0.5)  # anything extra would show now
        got = [(p, o) for m in second for p, offsets in m.seen().items() for o in offsets]
        assert min(o for _, o in got) >= 10, "read a record below the committed offsets"
        assert set(got) == {(p, o) for p in range(6) for o in range(10, 15)}, sorted(got)
    finally:
        close_all([*first, *second])


def kcat_group(bootstrap: str, group: str, topic: str, count: int) -> list[tuple[int, int]]:
    argv = ["kcat", "-b", bootstrap, "-G", group, "-c", str(count), "-J", "-q"]
    argv += ["-X", "auto.offset.reset=earliest", "-X", "session.timeout.ms=6000"]
    argv += ["-X", "heartbeat.interval.ms=200", topic]
    proc = subprocess.run(argv, capture_output=True, timeout=HANG_GUARD)
    assert proc.returncode == 0, f"kcat -G failed ({proc.returncode}): {proc.stderr!r}"
    out = []
    for line in proc.stdout.decode().splitlines():
        if line.strip():
            doc = json.loads(line)
            assert doc["topic"] == topic, doc
            out.append((doc["partition"], doc["offset"]))
    return out


def test_kcat_balanced_consumer_commits(genv):
    """kcat -G reads 25 of 60 records and commits them on exit (auto commit): the group's
    committed offsets are exactly one past what it read in each partition; a second run reads
    the other 35."""
    topic = genv.new_topic(unique("kcat"), 6)
    group = unique("kcat")
    produce(genv, topic, 6, 10, "kcat")
    first = kcat_group(genv.bootstrap(), group, topic, 25)
    assert len(set(first)) == len(first) == 25, first
    committed = genv.offsets(group, topic, range(6))
    for p in range(6):
        read = sorted(o for q, o in first if q == p)
        assert read == list(range(len(read))), f"p{p}: {read}"
        want = len(read) if read else gw.NO_OFFSET
        assert committed[p].offset == want, f"p{p}: read {read}, committed {committed[p]}"
    second = kcat_group(genv.bootstrap(), group, topic, 35)
    assert not set(first) & set(second), "the second run re-read committed records"
    assert set(first) | set(second) == {(p, o) for p in range(6) for o in range(10)}


# ---------------------------------------------------------------------------------------------
# the coordinator goes away


def commit_until_accepted(member: ConfluentMember, offsets: dict[int, tuple[int, str]]) -> float:
    """Commit through ``member``, retried until every partition is accepted; returns when."""
    from confluent_kafka import KafkaException, TopicPartition

    tps = [TopicPartition(member.topic, p, o, metadata=md) for p, (o, md) in offsets.items()]
    deadline = time.monotonic() + HANG_GUARD
    while True:
        try:
            results = member.call(lambda c: c.commit(offsets=tps, asynchronous=False))
            problem = [tp for tp in results if tp.error is not None]
            if not problem:
                return time.monotonic()
        except KafkaException as exc:
            problem = exc
        assert time.monotonic() < deadline, f"commit not accepted within {HANG_GUARD}s: {problem}"
        time.sleep(0.2)


@pytest.mark.parametrize("hard", [True, False], ids=["sigkill", "sigterm"])
def test_committed_offsets_survive_losing_the_coordinator(genv, hard):
    """A member reads 20 records per partition and commits 5+p (metadata first-p). The
    coordinator goes away (single node: restart; cluster: the broker FindCoordinator names
    stops), by SIGKILL or by SIGTERM (a graceful hand-off): the commits are still there; the
    member, still running, commits 12+p; a new member of the group starts exactly at 12+p.
    Nothing is lost; only records after a commit are read twice."""
    from confluent_kafka import TopicPartition

    topic = genv.new_topic(unique("failover"), 6)
    group = unique("failover")
    produce(genv, topic, 6, 20, "fo")
    first = {p: (5 + p, f"first-{p}") for p in range(6)}
    second = {p: (12 + p, f"second-{p}") for p in range(6)}
    a = ConfluentMember("fo-a", genv.bootstrap(), group, topic)
    b = ConfluentMember("fo-b", genv.bootstrap(), group, topic)
    try:
        a.start()
        wait_split([a], 6, [6])
        wait_records([a], 120)
        commit_until_accepted(a, first)
        stored = {p: (o, md + CONFLUENT_MD_END) for p, (o, md) in first.items()}
        wire = genv.offsets(group, topic, range(6))
        assert {p: (o.offset, o.metadata) for p, o in wire.items()} == stored

        t0 = time.monotonic()
        hit = genv.take_coordinator_away(group, hard)
        log(genv, f"took coordinator {hit.name} away ({'SIGKILL' if hard else 'SIGTERM'})")
        wire = genv.offsets(group, topic, range(6))
        log(genv, f"offsets readable again {time.monotonic() - t0:.2f}s later")
        assert {p: (o.offset, o.metadata) for p, o in wire.items()} == stored, "commits lost"

        at = commit_until_accepted(a, second)
        log(genv, f"the member's next commit was accepted {at - t0:.2f}s after the loss")
        back = a.call(
            lambda c: c.committed([TopicPartition(topic, p) for p in range(6)], timeout=30)
        )
        assert {tp.partition: (tp.offset, tp.metadata) for tp in back} == second
        a.close()

        # the member read nothing twice below the first commit (a rebalance would re-read
        # from the committed offsets, never from the start)
        for p, offsets in a.seen().items():
            assert set(offsets) == set(range(20)), f"p{p}: {offsets}"
            twice = sorted({o for o in offsets if offsets.count(o) > 1})
            assert all(o >= first[p][0] for o in twice), f"p{p} re-read {twice}"

        b.start()
        wait_records([b], sum(20 - o for o, _ in second.values()))
        time.sleep(0.5)  # anything extra would show now
        for p in range(6):
            assert b.seen().get(p) == list(range(second[p][0], 20)), f"p{p}: {b.seen().get(p)}"
    finally:
        try:
            close_all([a, b])
        finally:
            genv.heal()
