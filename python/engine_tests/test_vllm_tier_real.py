"""gpucache.vllm.GpucacheTier built and driven by vLLM's own tiering classes
on the CPU, against a real gpucached.

Everything on the vLLM side is vLLM 0.32's own code, called the way its
engine calls it:

- ``EngineArgs(...).create_engine_config()`` makes the VllmConfig, with the
  ``OffloadingConnector`` / ``TieringOffloadingSpec`` transfer config that
  names ``GpucacheTier`` by module path (docs/ENGINES.md);
- ``resolve_kv_cache_layout`` and ``get_kv_cache_configs`` make the
  KVCacheConfig, as the engine core does;
- ``build_offloading_config`` makes the OffloadingConfig, as the offloading
  connector does, ``OffloadingSpecFactory.create_spec`` the
  TieringOffloadingSpec, and ``spec.get_manager()`` the scheduler-side
  TieringOffloadingManager: a CPUPrimaryTierOffloadingManager over a
  SharedOffloadRegion mmap in /dev/shm, and the secondary tier, built by
  ``SecondaryTierFactory.create_secondary_tier`` from the tier config;
- jobs are vLLM's ``TransferJob`` and ``JobResult``, requests vLLM's
  ``ReqContext``, and keys vLLM's ``OffloadKey``: ``make_offload_key`` over
  the chained block hashes ``hash_block_tokens`` gives a prompt's blocks.

Made by hand here, and why: the per-layer KV specs (one
``FullAttentionSpec`` per attention layer, from the model's config.json:
block 32, 2 KV heads of 32, bf16). An engine gets them from a worker that has
loaded the model (``get_kv_cache_spec``); no worker runs here, because
vLLM's offloading worker (GPU <-> CPU copies) runs on CUDA, ROCm and XPU
only. For the same reason the primary slots are filled by the test (seeded
random bytes) where an engine's worker would copy them from its KV cache.

Completion is awaited through the tier's own interface: ``drain_jobs()``
blocks until every submitted job and lookup is finished, then
``get_finished_jobs()`` returns the results; lookups answer RETRY until the
tier's background answer is in. Loops over engine steps are bounded by a
count; nothing sleeps.

TierThroughVLLMTest drives the tier the manager built with jobs of its own;
TwoManagersTest leaves the driving to two TieringOffloadingManagers (two
engines' scheduler sides, each with its own primary region): A's
prepare_store / complete_store cascade to gpucache, B's lookup promotes from
it, and B's prepare_load names the slots that now hold A's bytes.

UnixSocketTierTest gives the tier a unix: address (gpucached's
unix_listen): the tier registers the file behind vLLM's own
SharedOffloadRegion (/dev/shm/vllm_offload_<engine_id>.mmap, found through
the view vLLM hands it), stores are PUT_OPAQUE_FROM straight from the
primary slots and loads GET_INTO straight into them (the daemon's
region_bytes_in and region_bytes_out count every byte), and vLLM still
closes its mmap at shutdown.

Run: cd python && GPUCACHE_BIN=/path/to/gpucached HF_HUB_OFFLINE=1 \\
    ../.cache/engines/venv/bin/python -m unittest engine_tests.test_vllm_tier_real -v
"""

import gc
import os
import random
import unittest

from engine_tests.common import HAVE_VLLM, setup_model, teardown_model

from gpucached import Daemon  # noqa: E402  (engine_tests.common puts python/tests on the path)

os.environ.setdefault("HF_HUB_OFFLINE", "1")

BLOCK_TOKENS = 32
CHUNKS = 16          # primary slots
N = 6                # blocks stored per test
TIER_LOGGER = "vllm.v1.kv_offload.cpu.shared_offload_region"
MAX_ROUNDS = 4       # engine steps a lookup may take: ask, answer, promote, ready


def tier_config(addr, **extra):
    # The client's deadline is generous so that a loaded machine does not
    # turn a healthy store into a failure; a stopped daemon refuses at once.
    cfg = {"type": "GpucacheTier", "module_path": "gpucache.vllm", "addrs": addr,
           "tenant": "default", "timeout": 30.0}
    cfg.update(extra)
    return cfg


