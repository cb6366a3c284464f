# bench/lib.sh: process and port helpers shared by the benchmark scripts.
# Source it after log.sh (it uses log and die). It defines PIDS (background pids to
# stop on exit), WORKDIR (a directory removed on exit, set by the caller),
# USED_PORTS (ports free_port never hands out; set it first to add more),
# and installs the EXIT and INT/TERM/HUP traps.
WORKDIR=
PIDS=()
stop_pid() { # stop_pid PID: TERM, wait up to 5s, then KILL; only our own children
	local pid=$1 i
	kill -0 "$pid" 2>/dev/null || return 0
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < 50; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}
FG_PID=
# fg_run CMD...: run CMD in the background and wait for it, so that INT/TERM
# are handled at once (the trap stops it) rather than after it ends.
fg_run() {
	local rc=0
	"$@" 3>&- &
	FG_PID=$!
	wait "$FG_PID" || rc=$?
	FG_PID=
	return "$rc"
}
cleanup() {
	local pid
	[[ -n $FG_PID ]] && stop_pid "$FG_PID"
	FG_PID=
	for pid in "${PIDS[@]}"; do
		stop_pid "$pid"
	done
	PIDS=()
	[[ -n $WORKDIR && -d $WORKDIR ]] && rm -rf "$WORKDIR"
	return 0
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM HUP

USED_PORTS=${USED_PORTS:-" 9400 9401 "}
port_busy() { # port_busy PORT: true if something listens on 127.0.0.1:PORT
	if command -v ss >/dev/null 2>&1; then
		[[ -n $(ss -Htln "sport = :$1" 2>/dev/null) ]]
		return
	fi
	(: </dev/tcp/127.0.0.1/"$1") 2>/dev/null
}
free_port() { # free_port VAR: picks an unused port and stores it in VAR
	local p i
	for ((i = 0; i < 500; i++)); do
		p=$((20000 + RANDOM % 40000))
		[[ $USED_PORTS == *" $p "* ]] && continue
		port_busy "$p" && continue
		USED_PORTS+="$p "
		printf -v "$1" '%s' "$p"
		return 0
	done
	die "no free port found"
}
wait_port() { # wait_port PORT PID SECONDS: wait until PID listens on PORT
	local port=$1 pid=$2 t=$3 i
	for ((i = 0; i < t * 10; i++)); do
		kill -0 "$pid" 2>/dev/null || return 1
		if port_busy "$port"; then
			kill -0 "$pid" 2>/dev/null || return 1
			return 0
		fi
		sleep 0.1
	done
	return 1
}

# machine_info prints the machine lines every benchmark's machine.txt
# starts with (tab-separated name and value); ROOT is the repository.
machine_info() {
	local cpu_model mem_total_kib
	cpu_model=$(awk -F': *' '/^model name/ {print $2; exit}' /proc/cpuinfo 2>/dev/null || true)
	mem_total_kib=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo 2>/dev/null || echo 0)
	printf 'date_utc\t%s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
	printf 'nproc\t%s\n' "$(nproc)"
	printf 'cpu_model\t%s\n' "${cpu_model:-unknown}"
	printf 'kernel\t%s\n' "$(uname -srm)"
	printf 'mem_total\t%s GiB\n' "$((mem_total_kib / 1048576))"
	printf 'go\t%s\n' "$(go version)"
	printf 'gpucache_rev\t%s\n' "$(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown)"
	printf 'loadavg_at_start\t%s\n' "$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)"
}
