#!/usr/bin/env bash
# bench/gc-diag.sh — where a GC stop-the-world pause goes.
#
# Usage:
#   bench/gc-diag.sh get [OUT]   the compare.sh GC case by hand: gpucached holds
#                                HOLD, then serves 1 MiB GETs at 8 conns for DUR,
#                                with a GC forced every FORCE_MS once the hold is in
#   bench/gc-diag.sh put [OUT]   64 KiB PUTs at 8 conns for DUR: bytes and objects
#                                allocated per PUT, GC cycles
#
# Environment:
#   HOLD          get: --hold-bytes; default 4GiB (needs about 5 GiB free)
#   DUR           length of the measured load; default 5s
#   SERVER_PROCS  gpucached's GOMAXPROCS; default: the runtime's choice
#   FORCE_MS      get: force a GC cycle this often (ms) after the hold; 0: none; default 50
#   TRACE_S       get: also take a runtime trace of this many seconds after the hold
#   PROFILE_S     get: also take a CPU profile of this many seconds after the hold
#   GPUCACHED     a gpucached binary to measure instead of building this tree's
#
# OUT (default a new directory under bench/results/gc-diag-<stamp>) receives the
# server log with GODEBUG=gctrace=1 (server.log), the bench JSON and output,
# trace.out / cpu.pprof when asked, and summary.txt: the STAT go_* figures
# (pause p99 total and stopping), gctrace's stop-the-world phases, and the
# server threads' on-CPU and run-queue wait times over the window
# (/proc/PID/task/*/schedstat). Read a trace with `go tool trace -d=parsed`.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
# shellcheck source=bench/log.sh
. "$(dirname "$0")/log.sh" gc-diag
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"

MODE=${1:-}
[[ $MODE == get || $MODE == put ]] || die "usage: bench/gc-diag.sh get|put [OUT]"
OUT=${2:-$ROOT/bench/results/gc-diag-$(date -u +%Y%m%dT%H%M%SZ)}
HOLD=${HOLD:-4GiB}
DUR=${DUR:-5s}
SERVER_PROCS=${SERVER_PROCS:-}
FORCE_MS=${FORCE_MS:-50}
[[ $FORCE_MS =~ ^[0-9]+$ ]] || die "FORCE_MS must be a whole number of ms"
mkdir -p "$OUT"

BIN=$(mktemp -d "${TMPDIR:-/tmp}/gpucache-gcdiag.XXXXXX")
WORKDIR=$BIN
if [[ -n ${GPUCACHED:-} ]]; then
	cp "$GPUCACHED" "$BIN/gpucached"
else
	go build -o "$BIN/gpucached" ./cmd/gpucached
fi
go build -o "$BIN/gpucache-bench" ./tools/cmd/gpucache-bench

size_to_bytes() { # size_to_bytes 4GiB -> 4294967296
	case $1 in
	*GiB) echo $((${1%GiB} << 30)) ;;
	*MiB) echo $((${1%MiB} << 20)) ;;
	*[0-9]) echo "$1" ;;
	*) die "bad size '$1'" ;;
	esac
}
free_port PORT
free_port ADMIN
cap=${HOT_CAPACITY:-2GiB}
[[ $MODE == get ]] && cap=${HOT_CAPACITY:-5GiB}
srv_env=(GODEBUG=gctrace=1)
[[ -n $SERVER_PROCS ]] && srv_env+=("GOMAXPROCS=$SERVER_PROCS")
env "${srv_env[@]}" "$BIN/gpucached" --listen "127.0.0.1:$PORT" --admin-listen "127.0.0.1:$ADMIN" --cold-store off \
	--hot-capacity "$cap" --drain-timeout 2s >"$OUT/server.log" 2>&1 3>&- &
SP=$!
PIDS+=("$SP")
wait_port "$PORT" "$SP" 60 || die "gpucached did not start (see $OUT/server.log)"
ADM="http://127.0.0.1:$ADMIN"

