"""How gpucache.vllm binds to vLLM's tiering interface.

Where vLLM is installed the module must bind to vLLM's own classes (vLLM's
SecondaryTierFactory refuses a subclass of anything else), adapt to the job
type that vLLM has (TransferJob with chunk_ids, or the older JobMetadata
with block_ids), and refuse at import an interface it cannot serve. These
tests load the module beside a minimal module tree that has only the names
in question: stand-ins of vLLM's module tree, kept because they reproduce
interfaces (older trees, vLLM 0.34.0) that the installed vLLM 0.32 does
not have and that cannot run on this CPU (docs/ENGINES.md, "Versions
probed"); the real vLLM 0.32 classes are exercised by the engine tests.

NewestShapeTest reproduces the tiering interface of the newest vLLM release,
0.34.0, read from its wheel on PyPI (vllm-0.34.0-cp38-abi3-manylinux_2_28_x86_64,
files dated 2026-11-16: vllm/v1/kv_offload/tiering/base.py and factory.py,
vllm/v1/kv_offload/base.py), written here from reading it. Against the 0.32
the engine tests run, 0.33 adds to SecondaryTierManager a
tolerates_off_thread_polling class flag and config_info_keys/config_info
(defaults provided); 0.34 adds JobResult.deferred_release (an Event for a
failed promotion whose I/O may still write; None when it has ended) and
drops touch from the base class. Upstream main itself could not be read whole here (its
snapshot is over the fetch limit, and the searchable index's stored versions
of base.py carry no dates and are older than 0.34: none has
deferred_release).
"""

import dataclasses
import importlib.machinery
import importlib.util
import os
import sys
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

SOURCE = os.path.join(os.path.dirname(HERE), "gpucache", "vllm.py")


def fake_vllm(**names):
    """A module tree vllm.v1.kv_offload.tiering.base holding names."""
    mods = {}
    for name in ("vllm", "vllm.v1", "vllm.v1.kv_offload", "vllm.v1.kv_offload.tiering",
                 "vllm.v1.kv_offload.tiering.base"):
        m = types.ModuleType(name)
        m.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
        m.__path__ = []
        mods[name] = m
    mods["vllm"].__version__ = "0.0-test"
    for k, v in names.items():
        setattr(mods["vllm.v1.kv_offload.tiering.base"], k, v)
    mods["vllm.v1.kv_offload.tiering"].base = mods["vllm.v1.kv_offload.tiering.base"]
    return mods


def load_with(mods):
    """Execute gpucache/vllm.py as a fresh module while mods are importable."""
    saved = {k: sys.modules.get(k) for k in mods}
    sys.modules.update(mods)
    try:
        spec = importlib.util.spec_from_file_location("gpucache_vllm_under_test", SOURCE)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod  # dataclasses look their module up
        try:
            spec.loader.exec_module(mod)
        finally:
            sys.modules.pop(spec.name, None)
        return mod
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


class Base:
    def __init__(self, offloading_spec, primary_kv_view, tier_type, backpressure_detector=None):
        self._offloading_spec = offloading_spec
        self._primary_kv_view = primary_kv_view
        self.tier_type = tier_type


@dataclasses.dataclass
class TransferJob:
    job_id: int
    keys: object
    chunk_ids: object
    is_promotion: bool
    req_context: object


@dataclasses.dataclass
class JobResult:
    job_id: int
    success: bool
    successful_keys: object = None
    transfer_time: object = None
    transfer_bytes: object = None


class BindingTest(unittest.TestCase):
    def test_binds_to_the_real_base_and_transfer_job(self):
        # vLLM 0.32's shape: TransferJob, no JobMetadata. A stand-in base
        # here would be refused by vLLM's factory.
        mod = load_with(fake_vllm(SecondaryTierManager=Base, TransferJob=TransferJob, JobResult=JobResult))
        self.assertTrue(mod.HAVE_VLLM)
        self.assertIs(mod.SecondaryTierManager, Base)
        self.assertTrue(issubclass(mod.GpucacheTier, Base))
        self.assertIs(mod.JobMetadata, TransferJob)
        r = mod._job_result(7, True, nbytes=4096)
        self.assertIsInstance(r, JobResult)
        self.assertEqual(r.transfer_bytes, 4096)

    def test_missing_names_fail_at_import(self):
        with self.assertRaises(ImportError) as cm:
            load_with(fake_vllm(SecondaryTierManager=Base, JobResult=JobResult))
        self.assertIn("TransferJob (or JobMetadata)", str(cm.exception))
        self.assertIn("0.0-test", str(cm.exception))
        with self.assertRaises(ImportError) as cm:
            load_with(fake_vllm(TransferJob=TransferJob, JobResult=JobResult))
        self.assertIn("SecondaryTierManager", str(cm.exception))

    def test_without_vllm_the_stand_ins_are_used(self):
        if importlib.util.find_spec("vllm") is not None:
            self.skipTest("vLLM is installed here: engine_tests/test_vllm_*.py run the real classes instead")
        mod = load_with({})
        self.assertFalse(mod.HAVE_VLLM)
        self.assertTrue(dataclasses.is_dataclass(mod.JobMetadata))


