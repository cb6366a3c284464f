"""SGLang HiCache storage backend backed by gpucache.

Loaded by SGLang's ``dynamic`` storage backend::

    --hicache-storage-backend dynamic
    --hicache-storage-backend-extra-config '{"backend_name":"gpucache",
        "module_path":"gpucache.sglang","class_name":"GpucacheStorage",
        "interface_v1":1,"addrs":["127.0.0.1:9400"],"tenant":"acme",
        "secret_file":"/etc/gpucache/acme.secret"}'

SGLang's backend factory builds the class as ``cls(storage_config, kwargs)``
and then calls ``register_mem_pool_host(host_pool)``.

Identity binding. An SGLang page key is a SHA-256 hex chain over token ids
only: it names no model, rank, dtype or layout, and the backend never sees
the token ids. Each page is therefore stored as an opaque-key block whose
name is the page key, under a namespace that binds everything else:

* tenant, trust_domain, model_revision, tokenizer_revision, adapter, rope,
  quantization: from ``extra_config``;
* model_id: ``storage_config.model_name`` (or ``extra_config["model_id"]``);
* dtype, layout name, page size, layer count, KV heads, head dim, bytes and
  buffers per page: from the registered host pool;
* tp/pp rank and size into Layout; cp and attention-dp rank and size, the MLA
  flag and the interface (v1 zero copy or flat pages) into Layout.format.

An MLA (rank-replicated) model binds tp rank 0 of size 1 whatever the rank,
so every TP rank reads the pages rank 0 wrote; only the config's storage
writer (``is_storage_writer``: tp rank 0, or with decode context parallelism
the first rank of each DCP shard) writes, and the DCP rank and size go into
Layout.format when DCP is on.

With ``interface_v1`` a page whose host buffers are not contiguous (MHA
page_first: K and V) is stored as one block per buffer, named
``<page key>/<i>``; the leading-hit count of a LOOKUP over the buffers of
consecutive pages gives the leading page count in one round trip.

Every failure on a read path is a miss; no exception reaches SGLang from
get/batch_get/exists/batch_exists/batch_get_v1, and write paths return False.
Configuration errors at construction raise ValueError("gpucache/sglang: ...").

A daemon on the same host (``"addrs": ["unix:/run/gpucache/gpucached.sock"]``,
its ``unix_listen``): register_mem_pool_host registers the host pool's
memory with the client, so batch_get_v1 and batch_get into the pool are
GET_INTO (gpucached copies each page once from its slab into the pool)
and batch_set_v1, and batch_set of values that lie in the pool, are
PUT_OPAQUE_FROM (gpucached copies each page once from the pool into its
slab): no payload crosses the socket.
SGLang's own memfd (``"allocator": "shm"`` in the extra config,
ShmHostTensorAllocator) is created without MFD_ALLOW_SEALING, which
gpucached refuses (a memfd must be sealed against shrinking); its default
pool (a MAP_SHARED anonymous mapping) registers where this process may
open /proc/self/map_files (CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE).
When the pool cannot be registered, or the daemon is on TCP, pages go
through the socket (PUT_OPAQUE and GET) and the backend logs why, once;
counters() says which path carried them (region_get_into,
region_put_opaque_from, region_fallback_<cause>).

get_stats() answers SGLang's StorageMetrics (pages and GB/s of each read
and write since the last call, kept only when the config's
enable_storage_metrics is on, which SGLang sets from --enable-metrics);
counters() answers the backend's own running counters and miss reasons.
"""

from __future__ import annotations

import ctypes
import dataclasses
import inspect
import logging
import os
import threading
import time

import gpucache as _gc

logger = logging.getLogger(__name__)

__all__ = ["GpucacheStorage", "HAVE_SGLANG", "bind_namespace"]

try:  # pragma: no cover - depends on sglang being installed
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorage as _Base

    HAVE_SGLANG = True