def engine_config(model_dir, tiers):
    """VllmConfig and KVCacheConfig as a vLLM engine makes them for model_dir."""
    import torch
    from transformers import AutoConfig
    from vllm.config import KVTransferConfig, set_current_vllm_config
    from vllm.distributed.kv_transfer.kv_connector.utils import get_current_attn_backends
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.attention.backends.utils import (get_supported_kv_cache_layouts,
                                                  resolve_kv_cache_layout)
    from vllm.v1.core.kv_cache_utils import get_kv_cache_configs
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    hf = AutoConfig.from_pretrained(model_dir)
    # By hand: what a worker that loaded the model reports per attention layer.
    specs = {"model.layers.%d.self_attn.attn" % i:
             FullAttentionSpec(block_size=BLOCK_TOKENS, num_kv_heads=hf.num_key_value_heads,
                               head_size=hf.head_dim, dtype=torch.bfloat16)
             for i in range(hf.num_hidden_layers)}
    # The primary tier: CHUNKS chunks of one block each (a block is 16 KiB,
    # page-aligned, so no padding).
    bytes_per_block = sum(s.page_size_bytes for s in specs.values())
    extra = {"spec_name": "TieringOffloadingSpec", "secondary_tiers": tiers,
             "cpu_bytes_to_use": CHUNKS * bytes_per_block}
    args = EngineArgs(model=model_dir, dtype="bfloat16", block_size=BLOCK_TOKENS,
                      max_model_len=2048, enforce_eager=True, kv_cache_memory_bytes=64 << 20,
                      kv_transfer_config=KVTransferConfig(
                          kv_connector="OffloadingConnector", kv_role="kv_both",
                          kv_connector_extra_config=extra))
    vc = args.create_engine_config()
    with set_current_vllm_config(vc):
        layouts = [x.name for x in get_supported_kv_cache_layouts(get_current_attn_backends(vc))]
        resolve_kv_cache_layout(vc, [layouts], list(specs.values()))
    kvc = get_kv_cache_configs(vc, [specs], [64 << 20])[0]
    kvc.kv_cache_layout = vc.cache_config.kv_cache_layout
    return vc, kvc


def offloading_manager(vc, kvc):
    """The OffloadingSpec and scheduler-side manager vLLM builds from vc."""
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.config import \
        build_offloading_config
    from vllm.v1.kv_offload.factory import OffloadingSpecFactory

    spec = OffloadingSpecFactory.create_spec(build_offloading_config(vc, kvc))
    return spec, spec.get_manager()


def block_keys(label, n):
    """The OffloadKeys of a prompt's first n full blocks, as vLLM makes them:
    hash_block_tokens chains each block's token ids to its parent's hash
    (sha256, vLLM's default for prefix caching), make_offload_key appends the
    KV cache group (0). The prompt's token ids are drawn from the label."""
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core import kv_cache_utils
    from vllm.v1.kv_offload.base import make_offload_key

    hash_fn = get_hash_fn_by_name("sha256")
    kv_cache_utils.init_none_hash(hash_fn)
    rng = random.Random(label)
    parent, keys = None, []
    for _ in range(n):
        tokens = [rng.randrange(256) for _ in range(BLOCK_TOKENS)]
        parent = kv_cache_utils.hash_block_tokens(hash_fn, parent, tokens)
        keys.append(make_offload_key(parent, 0))
    return keys


def transfer_job(job_id, keys, slots, promotion, req_id="t"):
    """vLLM's TransferJob: keys into (promotion) or out of primary slots."""
    import numpy as np
    from vllm.v1.kv_offload.base import ReqContext
    from vllm.v1.kv_offload.tiering.base import TransferJob

    return TransferJob(job_id=job_id, keys=list(keys), chunk_ids=np.array(slots, dtype=np.int64),
                       is_promotion=promotion, req_context=ReqContext(req_id=req_id))


