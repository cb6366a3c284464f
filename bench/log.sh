# bench/log.sh NAME: progress logging shared by the benchmark scripts.
# Source it with the script's name: . "$(dirname "$0")/log.sh" compare
# Progress goes to fd 3, a copy of the script's stderr, so that a trap that
# fires inside a redirected call still logs to the terminal.
exec 3>&2
BENCH_NAME=$1
log() { printf '[%s %s] %s\n' "$BENCH_NAME" "$(date -u +%H:%M:%S)" "$*" >&3; }
die() {
	log "error: $*"
	exit 1
}
