"""deploy/monitoring (Grafana dashboard, Prometheus alert rules) and its Kustomize component
deploy/kubernetes/components/monitoring.

- The rules pass ``promtool check rules`` and their unit tests (``promtool test rules``), which
  must show the key alerts both firing and staying quiet; every alert has a ``for:``, a
  severity and runbook-style annotations.
- The PrometheusRule's spec.groups equal the plain rules file's groups.
- Every metric the rules and the dashboard's queries name is served by a real broker after
  produce and consume traffic, and listed in docs/operations.md's metrics table (except the two
  named below: Prometheus's ``up`` and kube-state-metrics' pod readiness).
- A real Prometheus (Debian's ``prometheus`` package, like promtool) scrapes that broker with
  the rules loaded: every rule evaluates without error and none is pending or firing, and
  every dashboard query runs and answers with data.
- The component renders with deploy/README.md's overlay and only adds the PodMonitor, the
  PrometheusRule and the dashboard ConfigMap (whose JSON is the file's, byte for byte).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from prometheus_client.openmetrics.parser import text_string_to_metric_families
from support.group_traffic import consumed_and_committed, produce
from support.procs import ManagedProcess, free_port

pytestmark = pytest.mark.timeout(240)

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
MONITORING = DEPLOY / "monitoring"
RULES = MONITORING / "kafscale-alerts.rules.yml"
RULE_TESTS = MONITORING / "kafscale-alerts.test.yml"
DASHBOARD = MONITORING / "kafscale-dashboard.json"
KUBE = DEPLOY / "kubernetes"
COMPONENT = KUBE / "components" / "monitoring"
PROMETHEUS_RULE = COMPONENT / "prometheusrule.yaml"

INSTALL_HINT = "apt-get install prometheus (Debian's package has promtool and prometheus)"
KUBECTL_HINT = "kubectl (with its built-in kustomize) renders deploy/kubernetes"
# The brief of the rules: these must be shown firing on a broken and quiet on a healthy input.
MUST_BE_TESTED = {
    "KafScaleBrokerDown",
    "KafScaleConsumerLagGrowing",
    "KafScaleFileDescriptorsNearLimit",
    "KafScalePartitionsWithoutOwner",
}
# Names used in the rules that no broker serves, and who does.
EXTERNAL_METRICS = {
    "up": "Prometheus, for every target it scrapes",
    "kube_pod_status_ready": "kube-state-metrics (the broker serves no readiness metric)",
}
# The dashboard's variables, as Prometheus-side values: "all brokers" and a typical interval.
DASHBOARD_VARIABLES = {"$job": ".*", "$instance": ".*", "$__rate_interval": "1m"}
SCRAPE_JOB = "kafscale-broker"


def tool(name: str, hint: str = INSTALL_HINT) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is missing: {hint}")
    return path


def promtool(*args: str, cwd: Path = MONITORING) -> subprocess.CompletedProcess:
    return subprocess.run(
        [tool("promtool"), *args], cwd=cwd, capture_output=True, text=True, timeout=60
    )


def plain_groups() -> list[dict]:
    return yaml.safe_load(RULES.read_text())["groups"]


def alert_rules() -> list[dict]:
    return [r for g in plain_groups() for r in g["rules"] if "alert" in r]


# --- PromQL: the metric names an expression reads ----------------------------------------------

PROMQL_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or"}
PROMQL_KEYWORDS |= {"unless", "bool", "offset", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression, found roughly: drop strings, label matchers, label
    lists and ranges; of the identifiers left, those not called (functions, aggregations) and
    not keywords or number parts (1e3, 5m) are metric names."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", expr):
        called = expr[m.end() :].lstrip().startswith("(")
        number_part = m.start() > 0 and (
            expr[m.start() - 1].isdigit() or expr[m.start() - 1] == "."
        )
        if not called and not number_part and m.group().lower() not in PROMQL_KEYWORDS:
            names.add(m.group())
    return names


def test_metric_names_finds_what_a_query_reads():
    expr = (
        'histogram_quantile(0.99, sum by (api, le) (rate(kafscale_a_bucket{api="Produce"}[5m])))'
        " > 2 and on (instance) sum without (x) (kafscale_b offset 5m) / ignoring (y) up"
    )
    assert metric_names(expr) == {"kafscale_a_bucket", "kafscale_b", "up"}


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def dashboard_queries() -> dict[str, str]:
    """Every query of the dashboard (panel targets and the variables' label_values metric
    selectors), with the variables substituted, keyed by where it is."""
    board = dashboard()
    queries = {}
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            queries[f"panel {panel['id']} ({panel['title']}) {target['refId']}"] = target["expr"]
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            m = re.fullmatch(r"label_values\((.*),\s*\w+\)", variable["query"]["query"])
            assert m, variable
            queries[f"variable {variable['name']}"] = m.group(1)
    for key, expr in queries.items():
        for name, value in DASHBOARD_VARIABLES.items():
            expr = expr.replace(name, value)
        assert "$" not in expr, f"{key}: unknown variable in {expr}"
        queries[key] = expr
    return queries


# --- the rules, statically -------------------------------------------------------------------


def test_rules_pass_promtool_check():
    result = promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_rule_unit_tests_pass():
    result = promtool("test", "rules", str(RULE_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr


def test_rule_unit_tests_show_the_key_alerts_firing_and_quiet():
    tests = yaml.safe_load(RULE_TESTS.read_text())
    assert [Path(f).name for f in tests["rule_files"]] == [RULES.name]
    firing, quiet = set(), set()
    for case in tests["tests"]:
        for check in case["alert_rule_test"]:
            (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    assert firing & quiet >= MUST_BE_TESTED, (firing, quiet)
    assert firing | quiet <= {r["alert"] for r in alert_rules()}


def test_every_alert_has_a_duration_severity_and_runbook_text():
    alerts = alert_rules()
    assert len({r["alert"] for r in alerts}) == len(alerts), "duplicate alert names"
    for rule in alerts:
        name = rule["alert"]
        assert re.fullmatch(r"\d+[smh]", rule.get("for", "")), name
        assert rule["labels"]["severity"] in {"warning", "critical"}, name
        annotations = rule["annotations"]
        assert len(annotations.get("summary", "")) > 10, name
        # Says what is wrong and what to check: at least two clauses.
        assert len(annotations.get("description", "")) > 80, name


def test_prometheusrule_groups_equal_the_plain_rules_file():
    rule = yaml.safe_load(PROMETHEUS_RULE.read_text())
    assert (rule["apiVersion"], rule["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    assert rule["spec"]["groups"] == plain_groups()


# --- the dashboard, statically ---------------------------------------------------------------


def test_dashboard_uses_its_datasource_variable_everywhere():
    board = dashboard()
    (ds,) = [v for v in board["templating"]["list"] if v["name"] == "DS_PROMETHEUS"]
    assert (ds["type"], ds["query"]) == ("datasource", "prometheus")
    expected = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
    ids = []
    for panel in board["panels"]:
        ids.append(panel["id"])
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == expected, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == expected, panel["title"]
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            assert variable["datasource"] == expected, variable["name"]
    assert len(ids) == len(set(ids)), "panel ids must be unique"


def test_dashboard_queries_are_valid_promql(tmp_path):
    # promtool has no query checker, but checks the expressions of recording rules.
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:query_{i}", "expr": expr}
                    for i, expr in enumerate(dashboard_queries().values())
                ],
            }
        ]
    }
    path = tmp_path / "dashboard.rules.yml"
    path.write_text(yaml.safe_dump(rules))
    result = promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


# --- against a real broker and a real Prometheus -----------------------------------------------


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read().decode()


@pytest.fixture(scope="module")
def traffic_broker(module_broker_factory):
    """A broker that produced, fetched and compacted, with a consumer group that lags 5
    records per partition behind; returns its /metrics URL."""
    port = free_port()
    broker = module_broker_factory(
        ["--metrics-addr", f"127.0.0.1:{port}"], env={"KAFSCALE_DEFAULT_PARTITIONS": "2"}
    )
    url = f"http://127.0.0.1:{port}/metrics"
    topic, group = f"mon-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    produce(broker.bootstrap, topic, 40)
    with consumed_and_committed(broker.bootstrap, topic, group, 40):
        pass
    produce(broker.bootstrap, topic, 10)
    # Lag is worked out from the coordinator's report, refreshed every second.
    deadline = time.monotonic() + 20
    while "kafscale_consumer_group_lag{" not in get(url):
        assert time.monotonic() < deadline, "no kafscale_consumer_group_lag series"
        time.sleep(0.2)
    return url


def served_names(metrics_url: str) -> set[str]:
    """Family and sample names (``_total``, ``_bucket``, ...) of one /metrics page."""
    names = set()
    for family in text_string_to_metric_families(get(metrics_url)):
        names.add(family.name)
        names.update(sample.name for sample in family.samples)
    return names


def documented_metric_names() -> set[str]:
    """The metric names of docs/operations.md's metrics table (section "Metrics")."""
    text = (ROOT / "docs" / "operations.md").read_text()
    table = text[text.index("| Metric | Type | Labels |") :].split("\n\n", 1)[0]
    return set(re.findall(r"^\| `((?:kafscale|process)_[a-z0-9_]+)`", table, re.MULTILINE))


