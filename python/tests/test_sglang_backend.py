"""gpucache.sglang driven the way SGLang's HiCacheController drives it,
against the in-memory FakeClient (tests/fakeclient.py).

Where sglang imports, the storage config, host pools and page keys are
SGLang's own (sglang_harness.REAL_SGLANG); elsewhere the harness's stand-ins.
The controller is a stand-in either way (sglang_harness.Controller says why).

Run: cd python && /usr/bin/python3 -m unittest discover -s tests -p 'test_sglang_*.py' -v
"""

import importlib
import logging
import os
import subprocess
import textwrap
import sys
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import fakeclient  # noqa: E402

fakeclient.install()
logging.getLogger("gpucache.sglang").setLevel(logging.ERROR)  # the failure tests log on purpose

from gpucache import sglang as gs  # noqa: E402
from sglang_harness import (  # noqa: E402
    REAL_SGLANG, Controller, MHAHostPool, MLAHostPool, OldStorageConfig, StorageConfig, host_indices, page_keys,
    torch)

EXTRA = {"backend_name": "gpucache", "module_path": "gpucache.sglang", "class_name": "GpucacheStorage",
         "interface_v1": 1, "tenant": "acme", "trust_domain": "prod", "model_revision": "r1"}


def make(client, pool=None, extra=None, **cfg):
    ex = dict(EXTRA)
    ex.update(extra or {})
    c = StorageConfig(extra_config=ex, **cfg)
    b = gs.GpucacheStorage(c, {"client": client})
    b.register_mem_pool_host(pool if pool is not None else MHAHostPool())
    return b


TOKENS = list(range(1000, 1000 + 16 * 4))