def run_job(test, tier, job):
    """Submit job and return its JobResult, from the tier's own interface:
    drain_jobs() blocks until it is finished, get_finished_jobs() has it."""
    (tier.submit_load if job.is_promotion else tier.submit_store)(job)
    tier.drain_jobs()
    done = list(tier.get_finished_jobs())
    test.assertEqual([r.job_id for r in done], [job.job_id])
    return done[0]


class Rows:
    """Slot i of a primary region (vLLM's 2-D view) as bytes. Close it before
    the manager shuts down: vLLM closes the mmap behind the view then."""

    def __init__(self, view):
        self.size = view.strides[0]
        self.flat = view.cast("B")

    def __getitem__(self, i):
        return bytes(self.flat[i * self.size:(i + 1) * self.size])

    def __setitem__(self, i, data):
        self.flat[i * self.size:(i + 1) * self.size] = data

    def close(self):
        self.flat.release()


def seeded(seed, n, size):
    rng = random.Random(seed)
    return [rng.randbytes(size) for _ in range(n)]


@unittest.skipUnless(HAVE_VLLM, "vLLM is not installed: run with scripts/engines-env's python")
class TierThroughVLLMTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        setup_model(cls, daemon=True)
        cls.tier_cfg = tier_config(cls.daemon.addr)
        cls.vc, cls.kvc = engine_config(cls.model, [dict(cls.tier_cfg)])
        cls.spec, cls.manager = offloading_manager(cls.vc, cls.kvc)
        cls.tier = cls.manager.secondary_tiers[0]
        cls.view = cls.manager.primary_tier.get_kv_memoryview()
        cls.block = cls.view.strides[0]
        cls.rows = Rows(cls.view)
        cls.job_id = 1000

    @classmethod
    def tearDownClass(cls):
        try:
            cls.rows.close()
            cls.manager.shutdown()
        finally:
            teardown_model(cls)

    # -- helpers --

    def job(self, keys, slots, promotion):
        type(self).job_id += 1
        return transfer_job(self.job_id, keys, slots, promotion)

    def run_job(self, tier, job):
        return run_job(self, tier, job)

    def lookups(self, tier, keys, req_id):
        """Each key's LookupResult once the tier's answers are in."""
        from vllm.v1.kv_offload.base import LookupResult, ReqContext

        ctx = ReqContext(req_id=req_id)
        tier.on_new_request(ctx)
        for _ in range(MAX_ROUNDS):
            got = [tier.lookup(k, ctx) for k in keys]
            if LookupResult.RETRY not in got:
                break
            tier.drain_jobs()
        tier.on_request_finished(ctx)
        return got

    def fill(self, slots, datas):
        for s, d in zip(slots, datas):
            self.rows[s] = d

    # -- the tests --

    def test_the_real_factory_built_the_tier(self):
        from vllm.v1.kv_offload.tiering.base import SecondaryTierManager
        from gpucache import vllm as gv

        self.assertIsInstance(self.tier, gv.GpucacheTier)
        self.assertIsInstance(self.tier, SecondaryTierManager)
        self.assertEqual(self.tier.tier_type, "GpucacheTier")
        self.assertIs(self.tier._offloading_spec, self.spec)
        self.assertEqual(type(self.spec).__name__, "TieringOffloadingSpec")
        self.assertEqual(self.view.shape[0], CHUNKS)
        # 2 layers x K,V x 32 tokens x 2 heads x 32 dims x 2 bytes
        self.assertEqual(self.block, 2 * 2 * 32 * 2 * 32 * 2)
        self.assertEqual(self.tier.block_size_bytes, self.block)
        ns = self.tier.namespace
        self.assertEqual(ns.model_id, self.model)
        self.assertEqual(ns.dtype, "bfloat16")
        self.assertEqual(ns.layout.layer_count, 2)
        self.assertEqual(ns.layout.block_tokens, BLOCK_TOKENS)

    def test_store_lookup_load_into_other_slots_bytes_equal(self):
        from vllm.v1.kv_offload.base import LookupResult
        from vllm.v1.kv_offload.tiering.base import JobResult

        keys = block_keys("roundtrip", N)
        datas = seeded(1, N, self.block)
        src = list(range(N))
        self.fill(src, datas)
        stored = self.run_job(self.tier, self.job(keys, src, promotion=False))
        self.assertIsInstance(stored, JobResult)
        self.assertTrue(stored.success)
        self.assertEqual(stored.transfer_bytes, N * self.block)
        self.assertGreaterEqual(stored.transfer_time, 0.0)  # set: vLLM's tiering write time

        self.assertEqual(self.lookups(self.tier, keys, "roundtrip"), [LookupResult.HIT] * N)

        dst = [CHUNKS - 1 - i for i in range(N)]  # other slots, reversed
        for s in dst:
            self.rows[s] = bytes(self.block)
        loaded = self.run_job(self.tier, self.job(keys, dst, promotion=True))
        self.assertTrue(loaded.success)
        self.assertEqual(loaded.transfer_bytes, N * self.block)
        for i, s in enumerate(dst):
            self.assertEqual(self.rows[s], datas[i], "slot %d (key %d)" % (s, i))
        for i, s in enumerate(src):
            self.assertEqual(self.rows[s], datas[i])

    def test_unknown_keys_miss(self):
        from vllm.v1.kv_offload.base import LookupResult

        keys = block_keys("never-stored", 3)
        self.assertEqual(self.lookups(self.tier, keys, "unknown"), [LookupResult.MISS] * 3)
        dst = [8, 9, 10]
        for s in dst:
            self.rows[s] = b"\x5a" * self.block
        r = self.run_job(self.tier, self.job(keys, dst, promotion=True))
        self.assertFalse(r.success)
        self.assertFalse(r.successful_keys)
        for s in dst:
            self.assertEqual(self.rows[s], b"\x5a" * self.block)

    def test_another_model_revision_misses(self):
        from vllm.v1.kv_offload.base import LookupResult
        from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory

        keys = block_keys("revision", 2)
        self.fill([0, 1], seeded(2, 2, self.block))
        self.assertTrue(self.run_job(self.tier, self.job(keys, [0, 1], promotion=False)).success)

        same = SecondaryTierFactory.create_secondary_tier(dict(self.tier_cfg), self.view, self.spec)
        other = SecondaryTierFactory.create_secondary_tier(
            dict(self.tier_cfg, model_revision="rev-2"), self.view, self.spec)
        try:
            self.assertEqual(same.namespace, self.tier.namespace)
            self.assertNotEqual(other.namespace, self.tier.namespace)
            self.assertEqual(self.lookups(same, keys, "same"), [LookupResult.HIT] * 2)
            self.assertEqual(self.lookups(other, keys, "other"), [LookupResult.MISS] * 2)
            r = self.run_job(other, self.job(keys, [12, 13], promotion=True))
            self.assertFalse(r.success)
        finally:
            same.shutdown()
            other.shutdown()

    def test_stopped_daemon_fails_jobs(self):
        from vllm.v1.kv_offload.base import LookupResult
        from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory

        d = Daemon.start()
        tier = SecondaryTierFactory.create_secondary_tier(
            tier_config(d.addr), self.view, self.spec)
        try:
            keys = block_keys("stopped", 2)
            self.fill([2, 3], seeded(3, 2, self.block))
            self.assertTrue(self.run_job(tier, self.job(keys[:1], [2], promotion=False)).success)
            d.stop()
            r = self.run_job(tier, self.job(keys[1:], [3], promotion=False))
            self.assertFalse(r.success)
            self.assertEqual(self.lookups(tier, keys, "stopped"), [LookupResult.MISS] * 2)
            r = self.run_job(tier, self.job(keys[:1], [11], promotion=True))
            self.assertFalse(r.success)
            self.assertGreaterEqual(tier.stats().get("stores_failed", 0), 1)
            self.assertGreaterEqual(tier.stats().get("loads_failed", 0), 1)
        finally:
            d.stop()
            tier.shutdown()

    def test_backpressure_config_reaches_the_tier(self):
        from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory

        tier = SecondaryTierFactory.create_secondary_tier(
            dict(self.tier_cfg, backpressure={"backpressure_cls": "EMABackpressureDetector"}),
            self.view, self.spec)
        try:
            self.assertIsNotNone(tier.bp_detector)
            self.assertEqual(type(tier.bp_detector).__name__, "EMABackpressureDetector")
        finally:
            tier.shutdown()


