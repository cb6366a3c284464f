"""LMCache L2 adapter backed by gpucache's native protocol.

Loaded by LMCache's multiprocess server (``lmcache server``) through its
``plugin`` L2 adapter type::

    lmcache server --l1-size-gb 20 --eviction-policy LRU \\
      --l2-adapter '{"type":"plugin","module_path":"gpucache.lmcache",
        "class_name":"GpucacheL2Adapter",
        "adapter_params":{"addrs":"127.0.0.1:9400","tenant":"acme",
          "secret_file":"/etc/gpucache/acme.secret"}}'

Why this extension point: LMCache 0.5.6 has three. The in-process
connector's ``remote_storage_plugins`` (a ``RemoteConnector``) and
``storage_plugins`` (a ``StoragePluginInterface`` backend) run inside vLLM's
worker, and that worker path has no CPU transfer (``CreateGPUConnector``:
``No supported cpu connector found``), and its keys (``CacheEngineKey``)
carry no ``cache_salt``. The multiprocess server is where LMCache is going
(``remote_url`` logs a deprecation), it runs with vLLM on the CPU, and its
L2 keys (``ObjectKey``) carry the model, the KV rank, the object group and
the ``cache_salt``. Its L2 interface is also the one that matches gpucache:
lookup-and-lock is LOOKUP with a lease, load is GET into the caller's
buffer under that lease, store is PUT.

Identity. Each chunk is an opaque-key block (PUT_OPAQUE) named
``<chunk hash hex>@<kv_rank hex>@<group hex>`` in a namespace that binds:

* tenant (``tenant``, authenticated by ``secret``/``secret_file``);
* trust_domain: ``default`` without a salt, else ``salt-`` and the first 32
  hex digits of SHA-256 of the ``cache_salt``, so two salts are two
  namespaces and never share a chunk (and the salt itself is not sent);
* model_id: the key's model name;
* config_revision / tokenizer_revision / dtype / quantization: from
  ``adapter_params`` (``model_revision``, ``tokenizer_revision``, ``dtype``,
  ``quantization``; ``unspecified`` when absent);
* layout ``lmcache-mp/v1`` with ``chunk_tokens`` tokens per block.

A chunk stored under other parameters is another block: a clean miss.

Faults: gpucache's client never raises on reads (a miss) and returns a
status per block on writes; the adapter turns a down, slow or refusing
daemon into misses and failed store tasks, never an exception in LMCache's
controller threads. Every call is bounded by ``timeout`` (2 s).

Locks: a lookup takes a lease (``lease_ttl``, 30 s) on the leading run of
keys it found; the load reads under it; ``submit_unlock`` forgets it (the
lease expires on its own). gpucache answers a LOOKUP with the leading run,
so the lookup bitmap is a prefix: LMCache only loads a prefix.

Counters (``report_status()``, which LMCache's server reports, and
``counters()``): lookups, keys_looked_up, keys_hit, loads, keys_loaded,
bytes_loaded, load_misses, stores, keys_stored, keys_existed, bytes_stored,
store_failures, errors, tasks_refused.

Bounds: at most ``max_queued_tasks`` (256) tasks wait for the adapter's
thread; one more is answered at once as a failed store or a miss
(``tasks_refused``). Leases held: at most 2^20; namespaces cached: 4,096.

This module imports LMCache only when LMCache is importable; without it the
class is defined on a stand-in base so the package stays importable.
"""

from __future__ import annotations

import hashlib
import os
import queue
import threading
from typing import Any, Dict, List, Optional, Sequence

from gpucache.client import client_from_config
from gpucache.identity import Layout, Namespace, opaque_key
from gpucache.wire import Status

try:  # pragma: no cover - depends on lmcache being installed
    from lmcache.v1.distributed.l2_adapters.base import L2AdapterInterface as _Base
    HAVE_LMCACHE = True
