"""How gpucache.vllm binds to vLLM's tiering interface.

Where vLLM is installed the module must bind to vLLM's own classes (vLLM's
SecondaryTierFactory refuses a subclass of anything else), adapt to the job
type that vLLM has (TransferJob with chunk_ids, or the older JobMetadata
with block_ids), and refuse at import an interface it cannot serve. These
tests load the module beside a minimal module tree that has only the names
in question; the real vLLM is exercised by the engine tests.
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
            self.skipTest("vLLM is installed here")
        mod = load_with({})
        self.assertFalse(mod.HAVE_VLLM)
        self.assertTrue(dataclasses.is_dataclass(mod.JobMetadata))


if __name__ == "__main__":
    unittest.main()
