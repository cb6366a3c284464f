"""The prefix_reuse scenario end to end, across spawned engine processes.

By default the engines share the demo's local page store (a stand-in with
the SGLang backend's methods). With GPUCACHE_DEMO_STORE=gpucache and
GPUCACHE_DEMO_EXTRA_A / GPUCACHE_DEMO_EXTRA_B (backend extra_config JSON of
two tenants of one running gpucached) it runs against gpucache.sglang.
The prompt is shorter than the CLI's default (2,048 tokens) to keep a
2-core machine's run short; the checks are the same.
"""

import json
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

try:
    import torch  # noqa: F401
except ImportError:
    torch = None

STORE = os.environ.get("GPUCACHE_DEMO_STORE", "local")


@unittest.skipIf(torch is None, "torch is not installed")
class PrefixReuseTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from gpucache.demo import prefix_reuse

        opts = prefix_reuse.Options(prompt=320, shared=256, new=64, decode=8, runs=1, sf_prompt=160, store=STORE)
        if STORE == "gpucache":
            opts.extra_config = json.loads(os.environ["GPUCACHE_DEMO_EXTRA_A"])
            opts.extra_config_b = json.loads(os.environ["GPUCACHE_DEMO_EXTRA_B"])
        cls.opts = opts
        cls.res = prefix_reuse.run(opts, log=lambda s: None)
        cls.text = prefix_reuse.report(cls.res)

    def test_a_backs_up_every_page(self):
        self.assertEqual(self.res["a"], {"pages": 20, "stored": 20})

    def test_b_reuses_the_shared_pages_exactly(self):
        b = self.res["b"]
        self.assertEqual(b["pages_hit"], 16)
        self.assertEqual(b["prefill_tokens_saved"], 256)
        self.assertTrue(b["tokens_equal"], self.text)
        self.assertLessEqual(b["max_logit_diff"], 1e-4)
        self.assertTrue(b["recompute_deterministic"])
        self.assertGreater(b["ttft_without_s"], 0)
        self.assertGreater(b["ttft_with_s"], 0)

    def test_other_revision_gets_no_hits_and_its_own_output(self):
        c = self.res["c"]
        self.assertEqual(c["pages_hit"], 0)
        self.assertTrue(c["tokens_equal"])
        self.assertTrue(c["differs_from_b"])  # another revision really is another model

    def test_other_tenant_gets_no_hits(self):
        self.assertEqual(self.res["d"]["pages_hit"], 0)
        self.assertTrue(self.res["d"]["tokens_equal"])

    def test_single_flight_computes_each_page_once(self):
        sf = self.res["single_flight"]
        self.assertEqual(sf["pages"], 9)
        self.assertTrue(sf["each_page_once"], sf)
        self.assertEqual(sf["filled_by_e"] + sf["filled_by_f"], 9)
        self.assertTrue(sf["tokens_equal"])
        self.assertLessEqual(sf["max_logit_diff"], 1e-4)

    def test_report_says_pass(self):
        self.assertTrue(self.res["ok"], self.text)
        self.assertIn("RESULT: PASS", self.text)
        self.assertIn("pages hit 16", self.text)


@unittest.skipIf(torch is None, "torch is not installed")
class OptionsTest(unittest.TestCase):
    def test_bad_options_are_refused(self):
        from gpucache.demo import prefix_reuse

        for kw in ({"shared": 0}, {"shared": 4096}, {"shared": 100}, {"runs": 0}, {"sf_prompt": 8}):
            with self.assertRaisesRegex(ValueError, "gpucache/demo"):
                prefix_reuse.Options(**kw).validate()


if __name__ == "__main__":
    unittest.main()