except Exception:  # sglang absent (or broken): a stand-in with the same methods
    HAVE_SGLANG = False

    class _Base:  # type: ignore[no-redef]
        """Stand-in for sglang's HiCacheStorage when sglang is not importable."""

        def register_mem_pool_host(self, mem_pool_host):
            self.mem_pool_host = mem_pool_host

        def batch_get_v1(self, keys, host_indices, extra_info=None):
            raise NotImplementedError()

        def batch_set_v1(self, keys, host_indices, extra_info=None):
            raise NotImplementedError()

        def get(self, key, target_location=None, target_sizes=None):
            raise NotImplementedError()

        def batch_get(self, keys, target_locations=None, target_sizes=None):
            raise NotImplementedError()

        def set(self, key, value=None, target_location=None, target_sizes=None):
            raise NotImplementedError()

        def batch_set(self, keys, values=None, target_locations=None, target_sizes=None):
            raise NotImplementedError()

        def exists(self, key):
            raise NotImplementedError()

        def batch_exists(self, keys, extra_info=None):
            for i, k in enumerate(keys):
                if not self.exists(k):
                    return i
            return len(keys)

        def clear(self):
            pass

        def get_stats(self):
            return None


@dataclasses.dataclass
class _StorageMetrics:
    """Stand-in for sglang's StorageMetrics (the same four lists) where
    sglang.srt.observability.metrics_collector does not import."""

    prefetch_pgs: list = dataclasses.field(default_factory=list)
    backup_pgs: list = dataclasses.field(default_factory=list)
    prefetch_bandwidth: list = dataclasses.field(default_factory=list)
    backup_bandwidth: list = dataclasses.field(default_factory=list)


def _storage_metrics():
    """A new StorageMetrics: SGLang's own class when it imports (its
    collector asserts the type), else the stand-in."""
    try:
        from sglang.srt.observability.metrics_collector import StorageMetrics
    except Exception:
        return _StorageMetrics()
    return StorageMetrics()


_PREFIX = "gpucache/sglang: "
_MAX_METRICS = 4096  # per-operation samples kept between two get_stats() calls
_MAX_NAME = 1024  # identity.MaxOpaqueLen
_OK_PUT = ("STORED", "EXISTS")


def _cfg_get(cfg, name, default=None):
    """Reads a field of a HiCacheStorageConfig (dataclass, object or dict)."""
    if cfg is None:
        return default
    if isinstance(cfg, dict):
        v = cfg.get(name, default)
    elif dataclasses.is_dataclass(cfg):
        names = {f.name for f in dataclasses.fields(cfg)}
        v = getattr(cfg, name) if name in names else getattr(cfg, name, default)
    else:
        v = getattr(cfg, name, default)
    return default if v is None else v


def _dtype_name(dtype) -> str:
    s = str(dtype)
    return s[len("torch."):] if s.startswith("torch.") else s


def _status_ok(st) -> bool:
    name = getattr(st, "name", None)
    if name is None:
        name = str(st).rsplit(".", 1)[-1]
    return name in _OK_PUT


class _Indices:
    """Minimal stand-in for a torch index tensor (tolist/len/slicing)."""

    def __init__(self, values):
        self._v = list(values)

    def tolist(self):
        return list(self._v)

    def __len__(self):
        return len(self._v)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return _Indices(self._v[i])
        return self._v[i]


def _arange(start, n):
    try:
        import torch

        return torch.arange(start, start + n, dtype=torch.int64)
    except Exception:
        return _Indices(range(start, start + n))


def _address_view(ptr: int, size: int) -> memoryview:
    """A writable byte view of size bytes at address ptr (host pool memory)."""
    return memoryview((ctypes.c_ubyte * size).from_address(ptr)).cast("B")


def _as_bytes_view(obj):
    """A byte memoryview over a tensor / ndarray / buffer, without a copy.

    Returns (view, keepalive) or (None, None) when obj is not a contiguous CPU
    buffer.
    """
    if obj is None:
        return None, None
    if hasattr(obj, "data_ptr") and hasattr(obj, "element_size"):  # torch
        try:
            if getattr(obj, "is_cuda", False) or not obj.is_contiguous():
                return None, None
            n = obj.numel() * obj.element_size()
            if n == 0:
                return memoryview(b""), obj
            return _address_view(obj.data_ptr(), n), obj
        except Exception:
            return None, None
    try:
        mv = memoryview(obj)
        if not mv.c_contiguous:
            return None, None
        return mv.cast("B"), obj
    except Exception:
        return None, None


