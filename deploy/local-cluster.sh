#!/usr/bin/env bash
# A 3-broker KafScale cluster on this machine, in one command:
#   bash deploy/local-cluster.sh
# starts etcd, an S3 server (moto) with a bucket, and 3 brokers on 127.0.0.1, prints the
# bootstrap servers, and runs until Ctrl-C or SIGTERM, which stops the brokers (they flush to S3
# and release their partitions), then moto and etcd. Everything lives in a temporary directory
# that is removed at the end. Exit code 0 when every broker still running then stopped cleanly.
#
# A broker that dies does not stop the cluster: the script logs which one, its exit code and
# log file, and the other brokers take over its partitions once its etcd lease expires
# (KAFSCALE_LEASE_TTL_MS, 5000 ms by default). From another terminal, while it runs:
#   bash deploy/local-cluster.sh status      the brokers, etcd and moto: state, pid, ports
#   bash deploy/local-cluster.sh stop N      SIGTERM broker N (1-3): it hands its partitions off
#   bash deploy/local-cluster.sh kill N      SIGKILL broker N: its partitions move on lease expiry
#   bash deploy/local-cluster.sh restart N   stop broker N if it runs, start it, wait until ready
# stop, kill and restart are carried out by the running script (a request on the FIFO
# run/control in its directory); they print its answer and exit 0 when it succeeded. They find
# the cluster through LOCAL_CLUSTER_DIR or else the file ${XDG_RUNTIME_DIR:-/tmp}/
# kafscale-local-cluster.$UID, which the running script writes (the first of several clusters).
# Brokers, etcd and moto log to logs/NAME.log in the cluster's directory (a restart appends).
# etcd or moto dying stops everything, as without them the brokers cannot work.
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
# Other KAFSCALE_* variables in the environment reach every broker, e.g. KAFSCALE_LOG_LEVEL=debug
# or KAFSCALE_LEASE_TTL_MS=2000 (a quicker takeover after a kill).
set -euo pipefail

START_TIMEOUT=60 # seconds for each process to come up
STOP_TIMEOUT=60  # seconds for each process to exit after SIGTERM
# How the cluster is found by the commands: LOCAL_CLUSTER_DIR, else this file names its directory.
POINTER=${XDG_RUNTIME_DIR:-/tmp}/kafscale-local-cluster.$UID

die() {
  echo "local-cluster: $*" >&2
  exit 1
}

alive() { kill -0 "$1" 2>/dev/null; }

usage() { # the header comment above
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
}

# --- commands to a running cluster -----------------------------------------------------------
CROOT= # the running cluster's directory and the script's pid, set by find_cluster
CPID=

find_cluster() {
  local root
  if [[ -n ${LOCAL_CLUSTER_DIR:-} ]]; then
    root=$LOCAL_CLUSTER_DIR
  elif [[ -f $POINTER && -O $POINTER ]]; then
    root=$(<"$POINTER")
  else
    die "no local cluster is running (no $POINTER, and LOCAL_CLUSTER_DIR is not set);" \
      "start one with: bash $0"
  fi
  if [[ -f $root/run/local-cluster.pid && -O $root/run/local-cluster.pid ]]; then
    CPID=$(<"$root/run/local-cluster.pid")
  fi
  [[ -n $CPID ]] && alive "$CPID" && [[ -p $root/run/control ]] ||
    die "no local cluster is running in $root; start one with: bash $0"
  CROOT=$root
}

show_status() {
  local name file state value info
  find_cluster
  echo "local cluster in $CROOT (script pid $CPID)"
  for name in broker1 broker2 broker3 etcd s3; do
    file=$CROOT/run/$name
    state=unknown value='' info=''
    [[ -f $file ]] && read -r state value <"$file"
    [[ -f $file.info ]] && info=$(<"$file.info")
    case $state in
      running)
        if alive "$value"; then
          state="running  pid $value"
        else
          state="gone     pid $value (exited just now)"
        fi
        ;;
      starting) state="starting pid $value" ;;
      exited) state="exited   code $value (died)" ;;
      stopped) state="stopped  code $value (on request)" ;;
      killed) state="killed   code $value (on request)" ;;
      unknown) state="not started" ;;
    esac
    printf '%-8s %-36s %s\n' "$name" "$state" "$info"
  done
}