# --- vLLM 0.34.0's tiering interface, written from reading it ---------------

def newest_vllm(base_extra=None, result_extra=None, job_fields=None):
    """A module tree with vLLM 0.34.0's kv_offload.base, tiering.base and
    tiering.factory shapes. base_extra adds attributes (abstract methods) to
    SecondaryTierManager, result_extra fields to JobResult; job_fields
    replaces TransferJob's slot field name."""
    import abc
    import enum
    import importlib
    import time
    import typing

    mods = fake_vllm()
    mods["vllm"].__version__ = "0.34.0-shape"
    kb = types.ModuleType("vllm.v1.kv_offload.base")
    kb.__spec__ = importlib.machinery.ModuleSpec(kb.__name__, None)
    kb.OffloadKey = typing.NewType("OffloadKey", bytes)
    kb.make_offload_key = lambda h, g: kb.OffloadKey(h + g.to_bytes(4, "big", signed=False))

    class LookupResult(enum.Enum):
        MISS = enum.auto()
        HIT = enum.auto()
        HIT_PENDING = enum.auto()
        RETRY = enum.auto()

    class OffloadPolicy(enum.Enum):
        CHUNK_LEVEL = "chunk_level"
        REQUEST_LEVEL = "request_level"

    @dataclasses.dataclass
    class RequestOffloadingContext:
        policy: OffloadPolicy = OffloadPolicy.CHUNK_LEVEL

    @dataclasses.dataclass
    class ReqContext:
        req_id: str
        kv_transfer_params: object = None

        @property
        def num_prompt_tokens(self):
            return None

    kb.LookupResult, kb.OffloadPolicy = LookupResult, OffloadPolicy
    kb.RequestOffloadingContext, kb.ReqContext = RequestOffloadingContext, ReqContext
    mods["vllm.v1.kv_offload.base"] = kb
    mods["vllm.v1.kv_offload"].base = kb

    slot_field = job_fields or "chunk_ids"
    TransferJob = dataclasses.make_dataclass("TransferJob", [
        ("job_id", int), ("keys", object), (slot_field, object), ("is_promotion", bool),
        ("req_context", object),
        ("submit_time", float, dataclasses.field(default_factory=time.monotonic))])
    result_fields = list(result_extra or []) + [
        ("successful_keys", object, dataclasses.field(default=None)),
        ("transfer_time", object, dataclasses.field(default=None)),
        ("transfer_bytes", object, dataclasses.field(default=None)),
        ("deferred_release", object, dataclasses.field(default=None))]
    JobResult = dataclasses.make_dataclass(
        "JobResult", [("job_id", int), ("success", bool)] + result_fields)

    class SecondaryTierManager(abc.ABC):
        medium = None
        tolerates_off_thread_polling = False

        def __init__(self, offloading_spec, primary_kv_view, tier_type,
                     backpressure_detector=None):
            self._offloading_spec = offloading_spec
            self._primary_kv_view = primary_kv_view
            assert primary_kv_view.strides is not None
            self._block_size_bytes = primary_kv_view.strides[0]
            self.tier_type = tier_type
            self.locality = None
            self._bp_detector = backpressure_detector

        @property
        def block_size_bytes(self):
            return self._block_size_bytes

        @property
        def bp_detector(self):
            return self._bp_detector

        @abc.abstractmethod
        def lookup(self, key, req_context): ...

        @abc.abstractmethod
        def submit_store(self, job_metadata): ...

        @abc.abstractmethod
        def submit_load(self, job_metadata): ...

        @abc.abstractmethod
        def get_finished_jobs(self): ...

        def has_pending_work(self):
            return False

        def take_events(self):
            return ()

        @abc.abstractmethod
        def on_new_request(self, req_context): ...

        def on_request_finished(self, req_context):
            return

        def serve_external_requests(self, parent):
            return

        def on_schedule_end(self, context):
            return

        @abc.abstractmethod
        def drain_jobs(self): ...

        def shutdown(self):
            return

        @classmethod
        def build_metric_definitions(cls, extra_config):
            return {}

        def get_stats(self):
            return None

        @classmethod
        def config_info_keys(cls, tier_config):
            return ()

        def config_info(self):
            return {}

    for name, value in (base_extra or {}).items():
        setattr(SecondaryTierManager, name, value)
    if base_extra:  # recompute what is abstract, as ABCMeta does for a new class
        abc.update_abstractmethods(SecondaryTierManager)

    tb = mods["vllm.v1.kv_offload.tiering.base"]
    tb.TransferJob, tb.JobResult, tb.SecondaryTierManager = TransferJob, JobResult, SecondaryTierManager
    tb.JobId = int

    class Detector:
        def __init__(self, **config):
            self.config = config

    class SecondaryTierFactory:
        """vLLM 0.34's factory, for an out-of-tree tier named by module_path."""

        @classmethod
        def get_tier_class(cls, tier_config):
            tier_cls = getattr(importlib.import_module(tier_config["module_path"]),
                               tier_config["type"])
            assert issubclass(tier_cls, SecondaryTierManager)
            return tier_cls

        @classmethod
        def create_secondary_tier(cls, tier_config, primary_kv_view, offloading_spec):
            tier_cls = cls.get_tier_class(tier_config)
            config = dict(tier_config)
            tier_type = config.pop("type")
            config.pop("module_path", None)
            bp = config.pop("backpressure", None)
            detector = Detector(**bp) if bp is not None else None
            return tier_cls(offloading_spec=offloading_spec, primary_kv_view=primary_kv_view,
                            tier_type=tier_type, backpressure_detector=detector, **config)

    fm = types.ModuleType("vllm.v1.kv_offload.tiering.factory")
    fm.__spec__ = importlib.machinery.ModuleSpec(fm.__name__, None)
    fm.SecondaryTierFactory = SecondaryTierFactory
    mods[fm.__name__] = fm
    mods["vllm.v1.kv_offload.tiering"].factory = fm
    return mods