def bind_namespace(storage_config, extra: dict, pool, interface: str):
    """Builds the gpucache Namespace one SGLang rank's pages live under.

    Returns (namespace, info) where info holds bytes/buffers per page.
    Raises ValueError on a configuration error.
    """
    tenant = extra.get("tenant")
    if not tenant:
        raise ValueError(_PREFIX + "extra_config needs \"tenant\"")
    model = extra.get("model_id") or _cfg_get(storage_config, "model_name", "")
    if not model:
        raise ValueError(_PREFIX + "no model name (storage_config.model_name or extra_config model_id)")
    mla = bool(_cfg_get(storage_config, "is_mla_model", False))
    tp_rank = int(_cfg_get(storage_config, "tp_rank", 0))
    tp_size = int(_cfg_get(storage_config, "tp_size", 1))
    pp_rank = int(_cfg_get(storage_config, "pp_rank", 0))
    pp_size = int(_cfg_get(storage_config, "pp_size", 1))
    cp_rank = int(_cfg_get(storage_config, "attn_cp_rank", 0))
    cp_size = int(_cfg_get(storage_config, "attn_cp_size", 1))
    dp_rank = int(_cfg_get(storage_config, "dp_rank", 0))
    dp_size = int(_cfg_get(storage_config, "dp_size", 1))
    split = bool(_cfg_get(storage_config, "should_split_heads", False))
    dcp_rank = int(_cfg_get(storage_config, "dcp_rank", 0))
    dcp_size = int(_cfg_get(storage_config, "dcp_size", 1))
    if mla:  # rank-replicated KV: every TP rank of a DCP shard holds its bytes
        tp_rank, tp_size = 0, 1

    page_size = int(getattr(pool, "page_size", 0) or 0)
    if page_size <= 0:
        raise ValueError(_PREFIX + "host pool has no page_size")
    layout_name = str(getattr(pool, "layout", "unknown"))
    ptrs, sizes = pool.get_page_buffer_meta(_arange(0, page_size))
    ptrs, sizes = list(ptrs), [int(s) for s in sizes]
    if not ptrs or len(ptrs) != len(sizes) or min(sizes) <= 0:
        raise ValueError(_PREFIX + "host pool get_page_buffer_meta gave no page buffers")
    bytes_per_page = sum(sizes)

    layer_num = int(getattr(pool, "layer_num", 1) or 1)
    if mla:
        heads = 1
        head_dim = int((getattr(pool, "kv_lora_rank", 0) or 0) + (getattr(pool, "qk_rope_head_dim", 0) or 0))
    else:
        heads = int(getattr(pool, "head_num", 1) or 1)
        head_dim = int(getattr(pool, "head_dim", 1) or 1)
    head_dim = max(head_dim, 1)
    layer_start = int(getattr(pool, "start_layer", 0) or 0)

    fmt = "sglang-hicache/{}/{}/{}/cp{}of{}/dp{}of{}/{}x{}B{}{}".format(
        layout_name, "mla" if mla else "mha", interface, cp_rank, cp_size,
        dp_rank, dp_size, len(sizes), bytes_per_page, "/split" if split else "",
        "/dcp{}of{}".format(dcp_rank, dcp_size) if dcp_size > 1 else "")
    layout = _gc.Layout(
        format=fmt, tp_rank=tp_rank, tp_size=tp_size, pp_rank=pp_rank, pp_size=pp_size,
        layer_start=layer_start, layer_count=layer_num, kv_heads=heads, head_dim=head_dim,
        block_tokens=page_size)
    ns = _gc.Namespace(
        tenant=str(tenant),
        trust_domain=str(extra.get("trust_domain", "default")),
        model_id=str(model),
        config_revision=str(extra.get("model_revision", "unspecified")),
        tokenizer_revision=str(extra.get("tokenizer_revision", "unspecified")),
        adapter=str(extra.get("adapter", "")),
        rope=str(extra.get("rope", "model-default")),
        dtype=_dtype_name(getattr(pool, "dtype", "unknown")),
        quantization=str(extra.get("quantization", "none")),
        layout=layout)
    info = {"bytes_per_page": bytes_per_page, "buffers_per_page": len(sizes),
            "buffer_sizes": sizes, "page_size": page_size}
    return ns, info


