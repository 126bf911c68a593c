"""deploy/: the NetworkPolicies (rendered like the rest by test_deploy's helpers). Each pod we
ship is selected by an Ingress policy (so everything not allowed is denied), and each of its
ports is open to exactly the peers deploy/README.md promises: Kafka to every client, metrics
to the monitoring namespace, etcd's client port to the brokers, its peer port to its members.
With components/tls, Kafka over TLS (9093) is open in the very rule that opens 9092, and
components/sasl (on top of tls, SASL_SSL on that port) leaves it so.
"""

from __future__ import annotations

import copy

import pytest
from test_deploy import (
    BROKER,
    SASL,
    TLS,
    Docs,
    broker_container,
    container_port,
    find,
    one,
    overlay_docs,
)

MONITORING = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
ANYONE = None  # a rule without "from"
ETCD = "kafscale-etcd"


def pod_template(docs: Docs, statefulset: str) -> dict:
    return one(docs, "StatefulSet", statefulset)["spec"]["template"]


def selects(policy: dict, labels: dict[str, str]) -> bool:
    selector = policy["spec"]["podSelector"]
    assert set(selector) <= {"matchLabels"}, "only matchLabels selectors are checked here"
    return selector.get("matchLabels", {}).items() <= labels.items()


def allowed_peers(docs: Docs, statefulset: str) -> tuple[list[str], dict[int, list]]:
    """(problems, {container port: [the "from" of each rule opening it]}) over every Ingress
    policy selecting the StatefulSet's pods."""
    template = pod_template(docs, statefulset)
    (container,) = template["spec"]["containers"]
    policies = [
        p
        for p in find(docs, "NetworkPolicy")
        if selects(p, template["metadata"]["labels"]) and "Ingress" in p["spec"]["policyTypes"]
    ]
    if not policies:
        return [f"no Ingress NetworkPolicy selects the pods of {statefulset}"], {}
    problems, peers = [], {}
    for policy in policies:
        for rule in policy["spec"].get("ingress", []):
            if "ports" not in rule:
                problems.append(f"{policy['metadata']['name']}: a rule opens every port")
            for port in rule.get("ports", []):
                number = container_port(container, port["port"])
                if number is None or port.get("protocol", "TCP") != "TCP":
                    problems.append(f"{policy['metadata']['name']}: {port} is no container port")
                peers.setdefault(number, []).append(rule.get("from"))
    return problems, peers


def peer_problems(docs: Docs, statefulset: str, want: dict[str, list]) -> list[str]:
    """Exactly the ports named in ``want`` are open, each to exactly those peers."""
    problems, peers = allowed_peers(docs, statefulset)
    (container,) = pod_template(docs, statefulset)["spec"]["containers"]
    want_numbers = {container_port(container, name): [w] for name, w in want.items()}
    for number, got in peers.items():
        if number in want_numbers and got != want_numbers[number]:
            problems.append(f"{statefulset} port {number} is open to {got}")
        elif number not in want_numbers:
            problems.append(f"{statefulset} port {number} should not be open")
    for number in set(want_numbers) - set(peers):
        problems.append(f"{statefulset} port {number} is open to nobody")
    return problems


def broker_policy_problems(docs: Docs) -> list[str]:
    want = {"kafka": ANYONE, "metrics": MONITORING}
    if container_port(broker_container(docs), "kafka-tls") is not None:
        want["kafka-tls"] = want["kafka"]
    return peer_problems(docs, BROKER, want)


def tls_rule_problems(docs: Docs) -> list[str]:
    """Every rule of the broker policy that opens kafka opens kafka-tls, and no other rule
    does: whoever narrows the Kafka rule narrows both."""
    problems = []
    for i, rule in enumerate(one(docs, "NetworkPolicy", BROKER)["spec"]["ingress"]):
        ports = {p["port"] for p in rule.get("ports", [])}
        if ("kafka" in ports) != ("kafka-tls" in ports):
            problems.append(f"rule {i} opens {sorted(ports)}: kafka and kafka-tls go together")
    return problems


