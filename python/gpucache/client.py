"""The gpucache client: pooled, thread-safe, deadline-bound, zero-copy.

Read paths (lookup, get_into, get) never raise: every failure is a miss
with a reason. Write paths (put, put_opaque, delete) return one Status per
block; a block whose request failed is Status.FAILED (client-side, never on
the wire). GET reads payloads straight into caller buffers with
socket.recv_into; PUT sends caller buffers with socket.sendmsg (plain TCP)
or one sendall per buffer (TLS), never joining them.

The client owns its limits: the server is trusted for data, never for how
much memory or time a call may take. Every call has one deadline (timeout
seconds from its start, across nodes, retries and every read and write);
every answer is read against a bound of the client's own (max_frame, the
caller's buffers for get_into, max_len for get, the largest well-formed
body of each other opcode); and a read into a caller's buffer that fails
part-way zeroes what it wrote.
"""

import collections
import ctypes
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from . import shm, wire
from .errors import ConnectionFailed, FrameTooLarge, InvalidIdentity, MalformedError, ProtocolError
from .identity import CacheIdentity, Namespace, opaque_key
from .placement import View
from .pool import Conn, Pool, PoolTimeout, Timeout, unix_path, usable_after

Status = wire.Status
log = logging.getLogger("gpucache.client")

# Error answers to a region operation that mean "not through the region":
# the call goes on through the socket path.
_REGION_REFUSALS = (wire.Code.REGION, wire.Code.MALFORMED, wire.Code.UNKNOWN_OPCODE)
_U32_MAX = 0xFFFFFFFF
# Statuses a plain PUT may answer (FAULT belongs to PUT_FROM and PUT_OPAQUE_FROM).
_PUT_STATUSES = frozenset(s for s in wire.Status if s != wire.Status.FAULT)

# FAILED is the client-side status of a block whose write request failed as a
# whole (timeout, dropped, refused, denied, ...); the server never sends it.
FAILED = 255

_OVERHEAD_GET = 8  # u32 table length + u32 count


@dataclass(frozen=True)
class GetResult:
    """One key of a GET: hit and the payload length, or a miss and why."""

    hit: bool
    length: int = 0
    reason: str = ""


def reason_of(err: BaseException) -> str:
    """The miss reason for an exception on a read path."""
    if isinstance(err, (Timeout, PoolTimeout, TimeoutError)):
        return "timeout"
    if isinstance(err, ConnectionRefusedError):
        return "refused"
    if isinstance(err, ConnectionFailed):
        return err.reason
    if isinstance(err, FrameTooLarge):
        return "too_large"
    if isinstance(err, MalformedError):
        return "malformed"
    if isinstance(err, ProtocolError):
        c = err.code
        if c in (wire.Code.DENIED, wire.Code.UNAUTHENTICATED, wire.Code.TENANT_MISMATCH):
            return "denied"
        if c == wire.Code.RATE_LIMITED:
            return "over_budget"
        if c == wire.Code.TIMEOUT:
            return "timeout"
        if c in (wire.Code.SHUTTING_DOWN, wire.Code.WRONG_EPOCH, wire.Code.INTERNAL):
            return "unavailable"
        return "malformed"
    if isinstance(err, (ConnectionError, EOFError, OSError)):
        return "dropped"
    return "malformed"


def byte_view(buf, writable: bool = False) -> memoryview:
    """A flat byte memoryview over buf without copying: any C-contiguous
    buffer (bytearray, memoryview, numpy array, ctypes array), a CPU torch
    tensor, or an (address, nbytes) pair of raw memory the caller owns."""
    if isinstance(buf, tuple) and len(buf) == 2 and all(isinstance(x, int) for x in buf):
        addr, n = buf
        if n == 0:
            return memoryview(bytearray(0))
        return memoryview((ctypes.c_char * n).from_address(addr)).cast("B")
    if hasattr(buf, "data_ptr") and hasattr(buf, "element_size") and hasattr(buf, "is_contiguous"):
        if getattr(buf.device, "type", "cpu") != "cpu":
            raise TypeError("gpucache/client: only CPU tensors can be read into or sent")
        if not buf.is_contiguous():
            raise TypeError("gpucache/client: tensor is not contiguous")
        return byte_view((buf.data_ptr(), buf.numel() * buf.element_size()), writable)
    m = buf if isinstance(buf, memoryview) else memoryview(buf)
    if writable and m.readonly:
        raise TypeError("gpucache/client: buffer is read-only")
    if not m.c_contiguous:
        raise TypeError("gpucache/client: buffer is not C-contiguous")
    if m.format == "B" and m.ndim == 1:
        return m
    try:
        return m.cast("B")
    except (TypeError, ValueError, NotImplementedError):
        ai = getattr(buf, "__array_interface__", None)
        if ai is None:
            raise TypeError("gpucache/client: cannot view %s as bytes" % type(buf).__name__) from None
        return byte_view((ai["data"][0], m.nbytes), writable)


def _payload_views(p) -> List[memoryview]:
    if isinstance(p, (list, tuple)) and not (len(p) == 2 and all(isinstance(x, int) for x in p)):
        return [byte_view(x) for x in p]
    return [byte_view(p)]


