#!/usr/bin/env bash
# The test command: system packages, virtualenv with the package (maturin dev build) and test
# dependencies, Rust unit tests, ruff, mypy, pytest, then the analytics and client tests again
# on the newest versions pyproject's ranges allow. Extra arguments go to pytest, e.g.
#   bash tests/run.sh -k segments -x
# Set KAFSCALE_SKIP_INSTALL=1 to reuse an existing .venv build as it is (quick reruns).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$PWD"

step() { printf '\n==> %s\n' "$*"; }

# --- system packages (only when missing, so a prepared machine skips apt entirely) ----------
missing=()
command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
command -v kcat >/dev/null 2>&1 || missing+=(kcat)
# promtool and prometheus: the checks of deploy/monitoring's alert rules and dashboard queries
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
# the Java client's tests: tests/jvm is built by Maven, which fetches its jars from Maven Central
command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null 2>&1 || missing+=(maven)
if ((${#missing[@]})); then
  step "apt-get install ${missing[*]}"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update
  $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi

# --- virtualenv with the package and the test extra -----------------------------------------
PY="$ROOT/.venv/bin/python"
if [[ ! -x $PY ]]; then
  step "python3 -m venv .venv"
  python3 -m venv .venv
fi
if [[ ${KAFSCALE_SKIP_INSTALL:-0} != 1 ]]; then
  step "pip install -e .[test] (maturin, dev profile)"
  "$PY" -m pip install --quiet --upgrade pip
  MATURIN_PEP517_ARGS="--profile dev" "$PY" -m pip install --quiet -e ".[test]"
fi
export PATH="$ROOT/.venv/bin:$PATH"
# The etcd client's build script needs protoc; the test extra installs it into the venv.
export PROTOC="$ROOT/.venv/bin/protoc"

# --- Rust unit tests ------------------------------------------------------------------------
step "cargo test"
# Without the extension-module feature pyo3 links libpython: point it at the venv's
# interpreter and make the shared library findable when the test binaries run.
export PYO3_PYTHON="$PY"
PYLIBDIR="$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR") or "")')"
if [[ -n $PYLIBDIR ]]; then
  export LD_LIBRARY_PATH="$PYLIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
cargo test --locked
step "cargo fmt --check, cargo clippy -D warnings"
cargo fmt --check
cargo clippy --locked --all-targets -- -D warnings
# The cargo-fuzz crate is a workspace of its own (bench/fuzz.sh runs it): only compiled here, on
# the stable toolchain, in the core's target directory (its dependencies are the core's, already
# built by the steps above: about 10 s instead of 2.5 min from cold). A changed dependency of the
# core needs its lock file too: cp Cargo.lock fuzz/Cargo.lock && cargo metadata --manifest-path
# fuzz/Cargo.toml >/dev/null (this adds the fuzz crate's own dependencies).
step "cargo check (fuzz crate), cargo fmt --check"
CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}" \
  cargo check --locked --manifest-path fuzz/Cargo.toml --bins
cargo fmt --check --manifest-path fuzz/Cargo.toml

# --- lint -----------------------------------------------------------------------------------
lint_paths=()
for p in python tests bench spark; do
  [[ -e $p ]] && lint_paths+=("$p")
done
step "ruff check ${lint_paths[*]}"
ruff check "${lint_paths[@]}"
step "ruff format --check ${lint_paths[*]}"
ruff format --check "${lint_paths[@]}"
# What it checks and how strictly: [tool.mypy] in pyproject.toml (found from the repo root).
step "mypy --strict (python package)"
"$PY" -m mypy
# The stub against the built extension: every name, signature and class it declares exists
# as declared (mypy_path in [tool.mypy] makes it this tree's stub).
step "stubtest kafscale._core"
"$PY" -m mypy.stubtest kafscale._core --mypy-config-file pyproject.toml \
  --allowlist tests/stubtest_allowlist.txt

# --- pytest ---------------------------------------------------------------------------------
step "pytest"
# The slowest tests are listed at the end: where the suite's time goes.
"$PY" -m pytest -ra --durations=30 "$@"

# --- the same analytics and client tests on the newest versions the ranges allow -------------
# pyproject's ranges are promises: a second virtualenv takes the newest version each range
# allows, resolved now (tests/latest_requirements.py says which), and runs the tests that
# exercise them against the package built above; the JVM clients' tests run on the newest
# Kafka release (tests/support/jvm.py). Skipped when pytest was given arguments (a
# partial run) or KAFSCALE_SKIP_LATEST=1.
if [[ $# -eq 0 && ${KAFSCALE_SKIP_LATEST:-0} != 1 ]]; then
  LATEST="$ROOT/.venv-latest"
  step "latest environment: pip install the newest versions pyproject's ranges allow"
  if [[ ! -x $LATEST/bin/python ]]; then
    python3 -m venv "$LATEST"
  fi
  "$LATEST/bin/python" -m pip install --quiet --upgrade pip
  "$PY" tests/latest_requirements.py >"$LATEST/requirements.txt"
  "$LATEST/bin/python" -m pip install --quiet --upgrade --upgrade-strategy eager \
    -r "$LATEST/requirements.txt"
  "$LATEST/bin/python" -m pip list --format=freeze |
    grep -iE '^(pyspark|polars|pyarrow|pyiceberg|confluent-kafka|kafka-python|aiokafka)==' |
    paste -sd' '
  # The JVM tests' Maven modules too: the newest Kafka release on Maven Central, not the pom's.
  export KAFSCALE_TEST_NEWEST_KAFKA=1
  "$LATEST/bin/python" tests/support/jvm.py
  # The JVM tests again only when Maven Central has a Kafka release the pinned run did not
  # test (when the newest is the pin, they ran on it above).
  JVM_TESTS=()
  if [[ $("$LATEST/bin/python" tests/support/jvm.py --newer) == newer ]]; then
    JVM_TESTS=(tests/integration/test_java_client.py tests/integration/test_kafka_tools.py
      tests/integration/test_kafka_streams.py tests/integration/test_kafka_connect.py
      tests/integration/test_mirror_maker.py tests/integration/test_java_transactions.py)
  else
    echo "the newest Kafka release on Maven Central is the pinned one: its JVM tests ran above"
  fi
  step "pytest (latest environment): analytics and client tests"
  PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}" "$LATEST/bin/python" -m pytest -ra \
    tests/integration/test_spark_source.py tests/integration/test_polars_scan.py \
    tests/integration/test_iceberg.py \
    tests/integration/test_segment_reader.py tests/integration/test_cli_segments.py \
    tests/integration/test_cli_quotas.py \
    tests/integration/test_analytics_freshness.py tests/integration/test_spark_cluster.py \
    tests/integration/test_clients.py tests/integration/test_idempotence.py \
    tests/integration/test_tls.py tests/integration/test_sasl.py \
    tests/integration/test_compacted_topics.py tests/integration/test_transactions.py \
    tests/integration/test_transaction_offsets.py tests/integration/test_transaction_coordinators.py \
    tests/integration/test_transactions_analytics.py "${JVM_TESTS[@]}"
fi
