#!/usr/bin/env bash
# bench/local-compare.sh — a co-located GET and PUT against the memcpy limit
# and against Redis over its Unix socket, in one run (issue 27, ADR 0026),
# and a markdown report with the issue's targets, PASS or MISS.
#
# Rows, each at 64 KiB, 1 MiB and 32 MiB, 1 and 8 connections, GET and PUT:
#   memcpy     gpucache-bench memcpy: one memcpy per block out of a working
#              set, 1 thread (the limit for 1 connection) and 2 threads (the
#              limit for 8 connections: this host has 2 CPUs); also 256 KiB,
#              the Python row's page
#   cma        gpucache-bench cma: process_vm_readv of each block out of a
#              child's working set, 1 and 2 threads (issue 27 item 4's
#              measurement)
#   tcp        gpucache-bench bench over loopback TCP
#   unix       gpucache-bench bench over the Unix socket, payload in frames
#   region     gpucache-bench bench --region over the Unix socket: buffers in
#              a registered region, GET_INTO / PUT_FROM, no payload on it
#   redis      redis-benchmark -s over Redis's Unix socket (GET on prefilled
#              keys; PUT is SET), its own p50 and p99 (--csv)
#   python     the SGLang backend's batch_get_v1 of PAGES pages of 256 KiB
#              into a torch CPU tensor (bench/local_pages.py): over TCP and
#              the Unix socket from private memory, and from a pool in
#              gpucache.shm.allocate memory (through a region)
# One gpucached (TCP and unix_listen) and one redis-server (unixsocket, no
# TCP port) serve the whole run; the repetitions are interleaved (every row
# once, then again), and the report gives medians across them.
#
# Usage:
#   bench/local-compare.sh              # full run: 5 s per case, 3 reps, profiles
#   QUICK=1 bench/local-compare.sh      # smoke: 1 s per case, 1 rep, no profiles
#
# Environment:
#   DURATION        measured time per gpucache, Redis and Python case, whole
#                   seconds (5s; 1s with QUICK=1)
#   WARMUP          unmeasured warm-up per gpucache case (1s; 0s with QUICK=1)
#   LIMIT_DURATION  time per memcpy and cma case (3s; 1s with QUICK=1)
#   REPS            repetitions; the report shows medians (3; 1 with QUICK=1)
#   SIZES           block sizes (64KiB,1MiB,32MiB); CONNS (1,8)
#   WORKING_SET     bytes per size that the blocks are drawn from, for every
#                   row: gpucache --keys and redis-benchmark -r are
#                   WORKING_SET / size (256MiB: 4096, 256 and 8 keys)
#   HOT_CAPACITY    gpucached --hot-capacity (3GiB)
#   CLIENT_PROCS    GOMAXPROCS of gpucache-bench bench (1: like
#                   redis-benchmark's one thread; "default" leaves the
#                   runtime's choice)
#   PY              python with torch for the Python rows (default: the
#                   engines venv, .cache/engines/venv/bin/python, if present,
#                   else python3); PY_PATH its PYTHONPATH (default python/:
#                   needs gpucache.shm for the region row, else that row is
#                   NOT_RUN); PAGES (128)
#   PROFILE         1 takes CPU profiles after the reps (client --cpuprofile
#                   and gpucached's /debug/pprof/profile) of the target cases,
#                   and the Python region row under cProfile, and writes
#                   their top frames (1; 0 with QUICK=1);
#                   PROFILE_SECONDS the length of each (10)
#   OUT             results directory (bench/results); raw files go to
#                   OUT/local-<stamp>/, the report to OUT/local-<stamp>/report.md,
#                   medians to summary.csv, every repetition to reps.csv
#                   (bench/local_report.py)
#
# Client and server share this host's CPUs; nothing is pinned. Every
# figure is CPU only. Ports are picked free at random (never 9400, 9401 or
# 6379); Redis has no TCP port. Every process the script starts is stopped
# on exit.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

QUICK=${QUICK:-0}
if [[ $QUICK == 1 ]]; then
	DURATION=${DURATION:-1s}
	WARMUP=${WARMUP:-0s}
	LIMIT_DURATION=${LIMIT_DURATION:-1s}
	REPS=${REPS:-1}
	PROFILE=${PROFILE:-0}
