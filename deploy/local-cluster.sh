#!/usr/bin/env bash
# A 3-broker KafScale cluster on this machine, in one command:
#   bash deploy/local-cluster.sh
# starts etcd, an S3 server (moto) with a bucket, and 3 brokers on 127.0.0.1, prints the
# bootstrap servers, and runs until Ctrl-C or SIGTERM, which stops the brokers (they flush to S3
# and release their partitions), then moto and etcd. Everything lives in a temporary directory
# that is removed at the end. Exit code 0 when every broker stopped cleanly.
#
# Needs: bash >= 4.3, the kafscale package (`pip install .`), moto's server
# (`pip install "moto[server]"`) and etcd (Debian: `apt-get install etcd-server`).
#
# Settings (environment):
#   LOCAL_BROKER_PORTS   Kafka ports of the brokers        (default "9092 9093 9094")
#   LOCAL_METRICS_PORTS  /metrics, /healthz, /readyz ports (default "9464 9465 9466")
#   LOCAL_ETCD_PORT      etcd client port                   (default 12379)
#   LOCAL_ETCD_PEER_PORT etcd peer port                     (default 12380)
#   LOCAL_S3_PORT        moto S3 port                       (default 5000)
#   LOCAL_CLUSTER_DIR    data and logs; kept when given     (default: a temporary directory)
#   PYTHON               interpreter with kafscale installed (default: python3, else python)
# Other KAFSCALE_* variables in the environment reach every broker, e.g. KAFSCALE_LOG_LEVEL=debug.
set -euo pipefail
# Job control: every background process gets its own process group, so a Ctrl-C in the terminal
# reaches only this script, which then stops the processes in order (brokers before the stores
# they flush to), and each group can be signalled as a whole.
set -m

read -r -a BROKER_PORTS <<<"${LOCAL_BROKER_PORTS:-9092 9093 9094}"
read -r -a METRICS_PORTS <<<"${LOCAL_METRICS_PORTS:-9464 9465 9466}"
# Not etcd's usual 2379/2380: Debian's etcd-server package runs a system etcd there.
ETCD_PORT=${LOCAL_ETCD_PORT:-12379}
ETCD_PEER_PORT=${LOCAL_ETCD_PEER_PORT:-12380}
S3_PORT=${LOCAL_S3_PORT:-5000}
PYTHON=${PYTHON:-$(command -v python3 || command -v python || true)}
BUCKET=kafscale-local
START_TIMEOUT=60 # seconds for each process to come up
STOP_TIMEOUT=60  # seconds for each process to exit after SIGTERM

# moto accepts any credentials; fixed ones keep real AWS keys from the environment out of it.
export AWS_ACCESS_KEY_ID=kafscale-local AWS_SECRET_ACCESS_KEY=kafscale-local
export AWS_REGION=us-east-1 AWS_DEFAULT_REGION=us-east-1
unset AWS_SESSION_TOKEN AWS_PROFILE

die() {
  echo "local-cluster: $*" >&2
  exit 1
}

