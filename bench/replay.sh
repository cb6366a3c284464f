#!/usr/bin/env bash
# bench/replay.sh — live trace replay: starts gpucached with a hot
# tier of exactly CAPACITY × the unique blocks of the first LIMIT requests of
# a Mooncake trace, replays those requests through the client with real
# payloads (64 MiB per 512-token block / SCALE) at the trace's arrival times
# / SPEEDUP, and prints the report: hit ratio next to the simulator's at the
# same capacity, throughput, latency percentiles, wrong payloads.
#
# Usage:
#   bench/replay.sh                       # 2000 requests, scale 256, 10%, lru
#   CAPACITY=0.05 POLICY=lru bench/replay.sh
#   QUICK=1 bench/replay.sh               # smoke: 200 requests
#
# Environment:
#   TRACE        Mooncake JSONL trace; default ../shared/traces/mooncake-conversation-trace.jsonl,
#                Mooncake's public conversation trace (FAST'25; conversation_trace.jsonl
#                under FAST25-release/traces in github.com/kvcache-ai/Mooncake), not
#                committed here
#   LIMIT        requests replayed (the first LIMIT); default 2000 (200 with QUICK=1)
#   SCALE        payload = 64 MiB / SCALE per block; default 256 (256 KiB)
#   CAPACITY     daemon capacity as a fraction of the replayed unique blocks; default 0.10
#   POLICY       gpucached --hot-policy; default lru. If the daemon has no
#                --hot-policy flag it runs its built-in order, and the script says so.
#   SIM_POLICY   simulator policy to compare with; default POLICY
#   SPEEDUP      divide the trace's inter-arrival times (0: as fast as CONNS allow); default 0
#   CONNS        requests in flight; default 4
#   PREFAULT     gpucached --hot-prefault; default populate
#   SERVER_PROCS GOMAXPROCS of gpucached; default: unset
#   OUT          results directory; default bench/results (gitignored). Files go
#                to OUT/replay-<stamp>/ (replay.txt, replay.json, capacity.txt,
#                command.txt, machine.txt, logs/)
#   EXTRA        extra flags for gpucache-bench replay (word-split)
#
# Client and server share this host's CPUs. The port is picked free at
# random (never 9400 or 9401); the admin listener and the cold tier are off.
# Every background process the script starts is stopped on exit.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

QUICK=${QUICK:-0}
if [[ $QUICK == 1 ]]; then
	LIMIT=${LIMIT:-200}
else
	LIMIT=${LIMIT:-2000}
fi
TRACE=${TRACE:-$ROOT/../shared/traces/mooncake-conversation-trace.jsonl}
SCALE=${SCALE:-256}
CAPACITY=${CAPACITY:-0.10}
POLICY=${POLICY:-lru}
SIM_POLICY=${SIM_POLICY:-$POLICY}
SPEEDUP=${SPEEDUP:-0}
CONNS=${CONNS:-4}
PREFAULT=${PREFAULT:-populate}
SERVER_PROCS=${SERVER_PROCS:-}
EXTRA=${EXTRA:-}

STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUT=${OUT:-$ROOT/bench/results}
RAW=$OUT/replay-$STAMP

# shellcheck source=bench/log.sh
. "$(dirname "$0")/log.sh" replay

# --- argument checks ---------------------------------------------------------