except Exception:  # noqa: BLE001 - any import failure means: no LMCache here
    HAVE_LMCACHE = False

    class _Base:  # type: ignore[no-redef]
        """Stand-in for LMCache's L2AdapterInterface when lmcache is absent."""

        def __init__(self, max_capacity_bytes: int = 0) -> None:
            pass

        def _notify_keys_stored(self, keys, sizes) -> None:
            pass

        def _notify_keys_accessed(self, keys) -> None:
            pass

LAYOUT_FORMAT = "lmcache-mp/v1"
_COUNTERS = ("lookups", "keys_looked_up", "keys_hit", "loads", "keys_loaded", "bytes_loaded", "load_misses",
             "stores", "keys_stored", "keys_existed", "bytes_stored", "store_failures", "errors", "tasks_refused")


def salt_domain(cache_salt: str) -> str:
    """The trust domain of a cache_salt: default for none, else a hash of it."""
    if not cache_salt:
        return "default"
    return "salt-" + hashlib.sha256(cache_salt.encode("utf-8")).hexdigest()[:32]


def chunk_name(key: Any) -> bytes:
    """The opaque name of an LMCache ObjectKey inside its namespace."""
    return b"%s@%08x@%x" % (bytes(key.chunk_hash).hex().encode(), key.kv_rank, key.object_group_id)


class _Notifier:
    """A completion signal LMCache polls: its own notifier when it has one
    (lmcache.v1.platform.create_event_notifier), else an eventfd."""

    def __init__(self) -> None:
        self._n = None
        try:
            from lmcache.v1.platform import create_event_notifier
            self._n = create_event_notifier()
            self._fd = self._n.fileno()
        except Exception:  # noqa: BLE001 - no LMCache: a plain eventfd
            self._fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)

    def fileno(self) -> int:
        return self._fd

    def notify(self) -> None:
        if self._n is not None:
            self._n.notify()
        else:
            os.eventfd_write(self._fd, 1)

    def close(self) -> None:
        if self._n is not None:
            self._n.close()
        else:
            os.close(self._fd)


def _bitmap(n: int, hits: Sequence[int]):
    try:
        from lmcache.lmcache_native import Bitmap
    except Exception:  # noqa: BLE001 - without LMCache the tests read a set
        return set(hits)
    b = Bitmap(n)
    for i in hits:
        b.set(i)
    return b


def _store_result(ok: bool, nbytes: int):
    try:
        from lmcache.v1.distributed.internal_api import L2StoreResult
    except Exception:  # noqa: BLE001
        return (ok, nbytes)
    return L2StoreResult(ok, nbytes)


def _bytes_of(obj: Any) -> memoryview:
    """A byte view of an LMCache MemoryObj (or any buffer): its logical size."""
    b = getattr(obj, "byte_array", obj)
    v = memoryview(b)
    return v.cast("B") if v.format != "B" or v.ndim != 1 else v


