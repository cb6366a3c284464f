#!/usr/bin/env bash
# bench/soak.sh — the robustness soak: three cluster nodes (etcd, S3 from
# versitygw) and an open-mode node under a mixed, checked load while faults
# run on a schedule (kill -9, etcd, S3, full cold disk, partition from etcd,
# the daemon's failpoints). Prints the report; exits 1 if a check failed.
#
# Usage:
#   bench/soak.sh                  # 5 minutes, default schedule
#   QUICK=1 bench/soak.sh          # CI-sized: one cycle of every fault on a
#                                  # compressed schedule (about 90 s), paced
#   LONG=1 bench/soak.sh           # the long run: at least 10,000,000 checked
#                                  # client calls (OPS), bounded by 6 h
#
# Environment (each maps to a gpucache-bench soak flag; see gpucache-bench soak -h):
#   DURATION  load time (Go duration); default 5m (QUICK: 4m bound, LONG: 6h bound)
#   OPS       stop after this many client calls; default 0 (LONG: 10000000)
#   CYCLES    stop after this many cycles of FAULTS; default 0 (QUICK: 1)
#   WORKERS   load goroutines; default 8 (QUICK: 3)
#   RATE      operations per second cap, 0 unpaced; default 0 (QUICK: 250)
#   FAULTS    fault cycle; default all
#   WARMUP, HOLD, RECOVER, SETTLE   schedule; defaults 20s, 10s, 60s, 10s
#                                   (QUICK: 3s, 2s, 45s, 1s)
#   SCAN_SHARE  share of operations on chains that overflow DRAM; default 0.2
#               (LONG: 0.1, which halves what the cold tiers must hold)
#   HOT_CAPACITY  each node's hot tier; default 32MiB (QUICK: 16MiB)
#   OUT       results directory; default bench/results. The run's directory
#             is OUT/soak-<stamp>/ (report.json, rss.csv, soak.log, the nodes'
#             logs and configs, machine.txt, command.txt)
#   EXTRA     extra flags for gpucache-bench soak (word-split)
#
# Needs Linux. Run as root for the partition (a network namespace, ip(8))
# and the full disk (a tmpfs); otherwise those two faults are NOT_RUN with
# the reason. versitygw is built once by scripts/s3-server install. The S3,
# etcd and tmpfs data are removed at the end (logs and the report stay);
# a long run writes a few GB to S3 on disk and up to 4 GiB into the tmpfs.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

# shellcheck source=bench/log.sh
. "$(dirname "$0")/log.sh" soak
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"

QUICK=${QUICK:-0}
LONG=${LONG:-0}
[[ $QUICK == 0 || $QUICK == 1 ]] || die "QUICK must be 0 or 1, got '$QUICK'"
[[ $LONG == 0 || $LONG == 1 ]] || die "LONG must be 0 or 1, got '$LONG'"
[[ $QUICK == 1 && $LONG == 1 ]] && die "QUICK and LONG exclude each other"
if [[ $QUICK == 1 ]]; then
	DURATION=${DURATION:-4m} CYCLES=${CYCLES:-1} WORKERS=${WORKERS:-3} RATE=${RATE:-250}
	WARMUP=${WARMUP:-3s} HOLD=${HOLD:-2s} RECOVER=${RECOVER:-45s} SETTLE=${SETTLE:-1s} HOT_CAPACITY=${HOT_CAPACITY:-16MiB}
elif [[ $LONG == 1 ]]; then
	DURATION=${DURATION:-6h} OPS=${OPS:-10000000} SCAN_SHARE=${SCAN_SHARE:-0.1}
fi
DURATION=${DURATION:-5m}
OPS=${OPS:-0}
CYCLES=${CYCLES:-0}
WORKERS=${WORKERS:-8}
RATE=${RATE:-0}
FAULTS=${FAULTS:-all}
WARMUP=${WARMUP:-20s}
HOLD=${HOLD:-10s}
RECOVER=${RECOVER:-60s}
SETTLE=${SETTLE:-10s}
SCAN_SHARE=${SCAN_SHARE:-0.2}
HOT_CAPACITY=${HOT_CAPACITY:-32MiB}
EXTRA=${EXTRA:-}

[[ $OPS =~ ^[0-9]+$ ]] || die "OPS must be a whole number, got '$OPS'"
[[ $CYCLES =~ ^[0-9]+$ ]] || die "CYCLES must be a whole number, got '$CYCLES'"
[[ $WORKERS =~ ^[1-9][0-9]*$ ]] || die "WORKERS must be a positive integer, got '$WORKERS'"
for d in DURATION WARMUP HOLD RECOVER SETTLE; do
	[[ ${!d} =~ ^[0-9]+(ms|s|m|h)$ ]] || die "$d must be whole ms, s, m or h (e.g. 10s), got '${!d}'"
done
command -v go >/dev/null 2>&1 || die "go is not on PATH"
[[ $(uname -s) == Linux ]] || die "the soak needs Linux"

STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUT=${OUT:-$ROOT/bench/results}
RUN=$OUT/soak-$STAMP
mkdir -p "$RUN"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/gpucache-soak.XXXXXX")
WORKDIR=$TMP
BIN=$TMP/bin
mkdir -p "$BIN"

log "building gpucached and gpucache"
go build -o "$BIN/gpucached" ./cmd/gpucached
go build -o "$BIN/gpucache-bench" ./tools/cmd/gpucache-bench
VGW=${GPUCACHE_VERSITYGW:-}
if [[ -z $VGW ]]; then
	log "versitygw: scripts/s3-server install (builds it once)"
	VGW=$(scripts/s3-server install)
fi
[[ -x $VGW ]] || die "versitygw not executable: $VGW"
if [[ $(id -u) != 0 ]]; then
	log "not root: the partition and full-disk faults will be NOT_RUN"
fi
machine_info >"$RUN/machine.txt"

ARGS=(soak --gpucached "$BIN/gpucached" --versitygw "$VGW" --dir "$RUN"
	--duration "$DURATION" --ops "$OPS" --cycles "$CYCLES" --workers "$WORKERS" --rate "$RATE"
	--faults "$FAULTS" --warmup "$WARMUP" --hold "$HOLD" --recover "$RECOVER" --settle "$SETTLE"
	--scan-share "$SCAN_SHARE" --hot-capacity "$HOT_CAPACITY")
# shellcheck disable=SC2206
[[ -n $EXTRA ]] && ARGS+=($EXTRA)
printf 'gpucache %s\n' "${ARGS[*]//$TMP/<tmp>}" >"$RUN/command.txt"
log "gpucache ${ARGS[*]//$TMP/<tmp>}"
rc=0
fg_run "$BIN/gpucache-bench" "${ARGS[@]}" >"$RUN/report.txt" 2> >(tee "$RUN/progress.txt" >&3) || rc=$?
cat "$RUN/report.txt"
((rc == 0)) || log "gpucache-bench soak exited $rc"
log "done: $RUN"
exit "$rc"
