"""gpucache as a vLLM offloading secondary tier (TieringOffloadingSpec).

Loaded by vLLM's SecondaryTierFactory with no patch to vLLM::

    --kv-transfer-config '{"kv_connector":"OffloadingConnector",
      "kv_role":"kv_both",
      "kv_connector_extra_config":{"spec_name":"TieringOffloadingSpec",
        "cpu_bytes_to_use":8589934592,
        "secondary_tiers":[{"type":"GpucacheTier","module_path":"gpucache.vllm",
          "addrs":["10.0.0.5:9400"],"tenant":"acme",
          "secret_file":"/etc/gpucache/acme.secret"}]}}'

The factory imports ``module_path``, takes the class named by ``type`` and
builds it as ``cls(offloading_spec=..., primary_kv_view=..., tier_type=...,
**rest_of_the_tier_config)`` (older trees pass ``vllm_config=`` instead of
``offloading_spec=``; both are accepted).

How the tier works
- The CPU (primary) tier hands every secondary tier one ``memoryview`` over
  its KV region; block (chunk) ``i`` is the ``strides[0]`` bytes at offset
  ``i * strides[0]``. A job names primary slots by ``chunk_ids`` (``block_ids``
  on trees before TransferJob) and blocks by
  ``keys`` (vLLM's OffloadKey: the block hash plus a 4-byte group index).
- vLLM gives a secondary tier no token ids, only those hashes, so each block
  is stored as an opaque-key block named by its OffloadKey bytes
  (``Client.put_opaque``) straight from the primary slot and read back by
  ``opaque_key(namespace digest, name)`` with ``Client.get_into`` straight
  into the primary slot: no copy in Python on either path.
- The hash says nothing about model, rank or dtype; the namespace does. It is
  bound from the offloading config (model, revision, dtype, KV dtype, tp/pp
  rank and size, layers, KV heads, head dim, tokens per block) plus the
  tenant, trust domain and secret of the tier config, so the same hash under
  another model, rank, dtype or tenant misses.
- Every method the scheduler calls returns at once. Stores, loads and lookups
  run on the tier's own threads; ``lookup`` answers RETRY (None on older
  trees) until its background answer is in, then HIT or MISS.
- Nothing raises into the engine from I/O: a failed or partial transfer is a
  JobResult with success False; a lookup that fails is a MISS.
- A daemon on the same host (``"addrs": ["unix:/run/gpucache/gpucached.sock"]``,
  its ``unix_listen``): the tier registers the file behind the primary
  region, vLLM's ``/dev/shm/vllm_offload_<engine_id>.mmap`` (found through
  /proc/self/maps, unlinked or not), so a load is GET_INTO (gpucached
  copies each block once from its slab into the primary slot) and a store
  is PUT_OPAQUE_FROM (gpucached copies it once from the primary slot into
  its slab): no payload crosses the socket. Over TCP, or when the file
  cannot be registered, loads and stores use the socket; the tier logs why
  once. ``stats()`` counts the blocks each way (region_get_into,
  region_put_opaque_from) and the blocks that fell back
  (region_fallback_<cause>).

Ownership: the primary slots named by a job belong to this tier from
submit_* until the job is returned by get_finished_jobs; drain_jobs waits for
every submitted job, so after it no thread of this tier touches the view.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import enum
import inspect
import logging
import queue
import threading
import time
from typing import Any, Dict, Iterable, List, Optional, Sequence

log = logging.getLogger("gpucache.vllm")

# --- the vLLM interface, or a stand-in with the same shape -----------------

class UnsupportedVLLM(ImportError):
    """The installed vLLM has no SecondaryTierManager interface this module
    can serve: the message names what is missing and the vLLM version."""


def _vllm_tiering() -> Any:
    """vLLM's tiering module when vLLM is installed, else None.

    With vLLM installed this module binds to its real classes, never to the
    stand-ins below: a stand-in base class would be refused by vLLM's
    SecondaryTierFactory (``issubclass(tier_cls, SecondaryTierManager)``).
    An interface it cannot serve fails here, at import, with what is
    missing, instead of silently at the factory.
    """
    import importlib.util

    try:
        found = importlib.util.find_spec("vllm") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return None
    import vllm  # type: ignore  # noqa: F401

    version = getattr(vllm, "__version__", "unknown")
    try:
        from vllm.v1.kv_offload.tiering import base as vb  # type: ignore
    except ImportError as e:
        raise UnsupportedVLLM(
            "gpucache.vllm: vLLM %s is installed but vllm.v1.kv_offload.tiering.base does not "
            "import (%s): this vLLM has no SecondaryTierManager interface; use the native "
            "connector (gpucache.vllm_connector) or LMCache instead" % (version, e)) from e
    missing = [n for n in ("SecondaryTierManager", "JobResult") if not hasattr(vb, n)]
    if not (hasattr(vb, "TransferJob") or hasattr(vb, "JobMetadata")):
        missing.append("TransferJob (or JobMetadata)")
    if missing:
        raise UnsupportedVLLM(
            "gpucache.vllm: vLLM %s's vllm.v1.kv_offload.tiering.base lacks %s: an interface "
            "this module does not support" % (version, ", ".join(missing)))
    return vb


_vbase = _vllm_tiering()
HAVE_VLLM = _vbase is not None
if _vbase is not None:  # pragma: no cover - exercised only where vllm is installed
    SecondaryTierManager = _vbase.SecondaryTierManager
    JobResult = _vbase.JobResult
    # A job names the primary slots it reads or fills: chunk_ids on
    # TransferJob (vLLM 0.32 and later), block_ids on the older JobMetadata.
    JobMetadata = getattr(_vbase, "TransferJob", None) or _vbase.JobMetadata
else:
    @dataclasses.dataclass
    class JobMetadata:  # type: ignore[no-redef]
        """Stand-in for vllm.v1.kv_offload.tiering.base.JobMetadata."""

        job_id: int
        keys: Sequence[bytes]
        block_ids: Any
        is_promotion: bool = False
        req_context: Any = None

    @dataclasses.dataclass
    class JobResult:  # type: ignore[no-redef]
        """Stand-in for vllm.v1.kv_offload.tiering.base.JobResult."""

        job_id: int
        success: bool

    class SecondaryTierManager:  # type: ignore[no-redef]
        """Stand-in for vllm's SecondaryTierManager (same constructor)."""

        def __init__(self, offloading_spec: Any, primary_kv_view: memoryview,
                     tier_type: str) -> None:
            self._offloading_spec = offloading_spec
            self._primary_kv_view = primary_kv_view
            self.tier_type = tier_type

