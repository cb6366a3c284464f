"""A toy inference engine: the demo model, a host pool and a HiCache backend.

Each engine runs in its own OS process (see EngineProcess) and talks to the
page store only through an SGLang HiCache storage backend: batch_exists,
batch_get_v1 and batch_set_v1 on host-pool indices, as SGLang's
cache_controller does. The backend is either gpucache.sglang.GpucacheStorage
(a real gpucached) or the demo's LocalPageStorage stand-in.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import dataclasses
import hashlib
import multiprocessing
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from gpucache.demo import require_torch

torch = require_torch()

from gpucache.demo.model import HostPool, ModelConfig, TinyDecoder


@dataclasses.dataclass
class StorageConfig:
    """The fields of SGLang's HiCacheStorageConfig the backends read."""

    tp_rank: int = 0
    tp_size: int = 1
    pp_rank: int = 0
    pp_size: int = 1
    attn_cp_rank: int = 0
    attn_cp_size: int = 1
    is_mla_model: bool = False
    enable_storage_metrics: bool = False
    is_page_first_layout: bool = True
    model_name: Optional[str] = None
    dp_rank: int = 0
    dp_size: int = 1
    tp_lcm_size: Optional[int] = None
    should_split_heads: bool = False
    extra_config: Optional[dict] = None


@dataclasses.dataclass
class EngineSpec:
    """Everything an engine process needs; picklable."""

    model: ModelConfig
    extra_config: Dict[str, Any]  # the backend's extra_config (tenant, addresses, ...)
    store: str = "local"  # "local" (LocalPageStorage) or "gpucache" (gpucache.sglang)
    store_address: Any = None  # local: the PageStoreManager address
    authkey: bytes = b""  # local: the manager's authkey
    pool_tokens: int = 4096
    threads: int = 1


def page_hash(token_ids: Sequence[int], prior: Optional[str]) -> str:
    """SGLang's page key: SHA-256 over the parent key and 4-byte LE token ids."""
    h = hashlib.sha256()
    if prior:
        h.update(bytes.fromhex(prior))
    for t in token_ids:
        h.update(int(t).to_bytes(4, "little", signed=False))
    return h.hexdigest()


def make_storage(spec: EngineSpec) -> Any:
    cfg = StorageConfig(model_name=spec.model.model_id, extra_config=dict(spec.extra_config))
    if spec.store == "local":
        from gpucache.demo import pagestore

        return pagestore.LocalPageStorage(cfg, spec.extra_config, pagestore.connect(spec.store_address, spec.authkey))
    if spec.store == "gpucache":
        from gpucache.sglang import GpucacheStorage

        extra = {"interface_v1": 1, "model_revision": spec.model.revision, **spec.extra_config}
        cfg.extra_config = extra
        return GpucacheStorage(cfg, extra)
    raise ValueError(f"gpucache/demo: unknown store {spec.store!r}")