# --- preflight: fail before starting anything ------------------------------------------------
[[ ${#BROKER_PORTS[@]} -eq 3 ]] || die "LOCAL_BROKER_PORTS needs 3 ports, got '${BROKER_PORTS[*]}'"
[[ ${#METRICS_PORTS[@]} -eq 3 ]] || die "LOCAL_METRICS_PORTS needs 3 ports, got '${METRICS_PORTS[*]}'"
command -v etcd >/dev/null || die "etcd not found on PATH; install it (Debian: apt-get install etcd-server)"
[[ -n $PYTHON ]] || die "no python3 on PATH; set PYTHON to the interpreter that has kafscale"
"$PYTHON" -c 'import kafscale._core' 2>/dev/null ||
  die "$PYTHON cannot import kafscale._core; install the package (pip install .) or set PYTHON"
"$PYTHON" -c 'import moto.server' 2>/dev/null ||
  die "$PYTHON cannot import moto.server; install it: pip install 'moto[server]'"

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for port in "${BROKER_PORTS[@]}" "${METRICS_PORTS[@]}" "$ETCD_PORT" "$ETCD_PEER_PORT" "$S3_PORT"; do
  ! port_in_use "$port" || die "port $port is already in use; pick others (see the top of $0)"
done

if [[ -n ${LOCAL_CLUSTER_DIR:-} ]]; then
  ROOT=$LOCAL_CLUSTER_DIR
  KEEP_ROOT=1
  mkdir -p "$ROOT"
else
  ROOT=$(mktemp -d "${TMPDIR:-/tmp}/kafscale-local.XXXXXX")
  KEEP_ROOT=0
fi
mkdir -p "$ROOT/logs"

# --- process bookkeeping ---------------------------------------------------------------------
NAMES=() # in start order
PIDS=()
STOPPING=0

start() { # start NAME COMMAND...: run in the background, output to $ROOT/logs/NAME.log
  local name=$1
  shift
  "$@" >"$ROOT/logs/$name.log" 2>&1 </dev/null &
  NAMES+=("$name")
  PIDS+=("$!")
}

alive() { kill -0 "$1" 2>/dev/null; }

stop() { # stop STRICT INDEX...: SIGTERM their process groups, SIGKILL after STOP_TIMEOUT.
  # Returns 1 if one had to be killed or, when STRICT is 1, exited non-zero (etcd, for one,
  # ends a clean shutdown by re-raising SIGTERM, so only the brokers' exit codes count).
  local strict=$1 i pid waited=0 code=0 status
  shift
  for i in "$@"; do kill -TERM -- "-${PIDS[$i]}" 2>/dev/null || true; done
  for i in "$@"; do
    pid=${PIDS[$i]}
    while alive "$pid" && ((waited < STOP_TIMEOUT * 10)); do
      sleep 0.1
      waited=$((waited + 1))
    done
    if alive "$pid"; then
      echo "local-cluster: ${NAMES[$i]} did not stop within ${STOP_TIMEOUT}s; killing it" >&3
      kill -KILL -- "-$pid" 2>/dev/null || true
      code=1
    fi
    status=0
    wait "$pid" || status=$?
    if ((strict && status != 0)); then
      echo "local-cluster: ${NAMES[$i]} exited with $status; see $ROOT/logs/${NAMES[$i]}.log" >&3
      code=1
    fi
  done
  return "$code"
}

shutdown() { # shutdown EXIT_CODE: the brokers first (they flush to S3 and etcd), then the rest
  ((STOPPING)) && return
  STOPPING=1
  trap '' INT TERM # a second Ctrl-C must not cut the orderly stop short
  # Keep the script's messages on fd 3 and silence the shell's own reports of jobs that ended
  # on a signal ("[1]+ Terminated ..."), which are expected here.
  exec 3>&2 2>/dev/null
  local code=$1 i
  local -a brokers=() others=()
  for i in "${!NAMES[@]}"; do
    if [[ ${NAMES[$i]} == broker* ]]; then brokers+=("$i"); else others=("$i" "${others[@]}"); fi
  done
  ((${#PIDS[@]} == 0)) || echo "local-cluster: stopping" >&3
  # A broker that does not exit 0 may not have flushed everything: that fails the run.
  ((${#brokers[@]} == 0)) || stop 1 "${brokers[@]}" || code=1
  ((${#others[@]} == 0)) || stop 0 "${others[@]}" || code=1
  if ((KEEP_ROOT || code != 0)); then
    echo "local-cluster: data and logs kept in $ROOT" >&3
  else
    rm -rf "$ROOT"
  fi
  exit "$code"
}

failed() { # failed MESSAGE: give up, showing the log of the process named in NAMES, if any
  echo "local-cluster: $1" >&2
  if [[ -n ${2:-} && -f $ROOT/logs/$2.log ]]; then
    echo "--- the end of $ROOT/logs/$2.log:" >&2
    tail -n 30 "$ROOT/logs/$2.log" >&2 || true
  fi
  shutdown 1
}

wait_until() { # wait_until INDEX COMMAND...: poll COMMAND while process INDEX is alive
  local name=${NAMES[$1]} pid=${PIDS[$1]} tries=0
  shift
  until "$@"; do
    alive "$pid" || failed "$name exited while starting" "$name"
    ((tries++ < START_TIMEOUT * 10)) || failed "$name did not come up within ${START_TIMEOUT}s" "$name"
    sleep 0.1
  done
}

http_ok() {
  "$PYTHON" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=1)' "$1" \
    2>/dev/null
}

trap 'shutdown 0' INT TERM
# Any other way out (a failed command under set -e) still stops what was started.
trap 'shutdown 1' EXIT

# --- etcd ------------------------------------------------------------------------------------
ETCD=http://127.0.0.1:$ETCD_PORT
start etcd etcd --name local --data-dir "$ROOT/etcd" \
  --listen-client-urls "$ETCD" --advertise-client-urls "$ETCD" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster "local=http://127.0.0.1:$ETCD_PEER_PORT" --initial-cluster-state new \
  --auto-compaction-mode=periodic --auto-compaction-retention=5m
wait_until 0 http_ok "$ETCD/health"

# --- S3 (moto) and the bucket ----------------------------------------------------------------
S3=http://127.0.0.1:$S3_PORT
start s3 "$PYTHON" -m moto.server -H 127.0.0.1 -p "$S3_PORT"
wait_until 1 port_in_use "$S3_PORT"
# moto needs no request signing, so a plain PUT creates the bucket.
"$PYTHON" -c '
import sys, urllib.request
urllib.request.urlopen(urllib.request.Request(sys.argv[1], method="PUT"), timeout=10)
' "$S3/$BUCKET" || failed "could not create the bucket $BUCKET on $S3" s3

# --- brokers ---------------------------------------------------------------------------------
for i in 0 1 2; do
  id=$((i + 1))
  mkdir -p "$ROOT/broker$id"
  start "broker$id" env \
    KAFSCALE_BROKER_ID="$id" \
    KAFSCALE_BROKER_ADDR="127.0.0.1:${BROKER_PORTS[$i]}" \
    KAFSCALE_METRICS_ADDR="127.0.0.1:${METRICS_PORTS[$i]}" \
    KAFSCALE_DATA_DIR="$ROOT/broker$id" \
    KAFSCALE_ETCD_ENDPOINTS="$ETCD" \
    KAFSCALE_S3_BUCKET="$BUCKET" \
    KAFSCALE_S3_REGION="$AWS_REGION" \
    KAFSCALE_S3_ENDPOINT="$S3" \
    "$PYTHON" -m kafscale.broker
done
# Ready: /readyz answers 200 once the broker reaches etcd and S3 and serves Kafka requests.
for i in 0 1 2; do
  wait_until $((i + 2)) port_in_use "${BROKER_PORTS[$i]}"
  wait_until $((i + 2)) http_ok "http://127.0.0.1:${METRICS_PORTS[$i]}/readyz"
done

BOOTSTRAP=127.0.0.1:${BROKER_PORTS[0]},127.0.0.1:${BROKER_PORTS[1]},127.0.0.1:${BROKER_PORTS[2]}
cat <<EOF
KafScale local cluster is up: 3 brokers, etcd $ETCD, S3 $S3 (bucket $BUCKET).
  bootstrap servers: $BOOTSTRAP
  metrics: http://127.0.0.1:${METRICS_PORTS[0]}/metrics (brokers 2 and 3: ports ${METRICS_PORTS[1]}, ${METRICS_PORTS[2]})
  try:  kcat -b $BOOTSTRAP -L
  logs: $ROOT/logs
Ctrl-C stops everything.
EOF

# Run until a signal (the trap) or until a process dies on its own.
while :; do
  wait -n || true
  ((STOPPING)) && continue
  for i in "${!PIDS[@]}"; do
    alive "${PIDS[$i]}" || failed "${NAMES[$i]} exited on its own" "${NAMES[$i]}"
  done
done
