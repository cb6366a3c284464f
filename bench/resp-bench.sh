#!/usr/bin/env bash
# bench/resp-bench.sh — one load generator, two servers: redis-benchmark
# (Debian redis-tools) drives a redis-server and gpucached's RESP endpoint
# with the same commands, sizes, connections and key space, and prints a
# markdown table (docs/BENCHMARKS.md records its runs).
#
# Usage:
#   bench/resp-bench.sh                 # 3 repetitions, alternating servers
#   REPS=1 SIZES=64KiB CONNS=1 bench/resp-bench.sh   # smoke
#   PROFILE=1 bench/resp-bench.sh       # also a CPU profile of gpucached under
#                                       # GET 1MiB -c 8 (admin /debug/pprof)
#
# Environment:
#   REPS        repetitions; the table shows medians; default 3. Each repetition
#               runs every case on both servers, the first server alternating
#   SIZES       value sizes; default "64KiB 1MiB 32MiB"
#   CONNS       redis-benchmark -c values; default "1 8"
#   REQS_64KiB, REQS_1MiB, REQS_32MiB   requests per run (-n); defaults
#               20000, 2000, 100. A SET run's key space (-r) is as large as
#               the run, and both servers start it without those keys
#               (FLUSHALL; DEL on gpucached), so most SETs store new values
#   KEYS_64KiB, KEYS_1MiB, KEYS_32MiB   GET key space (-r), the same on both
#               servers; defaults 256, 256, 16. Each key is SET once with
#               redis-cli (and the last one read back) before a GET run, so
#               every GET hits
#   HOT_CAPACITY  gpucached --hot-capacity; default 4GiB (holds every key space)
#   OUT         results directory; default bench/results. The table goes to
#               OUT/resp-bench-<stamp>.md, raw CSV to OUT/resp-bench-<stamp>/
#   PROFILE_SECONDS  length of the PROFILE=1 profile; default 10
#   RESP_PORT   measure an endpoint already listening on 127.0.0.1:RESP_PORT
#               instead of starting gpucached (its admin address, for
#               PROFILE=1, in ADMIN_PORT); the caller prepares its profile
#
# No pipelining (-P 1), persistence off on redis-server (--save '' --appendonly
# no), gpucached with its cold tier off: DRAM against DRAM. Client and servers
# share this host's CPUs; nothing is pinned.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
. "$ROOT/bench/log.sh" resp-bench
. "$ROOT/bench/lib.sh"

REPS=${REPS:-3}
SIZES=${SIZES:-"64KiB 1MiB 32MiB"}
CONNS=${CONNS:-"1 8"}
HOT_CAPACITY=${HOT_CAPACITY:-4GiB}
OUT=${OUT:-$ROOT/bench/results}
PROFILE=${PROFILE:-0}
PROFILE_SECONDS=${PROFILE_SECONDS:-10}

bytes_of() { # bytes_of 64KiB -> 65536
	case $1 in
	*KiB) echo $((${1%KiB} << 10)) ;;
	*MiB) echo $((${1%MiB} << 20)) ;;
	*) echo "$1" ;;
	esac
}
reqs_of() { local v="REQS_$1" d; case $1 in 64KiB) d=20000 ;; 1MiB) d=2000 ;; 32MiB) d=100 ;; *) d=1000 ;; esac; echo "${!v:-$d}"; }
keys_of() { local v="KEYS_$1" d; case $1 in 32MiB) d=16 ;; *) d=256 ;; esac; echo "${!v:-$d}"; }
# The SET runs use a key space as large as the run, so most SETs store a
# new value on both servers.
set_keys_of() { reqs_of "$1"; }

for t in redis-server redis-benchmark redis-cli go; do
	command -v "$t" >/dev/null 2>&1 || die "$t is missing (apt-get install redis-server redis-tools)"
done

stamp=$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$OUT"
RAW="$OUT/resp-bench-$stamp"
mkdir -p "$RAW/logs"
REPORT="$OUT/resp-bench-$stamp.md"
WORKDIR=$(mktemp -d)

if [[ -z ${RESP_PORT:-} ]]; then
	log "building gpucached"
	(cd "$ROOT" && go build -o "$WORKDIR/gpucached" ./cmd/gpucached)
fi

free_port REDIS_PORT
log "redis-server on 127.0.0.1:$REDIS_PORT (persistence off)"
redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no --daemonize no \
	--dir "$WORKDIR" --logfile "" >"$RAW/logs/redis-server.log" 2>&1 3>&- &
REDIS_PID=$!
PIDS+=("$REDIS_PID")
wait_port "$REDIS_PORT" "$REDIS_PID" 10 || die "redis-server did not start (see $RAW/logs/redis-server.log)"

if [[ -n ${RESP_PORT:-} ]]; then
	GPC_RESP=$RESP_PORT
	GPC_ADMIN=${ADMIN_PORT:-}
	log "measuring the endpoint on 127.0.0.1:$GPC_RESP"
