#!/usr/bin/env bash
# bench/perop.sh — what one request costs: CPU time, context switches and
# syscalls per request of the server and of the load generator, for
# gpucache (gpucached + gpucache-bench, GOMAXPROCS=1 client as in
# compare.sh) and for Redis (redis-server + redis-benchmark), one case each,
# counted by `perf stat` over the whole run. Unlike GB/s, these counts hardly
# move when other work shares the machine, so a change to the request path
# can be judged on a busy host; compare.sh still gives the throughput ratio.
#
# Usage:
#   bench/perop.sh                      # GET and PUT, 64KiB, 8 connections
#   OPS=put SIZE=1MiB bench/perop.sh
#
# Environment:
#   OPS        get, put or "get put"; default "get put" (Redis: GET, SET)
#   SIZE       block size, 64KiB or 1MiB (any gpucache-bench size); default 64KiB
#   CONNS      connections; default 8
#   DURATION   gpucache case duration; default 3s. Redis runs REDIS_N requests.
#   REDIS_N    redis-benchmark requests per case; default 30000
#   BIN        directory holding gpucached and gpucache-bench (default: built
#              from this tree into a temporary directory)
#   OUT        where the raw perf output goes; default a temporary directory
#   REDIS      0 skips the Redis cases (a before/after comparison of gpucache builds)
#
# A PUT case first writes 40000 blocks under another model (warm-up), so the
# 2 GiB store is full and the measured PUTs insert and evict like the
# compare.sh run does after its first seconds, rather than map new slabs.
# Needs perf (syscalls:* tracepoints; run as root or with
# perf_event_paranoid <= 1), redis-server, redis-benchmark, python3.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
. "$(dirname "$0")/log.sh" perop

OPS=${OPS:-get put}
SIZE=${SIZE:-64KiB}
CONNS=${CONNS:-8}
DURATION=${DURATION:-3s}
REDIS_N=${REDIS_N:-30000}
OUT=${OUT:-$(mktemp -d /tmp/perop.XXXXXX)}
for t in perf redis-server redis-benchmark python3; do
	command -v "$t" >/dev/null || die "$t not found"
done
if [[ -z ${BIN:-} ]]; then
	BIN=$OUT/bin
	log "building gpucached and gpucache-bench into $BIN"
	go build -o "$BIN/" ./cmd/gpucached ./tools/cmd/gpucache-bench
fi
case $SIZE in
*KiB) BYTES=$((${SIZE%KiB} * 1024)) ;;
*MiB) BYTES=$((${SIZE%MiB} * 1024 * 1024)) ;;
*) die "SIZE must be NKiB or NMiB, got '$SIZE'" ;;
esac

EV=task-clock,context-switches,syscalls:sys_enter_read,syscalls:sys_enter_recvfrom,syscalls:sys_enter_write,syscalls:sys_enter_writev,syscalls:sys_enter_sendto,syscalls:sys_enter_epoll_ctl,syscalls:sys_enter_epoll_pwait,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_futex,syscalls:sys_enter_nanosleep
PIDS=()
cleanup() {
	local p
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
}
trap cleanup EXIT

