#!/usr/bin/env bash
# bench/flash-compare.sh — the flash tier against fio on the same file system,
# in one run (issue 28, ADR 0027): reads of 1 MiB and 32 MiB blocks at 1 and 8
# connections against fio's sequential O_DIRECT read of the same block size
# and jobs, the cost of publishing a flash hit into DRAM, and PUT with and
# without the flash tier behind DRAM.
#
# Rows:
#   fio        fio --rw=read --direct=1 --ioengine=psync --bs=SIZE, 1 job over a
#              2 GiB file, 8 jobs over 256 MiB each of it (the limit)
#   tier       go test -bench BenchmarkFlashRead/auto and
#              BenchmarkFlashRefillPublish/auto: one pread into an aligned slot
#              and its checksum; the same through a hot-tier slot, published
#              and pinned (one reader: the 1-connection case)
#   get        gpucache-bench bench --op get through gpucached with a 256 MiB
#              DRAM tier over a 2 GiB working set on flash (cold tier off): most
#              GETs miss DRAM and are read from flash (STAT flash_hits says how many)
#   put        gpucache-bench bench --op put, 1 MiB, 8 connections, through a
#              256 MiB DRAM tier: with the flash tier behind it and without,
#              with no cold tier and with the fs cold tier (the default), interleaved
#              REPS times (flash_declined_full says whether the writer kept up)
#
# Usage: bench/flash-compare.sh            (DIR defaults to ./.cache/flash-bench: a real disk, not tmpfs)
# Environment: DIR, DURATION (5), REPS (3), OUT (bench/results)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
. bench/log.sh flash-compare
USED_PORTS=" 9400 9401 "
. bench/lib.sh

DIR=${DIR:-$PWD/.cache/flash-bench}
DUR=${DURATION:-5}
REPS=${REPS:-3}
OUT=${OUT:-bench/results}
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
RAW=$OUT/flash-$STAMP
mkdir -p "$RAW"/{fio,tier,get,put,logs} "$DIR"
command -v fio >/dev/null || die "fio is not installed (apt-get install fio)"
WORKDIR=$(mktemp -d "${TMPDIR:-/tmp}/gpucache-flash.XXXXXX")
BIN=$WORKDIR
log "building gpucached and gpucache-bench; raw files in $RAW"
go build -o "$BIN/gpucached" ./cmd/gpucached
go build -o "$BIN/gpucache-bench" ./tools/cmd/gpucache-bench
{
	machine_info
	printf 'dir\t%s\n' "$DIR"
	printf 'fs\t%s (%s)\n' "$(stat -f -c %T "$DIR")" "$(df --output=source "$DIR" | tail -1)"
	printf 'fio\t%s\n' "$(fio --version)"
	printf 'duration_s\t%s\nreps\t%s\n' "$DUR" "$REPS"
	printf 'gpu\tnone: every figure is CPU only\n'
} >"$RAW/machine.txt"

# --- fio: the limit ------------------------------------------------------------
FIOFILE=$DIR/fio.dat
log "fio: laying out a 2 GiB file"
fio --name=layout --filename="$FIOFILE" --size=2G --rw=write --bs=4M --direct=1 --ioengine=psync >/dev/null
for bs in 1M 32M; do
	for jobs in 1 8; do
		size=2G off=0
		[[ $jobs == 8 ]] && size=256M off=256M
		log "fio read bs=$bs jobs=$jobs"
		fio --name=read --filename="$FIOFILE" --rw=read --direct=1 --ioengine=psync --bs=$bs --numjobs=$jobs \
			--size=$size --offset_increment=$off --time_based --runtime="$DUR" --group_reporting \
			--output-format=json >"$RAW/fio/read-$bs-$jobs.json"
	done
done
log "fio write bs=1M jobs=1 (the disk's write rate, against the PUT rate)"
fio --name=write --filename="$FIOFILE" --rw=write --direct=1 --ioengine=psync --bs=1M --size=2G --time_based --runtime="$DUR" \
	--output-format=json >"$RAW/fio/write-1M-1.json"
rm -f "$FIOFILE"

# --- the tier: one reader ----------------------------------------------------------
log "go benchmarks: BenchmarkFlashRead, BenchmarkFlashRefillPublish (auto: O_DIRECT here)"
TMPDIR=$DIR go test -run '^$' -bench 'BenchmarkFlash(Read|RefillPublish)$/auto|BenchmarkFlashPublish$' -benchtime=1s -count=$((REPS + 2)) ./internal/flash/ \
	>"$RAW/tier/bench.txt" 2>&1 || log "the go benchmarks failed (see tier/bench.txt)"

# --- gpucached ---------------------------------------------------------------------
GPC_PORT=
start_gpucached() { # start_gpucached NAME ARGS...: a node on a fresh flash dir
	local name=$1
	shift
	free_port GPC_PORT
	rm -rf "$DIR/gpucached"
	"$BIN/gpucached" --listen "127.0.0.1:$GPC_PORT" --admin-listen off --cold-store off --hot-capacity 256MiB \
		--hot-max-class 32MiB --tenant-hold-bytes 256MiB --max-frame 40MiB --drain-timeout 2s "$@" >"$RAW/logs/gpucached-$name.log" 2>&1 3>&- &
	GPC_PID=$!
	PIDS+=("$GPC_PID")
	wait_port "$GPC_PORT" "$GPC_PID" 60 || die "gpucached did not start (see logs/gpucached-$name.log)"
}
FLASH=(--flash-dir "$DIR/gpucached" --flash-capacity 6GiB --flash-segment 256MiB --flash-write-buffer 1GiB)

for size in 1MiB 32MiB; do
	keys=$((2048 / ${size%MiB}))
	start_gpucached "get-$size" "${FLASH[@]}"
	log "get $size: $keys keys (2 GiB) written, then GETs at 1 and 8 connections"
	"$BIN/gpucache-bench" bench --addr "127.0.0.1:$GPC_PORT" --op get --sizes "$size" --conns 1,8 --keys "$keys" \
		--duration "${DUR}s" --json "$RAW/get/get-$size.json" >"$RAW/get/get-$size.txt" 2>&1
	stop_pid "$GPC_PID"
done

for ((r = 1; r <= REPS; r++)); do
	for mode in flash none coldflash cold; do
		args=()
		case $mode in
		flash) args=("${FLASH[@]}") ;;
		coldflash) args=("${FLASH[@]}" --cold-store fs --cold-dir "$DIR/cold") ;;
		cold) args=(--cold-store fs --cold-dir "$DIR/cold") ;;
		esac
		rm -rf "$DIR/cold"
		start_gpucached "put-$mode-$r" "${args[@]}"
		log "put 1MiB 8 conns, $mode behind DRAM, rep $r"
		"$BIN/gpucache-bench" bench --addr "127.0.0.1:$GPC_PORT" --op put --sizes 1MiB --conns 8 --keys 64 \
			--duration "${DUR}s" --json "$RAW/put/put-$mode-$r.json" >"$RAW/put/put-$mode-$r.txt" 2>&1
		stop_pid "$GPC_PID"
	done
done

python3 bench/flash_report.py "$RAW" | tee "$RAW/report.md"
log "report: $RAW/report.md"
