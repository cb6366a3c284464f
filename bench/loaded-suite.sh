#!/usr/bin/env bash
# bench/loaded-suite.sh [RUNS]: the whole test suite, RUNS times (default 3)
# with -race and RUNS times without, while a CPU hog keeps every core busy
# (stress-ng from Debian, installed if missing; a shell loop otherwise).
# Each run's result line, exit code and duration go to stdout and to
# bench/results/loaded-suite-<date>.log. Exits non-zero if any run failed.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/log.sh loaded-suite
. bench/lib.sh
runs=${1:-3}
mkdir -p bench/results
out=bench/results/loaded-suite-$(date -u +%Y%m%dT%H%M%SZ).log
cores=$(nproc)
if ! command -v stress-ng >/dev/null; then
	log "installing stress-ng from Debian"
	{ apt-get update -qq && apt-get install -y -qq stress-ng; } >/dev/null 2>&1 || log "stress-ng unavailable; using a shell loop"
fi
if command -v stress-ng >/dev/null; then
	stress-ng --cpu "$cores" --timeout 0 --quiet &
	PIDS+=($!)
	hog="stress-ng --cpu $cores"
else
	for ((i = 0; i < cores; i++)); do
		bash -c 'while :; do :; done' &
		PIDS+=($!)
	done
	hog="$cores shell loops"
fi
{
	echo "# loaded suite $(date -u +%FT%TZ) on $(nproc) cores, $(awk -F': ' '/model name/{print $2; exit}' /proc/cpuinfo)"
	echo "# hog: $hog; $(go version)"
} | tee "$out"
failed=0
for mode in race norace; do
	for ((i = 1; i <= runs; i++)); do
		start=$(date +%s)
		rc=0
		GPUCACHE_RACE=$([ $mode = race ] && echo 1 || echo 0) ./scripts/test >"$out.$mode.$i" 2>&1 || rc=$?
		line=$(grep '^packages:' "$out.$mode.$i" | tail -1)
		printf '%s run %d: rc=%d %s (%ds)\n' "$mode" "$i" "$rc" "$line" "$(($(date +%s) - start))" | tee -a "$out"
		[ "$rc" -eq 0 ] || {
			failed=1
			grep -E '^(--- FAIL|FAIL)' "$out.$mode.$i" | head -20 | tee -a "$out"
		}
	done
done
exit "$failed"