class Client:
    """A client of one gpucached (or, with cluster=True, of a cluster whose
    members it learns with MEMBERS and routes to by weighted rendezvous).

    addrs: "host:port" seeds, or "unix:/path" for a gpucached on this host
    (its unix_listen); the first is used unless cluster routing says
    otherwise. On a Unix-domain connection with a version-5 session,
    get_into, put and put_opaque copy through registered shared memory
    (allocate, register) whenever a buffer lies inside it: see
    gpucache.shm. tenant/secret: the HELLO bearer credential (secret may be
    empty in open mode or under mTLS). ssl_context: an ssl.SSLContext (load
    a client certificate into it for mTLS). timeout: the deadline of every
    call, in seconds, from its start to its return: dialling, HELLO, every
    node and retry it visits and every read and write share it (get_or_fill
    alone restarts it after the caller's fill and for each WAIT).
    pool_size: connections per node. max_frame: the longest answer body
    this client reads, in bytes, whatever a server announces in HELLO (a
    larger announcement is clamped to it); answers are further bounded by
    the caller's buffers (get_into), max_len (get) and each opcode's
    largest well-formed body. An answer over its bound allocates nothing:
    it is a miss ("too_large") and its connection is closed unread.
    """

    def __init__(self, addrs=("127.0.0.1:9400",), tenant: str = "", secret=b"", ssl_context=None,
                 timeout: float = 2.0, pool_size: int = 8, cluster: bool = False, server_hostname=None,
                 max_frame: int = wire.DEFAULT_MAX_FRAME):
        if isinstance(addrs, str):
            addrs = [addrs]
        if not addrs:
            raise ValueError("gpucache/client: no address")
        if not timeout > 0:
            raise ValueError("gpucache/client: timeout must be > 0, got %r" % (timeout,))
        if not 1 << 12 <= max_frame <= 0xFFFFFFFF:
            raise ValueError("gpucache/client: max_frame %d out of range 4096..%d" % (max_frame, 0xFFFFFFFF))
        self.max_frame = int(max_frame)
        self._addrs = list(addrs)
        self.tenant = tenant
        self._secret = secret.encode() if isinstance(secret, str) else bytes(secret or b"")
        self._ssl = ssl_context
        self._hostname = server_hostname
        self.timeout = float(timeout)
        self._pool_size = pool_size
        self.cluster = cluster
        # mu guards pools, view and closed.
        self._mu = threading.Lock()
        self._pools: Dict[str, Pool] = {}
        self._view: Optional[View] = None
        self._closed = False
        # _after_acquire, when set, is called with each ACQUIRE's outcomes
        # (a test hook: it lets a test order two clients' fills).
        self._after_acquire: Optional[Callable] = None
        # Registered regions (gpucache.shm); region_mu guards the counters
        # and the causes already logged.
        self._regions = shm.Registry()
        self._region_mu = threading.Lock()
        self._region_counts: collections.Counter = collections.Counter()
        self._region_logged: set = set()

    # ---- plumbing ----

    def _pool(self, addr: str) -> Pool:
        with self._mu:
            if self._closed:
                raise ConnectionFailed("unavailable", "client closed")
            p = self._pools.get(addr)
            if p is None:
                p = Pool(lambda dl, a=addr: Conn.dial(a, dl, self.tenant, self._secret, self._ssl, self._hostname,
                                                      self.max_frame),
                         self._pool_size)
                self._pools[addr] = p
            return p

    def _deadline(self) -> float:
        """The deadline (time.monotonic) of a call starting now."""
        return time.monotonic() + self.timeout

    def _with_conn(self, addr: str, fn, deadline: Optional[float] = None):
        """fn(conn) on a pooled connection to addr, under deadline (one
        starting now if None). The connection goes back to the pool only if
        its stream is still in step."""
        if deadline is None:
            deadline = self._deadline()
        elif time.monotonic() >= deadline:  # spent on earlier nodes: leave their idle connections be
            raise Timeout("gpucache/client: deadline passed before reaching %s" % addr)
        pool = self._pool(addr)
        conn = pool.get(deadline)
        conn.deadline = deadline
        try:
            if conn.regions and conn.region_gen != self._regions.gen:
                self._reconcile(conn)
            r = fn(conn)
        except BaseException as e:
            pool.put(conn, usable_after(e))
            raise
        pool.put(conn, True)
        return r

    def connect(self):
        """Dial and HELLO the first node now; raises ConnectionFailed or
        ProtocolError (e.g. UNAUTHENTICATED) instead of failing lazily."""
        try:
            return self._with_conn(self._addrs[0], lambda c: c.hello, self._deadline())
        except (ProtocolError, ConnectionFailed):
            raise
        except Exception as e:
            raise ConnectionFailed(reason_of(e), str(e)) from e

    def _refresh(self, addr: Optional[str] = None, deadline: Optional[float] = None):
        """Fetch MEMBERS (from addr or the seeds) and install a newer view;
        every node tried shares deadline (one starting now if None)."""
        if deadline is None:
            deadline = self._deadline()
        for a in ([addr] if addr else []) + self._addrs:
            if time.monotonic() >= deadline:
                return
            try:
                epoch, members = self._with_conn(a, lambda c: wire.decode_members_response(
                    c.call(wire.Op.MEMBERS, [], max_body=wire.MAX_MEMBERS_BODY)), deadline)
            except Exception:
                continue
            with self._mu:
                if self._view is None or epoch > self._view.epoch:
                    self._view = View(epoch, members)
            return

    def _route(self, keys: Sequence[bytes], idxs: Sequence[int],
               deadline: Optional[float] = None) -> Tuple[List[Tuple[str, List[int]]], List[int]]:
        """(addr, indexes) groups in first-key order, and the indexes no node owns."""
        if not self.cluster:
            return [(self._addrs[0], list(idxs))], []
        with self._mu:
            view = self._view
        if view is None:
            self._refresh(None, deadline)
            with self._mu:
                view = self._view
        if view is None or not view.clustered:
            return [(self._addrs[0], list(idxs))], []
        groups: Dict[str, List[int]] = {}
        orphans = []
        for i in idxs:
            m = view.owner(keys[i])
            if m is None:
                orphans.append(i)
            else:
                groups.setdefault(m.addr, []).append(i)
        return list(groups.items()), orphans

    def _routed(self, keys, per_node: Callable, fail: Callable, idxs=None, deadline: Optional[float] = None):
        """Run per_node(conn, idxs) on each owner; on WRONG_EPOCH refresh the
        view from the refusing node and retry those keys once. All of it
        runs under deadline; with None each node gets a fresh one (only
        get_or_fill, whose phases are timed one by one)."""
        idxs = list(range(len(keys))) if idxs is None else idxs
        for attempt in (0, 1):
            groups, orphans = self._route(keys, idxs, deadline)
            if orphans:
                fail(orphans, "unavailable")
            retry = []
            for addr, sub in groups:
                try:
                    self._with_conn(addr, lambda c, s=sub: per_node(c, s), deadline)
                except ProtocolError as e:
                    if e.code == wire.Code.WRONG_EPOCH and attempt == 0 and self.cluster:
                        self._refresh(addr, deadline)
                        retry.extend(sub)
                    else:
                        fail(sub, reason_of(e))
                except Exception as e:
                    fail(sub, reason_of(e))
            if not retry:
                return
            idxs = sorted(retry)

    @staticmethod
    def _chunks(idxs, conn: Conn, sizes=None, overhead=0, per_entry=0):
        """Split idxs so each request keeps to max_batch and max_frame."""
        out, cur, total = [], [], overhead
        for i in idxs:
            sz = per_entry + (sizes[i] if sizes is not None else 0)
            if cur and (len(cur) >= conn.max_batch or total + sz > conn.max_frame):
                out.append(cur)
                cur, total = [], overhead
            cur.append(i)
            total += sz
        if cur:
            out.append(cur)
        return out

    # ---- LOOKUP ----

    def lookup(self, ns: Namespace, keys: Sequence[bytes], lease_ttl: float = 0.0) -> Tuple[int, int]:
        """(hits, lease_id): the leading run of cached keys, leased for
        lease_ttl seconds when > 0. Never raises: (0, 0) on any failure."""
        deadline = self._deadline()
        try:
            blob = ns.canonical()
            keys = [bytes(k) for k in keys]
            if not keys:
                return 0, 0
            ttl_ms = int(lease_ttl * 1000 + 0.999) if lease_ttl > 0 else 0
            for attempt in (0, 1):
                try:
                    return self._lookup_once(blob, keys, ttl_ms, deadline)
                except ProtocolError as e:
                    if e.code != wire.Code.WRONG_EPOCH or attempt or not self.cluster:
                        return 0, 0
                    self._refresh(None, deadline)
        except Exception:
            return 0, 0
        return 0, 0

    def _lookup_once(self, blob, keys, ttl_ms, deadline):
        groups, orphans = self._route(keys, range(len(keys)), deadline)
        owner = {}
        for addr, idxs in groups:
            for i in idxs:
                owner[i] = addr
        hits, lease = 0, 0
        i = 0
        while i < len(keys):
            if i not in owner:
                break
            addr, j = owner[i], i
            while j < len(keys) and owner.get(j) == addr and j - i < wire.DEFAULT_MAX_BATCH:
                j += 1
            seg = keys[i:j]
            first = i == 0

            def one(c, seg=seg, first=first):
                body = wire.lookup_request(blob, ttl_ms if first else 0, seg)
                return wire.decode_lookup_response(c.call(wire.Op.LOOKUP, [body], max_body=16), len(seg))
            r = self._with_conn(addr, one, deadline)
            if first:
                lease = r.lease_id
            hits += r.hits
            if r.hits < len(seg):
                break
            i = j
        return hits, lease

    # ---- GET ----

    def _get_chunk(self, conn: Conn, blob, keys, lease_id, sink, largest: int, out: List[GetResult]):
        """One GET for keys, whose payloads this call accepts up to largest
        bytes each. sink(j, length) returns a writable byte view of at least
        length bytes for key j, or None; a payload longer than largest is
        not offered to sink. A payload that gets no view is read through a
        small scratch buffer and dropped (an "over_budget" miss): the answer
        was within this call's bound, so this costs no memory, keeps the
        stream in step and keeps the other keys' hits.

        An answer whose header announces more than the keys can take
        (wire.get_body_limit) raises FrameTooLarge before any of it is read;
        the caller then closes the connection, whose stream position is
        lost. Results are appended to out as each key completes, so keys
        read before a failure keep their hits; a payload whose read fails
        part-way has what it wrote into its view zeroed."""
        rid = conn.send(wire.Op.GET, [wire.get_request(blob, lease_id, keys)])
        h = conn.read_header(wire.Op.GET, rid)
        limit = wire.get_body_limit(len(keys), largest)
        if h.body_len > limit:
            raise FrameTooLarge("gpucache/client: GET answer of %d bytes for %d keys of at most %d bytes" % (
                h.body_len, len(keys), largest))
        if h.body_len < 4:
            raise MalformedError("gpucache/wire: GET body of %d bytes" % h.body_len)
        tl = int.from_bytes(conn.recv_bytes(4), "little")
        if tl != 4 + 5 * len(keys) or tl > h.body_len - 4:
            raise MalformedError("gpucache/wire: GET table of %d bytes for %d keys in a %d-byte body" % (
                tl, len(keys), h.body_len))
        table = wire.decode_get_table(conn.recv_bytes(tl), len(keys))
        if sum(ln for _, ln in table) != h.body_len - 4 - tl:
            raise MalformedError("gpucache/wire: GET payloads do not add up to the body")
        for j, (st, ln) in enumerate(table):
            if st != Status.HIT:
                out.append(GetResult(False, 0, "miss"))
                continue
            view = sink(j, ln) if ln <= largest else None
            if view is None:
                conn.discard(ln)
                out.append(GetResult(False, ln, "over_budget"))
                continue
            if ln:
                conn.recv_into(view[:ln], wipe=True)
            out.append(GetResult(True, ln, ""))
        return out

    def get_into(self, ns: Namespace, keys: Sequence[bytes], bufs, lease_id: int = 0) -> List[GetResult]:
        """Read each key's payload straight into bufs[i] (writable buffers).
        Never raises; every key is a hit or a miss with a reason.

        Bounds: an answer may be no longer than the keys' table plus, per
        key, the largest of the caller's buffers (and never more than
        max_frame); a longer one is refused unread, its keys miss
        ("too_large") and its connection is closed. A payload larger than
        its own buffer is read through a small scratch buffer and dropped
        ("over_budget"). Nothing is allocated for a payload.

        Deadline: the whole call, across nodes and retries, returns within
        the client's timeout; a server that drips bytes ends at it.

        Buffers on failure: a miss never leaves bytes of its answer behind.
        A payload whose read fails part-way (timeout, dropped, truncated)
        has every byte it wrote zeroed; the rest of that buffer, and the
        buffers of other misses, are left as they were. Keys read in full
        before a failure later in the answer stay hits.

        Registered regions: the keys whose buffers lie inside a region
        (allocate, register) are read with GET_INTO when the connection is
        a Unix socket with a version-5 session: the server copies each hit
        once into the buffer and no payload crosses the socket. Otherwise,
        or when the region path fails (REGION, FAULT), they are read as
        above; each cause of such a fallback is logged once. A FAULT means
        the region's file shrank under the server: a key whose buffer now
        lies past its end misses with reason "fault" instead."""
        deadline = self._deadline()
        n = len(keys)
        results: List[Optional[GetResult]] = [None] * n
        try:
            blob = ns.canonical()
            keys = [bytes(k) for k in keys]
            views = [byte_view(b, writable=True) for b in bufs]
            if len(views) != n:
                raise ValueError("gpucache/client: %d buffers for %d keys" % (len(views), n))
        except Exception:
            return [GetResult(False, 0, "malformed")] * n

        def fail(idxs, reason):
            for i in idxs:
                if results[i] is None:  # keys read in full keep their hits
                    results[i] = GetResult(False, 0, reason)

        def per_node(conn, idxs):
            if len(self._regions):
                idxs = self._get_through_regions(conn, blob, keys, views, lease_id, idxs, results)
            caps = [min(len(v), conn.max_payload) for v in views]
            for chunk in self._chunks(idxs, conn, [c + 5 for c in caps], _OVERHEAD_GET):
                rs: List[GetResult] = []
                try:
                    self._get_chunk(conn, blob, [keys[i] for i in chunk], lease_id,
                                    lambda j, ln, c=chunk: views[c[j]] if ln <= len(views[c[j]]) else None,
                                    max(caps[i] for i in chunk), rs)
                finally:
                    for i, r in zip(chunk, rs):
                        results[i] = r

        try:
            self._routed(keys, per_node, fail, None, deadline)
        except Exception as e:  # a bug must not reach the engine
            fail(range(n), reason_of(e))
        return [r if r is not None else GetResult(False, 0, "miss") for r in results]

    def get(self, ns: Namespace, keys: Sequence[bytes], max_len: Optional[int] = None) -> List[Optional[bytes]]:
        """Each key's payload as a bytearray, or None on a miss. Never raises.

        max_len: the longest payload accepted per key (default: the
        server's max_payload, never above the client's max_frame). An answer
        announcing more than the keys' table plus max_len bytes a key is
        refused before anything is allocated for it; a longer payload within
        it is read through a small scratch buffer and dropped. The whole
        call returns within the client's timeout."""
        deadline = self._deadline()
        n = len(keys)
        datas: List[Optional[bytearray]] = [None] * n
        try:
            blob = ns.canonical()
            keys = [bytes(k) for k in keys]
            if max_len is not None and max_len < 0:
                raise ValueError("gpucache/client: max_len %d < 0" % max_len)
        except Exception:
            return datas

        def per_node(conn, idxs):
            largest = conn.max_payload if max_len is None else min(max_len, conn.max_payload)
            for chunk in self._chunks(idxs, conn, None, _OVERHEAD_GET, 5):
                got: Dict[int, bytearray] = {}

                def sink(j, ln, got=got):
                    got[j] = bytearray(ln)
                    return memoryview(got[j])
                rs: List[GetResult] = []
                try:
                    self._get_chunk(conn, blob, [keys[i] for i in chunk], 0, sink, largest, rs)
                finally:
                    for j, r in enumerate(rs):
                        if r.hit:
                            datas[chunk[j]] = got[j]

        try:
            self._routed(keys, per_node, lambda idxs, reason: None, None, deadline)
        except Exception:
            return [None] * n
        return datas

    # ---- PUT, PUT_OPAQUE, DELETE ----

    def _write(self, keys, entries, build, op, statuses, per_entry_fixed):
        """Send write requests: entries[i] = (table_entry, views, length).
        build(sub_entries) returns the table; statuses are filled in place.
        The whole call runs under one deadline."""
        deadline = self._deadline()

        def fail(idxs, reason):
            for i in idxs:
                if statuses[i] is None:
                    statuses[i] = FAILED

        def per_node(conn, idxs):
            if op == wire.Op.PUT_OPAQUE and conn.version < 3:
                raise ConnectionFailed("unavailable", "server negotiated version %d: no PUT_OPAQUE" % conn.version)
            send = []
            for i in idxs:
                if entries[i][2] > conn.max_payload:
                    statuses[i] = Status.TOO_LARGE
                else:
                    send.append(i)
            if len(self._regions):
                send = self._put_through_regions(conn, entries, build, statuses, send, per_entry_fixed, op)
            sizes = [e[2] + per_entry_fixed(e[0]) for e in entries]
            for chunk in self._chunks(send, conn, sizes, 12 + 4096):
                table = build([entries[i][0] for i in chunk])
                parts = [len(table).to_bytes(4, "little"), table]
                for i in chunk:
                    parts.extend(entries[i][1])
                body = conn.call(op, parts, stamped=conn.stamp_required, max_body=4 + len(chunk))
                for i, st in zip(chunk, wire.decode_status_response(body, len(chunk), _PUT_STATUSES, conn.version)):
                    statuses[i] = st
        try:
            self._routed(keys, per_node, fail, [i for i in range(len(keys)) if statuses[i] is None], deadline)
        except Exception:
            fail(range(len(keys)), "malformed")
        return [s if s is not None else FAILED for s in statuses]

    def put(self, ns: Namespace, items: Sequence[Tuple[CacheIdentity, object]]) -> list:
        """Store token-chain blocks: items are (identity, payload or list of
        buffers). One Status per item: STORED, EXISTS, TOO_LARGE, NO_SPACE,
        READ_ONLY (version 4: the node's control plane is unreachable),
        KEY_MISMATCH (also for an identity that does not validate), or FAILED.

        A payload that lies inside a registered region (one buffer, or
        buffers adjacent in memory) is stored with PUT_FROM on a Unix
        socket with a version-5 session: the server copies it once from
        the region and checksums its own copy. Otherwise, or when the
        region path fails, it is sent through the socket."""
        blob = ns.canonical()
        digest = ns.digest()
        keys, entries, statuses = [], [], []
        for ident, payload in items:
            views = _payload_views(payload)
            length = sum(len(v) for v in views)
            try:
                ident.validate(ns)
                key = ident.key_in(digest)
                st = None
            except InvalidIdentity:
                key, st = bytes(32), Status.KEY_MISMATCH
            keys.append(key)
            statuses.append(st)
            entries.append((wire.PutBlock(key, bytes(ident.parent), ident.valid_length, length, ident.position,
                                          tuple(ident.tokens)), views, length))
        return self._write(keys, entries, lambda blks: wire.put_table(blob, blks), wire.Op.PUT, statuses,
                           lambda b: 92 + 4 * len(b.tokens))

    def put_opaque(self, ns: Namespace, items: Sequence[Tuple[bytes, object]]) -> list:
        """Store opaque-key blocks (PUT_OPAQUE, protocol v3): items are
        (name, payload or list of buffers); key = opaque_key(digest, name).
        One Status per item: STORED, EXISTS, TOO_LARGE, NO_SPACE, READ_ONLY,
        KEY_MISMATCH (also for a name of 0 or more than 1024 bytes), or FAILED.

        A payload that lies inside a registered region (one buffer, or
        buffers adjacent in memory) is stored with PUT_OPAQUE_FROM on a
        Unix socket with a version-5 session, as put does with PUT_FROM:
        the server copies it once from the region. Otherwise, or when the
        region path fails (REGION, FAULT), it is sent through the socket;
        each cause of such a fallback is logged once."""
        blob = ns.canonical()
        digest = ns.digest()
        keys, entries, statuses = [], [], []
        for name, payload in items:
            name = name.encode() if isinstance(name, str) else bytes(name)
            views = _payload_views(payload)
            length = sum(len(v) for v in views)
            key = opaque_key(digest, name)
            ok = 1 <= len(name) <= wire.MAX_OPAQUE_NAME
            keys.append(key)
            statuses.append(None if ok else Status.KEY_MISMATCH)
            entries.append(((key, name, length), views, length))
        return self._write(keys, entries, lambda es: wire.put_opaque_table(blob, es), wire.Op.PUT_OPAQUE, statuses,
                           lambda e: 38 + len(e[1]))

    def delete(self, ns: Namespace, keys: Sequence[bytes]) -> list:
        """Remove blocks: DELETED, MISS, BUSY, or FAILED per key."""
        deadline = self._deadline()
        blob = ns.canonical()
        keys = [bytes(k) for k in keys]
        statuses: List[Optional[int]] = [None] * len(keys)

        def per_node(conn, idxs):
            for chunk in self._chunks(idxs, conn, None, 8 + 4096, 32):
                body = conn.call(wire.Op.DELETE, [wire.delete_request(blob, [keys[i] for i in chunk])],
                                 stamped=conn.stamp_required, max_body=4 + len(chunk))
                for i, st in zip(chunk, wire.decode_status_response(body, len(chunk))):
                    statuses[i] = st

        def fail(idxs, reason):
            for i in idxs:
                statuses[i] = FAILED
        self._routed(keys, per_node, fail, None, deadline)
        return [s if s is not None else FAILED for s in statuses]

    # ---- STAT, PING, MEMBERS ----

    def stat(self) -> dict:
        """The first node's counters (summed over members with cluster=True).
        Raises ConnectionFailed or ProtocolError, within the client's
        timeout for all members together. An answer longer than the largest
        well-formed STAT body (wire.MAX_STAT_BODY, 68,100 bytes) is refused
        unread (ConnectionFailed "too_large")."""
        deadline = self._deadline()
        addrs = [self._addrs[0]]
        if self.cluster:
            self._refresh(None, deadline)
            with self._mu:
                if self._view is not None and self._view.clustered:
                    addrs = [m.addr for m in self._view.members]
        out: dict = {}
        for a in addrs:
            try:
                d = self._with_conn(a, lambda c: wire.decode_stat_response(
                    c.call(wire.Op.STAT, [], max_body=wire.MAX_STAT_BODY)), deadline)
            except ProtocolError:
                raise
            except Exception as e:
                raise ConnectionFailed(reason_of(e), "STAT %s: %s" % (a, e)) from e
            for k, v in d.items():
                out[k] = out.get(k, 0) + v
        return out

    def ping(self, payload: bytes = b"gpucache") -> float:
        """Round-trip seconds of one PING to the first node; raises on failure."""
        def one(c):
            t0 = time.perf_counter()
            body = c.call(wire.Op.PING, [payload], max_body=wire.MAX_PING_LEN)
            if bytes(body) != bytes(payload):
                raise MalformedError("gpucache/wire: PING echo differs")
            return time.perf_counter() - t0
        try:
            return self._with_conn(self._addrs[0], one, self._deadline())
        except ProtocolError:
            raise
        except Exception as e:
            raise ConnectionFailed(reason_of(e), "PING: %s" % e) from e

    def members(self) -> Optional[View]:
        """The current cluster view (fetched with MEMBERS), or None."""
        self._refresh(None, self._deadline())
        with self._mu:
            return self._view

    def close(self):
        """Close every connection (the server unmaps their regions) and
        every region of this client (Region.close: their descriptors and
        the client's own mappings; memory from allocate stays mapped until
        its SharedBuffer is closed)."""
        with self._mu:
            self._closed = True
            pools, self._pools = list(self._pools.values()), {}
        for p in pools:
            p.close()
        for r in self._regions.all():
            self._regions.remove(r)
            r._client = None
            r.close()

    # ---- registered regions (gpucache.shm) ----

    @property
    def local(self) -> bool:
        """Whether the first address is a Unix socket ("unix:/path"): the
        daemon is on this host and regions can be used."""
        return unix_path(self._addrs[0]) is not None

    def allocate(self, nbytes: int) -> "shm.SharedBuffer":
        """nbytes of memfd memory, sealed and mapped, registered with this
        client: a buffer (memoryview, .numpy(), .tensor()) whose slices
        get_into, put and put_opaque copy through the server without the
        socket."""
        return shm.allocate(nbytes, client=self)

    def register(self, fd_or_path=None, buffer=None) -> "shm.Region":
        """Register existing shared memory: a memfd or file descriptor, a
        path (a file under /dev/shm), and/or buffer, memory of this
        process that maps such a file (a memoryview, numpy array, torch
        tensor or (address, nbytes)). With buffer alone the file behind
        the mapping is found through /proc/self/maps, unlinked or not;
        with a descriptor or path alone the client maps the whole file
        (Region.buffer). A memfd that allows sealing is sealed against
        shrinking (the server requires it). The region's bytes go to the
        server on each connection the first time it needs them."""
        r = shm.region_of(fd_or_path, buffer)
        try:
            self._add_region(r)
        except BaseException:
            r.close()
            raise
        return r

    def _add_region(self, r: "shm.Region") -> None:
        with self._mu:
            if self._closed:
                raise ConnectionFailed("unavailable", "client closed")
            self._regions.add(r)
            r._client = self

    def unregister(self, region: "shm.Region") -> None:
        """Stop using region: UNREGISTER on each idle connection now, on
        each busy one before its next request; the descriptor stays open
        (Region.close closes it)."""
        if not self._regions.remove(region):
            return
        region._client = None
        with self._mu:
            pools = list(self._pools.values())
        deadline = self._deadline()
        for p in pools:
            def one(c):
                c.deadline = deadline
                self._reconcile(c)
            try:
                p.each_idle(one)
            except Exception:  # the next use of each connection reconciles it
                log.debug("gpucache/client: UNREGISTER on idle connections failed", exc_info=True)

    def regions(self) -> Tuple["shm.Region", ...]:
        """This client's registered regions."""
        return self._regions.all()

    def region_stats(self) -> Dict[str, int]:
        """Counters of the region path: registered (REGISTERs the server
        accepted), get_into (hits GET_INTO copied into a region),
        put_from (blocks PUT_FROM carried, whatever their status: STORED,
        EXISTS, ...), put_opaque_from (the same for PUT_OPAQUE_FROM), and
        fallback_<cause> (blocks that went through the socket instead: tcp,
        version, refused, fault, region, malformed, overlap, closed)."""
        with self._region_mu:
            return dict(self._region_counts)

    def check_region(self, region: "shm.Region") -> Tuple[bool, str]:
        """Register region on a connection to the first node now: (True,
        "sealed" or "guarded"), or (False, why the region path is not
        available). For an adapter that wants to say so at start-up."""
        def one(conn):
            why = self._region_unusable(conn)
            if why is not None:
                return False, "%s: %s" % why
            if not self._region_ready(conn, region):
                return False, "%s: %s" % conn.region_refused.get(region.id, ("refused", ""))
            return True, conn.regions[region.id].name.lower()
        try:
            return self._with_conn(self._addrs[0], one, self._deadline())
        except Exception as e:
            return False, "unavailable: %s" % e

    def _region_count(self, name: str, n: int = 1) -> None:
        with self._region_mu:
            self._region_counts[name] += n

    def _region_fallback(self, cause: str, detail: str, n: int) -> None:
        """n blocks go through the socket instead of a region; the first
        time for cause, say so in the log."""
        with self._region_mu:
            self._region_counts["fallback_" + cause] += n
            first = cause not in self._region_logged
            self._region_logged.add(cause)
        if first:
            log.warning("gpucache/client: registered region not used (%s): %s; the socket path carries these "
                        "blocks (logged once for this cause)", cause, detail)

    @staticmethod
    def _region_unusable(conn):
        """None when conn can carry region operations, else (cause, detail)."""
        if not conn.unix:
            return "tcp", "%s is a TCP address; regions need the daemon's Unix socket (unix:/path)" % conn.addr
        if conn.version < wire.VERSION_REGIONS:
            return "version", "%s negotiated protocol version %d; regions need %d" % (
                conn.addr, conn.version, wire.VERSION_REGIONS)
        return None

    def _region_ready(self, conn, region) -> bool:
        """Whether region is registered on conn, registering it now if it
        was not (and was not refused there before)."""
        if region.id in conn.regions:
            return True
        if region.id in conn.region_refused:
            return False
        if region.fd < 0 or not self._regions.has(region.id):
            conn.region_refused[region.id] = ("closed", "%s was closed" % region.name)
            return False
        if len(conn.regions) >= wire.MAX_REGIONS:
            conn.region_refused[region.id] = ("refused", "a connection holds at most %d regions" % wire.MAX_REGIONS)
            return False
        try:
            mode = conn.register(region.id, lambda: region.fd, region.length, fd_lock=region.fd_lock)
        except ValueError:  # closed meanwhile: nothing was sent
            conn.region_refused[region.id] = ("closed", "%s was closed" % region.name)
            return False
        except ProtocolError as e:
            if e.code not in _REGION_REFUSALS:
                raise
            conn.region_refused[region.id] = ("refused", "%s refused REGISTER of %s: %s" % (conn.addr, region.name, e))
            return False
        conn.regions[region.id] = mode
        region.mode = mode
        self._region_count("registered")
        return True

    def _reconcile(self, conn) -> None:
        """UNREGISTER on conn the regions this client no longer has."""
        gen = self._regions.gen
        for rid in list(conn.regions):
            if not self._regions.has(rid):
                try:
                    conn.unregister(rid)
                except ProtocolError as e:
                    if e.code != wire.Code.REGION:  # REGION: the server had dropped it already
                        raise
                del conn.regions[rid]
        for rid in list(conn.region_refused):
            if not self._regions.has(rid):
                del conn.region_refused[rid]
        conn.region_gen = gen

    def _locate(self, views) -> Optional[Tuple["shm.Region", int]]:
        """(region, offset) of buffers adjacent in memory inside one
        registered region, or None."""
        total = 0
        start = nxt = None
        for v in views:
            n = len(v)
            if not n:
                continue
            a = shm.address_of(v)
            if start is None:
                start = a
            elif a != nxt:
                return None
            nxt = a + n
            total += n
        if start is None:
            return None
        return self._regions.locate(start, total)

    def _region_groups(self, conn, idxs, locate_one):
        """Split idxs: {region: [i]} for the ones inside a region this
        connection can use, and the rest (sorted) for the socket path."""
        locs, rest = {}, []
        for i in idxs:
            loc = locate_one(i)
            if loc is None:
                rest.append(i)
            else:
                locs[i] = loc
        if not locs:
            return {}, locs, rest
        why = self._region_unusable(conn)
        if why is not None:
            self._region_fallback(why[0], why[1], len(locs))
            return {}, {}, list(idxs)
        groups: Dict[object, List[int]] = {}
        for i, (region, _) in locs.items():
            groups.setdefault(region, []).append(i)
        for region in list(groups):
            if not self._region_ready(conn, region):
                sub = groups.pop(region)
                cause, detail = conn.region_refused.get(region.id, ("refused", ""))
                self._region_fallback(cause, detail, len(sub))
                rest.extend(sub)
        return groups, locs, rest

    def _region_failed(self, conn, region, err: ProtocolError, n: int) -> None:
        """A region operation answered err: this connection stops using region."""
        cause = "region" if err.code == wire.Code.REGION else "malformed"
        detail = "%s answered %s" % (conn.addr, err)
        conn.regions.pop(region.id, None)
        conn.region_refused[region.id] = (cause, detail)
        self._region_fallback(cause, detail, n)

    def _region_faulted(self, conn, region, n: int) -> None:
        """A region operation answered FAULT: the server dropped region on
        this connection (its file shrank under the copy)."""
        detail = "%s answered FAULT on %s: the file shrank under the copy; the server dropped it" % (
            conn.addr, region.name)
        conn.regions.pop(region.id, None)
        conn.region_refused[region.id] = ("fault", detail)
        self._region_fallback("fault", detail, n)

    @staticmethod
    def _past_eof(region, idxs, span) -> List[int]:
        """The indexes whose bytes (span(i): region offset, length) the
        region's file no longer holds: after a FAULT the file shrank, and
        the socket path would only fail on that memory too."""
        try:
            with region.fd_lock:
                size = os.fstat(region.fd).st_size if region.fd >= 0 else 0
        except OSError:
            size = 0
        out = []
        for i in idxs:
            off, n = span(i)
            if off + n > size:
                out.append(i)
        return out

    def _get_through_regions(self, conn, blob, keys, views, lease_id, idxs, results) -> List[int]:
        """GET_INTO the keys whose buffers lie in a region; the indexes left
        for the socket path (outside any region, or the region path failed)."""
        groups, locs, rest = self._region_groups(
            conn, idxs, lambda i: self._regions.locate(shm.address_of(views[i]), len(views[i])) if len(views[i]) else None)
        for region, sub in groups.items():
            spans = sorted((locs[i][1], len(views[i])) for i in sub)
            if any(a + n > b for (a, n), (b, _) in zip(spans, spans[1:])):
                self._region_fallback("overlap", "buffers of one GET_INTO overlap", len(sub))
                rest.extend(sub)
                continue
            chunks = self._chunks(sub, conn, None, 4 + 4096 + 8 + 4 + 4, wire.GET_INTO_ENTRY_SIZE)
            for ci, chunk in enumerate(chunks):
                slots = [(locs[i][1], min(len(views[i]), _U32_MAX)) for i in chunk]
                try:
                    body = conn.call(wire.Op.GET_INTO, [wire.get_into_request(
                        blob, lease_id, region.id, [keys[i] for i in chunk], slots)], max_body=4 + 5 * len(chunk))
                except ProtocolError as e:
                    if e.code not in _REGION_REFUSALS:
                        raise
                    left = [i for c in chunks[ci:] for i in c]
                    self._region_failed(conn, region, e, len(left))
                    rest.extend(left)
                    break
                faulted, hits = [], 0
                for i, (st, ln), (_, cap) in zip(chunk, wire.decode_get_into_response(body, len(chunk)), slots):
                    if st == Status.HIT:
                        if ln > cap:
                            raise MalformedError("gpucache/wire: GET_INTO hit of %d bytes in a %d-byte slot" % (ln, cap))
                        results[i] = GetResult(True, ln, "")
                        hits += 1
                    elif st == Status.MISS:
                        results[i] = GetResult(False, 0, "miss")
                    elif st == Status.TOO_LARGE:
                        results[i] = GetResult(False, ln, "over_budget")
                    else:
                        faulted.append(i)
                self._region_count("get_into", hits)
                if faulted:  # the server dropped the region: the rest goes through the socket
                    left = faulted + [i for c in chunks[ci + 1:] for i in c]
                    self._region_faulted(conn, region, len(left))
                    for i in self._past_eof(region, left, lambda i: (locs[i][1], len(views[i]))):
                        results[i] = GetResult(False, 0, "fault")
                        left.remove(i)
                    rest.extend(left)
                    break
        return sorted(rest)

    def _put_through_regions(self, conn, entries, build, statuses, send, per_entry_fixed, op) -> List[int]:
        """PUT_FROM (op PUT) or PUT_OPAQUE_FROM (op PUT_OPAQUE) the entries
        whose payload lies in a region; the indexes left for the socket
        path. build makes op's table, which the region opcode carries as it
        is, after the offsets."""
        from_op = {wire.Op.PUT: wire.Op.PUT_FROM, wire.Op.PUT_OPAQUE: wire.Op.PUT_OPAQUE_FROM}.get(op)
        if from_op is None:
            return send
        counter = from_op.name.lower()
        groups, locs, rest = self._region_groups(conn, send, lambda i: self._locate(entries[i][1]))
        for region, sub in groups.items():
            sizes = {i: 8 + per_entry_fixed(entries[i][0]) for i in sub}
            chunks = self._chunks(sub, conn, sizes, 8 + 8 + 4096)
            for ci, chunk in enumerate(chunks):
                parts = [wire.put_from_head(region.id, [locs[i][1] for i in chunk]),
                         build([entries[i][0] for i in chunk])]
                try:
                    body = conn.call(from_op, parts, stamped=conn.stamp_required, max_body=4 + len(chunk))
                except ProtocolError as e:
                    if e.code not in _REGION_REFUSALS:
                        raise
                    left = [i for c in chunks[ci:] for i in c]
                    self._region_failed(conn, region, e, len(left))
                    rest.extend(left)
                    break
                faulted, carried = [], 0
                for i, st in zip(chunk, wire.decode_status_response(body, len(chunk), None, conn.version)):
                    if st == Status.FAULT:
                        faulted.append(i)
                    else:
                        statuses[i] = st
                        carried += 1
                self._region_count(counter, carried)
                if faulted:
                    left = faulted + [i for c in chunks[ci + 1:] for i in c]
                    self._region_faulted(conn, region, len(left))
                    for i in self._past_eof(region, left, lambda i: (locs[i][1], entries[i][2])):
                        statuses[i] = FAILED
                        left.remove(i)
                    rest.extend(left)
                    break
        return sorted(rest)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- single-flight fill ----

    def get_or_fill(self, ns: Namespace, idents: Sequence[CacheIdentity], fill: Callable,
                    wait_timeout: float = 30.0):
        """Each block's payload, computing each missing block once across
        every client of the tenant (ACQUIRE / WAIT / FILL_COMMIT).

        fill(indices) must return one payload buffer per index (in order);
        it may be called more than once (blocks this client leads, blocks a
        fill it waited on failed, blocks whose GET missed). Returns (out,
        report): out[i] is the payload (bytes read, or what fill returned);
        report counts "hit", "led", "joined", "computed", "denied" and
        "fallback" (computed without coordination after a failure). Only
        fill's own exceptions propagate (after the led fills are aborted).

        Unlike the other calls, the timeout here bounds each phase on its
        own (ACQUIRE, each WAIT beyond its wait time, the commit after
        fill, the GET of the hits): fill's own time is the caller's, and
        wait_timeout bounds the waiting for other clients' fills.
        """
        n = len(idents)
        out: List[object] = [None] * n
        report = {"hit": 0, "led": 0, "joined": 0, "computed": 0, "denied": 0, "fallback": 0}
        blob = ns.canonical()
        digest = ns.digest()
        keys = [ident.key_in(digest) for ident in idents]

        def compute(idxs):
            if not idxs:
                return
            payloads = list(fill(list(idxs)))
            if len(payloads) != len(idxs):
                raise ValueError("gpucache/client: fill returned %d payloads for %d blocks" % (len(payloads), len(idxs)))
            for i, p in zip(idxs, payloads):
                out[i] = p
            report["computed"] += len(idxs)

        def per_node(conn, idxs):
            for chunk in self._chunks(idxs, conn, None, 8 + 4096, 32):
                self._fill_chunk(conn, blob, keys, idents, chunk, out, report, compute, wait_timeout)

        self._routed(keys, per_node, lambda idxs, reason: None)
        todo = [i for i in range(n) if out[i] is None]  # blocks already read or computed stay
        if todo:
            report["fallback"] += len(todo)
            compute(todo)
        return out, report

    def _fill_chunk(self, conn, blob, keys, idents, chunk, out, report, compute, wait_timeout):
        stamped = conn.stamp_required
        acq = wire.decode_acquire_response(
            conn.call(wire.Op.ACQUIRE, [wire.acquire_request(blob, [keys[i] for i in chunk])], stamped=stamped,
                      max_body=4 + 21 * len(chunk)), len(chunk))
        hits, lead, joined, self_compute = [], [], {}, []
        for i, (outcome, tok) in zip(chunk, acq):
            if outcome == wire.Outcome.HIT:
                hits.append(i)
            elif outcome == wire.Outcome.LEAD:
                lead.append((i, tok))
            elif outcome == wire.Outcome.JOINED:
                joined[tok.fill] = i
            else:
                self_compute.append(i)
        if self._after_acquire is not None:
            self._after_acquire([o for o, _ in acq])
        report["led"] += len(lead)
        report["joined"] += len(joined)
        report["denied"] += len(self_compute)

        def commit(led):
            if not led:
                return
            try:
                compute([i for i, _ in led])
            except BaseException:
                try:
                    conn.call(wire.Op.FILL_ABORT, [wire.fill_abort_request(blob, [t for _, t in led])],
                              stamped=stamped, max_body=4 + len(led))
                except Exception:
                    pass
                raise
            conn.deadline = time.monotonic() + self.timeout  # fill's own time does not count
            for part in self._chunks(list(range(len(led))), conn,
                                     [_len_of(out[i]) + 112 for i, _ in led], 12 + 4096):
                entries, parts = [], []
                for k in part:
                    i, tok = led[k]
                    ident, views = idents[i], _payload_views(out[i])
                    entries.append((tok, wire.PutBlock(keys[i], bytes(ident.parent), ident.valid_length,
                                                       sum(len(v) for v in views), ident.position, tuple(ident.tokens))))
                    parts.extend(views)
                table = wire.fill_commit_table(blob, entries)
                body = conn.call(wire.Op.FILL_COMMIT, [len(table).to_bytes(4, "little"), table] + parts,
                                 stamped=stamped, max_body=4 + len(entries))
                wire.decode_status_response(body, len(entries))  # any status: the bytes are ours already

        commit(lead)
        deadline = time.monotonic() + wait_timeout
        while joined:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            wait_ms = int(min(left, 30.0) * 1000)
            fills = list(joined)
            conn.deadline = time.monotonic() + wait_ms / 1000.0 + self.timeout
            notices = wire.decode_wait_response(
                conn.call(wire.Op.WAIT, [wire.wait_request(blob, wait_ms, fills)], max_body=4 + 21 * len(fills)),
                len(fills))
            promoted = []
            for f, (kind, tok) in zip(fills, notices):
                if kind == wire.Notice.PENDING:
                    continue
                i = joined.pop(f)
                if kind == wire.Notice.FINISHED:
                    hits.append(i)
                elif kind == wire.Notice.PROMOTED:
                    promoted.append((i, tok))
                else:
                    self_compute.append(i)
            conn.deadline = time.monotonic() + self.timeout
            commit(promoted)
        self_compute.extend(joined.values())
        conn.deadline = time.monotonic() + self.timeout
        if hits:
            hits.sort()
            got: Dict[int, bytearray] = {}

            def sink(j, ln):
                got[hits[j]] = bytearray(ln)
                return memoryview(got[hits[j]])
            for i, r in zip(hits, self._get_chunk(conn, blob, [keys[i] for i in hits], 0, sink, conn.max_payload, [])):
                if r.hit:
                    out[i] = got[i]
                    report["hit"] += 1
                else:
                    self_compute.append(i)
        if self_compute:
            self_compute.sort()
            compute(self_compute)
            conn.deadline = time.monotonic() + self.timeout
            items = [(idents[i], out[i]) for i in self_compute]
            try:  # best effort: the next reader hits
                self._put_on(conn, blob, keys, items, self_compute)
            except ProtocolError:
                pass

    def fill_session(self) -> "FillSession":
        """A FillSession of this client: fills led and joined across calls,
        on connections of its own."""
        return FillSession(self)

    def _put_on(self, conn, blob, keys, items, idxs):
        sizes = [_len_of(p) + 92 + 4 * len(ident.tokens) for ident, p in items]
        for part in self._chunks(list(range(len(items))), conn, sizes, 12 + 4096):
            entries, parts = [], []
            for k in part:
                (ident, payload), i = items[k], idxs[k]
                views = _payload_views(payload)
                if sum(len(v) for v in views) > conn.max_payload:
                    continue
                entries.append(wire.PutBlock(keys[i], bytes(ident.parent), ident.valid_length,
                                             sum(len(v) for v in views), ident.position, tuple(ident.tokens)))
                parts.extend(views)
            if not entries:
                continue
            table = wire.put_table(blob, entries)
            body = conn.call(wire.Op.PUT, [len(table).to_bytes(4, "little"), table] + parts,
                             stamped=conn.stamp_required, max_body=4 + len(entries))
            wire.decode_status_response(body, len(entries))