def _read_secret(extra: dict) -> bytes:
    path = extra.get("secret_file") or os.environ.get("GPUCACHE_SECRET_FILE")
    if not path:
        return b""
    try:
        with open(path, "rb") as f:
            return f.read(4096).strip()
    except OSError as e:
        raise ValueError(_PREFIX + "cannot read secret_file %s: %s" % (path, e)) from None


def _ssl_context(extra: dict):
    ca, cert, key = extra.get("tls_ca_file"), extra.get("tls_cert_file"), extra.get("tls_key_file")
    if not (ca or cert or extra.get("tls")):
        return None
    import ssl

    ctx = ssl.create_default_context(cafile=ca) if ca else ssl.create_default_context()
    if cert:
        ctx.load_cert_chain(cert, key)
    return ctx


def _make_client(extra: dict):
    addrs = extra.get("addrs") or extra.get("addresses") or os.environ.get("GPUCACHE_ADDRS", "")
    if isinstance(addrs, str):
        addrs = [a.strip() for a in addrs.split(",") if a.strip()]
    if not addrs:
        raise ValueError(_PREFIX + "extra_config needs \"addrs\" (or GPUCACHE_ADDRS)")
    want = {
        "addrs": list(addrs), "tenant": str(extra.get("tenant", "")), "secret": _read_secret(extra),
        "ssl_context": _ssl_context(extra), "timeout": float(extra.get("timeout", 2.0)),
        "pool_size": int(extra.get("pool_size", 8)), "cluster": bool(extra.get("cluster", False)),
    }
    if extra.get("tls_server_name"):
        want["server_hostname"] = str(extra["tls_server_name"])
    params = inspect.signature(_gc.Client).parameters
    if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
        want = {k: v for k, v in want.items() if k in params}
    return _gc.Client(**want)