[[ -r $TRACE ]] || die "TRACE $TRACE is not a readable file"
TRACE=$(cd "$(dirname "$TRACE")" && pwd)/$(basename "$TRACE")
[[ $LIMIT =~ ^[1-9][0-9]*$ ]] || die "LIMIT must be a positive integer, got '$LIMIT'"
[[ $SCALE =~ ^[1-9][0-9]*$ ]] || die "SCALE must be a positive integer, got '$SCALE'"
[[ $CAPACITY =~ ^(0?\.[0-9]+|1(\.0*)?)$ ]] || die "CAPACITY must be a fraction in (0, 1], e.g. 0.10, got '$CAPACITY'"
[[ $SPEEDUP =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "SPEEDUP must be a number >= 0, got '$SPEEDUP'"
[[ $CONNS =~ ^[1-9][0-9]*$ ]] || die "CONNS must be a positive integer, got '$CONNS'"
[[ $POLICY =~ ^[a-z0-9_-]+$ ]] || die "POLICY must be a policy name, got '$POLICY'"
command -v go >/dev/null 2>&1 || die "go is not on PATH"

# --- processes and cleanup ---------------------------------------------------

# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"

# --- setup -------------------------------------------------------------------

mkdir -p "$RAW/logs"
log "results in $RAW"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/gpucache-replay.XXXXXX")
WORKDIR=$TMP
BIN=$TMP/bin
mkdir -p "$BIN"
log "building gpucached and gpucache"
go build -o "$BIN/gpucached" ./cmd/gpucached
go build -o "$BIN/gpucache-bench" ./tools/cmd/gpucache-bench

# The hot tier that holds exactly the simulator's capacity in blocks: one
# size class that the payload fills, a slab that divides the capacity.
"$BIN/gpucache-bench" replay --print-capacity --trace "$TRACE" --limit "$LIMIT" --capacity-frac "$CAPACITY" \
	--scale "$SCALE" >"$RAW/capacity.txt"
hot_capacity=$(sed -n 's/^hot_capacity=//p' "$RAW/capacity.txt")
hot_min_class=$(sed -n 's/^hot_min_class=//p' "$RAW/capacity.txt")
hot_max_class=$(sed -n 's/^hot_max_class=//p' "$RAW/capacity.txt")
hot_slab=$(sed -n 's/^hot_slab=//p' "$RAW/capacity.txt")
capacity_blocks=$(sed -n 's/^capacity_blocks=//p' "$RAW/capacity.txt")
[[ -n $hot_capacity && -n $hot_slab && -n $capacity_blocks ]] || die "gpucache-bench replay --print-capacity printed no sizing (see $RAW/capacity.txt)"
log "capacity $CAPACITY = $capacity_blocks blocks = $hot_capacity bytes (class $hot_max_class, slab $hot_slab)"

free_port PORT
GPC_ARGS=(--listen "127.0.0.1:$PORT" --admin-listen off --cold-store off --audit-log off
	--hot-capacity "$hot_capacity" --hot-min-class "$hot_min_class" --hot-max-class "$hot_max_class"
	--hot-slab "$hot_slab" --hot-prefault "$PREFAULT")
DAEMON_POLICY=$POLICY
# The help is read whole before it is searched: grep -q stops at the
# first match, and the pipe's writer, killed by SIGPIPE, fails the pipeline
# under pipefail once the help outgrows the pipe buffer.
help=$("$BIN/gpucached" --help 2>&1 || true)
if grep -q -- '-hot-policy' <<<"$help"; then
	GPC_ARGS+=(--hot-policy "$POLICY")
else
	DAEMON_POLICY=builtin
	log "note: this gpucached has no --hot-policy flag; it runs its built-in order (POLICY=$POLICY ignored)"
fi

{
	machine_info
	printf 'gpucached\t%s\n' "${GPC_ARGS[*]}"
} >"$RAW/machine.txt"

log "starting gpucached on 127.0.0.1:$PORT (policy $DAEMON_POLICY)"
if [[ -n $SERVER_PROCS ]]; then
	GOMAXPROCS=$SERVER_PROCS "$BIN/gpucached" "${GPC_ARGS[@]}" >"$RAW/logs/gpucached.log" 2>&1 3>&- &
else
	"$BIN/gpucached" "${GPC_ARGS[@]}" >"$RAW/logs/gpucached.log" 2>&1 3>&- &
fi
GPC_PID=$!
PIDS+=("$GPC_PID")
wait_port "$PORT" "$GPC_PID" 60 || die "gpucached did not start (see $RAW/logs/gpucached.log)"

# --- run ---------------------------------------------------------------------

REPLAY_ARGS=(replay --live --addr "127.0.0.1:$PORT" --trace "$TRACE" --limit "$LIMIT" --scale "$SCALE"
	--capacity-frac "$CAPACITY" --speedup "$SPEEDUP" --conns "$CONNS" --sim-policy "$SIM_POLICY"
	--policy-name "$DAEMON_POLICY" --progress off)
# shellcheck disable=SC2206
[[ -n $EXTRA ]] && REPLAY_ARGS+=($EXTRA)
log "gpucache ${REPLAY_ARGS[*]}"
printf 'gpucached %s\ngpucache %s --json replay.json\n' "${GPC_ARGS[*]}" "${REPLAY_ARGS[*]}" >"$RAW/command.txt"
rc=0
fg_run "$BIN/gpucache-bench" "${REPLAY_ARGS[@]}" --json "$RAW/replay.json" \
	>"$RAW/replay.txt" 2> >(tee "$RAW/logs/replay.err" >&3) || rc=$?
cat "$RAW/replay.txt"
((rc == 0)) || log "gpucache-bench replay exited $rc (see $RAW/logs/replay.err)"

stop_pid "$GPC_PID"
log "done: $RAW"
exit "$rc"