def client_from_config(cfg: Dict) -> "Client":
    """A Client from an adapter's configuration dictionary: addrs (a list or
    "h:p,h:p"; "unix:/path" for the daemon's Unix socket; default
    127.0.0.1:9400), tenant, secret or secret_file, tls
    (ca_file, cert_file, key_file), timeout (2.0 s), pool_size (8), cluster."""
    addrs = cfg.get("addrs") or cfg.get("addresses") or "127.0.0.1:9400"
    if isinstance(addrs, str):
        addrs = [a.strip() for a in addrs.split(",") if a.strip()]
    secret = cfg.get("secret")
    if secret is None and cfg.get("secret_file"):
        with open(cfg["secret_file"], "rb") as f:
            secret = f.read(4096).strip()
    if isinstance(secret, str):
        secret = secret.encode()
    ctx = None
    if cfg.get("ca_file") or cfg.get("cert_file") or cfg.get("tls"):
        import ssl

        ctx = ssl.create_default_context(cafile=cfg.get("ca_file"))
        if cfg.get("cert_file"):
            ctx.load_cert_chain(cfg["cert_file"], cfg.get("key_file"))
    return Client(addrs=list(addrs), tenant=cfg["tenant"], secret=secret or b"", ssl_context=ctx,
                  timeout=float(cfg.get("timeout", 2.0)), pool_size=int(cfg.get("pool_size", 8)),
                  cluster=bool(cfg.get("cluster", False)))


