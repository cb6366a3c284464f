"""gpucache.sglang.GpucacheStorage built by SGLang's own classes, against a
real gpucached.

SGLang 0.5.23's StorageBackendFactory builds the backend from the name
"dynamic" and the extra config keys backend_name, module_path, class_name
and interface_v1, with SGLang's HiCacheStorageConfig, exactly as
HiCacheController.attach_storage_backend does for
--hicache-storage-backend dynamic --hicache-storage-backend-extra-config;
then register_mem_pool_host gives it SGLang's MHATokenToKVPoolHost
(page_first, pin_memory off) built over SGLang's MHATokenToKVPool on device
"cpu". Page keys are SGLang's get_hash_str. The backend is driven through
batch_set_v1 / batch_exists / batch_get_v1 (HiCacheController's zero-copy
calls) and the flat batch_set / batch_get, and the bytes are read back
through the pool's own get_page_buffer_meta and get_data_page.

What SGLang cannot do on a CPU here, and so is not driven: the device pool
to host pool copies (the host pool's backup_from_device_all_layer and
load_to_device_per_layer), which need sgl_kernel's transfer kernels
(page_first with --hicache-io-backend kernel: "NameError: name
'transfer_kv_all_layer_lf_pf' is not defined"). The test writes the host
pool's pages itself, where on a GPU that copy would.
"""

import os
import sys
import time
import unittest

from engine_tests.common import PYROOT  # noqa: F401  (puts python/ and python/tests on sys.path)

try:
    import torch
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorage, HiCacheStorageConfig
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
    from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost
    from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory
    from sglang.srt.mem_cache.utils import get_hash_str
    HAVE_SGLANG = True
except ImportError:  # run with scripts/engines-env's python
    HAVE_SGLANG = False

PAGE = 16
LAYERS, HEADS, DIM = 2, 2, 32  # the ci model's KV geometry
# A bound on a call to a stopped daemon, not a performance figure: the
# client's deadline is 2 s; a hang would be the 30 s of the running daemon.
HANG = 30.0


def host_pool(pages=32, dtype=None, allocator_type="default"):
    """SGLang's MHATokenToKVPoolHost over SGLang's MHATokenToKVPool, both on
    device "cpu", page_first, pin_memory off; its memory from SGLang's
    allocator_type ("default": alloc_mmap's MAP_SHARED anonymous mapping;
    "shm": ShmHostTensorAllocator's memfd)."""
    dev = MHATokenToKVPool(size=4 * PAGE, page_size=PAGE, dtype=dtype or torch.bfloat16, head_num=HEADS,
                           head_dim=DIM, layer_num=LAYERS, device="cpu", enable_memory_saver=False)
    pool = MHATokenToKVPoolHost(dev.get_device_pool_infos()[0].buffer_info, 1.0, 0, PAGE, "page_first",
                                pin_memory=False, device="cpu", device_capacity_tokens=dev.size,
                                start_layer=dev.start_layer, end_layer=dev.end_layer,
                                host_token_capacity=pages * PAGE, allocator_type=allocator_type)
    pool.test_device_pool = dev
    return pool


def slots(first_page, n_pages):
    return torch.arange(first_page * PAGE, (first_page + n_pages) * PAGE, dtype=torch.int64)


def page_bytes(pool, first_slot):
    return pool.get_data_page(first_slot).contiguous().view(torch.uint8).numpy().tobytes()


