"""gpucache.vllm.GpucacheTier driven the way vLLM's TieringOffloadingManager
drives a secondary tier: submit_store from primary slots, wipe the primary
region, lookup (RETRY, then HIT/MISS), submit_load into other slots, compare
bytes, get_finished_jobs, drain_jobs, shutdown. Against an in-memory client
(fakeclient_vllm.FakeClient); test_vllm_real.py runs the same against a real
gpucached.

Run: cd python && /usr/bin/python3 -m unittest discover -s tests -p 'test_vllm_*.py' -v

Stand-ins: the offloading spec (a SimpleNamespace of vLLM's newer config
shape) and the in-memory client, so the tier's job logic runs without vLLM
or a daemon. vLLM's real classes (EngineArgs, OffloadingSpecFactory,
TieringOffloadingManager, TransferJob, OffloadKey) drive the same tier in
engine_tests/test_vllm_tier_real.py, which runs wherever the engines
environment exists (CI always builds it).
"""

import importlib
import os
import sys
import threading
import types
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from fakeclient_vllm import FakeClient  # noqa: E402
from gpucache import vllm as gv  # noqa: E402

NUM_BLOCKS = 8
BLOCK_BYTES = 4096


def new_spec(model="acme/tiny-llm", dtype="float16", rank=0, tp_size=1):
    """An OffloadingSpec of the newer shape (offloading_spec.config)."""
    return types.SimpleNamespace(
        config=types.SimpleNamespace(
            model=types.SimpleNamespace(name=model, dtype=dtype),
            parallel=types.SimpleNamespace(tp_size=tp_size, pp_size=1, rank=rank,
                                           pcp_size=1, dcp_size=1),
            cache=types.SimpleNamespace(tokens_per_block=16, tokens_per_hash=16),
        ),
        blocks_per_chunk=1,
    )


def old_vllm_config():
    """A VllmConfig of the older shape (model_config, parallel_config, ...)."""
    hf = types.SimpleNamespace(num_hidden_layers=8, num_attention_heads=8,
                               num_key_value_heads=2, hidden_size=512,
                               rope_theta=10000.0, rope_scaling=None)
    return types.SimpleNamespace(
        model_config=types.SimpleNamespace(model="acme/tiny-llm", dtype="torch.bfloat16",
                                           revision="r7", tokenizer_revision=None,
                                           hf_config=hf),
        parallel_config=types.SimpleNamespace(tensor_parallel_size=2,
                                              pipeline_parallel_size=1, rank=1),
        cache_config=types.SimpleNamespace(block_size=16, cache_dtype="fp8_e4m3"),
    )


def primary(num_blocks=NUM_BLOCKS, block_bytes=BLOCK_BYTES):
    """The CPU tier's region as vLLM hands it over: a 2-D memoryview."""
    return memoryview(bytearray(num_blocks * block_bytes)).cast("B", (num_blocks, block_bytes))


def key(i, group=0):
    """An OffloadKey: a 32-byte block hash plus a 4-byte big-endian group."""
    return bytes([i]) * 32 + group.to_bytes(4, "big")


def row(view, slot):
    """Slot `slot` of the primary region as flat bytes."""
    return view.cast("B")[slot * BLOCK_BYTES:(slot + 1) * BLOCK_BYTES]


def fill(view, slot, seed):
    r = row(view, slot)
    r[:] = bytes((seed * 31 + j * 7) & 0xFF for j in range(r.nbytes))