else
	free_port GPC_PORT
	free_port GPC_ADMIN
	free_port GPC_RESP
	# Open mode on loopback: the RESP tenant is "default"; its profile accepts
	# any key and any length up to the largest block.
	cat >"$WORKDIR/gpucached.yaml" <<-EOF
	resp_listen: 127.0.0.1:$GPC_RESP
	resp_profile:
	  model: bench/any
	  config_revision: bench
	  tokenizer_revision: bench
	  dtype: bytes
	  key_format: any
	  variable_length: true
	EOF
	log "gpucached on 127.0.0.1:$GPC_PORT, RESP on 127.0.0.1:$GPC_RESP (cold tier off, hot $HOT_CAPACITY)"
	"$WORKDIR/gpucached" --config "$WORKDIR/gpucached.yaml" --listen "127.0.0.1:$GPC_PORT" \
		--admin-listen "127.0.0.1:$GPC_ADMIN" --cold-store off --hot-capacity "$HOT_CAPACITY" \
		--hot-max-class 64MiB --audit-log off >"$RAW/logs/gpucached.log" 2>&1 3>&- &
	GPC_PID=$!
	PIDS+=("$GPC_PID")
	wait_port "$GPC_RESP" "$GPC_PID" 60 || die "gpucached did not start (see $RAW/logs/gpucached.log)"
fi

{
	machine_info
	printf 'redis\t%s\n' "$(redis-server --version)"
	printf 'redis_benchmark\t%s\n' "$(redis-benchmark --version 2>/dev/null || echo unknown)"
	printf 'lscpu\t%s\n' "$(lscpu 2>/dev/null | awk -F': *' '/^Model name|^CPU\(s\)|^Hypervisor vendor|^Thread/ {printf "%s=%s; ", $1, $2}')"
} >"$RAW/machine.txt"

port_of() { [[ $1 == redis ]] && echo "$REDIS_PORT" || echo "$GPC_RESP"; }
pid_of() { [[ $1 == redis ]] && echo "$REDIS_PID" || echo "${GPC_PID:-}"; }

# cpu_ticks PID: the process's user + system CPU time in clock ticks (0
# when it is not ours to read, e.g. RESP_PORT).
cpu_ticks() { [[ -n $1 && -r /proc/$1/stat ]] && awk '{print $14 + $15}' "/proc/$1/stat" || echo 0; }
CLK_TCK=$(getconf CLK_TCK)

# bench_one SERVER SIZE CONNS OP REP: one redis-benchmark run; appends
# "server size conns op rep rps p50 p99 cpu_us_per_req" to RAW/results.tsv
# (the server's own CPU time, user + system, over the run, per request).
bench_one() {
	local server=$1 size=$2 conns=$3 op=$4 rep=$5 csv line t0 t1 cpu
	csv="$RAW/$server-$size-c$conns-$op-r$rep.csv"
	t0=$(cpu_ticks "$(pid_of "$server")")
	redis-benchmark -h 127.0.0.1 -p "$(port_of "$server")" -c "$conns" -P 1 \
		-n "$(reqs_of "$size")" -r "$(if [[ $op == set ]]; then set_keys_of "$size"; else keys_of "$size"; fi)" -d "$(bytes_of "$size")" \
		-t "$op" --csv --precision 3 >"$csv" 2>"$RAW/logs/$server-$size-c$conns-$op-r$rep.err" ||
		die "redis-benchmark against $server failed (see $RAW/logs)"
	t1=$(cpu_ticks "$(pid_of "$server")")
	cpu=$(awk -v d=$((t1 - t0)) -v hz="$CLK_TCK" -v n="$(reqs_of "$size")" 'BEGIN { printf "%.1f", d / hz * 1e6 / n }')
	# "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
	line=$(awk -F'","' -v OP="${op^^}" 'index($1, "\"" OP) == 1 {gsub(/"/, "", $0); print; exit}' "$csv")
	[[ -n $line ]] || die "no $op result in $csv"
	awk -F, -v s="$server" -v z="$size" -v c="$conns" -v o="$op" -v r="$rep" -v cpu="$cpu" \
		'{printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s, z, c, o, r, $2, $5, $7, cpu}' <<<"$line" >>"$RAW/results.tsv"
	log "$server $size c=$conns $op rep $rep: $(cut -f6- <<<"$(tail -1 "$RAW/results.tsv")" | tr '\t' ' ') (rps p50 p99 ms, server CPU us/req)"
}

# The key names redis-benchmark uses: key:__rand_int__ with -r N is
# key:000000000000 .. key:<N-1, 12 digits>.
keyname() { printf 'key:%012d' "$1"; }

# reset SERVER COUNT: the first COUNT keys are absent, so the SET run that
# follows stores new values (gpucached keeps chunks immutable: a SET of a
# key that exists leaves it alone, so without this its SETs would measure
# acknowledged re-puts while Redis overwrites).
reset() {
	if [[ $1 == redis ]]; then
		redis-cli -h 127.0.0.1 -p "$REDIS_PORT" FLUSHALL >/dev/null
		return
	fi
	awk -v n="$2" 'BEGIN { for (i = 0; i < n; i += 100) { printf "DEL"; for (j = i; j < i + 100 && j < n; j++) printf " key:%012d", j; printf "\n" } }' |
		redis-cli -h 127.0.0.1 -p "$GPC_RESP" >/dev/null
}

