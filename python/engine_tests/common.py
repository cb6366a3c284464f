"""What the engine tests share: the seeded ci model and prompt, a real
gpucached, and the connector's per-process counters."""

import json
import os
import random
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


def setup_model(cls, prompt_tokens=0, prompt_seed=7, daemon=False):
    """On a test class: cls.tmp (a temporary directory), cls.model (the
    seeded ci model written in it), cls.prompt (prompt_tokens seeded token
    ids) and, with daemon, cls.daemon (a real gpucached). Returns the
    model's summary. Undo with teardown_model."""
    from gpucache.demo import tiny_model
    cls.tmp = tempfile.TemporaryDirectory()
    cls.model = os.path.join(cls.tmp.name, "tiny")
    summary = tiny_model.write(cls.model, "ci", seed=0)
    rng = random.Random(prompt_seed)
    cls.prompt = [rng.randrange(0, 256) for _ in range(prompt_tokens)]
    cls.daemon = None
    if daemon:
        from gpucached import Daemon
        cls.daemon = Daemon.start()
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