@unittest.skipUnless(HAVE_VLLM, "vLLM is not installed: run with scripts/engines-env's python")
class TwoManagersTest(unittest.TestCase):
    def setUp(self):
        setup_model(self, daemon=True)
        self.addCleanup(teardown_model, self)

    """Two scheduler-side TieringOffloadingManagers, each with its own
    primary region and GpucacheTier, as two engines have: A stores blocks
    (GPU -> primary is the test's copy, primary -> gpucache is vLLM's
    cascade), B finds them through vLLM's lookup, promotes them into its own
    primary region, and prepare_load names the slots that hold A's bytes."""

    def test_cascade_in_one_engine_promotion_in_another(self):
        from vllm.v1.kv_offload.base import LookupResult, ReqContext, ScheduleEndContext

        model, d = self.model, self.daemon

        end = ScheduleEndContext(new_req_ids=(), preempted_req_ids=())
        vc_a, kvc_a = engine_config(model, [tier_config(d.addr)])
        _, a = offloading_manager(vc_a, kvc_a)
        self.addCleanup(a.shutdown)
        vc_b, kvc_b = engine_config(model, [tier_config(d.addr)])
        _, b = offloading_manager(vc_b, kvc_b)
        self.addCleanup(b.shutdown)
        self.assertNotEqual(vc_a.kv_transfer_config.engine_id, vc_b.kv_transfer_config.engine_id)
        view_a = Rows(a.primary_tier.get_kv_memoryview())
        self.addCleanup(view_a.close)
        view_b = Rows(b.primary_tier.get_kv_memoryview())
        self.addCleanup(view_b.close)
        block = view_a.size

        keys = block_keys("two-engines", N)
        datas = seeded(4, N, block)

        # Engine A: primary store, the worker's copy, complete_store cascades.
        ctx = ReqContext(req_id="a-1")
        a.on_new_request(ctx)
        out = a.prepare_store(keys, ctx)
        self.assertEqual(list(out.keys_to_store), keys)
        for k, slot in zip(out.keys_to_store, out.store_spec.chunk_ids):
            view_a[int(slot)] = datas[keys.index(k)]
        a.complete_store(keys, ctx)
        a.on_request_finished(ctx)
        a.on_schedule_end(end)
        for _ in range(MAX_ROUNDS):
            if not a.has_pending_work():
                break
            a.secondary_tiers[0].drain_jobs()
            a.on_schedule_end(end)
        self.assertFalse(a.has_pending_work())
        self.assertEqual(a.secondary_tiers[0].stats().get("stores_ok"), 1)

        # Engine B: nothing in its primary; lookup goes to gpucache.
        ctx = ReqContext(req_id="b-1")
        b.on_new_request(ctx)
        tier_b = b.secondary_tiers[0]
        seen = []
        for _ in range(MAX_ROUNDS + 1):
            got = [b.lookup(k, ctx) for k in keys]
            seen.append(got)
            if got == [LookupResult.HIT] * N:
                break
            b.on_schedule_end(end)   # flushes promotions into submit_load
            tier_b.drain_jobs()
        self.assertEqual(got, [LookupResult.HIT] * N, "lookups per step: %s" % seen)
        self.assertEqual(seen[0], [LookupResult.RETRY] * N)
        spec = b.prepare_load(keys, ctx)
        for i, slot in enumerate(spec.chunk_ids):
            self.assertEqual(view_b[int(slot)], datas[i], "key %d in B's slot %d" % (i, slot))
        b.complete_load(keys, ctx)
        b.on_request_finished(ctx)
        b.on_schedule_end(end)
        self.assertEqual(tier_b.stats().get("loads_ok"), 1)
        self.assertEqual(tier_b.stats().get("bytes_loaded"), N * block)

    def test_shutdown_lets_vllm_close_its_region(self):
        # vLLM shuts its secondary tiers down, then releases the primary
        # view and closes the mmap behind it: nothing of the tier may still
        # export that memory, even after a job failed on a refused
        # connection (whose traceback once held the job's buffers).
        model, d = self.model, self.daemon
        vc, kvc = engine_config(model, [tier_config(d.addr)])
        _, m = offloading_manager(vc, kvc)
        tier = m.secondary_tiers[0]
        keys = block_keys("shutdown", 2)
        self.assertTrue(run_job(self, tier, transfer_job(1, keys, [0, 1], False)).success)
        d.stop()
        # Whatever the failure leaves for the cycle collector stays there
        # until shutdown, as it may in an engine: no collection in between.
        gc.disable()
        self.addCleanup(gc.enable)
        # The first job finds the pooled connection dead, the second dials
        # and is refused.
        self.assertFalse(run_job(self, tier, transfer_job(2, keys, [0, 1], False)).success)
        self.assertFalse(run_job(self, tier, transfer_job(3, keys, [2, 3], True)).success)
        region = m.primary_tier._mmap_region
        path = region.mmap_path
        self.assertTrue(os.path.exists(path))
        with self.assertNoLogs(TIER_LOGGER, "WARNING"):
            m.shutdown()
        gc.enable()
        self.assertIsNone(region.mmap_obj)
        self.assertFalse(os.path.exists(path))


