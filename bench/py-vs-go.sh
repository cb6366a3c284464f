#!/usr/bin/env bash
# bench/py-vs-go.sh — 1 MiB GET throughput of the Python client
# (python -m gpucache.bench, get_into with recv_into) against the Go client
# (`gpucache-bench bench --op get --batch 1`), both against the same gpucached,
# with 1 and 8 threads/connections, alternating REPS times (the Python
# client's target: >= 70% of Go's throughput); then the SGLang backend's
# batch_get_v1 of 128 pages of 256 KiB (python -m gpucache.demo.bench_pages).
#
# Usage:
#   bench/py-vs-go.sh                       # 3 repetitions of 5 s per case
#   REPS=1 DURATION=2 bench/py-vs-go.sh     # smoke
#
# OUT (default bench/results) receives py-vs-go-<stamp>/: every run's JSON
# (go.N.json from gpucache-bench, py.N.json from gpucache.bench,
# pages.N.json from bench_pages) and summary.md, the table printed.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS="${REPS:-3}"
DURATION="${DURATION:-5}"
SIZE="${SIZE:-1MiB}"
THREADS="${THREADS:-1,8}"
PY="${PYTHON:-/usr/bin/python3}"
OUT="${OUT:-bench/results}"
raw="$OUT/py-vs-go-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$raw"
work="$(mktemp -d)"
trap 'kill "$dpid" 2>/dev/null || true; wait "$dpid" 2>/dev/null || true; rm -rf "$work"' EXIT

go build -o "$work/gpucached" ./cmd/gpucached
go build -o "$work/gpucache-bench" ./tools/cmd/gpucache-bench
"$work/gpucached" --listen 127.0.0.1:0 --admin-listen off --cold-store off --hot-capacity 2GiB 2>"$work/d.log" &
dpid=$!
for _ in $(seq 1 200); do
	addr="$(sed -n 's/.*msg="gpucached serving" data=\([^ ]*\).*/\1/p' "$work/d.log" | head -1)"
	[ -n "$addr" ] && break
	sleep 0.05
done
[ -n "$addr" ] || { cat "$work/d.log"; exit 1; }
echo "gpucached at $addr; $(nproc) CPUs; $(date -u +%F); size $SIZE; threads $THREADS; ${DURATION}s per case; $REPS reps" | tee "$raw/summary.md"
for r in $(seq 1 "$REPS"); do
	"$work/gpucache-bench" bench --addr "$addr" --op get --sizes "$SIZE" --conns "$THREADS" --duration "${DURATION}s" \
		--keys 64 --json "$work/go.$r.json" >/dev/null
	PYTHONPATH=python "$PY" -m gpucache.bench --addr "$addr" --size "$SIZE" --threads "$THREADS" \
		--duration "$DURATION" --json "$work/py.$r.json" >/dev/null
	# The SGLang backend's zero-copy read: 128 pages of 256 KiB per
	# batch_get_v1 (needs torch), against the same daemon.
	if "$PY" -c 'import torch' 2>/dev/null; then
		PYTHONPATH=python "$PY" -m gpucache.demo.bench_pages --addr "$addr" --pages 128 --json "$work/pages.$r.json" >/dev/null
	fi
done
{
"$PY" - "$work" "$REPS" <<'PYEOF'
import json, statistics, sys
work, reps = sys.argv[1], int(sys.argv[2])
go, py = {}, {}
for r in range(1, reps + 1):
    g = json.load(open("%s/go.%d.json" % (work, r)))
    for c in g["cases"]:
        go.setdefault(int(c["conns"]), []).append(c["bytes"] / c["seconds"] / 1e9)
    for c in json.load(open("%s/py.%d.json" % (work, r))):
        py.setdefault(c["threads"], []).append(c["gb_per_s"])
print("| threads | Go client GB/s (median) | Python client GB/s (median) | Python / Go |")
print("|---:|---:|---:|---:|")
for t in sorted(py):
    gm, pm = statistics.median(go.get(t, [float("nan")])), statistics.median(py[t])
    print("| %d | %.3f | %.3f | %.0f%% |" % (t, gm, pm, 100 * pm / gm))
import os
pages = [json.load(open("%s/pages.%d.json" % (work, r))) for r in range(1, reps + 1)
         if os.path.exists("%s/pages.%d.json" % (work, r))]
if pages:
    print()
    print("batch_get_v1 (gpucache.sglang, %d pages of %d KiB): median %.2f GB/s over %d runs (each the median of %d reads)" % (
        pages[0]["pages"], pages[0]["page_bytes"] >> 10, statistics.median(p["gb_per_s"] for p in pages), len(pages), pages[0]["reps"]))
PYEOF
} | tee -a "$raw/summary.md"
cp "$work"/*.json "$raw/"
echo "raw JSON and summary in $raw"