class GpucacheStorage(_Base):
    """HiCache storage backend: pages of one SGLang rank in a gpucache namespace."""

    def __init__(self, storage_config=None, kwargs=None, **more):
        # Not calling _Base.__init__ with arguments: HiCacheStorage has none.
        kw = dict(kwargs or {})
        kw.update(more)
        self.storage_config = storage_config
        extra = dict(_cfg_get(storage_config, "extra_config", {}) or {})
        extra.update(kw.get("extra_config") or {})
        self._extra = extra
        self._interface = "v1" if int(extra.get("interface_v1", 0) or 0) else "flat"
        self._mla = bool(_cfg_get(storage_config, "is_mla_model", False))
        writer = getattr(storage_config, "is_storage_writer", None)  # a property in SGLang 0.5.23
        if not isinstance(writer, bool):
            writer = not self._mla or int(_cfg_get(storage_config, "tp_rank", 0)) == 0
        self._writer = writer
        self._metrics_on = bool(_cfg_get(storage_config, "enable_storage_metrics", False))
        self._metrics = _storage_metrics()  # guarded by _lock, drained by get_stats()
        self._lease_ttl = float(extra.get("lease_ttl", 0.0))
        if not extra.get("tenant"):
            raise ValueError(_PREFIX + "extra_config needs \"tenant\"")
        client = kw.get("client")
        self._own_client = client is None
        self._client = client if client is not None else _make_client(extra)
        self._lock = threading.Lock()
        self._stats = {"exists_calls": 0, "exists_pages": 0, "get_pages_hit": 0,
                       "get_pages_miss": 0, "set_pages_ok": 0, "set_pages_failed": 0,
                       "bytes_read": 0, "bytes_written": 0, "errors": 0}
        self._reasons = {}
        self._last_warn = 0.0
        self.mem_pool_host = None
        self._regions = []
        self.region_note = ""
        self._ns = None
        self._digest = None
        self._info = None
        self._closed = False
        pool = kw.get("mem_pool_host")
        if pool is not None:
            self.register_mem_pool_host(pool)

    # ---- binding -------------------------------------------------------

    def register_mem_pool_host(self, mem_pool_host):
        """Binds the namespace from the host pool (dtype, layout, page
        geometry) and, with a daemon on a Unix socket, registers the
        pool's memory so reads into it and writes from it copy once in
        gpucached."""
        ns, info = bind_namespace(self.storage_config, self._extra, mem_pool_host, self._interface)
        self.mem_pool_host = mem_pool_host
        self._ns, self._info = ns, info
        self._digest = _gc.namespace_digest(ns)
        self._register_pool(mem_pool_host)

    def _register_pool(self, pool):
        """Register the host pool's buffer(s) with the client when the
        daemon is local; self.region_note says what happened."""
        self._close_regions()
        if not getattr(self._client, "local", False):
            self.region_note = "the daemon is not on a Unix socket: pages go through the socket path"
            logger.info("gpucache/sglang: %s", self.region_note)
            return
        bufs = getattr(pool, "kv_buffer", None)
        bufs = list(bufs) if isinstance(bufs, (list, tuple)) else [bufs]
        notes = []
        try:
            for b in bufs:
                if b is None:
                    raise ValueError("the host pool has no kv_buffer")
                r = self._client.register(buffer=b)
                self._regions.append(r)
                ok, why = self._client.check_region(r)
                if not ok:
                    raise ValueError(why)
                notes.append("%s (%d bytes, %s)" % (r.name, r.length, why))
        except Exception as e:
            self._close_regions()
            self.region_note = ("the host pool is not registered with gpucached (%s): pages go through the "
                                "socket path" % (e,))
            logger.warning("gpucache/sglang: %s", self.region_note)
            return
        self.region_note = ("registered the host pool with gpucached: %s; reads copy once from its slab into "
                            "the pool (GET_INTO), writes once from the pool into its slab (PUT_OPAQUE_FROM)"
                            % ", ".join(notes))
        logger.info("gpucache/sglang: %s", self.region_note)

    def _close_regions(self):
        regions, self._regions = getattr(self, "_regions", []), []
        for r in regions:
            try:
                r.close()
            except Exception as e:
                self._fail("unregister", e)

    @property
    def namespace(self):
        return self._ns

    def _names(self, key, n=None):
        if n is None or n == 1:
            return [key.encode("utf-8") if isinstance(key, str) else bytes(key)]
        base = key.encode("utf-8") if isinstance(key, str) else bytes(key)
        return [base + b"/" + str(i).encode() for i in range(n)]

    def _keys(self, names):
        return [_gc.opaque_key(self._digest, nm) for nm in names]

    def _per_page(self):
        return self._info["buffers_per_page"] if self._interface == "v1" else 1

    # ---- bookkeeping ---------------------------------------------------

    def _count(self, **inc):
        with self._lock:
            for k, v in inc.items():
                self._stats[k] = self._stats.get(k, 0) + v

    def _sample(self, kind, pages, nbytes, t0):
        """One operation's pages and GB/s for SGLang's storage metrics."""
        if not self._metrics_on or pages <= 0:
            return
        secs = max(time.perf_counter() - t0, 1e-9)
        with self._lock:
            pgs = getattr(self._metrics, kind + "_pgs")
            bw = getattr(self._metrics, kind + "_bandwidth")
            if len(pgs) < _MAX_METRICS:
                pgs.append(pages)
                bw.append(nbytes / secs / 1e9)

    def _fail(self, what, err):
        now = time.monotonic()
        with self._lock:
            self._stats["errors"] += 1
            warn = now - self._last_warn > 30.0
            if warn:
                self._last_warn = now
        if warn:
            logger.warning("gpucache/sglang: %s failed (counted as a miss): %r", what, err)

    def _reason(self, reason):
        if reason:
            with self._lock:
                self._reasons[reason] = self._reasons.get(reason, 0) + 1

    def _ready(self, keys):
        return self._ns is not None and not self._closed and all(
            len(k.encode("utf-8") if isinstance(k, str) else k) + 8 <= _MAX_NAME for k in keys)

    # ---- existence -----------------------------------------------------

    def batch_exists(self, keys, extra_info=None) -> int:
        """Number of leading pages stored (one LOOKUP round trip)."""
        keys = list(keys)
        if not keys or not self._ready(keys):
            return 0
        try:
            per = self._per_page()
            names = [nm for k in keys for nm in self._names(k, per)]
            hits, _lease = self._client.lookup(self._ns, self._keys(names), lease_ttl=self._lease_ttl)
            pages = max(0, min(int(hits), len(names))) // per
        except Exception as e:
            self._fail("batch_exists", e)
            return 0
        self._count(exists_calls=1, exists_pages=pages)
        return pages

    def exists(self, key) -> bool:
        return self.batch_exists([key]) == 1

    # ---- zero-copy pair (interface_v1) ----------------------------------

    def _page_views(self, keys, host_indices):
        """Per page: list of (name, writable view) over the host pool buffers."""
        pool = self.mem_pool_host
        ptrs, sizes = pool.get_page_buffer_meta(host_indices)
        ptrs, sizes = list(ptrs), [int(s) for s in sizes]
        n = len(keys)
        per = self._info["buffers_per_page"]
        if len(ptrs) != n * per or len(sizes) != len(ptrs) or sizes[:per] != self._info["buffer_sizes"]:
            raise ValueError(_PREFIX + "host pool gave %d buffers for %d pages, want %d each" % (len(ptrs), n, per))
        out = []
        for i, k in enumerate(keys):
            names = self._names(k, per)
            out.append([(names[j], _address_view(ptrs[i * per + j], sizes[i * per + j])) for j in range(per)])
        return out

    def batch_get_v1(self, keys, host_indices, extra_info=None):
        """Reads pages straight into the host pool; one bool per page, in order."""
        keys = list(keys)
        res = [False] * len(keys)
        if not keys or not self._ready(keys):
            return res
        t0 = time.perf_counter()
        try:
            pages = self._page_views(keys, host_indices)
            flat = [item for page in pages for item in page]
            results = self._client.get_into(self._ns, self._keys([nm for nm, _ in flat]), [v for _, v in flat])
            j, nbytes = 0, 0
            for i, page in enumerate(pages):
                ok = True
                for _nm, view in page:
                    r = results[j] if j < len(results) else None
                    j += 1
                    if r is None or not getattr(r, "hit", False) or int(getattr(r, "length", -1)) != len(view):
                        ok = False
                        self._reason(getattr(r, "reason", "malformed") if r is not None else "malformed")
                if ok:
                    nbytes += sum(len(v) for _, v in page)
                res[i] = ok
        except Exception as e:
            self._fail("batch_get_v1", e)
            return [False] * len(keys)
        hit = sum(res)
        self._count(get_pages_hit=hit, get_pages_miss=len(keys) - hit, bytes_read=nbytes)
        self._sample("prefetch", hit, nbytes, t0)
        return res

    def batch_set_v1(self, keys, host_indices, extra_info=None):
        """Writes pages straight from the host pool; one bool per page, in order."""
        keys = list(keys)
        if not keys:
            return []
        if not self._writer:  # MLA: tp rank 0 writes the replicated pages
            return [True] * len(keys)
        if not self._ready(keys):
            return [False] * len(keys)
        t0 = time.perf_counter()
        try:
            pages = self._page_views(keys, host_indices)
            entries = [(nm, view) for page in pages for nm, view in page]
            st = self._client.put_opaque(self._ns, entries)
            res, j, nbytes = [], 0, 0
            for page in pages:
                ok = all(j + m < len(st) and _status_ok(st[j + m]) for m in range(len(page)))
                j += len(page)
                res.append(ok)
                if ok:
                    nbytes += sum(len(v) for _, v in page)
        except Exception as e:
            self._fail("batch_set_v1", e)
            res, nbytes = [False] * len(keys), 0
        good = sum(res)
        self._count(set_pages_ok=good, set_pages_failed=len(keys) - good, bytes_written=nbytes)
        self._sample("backup", good, nbytes, t0)
        return res

    # ---- flat-page interface ---------------------------------------------

    def batch_get(self, keys, target_locations=None, target_sizes=None):
        """Flat pages: target tensors filled in place (or new ones); None on a miss."""
        keys = list(keys)
        out = [None] * len(keys)
        if not keys or not self._ready(keys):
            return out
        t0, nbytes = time.perf_counter(), 0
        try:
            bkeys = self._keys([self._names(k)[0] for k in keys])
            if target_locations is not None:
                targets = list(target_locations)
                views = [_as_bytes_view(t) for t in targets]
                idx = [i for i, (v, _) in enumerate(views) if v is not None]
                results = self._client.get_into(self._ns, [bkeys[i] for i in idx], [views[i][0] for i in idx])
                for r, i in zip(results, idx):
                    if getattr(r, "hit", False) and int(getattr(r, "length", -1)) == len(views[i][0]):
                        out[i] = targets[i]
                        nbytes += len(views[i][0])
                    else:
                        self._reason(getattr(r, "reason", "malformed"))
            else:
                datas = self._client.get(self._ns, bkeys)
                for i, d in enumerate(datas[: len(keys)]):
                    if d is not None:
                        out[i] = _to_tensor(d)
                        nbytes += len(d)
        except Exception as e:
            self._fail("batch_get", e)
            return [None] * len(keys)
        hit = sum(1 for o in out if o is not None)
        self._count(get_pages_hit=hit, get_pages_miss=len(keys) - hit, bytes_read=nbytes)
        self._sample("prefetch", hit, nbytes, t0)
        return out

    def get(self, key, target_location=None, target_sizes=None):
        return self.batch_get([key], None if target_location is None else [target_location])[0]

    def batch_set(self, keys, values=None, target_locations=None, target_sizes=None) -> bool:
        keys = list(keys)
        if not keys:
            return True
        if not self._writer:
            return True
        if values is None or not self._ready(keys):
            return False
        t0, nbytes = time.perf_counter(), 0
        try:
            values = list(values)
            views = [_as_bytes_view(v)[0] for v in values]
            if len(values) != len(keys) or any(v is None for v in views):
                return False
            st = self._client.put_opaque(self._ns, [(self._names(k)[0], v) for k, v in zip(keys, views)])
            ok = [i < len(st) and _status_ok(st[i]) for i in range(len(keys))]
            nbytes = sum(len(views[i]) for i in range(len(keys)) if ok[i])
        except Exception as e:
            self._fail("batch_set", e)
            ok = [False] * len(keys)
        self._count(set_pages_ok=sum(ok), set_pages_failed=len(ok) - sum(ok), bytes_written=nbytes)
        self._sample("backup", sum(ok), nbytes, t0)
        return all(ok)

    def set(self, key, value=None, target_location=None, target_sizes=None) -> bool:
        return self.batch_set([key], [value if value is not None else target_location])

    # ---- lifecycle -------------------------------------------------------

    def clear(self) -> None:
        """Forgets local counters and metrics. Stored pages stay: they are
        shared and reclaimed by gpucache's own eviction."""
        fresh = _storage_metrics()
        with self._lock:
            for k in self._stats:
                self._stats[k] = 0
            self._reasons.clear()
            self._metrics = fresh

    def get_stats(self):
        """SGLang's StorageMetrics since the last call (empty lists unless
        storage_config.enable_storage_metrics); what SGLang's metrics
        collector reads with --enable-metrics."""
        fresh = _storage_metrics()
        with self._lock:
            out, self._metrics = self._metrics, fresh
        return out

    def counters(self):
        """The backend's running counters and its miss reasons, as a dict
        (region_*: the client's region counters, Client.region_stats)."""
        with self._lock:
            s = dict(self._stats)
            s["miss_reasons"] = dict(self._reasons)
        rs = getattr(self._client, "region_stats", None)
        if rs is not None:
            s.update(("region_" + k, v) for k, v in rs().items())
        return s

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._close_regions()
        if self._own_client:
            try:
                self._client.close()
            except Exception as e:
                self._fail("close", e)


def _to_tensor(data):
    try:
        import torch

        return torch.frombuffer(bytearray(data), dtype=torch.uint8)
    except Exception:
        return bytes(data)