class Engine:
    """One engine: model, host pool, storage backend. Single-threaded."""

    def __init__(self, spec: EngineSpec):
        torch.set_num_threads(spec.threads)
        self.spec = spec
        self.cfg = spec.model
        self.model = TinyDecoder(spec.model)
        self.pool = HostPool(spec.model, spec.pool_tokens)
        self.storage = make_storage(spec)
        self.storage.register_mem_pool_host(self.pool)
        self.client: Any = None  # gpucache store: a Client for get_or_fill
        if spec.store == "gpucache":
            self.client = _client_from(spec.extra_config)

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
        self.storage.close()

    def page_keys(self, tokens: Sequence[int]) -> List[str]:
        ps = self.cfg.page_size
        keys: List[str] = []
        prior: Optional[str] = None
        for i in range(0, len(tokens) - ps + 1, ps):
            prior = page_hash(tokens[i : i + ps], prior)
            keys.append(prior)
        return keys

    def reusable_pages(self, tokens: Sequence[int]) -> int:
        """Pages that may come from the cache: the last token is always computed."""
        return (len(tokens) - 1) // self.cfg.page_size

    def backup(self, tokens: Sequence[int]) -> Dict[str, Any]:
        """Prefills tokens and backs every full page up through batch_set_v1."""
        _, kv = self.model.prefill(tokens)
        keys = self.page_keys(tokens)
        idx = self._alloc(len(keys))
        try:
            self.pool.store_kv(idx, kv, 0)
            ok = self.storage.batch_set_v1(keys, idx)
        finally:
            self.pool.free(idx)
        return {"pages": len(keys), "stored": sum(1 for x in ok if x)}

    def serve(self, tokens: Sequence[int], decode: int, use_cache: bool) -> Dict[str, Any]:
        """One request from an empty host pool; returns tokens, logits, hits, TTFT."""
        self.pool.wipe()
        ps = self.cfg.page_size
        t0 = time.perf_counter()
        hits = 0
        past = None
        if use_cache:
            keys = self.page_keys(tokens)[: self.reusable_pages(tokens)]
            n = int(self.storage.batch_exists(keys)) if keys else 0
            if n > 0:
                idx = self._alloc(n)
                ok = self.storage.batch_get_v1(keys[:n], idx)
                while hits < n and ok[hits]:
                    hits += 1
                if hits:
                    past = self.pool.load_kv(idx[: hits * ps])
                self.pool.free(idx)
        logits, kv = self.model.prefill(tokens[hits * ps :], past)
        first = int(torch.argmax(logits[-1]))
        ttft = time.perf_counter() - t0
        out, rows = self.model.greedy(logits[-1], kv, decode)
        assert out[0] == first
        return {"hits": hits, "saved": hits * ps, "tokens": out, "logits": rows, "ttft": ttft}

    # --- single flight ---------------------------------------------------
    def page_payloads(self, tokens: Sequence[int], pages: List[int]) -> List[bytes]:
        """Computes the KV of tokens up to the last wanted page; packs the wanted pages."""
        ps = self.cfg.page_size
        end = (max(pages) + 1) * ps
        _, kv = self.model.prefill(tokens[:end])
        idx = self._alloc(len(pages))
        try:
            for j, p in enumerate(pages):
                self.pool.store_kv(idx[j * ps : (j + 1) * ps], kv, p * ps)
            ptrs, sizes = self.pool.get_page_buffer_meta(idx)
            per = len(ptrs) // len(pages)
            out = []
            for j in range(len(pages)):
                out.append(b"".join(ctypes.string_at(p, n) for p, n in zip(ptrs[j * per : (j + 1) * per], sizes[j * per : (j + 1) * per])))
            return out
        finally:
            self.pool.free(idx)

    def serve_single_flight(self, tokens: Sequence[int], decode: int, owner: str, barrier: Any) -> Dict[str, Any]:
        """Gets the prompt's pages through get_or_fill (filling misses), then decodes."""
        self.pool.wipe()
        ps = self.cfg.page_size
        keys = self.page_keys(tokens)[: self.reusable_pages(tokens)]
        filled: List[int] = []

        def fill(missing: List[int]) -> List[bytes]:
            filled.extend(missing)
            return self.page_payloads(tokens, missing)

        barrier.wait()
        if self.client is None:
            payloads, report = self.storage.get_or_fill(keys, fill, owner=owner)
        else:
            # The native token chain of these pages under the backend's
            # namespace (block_tokens = page size): ACQUIRE / WAIT /
            # FILL_COMMIT need the full identity of every block.
            import gpucache

            ns = self.storage.namespace
            idents = gpucache.identities(ns, list(tokens[: len(keys) * ps]))
            payloads, report = self.client.get_or_fill(ns, idents, fill)
        got = 0
        while got < len(payloads) and payloads[got] is not None:
            got += 1
        past = None
        if got:
            idx = self._alloc(got)
            ptrs, sizes = self.pool.get_page_buffer_meta(idx)
            per = len(ptrs) // got
            for j in range(got):
                off = 0
                for p, n in zip(ptrs[j * per : (j + 1) * per], sizes[j * per : (j + 1) * per]):
                    _copy_to(p, memoryview(payloads[j])[off : off + n])
                    off += n
            past = self.pool.load_kv(idx)
            self.pool.free(idx)
        logits, kv = self.model.prefill(tokens[got * ps :], past)
        out, rows = self.model.greedy(logits[-1], kv, decode)
        return {"filled": sorted(filled), "report": dict(report), "pages": got, "tokens": out, "logits": rows}

    def _alloc(self, pages: int) -> torch.Tensor:
        idx = self.pool.alloc(pages * self.cfg.page_size)
        if idx is None:
            raise RuntimeError("gpucache/demo: host pool too small for the prompt")
        return idx


def _copy_to(ptr: int, src: memoryview) -> None:
    """Copies src (bytes-like) to the host-pool address ptr."""
    dst = (ctypes.c_char * len(src)).from_address(ptr)
    memoryview(dst).cast("B")[:] = src.cast("B")


def _client_from(extra: Dict[str, Any]) -> Any:
    """A gpucache.Client from the backend's extra_config (addrs, tenant, secret_file)."""
    import gpucache

    secret = b""
    if extra.get("secret_file"):
        with open(extra["secret_file"], "rb") as f:
            secret = f.read().strip()
    return gpucache.Client(
        addrs=list(extra["addrs"]), tenant=str(extra["tenant"]), secret=secret,
        timeout=float(extra.get("timeout", 2.0)), pool_size=2,
    )


_ENGINE: Optional[Engine] = None


def _init(spec: EngineSpec) -> None:
    global _ENGINE  # one engine per worker process
    _ENGINE = Engine(spec)


def _call(method: str, *args: Any) -> Any:
    assert _ENGINE is not None
    return getattr(_ENGINE, method)(*args)


class EngineProcess:
    """An Engine in its own spawned process; call() runs a method there."""

    def __init__(self, spec: EngineSpec):
        ctx = multiprocessing.get_context("spawn")
        self._ex = concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=ctx, initializer=_init, initargs=(spec,))

    def submit(self, method: str, *args: Any) -> "concurrent.futures.Future[Any]":
        return self._ex.submit(_call, method, *args)

    def call(self, method: str, *args: Any) -> Any:
        return self.submit(method, *args).result()

    def close(self) -> None:
        self._ex.shutdown(wait=True)

    def __enter__(self) -> "EngineProcess":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def max_logit_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max())


__all__: Tuple[str, ...] = ("Engine", "EngineProcess", "EngineSpec", "StorageConfig", "page_hash", "max_logit_diff")