try:  # pragma: no cover - exercised only where vllm is installed
    from vllm.v1.kv_offload import base as _vkbase  # type: ignore
except Exception:
    _vkbase = None

if _vkbase is not None and hasattr(_vkbase, "LookupResult"):  # pragma: no cover
    LookupResult = _vkbase.LookupResult
    _LOOKUP_ENUM = True
elif _vkbase is not None:  # pragma: no cover - trees answering bool | None
    LookupResult = None
    _LOOKUP_ENUM = False
else:
    class LookupResult(enum.Enum):  # type: ignore[no-redef]
        """Stand-in for vllm.v1.kv_offload.base.LookupResult."""

        MISS = 0
        HIT = 1
        RETRY = 2

    _LOOKUP_ENUM = True

if _vkbase is not None and hasattr(_vkbase, "RequestOffloadingContext"):  # pragma: no cover
    RequestOffloadingContext = _vkbase.RequestOffloadingContext
else:
    @dataclasses.dataclass
    class RequestOffloadingContext:  # type: ignore[no-redef]
        """Stand-in: the tier states no per-request preference."""

        policy: Any = None

if _vkbase is not None and hasattr(_vkbase, "ReqContext"):  # pragma: no cover
    ReqContext = _vkbase.ReqContext
else:
    @dataclasses.dataclass
    class ReqContext:  # type: ignore[no-redef]
        """Stand-in for vllm.v1.kv_offload.base.ReqContext."""

        req_id: str = ""
        kv_transfer_params: Optional[dict] = None


def _answer(hit: Optional[bool]) -> Any:
    """A lookup answer in the form this vLLM tree expects."""
    if not _LOOKUP_ENUM:
        return hit
    if hit is None:
        for name in ("RETRY", "HIT_PENDING"):
            if hasattr(LookupResult, name):
                return getattr(LookupResult, name)
        return LookupResult.MISS
    return LookupResult.HIT if hit else LookupResult.MISS


_RESULT_FIELDS = frozenset(f.name for f in dataclasses.fields(JobResult)) \
    if dataclasses.is_dataclass(JobResult) else frozenset({"job_id", "success"})


