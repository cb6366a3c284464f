"""The prefix_reuse scenario end to end, across spawned engine processes.

DaemonTest runs it against a real gpucached built from the tree (two
tenants), through gpucache.sglang.GpucacheStorage and gpucache.Client;
LocalStoreTest against the demo's in-process stand-in store.
"""

import os
import secrets
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # the package

try:
    import torch  # noqa: F401
except ImportError:
    torch = None

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

try:
    import gpucache

    HAVE_CLIENT = hasattr(gpucache, "Client")
except ImportError:
    HAVE_CLIENT = False

# Short prompts (the CLI's default is 2,048 tokens) keep a 2-core run short;
# the checks are the same.
SMALL = dict(prompt=320, shared=256, new=64, decode=8, runs=1, sf_prompt=160)

REPO = os.path.dirname(os.path.dirname(HERE))
# The two-tenant config the README's gpucache-mode commands use.
DEMO_CONFIG = os.path.join(REPO, "examples", "demo", "two-tenants.yaml")


class Checks:
    """The scenario's assertions; subclasses set res/text in setUpClass."""

    res: dict = {}
    text = ""

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


@unittest.skipIf(torch is None, "torch is not installed: apt-get install python3-torch (scripts/test installs it)")
class LocalStoreTest(Checks, unittest.TestCase):
    """Engines share the demo's in-process page store (the stand-in backend)."""

    @classmethod
    def setUpClass(cls):
        from gpucache.demo import prefix_reuse

        cls.res = prefix_reuse.run(prefix_reuse.Options(store="local", **SMALL), log=lambda s: None)
        cls.text = prefix_reuse.report(cls.res)


@unittest.skipIf(torch is None, "torch is not installed: apt-get install python3-torch (scripts/test installs it)")
@unittest.skipUnless(HAVE_CLIENT and shutil.which("go") or os.environ.get("GPUCACHE_BIN"), "no Go toolchain to build gpucached: install Go 1.26, or set GPUCACHE_BIN to a built gpucached")
class DaemonTest(Checks, unittest.TestCase):
    """Engines talk to a real gpucached through gpucache.sglang.GpucacheStorage."""

    @classmethod
    def setUpClass(cls):
        from gpucache.demo import prefix_reuse
        from gpucached import Daemon

        # As the README says: the shipped config, started in a directory
        # that holds the two secret files it names.
        cls.tmp = tempfile.mkdtemp(prefix="gpucache-pydemo-")
        extras = []
        for t in ("a", "b"):
            path = os.path.join(cls.tmp, "tenant-%s.secret" % t)
            with open(path, "w") as f:
                f.write(secrets.token_hex(32) + "\n")
            os.chmod(path, 0o600)
            extras.append({"tenant": "tenant-" + t, "secret_file": path})
        cls.daemon = Daemon.start(extra_args=["--config", DEMO_CONFIG], workdir=cls.tmp)
        for e in extras:
            e["addrs"] = [cls.daemon.addr]
        try:
            opts = prefix_reuse.Options(store="gpucache", extra_config=extras[0], extra_config_b=extras[1], **SMALL)
            cls.res = prefix_reuse.run(opts, log=lambda s: None)
            cls.text = prefix_reuse.report(cls.res)
        except BaseException:
            cls.daemon.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)


@unittest.skipIf(torch is None, "torch is not installed: apt-get install python3-torch (scripts/test installs it)")
class OptionsTest(unittest.TestCase):
    def test_bad_options_are_refused(self):
        from gpucache.demo import prefix_reuse

        for kw in ({"shared": 0}, {"shared": 4096}, {"shared": 100}, {"runs": 0}, {"sf_prompt": 8}):
            with self.assertRaisesRegex(ValueError, "gpucache/demo"):
                prefix_reuse.Options(**kw).validate()


if __name__ == "__main__":
    unittest.main()
