"""vLLM with LMCache storing in gpucache, on the CPU, unpatched.

LMCache 0.5.6 runs with vLLM on the CPU only in its multiprocess mode:
vLLM's ``LMCacheMPConnector`` in each engine, and LMCache's own server
(``lmcache server``, engine-driven transfers) holding a DRAM L1 and one L2
adapter. The in-process connector (``LMCacheConnectorV1`` with
``remote_url``) stops in vLLM's worker on this CPU (``No supported cpu
connector found``, see docs/ENGINES.md).

Two L2 adapters are proven against one real gpucached:

* ``resp``: LMCache's own C++ RESP client, to gpucached's RESP endpoint
  (``tenants[].resp`` profile, AUTH as team-a);
* ``plugin``: ``gpucache.lmcache.GpucacheL2Adapter`` through LMCache's
  ``plugin`` adapter type, over gpucache's native protocol.

Each path: engine A (its own LMCache server) computes a 2,048-token prompt
and LMCache stores its chunks in gpucache; engine B, a fresh process with
another fresh LMCache server (an empty L1), must load them from gpucache.
Counted three times: vLLM's external prefix-cache hits, LMCache's own
/status, and gpucached's STAT for the tenant. Greedy tokens equal A's and
those of an engine without LMCache. Salts: two ``cache_salt`` values never
share a chunk through the plugin (another trust domain: another gpucache
namespace), and LMCache 0.5.6's multiprocess keys carry the salt too, so
RESP does not share them either.
"""

import os
import sys
import threading
import time
import unittest

from engine_tests.common import HAVE_VLLM, PROMPT_TOKENS, run_engine, setup_model, teardown_model

try:
    import lmcache  # noqa: F401
    HAVE_LMCACHE = True
except ImportError:
    HAVE_LMCACHE = False

SECRET = "lmcache-test-secret-0123456789abcdef"
CHUNK = 256
CHUNKS = PROMPT_TOKENS // CHUNK  # 8 chunks of 256 tokens x 512 B = 128 KiB each


def daemon_config(model):
    # idle_timeout: LMCache's C++ RESP client opens its connections when its
    # server starts and never reconnects; one gpucached closes after the
    # default 5 min of silence loses every later SET sent on it.
    return """
resp_listen: 127.0.0.1:0
idle_timeout: 24h
tenants:
  - name: team-a
    secrets: [{id: team-a-1, env: GPUCACHE_LMCACHE_TEST_SECRET}]
    rights: ["%(m)s=rw"]
    resp:
      model: %(m)s
      config_revision: main
      tokenizer_revision: main
      dtype: bfloat16
      layer_count: 2
      kv_heads: 2
      head_dim: 32
      block_tokens: %(c)d
      key_format: lmcache
      variable_length: true
""" % {"m": model, "c": CHUNK}


def start_team_a(cls):
    """On a test class: the ci model and prompt (setup_model), cls.secret_file
    and cls.daemon, a real gpucached with RESP and the tenant team-a whose
    RESP profile is that model. Undo with cls.daemon.stop() and teardown_model."""
    from gpucached import Daemon
    setup_model(cls, PROMPT_TOKENS)
    os.environ["GPUCACHE_LMCACHE_TEST_SECRET"] = SECRET
    cls.secret_file = os.path.join(cls.tmp.name, "secret")
    with open(cls.secret_file, "w") as f:
        f.write(SECRET)
    cls.daemon = Daemon.start(config=daemon_config(cls.model))


def tenant_stat(daemon, secret_file):
    from gpucache.client import client_from_config
    c = client_from_config({"addrs": daemon.addr, "tenant": "team-a", "secret_file": secret_file})
    try:
        return c.stat()
    finally:
        c.close()


