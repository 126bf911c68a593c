"""Group visibility and cleanup through real admin clients (confluent-kafka AdminClient and
kafka-python KafkaAdminClient), on one broker and on a 3-broker cluster: DescribeGroups (a live
confluent-kafka group: state, assignor, members with client id, host and assignment; an unknown
group is Dead, no error), ListGroups (state and type filters; groups of every coordinator),
DeleteGroups (NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, then gone with its offsets). Also the
ApiVersions listing (unsupported APIs with min = max = -1) and that kcat, confluent-kafka,
kafka-python and aiokafka still produce and consume.
"""

from __future__ import annotations

import pytest
from support import admin_env
from support import admin_wire as aw
from support import group_wire as gw
from support import kafka_wire as kw
from support.admin_env import (
    ADMIN_KINDS,
    log,
    node_ids,
    open_admin,
    produce,
)
from support.clients import CONSUMERS, PRODUCERS, Msg, kcat_produce, unique
from support.group_env import HANG_GUARD, GroupEnv
from support.groups import ConfluentMember, close_all, wait_records, wait_split
from support.load import wait_for

# one broker, then a 3-broker cluster (etcd + moto): every test runs on both
genv = admin_env.genv

# ---------------------------------------------------------------------------------------------
# ApiVersions; the clients still work


def test_api_versions_lists_ops_apis_and_nothing_unserved(genv):
    """Every broker, ApiVersions v0 and v3 alike: each key once; the ops APIs from v0 up to at
    least their v1 version; the APIs it does not serve left out, as Kafka does; every entry a
    proper range."""
    for b in genv.live:
        with kw.RawConnection.to(b.bootstrap) as conn:
            v0 = aw.api_versions_entries(conn, 0)
            v3 = aw.api_versions_entries(conn, 3)
        assert v3 == v0, f"{b.name}: v3 {v3} != v0 {v0}"
        keys = [k for k, _, _ in v0]
        assert len(keys) == len(set(keys)), f"{b.name}: a key listed twice: {keys}"
        apis = {k: (lo, hi) for k, lo, hi in v0}
        for key, top in aw.OPS_APIS.items():
            assert key in apis, f"{b.name}: ops API {key} not advertised"
            lo, hi = apis[key]
            assert lo == 0 and hi >= top, f"{b.name}: API {key} {apis[key]}, wanted 0..>={top}"
        for key in aw.NOT_SERVED_KEYS:
            assert key not in apis, f"{b.name}: API {key} listed as {apis[key]}"
        for key, (lo, hi) in apis.items():
            assert 0 <= lo <= hi, f"{b.name}: API {key}: bad range {(lo, hi)}"
    log(genv, f"ApiVersions: {apis}")


@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka", "kcat"])
def test_clients_still_produce_and_consume(genv, client):
    """With the -1/-1 entries in ApiVersions every client still produces to and consumes from
    every partition, in order."""
    topic = genv.new_topic(unique(f"cl-{client}"), 2)
    msgs = [Msg(i % 2, f"k{i}".encode(), f"{client}-{i}".encode()) for i in range(20)]
    if client == "kcat":
        kcat_produce(genv.bootstrap(), topic, msgs)
    else:
        PRODUCERS[client](genv.bootstrap(), topic, msgs)
    got = CONSUMERS[client](genv.bootstrap(), topic, {0: 10, 1: 10})
    for p in range(2):
        recs = [g for g in got if g.partition == p][:10]
        assert [g.offset for g in recs] == list(range(10)), f"p{p}: {recs}"
        assert [(g.key, g.value) for g in recs] == [
            (m.key, m.value) for m in msgs if m.partition == p
        ], f"p{p}"


# ---------------------------------------------------------------------------------------------
# DescribeGroups, ListGroups, DeleteGroups


def test_describe_groups(genv):
    """A live confluent-kafka group of two members (range) as both admin clients describe it:
    Stable, protocol type consumer, assignor range, the members' ids, client ids, host and the
    partitions each owns; an unknown group in the same call is Dead with no members, no error."""
    topic = genv.new_topic(unique("dg"), 4)
    group = unique("dg")
    unknown = unique("dg-nobody")
    members = [
        ConfluentMember(f"dg-{x}-{group[-4:]}", genv.bootstrap(), group, topic) for x in "ab"
    ]
    try:
        for m in members:
            m.start()
        wait_split(members, 4, [2, 2])
        ids = {m.name: m.call(lambda c: c.memberid()) for m in members}
        coordinator = genv.find_coordinator(group).node_id
        for kind in ADMIN_KINDS:
            with open_admin(genv, kind) as admin:
                got = admin.describe_groups([group, unknown])
            assert set(got) == {group, unknown}, got
            g = got[group]
            assert (g.error_code, g.state, g.protocol) == (0, "Stable", "range"), f"{kind}: {g}"
            assert g.simple is False, f"{kind}: {g}"
            assert g.protocol_type in (None, "consumer"), f"{kind}: {g}"
            assert g.coordinator in (None, coordinator), f"{kind}: {g}"
            by_client = {v.client_id: v for v in g.members}
            assert set(by_client) == {m.name for m in members}, f"{kind}: {g.members}"
            for m in members:
                view = by_client[m.name]
                assert view.member_id == ids[m.name], f"{kind}: {view}"
                assert view.host.lstrip("/") == "127.0.0.1", f"{kind}: {view}"
                assert view.assignment == {(topic, p) for p in m.owned}, f"{kind}: {view}, {m}"
            u = got[unknown]
            assert (u.error_code, u.state, u.members) == (0, "Dead", []), f"{kind}: {u}"
            log(genv, f"{kind} describes {group}: {g}")
    finally:
        close_all(members)