else
	DURATION=${DURATION:-5s}
	WARMUP=${WARMUP:-1s}
	LIMIT_DURATION=${LIMIT_DURATION:-3s}
	REPS=${REPS:-3}
	PROFILE=${PROFILE:-1}
fi
SIZES=${SIZES:-64KiB,1MiB,32MiB}
CONNS=${CONNS:-1,8}
WORKING_SET=${WORKING_SET:-256MiB}
HOT_CAPACITY=${HOT_CAPACITY:-3GiB}
CLIENT_PROCS=${CLIENT_PROCS:-1}
PAGES=${PAGES:-128}
PROFILE_SECONDS=${PROFILE_SECONDS:-10}
if [[ -z ${PY:-} ]]; then
	PY=python3
	[[ -x $ROOT/.cache/engines/venv/bin/python ]] && PY=$ROOT/.cache/engines/venv/bin/python
fi
PY_PATH=${PY_PATH:-$ROOT/python}

STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUT=${OUT:-$ROOT/bench/results}
RAW=$OUT/local-$STAMP

# shellcheck source=bench/log.sh
. "$(dirname "$0")/log.sh" local-compare
note() {
	log "note: $*"
	printf '%s\n' "$*" >>"$RAW/notes.txt"
}

# --- argument checks ---------------------------------------------------------

[[ $REPS =~ ^[1-9][0-9]*$ ]] || die "REPS must be a positive integer, got '$REPS'"
[[ $PROFILE == 0 || $PROFILE == 1 ]] || die "PROFILE must be 0 or 1, got '$PROFILE'"
[[ $PAGES =~ ^[1-9][0-9]*$ ]] || die "PAGES must be a positive integer, got '$PAGES'"
[[ $PROFILE_SECONDS =~ ^[0-9]+$ ]] && ((PROFILE_SECONDS >= 5)) || die "PROFILE_SECONDS must be a whole number >= 5, got '$PROFILE_SECONDS'"
[[ $CLIENT_PROCS == default || $CLIENT_PROCS =~ ^[1-9][0-9]*$ ]] || die "CLIENT_PROCS must be 'default' or a positive integer, got '$CLIENT_PROCS'"
secs() { # secs VAR VALUE: whole seconds of "5s" or "5" into VAR
	[[ $2 =~ ^([0-9]+)s?$ ]] || die "$1 must be whole seconds (e.g. 5s), got '$2'"
	printf -v "$1" '%s' "${BASH_REMATCH[1]}"
}
secs DUR_S "$DURATION"
secs WARM_S "$WARMUP"
secs LIM_S "$LIMIT_DURATION"
((DUR_S >= 1 && LIM_S >= 1)) || die "DURATION and LIMIT_DURATION must be at least 1s"

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
WS_BYTES=$(size_bytes "$WORKING_SET")
keys_for() { # keys_for SIZE_LABEL: blocks of the working set at that size
	local k=$((WS_BYTES / $(size_bytes "$1")))
	((k < 1)) && k=1
	echo "$k"
}

# --- tools -------------------------------------------------------------------

for t in redis-server redis-benchmark redis-cli go curl; do
	command -v "$t" >/dev/null 2>&1 || die "$t is not on PATH (Redis 7: apt-get install redis-server redis-tools)"
done

# --- processes and cleanup ---------------------------------------------------

USED_PORTS=" 9400 9401 6379 "
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"

mkdir -p "$RAW"/{logs,limits,gpucache,redis,python,profiles}
: >"$RAW/notes.txt"
log "raw files in $RAW"

WORKDIR=$(mktemp -d "${TMPDIR:-/tmp}/gpucache-local.XXXXXX")
BIN=$WORKDIR
log "building gpucached and gpucache-bench"
go build -o "$BIN/gpucached" ./cmd/gpucached
go build -o "$BIN/gpucache-bench" ./tools/cmd/gpucache-bench