def _check_shape() -> None:
    """Refuse, at import, job and result types this module cannot fill.

    The tier reads a job's ``job_id``, ``keys`` and slots (``chunk_ids`` or
    ``block_ids``), and builds results from ``job_id`` and ``success`` plus
    whichever optional fields the tree has; a required result field it does
    not know would fail at the first finished job, far from the cause.
    """
    problems = []
    if dataclasses.is_dataclass(JobMetadata):
        names = {f.name for f in dataclasses.fields(JobMetadata)}
        for need in ("job_id", "keys"):
            if need not in names:
                problems.append("%s.%s" % (JobMetadata.__name__, need))
        if not names & {"chunk_ids", "block_ids"}:
            problems.append("%s.chunk_ids (or block_ids)" % JobMetadata.__name__)
    if dataclasses.is_dataclass(JobResult):
        fields = dataclasses.fields(JobResult)
        names = {f.name for f in fields}
        for need in ("job_id", "success"):
            if need not in names:
                problems.append("JobResult.%s" % need)
        for f in fields:
            if f.name not in ("job_id", "success") and f.init and \
                    f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                problems.append("a default for JobResult.%s" % f.name)
    if problems:
        raise UnsupportedVLLM(
            "gpucache.vllm: vLLM %s's tiering job types lack %s: an interface this module "
            "does not support" % (_vllm_version(), ", ".join(problems)))


def _vllm_version() -> str:
    import sys

    return str(getattr(sys.modules.get("vllm"), "__version__", "unknown"))


if HAVE_VLLM:  # pragma: no cover - exercised only where vllm is installed
    _check_shape()


def _job_result(job_id: int, success: bool, ok_keys: Sequence[bytes] = (),
                nbytes: Optional[int] = None, seconds: Optional[float] = None) -> Any:
    """Build a JobResult, filling the optional fields this tree has
    (transfer_time feeds vLLM's kv_offload_tiering read and write time)."""
    kw: Dict[str, Any] = {"job_id": job_id, "success": success}
    if not success and ok_keys and "successful_keys" in _RESULT_FIELDS:
        kw["successful_keys"] = tuple(ok_keys)
    if seconds is not None and "transfer_time" in _RESULT_FIELDS:
        kw["transfer_time"] = seconds
    if nbytes is not None:
        for name in ("transfer_bytes", "transfer_size"):
            if name in _RESULT_FIELDS:
                kw[name] = nbytes
                break
    return JobResult(**kw)


# --- the gpucache side: namespace, keys and client --------------------------

from gpucache import identity as _gid  # noqa: E402


def _build(cls: Any, values: Dict[str, Any]) -> Any:
    """cls(**values), matching field names by probing (d_type/dtype, ...)."""
    if dataclasses.is_dataclass(cls):
        names = [f.name for f in dataclasses.fields(cls)]
    else:
        names = [p for p in inspect.signature(cls).parameters if p != "self"]
    squash = {n.replace("_", ""): n for n in names}
    kw = {}
    for k, v in values.items():
        n = k if k in names else squash.get(k.replace("_", ""))
        if n is not None:
            kw[n] = v
    return cls(**kw)


def make_namespace(fields: Dict[str, Any], layout: Dict[str, Any]) -> Any:
    """A gpucache Namespace from plain values (Go's field names, snake_case)."""
    return _build(_gid.Namespace, dict(fields, layout=_build(_gid.Layout, layout)))


def opaque_key_of(ns: Any, name: bytes) -> bytes:
    """The BlockKey of opaque-key block `name` in `ns` (32 bytes)."""
    return bytes(_gid.opaque_key(_gid.namespace_digest(ns), name))


def _status_ok(st: Any) -> bool:
    name = getattr(st, "name", None)
    if name is None:
        name = str(st).rsplit(".", 1)[-1]
    return name in ("STORED", "EXISTS")


# --- binding the namespace from the offloading config -----------------------

def _get(obj: Any, *path: str, default: Any = None) -> Any:
    for p in path:
        if obj is None:
            return default
        obj = obj.get(p) if isinstance(obj, dict) else getattr(obj, p, None)
    return default if obj is None else obj


def _first(*vals: Any, default: Any = None) -> Any:
    for v in vals:
        if v is not None and v != "":
            return v
    return default


def _dtype_name(d: Any) -> str:
    s = str(d)
    return s[len("torch."):] if s.startswith("torch.") else s


