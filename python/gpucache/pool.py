"""A bounded, thread-safe pool of connections to one address.

A caller takes a connection for the whole of one request (or one
get_or_fill, whose fill tokens belong to the connection), then gives it
back: healthy, it is reused; broken (a deadline passed mid-frame, a
malformed reply, a dropped stream, an answer over the client's limit), it
is closed and its slot freed.

A Conn trusts its server for nothing it needs to stay bounded: every
answer is read against the client's own limit for it (max_frame, which a
larger max_frame in HELLO cannot raise, and each opcode's largest
well-formed body), and every send and receive is armed with the time left
to one deadline, so no sequence of slow reads can outlast it.
"""

import array
import socket
import ssl as _ssl
import threading
import time
from typing import Callable, List

from . import wire
from .errors import ConnectionFailed, FrameTooLarge, MalformedError, ProtocolError


class PoolTimeout(Exception):
    """No connection became free before the deadline."""


class Pool:
    """At most `size` connections to one address; dial is called outside the lock."""

    def __init__(self, dial: Callable[[float], object], size: int):
        if size < 1:
            raise ValueError("gpucache/pool: size must be >= 1")
        self._dial = dial
        self._size = size
        # mu guards idle, total and closed.
        self._mu = threading.Condition(threading.Lock())
        self._idle: List[object] = []
        self._total = 0
        self._closed = False

    def get(self, deadline: float):
        """A connection, dialling one if fewer than size exist. Raises
        PoolTimeout past the deadline (time.monotonic), or the dial's error."""
        with self._mu:
            while True:
                if self._closed:
                    raise ConnectionError("gpucache/pool: closed")
                if self._idle:
                    return self._idle.pop()
                if self._total < self._size:
                    self._total += 1
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise PoolTimeout("gpucache/pool: no connection free before the deadline")
                self._mu.wait(left)
        try:
            return self._dial(deadline)
        except BaseException:
            with self._mu:
                self._total -= 1
                self._mu.notify()
            raise

    def put(self, conn, healthy: bool):
        """Give conn back; a broken one is closed."""
        with self._mu:
            if healthy and not self._closed:
                self._idle.append(conn)
                self._mu.notify()
                return
            self._total -= 1
            self._mu.notify()
        conn.close()

    def close(self):
        with self._mu:
            self._closed = True
            idle, self._idle = self._idle, []
            self._total -= len(idle)
            self._mu.notify_all()
        for c in idle:
            c.close()

    def each_idle(self, fn: Callable[[object], None]):
        """fn(conn) on each idle connection, taken out of the pool meanwhile;
        one whose fn raised anything but an error answer is closed."""
        with self._mu:
            idle, self._idle = self._idle, []
        for i, c in enumerate(idle):
            try:
                fn(c)
            except Exception as e:
                self.put(c, usable_after(e))
                continue
            except BaseException:
                self.put(c, False)
                for rest in idle[i + 1:]:
                    self.put(rest, True)
                raise
            self.put(c, True)

    def stats(self):
        with self._mu:
            return {"idle": len(self._idle), "open": self._total, "size": self._size}


# ---- one connection ----

CLIENT_NAME = "gpucache-py/0.1"

# HELLO_ID is HELLO's request id: 10, the byte '\n' (see Conn.dial).
HELLO_ID = 10
_IOV_MAX = 512  # buffers per sendmsg call (Linux IOV_MAX is 1024)
_MAX_ERROR_BODY = 2 + 2 + wire.MAX_STRING_LEN + 8
_SCRATCH = 64 << 10  # bytes read at a time when discarding a payload
_ZEROS = bytes(_SCRATCH)


class Timeout(Exception):
    """A request's deadline passed."""


UNIX_PREFIX = "unix:"


def unix_path(addr: str):
    """The socket path of a "unix:/path" address ("unix:///path" too;
    "unix:@name" is Linux's abstract namespace), or None for host:port."""
    if not addr.startswith(UNIX_PREFIX):
        return None
    p = addr[len(UNIX_PREFIX):]
    if p.startswith("//"):
        p = p[2:]
    if not p:
        raise ValueError("gpucache/client: empty Unix socket path in %r" % addr)
    return "\0" + p[1:] if p.startswith("@") else p


