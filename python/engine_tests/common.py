"""What the engine tests share: the seeded ci model and prompt, a real
gpucached, and the connector's per-process counters."""

import json
import os
import random
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PYROOT = os.path.dirname(HERE)
for _p in (PYROOT, os.path.join(PYROOT, "tests")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

try:
    import vllm  # noqa: F401
    HAVE_VLLM = True
except ImportError:  # the engine tests skip: run them with scripts/engines-env's python
    HAVE_VLLM = False

PROMPT_TOKENS = 2048
BLOCK = 32  # vLLM's CPU attention takes block sizes that are multiples of 32


RUN = r"""
import json, sys
def main():
    from vllm import LLM, SamplingParams
    args = json.loads(sys.argv[1])
    kw = dict(model=args["model"], enforce_eager=True, max_model_len=4096, block_size=%d,
              kv_cache_memory_bytes=64 << 20, dtype="bfloat16", seed=0, disable_log_stats=False)
    if args.get("connector"):
        kw["kv_transfer_config"] = {"kv_connector": "GpucacheConnector",
                                    "kv_connector_module_path": "gpucache.vllm_connector",
                                    "kv_role": "kv_both", "kv_connector_extra_config": args["connector"]}
    elif args.get("kv_transfer"):
        kw["kv_transfer_config"] = args["kv_transfer"]
    llm = LLM(**kw)
    if args.get("go_fifo"):  # a barrier: the test says when to start
        with open(args["go_fifo"]) as f:
            f.readline()
    prompt = {"prompt_token_ids": args["prompt"]}
    if args.get("salt"):
        prompt["cache_salt"] = args["salt"]
    out = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=16))
    metrics = {}
    for m in llm.get_metrics():
        if m.name.startswith("vllm:external_prefix_cache") or m.name.startswith("vllm:prefix_cache"):
            metrics[m.name] = metrics.get(m.name, 0) + getattr(m, "value", 0)
    print("RESULT " + json.dumps({"tokens": list(out[0].outputs[0].token_ids), "metrics": metrics}), flush=True)
if __name__ == "__main__":
    main()
""" % BLOCK


def start_engine(model, prompt, connector=None, salt=None, go_fifo=None, kv_transfer=None):
    """One vLLM engine process serving prompt (16 greedy tokens): with
    connector, gpucache's native connector with that extra config; with
    kv_transfer, that kv_transfer_config as it is."""
    args = {"model": model, "prompt": prompt, "connector": connector, "salt": salt, "go_fifo": go_fifo,
            "kv_transfer": kv_transfer}
    env = dict(os.environ, PYTHONPATH=PYROOT, HF_HUB_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1",
               LMCACHE_TRACK_USAGE="false", LMCACHE_DISABLE_BANNER="1")
    return subprocess.Popen([sys.executable, "-c", RUN, json.dumps(args)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def engine_result(p):
    out, err = p.communicate(timeout=1800)
    for line in out.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):]), err + out  # vLLM logs to both
    raise AssertionError("vLLM engine run failed (rc %d):\n%s" % (p.returncode, err[-6000:]))


def run_engine(model, prompt, connector=None, salt=None, kv_transfer=None):
    return engine_result(start_engine(model, prompt, connector, salt, kv_transfer=kv_transfer))


def setup_model(cls, prompt_tokens=0, prompt_seed=7, daemon=False, unix=False):
    """On a test class: cls.tmp (a temporary directory), cls.model (the
    seeded ci model written in it), cls.prompt (prompt_tokens seeded token
    ids) and, with daemon, cls.daemon (a real gpucached; with unix, also on
    a Unix socket, cls.daemon.unix_addr). Returns the model's summary. Undo
    with teardown_model."""
    from gpucache.demo import tiny_model
    cls.tmp = tempfile.TemporaryDirectory()
    cls.model = os.path.join(cls.tmp.name, "tiny")
    summary = tiny_model.write(cls.model, "ci", seed=0)
    rng = random.Random(prompt_seed)
    cls.prompt = [rng.randrange(0, 256) for _ in range(prompt_tokens)]
    cls.daemon = None
    if daemon:
        from gpucached import Daemon
        cls.daemon = Daemon.start(unix=unix)
    return summary


def teardown_model(cls):
    if getattr(cls, "daemon", None) is not None:
        cls.daemon.stop()
    cls.tmp.cleanup()


def stats_by_process(path):
    """The counters of each process of one engine run, by process
    ("scheduler0", "worker0", "worker1", ...): the connector's stats_file
    is path."""
    out = {}
    d, base = os.path.dirname(path), os.path.basename(path)
    for name in os.listdir(d):
        if name.startswith(base + ".") and not name.endswith(".tmp"):
            with open(os.path.join(d, name)) as f:
                out[name[len(base) + 1:]] = json.load(f)
    return out


def read_stats(path):
    """The counters of every process of one engine run, summed."""
    total = {}
    for counts in stats_by_process(path).values():
        for k, v in counts.items():
            total[k] = total.get(k, 0) + v
    return total