@unittest.skipIf(torch is None, "torch is not installed (scripts/test installs Debian's python3-torch)")
class BackendTest(unittest.TestCase):
    def setUp(self):
        self.client = fakeclient.FakeClient()
        self.pool = MHAHostPool(pages=16)
        self.pool.fill_random(7)
        self.keys = page_keys(TOKENS, self.pool.page_size)[:6]

    def backed_up(self, backend=None, pool=None, keys=None):
        pool = pool or self.pool
        b = backend or make(self.client, pool)
        ctl = Controller(b, pool, zero_copy=(b._interface == "v1"))
        keys = keys or self.keys
        self.assertEqual(ctl.backup(keys, host_indices(pool, 0, len(keys))), len(keys))
        return b, ctl

    def test_loaded_by_dynamic_factory_way(self):
        mod = importlib.import_module(EXTRA["module_path"])
        cls = getattr(mod, EXTRA["class_name"])
        self.assertTrue(issubclass(cls, gs._Base))
        b = cls(StorageConfig(extra_config=dict(EXTRA)), {"client": self.client})
        b.register_mem_pool_host(self.pool)
        self.assertEqual(b.namespace.tenant, "acme")
        self.assertEqual(b.namespace.model_id, "acme/llama-test")
        self.assertEqual(b.namespace.dtype, "float16")
        self.assertEqual(b.namespace.layout.block_tokens, 4)
        self.assertIn("page_first/mha/v1/cp0of1/dp0of1/2x", b.namespace.layout.format)

    def test_subclasses_real_hicache_storage_when_sglang_imports(self):
        # a stand-in sglang package whose HiCacheStorage is an ABC with the
        # upstream abstract methods; run in a child so this process keeps its
        # module state
        code = textwrap.dedent("""
            import abc, sys, types
            sys.path[:0] = [%r, %r]
            import fakeclient
            fakeclient.install()
            class HiCacheStorage(abc.ABC):
                def register_mem_pool_host(self, mem_pool_host):
                    self.mem_pool_host = mem_pool_host
                for _n in ("get", "batch_get", "set", "batch_set", "exists"):
                    locals()[_n] = abc.abstractmethod(lambda self, *a, **k: None)
            names = ["sglang", "sglang.srt", "sglang.srt.mem_cache", "sglang.srt.mem_cache.hicache_storage"]
            for n in names:
                sys.modules[n] = types.ModuleType(n)
            sys.modules[names[-1]].HiCacheStorage = HiCacheStorage
            from gpucache import sglang as gs
            from sglang_harness import StorageConfig
            assert gs.HAVE_SGLANG and issubclass(gs.GpucacheStorage, HiCacheStorage)
            b = gs.GpucacheStorage(StorageConfig(extra_config={"tenant": "acme"}), {"client": fakeclient.FakeClient()})
            print("ok", type(b).__mro__[1].__name__)
        """) % (os.path.dirname(os.path.abspath(__file__)), os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), "ok HiCacheStorage")

    def test_v1_set_wipe_exists_get_identical_bytes(self):
        want = [self.pool.page_bytes(i) for i in range(6)]
        b, ctl = self.backed_up()
        self.pool.wipe()
        self.assertEqual(ctl.hit_query(self.keys), 6)
        # load into other host slots (pages 8..13)
        self.assertEqual(ctl.fetch(self.keys, host_indices(self.pool, 8, 6)), 6)
        for i in range(6):
            self.assertEqual(self.pool.page_bytes(8 + i), want[i], "page %d" % i)
        self.assertEqual(self.pool.page_bytes(0), b"\x00" * len(want[0]))
        st = b.counters()
        self.assertEqual(st["get_pages_hit"], 6)
        self.assertEqual(st["set_pages_ok"], 6)

    def test_flat_interface_set_wipe_exists_get(self):
        want = [self.pool.page_bytes(i) for i in range(6)]
        b = make(self.client, self.pool, extra={"interface_v1": 0})
        _, ctl = self.backed_up(backend=b)
        self.pool.wipe()
        self.assertEqual(ctl.hit_query(self.keys), 6)
        self.assertEqual(ctl.fetch(self.keys, host_indices(self.pool, 8, 6)), 6)
        for i in range(6):
            self.assertEqual(self.pool.page_bytes(8 + i), want[i])
        self.assertTrue(b.exists(self.keys[0]))
        got = b.get(self.keys[1])  # no target: a new tensor
        self.assertEqual(bytes(got.numpy().tobytes()), want[1])
        self.assertIsNone(b.get("f" * 64))

    def test_v1_and_flat_do_not_mix(self):
        self.backed_up()
        flat = make(self.client, self.pool, extra={"interface_v1": 0})
        self.assertEqual(flat.batch_exists(self.keys), 0)

    def test_missing_middle_page_stops_count(self):
        b = make(self.client, self.pool)
        ctl = Controller(b, self.pool)
        first, rest = self.keys[:2], self.keys[3:]
        self.assertEqual(ctl.backup(first, host_indices(self.pool, 0, 2)), 2)
        self.assertEqual(ctl.backup(rest, host_indices(self.pool, 3, 3)), 3)
        self.assertEqual(b.batch_exists(self.keys), 2)
        self.assertEqual(b.batch_get_v1(self.keys, host_indices(self.pool, 8, 6)),
                         [True, True, False, True, True, True])
        self.assertEqual(ctl.fetch(self.keys, host_indices(self.pool, 8, 6)), 2)

    def test_half_page_stored_is_a_miss(self):
        # only the K buffer of page 0 present: the page does not count
        b = make(self.client, self.pool)
        name = self.keys[0].encode() + b"/0"
        ptrs, sizes = self.pool.get_page_buffer_meta(host_indices(self.pool, 0, 1))
        self.client.put_opaque(b.namespace, [(name, gs._address_view(ptrs[0], sizes[0]))])
        self.assertEqual(b.batch_exists(self.keys), 0)
        self.assertEqual(b.batch_get_v1(self.keys[:1], host_indices(self.pool, 8, 1)), [False])

    def test_three_caller_threads_concurrently(self):
        b, ctl = self.backed_up()
        more = page_keys(TOKENS, self.pool.page_size)[6:12]
        self.client.barrier = threading.Barrier(3, timeout=30)  # all three calls in flight at once
        out, errs = {}, []

        def run(name, fn):
            try:
                out[name] = fn()
            except Exception as e:  # pragma: no cover - reported below
                errs.append((name, e))

        ths = [threading.Thread(target=run, args=a) for a in (
            ("exists", lambda: ctl.hit_query(self.keys)),
            ("get", lambda: ctl.fetch(self.keys, host_indices(self.pool, 8, 6))),
            ("set", lambda: ctl.backup(more, host_indices(self.pool, 6, 6))),
        )]
        for t in ths:
            t.start()
        for t in ths:
            t.join(60)
        self.assertFalse(errs, errs)
        self.assertEqual(out, {"exists": 6, "get": 6, "set": 6})
        self.client.barrier = None
        for i in range(6):
            self.assertEqual(self.pool.page_bytes(8 + i), self.pool.page_bytes(i))
        self.assertEqual(b.batch_exists(self.keys + more), 12)

    def test_other_model_rank_dtype_tenant_get_zero_hits(self):
        self.backed_up()
        others = {
            "model": make(self.client, MHAHostPool(), model_name="acme/other-model"),
            "revision": make(self.client, MHAHostPool(), extra={"model_revision": "r2"}),
            "tp rank": make(self.client, MHAHostPool(), tp_rank=1, tp_size=2),
            "tp size": make(self.client, MHAHostPool(), tp_size=2),
            "pp rank": make(self.client, MHAHostPool(), pp_rank=1, pp_size=2),
            "cp rank": make(self.client, MHAHostPool(), attn_cp_rank=1, attn_cp_size=2),
            "dp rank": make(self.client, MHAHostPool(), dp_rank=1),
            "dtype": make(self.client, MHAHostPool(dtype=torch.bfloat16)),
            "page size": make(self.client, MHAHostPool(page_size=8)),
            "heads": make(self.client, MHAHostPool(head_num=4)),
            "tenant": make(self.client, MHAHostPool(), extra={"tenant": "bob"}),
            "trust domain": make(self.client, MHAHostPool(), extra={"trust_domain": "dev"}),
        }
        same = make(self.client, MHAHostPool())
        self.assertEqual(same.batch_exists(self.keys), 6)
        for what, b in others.items():
            self.assertEqual(b.batch_exists(self.keys), 0, what)
            self.assertEqual(b.batch_get_v1(self.keys, host_indices(b.mem_pool_host, 0, 6)), [False] * 6, what)

    def test_mla_only_rank0_writes_every_rank_reads(self):
        pool0, pool1 = MLAHostPool(), MLAHostPool()
        pool0.fill_random(3)
        pool1.fill_random(4)
        r0 = make(self.client, pool0, is_mla_model=True, tp_rank=0, tp_size=2)
        r1 = make(self.client, pool1, is_mla_model=True, tp_rank=1, tp_size=2)
        self.assertEqual(r0._info["buffers_per_page"], 1)
        # rank 1's write is skipped (reported done) and stores nothing
        self.assertEqual(r1.batch_set_v1(self.keys, host_indices(pool1, 0, 6)), [True] * 6)
        self.assertEqual(r1.batch_exists(self.keys), 0)
        self.assertEqual(r0.batch_set_v1(self.keys, host_indices(pool0, 0, 6)), [True] * 6)
        self.assertEqual(r1.batch_exists(self.keys), 6)
        self.assertEqual(r1.batch_get_v1(self.keys, host_indices(pool1, 8, 6)), [True] * 6)
        for i in range(6):
            self.assertEqual(pool1.page_bytes(8 + i), pool0.page_bytes(i))
        mha = make(self.client, MHAHostPool(dtype=torch.bfloat16))
        self.assertEqual(mha.batch_exists(self.keys), 0)

    def test_mla_dcp_shards_do_not_mix(self):
        # decode context parallelism: each DCP rank holds its own slice of an
        # MLA page and is the writer of that shard (is_storage_writer)
        cfg = dict(is_mla_model=True, tp_size=2, dcp_size=2, logical_page_size=8)
        pool0 = MLAHostPool()
        pool0.fill_random(5)
        s0 = make(self.client, pool0, tp_rank=0, dcp_rank=0, **cfg)
        s1 = make(self.client, MLAHostPool(), tp_rank=1, dcp_rank=1, **cfg)
        self.assertEqual(s1.batch_set_v1(self.keys[:1], host_indices(s1.mem_pool_host, 0, 1)), [True])
        self.assertEqual(s0.batch_set_v1(self.keys, host_indices(pool0, 0, 6)), [True] * 6)
        self.assertEqual(s0.batch_exists(self.keys), 6)
        self.assertEqual(s1.batch_exists(self.keys), 1, "shard 1 holds only what rank 1 wrote")
        no_dcp = make(self.client, MLAHostPool(), is_mla_model=True, tp_rank=0, tp_size=2)
        self.assertEqual(no_dcp.batch_exists(self.keys), 0)

    def test_daemon_down_mid_run_misses_no_exception(self):
        b, ctl = self.backed_up()
        self.client.down = True
        self.assertEqual(ctl.hit_query(self.keys), 0)
        self.assertEqual(b.batch_get_v1(self.keys, host_indices(self.pool, 8, 6)), [False] * 6)
        self.assertEqual(b.batch_set_v1(self.keys, host_indices(self.pool, 0, 6)), [False] * 6)
        self.assertEqual(b.batch_get(self.keys, [self.pool.get_dummy_flat_data_page() for _ in self.keys]),
                         [None] * 6)
        self.assertFalse(b.exists(self.keys[0]))
        self.assertIsNone(b.get(self.keys[0]))
        # 6 pages x 2 buffers (K, V) through batch_get_v1, 6 flat pages through batch_get
        self.assertEqual(b.counters()["miss_reasons"].get("refused"), 18)
        self.client.down = False
        self.assertEqual(ctl.hit_query(self.keys), 6)

    def test_client_that_raises_is_a_miss(self):
        b, _ = self.backed_up()

        def boom(*a, **k):
            raise ConnectionResetError("peer reset")

        for m in ("lookup", "get_into", "get", "put_opaque"):
            setattr(self.client, m, boom)
        self.assertEqual(b.batch_exists(self.keys), 0)
        self.assertFalse(b.exists(self.keys[0]))
        self.assertEqual(b.batch_get_v1(self.keys, host_indices(self.pool, 8, 6)), [False] * 6)
        self.assertEqual(b.batch_set_v1(self.keys, host_indices(self.pool, 0, 6)), [False] * 6)
        self.assertEqual(b.batch_get(self.keys), [None] * 6)
        self.assertFalse(b.batch_set(self.keys, [self.pool.get_data_page(0)] * 6))
        self.assertGreaterEqual(b.counters()["errors"], 6)

    def test_wrong_length_reply_is_a_miss(self):
        b, _ = self.backed_up()
        real = self.client.get_into

        def short(ns, keys, bufs, lease_id=0):
            return [fakeclient.GetResult(r.hit, r.length - 1 if r.hit else 0, r.reason)
                    for r in real(ns, keys, bufs, lease_id)]

        self.client.get_into = short
        self.assertEqual(b.batch_get_v1(self.keys, host_indices(self.pool, 8, 6)), [False] * 6)

    def test_unregistered_or_closed_backend_misses(self):
        b = gs.GpucacheStorage(StorageConfig(extra_config=dict(EXTRA)), {"client": self.client})
        self.assertEqual(b.batch_exists(self.keys), 0)
        self.assertEqual(b.batch_get_v1(self.keys, host_indices(self.pool, 0, 6)), [False] * 6)
        b.register_mem_pool_host(self.pool)
        b.close()
        self.assertEqual(b.batch_exists(self.keys), 0)
        self.assertFalse(self.client.closed, "an injected client belongs to the caller")

    def test_bad_host_pool_meta_is_a_miss(self):
        b, _ = self.backed_up()
        self.pool.get_page_buffer_meta = lambda idx: ([0], [1])
        self.assertEqual(b.batch_get_v1(self.keys, host_indices(self.pool, 8, 6)), [False] * 6)

    def test_old_config_without_pp_cp_dp_fields(self):
        c = OldStorageConfig(tp_rank=0, tp_size=1, is_mla_model=False, is_page_first_layout=True,
                             model_name="acme/llama-test", extra_config=dict(EXTRA))
        b = gs.GpucacheStorage(c, {"client": self.client})
        b.register_mem_pool_host(self.pool)
        self.backed_up()
        self.assertEqual(b.batch_exists(self.keys), 6)

    def test_config_errors_are_clear(self):
        for extra, cfg, msg in (
            ({"tenant": ""}, {}, "tenant"),
            ({}, {"model_name": None}, "model name"),
        ):
            ex = dict(EXTRA)
            ex.update(extra)
            with self.assertRaisesRegex(ValueError, "^gpucache/sglang: .*" + msg):
                b = gs.GpucacheStorage(StorageConfig(extra_config=ex, **cfg), {"client": self.client})
                b.register_mem_pool_host(self.pool)
        ex = dict(EXTRA, addrs=[], secret_file="/nonexistent/secret")
        with self.assertRaisesRegex(ValueError, "^gpucache/sglang: "):
            gs.GpucacheStorage(StorageConfig(extra_config=ex), {})

    def test_clear_and_stats(self):
        b, ctl = self.backed_up()
        self.assertEqual(b.counters()["set_pages_ok"], 6)
        b.clear()
        self.assertEqual(b.counters()["set_pages_ok"], 0)
        self.assertEqual(ctl.hit_query(self.keys), 6, "clear keeps the shared pages")

    def test_storage_metrics_for_sglang(self):
        # SGLang's metrics collector (--enable-metrics) reads get_stats() as
        # a StorageMetrics: pages and GB/s per operation since the last call
        b = make(self.client, self.pool, enable_storage_metrics=True)
        ctl = Controller(b, self.pool)
        self.assertEqual(ctl.backup(self.keys, host_indices(self.pool, 0, 6)), 6)
        self.assertEqual(ctl.fetch(self.keys[:4], host_indices(self.pool, 8, 4)), 4)
        m = b.get_stats()
        self.assertEqual((m.backup_pgs, m.prefetch_pgs), ([6], [4]))
        self.assertEqual(len(m.backup_bandwidth), 1)
        self.assertGreater(m.prefetch_bandwidth[0], 0)
        m2 = b.get_stats()
        self.assertEqual((m2.backup_pgs, m2.prefetch_pgs, m2.prefetch_bandwidth), ([], [], []))
        off = make(self.client, self.pool)  # metrics off: nothing kept
        Controller(off, self.pool).fetch(self.keys, host_indices(self.pool, 8, 6))
        self.assertEqual(off.get_stats().prefetch_pgs, [])
        if REAL_SGLANG:
            from sglang.srt.observability.metrics_collector import StorageMetrics
            self.assertIsInstance(m, StorageMetrics)


if __name__ == "__main__":
    unittest.main()
