#!/usr/bin/env bash
# bench/noisy.sh — noisy neighbour: tenant B ("victim") runs a steady, paced
# GET load alone and while tenant A ("noisy") floods the same gpucached at 10×
# its ops quota; prints B's latency per phase and the median p99 rise.
#
# Usage:
#   bench/noisy.sh                     # full run: 10s phases, 5 reps
#   QUICK=1 bench/noisy.sh             # smoke: 2s phases, 1 rep
#   PROFILE=1 bench/noisy.sh           # afterwards, CPU-profile the daemon in
#                                      # one flood phase and one alone phase
#
# Environment:
#   QUOTA        A's ops_per_sec in the daemon config (gpucache-bench noisy --quota); default 1000
#   OPS_BURST    A's ops_burst; default 100
#   FACTOR       flood rate as a multiple of QUOTA; default 10
#   VICTIM_RATE  B's GETs per second; default 1000
#   SIZE         B's block size; default 64KiB
#   NOISY_SIZE   A's block size; default SIZE
#   DURATION     measured time per phase (Go duration); default 10s (2s with QUICK=1)
#   WARMUP       unmeasured load at the start of each rep; default 1s
#   REPS         reps, each one phase alone and one under the flood, in
#                alternating order; default 5 (1 with QUICK=1)
#   SLICE        if set (e.g. 1s), measure each phase in windows of SLICE
#                interleaved ABBA with the other phase's (gpucache-bench noisy --slice);
#                default: one window per phase
#   SETTLE       unmeasured time after each flood start or stop; default 100ms
#   VICTIM_PACER timer or fine (gpucache-bench noisy --victim-pacer); default timer
#   FLOOD_PACER  fine or timer (gpucache-bench noisy --flood-pacer); default fine
#   FLOOD_PROC   1 runs the flood in a child process of its own (gpucache-bench noisy
#                --flood-proc), 0 in the measuring process; default 1
#   CLIENT_PROCS GOMAXPROCS of the measuring (victim) process; default: unset
#   FLOOD_PROCS  GOMAXPROCS of the flood process (FLOOD_PROC=1); default 1
#   SERVER_PROCS GOMAXPROCS of gpucached; default: unset
#   HOT_CAPACITY gpucached hot_capacity; default 1GiB
#   OUT          results directory; default bench/results. Files go to
#                OUT/noisy-<stamp>/ (noisy.txt, noisy.json, machine.txt,
#                config.yaml, logs/, profiles/)
#   EXTRA        extra flags for gpucache-bench noisy (word-split)
#
# Client and server share this host's CPUs; nothing is pinned. Ports are
# picked free at random (never 9400 or 9401). Every background process the
# script starts is stopped on exit. Secrets are random per run and live in a
# temporary directory that is removed on exit.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

QUICK=${QUICK:-0}
if [[ $QUICK == 1 ]]; then
	DURATION=${DURATION:-2s}
	REPS=${REPS:-1}
else
	DURATION=${DURATION:-10s}
	REPS=${REPS:-5}
fi
QUOTA=${QUOTA:-1000}
OPS_BURST=${OPS_BURST:-100}
FACTOR=${FACTOR:-10}
VICTIM_RATE=${VICTIM_RATE:-1000}
SIZE=${SIZE:-64KiB}
NOISY_SIZE=${NOISY_SIZE:-$SIZE}
WARMUP=${WARMUP:-1s}
SLICE=${SLICE:-}
SETTLE=${SETTLE:-100ms}
VICTIM_PACER=${VICTIM_PACER:-timer}
FLOOD_PACER=${FLOOD_PACER:-fine}
FLOOD_PROC=${FLOOD_PROC:-1}
CLIENT_PROCS=${CLIENT_PROCS:-}
FLOOD_PROCS=${FLOOD_PROCS:-1}
SERVER_PROCS=${SERVER_PROCS:-}
HOT_CAPACITY=${HOT_CAPACITY:-1GiB}
PROFILE=${PROFILE:-0}
EXTRA=${EXTRA:-}

STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUT=${OUT:-$ROOT/bench/results}
RAW=$OUT/noisy-$STAMP

# shellcheck source=bench/log.sh
. "$(dirname "$0")/log.sh" noisy

# --- argument checks ---------------------------------------------------------

