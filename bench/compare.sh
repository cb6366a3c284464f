#!/usr/bin/env bash
# bench/compare.sh — measure gpucache against Redis and the iperf3 loopback
# ceiling on this machine, side by side, and write a markdown report.
#
# Usage:
#   bench/compare.sh                   # full run: 5s per case, 3 reps
#   QUICK=1 bench/compare.sh           # smoke: 1s, 1 rep, 64KiB+1MiB, conns 1,8, no GC run
#   QUICK=1 GC=1 bench/compare.sh      # smoke including the GC and memory run
#   QUICK=1 LARGE=1 bench/compare.sh   # smoke including the 32 MiB (large-block) cases
#
# Environment:
#   DURATION   time per measured case, Go duration in whole seconds or minutes
#              (e.g. 5s, 10s, 1m); default 5s (1s with QUICK=1)
#   REPS       repetitions per case; the report shows medians; default 3 (1 with QUICK=1)
#   QUICK=1    smoke mode: sizes 64KiB,1MiB and conns 1,8 (DURATION/REPS still override)
#   GC         1 runs the GC and memory case, 0 skips it; default 1 (0 with QUICK=1)
#   OUT        results directory; default bench/results. The report goes to
#              OUT/compare-<stamp>.md and raw files to OUT/<stamp>/
#   HOT_CAPACITY       gpucached --hot-capacity for the throughput runs; default 2GiB
#   GC_HOT_CAPACITY    gpucached --hot-capacity for the GC run; default 5GiB
#   GC_HOLD_BYTES      gpucache-bench bench --hold-bytes for the GC run; default 4GiB
#   GC_MIN_FREE_GIB    skip the GC run below this much MemAvailable; default 8
#   GC_SERVER_PROCS    gpucached GOMAXPROCS settings of the GC runs, one run each;
#                      "default" leaves the runtime's choice; default "default 1"
#   GC_FORCE_MS        force a GC cycle this often (ms) during the GC run's GET load
#                      (admin /debug/pprof/heap?gc=1); 0 forces none; default 50
#   REDIS_THREADS      if set, passed to redis-benchmark --threads
#   KEYS               working set in blocks, the same for both systems: gpucache
#                      bench --keys KEYS, redis-benchmark -r KEYS (prefilled); default 256
#   CLIENT_PROCS       GOMAXPROCS of the gpucache-bench bench client; default 1, matching
#                      redis-benchmark's single-threaded client
#   LARGE      1 runs the large-block cases (GET and PUT/SET of LARGE_SIZES at
#              LARGE_CONNS, both systems, each on a fresh server); default 1
#              (0 with QUICK=1). An LMCache chunk is 32 MiB.
#   LARGE_SIZES        sizes of the large-block cases; default 32MiB
#   LARGE_CONNS        connection counts of the large-block cases; default 1,8
#   LARGE_KEYS         working set of the large-block cases in blocks, both systems;
#                      default 8 (256 MiB at 32 MiB: memory stays bounded)
#
# Client and server share this host's CPUs; nothing is pinned. Ports are
# picked free at random (never 9400, 9401 or 6379). Every background process
# the script starts is stopped on exit.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

QUICK=${QUICK:-0}
if [[ $QUICK == 1 ]]; then
	DURATION=${DURATION:-1s}
	REPS=${REPS:-1}
	SIZES=64KiB,1MiB
	CONNS=1,8
	GC=${GC:-0}
	LARGE=${LARGE:-0}
else
	DURATION=${DURATION:-5s}
	REPS=${REPS:-3}
	SIZES=64KiB,256KiB,1MiB
	CONNS=1,8,32
	GC=${GC:-1}
	LARGE=${LARGE:-1}
fi
HOT_CAPACITY=${HOT_CAPACITY:-2GiB}
GC_HOT_CAPACITY=${GC_HOT_CAPACITY:-5GiB}
GC_HOLD_BYTES=${GC_HOLD_BYTES:-4GiB}
GC_MIN_FREE_GIB=${GC_MIN_FREE_GIB:-8}
GC_SERVER_PROCS=${GC_SERVER_PROCS:-default 1}
GC_FORCE_MS=${GC_FORCE_MS:-50}
REDIS_THREADS=${REDIS_THREADS:-}
KEYS=${KEYS:-256}
CLIENT_PROCS=${CLIENT_PROCS:-1}
LARGE_SIZES=${LARGE_SIZES:-32MiB}
LARGE_CONNS=${LARGE_CONNS:-1,8}
LARGE_KEYS=${LARGE_KEYS:-8}

STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUT=${OUT:-$ROOT/bench/results}
RAW=$OUT/$STAMP
REPORT=$OUT/compare-$STAMP.md

# shellcheck source=bench/log.sh
. "$(dirname "$0")/log.sh" compare
note() {
	log "note: $*"
	printf '%s\n' "$*" >>"$RAW/notes.txt"
}

# --- argument checks ---------------------------------------------------------

[[ $REPS =~ ^[1-9][0-9]*$ ]] || die "REPS must be a positive integer, got '$REPS'"
case $DURATION in
*ms | *us | *µs | *ns | *h) die "DURATION must be whole seconds or minutes (e.g. 5s, 1m), got '$DURATION'" ;;
esac
if [[ $DURATION =~ ^([0-9]+)s?$ ]]; then
	DUR_S=${BASH_REMATCH[1]}
elif [[ $DURATION =~ ^([0-9]+)m$ ]]; then
	DUR_S=$((BASH_REMATCH[1] * 60))
else
	die "DURATION must be whole seconds or minutes (e.g. 5s, 1m), got '$DURATION'"
fi
((DUR_S >= 1)) || die "DURATION must be at least 1s"
DURATION=${DUR_S}s
[[ $GC == 0 || $GC == 1 ]] || die "GC must be 0 or 1, got '$GC'"
[[ $LARGE == 0 || $LARGE == 1 ]] || die "LARGE must be 0 or 1, got '$LARGE'"
[[ $LARGE_KEYS =~ ^[1-9][0-9]*$ ]] || die "LARGE_KEYS must be a positive integer, got '$LARGE_KEYS'"

# size_bytes 64KiB -> 65536
size_bytes() {
	local s=$1
	case $s in
	*GiB) echo $((${s%GiB} << 30)) ;;
	*MiB) echo $((${s%MiB} << 20)) ;;
	*KiB) echo $((${s%KiB} << 10)) ;;
	*[0-9]) echo "$s" ;;
	*) die "bad size '$s'" ;;
	esac
}

# --- tools -------------------------------------------------------------------

need_install=()
for t in redis-server redis-benchmark redis-cli iperf3; do
	command -v "$t" >/dev/null 2>&1 || need_install+=("$t")
