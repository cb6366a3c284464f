"""LMCache's in-process remote tier (``remote_url: redis://...``) against a
real gpucached, through LMCache's own classes: the highest layer of that
path that runs on this CPU.

vLLM's ``LMCacheConnectorV1`` does not start on the CPU: LMCache 0.5.6's
``CreateGPUConnector`` has a vLLM connector for CUDA, XPU, MUSA and HPU
only, and the worker fails with ``RuntimeError: No supported cpu connector
found.`` (docs/ENGINES.md). Below it everything is LMCache's real code:
its ``ChunkedTokenDatabase`` makes the chunk keys from the prompt's tokens,
its ``LocalCPUBackend`` allocates the chunks, and its ``RemoteBackend``
with the ``redis://`` connector (redis-py) stores and reads them over RESP,
AUTH as team-a. What the engine's GPU connector would copy from the paged
KV cache is a seeded tensor here.

It also shows why the plugin exists: the in-process key
(``CacheEngineKey``) has no cache_salt, so two users with different salts
make the same keys and share chunks through plain RESP with one tenant.
"""

import dataclasses
import sys
import unittest

from engine_tests.common import HAVE_VLLM, PROMPT_TOKENS, teardown_model
from engine_tests.test_lmcache import HAVE_LMCACHE, SECRET, start_team_a, tenant_stat

CHUNK = 256


@unittest.skipUnless(HAVE_VLLM and HAVE_LMCACHE, "vLLM or LMCache not installed: run with scripts/engines-env's python")
class InProcessRemoteTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import asyncio
        import threading

        import torch
        from lmcache.v1.config import LMCacheEngineConfig
        from lmcache.v1.metadata import LMCacheMetadata
        from lmcache.v1.storage_backend.local_cpu_backend import LocalCPUBackend
        from lmcache.v1.storage_backend.remote_backend import RemoteBackend
        from lmcache.v1.token_database import ChunkedTokenDatabase

        start_team_a(cls)
        cls.loop = asyncio.new_event_loop()
        threading.Thread(target=cls.loop.run_forever, daemon=True).start()
        cfg = LMCacheEngineConfig.from_defaults(
            chunk_size=CHUNK, local_cpu=True, max_local_cpu_size=0.1, remote_serde="naive", save_unfull_chunk=False,
            remote_url="redis://team-a:%s@%s" % (SECRET, cls.daemon.resp_addr))
        # The ci model: 2 layers, K and V, 2 KV heads of 32, bf16.
        cls.meta = LMCacheMetadata(model_name=cls.model, world_size=1, local_world_size=1, worker_id=0,
                                   local_worker_id=0, kv_dtype=torch.bfloat16, kv_shape=(2, 2, CHUNK, 2, 32))
        cls.local = LocalCPUBackend(cfg, cls.meta)
        cls.remote = RemoteBackend(cfg, cls.meta, cls.loop, cls.local, "cpu")
        cls.db = ChunkedTokenDatabase(cfg, cls.meta)
        cls.shape = torch.Size((2, 2, CHUNK, 64))

    @classmethod
    def tearDownClass(cls):
        # Not RemoteBackend.close(): in LMCache 0.5.6 it waits, from the
        # caller, for the connector's close on the event loop, and that close
        # waits for a job of its executor on the same loop: it never returns.
        cls.loop.call_soon_threadsafe(cls.loop.stop)
        cls.daemon.stop()
        teardown_model(cls)

    def keys(self, tokens):
        import torch
        return [k for _, _, k in self.db.process_tokens(torch.tensor(tokens))]

    def chunk(self, seed):
        import torch
        obj = self.local.allocate(self.shape, torch.bfloat16)
        g = torch.Generator().manual_seed(seed)
        obj.tensor.copy_(torch.randn(self.shape, generator=g).to(torch.bfloat16))
        return obj

    def test_store_and_read_a_prompt_through_lmcache_remote_backend(self):
        keys = self.keys(self.prompt)
        self.assertEqual(len(keys), PROMPT_TOKENS // CHUNK)
        before = tenant_stat(self.daemon, self.secret_file)
        objs = [self.chunk(i) for i in range(len(keys))]
        for k, o in zip(keys, objs):
            self.remote.submit_put_task(k, o).result(timeout=30)
        self.assertEqual(self.remote.put_failed_count, 0)
        for k, o in zip(keys, objs):
            self.assertTrue(self.remote.contains(k))
            got = self.remote.get_blocking(k)
            self.assertIsNotNone(got)
            self.assertTrue(bool((got.tensor.view(-1) == o.tensor.view(-1)).all()), "chunk bytes differ")
        after = tenant_stat(self.daemon, self.secret_file)
        print("\nin-process RESP: %d chunks; gpucached team-a %s" % (len(keys), after), file=sys.stderr)
        n = len(keys)
        self.assertGreaterEqual(after["tenant_blocks_hit"] - before["tenant_blocks_hit"], n)
        # kv_bytes and a 28-byte metadata value per chunk
        self.assertEqual(after["tenant_bytes_in"] - before["tenant_bytes_in"], n * (CHUNK * 512 + 28))

    def test_in_process_keys_have_no_salt(self):
        # Two users of one tenant with different cache_salts: LMCache's
        # in-process key has no field for it, so the keys are the same.
        from lmcache.utils import CacheEngineKey
        self.assertNotIn("cache_salt", [f.name for f in dataclasses.fields(CacheEngineKey)])
        tokens = [(t + 1) % 256 for t in self.prompt[:CHUNK]]  # not the other test's chunk
        (alice,), (bob,) = self.keys(tokens), self.keys(tokens)
        self.assertEqual(alice.to_string(), bob.to_string())
        self.remote.submit_put_task(alice, self.chunk(99)).result(timeout=30)
        self.assertTrue(self.remote.contains(bob), "bob's key is alice's: plain RESP shares the chunk")


if __name__ == "__main__":
    unittest.main()
