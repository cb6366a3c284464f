"""An in-process page store shared by the demo's engine processes.

This is the stand-in for gpucached used by the demo's unit tests and by
`prefix_reuse --store local`: a PageServer object lives in a
multiprocessing manager process, and every engine reaches it through a proxy.
LocalPageStorage puts SGLang's HiCache storage-backend methods in front of it
(batch_exists, batch_get_v1, batch_set_v1, ...), so an engine drives it
exactly as it drives gpucache.sglang.GpucacheStorage.

Like the real backend, LocalPageStorage binds a namespace into every key: the
model id (with its revision), the ranks, the tenant and the pool's dtype,
layout and page geometry. SGLang's page key is a hash of token ids only, so
without that binding another model or tenant would read these pages.

PageServer also gives a single-flight get_or_fill with the shape of
gpucache.Client.get_or_fill: per key, the first caller leads and fills, the
others wait for its commit; a failed leader passes the turn to the next.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import threading
import time
from multiprocessing.managers import BaseManager
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

# Bounds of the stand-in store.
MAX_PAGES = 1 << 16
MAX_PAGE_BYTES = 64 << 20


class PageServer:
    """Pages by key, plus single-flight fill state. All fields guarded by _cond."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._pages: Dict[str, bytes] = {}
        self._inflight: Dict[str, str] = {}  # key -> owner that leads its fill
        self._fills = 0

    def exists_leading(self, keys: Sequence[str]) -> int:
        with self._cond:
            for i, k in enumerate(keys):
                if k not in self._pages:
                    return i
            return len(keys)

    def get_many(self, keys: Sequence[str]) -> List[Optional[bytes]]:
        with self._cond:
            return [self._pages.get(k) for k in keys]

    def put_many(self, items: Sequence[Tuple[str, bytes]]) -> List[bool]:
        out = []
        with self._cond:
            for k, data in items:
                if len(data) > MAX_PAGE_BYTES or (k not in self._pages and len(self._pages) >= MAX_PAGES):
                    out.append(False)
                    continue
                self._pages.setdefault(k, bytes(data))
                out.append(True)
            self._cond.notify_all()
        return out

    def delete_all(self) -> None:
        with self._cond:
            self._pages.clear()

    def stats(self) -> Dict[str, int]:
        with self._cond:
            return {"pages": len(self._pages), "fills": self._fills}

    # --- single flight ---------------------------------------------------
    def acquire(self, keys: Sequence[str], owner: str) -> List[str]:
        """Per key: "hit", "lead" (the caller must commit or abort it) or "wait"."""
        roles = []
        with self._cond:
            for k in keys:
                if k in self._pages:
                    roles.append("hit")
                elif k in self._inflight and self._inflight[k] != owner:
                    roles.append("wait")
                else:
                    self._inflight[k] = owner
                    roles.append("lead")
        return roles

    def commit(self, items: Sequence[Tuple[str, bytes]], owner: str) -> None:
        with self._cond:
            for k, data in items:
                self._pages.setdefault(k, bytes(data))
                if self._inflight.get(k) == owner:
                    del self._inflight[k]
                self._fills += 1
            self._cond.notify_all()

    def abort(self, keys: Sequence[str], owner: str) -> None:
        with self._cond:
            for k in keys:
                if self._inflight.get(k) == owner:
                    del self._inflight[k]
            self._cond.notify_all()

    def wait(self, keys: Sequence[str], timeout: float) -> List[str]:
        """Blocks until each key is stored or has no leader; returns "hit"/"free" per key."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                pending = [k for k in keys if k not in self._pages and k in self._inflight]
                left = deadline - time.monotonic()
                if not pending or left <= 0:
                    return ["hit" if k in self._pages else "free" for k in keys]
                self._cond.wait(left)


_SERVER: Optional[PageServer] = None


def _shared_server() -> PageServer:
    global _SERVER  # one per manager process
    if _SERVER is None:
        _SERVER = PageServer()
    return _SERVER


class PageStoreManager(BaseManager):
    """Serves one PageServer; engines connect with (address, authkey)."""


PageStoreManager.register("page_server", callable=_shared_server)


def connect(address: Any, authkey: bytes) -> Any:
    """A proxy to the PageServer at address (from another process)."""
    m = PageStoreManager(address=address, authkey=authkey)
    m.connect()
    return m.page_server()


def bind_namespace(storage_config: Any, pool: Any, extra: Dict[str, Any]) -> str:
    """The hex digest every page key of this engine is bound under."""
    fields = {
        "model": getattr(storage_config, "model_name", None),
        "tp": [getattr(storage_config, "tp_rank", 0), getattr(storage_config, "tp_size", 1)],
        "pp": [getattr(storage_config, "pp_rank", 0), getattr(storage_config, "pp_size", 1)],
        "mla": bool(getattr(storage_config, "is_mla_model", False)),
        "tenant": extra.get("tenant", ""),
        "dtype": str(getattr(pool, "dtype", "")),
        "layout": getattr(pool, "layout", ""),
        "page_size": getattr(pool, "page_size", 0),
        "page_bytes": pool.get_ksize_per_token() * 2 * pool.page_size if pool is not None else 0,
    }
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


class LocalPageStorage:
    """The HiCache storage-backend surface over a PageServer proxy.

    Thread-safe: calls to the proxy are serialized by _lock (a manager proxy
    is not safe to share between threads).
    """

    def __init__(self, storage_config: Any, extra_config: Dict[str, Any], server: Any):
        self.storage_config = storage_config
        self.extra = dict(extra_config or {})
        self._server = server
        self._lock = threading.Lock()
        self.mem_pool_host: Any = None
        self._ns = ""

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        self.mem_pool_host = mem_pool_host
        self._ns = bind_namespace(self.storage_config, mem_pool_host, self.extra)

    def _k(self, key: str) -> str:
        if not self._ns:
            raise RuntimeError("gpucache/demo: register_mem_pool_host first")
        return self._ns + ":" + key

    def batch_exists(self, keys: List[str], extra_info: Any = None) -> int:
        with self._lock:
            return int(self._server.exists_leading([self._k(k) for k in keys]))

    def exists(self, key: str) -> bool:
        return self.batch_exists([key]) == 1

    def batch_get_v1(self, keys: List[str], host_indices: Any, extra_info: Any = None) -> List[bool]:
        ptrs, sizes = self.mem_pool_host.get_page_buffer_meta(host_indices)
        per = len(ptrs) // max(1, len(keys))
        with self._lock:
            datas = self._server.get_many([self._k(k) for k in keys])
        out = []
        for i, data in enumerate(datas):
            want = sum(sizes[i * per : (i + 1) * per])
            if data is None or len(data) != want:
                out.append(False)
                continue
            off = 0
            for p, n in zip(ptrs[i * per : (i + 1) * per], sizes[i * per : (i + 1) * per]):
                ctypes.memmove(p, data[off : off + n], n)
                off += n
            out.append(True)
        return out

    def batch_set_v1(self, keys: List[str], host_indices: Any, extra_info: Any = None) -> List[bool]:
        ptrs, sizes = self.mem_pool_host.get_page_buffer_meta(host_indices)
        per = len(ptrs) // max(1, len(keys))
        items = []
        for i, k in enumerate(keys):
            parts = [ctypes.string_at(p, n) for p, n in zip(ptrs[i * per : (i + 1) * per], sizes[i * per : (i + 1) * per])]
            items.append((self._k(k), b"".join(parts)))
        with self._lock:
            return list(self._server.put_many(items))

    def get(self, key: str, target_location: Any = None, target_sizes: Any = None) -> Any:
        with self._lock:
            return self._server.get_many([self._k(key)])[0]

    def batch_get(self, keys: List[str], target_locations: Any = None, target_sizes: Any = None) -> Any:
        with self._lock:
            return self._server.get_many([self._k(k) for k in keys])

    def set(self, key: str, value: Any = None, target_location: Any = None, target_sizes: Any = None) -> bool:
        return self.batch_set([key], [value])

    def batch_set(self, keys: List[str], values: Any = None, target_locations: Any = None, target_sizes: Any = None) -> bool:
        items = [(self._k(k), bytes(memoryview(v.numpy()).cast("B")) if hasattr(v, "numpy") else bytes(v)) for k, v in zip(keys, values)]
        with self._lock:
            return all(self._server.put_many(items))

    def clear(self) -> None:
        with self._lock:
            self._server.delete_all()

    def get_stats(self) -> Dict[str, int]:
        with self._lock:
            return dict(self._server.stats())

    def close(self) -> None:
        pass

    # --- single flight, shaped like gpucache.Client.get_or_fill ----------
    def get_or_fill(
        self, keys: List[str], fill: Callable[[List[int]], List[bytes]], owner: str, timeout: float = 120.0
    ) -> Tuple[List[Optional[bytes]], Dict[str, Any]]:
        """Payload per key; fill(missing_indices) computes those this caller leads.

        The report counts hits, the pages this caller filled, and the pages
        it waited for. A page whose leader failed is led by the next caller.
        """
        nkeys = [self._k(k) for k in keys]
        report: Dict[str, Any] = {"hit": 0, "computed": 0, "joined": 0}
        out: List[Optional[bytes]] = [None] * len(keys)
        todo = list(range(len(keys)))
        deadline = time.monotonic() + timeout
        first = True
        while todo and time.monotonic() < deadline:
            with self._lock:
                roles = self._server.acquire([nkeys[i] for i in todo], owner)
            lead = [i for i, r in zip(todo, roles) if r == "lead"]
            wait = [i for i, r in zip(todo, roles) if r == "wait"]
            if lead:
                try:
                    payloads = fill(lead)
                except BaseException:
                    with self._lock:
                        self._server.abort([nkeys[i] for i in lead], owner)
                    raise
                with self._lock:
                    self._server.commit([(nkeys[i], bytes(p)) for i, p in zip(lead, payloads)], owner)
                report["computed"] += len(lead)
            if wait:
                report["joined"] += len(wait)
                with self._lock:
                    self._server.wait([nkeys[i] for i in wait], max(0.0, deadline - time.monotonic()))
            with self._lock:
                datas = self._server.get_many([nkeys[i] for i in todo])
            rest = []
            for i, d in zip(todo, datas):
                if d is None:
                    rest.append(i)
                else:
                    out[i] = d
            if first:
                report["hit"] = sum(1 for r in roles if r == "hit")
                first = False
            todo = rest
        return out, report