py_rev() {
	git -C "$PY_PATH" describe --always --dirty 2>/dev/null || echo "not a git tree"
}
mem_avail_kib=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo 2>/dev/null || echo 0)
fuzzers=$(pgrep -fc 'test\.fuzz' 2>/dev/null || true)
{
	machine_info
	printf 'mem_available_at_start\t%s GiB\n' "$((mem_avail_kib / 1048576))"
	printf 'fuzzers_at_start\t%s processes matching test.fuzz\n' "${fuzzers:-0}"
	printf 'redis\t%s\n' "$(redis-server --version)"
	printf 'python\t%s (%s)\n' "$("$PY" -c 'import sys; print(sys.version.split()[0])' 2>/dev/null || echo none)" "$PY"
	printf 'torch\t%s\n' "$("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo none)"
	printf 'py_path\t%s (%s)\n' "$PY_PATH" "$(py_rev)"
	printf 'gpucache_client_gomaxprocs\t%s\n' "$CLIENT_PROCS"
	printf 'gpu\tnone: every figure is CPU only\n'
} >"$RAW/machine.txt"
{
	printf 'quick\t%s\n' "$QUICK"
	printf 'reps\t%s\n' "$REPS"
	printf 'duration_s\t%s\n' "$DUR_S"
	printf 'warmup_s\t%s\n' "$WARM_S"
	printf 'limit_duration_s\t%s\n' "$LIM_S"
	printf 'sizes\t%s\n' "$SIZES"
	printf 'conns\t%s\n' "$CONNS"
	printf 'working_set_bytes\t%s\n' "$WS_BYTES"
	printf 'hot_capacity\t%s\n' "$HOT_CAPACITY"
	printf 'pages\t%s\n' "$PAGES"
	printf 'profile\t%s\n' "$PROFILE"
} >"$RAW/plan.txt"

# --- servers -----------------------------------------------------------------

GPC_PORT=
GPC_ADMIN=
GPC_SOCK=$WORKDIR/gpucached.sock
start_gpucached() {
	free_port GPC_PORT
	free_port GPC_ADMIN
	"$BIN/gpucached" --listen "127.0.0.1:$GPC_PORT" --admin-listen "127.0.0.1:$GPC_ADMIN" --unix-listen "$GPC_SOCK" \
		--cold-store off --hot-capacity "$HOT_CAPACITY" --drain-timeout 2s >"$RAW/logs/gpucached.log" 2>&1 3>&- &
	GPC_PID=$!
	PIDS+=("$GPC_PID")
	wait_port "$GPC_PORT" "$GPC_PID" 120 || die "gpucached did not start (see logs/gpucached.log)"
	local i
	for ((i = 0; i < 100; i++)); do
		[[ -S $GPC_SOCK ]] && return 0
		sleep 0.1
	done
	die "gpucached did not create its Unix socket $GPC_SOCK (see logs/gpucached.log)"
}
REDIS_SOCK=$WORKDIR/redis.sock
start_redis() {
	local i
	redis-server --port 0 --unixsocket "$REDIS_SOCK" --unixsocketperm 700 --save '' --appendonly no \
		--daemonize no --dir "$WORKDIR" --logfile "" >"$RAW/logs/redis-server.log" 2>&1 3>&- &
	REDIS_PID=$!
	PIDS+=("$REDIS_PID")
	for ((i = 0; i < 100; i++)); do
		kill -0 "$REDIS_PID" 2>/dev/null || break
		[[ $(redis-cli -s "$REDIS_SOCK" ping 2>/dev/null) == PONG ]] && return 0
		sleep 0.1
	done
	die "redis-server did not answer on $REDIS_SOCK (see logs/redis-server.log)"
}

# --- the limits: memcpy and cross-memory attach --------------------------------

run_limits() { # run_limits REP
	local r=$1 lsizes
	lsizes=$SIZES
	[[ ,$lsizes, == *,256KiB,* ]] || lsizes+=,256KiB
	log "memcpy rep $r: sizes $lsizes, threads 1,2, working set $WORKING_SET, ${LIM_S}s each"
	fg_run timeout $((LIM_S * 20 + 120)) "$BIN/gpucache-bench" memcpy --sizes "$lsizes" --threads 1,2 \
		--working-set "$WORKING_SET" --duration "${LIM_S}s" >"$RAW/limits/memcpy_r$r.tsv" 2>"$RAW/logs/memcpy_r$r.err" ||
		note "memcpy rep $r failed (see logs/memcpy_r$r.err)"
	log "cma rep $r: sizes $SIZES, threads 1,2"
	fg_run timeout $((LIM_S * 20 + 120)) "$BIN/gpucache-bench" cma --sizes "$SIZES" --threads 1,2 \
		--working-set "$WORKING_SET" --duration "${LIM_S}s" >"$RAW/limits/cma_r$r.tsv" 2>"$RAW/logs/cma_r$r.err" ||
		note "cma rep $r failed (see logs/cma_r$r.err)"
}