@unittest.skipUnless(HAVE_SGLANG, "SGLang is not installed: run with scripts/engines-env's python")
class FactoryTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from gpucached import Daemon
        cls.daemon = Daemon.start()

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()

    def setUp(self):
        self.pool = host_pool()
        g = torch.Generator().manual_seed(11)
        self.pool.kv_buffer.copy_(torch.randn(self.pool.kv_buffer.shape, generator=g).to(self.pool.dtype))
        self.keys = get_hash_str([(7 * i) % 256 for i in range(8 * PAGE)], None, page_size=PAGE)[:6]

    def config(self, model="acme/tiny-ci", tp_rank=0, tp_size=1, metrics=False, **extra):
        ex = {"backend_name": "gpucache", "module_path": "gpucache.sglang", "class_name": "GpucacheStorage",
              "interface_v1": 1, "addrs": [self.daemon.addr], "tenant": "default", "timeout": HANG,
              "model_revision": self.id()}
        ex.update(extra)
        return HiCacheStorageConfig(tp_rank=tp_rank, tp_size=tp_size, pp_rank=0, pp_size=1, attn_cp_rank=0,
                                    attn_cp_size=1, is_mla_model=False, enable_storage_metrics=metrics,
                                    is_page_first_layout=True, model_name=model, extra_config=ex)

    def backend(self, pool=None, **cfg):
        """What HiCacheController.attach_storage_backend does: the factory,
        then register_mem_pool_host."""
        pool = pool if pool is not None else self.pool
        b = StorageBackendFactory.create_backend("dynamic", self.config(**cfg), pool)
        b.register_mem_pool_host(pool)
        self.addCleanup(b.close)
        return b

    def test_factory_builds_gpucache_storage(self):
        from gpucache.sglang import GpucacheStorage
        b = self.backend()
        self.assertIs(type(b), GpucacheStorage)
        self.assertTrue(issubclass(GpucacheStorage, HiCacheStorage))
        ns = b.namespace
        self.assertEqual((ns.tenant, ns.model_id, ns.dtype), ("default", "acme/tiny-ci", "bfloat16"))
        lay = ns.layout
        self.assertEqual((lay.block_tokens, lay.layer_count, lay.kv_heads, lay.head_dim), (PAGE, LAYERS, HEADS, DIM))
        # page_first MHA: K and V of a page are one buffer each, all layers
        self.assertIn("page_first/mha/v1/cp0of1/dp0of1/2x%dB" % (2 * PAGE * LAYERS * HEADS * DIM * 2), lay.format)

    def test_v1_round_trip_through_the_pool(self):
        b = self.backend()
        want = [page_bytes(self.pool, i * PAGE) for i in range(6)]
        self.assertEqual(b.batch_exists(self.keys), 0)
        self.assertEqual(b.batch_set_v1(self.keys, slots(0, 6)), [True] * 6)
        self.pool.kv_buffer.zero_()
        self.assertEqual(b.batch_exists(self.keys), 6)
        self.assertEqual(b.batch_get_v1(self.keys, slots(20, 6)), [True] * 6)
        for i in range(6):
            self.assertEqual(page_bytes(self.pool, (20 + i) * PAGE), want[i], "page %d" % i)
        self.assertEqual(page_bytes(self.pool, 0), bytes(len(want[0])), "only slots 20-25 were written")
        c = b.counters()
        self.assertEqual((c["set_pages_ok"], c["get_pages_hit"], c["errors"]), (6, 6, 0))
        self.assertEqual(c["bytes_read"], sum(len(w) for w in want))

    def test_gap_stops_the_count(self):
        b = self.backend()
        self.assertEqual(b.batch_set_v1(self.keys[:2], slots(0, 2)), [True, True])
        self.assertEqual(b.batch_set_v1(self.keys[3:], slots(3, 3)), [True] * 3)
        self.assertEqual(b.batch_exists(self.keys), 2)
        self.assertEqual(b.batch_get_v1(self.keys, slots(20, 6)), [True, True, False, True, True, True])

    def test_flat_pages_through_the_pool(self):
        b = self.backend(interface_v1=0)
        want = [page_bytes(self.pool, i * PAGE) for i in range(6)]
        self.assertTrue(b.batch_set(self.keys, [self.pool.get_data_page(i * PAGE) for i in range(6)]))
        self.pool.kv_buffer.zero_()
        self.assertEqual(b.batch_exists(self.keys), 6)
        got = b.batch_get(self.keys, [self.pool.get_dummy_flat_data_page() for _ in self.keys])
        for i, page in enumerate(got):
            self.pool.set_from_flat_data_page((20 + i) * PAGE, page)
            self.assertEqual(page_bytes(self.pool, (20 + i) * PAGE), want[i], "page %d" % i)
        self.assertEqual(self.backend().batch_exists(self.keys), 0, "v1 and flat pages do not mix")

    def test_another_model_rank_or_dtype_misses(self):
        b = self.backend()
        self.assertEqual(b.batch_set_v1(self.keys, slots(0, 6)), [True] * 6)
        self.assertEqual(self.backend().batch_exists(self.keys), 6)
        others = {
            "model": self.backend(model="acme/other"),
            "tp rank": self.backend(tp_rank=1, tp_size=2),
            "revision": self.backend(model_revision="other"),
            "dtype": self.backend(pool=host_pool(dtype=torch.float16)),
        }
        for what, o in others.items():
            self.assertEqual(o.batch_exists(self.keys), 0, what)
            self.assertEqual(o.batch_get_v1(self.keys, slots(20, 6)), [False] * 6, what)

    def test_storage_metrics_are_sglangs(self):
        from sglang.srt.observability.metrics_collector import StorageMetrics
        b = self.backend(metrics=True)
        b.batch_set_v1(self.keys, slots(0, 6))
        b.batch_get_v1(self.keys, slots(20, 6))
        m = b.get_stats()
        self.assertIsInstance(m, StorageMetrics)
        self.assertEqual((m.backup_pgs, m.prefetch_pgs), ([6], [6]))

    def test_stopped_daemon_misses_without_exception(self):
        from gpucached import Daemon
        d = Daemon.start()
        saved = self.daemon
        type(self).daemon = d
        try:
            b = self.backend(timeout=2.0)
        finally:
            type(self).daemon = saved
        self.assertEqual(b.batch_set_v1(self.keys, slots(0, 6)), [True] * 6)
        self.assertEqual(b.batch_exists(self.keys), 6)
        d.stop()
        for name, call, miss in (
            ("batch_exists", lambda: b.batch_exists(self.keys), 0),
            ("exists", lambda: b.exists(self.keys[0]), False),
            ("batch_get_v1", lambda: b.batch_get_v1(self.keys, slots(20, 6)), [False] * 6),
            ("batch_set_v1", lambda: b.batch_set_v1(self.keys, slots(0, 6)), [False] * 6),
        ):
            t0 = time.monotonic()
            self.assertEqual(call(), miss, name)
            self.assertLess(time.monotonic() - t0, HANG, name + " hung")
        c = b.counters()
        print("\nstopped daemon: %s" % c, file=sys.stderr)
        self.assertEqual(c["miss_reasons"].get("refused"), 6 * 2, "K and V of 6 pages refused")
        self.assertEqual(c["set_pages_failed"], 6)