class Conn:
    """One HELLO'd connection. Requests are strictly one at a time (the pool
    hands a Conn to one caller), so a response must carry the request's id.
    Any failure mid-frame leaves the stream out of sync: the caller then
    gives the Conn back broken and it is closed.

    On a Unix-domain connection with a version-5 session, regions holds the
    ids this connection registered (id -> RegionMode) and region_refused
    those it must not try again (id -> why); both die with the connection,
    as the server's registrations do."""

    def __init__(self, sock, addr: str, max_frame: int = wire.DEFAULT_MAX_FRAME):
        self.sock = sock
        self.addr = addr
        self.tls = isinstance(sock, _ssl.SSLSocket)
        self.unix = getattr(sock, "family", None) == socket.AF_UNIX
        self.regions = {}
        self.region_refused = {}
        self.region_gen = 0
        self.hello = None  # wire.HelloResponse
        self.version = 1
        # max_frame is the client's own limit until HELLO, then the smaller
        # of it and the server's; max_payload never exceeds it.
        self.max_frame = max_frame
        self.max_batch = wire.DEFAULT_MAX_BATCH
        self.max_payload = min(wire.DEFAULT_MAX_PAYLOAD, max_frame)
        self.stamp_required = False
        self._rid = 0
        self._hdr = bytearray(wire.HEADER_SIZE)
        self.deadline = 0.0

    @classmethod
    def dial(cls, addr: str, deadline: float, tenant: str = "", secret: bytes = b"",
             ssl_context=None, server_hostname=None, max_frame: int = wire.DEFAULT_MAX_FRAME):
        """Connect, handshake and HELLO, all before deadline (time.monotonic).
        The server's limits are taken only where they are smaller than the
        client's own max_frame. A "unix:/path" address dials the server's
        Unix-domain listener, never with TLS (the kernel is the only hop;
        a secret, when set, still authenticates the HELLO)."""
        path = unix_path(addr)
        if path is not None:
            sock, ssl_context = _connect_unix(path, deadline, addr), None
        else:
            host, _, port = addr.rpartition(":")
            host = host.strip("[]")
            sock = _connect(host, int(port), deadline, addr)
        try:
            if path is None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if ssl_context is not None:
                # CPython bounds the whole handshake by the socket timeout
                # (one deadline across its reads and writes), so this is the
                # time left, not a per-read allowance.
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Timeout("gpucache/client: deadline passed before the TLS handshake with %s" % addr)
                sock.settimeout(left)
                sock = ssl_context.wrap_socket(sock, server_hostname=server_hostname or host)
            c = cls(sock, addr, max_frame)
            c.deadline = deadline
            # HELLO goes out with request id HELLO_ID (10, the byte '\n'),
            # as the Go client's does: a peer that speaks HTTP (such as a
            # node's admin listener) then reads a whole, bad request line
            # and answers at once, which read_header reports as not a data
            # port, instead of both sides waiting out the deadline.
            c._rid = HELLO_ID - 1
            auth = bool(secret) or ssl_context is not None
            body = wire.hello_request(1, wire.VERSION_MAX, tenant, CLIENT_NAME, auth=auth,
                                      auth_kind=wire.AUTH_BEARER if secret else wire.AUTH_NONE,
                                      credential=secret or b"")
            h = wire.decode_hello_response(c.call(wire.Op.HELLO, [body], max_body=wire.MAX_HELLO_BODY))
        except BaseException:
            sock.close()
            raise
        if not 1 <= h.version <= wire.VERSION_MAX:
            sock.close()
            raise MalformedError("gpucache/client: server negotiated version %d" % h.version)
        if tenant and h.has_session and h.tenant != tenant:
            sock.close()
            raise ConnectionFailed("denied", "session tenant %r, want %r" % (h.tenant, tenant))
        c.hello = h
        c.version = h.version
        c.max_frame = min(max_frame, h.max_frame or max_frame)
        c.max_batch = max(1, h.max_batch)
        c.max_payload = min(h.max_payload or wire.DEFAULT_MAX_PAYLOAD, c.max_frame)
        c.stamp_required = bool(h.session_flags & wire.SESSION_STAMP_REQUIRED)
        return c

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    # ---- deadlines ----

    def _arm(self):
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise Timeout("gpucache/client: deadline passed")
        self.sock.settimeout(left)

    # ---- sending ----

    def send(self, op: int, parts, stamped: bool = False):
        """Send one request frame: header, optional stamp, then parts (any
        buffers, sent as they are: sendmsg scatter/gather on plain TCP)."""
        self._rid = (self._rid + 1) & ((1 << 64) - 1) or 1
        views = [memoryview(p).cast("B") if not isinstance(p, bytes) else p for p in parts]
        n = sum(len(v) for v in views)
        flags = 0
        if stamped:
            flags = wire.FLAG_STAMPED
            views.insert(0, wire.stamp())
            n += wire.STAMP_SIZE
        if n > self.max_frame:
            raise ValueError("gpucache/client: request body of %d bytes exceeds max_frame %d" % (n, self.max_frame))
        views.insert(0, wire.encode_header(op, flags, self._rid, n))
        self._send_all(views)
        return self._rid

    def _send_all(self, views):
        if self.tls:  # SSLSocket has no sendmsg; sendall of each view copies nothing either
            for v in views:
                self._arm()
                self.sock.sendall(v)
            return
        i = 0
        while i < len(views):
            self._arm()
            batch = views[i:i + _IOV_MAX]
            sent = self.sock.sendmsg(batch)
            while sent > 0 and i < len(views):
                ln = len(views[i])
                if sent >= ln:
                    sent -= ln
                    i += 1
                else:
                    views[i] = memoryview(views[i])[sent:]
                    sent = 0
            while i < len(views) and len(views[i]) == 0:
                i += 1

    def send_with_fd(self, op: int, body: bytes, fd: int):
        """Send one request frame with fd as SCM_RIGHTS on the sendmsg that
        carries the frame's first byte (REGISTER; Unix sockets only)."""
        if not self.unix:
            raise ValueError("gpucache/client: descriptors travel only on a Unix-domain connection")
        if fd < 0:
            raise ValueError("gpucache/client: the region's descriptor is closed")
        self._rid = (self._rid + 1) & ((1 << 64) - 1) or 1
        frame = memoryview(wire.encode_header(op, 0, self._rid, len(body)) + bytes(body))
        anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))]
        self._arm()
        sent = self.sock.sendmsg([frame], anc)
        while sent < len(frame):
            self._arm()
            sent += self.sock.send(frame[sent:])
        return self._rid

    def register(self, region: int, fd, length: int, fd_lock=None) -> "wire.RegionMode":
        """REGISTER fd (an int, or a function returning it) as region on
        this connection: the server's mode, or ProtocolError (REGION:
        refused; the connection stays usable). fd_lock, when given, is held
        while fd is read and sent, so its owner cannot close it (and the
        number be reused by another file) in between; a closed one (< 0)
        is ValueError, with nothing sent."""
        body = wire.register_request(region, length)
        if fd_lock is None:
            rid = self.send_with_fd(wire.Op.REGISTER, body, fd() if callable(fd) else fd)
        else:
            with fd_lock:
                rid = self.send_with_fd(wire.Op.REGISTER, body, fd() if callable(fd) else fd)
        h = self.read_header(wire.Op.REGISTER, rid)
        if h.body_len > 1:
            raise FrameTooLarge("gpucache/client: REGISTER answer of %d bytes" % h.body_len)
        return wire.decode_register_response(self.recv_bytes(h.body_len))

    def unregister(self, region: int):
        """UNREGISTER region on this connection."""
        body = self.call(wire.Op.UNREGISTER, [wire.unregister_request(region)], max_body=0)
        if body:
            raise MalformedError("gpucache/wire: UNREGISTER answer of %d bytes" % len(body))

    # ---- receiving ----

    def recv_into(self, view, wipe: bool = False):
        """Fill view (a writable byte memoryview) from the stream. With wipe,
        a read that fails part-way zeroes the bytes it wrote before raising,
        so a caller's buffer never keeps a fragment of a failed answer."""
        got, n = 0, len(view)
        try:
            while got < n:
                self._arm()
                r = self.sock.recv_into(view[got:], n - got)
                if r == 0:
                    raise ConnectionResetError("gpucache/client: connection closed mid-frame")
                got += r
        except BaseException:
            if wipe and got:
                _zero(view[:got])
            raise

    def recv_bytes(self, n: int) -> bytearray:
        b = bytearray(n)
        if n:
            self.recv_into(memoryview(b))
        return b

    def read_header(self, op: int, rid: int) -> wire.Header:
        self.recv_into(memoryview(self._hdr))
        if self.hello is None and bytes(self._hdr[:4]) != wire.MAGIC:
            # The answer to HELLO is not a gpucache frame: an HTTP status
            # line, an HTML error page (an HTTP/0.9 answer) or anything else.
            head = bytes(self._hdr[:4])
            what = "HTTP" if head in (b"HTTP", b"<!DO", b"<htm", b"<HTM") else "%r" % head
            raise ConnectionFailed("not a gpucache data port", (
                "%s answered %s: it is not a gpucache data port (the data port is usually :9400; "
                "an HTTP port, such as a node's admin listener, is usually :9401)") % (self.addr, what))
        h = wire.decode_header(bytes(self._hdr))
        if not h.flags & wire.FLAG_RESPONSE or h.flags & ~(wire.FLAG_RESPONSE | wire.FLAG_ERROR):
            raise MalformedError("gpucache/wire: response flags %#x" % h.flags)
        if h.request_id != rid or h.op != op:
            raise MalformedError("gpucache/wire: response to request %d op %d, want %d op %d" % (h.request_id, h.op, rid, op))
        if h.flags & wire.FLAG_ERROR:
            if h.body_len > _MAX_ERROR_BODY:
                raise MalformedError("gpucache/wire: error body of %d bytes" % h.body_len)
            raise wire.decode_error(self.recv_bytes(h.body_len))
        if h.body_len > self.max_frame:
            raise FrameTooLarge("gpucache/client: %s answer of %d bytes exceeds max_frame %d" % (
                wire.Op(op).name, h.body_len, self.max_frame))
        return h

    def call(self, op: int, parts, stamped: bool = False, *, max_body: int) -> bytearray:
        """One request, one whole response body of at most max_body bytes
        (the largest well-formed answer to op): a longer one is refused
        before any of it is read or allocated. A ProtocolError leaves the
        connection usable (the error body was read in full)."""
        rid = self.send(op, parts, stamped)
        h = self.read_header(op, rid)
        if h.body_len > max_body:
            raise FrameTooLarge("gpucache/client: %s answer of %d bytes, at most %d expected" % (
                wire.Op(op).name, h.body_len, max_body))
        return self.recv_bytes(h.body_len)

    def discard(self, n: int):
        """Read and drop n bytes through a small scratch buffer."""
        scratch = memoryview(bytearray(min(n, _SCRATCH)))
        while n > 0:
            k = min(n, len(scratch))
            self.recv_into(scratch[:k])
            n -= k