[[ $REPS =~ ^[1-9][0-9]*$ ]] || die "REPS must be a positive integer, got '$REPS'"
[[ $QUOTA =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "QUOTA must be a positive number, got '$QUOTA'"
[[ $OPS_BURST =~ ^[1-9][0-9]*$ ]] || die "OPS_BURST must be a positive integer, got '$OPS_BURST'"
[[ $FLOOD_PROC == 0 || $FLOOD_PROC == 1 ]] || die "FLOOD_PROC must be 0 or 1, got '$FLOOD_PROC'"
[[ $PROFILE == 0 || $PROFILE == 1 ]] || die "PROFILE must be 0 or 1, got '$PROFILE'"
# dur_s 10s -> 10 (whole seconds, rounded up; for timeouts and the profile)
dur_s() {
	local d=$1
	case $d in
	*ms) echo 1 ;;
	*m) echo $((${d%m} * 60)) ;;
	*s) echo $(((${d%s} + 0) > 0 ? ${d%s} : 1)) ;;
	*) die "durations must end in s, m or ms, got '$d'" ;;
	esac
}
[[ $DURATION =~ ^[0-9]+(ms|s|m)$ ]] || die "DURATION must be whole ms, s or m (e.g. 10s), got '$DURATION'"
[[ $WARMUP =~ ^[0-9]+(ms|s|m)$ ]] || die "WARMUP must be whole ms, s or m (e.g. 1s), got '$WARMUP'"
[[ -z $SLICE || $SLICE =~ ^[0-9]+(ms|s|m)$ ]] || die "SLICE must be whole ms, s or m (e.g. 1s), got '$SLICE'"
[[ $SETTLE =~ ^[0-9]+(ms|s|m)$ ]] || die "SETTLE must be whole ms, s or m (e.g. 100ms), got '$SETTLE'"
DUR_S=$(dur_s "$DURATION")
WARM_S=$(dur_s "$WARMUP")
[[ $WARMUP =~ ^0+(ms|s|m)$ ]] && WARM_S=0
command -v go >/dev/null 2>&1 || die "go is not on PATH"
command -v curl >/dev/null 2>&1 || { [[ $PROFILE == 0 ]] || die "PROFILE=1 needs curl"; }

# --- processes and cleanup ---------------------------------------------------

# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
random_secret() { # random_secret FILE: 32 random bytes, hex
	if command -v openssl >/dev/null 2>&1; then
		openssl rand -hex 32 >"$1"
	else
		od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$1"
		echo >>"$1"
	fi
	chmod 600 "$1"
}

# --- setup -------------------------------------------------------------------

mkdir -p "$RAW"/{logs,profiles}
log "results in $RAW"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/gpucache-noisy.XXXXXX")
WORKDIR=$TMP
BIN=$TMP/bin
mkdir -p "$BIN"
log "building gpucached and gpucache"
go build -o "$BIN/gpucached" ./cmd/gpucached
go build -o "$BIN/gpucache-bench" ./tools/cmd/gpucache-bench

for t in victim noisy ops; do
	random_secret "$TMP/$t.secret"
done
free_port PORT
free_port ADMIN
CONFIG=$TMP/config.yaml
cat >"$CONFIG" <<EOF
listen: 127.0.0.1:$PORT
admin_listen: 127.0.0.1:$ADMIN
cold_store: off
hot_capacity: $HOT_CAPACITY
audit_log: off
tenants:
  - name: noisy
    secrets: [{id: noisy-1, file: $TMP/noisy.secret}]
    rights: ["*=rw"]
    ops_per_sec: $QUOTA
    ops_burst: $OPS_BURST
  - name: victim
    secrets: [{id: victim-1, file: $TMP/victim.secret}]
    rights: ["*=rw"]
  - name: ops
    secrets: [{id: ops-1, file: $TMP/ops.secret}]
    rights: ["*=a"]
EOF
sed "s#$TMP#<tmp>#g" "$CONFIG" >"$RAW/config.yaml"

{
	machine_info
	printf 'gomaxprocs\tserver=%s victim=%s flood=%s\n' "${SERVER_PROCS:-default}" "${CLIENT_PROCS:-default}" \
		"$([[ $FLOOD_PROC == 1 ]] && echo "${FLOOD_PROCS:-default}" || echo "in victim process")"
} >"$RAW/machine.txt"

log "starting gpucached on 127.0.0.1:$PORT (admin $ADMIN)"
if [[ -n $SERVER_PROCS ]]; then
	GOMAXPROCS=$SERVER_PROCS "$BIN/gpucached" --config "$CONFIG" >"$RAW/logs/gpucached.log" 2>&1 3>&- &