@unittest.skipUnless(HAVE_VLLM and HAVE_LMCACHE, "vLLM or LMCache not installed: run with scripts/engines-env's python")
class LMCacheTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from engine_tests.lmcache_server import MPServer
        cls.servers = []
        start_team_a(cls)
        host, port = cls.daemon.resp_addr.rsplit(":", 1)
        resp = {"type": "resp", "host": host, "port": int(port), "username": "team-a", "password": SECRET}
        plugin = {"type": "plugin", "module_path": "gpucache.lmcache", "class_name": "GpucacheL2Adapter",
                  "adapter_params": {"addrs": cls.daemon.addr, "tenant": "team-a", "secret_file": cls.secret_file,
                                     "dtype": "bfloat16", "chunk_tokens": CHUNK}}
        try:
            # Two LMCache servers per adapter: engine A's and engine B's, so
            # B's L1 is empty and every hit of B comes from gpucache.
            cls.resp = [MPServer.start(resp) for _ in range(2)]
            cls.plugin = [MPServer.start(plugin) for _ in range(2)]
            cls.servers = cls.resp + cls.plugin
            cls.base, _ = run_engine(cls.model, cls.prompt)
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        for s in cls.servers:
            s.stop()
        cls.daemon.stop()
        teardown_model(cls)

    def engine(self, server, salt=None):
        from engine_tests.lmcache_server import transfer_config
        return run_engine(self.model, self.prompt, salt=salt, kv_transfer=transfer_config(server.port))

    def stat(self):
        return tenant_stat(self.daemon, self.secret_file)

    def stored(self, since, nbytes, timeout=120.0):
        """Wait until gpucached has taken nbytes more for the tenant than the
        STAT since shows, and return the STAT. LMCache's server writes its L1
        to L2 in the background after the engine is done, and has no call
        that waits for it: the condition is polled on gpucached's STAT (each
        poll waits 50 ms), bounded by timeout."""
        end = time.monotonic() + timeout
        while True:
            st = self.stat()
            if st["tenant_bytes_in"] - since["tenant_bytes_in"] >= nbytes:
                return st
            if time.monotonic() > end:
                self.fail("gpucached took %d of %d bytes in %.0f s" % (
                    st["tenant_bytes_in"] - since["tenant_bytes_in"], nbytes, timeout))
            threading.Event().wait(0.05)

    def two_engines(self, servers):
        """A on servers[0], then B on servers[1]; gpucached's STAT for the
        tenant before, between and after; and LMCache's own count of B's
        chunk hits from L1 and L2 (its prefetch controller)."""
        before = self.stat()
        a, _ = self.engine(servers[0])
        mid = self.stored(before, CHUNKS * CHUNK * 512)
        h0 = servers[1].prefetch_hits()
        b, _ = self.engine(servers[1])
        after = self.stat()
        h1 = servers[1].prefetch_hits()
        b["lmcache_hits"] = {k: h1[k] - h0[k] for k in h1}
        return a, b, before, mid, after

    def test_resp_second_engine_loads_from_gpucache(self):
        a, b, before, mid, after = self.two_engines(self.resp)
        print("\nRESP: vLLM B %s\nLMCache B's chunk hits %s\ngpucached team-a after A %s\nafter B %s"
              % (b["metrics"], b["lmcache_hits"], mid, after), file=sys.stderr)
        self.assertGreaterEqual(b["lmcache_hits"]["l2"], CHUNKS)
        self.assertEqual(a["tokens"], self.base["tokens"])
        self.assertEqual(b["tokens"], a["tokens"])
        self.assertEqual(a["metrics"].get("vllm:external_prefix_cache_hits", 0), 0)
        self.assertGreaterEqual(b["metrics"].get("vllm:external_prefix_cache_hits", 0), 0.9 * PROMPT_TOKENS)
        self.assertEqual(mid["tenant_bytes_in"] - before["tenant_bytes_in"], CHUNKS * CHUNK * 512)
        self.assertEqual(after["tenant_blocks_hit"] - mid["tenant_blocks_hit"], CHUNKS)
        self.assertEqual(after["tenant_bytes_out"] - mid["tenant_bytes_out"], CHUNKS * CHUNK * 512)

    def test_plugin_second_engine_loads_from_gpucache(self):
        # The servers are shared by the tests: count this test's part.
        c0 = [s.l2_status()["counters"] for s in self.plugin]
        a, b, before, mid, after = self.two_engines(self.plugin)
        c1 = [s.l2_status()["counters"] for s in self.plugin]
        ca, cb = ({k: c1[i][k] - c0[i][k] for k in c1[i]} for i in (0, 1))
        print("\nplugin: vLLM B %s\nLMCache B's chunk hits %s\nLMCache A's adapter %s\nLMCache B's adapter %s\n"
              "gpucached team-a after B %s" % (b["metrics"], b["lmcache_hits"], ca, cb, after), file=sys.stderr)
        self.assertGreaterEqual(b["lmcache_hits"]["l2"], CHUNKS)
        self.assertEqual(a["tokens"], self.base["tokens"])
        self.assertEqual(b["tokens"], a["tokens"])
        self.assertGreaterEqual(b["metrics"].get("vllm:external_prefix_cache_hits", 0), 0.9 * PROMPT_TOKENS)
        self.assertEqual(ca["keys_stored"], CHUNKS)
        self.assertEqual(ca["store_failures"], 0)
        self.assertEqual(cb["keys_hit"], CHUNKS)
        self.assertEqual(cb["keys_loaded"], CHUNKS)
        self.assertEqual(cb["bytes_loaded"], CHUNKS * CHUNK * 512)
        self.assertEqual(after["tenant_blocks_hit"] - mid["tenant_blocks_hit"], CHUNKS)

    def salts(self, servers, name):
        """alice on server 0 stores; bob on server 1 must load nothing;
        alice on server 1 (its L1 holds only bob's chunks) loads from gpucache."""
        before = self.stat()
        first, _ = self.engine(servers[0], salt="alice-" + name)
        mid = self.stored(before, CHUNKS * CHUNK * 512)
        bob, _ = self.engine(servers[1], salt="bob-" + name)
        after_bob = self.stored(mid, CHUNKS * CHUNK * 512)
        alice, _ = self.engine(servers[1], salt="alice-" + name)
        print("\n%s salts: bob %s, alice again %s" % (name, bob["metrics"], alice["metrics"]), file=sys.stderr)
        self.assertEqual(bob["metrics"].get("vllm:external_prefix_cache_hits", 0), 0)
        self.assertEqual(after_bob["tenant_blocks_hit"], mid["tenant_blocks_hit"])
        self.assertGreaterEqual(alice["metrics"].get("vllm:external_prefix_cache_hits", 0), 0.9 * PROMPT_TOKENS)
        for r in (first, bob, alice):
            self.assertEqual(r["tokens"], self.base["tokens"])

    def test_plugin_salts_never_share_a_chunk(self):
        self.salts(self.plugin, "plugin")

    def test_resp_salts_in_multiprocess_keys(self):
        # LMCache 0.5.6's multiprocess ObjectKey ends in @<cache_salt>, so the
        # RESP key differs per salt as well; the in-process connector's keys
        # (CacheEngineKey) have no salt (docs/ENGINES.md).
        self.salts(self.resp, "resp")


if __name__ == "__main__":
    unittest.main()