# prefill SERVER SIZE: every key of the GET key space holds a SIZE value
# (deterministically, one redis-cli SET each), so every GET hits.
prefill() {
	local keys i val="$WORKDIR/value-$2"
	keys=$(keys_of "$2")
	[[ -s $val ]] || head -c "$(bytes_of "$2")" /dev/zero | tr '\0' x >"$val"
	for ((i = 0; i < keys; i++)); do
		redis-cli -h 127.0.0.1 -p "$(port_of "$1")" -x SET "$(keyname "$i")" <"$val" >/dev/null ||
			die "prefill of $1 failed"
	done
	# Check it: the last key holds SIZE bytes (redis-cli adds a newline).
	local got
	got=$(redis-cli -h 127.0.0.1 -p "$(port_of "$1")" GET "$(keyname $((keys - 1)))" | wc -c)
	[[ $got == "$(($(bytes_of "$2") + 1))" ]] || die "prefill of $1 $2: GET returned $((got - 1)) bytes"
}

: >"$RAW/results.tsv"
for ((rep = 1; rep <= REPS; rep++)); do
	order="redis gpucache"
	((rep % 2 == 0)) && order="gpucache redis"
	for size in $SIZES; do
		for conns in $CONNS; do
			for server in $order; do
				reset "$server" "$(set_keys_of "$size")"
				bench_one "$server" "$size" "$conns" set "$rep"
			done
			for server in $order; do
				prefill "$server" "$size"
				bench_one "$server" "$size" "$conns" get "$rep"
			done
		done
	done
done

if [[ $PROFILE == 1 ]]; then
	log "CPU profile of gpucached: GET 1MiB -c 8 for ${PROFILE_SECONDS}s"
	curl -sf -o "$RAW/gpucached-get-1MiB-c8.pprof" \
		"http://127.0.0.1:$GPC_ADMIN/debug/pprof/profile?seconds=$PROFILE_SECONDS" 3>&- &
	curl_pid=$!
	redis-benchmark -h 127.0.0.1 -p "$GPC_RESP" -c 8 -P 1 -n $((2000 * PROFILE_SECONDS)) -r 256 \
		-d 1048576 -t get -q >/dev/null 2>&1 || true
	wait "$curl_pid" || log "profile download failed"
	[[ -s $RAW/gpucached-get-1MiB-c8.pprof ]] &&
		(cd "$ROOT" && go tool pprof -top -nodecount=30 "$WORKDIR/gpucached" "$RAW/gpucached-get-1MiB-c8.pprof" \
			>"$RAW/gpucached-get-1MiB-c8.top.txt" 2>&1) &&
		log "profile: $RAW/gpucached-get-1MiB-c8.top.txt"
fi

# The table: medians over the repetitions.
{
	echo "| size | conns | op | redis rps | gpucache rps | ratio | redis p50 / p99 ms | gpucache p50 / p99 ms | server CPU µs/req redis / gpucache |"
	echo "|---|---:|---|---:|---:|---:|---:|---:|---:|"
	awk -F'\t' -v sizes="$SIZES" -v conns="$CONNS" '
	function median(list,    a, n, i, j, t) {
		n = split(list, a, " ")
		for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
		return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
	}
	{ k = $2 SUBSEP $3 SUBSEP $4 SUBSEP $1; rps[k] = rps[k] " " $6; p50[k] = p50[k] " " $7; p99[k] = p99[k] " " $8; cpu[k] = cpu[k] " " $9 }
	END {
		ns = split(sizes, S, " "); nc = split(conns, C, " ")
		for (i = 1; i <= ns; i++) for (j = 1; j <= nc; j++) for (o = 1; o <= 2; o++) {
			op = o == 1 ? "set" : "get"
			r = S[i] SUBSEP C[j] SUBSEP op SUBSEP "redis"; g = S[i] SUBSEP C[j] SUBSEP op SUBSEP "gpucache"
			if (!(r in rps) || !(g in rps)) continue
			rr = median(rps[r]); gr = median(rps[g])
			printf "| %s | %s | %s | %.0f | %.0f | %.2f | %.3f / %.3f | %.3f / %.3f | %.1f / %.1f |\n", S[i], C[j], toupper(op), rr, gr, (rr > 0 ? gr / rr : 0), median(p50[r]), median(p99[r]), median(p50[g]), median(p99[g]), median(cpu[r]), median(cpu[g])
		}
	}' "$RAW/results.tsv"
} >"$REPORT"
{
	echo
	echo "Machine and versions:"
	echo
	sed 's/^/    /' "$RAW/machine.txt"
	echo
	echo "redis-benchmark -P 1, $REPS repetitions (medians), servers alternating; requests per run: 64KiB $(reqs_of 64KiB), 1MiB $(reqs_of 1MiB), 32MiB $(reqs_of 32MiB); GET key space (-r): $(keys_of 64KiB), $(keys_of 1MiB), $(keys_of 32MiB), every key prefilled; SET key space = requests per run, absent at the start of each SET run."
} >>"$REPORT"
cat "$REPORT"
log "report: $REPORT (raw: $RAW)"
