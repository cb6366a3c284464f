#!/usr/bin/env bash
# bench/gen-traces.sh — writes the standard spread of generated Mooncake
# traces (tools/internal/workload) to DIR, one per shape plus two arrival variants, and
# their statistics to DIR/stats.txt. Traces are not committed: this script
# is the record; the same REQUESTS and SEED write the same bytes.
#
# Usage:
#   bench/gen-traces.sh DIR
#   REQUESTS=20000 SEED=7 bench/gen-traces.sh DIR
#   SPREAD=busy bench/gen-traces.sh DIR
#
# Environment:
#   REQUESTS  requests per trace; default 15000 (busy: 60000)
#   SEED      random seed; default 1
#   SPREAD    standard (the default), busy, or all (both)
#
# The busy spread is the same shapes at 10x their default session rate
# (ten times the users, the same per-user behaviour), written as
# busy-NAME.jsonl. The default rates keep about 60-350 sessions live at
# once; a fleet serving thousands of users keeps thousands, and the
# busy traces hold about 570-2,450 (mean over the trace, measured from
# the generator's session queue, 2026-12-01; oneshot has 1 either way).
# Live sessions x their context is the working set a hot tier must hold,
# so the busy traces need a larger share of their unique blocks than the
# standard ones, which LRU holds almost whole by 5% on agent, mix and
# system. 60000 requests span 400-1,500 s at those rates, a few session
# lifetimes. The factor was chosen by that count, not by running a policy.
#
# Traces written (gpucache-bench gen-trace flags):
#   chat.jsonl          --shape chat
#   system.jsonl        --shape system
#   agent.jsonl         --shape agent
#   rag.jsonl           --shape rag
#   oneshot.jsonl       --shape oneshot
#   mix.jsonl           --shape mix
#   mix-diurnal.jsonl   --shape mix --arrival diurnal
#   chat-bursty.jsonl   --shape chat --arrival bursty
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$ROOT/bench/log.sh" gen-traces

[[ $# == 1 ]] || die "usage: bench/gen-traces.sh DIR"
DIR=$1
SEED=${SEED:-1}
SPREAD=${SPREAD:-standard}
case $SPREAD in standard | busy | all) ;; *) die "SPREAD=$SPREAD: want standard, busy or all" ;; esac
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)

BIN=$(mktemp -d)
trap 'rm -rf "$BIN"' EXIT
(cd "$ROOT" && go build -o "$BIN/gpucache-bench" ./tools/cmd/gpucache-bench)

TRACES=(
	"chat --shape chat"
	"system --shape system"
	"agent --shape agent"
	"rag --shape rag"
	"oneshot --shape oneshot"
	"mix --shape mix"
	"mix-diurnal --shape mix --arrival diurnal"
	"chat-bursty --shape chat --arrival bursty"
)
: >"$DIR/stats.txt"
# spread PREFIX REQUESTS RATE_FACTOR: writes every trace of TRACES.
spread() {
	local prefix=$1 requests=$2 factor=$3 t name flags rate line
	for t in "${TRACES[@]}"; do
		read -r name flags <<<"$t"
		rate=()
		if [[ $factor != 1 ]]; then
			# the shape's default rate (mix: the mix's), times factor
			# shellcheck disable=SC2086
			rate=(--rate "$("$BIN/gpucache-bench" gen-trace $flags --print-config |
				python3 -c "import json,sys; print(json.load(sys.stdin)['arrival']['rate']*$factor)")")
		fi
		log "$prefix$name: gen-trace $flags ${rate[*]} --requests $requests --seed $SEED"
		# shellcheck disable=SC2086 # flags are word-split on purpose
		line=$("$BIN/gpucache-bench" gen-trace $flags "${rate[@]}" --requests "$requests" --seed "$SEED" --out "$DIR/$prefix$name.jsonl")
		echo "trace=$prefix$name $line" | tee -a "$DIR/stats.txt"
	done
}
if [[ $SPREAD != busy ]]; then
	spread "" "${REQUESTS:-15000}" 1
fi
if [[ $SPREAD != standard ]]; then
	spread busy- "${REQUESTS:-60000}" 10
fi
log "wrote the $SPREAD spread to $DIR"