done
if ((${#need_install[@]})); then
	log "missing ${need_install[*]}; installing redis-server redis-tools iperf3 with apt-get"
	SUDO=
	if [[ $(id -u) != 0 ]]; then
		command -v sudo >/dev/null 2>&1 || die "need root or sudo to apt-get install redis-server redis-tools iperf3"
		SUDO=sudo
	fi
	$SUDO apt-get update
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y redis-server redis-tools iperf3
fi
command -v go >/dev/null 2>&1 || die "go is not on PATH"

# --- processes and cleanup ---------------------------------------------------

USED_PORTS=" 9400 9401 6379 "
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"

# --- setup -------------------------------------------------------------------

mkdir -p "$RAW"/{logs,iperf3,redis,gpucache,gc}
: >"$RAW/notes.txt"
log "raw files in $RAW"

mem_avail_kib=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo 2>/dev/null || echo 0)
{
	machine_info
	printf 'mem_available_at_start\t%s GiB\n' "$((mem_avail_kib / 1048576))"
	printf 'redis\t%s\n' "$(redis-server --version)"
	printf 'iperf3\t%s\n' "$(iperf3 --version 2>&1 | head -n1)"
	printf 'working_set_keys\t%s (gpucache --keys, redis-benchmark -r)\n' "$KEYS"
	printf 'gpucache_client_gomaxprocs\t%s\n' "$CLIENT_PROCS"
} >"$RAW/machine.txt"

size_list=
nsizes=0
for s in ${SIZES//,/ }; do
	size_list+="${size_list:+,}$(size_bytes "$s")"
	nsizes=$((nsizes + 1))
done
nconns=0
for c in ${CONNS//,/ }; do nconns=$((nconns + 1)); done
NPLAIN=$((nsizes * nconns))
large_list=
large_conns=
NLARGE=0
if [[ $LARGE == 1 ]]; then
	large_conns=$LARGE_CONNS
	for s in ${LARGE_SIZES//,/ }; do
		large_list+="${large_list:+,}$(size_bytes "$s")"
		for c in ${LARGE_CONNS//,/ }; do NLARGE=$((NLARGE + 1)); done
	done
fi
{
	printf 'duration\t%s\n' "$DURATION"
	printf 'reps\t%s\n' "$REPS"
	printf 'quick\t%s\n' "$QUICK"
	printf 'gc\t%s\n' "$GC"
	printf 'sizes\t%s\n' "$size_list"
	printf 'conns\t%s\n' "$CONNS"
	printf 'large_sizes\t%s\n' "$large_list"
	printf 'large_conns\t%s\n' "$large_conns"
	printf 'large_keys\t%s\n' "$LARGE_KEYS"
} >"$RAW/plan.txt"

log "building gpucached, gpucache and the report"
BIN=$(mktemp -d "${TMPDIR:-/tmp}/gpucache-compare.XXXXXX")
WORKDIR=$BIN
go build -o "$BIN/gpucached" ./cmd/gpucached
go build -o "$BIN/gpucache-bench" ./tools/cmd/gpucache-bench
go build -o "$BIN/report" ./tools/bench/report

# --- 1. iperf3 ---------------------------------------------------------------

run_iperf() {
	local port pid r
	free_port port
	iperf3 -s -B 127.0.0.1 -p "$port" >"$RAW/logs/iperf3-server.log" 2>&1 3>&- &
	pid=$!
	PIDS+=("$pid")
	if ! wait_port "$port" "$pid" 10; then
		note "iperf3: server did not start on port $port (see logs/iperf3-server.log)"
		stop_pid "$pid"
		return 0
	fi
	for ((r = 1; r <= REPS; r++)); do
		log "iperf3 rep $r/$REPS (${DUR_S}s)"
		if ! fg_run timeout $((DUR_S + 60)) iperf3 -c 127.0.0.1 -p "$port" -t "$DUR_S" -l 1M -J \
			>"$RAW/iperf3/rep$r.json" 2>"$RAW/logs/iperf3-rep$r.err"; then
			note "iperf3 rep $r failed (see logs/iperf3-rep$r.failed.json, logs/iperf3-rep$r.err)"
			mv "$RAW/iperf3/rep$r.json" "$RAW/logs/iperf3-rep$r.failed.json" 2>/dev/null || true
		fi
	done
	stop_pid "$pid"
}

# --- 2. Redis ----------------------------------------------------------------

REDIS_PORT=
rb() { # rb TIMEOUT_S ARGS...: redis-benchmark against our server
	local t=$1 extra=()
	shift
	[[ -n $REDIS_THREADS ]] && extra=(--threads "$REDIS_THREADS")
	fg_run timeout "$t" redis-benchmark -h 127.0.0.1 -p "$REDIS_PORT" "${extra[@]}" "$@"
}
csv_rps() { # csv_rps FILE: rps of the first data row
	awk -F, 'NR > 1 && NF > 1 {gsub(/"/, "", $2); print $2; exit}' "$1"
}
redis_case() { # redis_case get|put SIZE_LABEL CLIENTS PIPELINE; RKEYS overrides KEYS
	local op=$1 label=$2 c=$3 pipe=$4 size t n0 n rps r f name minpc=50
	local KEYS=${RKEYS:-$KEYS}
	size=$(size_bytes "$label")
	# A large block is ~100 ms a request: probe with 2 per client, not 50.
	((size >= 8 << 20)) && minpc=2
	t=get
	[[ $op == put ]] && t=set
	name="${op}_${size}_c${c}_P${pipe}"
	# Prefill the working set: -r KEYS draws keys key:000000000000..KEYS-1 at
	# random; 10 draws per key leave about 1 in 20000 unset.
	if ! rb 300 -t set -d "$size" -r "$KEYS" -n $((KEYS * 10)) -c 8 -q >/dev/null 2>"$RAW/logs/redis-$name-prefill.err"; then
		note "redis $name: prefill failed (see logs/redis-$name-prefill.err)"
		return 0
	fi
	# Probe ~300 MB (at least 50 requests per client) to size the measured runs.
	n0=$((300000000 / size))
	((n0 < minpc * c)) && n0=$((minpc * c))
	if ! rb 120 -t "$t" -d "$size" -r "$KEYS" -c "$c" -P "$pipe" -n "$n0" --csv >"$RAW/logs/redis-$name-probe.csv" 2>"$RAW/logs/redis-$name-probe.err"; then
		note "redis $name: probe failed (see logs/redis-$name-probe.err)"
		return 0
	fi
	rps=$(csv_rps "$RAW/logs/redis-$name-probe.csv")
	if [[ ! $rps =~ ^[0-9]+(\.[0-9]+)?$ ]]; then
		note "redis $name: probe gave no rps (see logs/redis-$name-probe.csv)"
		return 0
	fi
	n=$(awk -v r="$rps" -v d="$DUR_S" 'BEGIN {printf "%d", r * d}')
	((n < n0)) && n=$n0
	for ((r = 1; r <= REPS; r++)); do
		f="$RAW/redis/${name}_r$r.csv"
		log "redis $op $label clients=$c P=$pipe rep $r/$REPS (n=$n)"
		if ! rb $((DUR_S * 3 + 60)) -t "$t" -d "$size" -r "$KEYS" -c "$c" -P "$pipe" -n "$n" --csv >"$f" 2>"$RAW/logs/redis-${name}_r$r.err"; then
			note "redis $name rep $r: redis-benchmark failed (see logs/redis-${name}_r$r.err)"
			mv "$f" "$RAW/logs/" 2>/dev/null || true
		fi
	done
}
run_redis() {
	local pid op s c
	free_port REDIS_PORT
	redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no --daemonize no \
		--dir "$RAW/logs" --logfile "" >"$RAW/logs/redis-server.log" 2>&1 3>&- &
	pid=$!
	PIDS+=("$pid")
	if ! wait_port "$REDIS_PORT" "$pid" 10; then
		note "redis: server did not start on port $REDIS_PORT (see logs/redis-server.log)"
		stop_pid "$pid"
		return 0
	fi
	for op in get put; do
		for s in ${SIZES//,/ }; do
			for c in ${CONNS//,/ }; do
				redis_case "$op" "$s" "$c" 1
			done
		done
	done
	redis_case get 64KiB 8 8
	stop_pid "$pid"
}

# --- 3. gpucache -------------------------------------------------------------

GPC_PORT=
start_gpucached() { # start_gpucached CAPACITY LOGNAME: sets GPC_PORT and GPC_PID
	local cap=$1 lname=$2 admin
	free_port GPC_PORT
	free_port admin
	"$BIN/gpucached" --listen "127.0.0.1:$GPC_PORT" --admin-listen "127.0.0.1:$admin" --cold-store off \
		--hot-capacity "$cap" --drain-timeout 2s >"$RAW/logs/$lname.log" 2>&1 3>&- &
	GPC_PID=$!
	PIDS+=("$GPC_PID")
	if ! wait_port "$GPC_PORT" "$GPC_PID" 60; then
		stop_pid "$GPC_PID"
		return 1
	fi
}
gpc_bench() { # gpc_bench NAME NCASES ARGS...: one gpucache-bench bench run, JSON to gpucache/NAME.json
	local name=$1 ncases=$2
	shift 2
	log "gpucache-bench bench $name: $*"
	# Generous limit: each case runs DURATION, plus writing the working set.
	if ! GOMAXPROCS=$CLIENT_PROCS fg_run timeout $((ncases * (DUR_S * 3 + 30) + 120)) "$BIN/gpucache-bench" bench --addr "127.0.0.1:$GPC_PORT" --duration "$DURATION" --keys "$KEYS" \
		--json "$RAW/gpucache/$name.json" "$@" >"$RAW/logs/gpucache-$name.out" 2>&1; then
		note "gpucache $name: bench failed (see logs/gpucache-$name.out)"
		[[ -f $RAW/gpucache/$name.json ]] && mv "$RAW/gpucache/$name.json" "$RAW/logs/gpucache-$name.failed.json"
	fi
	return 0
}
run_gpucache() {
	local r
	if ! start_gpucached "$HOT_CAPACITY" gpucached; then
		note "gpucache: gpucached did not start (see logs/gpucached.log)"
		return 0
	fi
	for ((r = 1; r <= REPS; r++)); do
		gpc_bench "get_r$r" "$NPLAIN" --op get --sizes "$SIZES" --conns "$CONNS" --batch 1
		gpc_bench "put_r$r" "$NPLAIN" --op put --sizes "$SIZES" --conns "$CONNS" --batch 1
		gpc_bench "get_batch16_r$r" 1 --op get --sizes 64KiB --conns 8 --batch 16
	done
	stop_pid "$GPC_PID"
}

# --- 4. GC and memory --------------------------------------------------------

# One run per GC_SERVER_PROCS entry: gpucached holds GC_HOLD_BYTES, then serves
# 1 MiB GETs at 8 conns for DURATION. The GET path allocates nothing, so the
# runtime would run no GC cycle under that load; to sample the stop-the-world
# pauses there, a side loop forces a cycle every GC_FORCE_MS ms once the hold
# is in (GET /debug/pprof/heap?gc=1 runs runtime.GC). The server's STAT gives
# the pause histogram's p99, split into stopping and total (see tools/bench/report).
[[ $GC_FORCE_MS =~ ^[0-9]+$ ]] || die "GC_FORCE_MS must be a whole number of ms, got '$GC_FORCE_MS'"
gc_force() { # gc_force ADMIN HOLD_BYTES BENCH_PID OUTFILE: force GC cycles while the bench runs
	local admin=$1 want=$2 bpid=$3 out=$4 n=0 cached last=0 still=0
	# Start once the hold is in: the cache holds HOLD_BYTES, or it stopped
	# growing for 2 s (a hold that fell short; the report says so).
	while kill -0 "$bpid" 2>/dev/null; do
		cached=$(curl -sf "http://$admin/metrics" 2>/dev/null | awk '/^gpucache_hot_bytes_cached / {printf "%.0f", $2}' || true)
		cached=${cached:-0}
		((cached >= want)) && break
		if ((cached > 0 && cached == last)); then
			still=$((still + 1))
			((still >= 4)) && break
		else
			still=0
		fi
		last=$cached
		sleep 0.5
	done
	while kill -0 "$bpid" 2>/dev/null; do
		curl -sf -o /dev/null "http://$admin/debug/pprof/heap?gc=1" && n=$((n + 1))
		sleep "$(awk -v m="$GC_FORCE_MS" 'BEGIN {printf "%.3f", m / 1000}')"
	done
	echo "$n" >"$out"
}
run_gc() {
	local avail_kib avail_gib procs name admin bpid fpid i
	if [[ $GC != 1 ]]; then
		echo "skipped: GC=0 (QUICK=1 skips it unless GC=1)" >"$RAW/gc/NOT_RUN.txt"
		return 0
	fi
	avail_kib=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
	avail_gib=$((avail_kib / 1048576))
	if ((avail_kib < GC_MIN_FREE_GIB * 1048576)); then
		echo "skipped: ${avail_gib} GiB available, need ${GC_MIN_FREE_GIB} GiB" >"$RAW/gc/NOT_RUN.txt"
		note "gc: skipped, ${avail_gib} GiB available < ${GC_MIN_FREE_GIB} GiB"
		return 0
	fi
	if ((GC_FORCE_MS > 0)) && ! command -v curl >/dev/null 2>&1; then
		note "gc: curl is not on PATH; no GC cycle forced under the GET load (GC_FORCE_MS ignored)"
		GC_FORCE_MS=0
	fi
	for procs in $GC_SERVER_PROCS; do
		name=gc
		[[ $procs != default ]] && name=gc-procs$procs
		[[ $procs == default || $procs =~ ^[1-9][0-9]*$ ]] || die "GC_SERVER_PROCS entries are 'default' or a positive integer, got '$procs'"
		# gctrace=1 logs every cycle's stop-the-world phases to logs/gpucached-NAME.log.
		if [[ $procs == default ]]; then
			GODEBUG=gctrace=1 start_gpucached "$GC_HOT_CAPACITY" "gpucached-$name" || GPC_PID=
		else
			GOMAXPROCS=$procs GODEBUG=gctrace=1 start_gpucached "$GC_HOT_CAPACITY" "gpucached-$name" || GPC_PID=
		fi
		if [[ -z $GPC_PID ]]; then
			note "gc $name: gpucached did not start (see logs/gpucached-$name.log)"
			continue
		fi
		admin=
		for ((i = 0; i < 50 && ${#admin} == 0; i++)); do
			admin=$(sed -n 's/.*gpucached serving.* admin=\([^ ]*\).*/\1/p' "$RAW/logs/gpucached-$name.log" | head -n1)
			[[ -n $admin ]] || sleep 0.1
		done
		log "gpucache GC run $name (server GOMAXPROCS $procs): hold $GC_HOLD_BYTES, GET 1MiB conns 8 for $DURATION, a forced GC every ${GC_FORCE_MS}ms"
		GOMAXPROCS=$CLIENT_PROCS timeout $((DUR_S * 3 + 600)) "$BIN/gpucache-bench" bench --addr "127.0.0.1:$GPC_PORT" --hold-bytes "$GC_HOLD_BYTES" --op get --sizes 1MiB \
			--conns 8 --duration "$DURATION" --json "$RAW/gc/$name.json" >"$RAW/logs/gpucache-$name.out" 2>&1 3>&- &
		bpid=$!
		PIDS+=("$bpid")
		fpid=
		if ((GC_FORCE_MS > 0)) && [[ -n $admin ]]; then
			gc_force "$admin" "$(size_bytes "$GC_HOLD_BYTES")" "$bpid" "$RAW/gc/$name.forced" &
			fpid=$!
			PIDS+=("$fpid")
		elif ((GC_FORCE_MS > 0)); then
			note "gc $name: no admin address in logs/gpucached-$name.log; no GC forced"
		fi
		if ! wait "$bpid"; then
			[[ -f $RAW/gc/$name.json ]] && mv "$RAW/gc/$name.json" "$RAW/logs/gpucache-$name.failed.json"
			note "gc $name: bench failed (see logs/gpucache-$name.out)"
		fi
		[[ -n $fpid ]] && wait "$fpid"
		stop_pid "$GPC_PID"
	done
}

# --- 5. Large blocks ---------------------------------------------------------

# LARGE_SIZES (32 MiB: an LMCache chunk) at LARGE_CONNS over a LARGE_KEYS
# working set, GET then PUT/SET, on a fresh server of each system so the
# small-block cases leave nothing behind. Redis's limits take a 32 MiB
# value as they are (proto-max-bulk-len 512 MB, client-query-buffer-limit
# 1 GB); its memory is LARGE_KEYS values plus one query buffer per client.
run_large() {
	local pid op s c r
	if [[ $LARGE != 1 ]]; then
		log "large-block cases skipped: LARGE=0 (QUICK=1 skips them unless LARGE=1)"
		return 0
	fi
	free_port REDIS_PORT
	redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no --daemonize no \
		--dir "$RAW/logs" --logfile "" >"$RAW/logs/redis-server-large.log" 2>&1 3>&- &
	pid=$!
	PIDS+=("$pid")
	if wait_port "$REDIS_PORT" "$pid" 10; then
		for op in get put; do
			for s in ${LARGE_SIZES//,/ }; do
				for c in ${LARGE_CONNS//,/ }; do
					RKEYS=$LARGE_KEYS redis_case "$op" "$s" "$c" 1
				done
			done
		done
	else
		note "redis large: server did not start on port $REDIS_PORT (see logs/redis-server-large.log)"
	fi
	stop_pid "$pid"
	if ! start_gpucached "$HOT_CAPACITY" gpucached-large; then
		note "gpucache large: gpucached did not start (see logs/gpucached-large.log)"
		return 0
	fi
	for ((r = 1; r <= REPS; r++)); do
		# --keys after gpc_bench's own --keys: the last one wins.
		gpc_bench "large_get_r$r" "$NLARGE" --op get --sizes "$LARGE_SIZES" --conns "$LARGE_CONNS" --batch 1 --keys "$LARGE_KEYS"
		gpc_bench "large_put_r$r" "$NLARGE" --op put --sizes "$LARGE_SIZES" --conns "$LARGE_CONNS" --batch 1 --keys "$LARGE_KEYS"
	done
	stop_pid "$GPC_PID"
}

# --- run ---------------------------------------------------------------------

log "DURATION=$DURATION REPS=$REPS QUICK=$QUICK GC=$GC sizes=$SIZES conns=$CONNS LARGE=$LARGE"
run_iperf
run_redis
run_gpucache
run_gc
run_large

"$BIN/report" -dir "$RAW" -out "$REPORT" -q
log "report: $REPORT"
cat "$REPORT"