def groups_on_every_coordinator(genv: GroupEnv, prefix: str) -> dict[int, str]:
    """{node id: a new group name that node coordinates}, for every live broker."""
    want = set(node_ids(genv))
    out: dict[int, str] = {}
    for _ in range(500):
        name = unique(prefix)
        found = genv.find_coordinator(name)
        assert found.error_code == 0, found
        out.setdefault(found.node_id, name)
        if set(out) == want:
            return out
    raise AssertionError(f"no group names coordinated by each of {sorted(want)}: {out}")


def test_list_groups_states_and_types(genv):
    """For every broker a Stable group (a live member) and an Empty one (its member committed
    and left), so that every coordinator holds some: both admin clients list all of them with
    their states; a states filter lists only groups in those states; the type filter classic
    lists them, consumer (KIP-848) none of them."""
    from confluent_kafka import TopicPartition

    topic = genv.new_topic(unique("lg"), 3)
    stable = groups_on_every_coordinator(genv, "lg-stable")
    empty = groups_on_every_coordinator(genv, "lg-empty")
    live = [ConfluentMember(f"lgs-{n}", genv.bootstrap(), g, topic) for n, g in stable.items()]
    gone = [ConfluentMember(f"lge-{n}", genv.bootstrap(), g, topic) for n, g in empty.items()]
    try:
        for m in [*live, *gone]:
            m.start()
        for m in [*live, *gone]:
            wait_split([m], 3, [3])
        for m in gone:
            offsets = [TopicPartition(topic, p, 1) for p in range(3)]
            done = m.call(lambda c, offsets=offsets: c.commit(offsets=offsets, asynchronous=False))
            assert all(tp.error is None for tp in done), done
            m.close()
        ours = {g: "Stable" for g in stable.values()} | {g: "Empty" for g in empty.values()}

        for kind in ADMIN_KINDS:
            with open_admin(genv, kind) as admin:

                def listed_with_states(admin=admin):
                    listed = admin.list_groups()
                    ok = all(listed.get(g, ("", None))[0] == s for g, s in ours.items())
                    return listed if ok else None

                every = wait_for(
                    listed_with_states, HANG_GUARD, f"{kind} to list our groups with their states"
                )
                assert {g: every[g][0] for g in ours} == ours, f"{kind}: {every}"
                for state in ("Stable", "Empty"):
                    only = admin.list_groups(states=[state])
                    assert {g for g, s in ours.items() if s == state} <= set(only), (
                        f"{kind}, states [{state}]: {only}"
                    )
                    assert {s for s, _ in only.values()} == {state}, f"{kind} [{state}]: {only}"
                classic = admin.list_groups(types=["classic"])
                assert set(ours) <= set(classic), f"{kind}, types [classic]: {classic}"
                assert {t for _, t in classic.values()} <= {"classic", None}, classic
                consumer = admin.list_groups(types=["consumer"])
                assert not set(ours) & set(consumer), f"{kind}, types [consumer]: {consumer}"
                both = admin.list_groups(states=["Stable"], types=["classic"])
                assert set(stable.values()) <= set(both), f"{kind}: {both}"
                assert not set(empty.values()) & set(both), f"{kind}: {both}"
            log(genv, f"{kind} lists {len(every)} groups")
    finally:
        close_all([*live, *gone])