def _connect(host: str, port: int, deadline: float, addr: str):
    """A TCP connection to host:port, trying each address it resolves to with
    the time left to deadline (socket.create_connection would give each the
    whole timeout). Name resolution itself is not bounded by the deadline."""
    err = None
    for af, kind, proto, _, sa in socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        s = socket.socket(af, kind, proto)
        try:
            s.settimeout(left)
            s.connect(sa)
            return s
        except OSError as e:
            s.close()
            err = e
    if err is not None:
        try:
            raise err
        finally:
            # Break the cycle err -> traceback -> this frame -> err: it would
            # keep every frame of the failed call alive until the cycle
            # collector runs, and with them the caller's buffers (an engine's
            # KV memory, whose mmap cannot be closed while they are exported).
            err = None
    raise Timeout("gpucache/client: deadline passed before dialling %s" % addr)


def _connect_unix(path: str, deadline: float, addr: str):
    """A connection to the Unix-domain socket at path within the time left."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise Timeout("gpucache/client: deadline passed before dialling %s" % addr)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(left)
        s.connect(path)
    except BaseException:
        s.close()
        raise
    return s


def _zero(view):
    """Overwrite a writable byte memoryview with zeros."""
    zeros = memoryview(_ZEROS)
    for off in range(0, len(view), len(zeros)):
        k = min(len(zeros), len(view) - off)
        view[off:off + k] = zeros[:k]


def usable_after(err: BaseException) -> bool:
    """Whether a connection stays in sync after err: only a whole error
    response that does not close the stream."""
    return isinstance(err, ProtocolError) and err.code not in (wire.Code.BAD_MAGIC, wire.Code.FRAME_TOO_LARGE)