def used_metric_names() -> dict[str, set[str]]:
    """Each metric name used by the rules or the dashboard, and where."""
    exprs = {
        f"rule {r.get('alert', r.get('record'))}": r["expr"]
        for g in plain_groups()
        for r in g["rules"]
    }
    exprs.update(dashboard_queries())
    used: dict[str, set[str]] = {}
    for where, expr in exprs.items():
        for name in metric_names(expr):
            used.setdefault(name, set()).add(where)
    return used


def test_every_metric_used_is_served_by_a_broker_and_documented(traffic_broker):
    served = served_names(traffic_broker)
    documented = documented_metric_names()
    used = used_metric_names()
    assert "kafscale_consumer_group_lag" in used and "up" in used  # the parser found them
    assert "process_open_fds" in documented  # the table parser found the process metrics
    problems = []
    for name, where in sorted(used.items()):
        if name in EXTERNAL_METRICS:
            continue
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        if name not in served:
            problems.append(f"{name} is not served (used by {', '.join(sorted(where))})")
        elif name not in documented and base not in documented:
            problems.append(f"{name} is not in docs/operations.md's metrics table")
    assert problems == [], "\n".join(problems)


class PrometheusServer(ManagedProcess):
    """Debian's ``prometheus`` on a loopback port, scraping one broker every second with the
    alert rules loaded."""

    def __init__(self, root: Path, metrics_url: str) -> None:
        super().__init__("prometheus", root / "prometheus.log")
        self.root = root
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        target = urllib.parse.urlsplit(metrics_url).netloc
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(RULES)],
            "scrape_configs": [{"job_name": SCRAPE_JOB, "static_configs": [{"targets": [target]}]}],
        }
        (root / "prometheus.yml").write_text(yaml.safe_dump(config))

    def start(self) -> PrometheusServer:
        argv = [
            tool("prometheus"),
            f"--config.file={self.root / 'prometheus.yml'}",
            f"--storage.tsdb.path={self.root / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
        ]
        self._spawn(argv, {}, self.root)
        return self

    def api(self, path: str, **params: str) -> dict:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        answer = json.loads(get(f"{self.base}/api/v1/{path}{query}"))
        assert answer["status"] == "success", answer
        return answer["data"]

    def query(self, expr: str) -> list[dict]:
        return self.api("query", query=expr)["result"]