class GpucacheL2Adapter(_Base):
    """LMCache L2 adapter over gpucache (see the module docstring).

    adapter_params: addrs (str "h:p,h:p" or list), tenant, secret or
    secret_file, timeout (2.0 s), pool_size, cluster, model_revision,
    tokenizer_revision, dtype, quantization, chunk_tokens (256),
    lease_ttl (30 s), max_capacity_gb (0: gpucache evicts on its own),
    max_queued_tasks (256)."""

    def __init__(self, params: Optional[Dict[str, Any]] = None, l1_memory_desc: Any = None,
                 client: Any = None) -> None:
        params = dict(params or {})
        super().__init__(max_capacity_bytes=int(float(params.get("max_capacity_gb", 0)) * (1 << 30)))
        if "tenant" not in params:
            raise ValueError("gpucache.lmcache: adapter_params needs \"tenant\"")
        self._params = params
        self._client = client if client is not None else client_from_config(params)
        self._lease_ttl = float(params.get("lease_ttl", 30.0))
        self._tokens = int(params.get("chunk_tokens", 256))
        self._max_queued = max(1, int(params.get("max_queued_tasks", 256)))
        self._ns_cache: Dict[tuple, tuple] = {}
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(_COUNTERS, 0)
        self._next_id = 0
        self._done_store: Dict[int, Any] = {}
        self._done_lookup: Dict[int, Any] = {}
        self._done_load: Dict[int, Any] = {}
        self._leases: Dict[tuple, int] = {}  # (namespace digest, block key) -> lease id
        self._store_ev, self._lookup_ev, self._load_ev = _Notifier(), _Notifier(), _Notifier()
        self._q: "queue.Queue[Optional[tuple]]" = queue.Queue()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="gpucache-l2", daemon=True)
        self._thread.start()

    # ---- identity ----

    def _namespace(self, key: Any):
        """(Namespace, digest) of an ObjectKey's model and salt."""
        k = (key.model_name, getattr(key, "cache_salt", "") or "")
        got = self._ns_cache.get(k)
        if got is None:
            p = self._params
            ns = Namespace(
                tenant=str(p["tenant"]), trust_domain=salt_domain(k[1]), model_id=k[0],
                config_revision=str(p.get("model_revision", "unspecified")),
                tokenizer_revision=str(p.get("tokenizer_revision", "unspecified")),
                dtype=str(p.get("dtype", "unspecified")), quantization=str(p.get("quantization", "none")),
                layout=Layout(format=LAYOUT_FORMAT, block_tokens=self._tokens))
            got = (ns, ns.digest())
            if len(self._ns_cache) < 4096:
                self._ns_cache[k] = got
        return got

    def _groups(self, keys: Sequence[Any]) -> List[tuple]:
        """Key indexes grouped by namespace, in order: [(ns, digest, [i...])]."""
        out: Dict[bytes, tuple] = {}
        for i, k in enumerate(keys):
            ns, d = self._namespace(k)
            out.setdefault(d, (ns, d, []))[2].append(i)
        return list(out.values())

    # ---- LMCache's interface: event fds ----

    def get_store_event_fd(self) -> int:
        return self._store_ev.fileno()

    def get_lookup_and_lock_event_fd(self) -> int:
        return self._lookup_ev.fileno()

    def get_load_event_fd(self) -> int:
        return self._load_ev.fileno()

    # ---- tasks ----

    def _submit(self, kind: str, keys, extra) -> int:
        with self._lock:
            self._next_id += 1
            tid = self._next_id
        if self._q.qsize() >= self._max_queued:  # bounded: a task over it fails now
            self._count(tasks_refused=1)
            self._finish(kind, tid, len(keys), [], 0, False)
            return tid
        self._q.put((kind, tid, list(keys), extra))
        return tid

    def submit_store_task(self, keys, objects) -> int:
        return self._submit("store", keys, list(objects))

    def pop_completed_store_tasks(self) -> Dict[int, Any]:
        with self._lock:
            out, self._done_store = self._done_store, {}
        return out

    def submit_lookup_and_lock_task(self, keys, group_layout_descs=None) -> int:
        return self._submit("lookup", keys, None)

    def query_lookup_and_lock_result(self, task_id: int):
        with self._lock:
            return self._done_lookup.pop(task_id, None)

    def submit_unlock(self, keys) -> None:
        with self._lock:
            for k in keys:
                ns, d = self._namespace(k)
                self._leases.pop((d, opaque_key(d, chunk_name(k))), None)

    def submit_load_task(self, keys, objects) -> int:
        return self._submit("load", keys, list(objects))

    def query_load_result(self, task_id: int):
        with self._lock:
            return self._done_load.pop(task_id, None)

    # ---- the worker ----

    def _count(self, **kw: int) -> None:
        with self._lock:
            for k, v in kw.items():
                self._counts[k] += v

    def _run(self) -> None:
        handlers = {"store": self._do_store, "lookup": self._do_lookup, "load": self._do_load,
                    "noop": lambda _tid, _keys, ev: ev.set()}
        while True:
            task = self._q.get()
            if task is None:
                return
            kind, tid, keys, extra = task
            try:
                handlers[kind](tid, keys, extra)
            except Exception:  # noqa: BLE001 - a bug is a miss, never a dead controller
                self._count(errors=1)
                if kind != "noop":
                    self._finish(kind, tid, len(keys), [], 0, False)

    def _finish(self, kind: str, tid: int, n: int, hits: Sequence[int], nbytes: int, ok: bool) -> None:
        if kind == "store":
            res, done, ev = _store_result(ok, nbytes), self._done_store, self._store_ev
        elif kind == "lookup":
            res, done, ev = _bitmap(n, hits), self._done_lookup, self._lookup_ev
        else:
            res, done, ev = _bitmap(n, hits), self._done_load, self._load_ev
        with self._lock:
            done[tid] = res
        ev.notify()

    def _do_lookup(self, tid: int, keys, _extra) -> None:
        hits: List[int] = []
        for ns, d, idxs in self._groups(keys):
            bkeys = [opaque_key(d, chunk_name(keys[i])) for i in idxs]
            n, lease = self._client.lookup(ns, bkeys, lease_ttl=self._lease_ttl)
            with self._lock:
                for j in range(n):
                    self._leases[(d, bkeys[j])] = lease
                    if len(self._leases) > 1 << 20:  # bounded: an old lease just expires
                        self._leases.pop(next(iter(self._leases)))
            hits.extend(idxs[:n])
        self._count(lookups=1, keys_looked_up=len(keys), keys_hit=len(hits))
        self._finish("lookup", tid, len(keys), sorted(hits), 0, True)

    def _do_load(self, tid: int, keys, objects) -> None:
        hits: List[int] = []
        nbytes = 0
        for ns, d, idxs in self._groups(keys):
            bkeys = [opaque_key(d, chunk_name(keys[i])) for i in idxs]
            bufs = [_bytes_of(objects[i]) for i in idxs]
            with self._lock:
                lease = next((self._leases[(d, k)] for k in bkeys if (d, k) in self._leases), 0)
            res = self._client.get_into(ns, bkeys, bufs, lease_id=lease)
            for i, buf, r in zip(idxs, bufs, res):
                if r.hit and r.length == len(buf):
                    hits.append(i)
                    nbytes += r.length
        hits.sort()
        self._count(loads=1, keys_loaded=len(hits), bytes_loaded=nbytes, load_misses=len(keys) - len(hits))
        if hits:
            self._notify_keys_accessed([keys[i] for i in hits])
        self._finish("load", tid, len(keys), hits, nbytes, True)

    def _do_store(self, tid: int, keys, objects) -> None:
        stored, sizes, existed, ok = [], [], 0, True
        for ns, d, idxs in self._groups(keys):
            items = [(chunk_name(keys[i]), _bytes_of(objects[i])) for i in idxs]
            statuses = self._client.put_opaque(ns, items)
            for i, (_, v), st in zip(idxs, items, statuses):
                if st == Status.STORED:
                    stored.append(i)
                    sizes.append(len(v))
                elif st == Status.EXISTS:
                    existed += 1
                else:
                    ok = False
        nbytes = sum(sizes)
        self._count(stores=1, keys_stored=len(stored), keys_existed=existed, bytes_stored=nbytes,
                    store_failures=0 if ok else 1)
        if stored:
            self._notify_keys_stored([keys[i] for i in stored], sizes)
        self._finish("store", tid, len(keys), [], nbytes, ok)

    # ---- status and shutdown ----

    def counters(self) -> Dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def report_status(self) -> dict:
        c = self.counters()
        return {"type": "gpucache", "is_healthy": True, "counters": c}

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._q.put(None)
        self._thread.join()
        try:
            self._client.close()
        finally:
            for ev in (self._store_ev, self._lookup_ev, self._load_ev):
                ev.close()

    def drain(self, timeout: float = 30.0) -> bool:
        """Wait until every submitted task has finished (tests and shutdown)."""
        done = threading.Event()
        self._q.put(("noop", 0, [], done))
        return done.wait(timeout)