else
	"$BIN/gpucached" --config "$CONFIG" >"$RAW/logs/gpucached.log" 2>&1 3>&- &
fi
GPC_PID=$!
PIDS+=("$GPC_PID")
wait_port "$PORT" "$GPC_PID" 60 || die "gpucached did not start (see $RAW/logs/gpucached.log)"

NOISY_ARGS=(noisy --addr "127.0.0.1:$PORT"
	--victim-tenant victim --victim-secret-file "$TMP/victim.secret"
	--noisy-tenant noisy --noisy-secret-file "$TMP/noisy.secret"
	--quota "$QUOTA" --flood-factor "$FACTOR" --victim-rate "$VICTIM_RATE"
	--size "$SIZE" --noisy-size "$NOISY_SIZE" --duration "$DURATION" --warmup "$WARMUP" --settle "$SETTLE"
	--victim-pacer "$VICTIM_PACER" --flood-pacer "$FLOOD_PACER")
[[ -n $SLICE ]] && NOISY_ARGS+=(--slice "$SLICE")
if [[ $FLOOD_PROC == 1 ]]; then
	NOISY_ARGS+=(--flood-proc --flood-gomaxprocs "${FLOOD_PROCS:-0}")
fi
# shellcheck disable=SC2206
[[ -n $EXTRA ]] && NOISY_ARGS+=($EXTRA)
# Client processes run under env, with GOMAXPROCS when CLIENT_PROCS is set.
RUN_CLIENT=(env ${CLIENT_PROCS:+GOMAXPROCS=$CLIENT_PROCS} "$BIN/gpucache-bench")

# --- run ---------------------------------------------------------------------

log "gpucache ${NOISY_ARGS[*]//$TMP/<tmp>} --reps $REPS"
printf 'gpucache %s --reps %s\n' "${NOISY_ARGS[*]//$TMP/<tmp>}" "$REPS" >"$RAW/command.txt"
limit=$((REPS * (2 * DUR_S * 2 + WARM_S + 60) + 120))
rc=0
fg_run timeout "$limit" "${RUN_CLIENT[@]}" "${NOISY_ARGS[@]}" --reps "$REPS" --json "$RAW/noisy.json" \
	>"$RAW/noisy.txt" 2> >(tee "$RAW/logs/noisy.err" >&3) || rc=$?
cat "$RAW/noisy.txt"
((rc == 0)) || log "gpucache-bench noisy exited $rc (see $RAW/logs/noisy.err)"

# --- profile -----------------------------------------------------------------

# profile_when PATTERN NAME: once PATTERN appears in the progress file, take
# a CPU profile of gpucached over the phase that starts.
profile_when() {
	local pattern=$1 name=$2 i
	for ((i = 0; i < (limit + 60) * 10; i++)); do
		grep -q -- "$pattern" "$RAW/logs/profile-run.err" 2>/dev/null && break
		kill -0 "$PROF_PID" 2>/dev/null || return 0
		sleep 0.1
	done
	curl -fsS -H "Authorization: Bearer $(cat "$TMP/ops.secret")" \
		"http://127.0.0.1:$ADMIN/debug/pprof/profile?seconds=$DUR_S" -o "$RAW/profiles/$name.pprof" ||
		log "profile $name failed"
}
if [[ $PROFILE == 1 ]]; then
	# One window per phase, so that the progress says when each starts: rep
	# 1 runs alone then flood, rep 2 flood then alone.
	log "profile run: 2 reps; CPU profiles of the daemon in one flood and one alone phase"
	"${RUN_CLIENT[@]}" "${NOISY_ARGS[@]}" --slice 0 --reps 2 --json "$RAW/profiles/profile-run.json" \
		>"$RAW/profiles/profile-run.txt" 2>"$RAW/logs/profile-run.err" 3>&- &
	PROF_PID=$!
	PIDS+=("$PROF_PID")
	profile_when "rep 1/2 flood phase starts" flood
	profile_when "rep 2/2 alone phase starts" alone
	wait "$PROF_PID" || log "profile run failed (see $RAW/logs/profile-run.err)"
	for p in flood alone; do
		[[ -s $RAW/profiles/$p.pprof ]] || continue
		go tool pprof -top -nodecount=40 "$BIN/gpucached" "$RAW/profiles/$p.pprof" >"$RAW/profiles/$p-top.txt" 2>/dev/null || true
		log "profile $p: $RAW/profiles/$p-top.txt"
	done
fi

stop_pid "$GPC_PID"
log "done: $RAW"
exit "$rc"