@pytest.fixture(scope="module")
def prometheus(traffic_broker):
    with tempfile.TemporaryDirectory() as tmp:
        server = PrometheusServer(Path(tmp), traffic_broker).start()
        try:
            deadline = time.monotonic() + 60
            while True:
                assert server.running, server.log_text()
                try:
                    # Enough scrapes for rate() over the dashboard's 1m interval.
                    if server.query(f'count_over_time(up{{job="{SCRAPE_JOB}"}}[1m]) >= 5'):
                        break
                except OSError:
                    pass  # not listening yet
                assert time.monotonic() < deadline, server.log_text()
                time.sleep(0.5)
            yield server
        finally:
            server.cleanup()


def test_rules_evaluate_quietly_on_a_healthy_broker(prometheus):
    assert prometheus.query(f'up{{job="{SCRAPE_JOB}"}}')[0]["value"][1] == "1"
    time.sleep(2)  # another evaluation round now that the broker has been scraped
    rules = [r for g in prometheus.api("rules")["groups"] for r in g["rules"]]
    assert {r["name"] for r in rules} == {r["alert"] for r in alert_rules()}
    for rule in rules:
        assert rule["health"] == "ok", rule
        assert rule["state"] == "inactive", rule


def test_dashboard_queries_answer_on_prometheus(prometheus):
    empty = []
    for where, expr in dashboard_queries().items():
        # Raises on a query Prometheus rejects. Every series queried exists from the broker's
        # start-up (error counters at 0), so each query has data.
        if not prometheus.query(expr):
            empty.append(f"{where}: {expr}")
    assert empty == [], "queries without data:\n" + "\n".join(empty)