def _len_of(p) -> int:
    return sum(len(v) for v in _payload_views(p))


class FillHandle:
    """One key's part in a fill, as a FillSession's acquire answered it.
    outcome: "hit", "lead", "joined" or "denied"; on wait: "finished",
    "failed" (also fenced, or the session's connection lost) or "promoted"
    (this session now leads, and must compute the block or abort)."""

    __slots__ = ("addr", "token", "outcome", "gen")

    def __init__(self, addr: str, token, outcome: str, gen: int):
        self.addr, self.token, self.outcome, self.gen = addr, token, outcome, gen

    def __repr__(self):
        return "FillHandle(%s %s fill=%d)" % (self.addr, self.outcome, self.token.fill if self.token else 0)


class FillSession:
    """Single-flight fills held across calls, for a caller that decides in
    one place and computes in another: an engine's scheduler leads or joins
    the fills of the blocks it is about to compute, its worker processes
    write the bytes with a plain PUT (which ends the fill for every waiter,
    PROTOCOL.md), and the scheduler waits, later, for fills other engines
    lead. Fills belong to the connection that acquired them, so a session
    keeps one connection per node for itself; losing it ends its fills
    (the server passes its turns on and withdraws its waits), which this
    session reports as "failed". Not for concurrent use. Every call is
    bounded by the client's timeout (wait: by its own timeout too); no call
    raises on a fault: acquire answers "denied", wait "failed".
    """

    def __init__(self, client: Client):
        self._c = client
        self._conns: Dict[str, object] = {}
        self._gen: Dict[str, int] = {}

    def _conn(self, addr: str, deadline: float):
        c = self._conns.get(addr)
        if c is None:
            c = Conn.dial(addr, deadline, self._c.tenant, self._c._secret, self._c._ssl, self._c._hostname,
                          self._c.max_frame)
            self._conns[addr] = c
            self._gen[addr] = self._gen.get(addr, 0) + 1
        c.deadline = deadline
        return c

    def _drop(self, addr: str) -> None:
        c = self._conns.pop(addr, None)
        if c is not None:
            c.close()

    def _live(self, h: FillHandle) -> bool:
        return h.addr in self._conns and self._gen.get(h.addr) == h.gen

    def acquire(self, ns: Namespace, keys: Sequence[bytes]) -> List[FillHandle]:
        """One handle per key: "hit" (cached now), "lead" (compute it: a PUT
        of it ends the fill), "joined" (another session leads: wait) or
        "denied" (no coordination: compute it)."""
        keys = [bytes(k) for k in keys]
        out: List[Optional[FillHandle]] = [None] * len(keys)
        if not keys:
            return []
        deadline = self._c._deadline()
        blob = ns.canonical()
        try:
            groups, _ = self._c._route(keys, list(range(len(keys))), deadline)
        except Exception:
            groups = []
        names = {wire.Outcome.HIT: "hit", wire.Outcome.LEAD: "lead", wire.Outcome.JOINED: "joined"}
        for addr, idxs in groups:
            try:
                conn = self._conn(addr, deadline)
                for chunk in Client._chunks(idxs, conn, None, 8 + 4096, 32):
                    acq = wire.decode_acquire_response(
                        conn.call(wire.Op.ACQUIRE, [wire.acquire_request(blob, [keys[i] for i in chunk])],
                                  stamped=conn.stamp_required, max_body=4 + 21 * len(chunk)), len(chunk))
                    for i, (outcome, tok) in zip(chunk, acq):
                        out[i] = FillHandle(addr, tok, names.get(outcome, "denied"), self._gen[addr])
            except Exception:
                self._drop(addr)
        return [h if h is not None else FillHandle("", None, "denied", 0) for h in out]

    def wait(self, ns: Namespace, handles: Sequence[FillHandle], timeout: float) -> None:
        """Wait up to timeout seconds (0: only look) for the fills of the
        "joined" handles; each one that ends changes its outcome to
        "finished", "failed" or "promoted" (a promoted handle is a lead).
        Handles still "joined" afterwards are pending."""
        blob = ns.canonical()
        end = time.monotonic() + max(timeout, 0.0)
        by_addr: Dict[str, List[FillHandle]] = {}
        for h in handles:
            if h.outcome != "joined":
                continue
            if not self._live(h):
                h.outcome = "failed"
                continue
            by_addr.setdefault(h.addr, []).append(h)
        for addr, hs in by_addr.items():
            wait_ms = int(min(max(end - time.monotonic(), 0.0), 30.0) * 1000)
            try:
                conn = self._conn(addr, time.monotonic() + wait_ms / 1000.0 + self._c.timeout)
                fills = sorted({h.token.fill for h in hs})
                for part in Client._chunks(fills, conn, None, 12 + 4096, 8):
                    notices = wire.decode_wait_response(
                        conn.call(wire.Op.WAIT, [wire.wait_request(blob, wait_ms, part)],
                                  max_body=4 + 21 * len(part)), len(part))
                    wait_ms = 0
                    got = dict(zip(part, notices))
                    for h in hs:
                        kind, tok = got.get(h.token.fill, (wire.Notice.PENDING, None))
                        if kind == wire.Notice.FINISHED:
                            h.outcome = "finished"
                        elif kind == wire.Notice.PROMOTED:
                            h.outcome, h.token = "promoted", tok
                        elif kind != wire.Notice.PENDING:
                            h.outcome = "failed"
            except Exception:
                self._drop(addr)
                for h in hs:
                    if h.outcome == "joined":
                        h.outcome = "failed"

    def abort(self, ns: Namespace, handles: Sequence[FillHandle]) -> None:
        """Give up the turns of the "lead" and "promoted" handles: a turn a
        PUT already ended answers NOT_LEADER and changes nothing; a live one
        passes to its next waiter now instead of at the fill deadline."""
        blob = ns.canonical()
        by_addr: Dict[str, List[FillHandle]] = {}
        for h in handles:
            if h.outcome in ("lead", "promoted") and self._live(h):
                by_addr.setdefault(h.addr, []).append(h)
        deadline = self._c._deadline()
        for addr, hs in by_addr.items():
            try:
                conn = self._conn(addr, deadline)
                toks = [h.token for h in hs]
                for part in Client._chunks(list(range(len(toks))), conn, None, 8 + 4096, 20):
                    conn.call(wire.Op.FILL_ABORT, [wire.fill_abort_request(blob, [toks[i] for i in part])],
                              stamped=conn.stamp_required, max_body=4 + len(part))
            except Exception:
                self._drop(addr)
        for h in handles:
            if h.outcome in ("lead", "promoted"):
                h.outcome = "aborted"

    def close(self) -> None:
        """Close the session's connections: the server ends its fills."""
        for addr in list(self._conns):
            self._drop(addr)
