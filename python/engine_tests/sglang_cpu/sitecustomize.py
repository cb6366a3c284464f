"""Two stand-ins that let SGLang 0.5.23's HiCache run on a CPU, for the
engine processes of engine_tests/test_sglang_engine.py only (this directory
goes first on their PYTHONPATH; Python imports sitecustomize at start, in
every process SGLang spawns).

SGLang's engine runs on the CPU with device="cpu" (torch_native attention),
but its hierarchical cache stops at two GPU-only pieces:

1. sglang.srt.mem_cache.pool_host.common._cuda_host_register. The runtime
   builds the host KV pool with pin_memory=True, and on a device without
   its own allocator (not npu, musa or xpu) that registers the buffer with
   cudaHostRegister: "RuntimeError: Found no NVIDIA driver on your system".
   The stand-in registers nothing (the pool stays ordinary pageable memory).
2. sglang.srt.mem_cache.pool_host.mha.transfer_kv_direct, the device<->host
   copy of --hicache-io-backend direct with --hicache-mem-layout layer_first.
   SGLang imports it from sgl_kernel.kvcacheio on CUDA/ROCm (and XPU) only,
   so on a CPU the name is undefined: "NameError: name 'transfer_kv_direct'
   is not defined". The stand-in copies the same pages with torch indexing.

Everything else (the radix tree, HiCacheController and its storage threads,
the host pool, SGLang's StorageBackendFactory and page keys) is SGLang's
own. Nothing is patched unless GPUCACHE_SGLANG_CPU_SHIM=1.
"""

import importlib.abc
import importlib.machinery
import os
import sys

_COMMON = "sglang.srt.mem_cache.pool_host.common"
_MHA = "sglang.srt.mem_cache.pool_host.mha"


def _no_host_register(buffer, registration_granularity_bytes=None):
    return None


def _transfer_kv_direct(src_layers, dst_layers, src_indices, dst_indices, page_size):
    """dst[dst_indices] = src[src_indices] for each (src, dst) layer pair;
    token rows, whole pages of page_size tokens."""
    import torch

    src = src_indices.to(device="cpu", dtype=torch.int64)
    dst = dst_indices.to(device="cpu", dtype=torch.int64)
    if src.numel() != dst.numel() or src.numel() % page_size:
        raise ValueError("transfer_kv_direct stand-in: %d source and %d destination rows, page size %d"
                         % (src.numel(), dst.numel(), page_size))
    for s, d in zip(src_layers, dst_layers):
        d[dst.to(d.device)] = s[src.to(s.device)].to(d.device)


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, inner):
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        if module.__name__ == _COMMON:
            module._cuda_host_register = _no_host_register
        elif module.__name__ == _MHA:
            module.transfer_kv_direct = _transfer_kv_direct


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in (_COMMON, _MHA):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _PatchingLoader(spec.loader)
        return spec


if os.environ.get("GPUCACHE_SGLANG_CPU_SHIM") == "1":
    sys.meta_path.insert(0, _Finder())