# --- gpucache: TCP, Unix socket, registered regions ----------------------------

gpc_bench() { # gpc_bench NAME ADDR ARGS...: one gpucache-bench bench run, JSON to gpucache/NAME.json
	local name=$1 addr=$2 procs=()
	shift 2
	[[ $CLIENT_PROCS != default ]] && procs=(env "GOMAXPROCS=$CLIENT_PROCS")
	log "gpucache $name: $*"
	if ! fg_run "${procs[@]}" timeout $((4 * (DUR_S + WARM_S) * 3 + 300)) "$BIN/gpucache-bench" bench --addr "$addr" \
		--duration "${DUR_S}s" --warmup "${WARM_S}s" --json "$RAW/gpucache/$name.json" "$@" \
		>"$RAW/logs/gpucache-$name.out" 2>&1; then
		note "gpucache $name: bench failed (see logs/gpucache-$name.out)"
		[[ -f $RAW/gpucache/$name.json ]] && mv "$RAW/gpucache/$name.json" "$RAW/logs/gpucache-$name.failed.json"
	fi
	return 0
}
run_gpucache() { # run_gpucache REP
	local r=$1 s tr addr extra
	for tr in tcp unix region; do
		addr="unix:$GPC_SOCK"
		extra=()
		[[ $tr == tcp ]] && addr="127.0.0.1:$GPC_PORT"
		[[ $tr == region ]] && extra=(--region)
		for s in ${SIZES//,/ }; do
			gpc_bench "${tr}_${s}_r$r" "$addr" --op both --sizes "$s" --conns "$CONNS" --keys "$(keys_for "$s")" "${extra[@]}"
		done
	done
}

# --- Redis over its Unix socket ------------------------------------------------

declare -A REDIS_N=()
rb() { # rb TIMEOUT_S ARGS...: redis-benchmark against our server's socket
	local t=$1
	shift
	fg_run timeout "$t" redis-benchmark -s "$REDIS_SOCK" "$@"
}
csv_rps() { # csv_rps FILE: rps of the first data row
	awk -F, 'NR > 1 && NF > 1 {gsub(/"/, "", $2); print $2; exit}' "$1"
}
redis_case() { # redis_case get|put SIZE_LABEL CLIENTS REP
	local op=$1 label=$2 c=$3 r=$4 size t keys n0 n rps f name minpc=50
	size=$(size_bytes "$label")
	keys=$(keys_for "$label")
	((size >= 8 << 20)) && minpc=2
	t=get
	[[ $op == put ]] && t=set
	name="${op}_${label}_c$c"
	n=${REDIS_N[$name]:-}
	if [[ -z $n ]]; then
		# Probe ~300 MB (at least minpc requests per client) to size the runs.
		n0=$((300000000 / size))
		((n0 < minpc * c)) && n0=$((minpc * c))
		if ! rb 300 -t "$t" -d "$size" -r "$keys" -c "$c" -n "$n0" --csv >"$RAW/logs/redis-$name-probe.csv" 2>"$RAW/logs/redis-$name-probe.err"; then
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
		REDIS_N[$name]=$n
	fi
	f="$RAW/redis/${name}_r$r.csv"
	log "redis $op $label clients=$c rep $r (n=$n)"
	if ! rb $((DUR_S * 4 + 120)) -t "$t" -d "$size" -r "$keys" -c "$c" -n "$n" --csv >"$f" 2>"$RAW/logs/redis-${name}_r$r.err"; then
		note "redis $name rep $r: redis-benchmark failed (see logs/redis-${name}_r$r.err)"
		mv "$f" "$RAW/logs/" 2>/dev/null || true
	fi
}
run_redis() { # run_redis REP
	local r=$1 s c keys
	for s in ${SIZES//,/ }; do
		# One size's working set at a time: drop the last, SET, then fill
		# every key (-r draws at random; 10 draws a key leave ~1 in 20000
		# unset) before the GETs.
		keys=$(keys_for "$s")
		redis-cli -s "$REDIS_SOCK" flushall >/dev/null
		for c in ${CONNS//,/ }; do redis_case put "$s" "$c" "$r"; done
		if ! rb 600 -t set -d "$(size_bytes "$s")" -r "$keys" -n $((keys * 10)) -c 8 -q >/dev/null 2>"$RAW/logs/redis-prefill-$s.err"; then
			note "redis prefill $s failed (see logs/redis-prefill-$s.err)"
			continue
		fi
		for c in ${CONNS//,/ }; do redis_case get "$s" "$c" "$r"; done
	done
	redis-cli -s "$REDIS_SOCK" flushall >/dev/null
}

# --- Python: the SGLang backend's batch_get_v1 ---------------------------------

PY_OK=1
PY_REGION=1
check_python() {
	if ! PYTHONPATH=$PY_PATH "$PY" -c 'import torch, gpucache.sglang' >/dev/null 2>"$RAW/logs/python-check.err"; then
		note "python: $PY cannot import torch and gpucache.sglang from $PY_PATH; the Python rows are NOT_RUN (see logs/python-check.err)"
		PY_OK=0
		PY_REGION=0
		return 0
	fi
	if ! PYTHONPATH=$PY_PATH "$PY" -c 'import gpucache.shm' >/dev/null 2>>"$RAW/logs/python-check.err"; then
		note "python: gpucache.shm is not in $PY_PATH; the Python region row is NOT_RUN"
		PY_REGION=0
	fi
}
py_case() { # py_case NAME ADDR MEMORY REP
	local name=$1 addr=$2 mem=$3 r=$4
	log "python batch_get_v1 $name rep $r: $PAGES pages, $mem memory, $addr"
	if ! PYTHONPATH=$PY_PATH fg_run timeout $((DUR_S * 3 + 300)) "$PY" bench/local_pages.py --addr "$addr" --memory "$mem" \
		--pages "$PAGES" --duration "$DUR_S" --json "$RAW/python/${name}_r$r.json" >/dev/null 2>"$RAW/logs/python-${name}_r$r.err"; then
		note "python $name rep $r failed (see logs/python-${name}_r$r.err)"
		rm -f "$RAW/python/${name}_r$r.json"
	fi
}
run_python() { # run_python REP
	local r=$1
	((PY_OK)) || return 0
	py_case tcp "127.0.0.1:$GPC_PORT" private "$r"
	py_case unix "unix:$GPC_SOCK" private "$r"
	((PY_REGION)) && py_case region "unix:$GPC_SOCK" shm "$r"
	return 0
}

# --- profiles of the target cases ----------------------------------------------

# Each target case once more, for PROFILE_SECONDS: the client's CPU profile
# (gpucache-bench bench --cpuprofile, the whole run: the GET cases' working
# set is written first) and gpucached's (/debug/pprof/profile), taken from
# 2 s into the run for PROFILE_SECONDS - 3 s, so inside the measured case.
# The top frames go to profiles/NAME-{client,server}.top.txt, and by
# cumulative time to NAME-{client,server}.cum.txt; then the Python region
# row once under cProfile (profiles/python_region-client.top.txt). Every
# top file is also collected in profiles.txt.
profile_case() { # profile_case NAME ADDR ARGS...
	local name=$1 addr=$2 cpid procs=()
	shift 2
	[[ $CLIENT_PROCS != default ]] && procs=(env "GOMAXPROCS=$CLIENT_PROCS")
	log "profile $name: $*"
	(
		sleep 2
		curl -sf -o "$WORKDIR/$name-server.pprof" "http://127.0.0.1:$GPC_ADMIN/debug/pprof/profile?seconds=$((PROFILE_SECONDS - 3))"
	) 3>&- &
	cpid=$!
	PIDS+=("$cpid")
	if ! fg_run "${procs[@]}" timeout $((PROFILE_SECONDS * 3 + 300)) "$BIN/gpucache-bench" bench --addr "$addr" \
		--duration "${PROFILE_SECONDS}s" --json "$RAW/profiles/$name.json" --cpuprofile "$WORKDIR/$name-client.pprof" "$@" \
		>"$RAW/logs/profile-$name.out" 2>&1; then
		note "profile $name: bench failed (see logs/profile-$name.out)"
	fi
	wait "$cpid" || note "profile $name: no server profile (curl failed)"
	local side
	for side in client server; do
		[[ -s $WORKDIR/$name-$side.pprof ]] || continue
		go tool pprof -top -nodecount=30 "$WORKDIR/$name-$side.pprof" >"$RAW/profiles/$name-$side.top.txt" 2>"$RAW/logs/pprof-$name-$side.err" ||
			note "profile $name: go tool pprof failed on the $side profile"
		go tool pprof -top -cum -nodecount=30 "$WORKDIR/$name-$side.pprof" >"$RAW/profiles/$name-$side.cum.txt" 2>>"$RAW/logs/pprof-$name-$side.err" || true
	done
}
run_profiles() {
	[[ $PROFILE == 1 ]] || return 0
	local u="unix:$GPC_SOCK"
	profile_case get_1MiB_c1_region "$u" --region --op get --sizes 1MiB --conns 1 --keys "$(keys_for 1MiB)"
	profile_case get_32MiB_c8_region "$u" --region --op get --sizes 32MiB --conns 8 --keys "$(keys_for 32MiB)"
	profile_case get_64KiB_c8_region "$u" --region --op get --sizes 64KiB --conns 8 --keys "$(keys_for 64KiB)"
	profile_case put_1MiB_c1_region "$u" --region --op put --sizes 1MiB --conns 1 --keys "$(keys_for 1MiB)"
	profile_case put_1MiB_c1_tcp "127.0.0.1:$GPC_PORT" --op put --sizes 1MiB --conns 1 --keys "$(keys_for 1MiB)"
	profile_case put_64KiB_c8_region "$u" --region --op put --sizes 64KiB --conns 8 --keys "$(keys_for 64KiB)"
	if ((PY_REGION)); then
		log "profile python batch_get_v1 through a region (cProfile)"
		PYTHONPATH=$PY_PATH fg_run timeout $((PROFILE_SECONDS * 3 + 300)) "$PY" bench/local_pages.py --addr "unix:$GPC_SOCK" --memory shm \
			--pages "$PAGES" --duration "$PROFILE_SECONDS" --json "$RAW/profiles/python_region.json" \
			--profile "$RAW/profiles/python_region-client.top.txt" >/dev/null 2>"$RAW/logs/profile-python.err" ||
			note "profile python: local_pages.py failed (see logs/profile-python.err)"
	fi
	# One file of every profile's top frames, for the record.
	local f
	for f in "$RAW"/profiles/*.top.txt; do
		[[ -f $f ]] || continue
		printf '=== %s ===\n' "$(basename "$f" .top.txt)"
		cat "$f"
		printf '\n'
	done >"$RAW/profiles.txt"
}

# --- run ---------------------------------------------------------------------

log "DURATION=${DUR_S}s WARMUP=${WARM_S}s REPS=$REPS QUICK=$QUICK sizes=$SIZES conns=$CONNS working set=$WORKING_SET"
start_gpucached
start_redis
check_python
for ((rep = 1; rep <= REPS; rep++)); do
	log "=== repetition $rep of $REPS ==="
	run_limits "$rep"
	run_redis "$rep"
	run_gpucache "$rep"
	run_python "$rep"
done
run_profiles
printf 'loadavg_at_end\t%s\n' "$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)" >>"$RAW/machine.txt"
fuzzers=$(pgrep -fc 'test\.fuzz' 2>/dev/null || true)
printf 'fuzzers_at_end\t%s processes matching test.fuzz\n' "${fuzzers:-0}" >>"$RAW/machine.txt"
stop_pid "$REDIS_PID"
stop_pid "$GPC_PID"

python3 bench/local_report.py "$RAW" >"$RAW/report.md"
log "report: $RAW/report.md"
cat "$RAW/report.md"