def can_open_map_files():
    """Whether this process may open /proc/self/map_files (CAP_SYS_ADMIN or
    CAP_CHECKPOINT_RESTORE): how the backend finds the file behind SGLang's
    default (anonymous shared) host pool."""
    import mmap
    m = mmap.mmap(-1, mmap.PAGESIZE, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)
    try:
        from gpucache import shm
        a = shm.address_of(m)
        fd = os.open("/proc/self/map_files/%x-%x" % (a, a + mmap.PAGESIZE), os.O_RDWR)
        os.close(fd)
        return True
    except OSError:
        return False
    finally:
        m.close()


@unittest.skipUnless(HAVE_SGLANG, "SGLang is not installed: run with scripts/engines-env's python")
class UnixSocketTest(unittest.TestCase):
    """The backend on gpucached's Unix socket, over host pools SGLang
    allocates itself: its default pool is registered (GUARDED: shared
    anonymous memory cannot be sealed), written with PUT_OPAQUE_FROM and
    read with GET_INTO (the daemon's region_bytes_in and region_bytes_out
    count every byte); its "shm"
    allocator's memfd is unsealable, so gpucached refuses it, and the
    backend says so and uses the socket. Bytes are equal either way."""

    @classmethod
    def setUpClass(cls):
        from gpucached import Daemon
        cls.daemon = Daemon.start(unix=True)

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()

    def backend(self, pool):
        ex = {"backend_name": "gpucache", "module_path": "gpucache.sglang", "class_name": "GpucacheStorage",
              "interface_v1": 1, "addrs": [self.daemon.unix_addr], "tenant": "default", "timeout": HANG,
              "model_revision": self.id()}
        cfg = HiCacheStorageConfig(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
                                   is_mla_model=False, enable_storage_metrics=False, is_page_first_layout=True,
                                   model_name="acme/tiny-ci", extra_config=ex)
        b = StorageBackendFactory.create_backend("dynamic", cfg, pool)
        b.register_mem_pool_host(pool)
        self.addCleanup(b.close)
        return b

    def round_trip(self, b, pool):
        g = torch.Generator().manual_seed(13)
        pool.kv_buffer.copy_(torch.randn(pool.kv_buffer.shape, generator=g).to(pool.dtype))
        keys = get_hash_str([(11 * i) % 256 for i in range(8 * PAGE)], None, page_size=PAGE)[:6]
        want = [page_bytes(pool, i * PAGE) for i in range(6)]
        in0, out0 = self.daemon_stat(b)
        self.assertEqual(b.batch_set_v1(keys, slots(0, 6)), [True] * 6)
        pool.kv_buffer.zero_()
        self.assertEqual(b.batch_exists(keys), 6)
        self.assertEqual(b.batch_get_v1(keys, slots(20, 6)), [True] * 6)
        for i in range(6):
            self.assertEqual(page_bytes(pool, (20 + i) * PAGE), want[i], "page %d" % i)
        in1, out1 = self.daemon_stat(b)
        c = b.counters()
        c["daemon_region_bytes_in"], c["daemon_region_bytes_out"] = in1 - in0, out1 - out0
        c["page_bytes"] = sum(len(w) for w in want)
        return c

    @staticmethod
    def daemon_stat(b):
        """The daemon's region_bytes_in and region_bytes_out (open mode: the
        server-wide counters)."""
        st = b._client.stat()
        return st.get("region_bytes_in", 0), st.get("region_bytes_out", 0)

    def test_default_pool_is_written_and_read_through_its_region(self):
        pool = host_pool()
        if can_open_map_files():
            b = self.backend(pool)
            self.assertTrue(b.region_note.startswith("registered the host pool"), b.region_note)
            self.assertIn("guarded", b.region_note)
            c = self.round_trip(b, pool)
            self.assertEqual(c.get("region_get_into"), 12, c)  # K and V of 6 pages
            self.assertEqual(c.get("region_put_opaque_from"), 12, c)
            self.assertEqual((c["daemon_region_bytes_in"], c["daemon_region_bytes_out"]),
                             (c["page_bytes"], c["page_bytes"]), c)
        else:  # no capability to open the anonymous mapping's file: the socket, said once
            with self.assertLogs("gpucache.sglang", "WARNING") as logs:
                b = self.backend(pool)
            self.assertIn("no descriptor", logs.output[0])
            c = self.round_trip(b, pool)
            self.assertFalse(c.get("region_get_into"), c)
            self.assertFalse(c.get("region_put_opaque_from"), c)
            self.assertEqual((c["daemon_region_bytes_in"], c["daemon_region_bytes_out"]), (0, 0), c)

    def test_sglang_shm_allocator_memfd_is_refused(self):
        pool = host_pool(allocator_type="shm")
        self.assertIsNotNone(pool.fd)  # SGLang's memfd
        with self.assertLogs("gpucache.sglang", "WARNING") as logs:
            b = self.backend(pool)
        self.assertIn("not registered", logs.output[0])
        self.assertIn("sealed against shrinking", logs.output[0])
        c = self.round_trip(b, pool)
        self.assertFalse(c.get("region_get_into"), c)
        self.assertFalse(c.get("region_put_opaque_from"), c)
        self.assertEqual((c["daemon_region_bytes_in"], c["daemon_region_bytes_out"]), (0, 0), c)


if __name__ == "__main__":
    unittest.main()