metric() { # metric NAME: one /metrics value, as an integer
	curl -sf "$ADM/metrics" | awk -v n="$1" '$1 == n {printf "%.0f", $2}' || true
}
schedstat() { # schedstat: "on-cpu-ns wait-ns" summed over the server's threads
	cat /proc/"$SP"/task/*/schedstat 2>/dev/null | awk '{c += $1; d += $2} END {printf "%.0f %.0f\n", c, d}'
}

if [[ $MODE == put ]]; then
	a0=$(metric go_memstats_alloc_bytes_total)
	m0=$(metric go_memstats_mallocs_total)
	p0=$(metric gpucache_requests_put_total)
	GOMAXPROCS=1 "$BIN/gpucache-bench" bench --addr "127.0.0.1:$PORT" --op put --sizes 64KiB --conns 8 --duration "$DUR" \
		--json "$OUT/bench.json" >"$OUT/bench.out" 2>&1
	a1=$(metric go_memstats_alloc_bytes_total)
	m1=$(metric go_memstats_mallocs_total)
	p1=$(metric gpucache_requests_put_total)
	stop_pid "$SP"
	{
		echo "puts $((p1 - p0)): $(((a1 - a0) / (p1 - p0 + 1))) B and $(((m1 - m0) * 10 / (p1 - p0 + 1))) tenths of an allocation per PUT (metrics scrapes included)"
		echo "gc cycles over the process life: $(grep -c '^gc ' "$OUT/server.log" || true)"
		grep -E '^ +put' "$OUT/bench.out" || true
	} | tee "$OUT/summary.txt"
	exit 0
fi

GOMAXPROCS=1 "$BIN/gpucache-bench" bench --addr "127.0.0.1:$PORT" --hold-bytes "$HOLD" --op get --sizes 1MiB --conns 8 \
	--duration "$DUR" --json "$OUT/gc.json" >"$OUT/bench.out" 2>&1 3>&- &
BP=$!
PIDS+=("$BP")
want=$(size_to_bytes "$HOLD")
last=0
still=0
while kill -0 "$BP" 2>/dev/null; do # until the hold is in, or stopped growing for 2 s
	c=$(metric gpucache_hot_bytes_cached)
	c=${c:-0}
	((c >= want)) && break
	if ((c > 0 && c == last)); then
		still=$((still + 1))
		((still >= 4)) && break
	else
		still=0
	fi
	last=$c
	sleep 0.5
done
log "hold in; forcing a GC every ${FORCE_MS}ms"
read -r c0 d0 < <(schedstat)
t0=$(date +%s%N)
dl=()
if [[ -n ${TRACE_S:-} ]]; then
	curl -sf -o "$OUT/trace.out" "$ADM/debug/pprof/trace?seconds=$TRACE_S" &
	dl+=($!)
fi
if [[ -n ${PROFILE_S:-} ]]; then
	curl -sf -o "$OUT/cpu.pprof" "$ADM/debug/pprof/profile?seconds=$PROFILE_S" &
	dl+=($!)
fi
n=0
while kill -0 "$BP" 2>/dev/null; do
	if ((FORCE_MS > 0)); then
		curl -sf -o /dev/null "$ADM/debug/pprof/heap?gc=1" && n=$((n + 1))
		sleep "$(awk -v m="$FORCE_MS" 'BEGIN {printf "%.3f", m / 1000}')"
	else
		sleep 0.2
	fi
done
read -r c1 d1 < <(schedstat)
t1=$(date +%s%N)
wait "$BP" || log "bench failed (see $OUT/bench.out)"
for p in "${dl[@]}"; do wait "$p" || log "a trace or profile download failed"; done
stop_pid "$SP"
{
	echo "forced GC cycles: $n"
	awk -v c="$((c1 - c0))" -v d="$((d1 - d0))" -v t="$((t1 - t0))" 'BEGIN {
		printf "server threads over the GET window: on a CPU %.0f ms/s, waiting on a run queue %.0f ms/s\n", c / t * 1000, d / t * 1000 }'
	if [[ -f $OUT/gc.json ]]; then
		tr ',{}' '\n\n\n' <"$OUT/gc.json" | grep -E '"go_(gc|other)_' | tr -d '" ' | sort -u
	fi
	# gctrace: "gc N @Ts P%: A+B+C ms clock": A and C are the two stop-the-world phases.
	echo "gctrace: $(grep -c '^gc ' "$OUT/server.log" || true) cycles, $(grep -c '^gc .*(forced)$' "$OUT/server.log" || true) forced"
	grep '^gc ' "$OUT/server.log" | awk '{split($5, ph, "+"); print ph[1] * 1000; print ph[3] * 1000}' | sort -n |
		awk '{a[++m] = $1} END { if (!m) exit
			i = int(m * 0.99); if (i < m * 0.99) i++
			printf "gctrace stop-the-world phases: %d, p50 %.0f us, p99 %.0f us, max %.0f us\n", m, a[int((m + 1) / 2)], a[i], a[m] }'
	grep -E '^ +get' "$OUT/bench.out" || true
} | tee "$OUT/summary.txt"
