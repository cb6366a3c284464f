#!/usr/bin/env bash
# bench/gen-traces.sh — writes the standard spread of generated Mooncake
# traces (issue 18) to DIR, one per shape plus two arrival variants, and
# their statistics to DIR/stats.txt. Traces are not committed: this script
# is the record; the same REQUESTS and SEED write the same bytes.
#
# Usage:
#   bench/gen-traces.sh DIR
#   REQUESTS=20000 SEED=7 bench/gen-traces.sh DIR
#
# Environment:
#   REQUESTS  requests per trace; default 15000
#   SEED      random seed; default 1
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
REQUESTS=${REQUESTS:-15000}
SEED=${SEED:-1}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)

BIN=$(mktemp -d)
trap 'rm -rf "$BIN"' EXIT
(cd "$ROOT" && go build -o "$BIN/gpucache-bench" ./cmd/gpucache-bench)

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
for t in "${TRACES[@]}"; do
	read -r name flags <<<"$t"
	log "$name: gen-trace $flags --requests $REQUESTS --seed $SEED"
	# shellcheck disable=SC2086 # flags are word-split on purpose
	line=$("$BIN/gpucache-bench" gen-trace $flags --requests "$REQUESTS" --seed "$SEED" --out "$DIR/$name.jsonl")
	echo "trace=$name $line" | tee -a "$DIR/stats.txt"
done
log "wrote ${#TRACES[@]} traces to $DIR"