@pytest.mark.parametrize("client", ADMIN_KINDS)
def test_delete_groups(genv, client):
    """A group with a live member and committed offsets: DeleteGroups answers NON_EMPTY_GROUP
    (and GROUP_ID_NOT_FOUND for an unknown group in the same call) and changes nothing; once
    the member has left, the group is deleted: its offsets read -1, it is Dead and unlisted, a
    second delete is GROUP_ID_NOT_FOUND, and a new consumer of the group (earliest) reads from
    offset 0, not from the old commits."""
    from confluent_kafka import TopicPartition

    topic = genv.new_topic(unique(f"del-{client}"), 2)
    produce(genv, topic, 2, 10, "del")
    group = unique(f"del-{client}")
    unknown = unique("del-nobody")
    member = ConfluentMember(f"del-a-{group[-4:]}", genv.bootstrap(), group, topic)
    again = ConfluentMember(f"del-b-{group[-4:]}", genv.bootstrap(), group, topic)

    def committed() -> dict[int, int]:
        return {p: o.offset for p, o in genv.offsets(group, topic, range(2)).items()}

    with open_admin(genv, client) as admin:
        try:
            member.start()
            wait_split([member], 2, [2])
            wait_records([member], 20)
            offsets = [TopicPartition(topic, 0, 5), TopicPartition(topic, 1, 7)]
            done = member.call(lambda c: c.commit(offsets=offsets, asynchronous=False))
            assert all(tp.error is None for tp in done), done
            assert committed() == {0: 5, 1: 7}

            got = admin.delete_groups([group, unknown])
            assert got == {group: aw.NON_EMPTY_GROUP, unknown: aw.GROUP_ID_NOT_FOUND}, got
            assert committed() == {0: 5, 1: 7}, "a refused delete removed offsets"
            assert admin.describe_groups([group])[group].state == "Stable"

            member.close()
            wait_for(
                lambda: admin.describe_groups([group])[group].state == "Empty",
                HANG_GUARD,
                f"{group} Empty after its member left",
            )
            assert admin.delete_groups([group]) == {group: 0}
            assert committed() == {0: gw.NO_OFFSET, 1: gw.NO_OFFSET}, "offsets survived"
            dead = admin.describe_groups([group])[group]
            assert (dead.error_code, dead.state, dead.members) == (0, "Dead", []), dead
            assert group not in admin.list_groups(), "a deleted group is still listed"
            assert admin.delete_groups([group]) == {group: aw.GROUP_ID_NOT_FOUND}

            again.start()
            wait_records([again], 20)
            first = {p: offs[0] for p, offs in again.seen().items()}
            assert first == {0: 0, 1: 0}, f"the new member started at {first}, not at 0"
        finally:
            close_all([member, again])


def test_offset_delete(genv):
    """OffsetDelete (KIP-496) through kafka-python's admin client, unchanged: while a member
    consumes the topic, its partitions answer GROUP_SUBSCRIBED_TO_TOPIC and keep their offsets,
    while an offset of a topic the group does not consume goes (and an unknown partition is
    UNKNOWN_TOPIC_OR_PARTITION); once the group is Empty, any partition's offset goes; an
    unknown group is GROUP_ID_NOT_FOUND for the whole request."""
    from confluent_kafka import TopicPartition
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as Partition
    from kafka.errors import GroupIdNotFoundError

    topic = genv.new_topic(unique("offdel"), 2)
    other = genv.new_topic(unique("offdel-other"), 1)
    produce(genv, topic, 2, 10, "offdel")
    group = unique("offdel")
    member = ConfluentMember(f"offdel-{group[-4:]}", genv.bootstrap(), group, topic)

    def committed(name: str, partitions: int) -> dict[int, int]:
        return {p: o.offset for p, o in genv.offsets(group, name, range(partitions)).items()}

    admin = KafkaAdminClient(bootstrap_servers=genv.bootstrap())
    try:
        member.start()
        wait_split([member], 2, [2])
        wait_records([member], 20)
        offsets = [TopicPartition(topic, 0, 5), TopicPartition(topic, 1, 7)]
        offsets.append(TopicPartition(other, 0, 3))
        done = member.call(lambda c: c.commit(offsets=offsets, asynchronous=False))
        assert all(tp.error is None for tp in done), done

        asked = [Partition(topic, 0), Partition(other, 0), Partition(other, 9)]
        got = {tp: error.errno for tp, error in admin.delete_group_offsets(group, asked).items()}
        assert got == {
            Partition(topic, 0): gw.GROUP_SUBSCRIBED_TO_TOPIC,
            Partition(other, 0): gw.NONE,
            Partition(other, 9): gw.UNKNOWN_TOPIC_OR_PARTITION,
        }, got
        assert committed(topic, 2) == {0: 5, 1: 7}, "a subscribed topic lost offsets"
        assert committed(other, 1) == {0: gw.NO_OFFSET}

        member.close()
        with open_admin(genv, "kafka-python") as views:
            wait_for(
                lambda: views.describe_groups([group])[group].state == "Empty",
                HANG_GUARD,
                f"{group} Empty after its member left",
            )
        got = admin.delete_group_offsets(group, [Partition(topic, 0)])
        assert {tp: error.errno for tp, error in got.items()} == {Partition(topic, 0): gw.NONE}
        assert committed(topic, 2) == {0: gw.NO_OFFSET, 1: 7}

        with pytest.raises(GroupIdNotFoundError):
            admin.delete_group_offsets(unique("offdel-nobody"), [Partition(topic, 0)])
    finally:
        admin.close()
        close_all([member])