def etcd_policy_problems(docs: Docs) -> list[str]:
    brokers = [{"podSelector": {"matchLabels": pod_template(docs, BROKER)["metadata"]["labels"]}}]
    members = [{"podSelector": {"matchLabels": pod_template(docs, ETCD)["metadata"]["labels"]}}]
    return peer_problems(docs, ETCD, {"client": brokers, "peer": members, "metrics": MONITORING})


@pytest.mark.parametrize("name", ["bundled-etcd", "external-etcd", TLS, SASL])
def test_brokers_take_kafka_from_anyone_and_metrics_from_monitoring_only(name):
    assert broker_policy_problems(overlay_docs(name)) == []


@pytest.mark.parametrize("name", [TLS, SASL])
def test_tls_port_is_opened_by_the_kafka_rule(name):
    docs = overlay_docs(name)
    assert 9093 in allowed_peers(docs, BROKER)[1]
    assert tls_rule_problems(docs) == []


def test_bundled_etcd_takes_clients_from_the_brokers_and_peers_from_its_members():
    assert etcd_policy_problems(overlay_docs("bundled-etcd")) == []


def _rules(docs: Docs, name: str) -> list[dict]:
    return one(docs, "NetworkPolicy", name)["spec"]["ingress"]


BREAKAGES = {
    "no broker policy": (
        lambda d: d.remove(one(d, "NetworkPolicy", BROKER)),
        broker_policy_problems,
    ),
    "metrics open to anyone": (
        lambda d: _rules(d, BROKER)[1].pop("from"),
        broker_policy_problems,
    ),
    "a rule without ports": (
        lambda d: _rules(d, BROKER).append({"from": MONITORING}),
        broker_policy_problems,
    ),
    "etcd client port from any pod": (
        lambda d: _rules(d, ETCD)[0]["from"][0]["podSelector"].update(matchLabels={}),
        etcd_policy_problems,
    ),
    "etcd peer port from the brokers": (
        lambda d: _rules(d, ETCD)[1]["from"].extend(_rules(d, ETCD)[0]["from"]),
        etcd_policy_problems,
    ),
    "policy selects other pods": (
        lambda d: one(d, "NetworkPolicy", ETCD)["spec"]["podSelector"]["matchLabels"].update(
            {"app.kubernetes.io/component": "other"}
        ),
        etcd_policy_problems,
    ),
}


@pytest.mark.parametrize("breakage", sorted(BREAKAGES))
def test_policy_checks_catch_a_broken_policy(breakage):
    docs = overlay_docs("bundled-etcd")
    mutate, check = BREAKAGES[breakage]
    broken = copy.deepcopy(docs)
    mutate(broken)
    assert set(check(broken)) - set(check(docs)), f"{check.__name__} missed: {breakage}"


def _move_tls_port(docs: Docs, rule: dict) -> None:
    """Take kafka-tls out of the Kafka rule (the first) and put it in ``rule``."""
    kafka_rule = _rules(docs, BROKER)[0]
    kafka_rule["ports"] = [p for p in kafka_rule["ports"] if p["port"] != "kafka-tls"]
    rule.setdefault("ports", []).append({"port": "kafka-tls", "protocol": "TCP"})


def _tls_rule_of_its_own(docs: Docs) -> None:
    rule: dict = {}
    _move_tls_port(docs, rule)
    _rules(docs, BROKER).append(rule)


TLS_BREAKAGES = {
    "TLS port not opened": (
        lambda d: _move_tls_port(d, {}),
        broker_policy_problems,
    ),
    "TLS port open to monitoring only": (
        lambda d: _move_tls_port(d, _rules(d, BROKER)[1]),
        broker_policy_problems,
    ),
    "TLS port in a rule of its own": (_tls_rule_of_its_own, tls_rule_problems),
}


@pytest.mark.parametrize("breakage", sorted(TLS_BREAKAGES))
def test_policy_checks_catch_a_broken_tls_policy(breakage):
    docs = overlay_docs(TLS)
    mutate, check = TLS_BREAKAGES[breakage]
    broken = copy.deepcopy(docs)
    mutate(broken)
    assert set(check(broken)) - set(check(docs)), f"{check.__name__} missed: {breakage}"