class TierTest(unittest.TestCase):
    def make(self, client=None, spec=None, view=None, **cfg):
        client = client or FakeClient()
        view = view if view is not None else primary()
        cfg.setdefault("tenant", "acme")
        tier = gv.GpucacheTier(offloading_spec=spec or new_spec(), primary_kv_view=view,
                               tier_type="GpucacheTier", client=client, **cfg)
        self.addCleanup(tier.shutdown)
        return tier, client, view

    def settle(self, tier, keys, req=None):
        """lookup each key until answered; drain_jobs waits for the answers."""
        first = [tier.lookup(k, req) for k in keys]
        tier.drain_jobs()
        return first, [tier.lookup(k, req) for k in keys]

    def finished(self, tier):
        return {r.job_id: r.success for r in tier.get_finished_jobs()}

    def test_store_wipe_lookup_load_compare_drain(self):
        tier, client, view = self.make()
        for s in range(4):
            fill(view, s, s + 1)
        before = [bytes(row(view, s)) for s in range(4)]
        keys = [key(s + 1) for s in range(4)]
        tier.submit_store(gv.JobMetadata(1, keys, [0, 1, 2, 3], False,  # block_ids or chunk_ids
                                         gv.ReqContext(req_id="")))
        tier.drain_jobs()
        self.assertEqual(self.finished(tier), {1: True})
        self.assertEqual(self.finished(tier), {})  # each result is reported once

        view.cast("B")[:] = bytes(NUM_BLOCKS * BLOCK_BYTES)  # wipe the primary region
        req = gv.ReqContext(req_id="r1")
        tier.on_new_request(req)
        first, then = self.settle(tier, keys + [key(99)], req)
        self.assertEqual(first, [gv._answer(None)] * 5)  # RETRY: answered off-thread
        self.assertEqual(then, [gv._answer(True)] * 4 + [gv._answer(False)])

        slots = [7, 6, 5, 4]
        tier.submit_load(gv.JobMetadata(2, keys, slots, True, req))
        tier.drain_jobs()
        self.assertEqual(self.finished(tier), {2: True})
        for i, s in enumerate(slots):
            self.assertEqual(bytes(row(view, s)), before[i], "slot %d" % s)
        for s in range(4):
            self.assertEqual(bytes(row(view, s)), bytes(BLOCK_BYTES))  # untouched
        st = tier.stats()
        self.assertEqual((st["stores_ok"], st["loads_ok"]), (1, 1))
        self.assertEqual(st["bytes_loaded"], 4 * BLOCK_BYTES)
        tier.on_request_finished(req)
        self.assertFalse(tier.has_pending_work())

    def test_a_missing_middle_block_fails_the_load(self):
        tier, client, view = self.make()
        fill(view, 0, 1)
        fill(view, 2, 3)
        tier.submit_store(gv.JobMetadata(1, [key(1), key(3)], [0, 2], False, gv.ReqContext(req_id="")))
        tier.drain_jobs()
        want0 = bytes(row(view, 0))
        _, then = self.settle(tier, [key(1), key(2), key(3)], gv.ReqContext(req_id="r"))
        self.assertEqual(then, [gv._answer(True), gv._answer(False), gv._answer(True)])
        tier.submit_load(gv.JobMetadata(2, [key(1), key(2), key(3)], [5, 6, 7], True,
                                        gv.ReqContext(req_id="")))
        tier.drain_jobs()
        res = list(tier.get_finished_jobs())
        self.assertEqual({r.job_id: r.success for r in res}, {1: True, 2: False})
        self.assertEqual(bytes(row(view, 5)), want0)  # the leading hit landed
        self.assertEqual(tier.stats()["loads_failed"], 1)

    def test_scheduler_calls_never_block_on_io(self):
        tier, client, view = self.make()
        client.gate.clear()  # every client call now waits
        fill(view, 0, 5)
        req = gv.ReqContext(req_id="r")
        tier.submit_store(gv.JobMetadata(1, [key(1)], [0], False, req))
        tier.submit_load(gv.JobMetadata(2, [key(1)], [1], True, req))
        self.assertEqual(tier.lookup(key(1), req), gv._answer(None))
        self.assertEqual(tier.lookup(key(1), req), gv._answer(None))  # asked once
        self.assertEqual(list(tier.get_finished_jobs()), [])
        self.assertTrue(tier.has_pending_work())
        tier.on_schedule_end(None)
        client.gate.set()
        tier.drain_jobs()
        self.assertEqual(set(self.finished(tier)), {1, 2})
        self.assertLessEqual(client.calls["lookup"], 2)

    def test_drain_waits_for_every_job(self):
        tier, client, view = self.make(store_threads=3, load_threads=1)
        client.gate.clear()
        for j in range(6):
            fill(view, j, j)
            tier.submit_store(gv.JobMetadata(j, [key(j + 1)], [j], False, gv.ReqContext(req_id="")))
        drained = threading.Event()

        def drain():
            tier.drain_jobs()
            drained.set()

        t = threading.Thread(target=drain)
        t.start()
        self.assertFalse(drained.is_set())
        client.gate.set()
        t.join()
        self.assertEqual(self.finished(tier), {j: True for j in range(6)})

    def test_another_model_rank_dtype_or_tenant_misses(self):
        shared = {}
        tier, _, view = self.make(client=FakeClient(shared))
        fill(view, 0, 9)
        tier.submit_store(gv.JobMetadata(1, [key(1)], [0], False, gv.ReqContext(req_id="")))
        tier.drain_jobs()
        others = [
            dict(spec=new_spec(model="acme/other-llm")),
            dict(spec=new_spec(dtype="bfloat16")),
            dict(spec=new_spec(rank=1, tp_size=2)),
            dict(tenant="globex"),
            dict(model_revision="r2"),
        ]
        same = self.make(client=FakeClient(shared))[0]
        _, then = self.settle(same, [key(1)], gv.ReqContext(req_id="x"))
        self.assertEqual(then, [gv._answer(True)])
        for cfg in others:
            other, _, oview = self.make(client=FakeClient(shared), **cfg)
            _, then = self.settle(other, [key(1)], gv.ReqContext(req_id="x"))
            self.assertEqual(then, [gv._answer(False)], cfg)
            other.submit_load(gv.JobMetadata(2, [key(1)], [3], True, gv.ReqContext(req_id="")))
            other.drain_jobs()
            self.assertEqual(self.finished(other), {2: False}, cfg)
            self.assertEqual(bytes(row(oview, 3)), bytes(BLOCK_BYTES))

    def test_a_dead_daemon_is_a_miss_and_a_failed_job(self):
        tier, client, view = self.make()
        client.down = True
        fill(view, 0, 1)
        tier.submit_store(gv.JobMetadata(1, [key(1)], [0], False, gv.ReqContext(req_id="")))
        tier.submit_load(gv.JobMetadata(2, [key(1)], [1], True, gv.ReqContext(req_id="")))
        _, then = self.settle(tier, [key(1)], gv.ReqContext(req_id="r"))
        self.assertEqual(then, [gv._answer(False)])
        self.assertEqual(self.finished(tier), {1: False, 2: False})

    def test_a_raising_client_is_a_miss_and_drain_returns(self):
        tier, client, view = self.make()

        def boom(*a, **k):
            raise OSError("connection reset")

        client.lookup = client.get_into = client.put_opaque = boom
        req = gv.ReqContext(req_id="r")
        tier.submit_store(gv.JobMetadata(1, [key(1)], [0], False, req))
        tier.submit_load(gv.JobMetadata(2, [key(1)], [1], True, req))
        _, then = self.settle(tier, [key(1), key(2)], req)
        self.assertEqual(then, [gv._answer(False), gv._answer(False)])
        tier.drain_jobs()
        self.assertEqual(self.finished(tier), {1: False, 2: False})

    def test_bad_jobs_fail_without_raising(self):
        tier, client, view = self.make()
        tier.submit_store(gv.JobMetadata(1, [key(1)], [NUM_BLOCKS], False, gv.ReqContext(req_id="")))
        tier.submit_load(gv.JobMetadata(2, [key(1), key(2)], [0], True, gv.ReqContext(req_id="")))
        tier.submit_store(gv.JobMetadata(3, [b""], [0], False, gv.ReqContext(req_id="")))
        tier.drain_jobs()
        self.assertEqual(self.finished(tier), {1: False, 2: False, 3: False})
        self.assertEqual(tier.lookup(b"", gv.ReqContext(req_id="")), gv._answer(False))

    def test_shutdown_stops_threads_and_later_jobs_fail(self):
        client = FakeClient()
        tier = gv.GpucacheTier(offloading_spec=new_spec(), primary_kv_view=primary(),
                               tier_type="GpucacheTier", client=client, tenant="acme")
        tier.lookup(key(1), gv.ReqContext(req_id="r"))
        tier.shutdown()
        tier.shutdown()  # idempotent
        names = [t.name for t in threading.enumerate()]
        self.assertFalse([n for n in names if n.startswith("gpucache-vllm")], names)
        tier.submit_store(gv.JobMetadata(1, [key(1)], [0], False, gv.ReqContext(req_id="")))
        self.assertEqual(self.finished(tier), {1: False})
        self.assertFalse(client.closed)  # a client passed in belongs to the caller


