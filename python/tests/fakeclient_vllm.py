"""An in-memory stand-in for gpucache.Client, for the vLLM tier's unit tests.

It implements the part of the client API the tier uses (lookup, get_into,
put_opaque, close) with the same return shapes, keyed exactly as the real
server keys opaque-key blocks: by opaque_key(namespace digest, name), so a
block stored under one namespace misses under another.

Hooks: `gate` (a threading.Event; every call waits for it, so a test can
hold the client and show the tier's scheduler-facing methods do not block),
`down` (every call fails the way the real client reports a dead daemon:
a miss with reason "refused", a write status that is not STORED), and
`calls` (a Counter of calls by name). Several fakes can share one `store`.
"""

import collections
import enum
import threading

from gpucache.vllm import opaque_key_of


class Status(enum.IntEnum):
    HIT = 0
    MISS = 1
    STORED = 2
    EXISTS = 3
    NO_SPACE = 5
    UNAVAILABLE = 100


GetResult = collections.namedtuple("GetResult", "hit length reason")


class FakeClient:
    def __init__(self, store=None):
        self.store = {} if store is None else store
        self.gate = threading.Event()
        self.gate.set()
        self.down = False
        self.calls = collections.Counter()
        self.closed = False
        self._mu = threading.Lock()

    def _enter(self, name):
        self.gate.wait()
        with self._mu:
            self.calls[name] += 1

    def lookup(self, ns, keys, lease_ttl=0.0):
        self._enter("lookup")
        if self.down:
            return 0, 0
        n = 0
        for k in keys:
            if bytes(k) not in self.store:
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
            data = self.store.get(bytes(k))
            mv = memoryview(b).cast("B")
            if data is None:
                out.append(GetResult(False, 0, "miss"))
            elif len(data) > mv.nbytes:
                out.append(GetResult(False, len(data), "over_budget"))
            else:
                mv[:len(data)] = data
                out.append(GetResult(True, len(data), ""))
        return out

    def put_opaque(self, ns, items):
        self._enter("put_opaque")
        out = []
        for name, payload in items:
            if self.down:
                out.append(Status.UNAVAILABLE)
                continue
            key = opaque_key_of(ns, bytes(name))
            if isinstance(payload, (list, tuple)):
                data = b"".join(bytes(p) for p in payload)
            else:
                data = bytes(payload)
            if key in self.store:
                out.append(Status.EXISTS)
            else:
                self.store[key] = data
                out.append(Status.STORED)
        return out

    def close(self):
        self.closed = True