port() { echo $((20000 + RANDOM % 20000)); }
wait_port() { # wait_port PORT
	local i
	for i in $(seq 100); do
		(echo >"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
		sleep 0.1
	done
	die "nothing listens on $1"
}
# report DIR OPS: per-request figures of DIR/server.perf and DIR/client.perf.
report() {
	python3 - "$1" "$2" <<'PY'
import csv, sys
d, ops = sys.argv[1], float(sys.argv[2])
for side in ("server", "client"):
    vals = {}
    for row in csv.reader(open(f"{d}/{side}.perf")):
        if len(row) > 3 and row[0] and row[0][0].isdigit():
            vals[row[2].replace("syscalls:sys_enter_", "")] = float(row[0])
    s = f"  {side}: cpu {vals.pop('task-clock', 0) * 1e3 / ops:.1f} us/req"
    s += "".join(f", {k} {v / ops:.2f}" for k, v in vals.items() if v)
    print(s)
PY
}

gpucache_case() { # gpucache_case get|put
	local op=$1 d=$OUT/gpucache-$1 p sp pp ops
	mkdir -p "$d"
	p=$(port)
	"$BIN/gpucached" --listen "127.0.0.1:$p" --admin-listen "127.0.0.1:$((p + 1))" --cold-store off \
		--hot-capacity 2GiB --drain-timeout 2s >"$d/server.log" 2>&1 &
	sp=$!
	PIDS+=("$sp")
	wait_port "$p"
	if [[ $op == put ]]; then
		GOMAXPROCS=1 "$BIN/gpucache-bench" bench --addr "127.0.0.1:$p" --requests 40000 --duration 10m --op put \
			--model warm --sizes "$SIZE" --conns "$CONNS" --batch 1 --json "$d/warm.json" >"$d/warm.out" 2>&1
	fi
	perf stat -x, -e "$EV" -p "$sp" -o "$d/server.perf" &
	pp=$!
	sleep 0.2
	GOMAXPROCS=1 perf stat -x, -e "$EV" -o "$d/client.perf" "$BIN/gpucache-bench" bench --addr "127.0.0.1:$p" \
		--duration "$DURATION" --keys 256 --op "$op" --sizes "$SIZE" --conns "$CONNS" --batch 1 --json "$d/run.json" >"$d/client.out" 2>&1
	kill -INT "$pp"
	wait "$pp" || true
	kill -INT "$sp"
	wait "$sp" || true
	# Requests the server served while perf watched it: the run's, plus the
	# PUTs that wrote the GET working set.
	ops=$(python3 -c "
import json, os
st = json.load(open('$d/run.json'))['server_stat']
n = st['requests_get'] + st['requests_put']
if os.path.exists('$d/warm.json'):
    n -= json.load(open('$d/warm.json'))['server_stat']['requests_put']
print(n)")
	echo "gpucache $op $SIZE conns=$CONNS: $ops requests, $(python3 -c "import json; print('%.3f' % json.load(open('$d/run.json'))['cases'][0]['gb_per_sec'])") GB/s"
	report "$d" "$ops"
}

redis_case() { # redis_case get|put
	local op=$1 t=get d=$OUT/redis-$1 p sp pp
	[[ $op == put ]] && t=set
	mkdir -p "$d"
	p=$(port)
	redis-server --bind 127.0.0.1 --port "$p" --save '' --appendonly no --daemonize no --dir "$d" --logfile "" >/dev/null 2>&1 &
	sp=$!
	PIDS+=("$sp")
	wait_port "$p"
	redis-benchmark -h 127.0.0.1 -p "$p" -t set -d "$BYTES" -r 256 -n 2560 -c 8 -q >/dev/null
	perf stat -x, -e "$EV" -p "$sp" -o "$d/server.perf" &
	pp=$!
	sleep 0.2
	perf stat -x, -e "$EV" -o "$d/client.perf" redis-benchmark -h 127.0.0.1 -p "$p" -t "$t" -d "$BYTES" -r 256 \
		-c "$CONNS" -n "$REDIS_N" --csv >"$d/run.csv"
	kill -INT "$pp"
	wait "$pp" || true
	kill "$sp"
	wait "$sp" || true
	echo "redis $t $SIZE conns=$CONNS: $REDIS_N requests, $(awk -F, -v b="$BYTES" 'NR == 2 {gsub(/"/, "", $2); printf "%.3f", $2 * b / 1e9}' "$d/run.csv") GB/s"
	report "$d" "$REDIS_N"
}

log "raw output in $OUT"
for op in $OPS; do
	[[ $op == get || $op == put ]] || die "OPS holds get or put, got '$op'"
	gpucache_case "$op"
	if [[ ${REDIS:-1} == 1 ]]; then redis_case "$op"; fi
done