class ConfigTest(unittest.TestCase):
    def test_loaded_like_secondary_tier_factory(self):
        # SecondaryTierFactory.get_tier_class: import module_path, getattr(type).
        cfg = {"type": "GpucacheTier", "module_path": "gpucache.vllm", "tenant": "acme",
               "client": FakeClient()}
        cls = getattr(importlib.import_module(cfg["module_path"]), cfg["type"])
        self.assertTrue(issubclass(cls, gv.SecondaryTierManager))
        rest = {k: v for k, v in cfg.items() if k not in ("type", "module_path")}
        for first in ("offloading_spec", "vllm_config"):
            spec = new_spec() if first == "offloading_spec" else old_vllm_config()
            tier = cls(**{first: spec}, primary_kv_view=primary(), tier_type=cfg["type"], **rest)
            self.assertEqual(tier.tier_type, "GpucacheTier")
            tier.shutdown()

    def test_namespace_from_the_newer_config(self):
        ns = gv.bind_namespace(new_spec(rank=1, tp_size=2), {"tenant": "acme",
                                                             "trust_domain": "prod"})
        self.assertEqual((ns.tenant, ns.trust_domain, ns.model_id), ("acme", "prod",
                                                                     "acme/tiny-llm"))
        self.assertEqual(ns.quantization, "none")
        self.assertEqual((ns.layout.tp_rank, ns.layout.tp_size, ns.layout.block_tokens),
                         (1, 2, 16))

    def test_namespace_from_an_older_vllm_config(self):
        ns = gv.bind_namespace(old_vllm_config(), {"tenant": "acme"})
        self.assertEqual(ns.config_revision, "r7")
        self.assertEqual(ns.quantization, "fp8_e4m3")
        self.assertEqual(getattr(ns, "dtype", getattr(ns, "d_type", None)), "bfloat16")
        lay = ns.layout
        self.assertEqual((lay.tp_rank, lay.tp_size, lay.layer_count, lay.kv_heads,
                          lay.head_dim, lay.block_tokens), (1, 2, 8, 1, 64, 16))
        self.assertTrue(ns.rope.startswith("theta=10000"))

    def test_bad_config_is_a_clear_error(self):
        with self.assertRaisesRegex(ValueError, "gpucache/vllm: .*tenant"):
            gv.GpucacheTier(offloading_spec=new_spec(), primary_kv_view=primary(),
                            tier_type="GpucacheTier", client=FakeClient())
        with self.assertRaisesRegex(ValueError, "gpucache/vllm: .*block_bytes"):
            gv.GpucacheTier(offloading_spec=new_spec(), primary_kv_view=memoryview(bytearray(100)),
                            tier_type="GpucacheTier", client=FakeClient(), tenant="acme")
        with self.assertRaisesRegex(ValueError, "gpucache/vllm: no model"):
            gv.bind_namespace(types.SimpleNamespace(), {"tenant": "acme"})


if __name__ == "__main__":
    unittest.main()
