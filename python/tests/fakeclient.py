"""An in-memory stand-in for gpucache.Client (the same methods), for
adapter unit tests that must run without a daemon.

When the real gpucache package (pycore) is importable its Namespace, Layout,
namespace_digest and opaque_key are used; otherwise install() puts minimal
stand-ins onto the gpucache package so gpucache.sglang can import.
"""

import dataclasses
import hashlib
import threading
from collections import namedtuple

import gpucache

GetResult = namedtuple("GetResult", "hit length reason")


class FakeStatus:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return "Status.%s" % self.name


STORED, EXISTS, UNAVAILABLE = FakeStatus("STORED"), FakeStatus("EXISTS"), FakeStatus("UNAVAILABLE")


@dataclasses.dataclass(frozen=True)
class _Layout:
    format: str = ""
    tp_rank: int = 0
    tp_size: int = 1
    pp_rank: int = 0
    pp_size: int = 1
    layer_start: int = 0
    layer_count: int = 1
    kv_heads: int = 1
    head_dim: int = 1
    block_tokens: int = 1


@dataclasses.dataclass(frozen=True)
class _Namespace:
    tenant: str = ""
    trust_domain: str = ""
    model_id: str = ""
    config_revision: str = ""
    tokenizer_revision: str = ""
    adapter: str = ""
    rope: str = ""
    dtype: str = ""
    quantization: str = ""
    layout: _Layout = dataclasses.field(default_factory=_Layout)


def _digest(ns):
    return hashlib.sha256(b"fake-ns\x00" + repr(ns).encode()).digest()


def _opaque_key(digest, name):
    return hashlib.sha256(b"fake-opaque\x00" + bytes(digest) + bytes(name)).digest()


def install():
    """Makes gpucache expose the identity helpers the adapters need."""
    for attr, val in (("Namespace", _Namespace), ("Layout", _Layout),
                      ("namespace_digest", _digest), ("opaque_key", _opaque_key)):
        if not hasattr(gpucache, attr):
            setattr(gpucache, attr, val)


class FakeClient:
    """Thread-safe in-memory store keyed by (namespace digest, block key).

    down: when True every call fails like a stopped daemon (misses with
    reason "refused", writes UNAVAILABLE). barrier: when set, every call
    waits on it first, so a test can prove calls overlap in time.
    """

    def __init__(self):
        self.blocks = {}
        self.lock = threading.Lock()
        self.down = False
        self.barrier = None
        self.calls = []
        self.closed = False

    def _enter(self, op):
        with self.lock:
            self.calls.append(op)
        b = self.barrier
        if b is not None:
            b.wait()

    def _k(self, ns, key):
        return (gpucache.namespace_digest(ns), bytes(key))

    def lookup(self, ns, keys, lease_ttl=0.0):
        self._enter("lookup")
        if self.down:
            return 0, 0
        n = 0
        with self.lock:
            for k in keys:
                if self._k(ns, k) not in self.blocks:
                    break
                n += 1
        return n, 0

    def get_into(self, ns, keys, bufs, lease_id=0):
        self._enter("get_into")
        out = []
        for k, b in zip(keys, bufs):
            if self.down:
                out.append(GetResult(False, 0, "refused"))
                continue
            with self.lock:
                data = self.blocks.get(self._k(ns, k))
            if data is None:
                out.append(GetResult(False, 0, "miss"))
                continue
            mv = memoryview(b).cast("B")
            if len(mv) < len(data):
                out.append(GetResult(False, len(data), "malformed"))
                continue
            mv[: len(data)] = data
            out.append(GetResult(True, len(data), ""))
        return out

    def get(self, ns, keys):
        self._enter("get")
        if self.down:
            return [None] * len(keys)
        with self.lock:
            return [self.blocks.get(self._k(ns, k)) for k in keys]

    def put_opaque(self, ns, entries):
        self._enter("put_opaque")
        out = []
        d = gpucache.namespace_digest(ns)
        for name, payload in entries:
            if self.down:
                out.append(UNAVAILABLE)
                continue
            parts = payload if isinstance(payload, (list, tuple)) else [payload]
            data = b"".join(bytes(memoryview(p).cast("B")) for p in parts)
            key = (d, bytes(gpucache.opaque_key(d, bytes(name))))
            with self.lock:
                if key in self.blocks:
                    out.append(EXISTS)
                else:
                    self.blocks[key] = data
                    out.append(STORED)
        return out

    def close(self):
        self.closed = True