# --- the Kustomize component -----------------------------------------------------------------


def readme_overlay() -> tuple[str, str]:
    """(its path from the repository root, the kustomization) of deploy/README.md's overlay
    with the monitoring component."""
    text = (DEPLOY / "README.md").read_text()
    section = text[text.index("\n### With the prometheus-operator\n") :]
    section = section[: section.index("\n### ", 1)]
    blocks = re.findall(r"^```yaml\n(.*?)^```", section, re.MULTILINE | re.DOTALL)
    (overlay,) = [b for b in blocks if "kind: Kustomization" in b]
    return overlay.splitlines()[0].removeprefix("# "), overlay


def render_in_copy(overlays: dict[str, str]) -> dict[str, list[dict]]:
    """Each overlay (path from the repository root: kustomization text) written into a copy
    of deploy/kubernetes and deploy/monitoring (which the component uses), rendered by
    ``kubectl kustomize`` as tests/unit/test_deploy.py does."""
    rendered = {}
    with tempfile.TemporaryDirectory() as tmp:
        for directory in (KUBE, MONITORING):
            shutil.copytree(directory, Path(tmp, directory.relative_to(ROOT)))
        for path, text in overlays.items():
            target = Path(tmp, path)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
            result = subprocess.run(
                [tool("kubectl", KUBECTL_HINT), "kustomize", str(target.parent)],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert result.returncode == 0, result.stderr
            rendered[path] = [d for d in yaml.safe_load_all(result.stdout) if d is not None]
    return rendered


def test_component_renders_and_adds_only_the_monitoring_objects():
    path, overlay = readme_overlay()
    assert "../../components/monitoring" in overlay
    assert f"apply -k {Path(path).parent}\n" in (DEPLOY / "README.md").read_text()
    plain = "deploy/kubernetes/overlays/plain/kustomization.yaml"
    docs = render_in_copy({path: overlay, plain: "resources:\n  - ../bundled-etcd\n"})
    with_component, without = docs[path], docs[plain]

    added = [d for d in with_component if d not in without]
    assert [d for d in without if d not in with_component] == []
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in added)
    assert kinds == [
        ("ConfigMap", "kafscale-grafana-dashboard"),
        ("PodMonitor", "kafscale-broker"),
        ("PrometheusRule", "kafscale"),
    ]
    by_kind = {d["kind"]: d for d in added}

    config_map = by_kind["ConfigMap"]
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["data"] == {DASHBOARD.name: DASHBOARD.read_text()}
    kubernetes_validate.validate(config_map, "1.25.0", strict=True)

    assert by_kind["PrometheusRule"]["spec"]["groups"] == plain_groups()

    # The PodMonitor scrapes the brokers' metrics port, under a job the rules select.
    monitor = by_kind["PodMonitor"]["spec"]
    (sts,) = [
        d
        for d in without
        if d["kind"] == "StatefulSet" and d["metadata"]["name"] == "kafscale-broker"
    ]
    pod_labels = sts["spec"]["template"]["metadata"]["labels"]
    assert monitor["selector"]["matchLabels"].items() <= pod_labels.items()
    for d in without:
        if d["kind"] == "StatefulSet" and d is not sts:  # etcd is not scraped as a broker
            assert (
                not monitor["selector"]["matchLabels"].items()
                <= d["spec"]["template"]["metadata"]["labels"].items()
            )
    (endpoint,) = monitor["podMetricsEndpoints"]
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports[endpoint["port"]] == 9464 and endpoint["path"] == "/metrics"
    (relabel,) = [r for r in endpoint["relabelings"] if r.get("targetLabel") == "job"]
    assert re.fullmatch(".*kafscale.*", relabel["replacement"])