class NewestShapeTest(unittest.TestCase):
    """gpucache.vllm bound to vLLM 0.34.0's interface and driven through its
    factory and job types (module tree and date in the module docstring)."""

    MODNAME = "gpucache_vllm_newest_shape"
    BLOCK = 4096
    SLOTS = 8

    def load(self, **shape):
        mods = newest_vllm(**shape)
        mod = load_with(mods)
        return mod, mods

    def build(self, mod, mods, **cfg):
        from fakeclient_vllm import FakeClient

        sys.modules[self.MODNAME] = mod
        self.addCleanup(sys.modules.pop, self.MODNAME, None)
        view = memoryview(bytearray(self.SLOTS * self.BLOCK)).cast("B", (self.SLOTS, self.BLOCK))
        spec = types.SimpleNamespace(config=types.SimpleNamespace(
            model=types.SimpleNamespace(name="acme/tiny", dtype="bfloat16"),
            parallel=types.SimpleNamespace(tp_size=1, pp_size=1, rank=0),
            cache=types.SimpleNamespace(tokens_per_hash=32, blocks_per_chunk=1),
            groups=(types.SimpleNamespace(tokens_per_block=32, layer_names=("l0", "l1")),)),
            blocks_per_chunk=1)
        client = cfg.pop("client", None) or FakeClient()
        factory = mods["vllm.v1.kv_offload.tiering.factory"].SecondaryTierFactory
        tier = factory.create_secondary_tier(
            dict({"type": "GpucacheTier", "module_path": self.MODNAME, "tenant": "acme",
                  "client": client}, **cfg), view, spec)
        self.addCleanup(tier.shutdown)
        return tier, view, client

    def test_binds_to_the_newest_base_and_types(self):
        mod, mods = self.load()
        tb = mods["vllm.v1.kv_offload.tiering.base"]
        self.assertTrue(mod.HAVE_VLLM)
        self.assertIs(mod.SecondaryTierManager, tb.SecondaryTierManager)
        self.assertIs(mod.JobMetadata, tb.TransferJob)
        self.assertIs(mod.JobResult, tb.JobResult)
        self.assertIs(mod.LookupResult, mods["vllm.v1.kv_offload.base"].LookupResult)
        tier, view, _ = self.build(mod, mods, backpressure={"high": 2})
        self.assertIsInstance(tier, tb.SecondaryTierManager)  # every abstract method defined
        self.assertEqual(tier.tier_type, "GpucacheTier")
        self.assertEqual(tier.block_size_bytes, self.BLOCK)
        self.assertEqual(tier.bp_detector.config, {"high": 2})
        self.assertFalse(tier.tolerates_off_thread_polling)  # polled on the scheduler's steps
        self.assertEqual(tier.config_info(), {})
        self.assertEqual(tier.namespace.layout.layer_count, 2)
        self.assertEqual(tier.namespace.layout.block_tokens, 32)

    def test_store_lookup_load_through_the_newest_types(self):
        mod, mods = self.load()
        kb = mods["vllm.v1.kv_offload.base"]
        tb = mods["vllm.v1.kv_offload.tiering.base"]
        tier, view, _ = self.build(mod, mods)
        flat = view.cast("B")
        self.addCleanup(flat.release)
        keys = [kb.make_offload_key(bytes([i]) * 32, 0) for i in range(1, 4)]
        datas = [bytes((i * 37 + j) & 0xFF for j in range(self.BLOCK)) for i in range(3)]
        for i, d in enumerate(datas):
            flat[i * self.BLOCK:(i + 1) * self.BLOCK] = d
        tier.submit_store(tb.TransferJob(1, keys, [0, 1, 2], False, kb.ReqContext("s")))
        tier.drain_jobs()
        (r,) = tier.get_finished_jobs()
        self.assertIsInstance(r, tb.JobResult)
        self.assertEqual((r.job_id, r.success, r.transfer_bytes), (1, True, 3 * self.BLOCK))
        self.assertIsNone(r.deferred_release)
        self.assertGreaterEqual(r.transfer_time, 0.0)  # set: vLLM's tiering write time

        ctx = kb.ReqContext("l")
        tier.on_new_request(ctx)
        unknown = kb.make_offload_key(b"\x77" * 32, 0)
        self.assertEqual({tier.lookup(k, ctx) for k in keys + [unknown]}, {kb.LookupResult.RETRY})
        tier.drain_jobs()
        self.assertEqual([tier.lookup(k, ctx) for k in keys + [unknown]],
                         [kb.LookupResult.HIT] * 3 + [kb.LookupResult.MISS])

        dst = [7, 6, 5]
        tier.submit_load(tb.TransferJob(2, keys, dst, True, ctx))
        tier.submit_load(tb.TransferJob(3, [unknown], [4], True, ctx))
        tier.drain_jobs()
        done = {r.job_id: r for r in tier.get_finished_jobs()}
        self.assertTrue(done[2].success)
        for i, slot in enumerate(dst):
            self.assertEqual(bytes(flat[slot * self.BLOCK:(slot + 1) * self.BLOCK]), datas[i])
        # A failed promotion: the tier's I/O for it has ended when the result
        # is reported, so there is no release to defer.
        self.assertFalse(done[3].success)
        self.assertIsNone(done[3].deferred_release)
        tier.on_request_finished(ctx)

    def test_an_abstract_method_the_tier_lacks_fails_at_import(self):
        import abc

        @abc.abstractmethod
        def submit_delete(self, keys):
            ...

        with self.assertRaises(ImportError) as cm:
            self.load(base_extra={"submit_delete": submit_delete})
        self.assertIn("submit_delete", str(cm.exception))
        self.assertIn("0.34.0-shape", str(cm.exception))

    def test_job_and_result_shapes_it_cannot_fill_fail_at_import(self):
        with self.assertRaises(ImportError) as cm:
            self.load(result_extra=[("tier_epoch", int)])
        self.assertIn("a default for JobResult.tier_epoch", str(cm.exception))
        with self.assertRaises(ImportError) as cm:
            self.load(job_fields="slots")
        self.assertIn("TransferJob.chunk_ids (or block_ids)", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