request() { # request COMMAND BROKER_ID: have the running script do it; print its answer
  local reply rc waited=0 timeout=$((STOP_TIMEOUT + START_TIMEOUT + 30))
  find_cluster
  reply=$CROOT/run/replies/$$.$RANDOM
  # Opened for reading and writing, the FIFO never blocks; a line this short is written whole.
  exec 4<>"$CROOT/run/control"
  printf '%s %s %s\n' "$1" "$2" "$reply" >&4
  exec 4>&-
  until [[ -f $reply ]]; do
    alive "$CPID" || die "the cluster (pid $CPID) stopped before answering"
    ((waited++ < timeout * 10)) || die "no answer from the cluster within ${timeout}s"
    sleep 0.1
  done
  { read -r rc && cat; } <"$reply"
  rm -f "$reply"
  return "$rc"
}

case ${1:-} in
  "") ;; # run the cluster, below
  status)
    (($# == 1)) || die "usage: bash $0 status"
    show_status
    exit 0
    ;;
  stop | kill | restart)
    (($# == 2)) && [[ $2 == [123] ]] || die "usage: bash $0 $1 N, N a broker id: 1, 2 or 3"
    rc=0
    request "$1" "$2" || rc=$?
    exit "$rc"
    ;;
  -h | --help | help)
    usage
    exit 0
    ;;
  *) die "unknown command '$1'; commands: status, stop N, kill N, restart N (bash $0 --help)" ;;
esac

# --- the cluster -----------------------------------------------------------------------------
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

# moto accepts any credentials; fixed ones keep real AWS keys from the environment out of it.
export AWS_ACCESS_KEY_ID=kafscale-local AWS_SECRET_ACCESS_KEY=kafscale-local
export AWS_REGION=us-east-1 AWS_DEFAULT_REGION=us-east-1
unset AWS_SESSION_TOKEN AWS_PROFILE

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
  mkdir -p "$LOCAL_CLUSTER_DIR"
  ROOT=$(cd "$LOCAL_CLUSTER_DIR" && pwd)
  KEEP_ROOT=1
  if [[ -f $ROOT/run/local-cluster.pid ]] && alive "$(<"$ROOT/run/local-cluster.pid")"; then
    die "a local cluster already runs in $ROOT"
  fi
else
  ROOT=$(mktemp -d "${TMPDIR:-/tmp}/kafscale-local.XXXXXX")
  ROOT=$(cd "$ROOT" && pwd)
  KEEP_ROOT=0
fi
# The commands find this cluster through the pointer file, unless it names another live one.
OWN_POINTER=0
if ! (LOCAL_CLUSTER_DIR='' && find_cluster) 2>/dev/null; then
  mkdir -p "$(dirname "$POINTER")"
  echo "$ROOT" >"$POINTER.$$"
  mv -f "$POINTER.$$" "$POINTER"
  OWN_POINTER=1
fi
if ((OWN_POINTER)); then
  CONTROL="bash $0"
else
  printf -v CONTROL 'LOCAL_CLUSTER_DIR=%q bash %s' "$ROOT" "$0"
fi
RUN=$ROOT/run # the script's pid, one state file per process, the control FIFO, the answers
rm -rf "$RUN"
mkdir -p "$ROOT/logs" "$RUN/replies"
mkfifo -m 600 "$RUN/control"
echo "$$" >"$RUN/local-cluster.pid"
# fd 3: the script's own messages. fd 2 goes to /dev/null once the cluster runs, silencing the
# shell's reports of jobs that ended on a signal ("[3]+ Killed ..."), expected here.
exec 3>&2

# --- process bookkeeping ---------------------------------------------------------------------
NAMES=() # in start order: etcd, s3, broker1, broker2, broker3
PIDS=()
STATES=() # running, exited (on its own), stopped or killed (on request)
STOPPING=0
SIGNALLED=0 # set by the INT and TERM trap; the loops below then call shutdown

show_state() { # show_state INDEX STATE VALUE: what `status` shows
  printf '%s %s\n' "$2" "$3" >"$RUN/${NAMES[$1]}.tmp"
  mv -f "$RUN/${NAMES[$1]}.tmp" "$RUN/${NAMES[$1]}"
}

set_state() { # set_state INDEX STATE VALUE
  show_state "$@"
  STATES[$1]=$2
}

launched() { # launched INDEX: bookkeeping for the process just started in the background
  PIDS[$1]=$!
  set_state "$1" running "$!"
}

start() { # start NAME INFO COMMAND...: run in the background, output to $ROOT/logs/NAME.log
  local name=$1 i=${#NAMES[@]}
  NAMES+=("$name")
  echo "$2" >"$RUN/$name.info"
  shift 2
  "$@" >"$ROOT/logs/$name.log" 2>&1 </dev/null 3>&- 4<&- &
  launched "$i"
}

signame() { # signame EXIT_CODE: " (SIGKILL)" for 137, nothing when not killed by a signal
  local sig
  if (($1 > 128)) && sig=$(kill -l $(($1 - 128)) 2>/dev/null); then echo " (SIG$sig)"; fi
}

stop() { # stop STRICT SIGNAL INDEX...: signal the process groups, SIGKILL after STOP_TIMEOUT.
  # Returns 1 if one had to be killed or, when STRICT is 1, exited non-zero (etcd, for one,
  # ends a clean shutdown by re-raising SIGTERM, so only the brokers' exit codes count).
  # Processes no longer running are skipped.
  local strict=$1 signal=$2 i pid waited=0 code=0 status
  shift 2
  for i in "$@"; do
    [[ ${STATES[$i]} == running ]] && kill "-$signal" -- "-${PIDS[$i]}" 2>/dev/null || true
  done
  for i in "$@"; do
    [[ ${STATES[$i]} == running ]] || continue
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
    if [[ $signal == KILL ]]; then
      set_state "$i" killed "$status"
    else
      set_state "$i" stopped "$status"
    fi
    if ((strict && status != 0)); then
      echo "local-cluster: ${NAMES[$i]} exited with $status$(signame "$status");" \
        "see $ROOT/logs/${NAMES[$i]}.log" >&3
      code=1
    fi
  done
  return "$code"
}

shutdown() { # shutdown EXIT_CODE: the brokers first (they flush to S3 and etcd), then the rest
  ((STOPPING)) && return
  STOPPING=1
  trap '' INT TERM # a second Ctrl-C must not cut the orderly stop short
  exec 2>/dev/null
  local code=$1 i status
  local -a brokers=() others=()
  ((${#PIDS[@]} == 0)) || echo "local-cluster: stopping" >&3
  for i in "${!NAMES[@]}"; do
    if [[ ${NAMES[$i]} == broker* ]]; then brokers+=("$i"); else others=("$i" "${others[@]}"); fi
    # A broker that was down already counts for nothing here: it was reported when it went.
    if [[ ${NAMES[$i]} == broker* && ${STATES[$i]} != running ]]; then
      read -r _ status <"$RUN/${NAMES[$i]}" || status='?'
      echo "local-cluster: ${NAMES[$i]} was not running (${STATES[$i]}, exit code $status)" >&3
    fi
  done
  # A broker that does not exit 0 may not have flushed everything: that fails the run.
  ((${#brokers[@]} == 0)) || stop 1 TERM "${brokers[@]}" || code=1
  ((${#others[@]} == 0)) || stop 0 TERM "${others[@]}" || code=1
  if ((OWN_POINTER)) && [[ $(<"$POINTER") == "$ROOT" ]]; then rm -f "$POINTER"; fi
  if ((KEEP_ROOT || code != 0)); then
    rm -rf "$RUN"
    echo "local-cluster: data and logs kept in $ROOT" >&3
  else
    rm -rf "$ROOT"
  fi
  exit "$code"
}

failed() { # failed MESSAGE [NAME]: give up, showing the end of NAME's log
  echo "local-cluster: $1" >&3
  if [[ -n ${2:-} && -f $ROOT/logs/$2.log ]]; then
    echo "--- the end of $ROOT/logs/$2.log:" >&3
    tail -n 30 "$ROOT/logs/$2.log" >&3 || true
  fi
  shutdown 1
}

await() { # await INDEX COMMAND...: poll COMMAND while process INDEX is alive.
  # Returns 1 if the process exited, 2 if COMMAND did not succeed within START_TIMEOUT.
  local pid=${PIDS[$1]} tries=0
  shift
  until "$@"; do
    ((SIGNALLED == 0)) || shutdown 0
    alive "$pid" || return 1
    ((tries++ < START_TIMEOUT * 10)) || return 2
    sleep 0.1
  done
}

wait_until() { # wait_until INDEX COMMAND...: await, and give up on the cluster if it fails
  local name=${NAMES[$1]} code=0
  await "$@" || code=$?
  ((code != 1)) || failed "$name exited while starting" "$name"
  ((code != 2)) || failed "$name did not come up within ${START_TIMEOUT}s" "$name"
}

http_ok() {
  "$PYTHON" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=1)' "$1" \
    2>/dev/null
}

# The trap only notes the signal: shutdown runs from the polling loops, not inside whatever
# builtin the signal interrupted (bash can resume a `read -t` after a trap that forked).
trap 'SIGNALLED=1' INT TERM
# Any other way out (a failed command under set -e) still stops what was started.
trap 'shutdown 1' EXIT

# --- etcd ------------------------------------------------------------------------------------
ETCD=http://127.0.0.1:$ETCD_PORT
start etcd "$ETCD" etcd --name local --data-dir "$ROOT/etcd" \
  --listen-client-urls "$ETCD" --advertise-client-urls "$ETCD" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster "local=http://127.0.0.1:$ETCD_PEER_PORT" --initial-cluster-state new \
  --auto-compaction-mode=periodic --auto-compaction-retention=5m
wait_until 0 http_ok "$ETCD/health"

# --- S3 (moto) and the bucket ----------------------------------------------------------------
S3=http://127.0.0.1:$S3_PORT
start s3 "$S3" "$PYTHON" -m moto.server -H 127.0.0.1 -p "$S3_PORT"
wait_until 1 port_in_use "$S3_PORT"
# moto needs no request signing, so a plain PUT creates the bucket.
"$PYTHON" -c '
import sys, urllib.request
urllib.request.urlopen(urllib.request.Request(sys.argv[1], method="PUT"), timeout=10)
' "$S3/$BUCKET" || failed "could not create the bucket $BUCKET on $S3" s3

# --- brokers ---------------------------------------------------------------------------------
broker() { # broker ID: run broker ID in this process (exec), its data in $ROOT/brokerID
  local id=$1
  mkdir -p "$ROOT/broker$id"
  exec env \
    KAFSCALE_BROKER_ID="$id" \
    KAFSCALE_BROKER_ADDR="127.0.0.1:${BROKER_PORTS[id - 1]}" \
    KAFSCALE_METRICS_ADDR="127.0.0.1:${METRICS_PORTS[id - 1]}" \
    KAFSCALE_DATA_DIR="$ROOT/broker$id" \
    KAFSCALE_ETCD_ENDPOINTS="$ETCD" \
    KAFSCALE_S3_BUCKET="$BUCKET" \
    KAFSCALE_S3_REGION="$AWS_REGION" \
    KAFSCALE_S3_ENDPOINT="$S3" \
    "$PYTHON" -m kafscale.broker
}
broker_index() { echo $(($1 + 1)); } # broker ID is process index ID + 1 (after etcd and s3)

# Ready: /readyz answers 200 once the broker reaches etcd and S3 and serves Kafka requests.
broker_ready() {
  port_in_use "${BROKER_PORTS[$1 - 1]}" &&
    http_ok "http://127.0.0.1:${METRICS_PORTS[$1 - 1]}/readyz"
}

for id in 1 2 3; do
  info="kafka 127.0.0.1:${BROKER_PORTS[id - 1]}  metrics 127.0.0.1:${METRICS_PORTS[id - 1]}"
  start "broker$id" "$info  log $ROOT/logs/broker$id.log" broker "$id"
done
for id in 1 2 3; do
  wait_until "$(broker_index "$id")" broker_ready "$id"
done

BOOTSTRAP=127.0.0.1:${BROKER_PORTS[0]},127.0.0.1:${BROKER_PORTS[1]},127.0.0.1:${BROKER_PORTS[2]}
cat <<EOF
KafScale local cluster is up: 3 brokers, etcd $ETCD, S3 $S3 (bucket $BUCKET).
  bootstrap servers: $BOOTSTRAP
  metrics: http://127.0.0.1:${METRICS_PORTS[0]}/metrics (brokers 2 and 3: ports ${METRICS_PORTS[1]}, ${METRICS_PORTS[2]})
  try:  kcat -b $BOOTSTRAP -L
  logs: $ROOT/logs
  from another terminal: $CONTROL status|stop N|kill N|restart N
Ctrl-C stops everything.
EOF

# --- requests from the commands --------------------------------------------------------------
ANSWER=() # the answer's lines

answer() { # answer WORDS...: a line to the requester and to this script's output
  ANSWER+=("$*")
  echo "local-cluster: $*" >&3
}

do_stop() { # do_stop SIGNAL ID
  local i status
  i=$(broker_index "$2")
  [[ ${STATES[$i]} == running ]] || {
    answer "broker$2 is not running; start it with: $CONTROL restart $2"
    return 1
  }
  answer "broker$2 (pid ${PIDS[$i]}): SIG$1"
  stop 0 "$1" "$i" || true
  read -r _ status <"$RUN/broker$2"
  if [[ $1 == KILL ]]; then
    answer "broker$2 killed, exit code $status$(signame "$status"); the other brokers take over" \
      "its partitions when its lease expires (${KAFSCALE_LEASE_TTL_MS:-5000} ms)"
  else
    answer "broker$2 stopped, exit code $status$(signame "$status");" \
      "it handed its partitions to the other brokers"
  fi
  ((status == 0)) || [[ $1 == KILL ]]
}

do_restart() { # do_restart ID
  local id=$1 i code=0
  i=$(broker_index "$id")
  if [[ ${STATES[$i]} == running ]]; then do_stop TERM "$id" || true; fi
  printf '\n===== restart %s\n' "$(date -u +%FT%TZ)" >>"$ROOT/logs/broker$id.log"
  broker "$id" >>"$ROOT/logs/broker$id.log" 2>&1 </dev/null 3>&- 4<&- &
  launched "$i"
  show_state "$i" starting "${PIDS[$i]}"
  await "$i" broker_ready "$id" || code=$?
  case $code in
    0)
      set_state "$i" running "${PIDS[$i]}"
      answer "broker$id is up again (pid ${PIDS[$i]}) and ready"
      ;;
    1)
      set_state "$i" running "${PIDS[$i]}" # reported below when its exit is noticed
      answer "broker$id exited while starting; see $ROOT/logs/broker$id.log"
      ;;
    *)
      set_state "$i" running "${PIDS[$i]}"
      answer "broker$id is not ready after ${START_TIMEOUT}s but still running;" \
        "see $ROOT/logs/broker$id.log"
      ;;
  esac
  return "$code"
}

handle() { # handle COMMAND ID REPLY_FILE: carry out a request, then write the answer
  local cmd=$1 id=$2 reply=$3 code=0
  ANSWER=()
  [[ $reply == "$RUN/replies/"* ]] || return 0 # not from the commands above
  case "$cmd $id" in
    "stop "[123]) do_stop TERM "$id" || code=$? ;;
    "kill "[123]) do_stop KILL "$id" || code=$? ;;
    "restart "[123]) do_restart "$id" || code=$? ;;
    *) ANSWER=("unknown request: $cmd $id") code=1 ;;
  esac
  ((code == 0)) || code=1
  printf '%s\n' "$code" "${ANSWER[@]}" >"$reply.tmp"
  mv -f "$reply.tmp" "$reply"
}

check() { # check: report processes that exited on their own; etcd or moto gone ends it all
  local i status
  for i in "${!NAMES[@]}"; do
    if [[ ${STATES[$i]} != running ]] || alive "${PIDS[$i]}"; then continue; fi
    status=0
    wait "${PIDS[$i]}" || status=$?
    set_state "$i" exited "$status"
    [[ ${NAMES[$i]} == broker* ]] ||
      failed "${NAMES[$i]} exited on its own (exit code $status)" "${NAMES[$i]}"
    echo "local-cluster: ${NAMES[$i]} (pid ${PIDS[$i]}) died with exit code" \
      "$status$(signame "$status"); log: $ROOT/logs/${NAMES[$i]}.log;" \
      "restart it with: $CONTROL restart ${NAMES[$i]#broker}" >&3
  done
}

# Run until a signal (SIGNALLED): once a second (or at once on a request) look for processes
# that died and requests on the FIFO. `read -t` is a builtin: no child to take the Ctrl-C.
exec 2>/dev/null 4<>"$RUN/control"
while :; do
  ((SIGNALLED == 0)) || shutdown 0
  if read -r -t 1 -u 4 cmd id reply; then handle "$cmd" "$id" "$reply"; fi
  ((SIGNALLED == 0)) || shutdown 0
  check
done
