"""gpucache.sglang.GpucacheStorage inside SGLang's own engine on the CPU.

Separate SGLang engine processes (sglang 0.5.23, the offline ``sglang.Engine``
with device="cpu", torch_native attention) share one real gpucached through
SGLang's hierarchical cache: --enable-hierarchical-cache with
--hicache-storage-backend dynamic and the gpucache extra config, loaded by
SGLang's own StorageBackendFactory. Engine A serves a 2,048-token prompt and
backs its pages up to gpucache; engine B, a fresh process with empty device
and host caches, serves the same prompt and prefetches the pages from
gpucache. Counted by SGLang itself (the request's
``cached_tokens_details``: tokens from "storage", by "GpucacheStorage") and
by gpucached's STAT; greedy tokens are compared with A's and with an engine
without HiCache. Negative cases: another model_revision, and a stopped
daemon. B runs with --enable-metrics, so SGLang's metrics collector reads
the backend's get_stats().

Two GPU-only pieces of SGLang's HiCache have CPU stand-ins in the engine
processes (engine_tests/sglang_cpu/sitecustomize.py says which and why):
the host pool's cudaHostRegister and the direct device<->host copy
(transfer_kv_direct, from sgl_kernel). The hierarchical cache runs with
--hicache-mem-layout layer_first --hicache-io-backend direct, the one
layout whose copy is a single function.

Synchronization: after generating, each engine asks SGLang's own
flush_cache with a timeout, which answers once the scheduler is idle, its
write-through to the host pool and its storage backups included.
"""

import json
import os
import subprocess
import sys
import unittest

from engine_tests.common import PROMPT_TOKENS, PYROOT, setup_model, teardown_model

try:
    import sglang  # noqa: F401
    HAVE_SGLANG = True
except ImportError:  # run with scripts/engines-env's python
    HAVE_SGLANG = False

PAGE = 16
SHIM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sglang_cpu")

RUN = r"""
import json, sys
def main():
    import sglang
    a = json.loads(sys.argv[1])
    kw = dict(model_path=a["model"], device="cpu", dtype="bfloat16", max_total_tokens=8192, page_size=%d,
              disable_cuda_graph=True, random_seed=0, log_level="info")
    if a.get("storage"):
        kw.update(enable_hierarchical_cache=True, hicache_ratio=2.0, hicache_mem_layout="layer_first",
                  hicache_io_backend="direct", hicache_storage_backend="dynamic",
                  hicache_storage_backend_extra_config=json.dumps(a["storage"]))
    kw.update(a.get("kw") or {})
    llm = sglang.Engine(**kw)
    out = llm.generate(input_ids=[a["prompt"]], sampling_params={"temperature": 0, "max_new_tokens": 16})[0]
    idle = None
    if a.get("storage"):
        # SGLang's own wait: answered once the scheduler is idle, HiCache
        # write-through and storage backups included
        idle = llm.loop.run_until_complete(llm.tokenizer_manager.flush_cache(timeout_s=600)).success
    meta = out["meta_info"]
    print("RESULT " + json.dumps({"tokens": out["output_ids"], "cached_tokens": meta.get("cached_tokens"),
                                  "details": meta.get("cached_tokens_details"), "idle": idle}), flush=True)
    llm.shutdown()
if __name__ == "__main__":
    main()
""" % PAGE


@unittest.skipUnless(HAVE_SGLANG, "SGLang is not installed: run with scripts/engines-env's python")
class SGLangEngineTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        setup_model(cls, PROMPT_TOKENS, daemon=True)
        cls.script = os.path.join(cls.tmp.name, "sglang_run.py")
        with open(cls.script, "w") as f:
            f.write(RUN)
        cls.base = cls.run_engine(None)

    @classmethod
    def tearDownClass(cls):
        teardown_model(cls)

    @classmethod
    def run_engine(cls, storage, **kw):
        args = {"model": cls.model, "prompt": cls.prompt, "storage": storage, "kw": kw}
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([SHIM, PYROOT]), HF_HUB_OFFLINE="1",
                   GPUCACHE_SGLANG_CPU_SHIM="1")
        p = subprocess.run([sys.executable, cls.script, json.dumps(args)], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=1800)
        for line in p.stdout.splitlines():
            if line.startswith("RESULT "):
                return json.loads(line[len("RESULT "):])
        raise AssertionError("SGLang engine run failed (rc %d):\n%s" % (p.returncode, (p.stderr + p.stdout)[-6000:]))

    def storage(self, addr=None, **extra):
        cfg = {"backend_name": "gpucache", "module_path": "gpucache.sglang", "class_name": "GpucacheStorage",
               "interface_v1": 1, "addrs": [addr or self.daemon.addr], "tenant": "default", "timeout": 30.0,
               "model_revision": self.id()}
        cfg.update(extra)
        return cfg

    def stat(self):
        import gpucache
        c = gpucache.Client(addrs=[self.daemon.addr], tenant="default", timeout=30.0)
        try:
            return c.stat()
        finally:
            c.close()

    @staticmethod
    def from_storage(r):
        d = r.get("details") or {}
        return d.get("storage", 0), d.get("storage_backend")

    def test_second_engine_loads_the_prompt_from_gpucache(self):
        s0 = self.stat()
        a = self.run_engine(self.storage())
        s1 = self.stat()
        b = self.run_engine(self.storage(), enable_metrics=True)
        s2 = self.stat()
        pages = PROMPT_TOKENS // PAGE
        blocks = 2 * 2  # a layer_first page: K and V of each of the ci model's 2 layers
        saved = s1["hot_puts"] - s0["hot_puts"]
        hit = s2["blocks_hit"] - s1["blocks_hit"]
        loaded, backend = self.from_storage(b)
        print("\nengine A: %s, gpucached blocks stored %d\nengine B: %s, gpucached blocks hit %d"
              % (a, saved, b, hit), file=sys.stderr)
        self.assertTrue(a["idle"] and b["idle"])
        self.assertEqual(self.from_storage(a)[0], 0)
        self.assertGreaterEqual(saved, pages * blocks)
        self.assertEqual(backend, "GpucacheStorage")
        self.assertEqual(loaded, (PROMPT_TOKENS - 1) // PAGE * PAGE)  # every full page but the one computed
        self.assertEqual(b["cached_tokens"], loaded)
        self.assertEqual(hit, loaded // PAGE * blocks)
        self.assertEqual(s2["hot_puts"], s1["hot_puts"], "B found every page stored already")
        self.assertEqual(a["tokens"], self.base["tokens"])
        self.assertEqual(b["tokens"], a["tokens"])

    def test_another_model_revision_loads_nothing(self):
        self.run_engine(self.storage(model_revision="rev-x"))
        b = self.run_engine(self.storage(model_revision="rev-y"))
        print("\nanother revision: %s" % b, file=sys.stderr)
        self.assertEqual(self.from_storage(b)[0], 0)
        self.assertEqual(b["cached_tokens"], 0)
        self.assertEqual(b["tokens"], self.base["tokens"])

    def test_stopped_daemon_is_a_miss(self):
        from gpucached import Daemon
        d = Daemon.start()
        self.run_engine(self.storage(addr=d.addr))
        d.stop()
        b = self.run_engine(self.storage(addr=d.addr, timeout=2.0))
        print("\ndaemon stopped: %s" % b, file=sys.stderr)
        self.assertEqual(self.from_storage(b)[0], 0)
        self.assertEqual(b["tokens"], self.base["tokens"])
        self.assertTrue(b["idle"])


if __name__ == "__main__":
    unittest.main()