@unittest.skipUnless(HAVE_VLLM, "vLLM is not installed: run with scripts/engines-env's python")
class UnixSocketTierTest(unittest.TestCase):
    def setUp(self):
        setup_model(self)
        self.addCleanup(teardown_model, self)
        self.daemon = Daemon.start(unix=True)

    def test_stores_and_loads_copy_through_vllms_offload_file(self):
        vc, kvc = engine_config(self.model, [tier_config(self.daemon.unix_addr)])
        _, m = offloading_manager(vc, kvc)
        region = m.primary_tier._mmap_region
        tier = m.secondary_tiers[0]
        rows = Rows(m.primary_tier.get_kv_memoryview())
        try:
            self.assertEqual(region.mmap_path, "/dev/shm/vllm_offload_%s.mmap" % vc.kv_transfer_config.engine_id)
            self.assertTrue(tier.region_note.startswith("registered %s" % region.mmap_path), tier.region_note)
            self.assertIn("guarded", tier.region_note)  # a /dev/shm file cannot be sealed
            keys = block_keys("unix", N)
            datas = seeded(5, N, rows.size)
            for i in range(N):
                rows[i] = datas[i]
            self.assertTrue(run_job(self, tier, transfer_job(1, keys, list(range(N)), False)).success)
            for i in range(CHUNKS):
                rows[i] = bytes(rows.size)
            dst = [CHUNKS - 1 - i for i in range(N)]
            loaded = run_job(self, tier, transfer_job(2, keys, dst, True))
            self.assertTrue(loaded.success)
            for i, s in enumerate(dst):
                self.assertEqual(rows[s], datas[i], "slot %d (key %d)" % (s, i))
            st = tier.stats()
            self.assertEqual(st.get("region_put_opaque_from"), N, st)
            self.assertEqual(st.get("region_get_into"), N, st)
            self.assertFalse([k for k in st if k.startswith("region_fallback")], st)
            self.assertEqual(self.daemon_stat("region_bytes_in"), N * rows.size)
            self.assertEqual(self.daemon_stat("region_bytes_out"), N * rows.size)
        finally:
            rows.close()
            with self.assertNoLogs(TIER_LOGGER, "WARNING"):
                m.shutdown()  # the tier unregisters first: vLLM closes its mmap
        self.assertIsNone(region.mmap_obj)

    def daemon_stat(self, name):
        from gpucache import Client
        c = Client([self.daemon.addr], tenant="default")
        try:
            return c.stat().get(name, 0)
        finally:
            c.close()


if __name__ == "__main__":
    unittest.main()