def bind_namespace(spec: Any, tier: Dict[str, Any]) -> Any:
    """The namespace of this engine's blocks.

    Probes both config shapes: the newer ``offloading_spec.config`` (model,
    parallel, cache, groups) and ``vllm_config`` (model_config,
    parallel_config, cache_config). Values in the tier config win, so an
    operator can pin what the engine cannot say (trust domain, revisions).
    """
    cfg = _get(spec, "config")
    vc = _first(_get(spec, "vllm_config"), _get(spec, "_vllm_config"),
                spec if _get(spec, "model_config") is not None else None)
    mc = _get(vc, "model_config")
    pc = _get(vc, "parallel_config")
    cc = _get(vc, "cache_config")
    hf = _first(_get(mc, "hf_text_config"), _get(mc, "hf_config"))

    model = _first(tier.get("model_id"), _get(cfg, "model", "name"), _get(mc, "model"),
                   _get(mc, "served_model_name"))
    if not model:
        raise ValueError("gpucache/vllm: no model name in the offloading config; "
                         "set model_id in the tier config")
    tp_size = int(_first(tier.get("tp_size"), _get(cfg, "parallel", "tp_size"),
                         _get(pc, "tensor_parallel_size"), default=1))
    pp_size = int(_first(tier.get("pp_size"), _get(cfg, "parallel", "pp_size"),
                         _get(pc, "pipeline_parallel_size"), default=1))
    rank = int(_first(tier.get("rank"), _get(cfg, "parallel", "rank"),
                      _get(pc, "rank"), default=0))
    tp_rank, pp_rank = rank % tp_size, (rank // tp_size) % pp_size
    dtype = _dtype_name(_first(tier.get("dtype"), _get(cfg, "model", "dtype"),
                               _get(mc, "dtype"), default="auto"))
    kv_dtype = str(_first(tier.get("kv_cache_dtype"), _get(cfg, "model", "kv_cache_dtype"),
                          _get(cc, "cache_dtype"), default="auto"))
    quant = "none" if kv_dtype in ("auto", "", dtype) else kv_dtype
    # vLLM 0.32's OffloadingConfig: groups of layers, each with its tokens
    # per block; blocks_per_chunk of them make one offloaded chunk.
    groups = list(_get(cfg, "groups", default=()) or ())
    group_block = max((int(_get(g, "tokens_per_block", default=0)) for g in groups), default=0)
    group_layers = sum(len(_get(g, "layer_names", default=()) or ()) for g in groups)
    gpu_block = _first(_get(cfg, "cache", "tokens_per_block"), group_block or None,
                       _get(cc, "block_size"))
    per_chunk = _first(_get(spec, "blocks_per_chunk"), _get(cfg, "cache", "blocks_per_chunk"),
                       _get(spec, "block_size_factor"), default=1)
    block_tokens = int(_first(tier.get("block_tokens"), _get(spec, "offloaded_block_size"),
                              group_block * int(per_chunk) if group_block else None,
                              _get(cfg, "cache", "tokens_per_hash"),
                              int(gpu_block) * int(per_chunk) if gpu_block else None,
                              default=16))
    layers = int(_first(tier.get("layer_count"), _get(hf, "num_hidden_layers"),
                        group_layers or None, default=1))
    heads = _get(hf, "num_attention_heads")
    kv_heads = int(_first(tier.get("kv_heads"), _get(hf, "num_key_value_heads"), heads, default=1))
    head_dim = _first(tier.get("head_dim"), _get(hf, "head_dim"))
    if head_dim is None and heads and _get(hf, "hidden_size"):
        head_dim = int(_get(hf, "hidden_size")) // int(heads)
    rope = tier.get("rope")
    if rope is None:
        theta, scaling = _get(hf, "rope_theta"), _get(hf, "rope_scaling")
        rope = "default" if theta is None else "theta=%s" % theta
        if scaling:
            rope += ";scaling=%s" % sorted(dict(scaling).items())
    fmt = str(_first(tier.get("layout_format"), default="vllm-offload-v1"))
    canon = _get(cfg, "kv_cache_layout")
    if canon is not None and _get(cfg, "canonical_layout"):
        fmt += "+" + str(canon)
    layout = {
        "format": fmt, "tp_rank": tp_rank, "tp_size": tp_size,
        "pp_rank": pp_rank, "pp_size": pp_size, "layer_start": 0,
        "layer_count": max(layers, 1),
        "kv_heads": max(kv_heads // tp_size if kv_heads >= tp_size else kv_heads, 1),
        "head_dim": max(int(head_dim or 1), 1), "block_tokens": block_tokens,
    }
    fields = {
        "tenant": tier["tenant"],
        "trust_domain": str(tier.get("trust_domain") or "default"),
        "model_id": str(model),
        "config_revision": str(_first(tier.get("model_revision"), _get(mc, "revision"),
                                      _get(cfg, "model", "revision"), default="main")),
        "tokenizer_revision": str(_first(tier.get("tokenizer_revision"),
                                         _get(mc, "tokenizer_revision"), default="main")),
        "adapter": str(tier.get("adapter") or ""),
        "rope": str(rope),
        "dtype": dtype,
        "quantization": quant,
    }
    return make_namespace(fields, layout)


def _client_from_config(tier: Dict[str, Any]) -> Any:
    from gpucache.client import client_from_config

    return client_from_config(tier)


# --- the tier ----------------------------------------------------------------

_STOP = object()


class GpucacheTier(SecondaryTierManager):
    """A vLLM secondary tier backed by a gpucache cluster.

    Tier config keys (all but tenant optional): addrs (list or "h:p,h:p"),
    tenant, secret | secret_file, trust_domain, timeout (s, 2.0), pool_size
    (8), cluster (false), ca_file/cert_file/key_file (TLS), load_threads (2),
    store_threads (2), batch_blocks (16 blocks per request), max_answers
    (65536 cached lookup answers), block_bytes (only for a 1-D view),
    model_id/model_revision/tokenizer_revision/adapter/rope/dtype/
    kv_cache_dtype/rank/tp_size/pp_size/block_tokens/layer_count/kv_heads/
    head_dim/layout_format (override what the engine config says), client
    (an already-built gpucache client: embedding and tests).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        spec = kwargs.pop("offloading_spec", None)
        if spec is None:
            spec = kwargs.pop("vllm_config", None)
        view = kwargs.pop("primary_kv_view", None)
        tier_type = kwargs.pop("tier_type", type(self).__name__)
        # vLLM 0.32 and later build the tier's back-pressure detector from
        # the tier config's "backpressure" and hand it over here; the base
        # class keeps it, and the manager reads it (tier.bp_detector) to drop
        # cascades while the tier is slow.
        detector = kwargs.pop("backpressure_detector", None)
        pos = list(args)
        if spec is None and pos:
            spec = pos.pop(0)
        if view is None and pos:
            view = pos.pop(0)
        if pos:
            tier_type = pos.pop(0)
        if view is None:
            raise ValueError("gpucache/vllm: primary_kv_view is required")
        self._init_base(spec, view, tier_type, detector)
        self.tier_type = tier_type
        tier = dict(kwargs)
        if not tier.get("tenant"):
            raise ValueError("gpucache/vllm: the tier config needs a tenant")

        # The primary region as flat bytes; block i is [i*bb, (i+1)*bb).
        mv = memoryview(view)
        if not mv.c_contiguous:
            raise ValueError("gpucache/vllm: primary_kv_view is not C-contiguous")
        bb = tier.get("block_bytes")
        if bb is None:
            if mv.ndim < 2:
                raise ValueError("gpucache/vllm: a 1-D primary_kv_view needs block_bytes")
            bb = mv.strides[0]
        self._flat = mv.cast("B") if (mv.ndim != 1 or mv.format != "B") else mv
        self._block_bytes = int(bb)
        if self._block_bytes <= 0 or self._flat.nbytes % self._block_bytes:
            raise ValueError("gpucache/vllm: block_bytes %d does not divide the view (%d bytes)"
                             % (self._block_bytes, self._flat.nbytes))
        self._num_blocks = self._flat.nbytes // self._block_bytes
        self._batch = max(int(tier.get("batch_blocks", 16)), 1)
        self._max_answers = max(int(tier.get("max_answers", 65536)), 1)

        self.namespace = bind_namespace(spec, tier)
        self._client = tier.get("client") or _client_from_config(tier)
        self._own_client = tier.get("client") is None
        self._region = None
        self.region_note = self._register_primary()

        # mu guards everything below it.
        self._mu = threading.Lock()
        self._idle = threading.Condition(self._mu)
        self._finished: List[Any] = []
        self._running = 0          # jobs submitted and not yet in _finished
        self._closed = False
        # request id -> {key: hit}; LRU over requests, each bounded.
        self._answers: "collections.OrderedDict[Any, Dict[bytes, bool]]" = \
            collections.OrderedDict()
        self._asked: set = set()   # (request id, key) with a lookup in flight
        self._counts = collections.Counter()

        self._lookups: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
        self._lookup_thread = threading.Thread(
            target=self._lookup_loop, name="gpucache-vllm-lookup", daemon=True)
        self._lookup_thread.start()
        self._loads = concurrent.futures.ThreadPoolExecutor(
            max_workers=max(int(tier.get("load_threads", 2)), 1),
            thread_name_prefix="gpucache-vllm-load")
        self._stores = concurrent.futures.ThreadPoolExecutor(
            max_workers=max(int(tier.get("store_threads", 2)), 1),
            thread_name_prefix="gpucache-vllm-store")

    def _register_primary(self) -> str:
        """Register the file behind the primary region with the client when
        the daemon is local; what the tier does, as logged."""
        if not getattr(self._client, "local", False):
            note = ("the daemon is not on a Unix socket (addrs %s): loads and stores use the socket path; "
                    "a unix: address lets loads and stores copy straight into and out of the CPU tier's file"
                    % (getattr(self._client, "_addrs", "?"),))
            log.info("gpucache/vllm: %s", note)
            return note
        try:
            self._region = self._client.register(buffer=self._flat)
        except Exception as e:
            note = "the CPU tier's memory cannot be registered (%s): loads and stores use the socket path" % (e,)
            log.warning("gpucache/vllm: %s", note)
            return note
        ok, why = self._client.check_region(self._region)
        if ok:
            note = ("registered %s (%d bytes, %s) with gpucached: loads copy once from its slab into the "
                    "primary slots (GET_INTO), stores once from the primary slots into its slab (PUT_OPAQUE_FROM)"
                    % (self._region.name, self._region.length, why))
            log.info("gpucache/vllm: %s", note)
        else:
            note = ("%s is not usable as a registered region (%s): loads and stores use the socket path until a "
                    "connection registers it" % (self._region.name, why))
            log.warning("gpucache/vllm: %s", note)
        return note

    def _init_base(self, spec: Any, view: Any, tier_type: str, detector: Any = None) -> None:
        """Call the base constructor with the parameter names it declares."""
        params = inspect.signature(SecondaryTierManager.__init__).parameters
        kw: Dict[str, Any] = {}
        for name in params:
            if name == "self":
                continue
            if name in ("offloading_spec", "vllm_config"):
                kw[name] = spec
            elif name == "primary_kv_view":
                kw[name] = view
            elif name == "tier_type":
                kw[name] = tier_type
            elif name == "backpressure_detector":
                kw[name] = detector
        if detector is not None and "backpressure_detector" not in kw:
            log.warning("gpucache/vllm: this vLLM's SecondaryTierManager takes no "
                        "backpressure_detector; the tier's backpressure config is ignored")
        SecondaryTierManager.__init__(self, **kw)

    # -- names and slots --

    @staticmethod
    def get_tier_type() -> str:
        return "GpucacheTier"

    @staticmethod
    def _name(key: Any) -> bytes:
        if isinstance(key, (bytes, bytearray, memoryview)):
            name = bytes(key)
        elif isinstance(key, int):
            name = key.to_bytes(32, "big", signed=True)
        else:
            raise TypeError("gpucache/vllm: unsupported offload key type %s" % type(key).__name__)
        if not 1 <= len(name) <= 1024:
            raise ValueError("gpucache/vllm: offload key of %d bytes, limit 1024" % len(name))
        return name

    def _slot(self, block_id: Any) -> memoryview:
        i = int(block_id)
        if not 0 <= i < self._num_blocks:
            raise IndexError("gpucache/vllm: block id %d outside 0..%d" % (i, self._num_blocks - 1))
        return self._flat[i * self._block_bytes:(i + 1) * self._block_bytes]

    # -- lookups: answered from the background thread's results --

    @staticmethod
    def _rid(req_context: Any) -> Any:
        return getattr(req_context, "req_id", None)

    def lookup(self, key: Any, req_context: Any = None) -> Any:
        rid = self._rid(req_context)
        try:
            name = self._name(key)
        except (TypeError, ValueError):
            return _answer(False)
        with self._mu:
            if self._closed:
                return _answer(False)
            got = self._answers.get(rid)
            if got is not None and name in got:
                self._answers.move_to_end(rid)
                return _answer(got[name])
            if (rid, name) in self._asked:
                return _answer(None)
            self._asked.add((rid, name))
        self._lookups.put((rid, name))
        return _answer(None)

    def _lookup_loop(self) -> None:
        while True:
            item = self._lookups.get()
            batch = [item]
            while item is not _STOP:
                try:
                    item = self._lookups.get_nowait()
                except queue.Empty:
                    break
                batch.append(item)
            stop = any(b is _STOP for b in batch)
            by_req: Dict[Any, List[bytes]] = collections.OrderedDict()
            for b in batch:
                if b is not _STOP:
                    by_req.setdefault(b[0], []).append(b[1])
            for rid, names in by_req.items():
                self._answer_lookups(rid, names)
            if stop:
                return

    def _answer_lookups(self, rid: Any, names: List[bytes]) -> None:
        """Resolve names with LOOKUP (a leading run per round trip)."""
        found: Dict[bytes, bool] = {}
        rest = list(dict.fromkeys(names))
        while rest:
            try:
                keys = [opaque_key_of(self.namespace, n) for n in rest]
                hits, _ = self._client.lookup(self.namespace, keys)
            except Exception:  # the client should not raise; a miss if it does
                log.debug("gpucache/vllm: lookup failed", exc_info=True)
                hits = 0
            hits = max(0, min(int(hits), len(rest)))
            for n in rest[:hits]:
                found[n] = True
            if hits < len(rest):
                found[rest[hits]] = False
            rest = rest[hits + 1:]
        with self._mu:
            for n in names:
                self._asked.discard((rid, n))
            if not self._asked and not self._running:
                self._idle.notify_all()
            if self._closed:
                return
            got = self._answers.get(rid)
            if got is None:
                got = self._answers[rid] = {}
                while len(self._answers) > self._max_answers:
                    self._answers.popitem(last=False)
            for n, hit in found.items():
                if len(got) >= self._max_answers:
                    got.pop(next(iter(got)))
                got[n] = hit
            self._counts["lookup_hits"] += sum(found.values())
            self._counts["lookup_misses"] += len(found) - sum(found.values())

    def _forget(self, names: Iterable[bytes]) -> None:
        """Drop cached answers for names (after a failed load)."""
        names = set(names)
        for got in self._answers.values():
            for n in names:
                got.pop(n, None)

    # -- jobs --

    def _begin(self) -> bool:
        with self._mu:
            if self._closed:
                return False
            self._running += 1
            return True

    def _end(self, result: Any) -> None:
        with self._mu:
            self._finished.append(result)
            self._running -= 1
            if not self._running and not self._asked:
                self._idle.notify_all()

    def _submit(self, pool: Any, fn: Any, job: Any) -> None:
        job_id = job.job_id
        if not self._begin():
            with self._mu:
                self._finished.append(_job_result(job_id, False))
            return
        try:
            pool.submit(self._run, fn, job)
        except RuntimeError:  # the pool is shut down
            self._end(_job_result(job_id, False))

    def _run(self, fn: Any, job: Any) -> None:
        try:
            result = fn(job)
        except Exception:
            log.debug("gpucache/vllm: job %s failed", job.job_id, exc_info=True)
            result = _job_result(job.job_id, False)
        self._end(result)

    def submit_store(self, job_metadata: Any) -> None:
        """Queue primary -> gpucache for the job's slots; returns at once."""
        self._submit(self._stores, self._store, job_metadata)

    def submit_load(self, job_metadata: Any) -> None:
        """Queue gpucache -> primary into the job's slots; returns at once."""
        self._submit(self._loads, self._load, job_metadata)

    def _pairs(self, job: Any) -> List[Any]:
        slots = getattr(job, "chunk_ids", None)
        if slots is None:
            slots = job.block_ids
        keys, ids = list(job.keys), [int(b) for b in slots]
        if len(keys) != len(ids):
            raise ValueError("gpucache/vllm: %d keys for %d block ids" % (len(keys), len(ids)))
        return [(self._name(k), self._slot(b)) for k, b in zip(keys, ids)]

    def _store(self, job: Any) -> Any:
        start = time.monotonic()
        pairs = self._pairs(job)
        ok = True
        for i in range(0, len(pairs), self._batch):
            chunk = pairs[i:i + self._batch]
            statuses = list(self._client.put_opaque(self.namespace, chunk))
            if len(statuses) != len(chunk) or not all(_status_ok(s) for s in statuses):
                ok = False
        with self._mu:
            self._counts["stores_ok" if ok else "stores_failed"] += 1
            self._counts["bytes_stored"] += len(pairs) * self._block_bytes if ok else 0
        return _job_result(job.job_id, ok, nbytes=len(pairs) * self._block_bytes,
                           seconds=time.monotonic() - start)

    def _load(self, job: Any) -> Any:
        start = time.monotonic()
        pairs = self._pairs(job)
        names = [n for n, _ in pairs]
        good = 0
        for i in range(0, len(pairs), self._batch):
            chunk = pairs[i:i + self._batch]
            keys = [opaque_key_of(self.namespace, n) for n, _ in chunk]
            results = list(self._client.get_into(self.namespace, keys, [s for _, s in chunk]))
            run = 0
            for r in results[:len(chunk)]:
                if not getattr(r, "hit", False) or getattr(r, "length", -1) != self._block_bytes:
                    break
                run += 1
            good += run
            if run < len(chunk):
                break
        ok = good == len(pairs)
        with self._mu:
            if not ok:
                self._forget(names[good:])
            self._counts["loads_ok" if ok else "loads_failed"] += 1
            self._counts["bytes_loaded"] += good * self._block_bytes
        return _job_result(job.job_id, ok, ok_keys=list(job.keys)[:good],
                           nbytes=good * self._block_bytes, seconds=time.monotonic() - start)

    def get_finished_jobs(self) -> Iterable[Any]:
        """Every job finished since the last call; never blocks."""
        with self._mu:
            done, self._finished = self._finished, []
        return done

    get_finished = get_finished_jobs  # the name in trees before drain_jobs

    def drain_jobs(self) -> None:
        """Block until every submitted job and lookup is finished.

        Results stay queued for get_finished_jobs; lookup answers are cached
        for the next lookup call. Each wait is bounded by the client timeout.
        """
        with self._mu:
            while self._running or self._asked:
                self._idle.wait()

    def has_pending_work(self) -> bool:
        with self._mu:
            return bool(self._running or self._finished or self._asked)

    # -- request lifecycle and the rest of the interface --

    def on_new_request(self, req_context: Any) -> Any:
        return RequestOffloadingContext()

    get_request_offloading_context = on_new_request

    def on_request_finished(self, req_context: Any) -> None:
        rid = self._rid(req_context)
        if rid is None:
            return
        with self._mu:
            self._answers.pop(rid, None)

    request_finished = on_request_finished

    def touch(self, keys: Any, req_context: Any = None) -> None:
        return  # gpucache keeps its own recency (GET/LOOKUP refresh it)

    def on_schedule_end(self, context: Any = None) -> None:
        return

    def take_events(self) -> Iterable[Any]:
        return ()

    def get_stats(self) -> Any:
        return None

    def stats(self) -> Dict[str, int]:
        """Counters of this tier (stores/loads ok and failed, bytes, lookups;
        region_* are the client's region counters, gpucache.Client.region_stats)."""
        with self._mu:
            out = dict(self._counts)
        rs = getattr(self._client, "region_stats", None)
        if rs is not None:
            out.update(("region_" + k, v) for k, v in rs().items())
        return out

    def shutdown(self) -> None:
        """Finish running jobs, stop the threads and close the client."""
        with self._mu:
            if self._closed:
                return
            self._closed = True
        self._stores.shutdown(wait=True)
        self._loads.shutdown(wait=True)
        self._lookups.put(_STOP)
        self._lookup_thread.join()
        if self._region is not None:  # before the view is released: it holds an export of it
            try:
                self._region.close()
            except Exception:
                log.debug("gpucache/vllm: closing the region failed", exc_info=True)
            self._region = None
        if self._own_client:
            try:
                self._client.close()
            except Exception:
                log.debug("gpucache/vllm: close failed", exc_info=True)
        # vLLM's primary tier closes the mmap behind the view after its
        # secondary tiers shut down; a view still held here would keep the
        # mapping exported ("cannot close exported pointers exist").
        try:
            self._flat.release()
        except (BufferError, ValueError):
            log.debug("gpucache/vllm: primary view still in use at shutdown", exc_info=True)


if HAVE_VLLM:  # pragma: no cover - exercised only where vllm is installed
    # A base class that grew an abstract method this tier does not define
    # would make vLLM's factory fail with a TypeError at engine start; say
    # what is missing at import instead.
    _missing = sorted(getattr(GpucacheTier, "__abstractmethods__", ()))
    if _missing:
        raise UnsupportedVLLM(
            "gpucache.vllm: vLLM %s's SecondaryTierManager declares abstract methods this "
            "tier does not define: %s" % (_vllm_version(), ", ".join(_missing)))


__all__ = ["GpucacheTier", "JobMetadata", "JobResult", "LookupResult", "ReqContext",
           "RequestOffloadingContext", "bind_namespace", "make_namespace",
           "opaque_key_of", "HAVE_VLLM"]
