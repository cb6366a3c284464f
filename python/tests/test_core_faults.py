"""Failure semantics: a garbage, truncated or silent server, a daemon killed
mid-run and WRONG_EPOCH re-routing. Every read-path failure is a miss with a
reason, returned within the request's deadline; nothing raises."""

import os
import socket
import struct
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gpucache import FAILED, Client, Layout, Namespace, Status, chain, identities  # noqa: E402
from gpucache import placement, wire  # noqa: E402
from gpucached import Daemon  # noqa: E402

NS = Namespace("acme", "test", "m", "1", "1", layout=Layout("flat", block_tokens=4))
KEYS = chain(NS, list(range(8)))

# A liveness bound, not a timing assertion: a call with a 0.3 s deadline must
# return long before this even on a loaded 2-core machine.
BOUND = 10.0


def frame(op, rid, body, flags=wire.FLAG_RESPONSE, magic=b"GPUC", version=1, reserved=0, body_len=None):
    n = len(body) if body_len is None else body_len
    return struct.pack("<4sBBHQII", magic, version, op, flags, rid, n, reserved) + body


def hello_body(version=3, auth=False):
    b = struct.pack("<B", version) + struct.pack("<H", 4) + b"fake" + struct.pack(
        "<IIII", wire.DEFAULT_MAX_FRAME, 1024, 64, 4 << 20)
    return b


def get_body(entries, payloads=b""):
    table = struct.pack("<I", len(entries)) + b"".join(struct.pack("<BI", s, n) for s, n in entries)
    return struct.pack("<I", len(table)) + table + payloads


def error_body(code, msg=b"", epoch=None):
    b = struct.pack("<HH", code, len(msg)) + msg
    return b + (struct.pack("<Q", epoch) if epoch is not None else b"")


class FakeServer:
    """A loopback server that answers HELLO and hands every other request to
    handler(op, rid, body, conn_sock) -> bytes to send, None to stay silent,
    or "close" to close the connection."""

    def __init__(self, handler):
        self.handler = handler
        self.ls = socket.socket()
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(16)
        self.addr = "127.0.0.1:%d" % self.ls.getsockname()[1]
        self.conns = []
        self.stop = threading.Event()
        self.t = threading.Thread(target=self._accept, daemon=True)
        self.t.start()

    def _accept(self):
        while not self.stop.is_set():
            try:
                s, _ = self.ls.accept()
            except OSError:
                return
            self.conns.append(s)
            threading.Thread(target=self._serve, args=(s,), daemon=True).start()

    def _recv(self, s, n):
        b = bytearray()
        while len(b) < n:
            r = s.recv(n - len(b))
            if not r:
                raise EOFError
            b += r
        return bytes(b)

    def _serve(self, s):
        try:
            while True:
                h = self._recv(s, 24)
                _, _, op, flags, rid, n, _ = struct.unpack("<4sBBHQII", h)
                body = self._recv(s, n)
                if op == wire.Op.HELLO:
                    s.sendall(frame(op, rid, hello_body()))
                    continue
                out = self.handler(op, rid, body, s)
                if out == "close":
                    s.close()
                    return
                if out is not None:
                    s.sendall(out)
        except (EOFError, OSError):
            pass

    def close(self):
        self.stop.set()
        self.ls.close()
        for s in self.conns:
            try:
                s.close()
            except OSError:
                pass


class GarbageReplies(unittest.TestCase):
    def check_get_miss(self, handler, reason):
        srv = FakeServer(handler)
        c = Client([srv.addr], tenant="acme", timeout=0.3, pool_size=2)
        try:
            t0 = time.monotonic()
            r = c.get_into(NS, KEYS[:2], [bytearray(64), bytearray(64)])
            self.assertEqual([(x.hit, x.reason) for x in r], [(False, reason)] * 2)
            self.assertEqual(c.get(NS, KEYS[:2]), [None, None])
            self.assertEqual(c.lookup(NS, KEYS[:2]), (0, 0))
            self.assertLess(time.monotonic() - t0, BOUND)
        finally:
            c.close()
            srv.close()

    def test_random_bytes(self):
        self.check_get_miss(lambda op, rid, body, s: os.urandom(200), "malformed")

    def test_bad_magic(self):
        self.check_get_miss(lambda op, rid, body, s: frame(op, rid, get_body([(0, 4), (1, 0)], b"abcd"),
                                                            magic=b"GPUX"), "malformed")

    def test_wrong_request_id(self):
        self.check_get_miss(lambda op, rid, body, s: frame(op, rid + 1, get_body([(1, 0), (1, 0)])), "malformed")

    def test_unknown_status(self):
        self.check_get_miss(lambda op, rid, body, s: frame(op, rid, get_body([(9, 0), (1, 0)])), "malformed")

    def test_payloads_do_not_add_up(self):
        self.check_get_miss(lambda op, rid, body, s: frame(op, rid, get_body([(0, 4), (0, 4)], b"abcdefghij")),
                            "malformed")

    def test_miss_with_length(self):
        self.check_get_miss(lambda op, rid, body, s: frame(op, rid, get_body([(1, 4), (1, 0)], b"abcd")), "malformed")

    def test_truncated_then_closed(self):
        def h(op, rid, body, s):
            s.sendall(frame(op, rid, get_body([(0, 64), (0, 64)], b"x" * 128))[:60])
            return "close"
        self.check_get_miss(h, "dropped")

    def test_truncated_then_silent(self):
        def h(op, rid, body, s):
            return frame(op, rid, get_body([(0, 64), (0, 64)], b"x" * 128))[:60]
        self.check_get_miss(h, "timeout")

    def test_silent_server_times_out(self):
        self.check_get_miss(lambda op, rid, body, s: None, "timeout")

    def test_huge_body_length(self):
        # Over the client's own limit: refused unread, a miss with its own reason.
        self.check_get_miss(lambda op, rid, body, s: frame(op, rid, b"", body_len=0xFFFFFFF0), "too_large")

    def test_write_paths_return_failed(self):
        srv = FakeServer(lambda op, rid, body, s: os.urandom(64))
        c = Client([srv.addr], tenant="acme", timeout=0.3)
        try:
            ids = identities(NS, list(range(8)))
            self.assertEqual(c.put(NS, [(i, b"x") for i in ids]), [FAILED, FAILED])
            self.assertEqual(c.delete(NS, KEYS[:2]), [FAILED, FAILED])
            out, rep = c.get_or_fill(NS, ids, lambda idx: [b"y"] * len(idx))
            self.assertEqual(out, [b"y", b"y"])
            self.assertEqual(rep["fallback"], 2)
        finally:
            c.close()
            srv.close()

    def test_refused(self):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        addr = "127.0.0.1:%d" % s.getsockname()[1]
        s.close()  # nothing listens there now
        c = Client([addr], tenant="acme", timeout=0.3)
        r = c.get_into(NS, KEYS[:1], [bytearray(8)])
        self.assertEqual(r[0].reason, "refused")
        c.close()


class DaemonStopped(unittest.TestCase):
    def test_killed_mid_run(self):
        d = Daemon.start()
        c = Client([d.addr], tenant="acme", timeout=0.5, pool_size=8)
        ids = identities(NS, list(range(64)))
        keys = [i.key() for i in ids]
        self.assertEqual(set(c.put(NS, [(i, b"p" * 65536) for i in ids])), {Status.STORED})
        started = threading.Barrier(9)
        killed = threading.Event()
        seen = [set() for _ in range(8)]
        errors = []
        slow = []

        def reader(t):
            try:
                bufs = [bytearray(65536) for _ in keys]
                started.wait()
                after = 0
                while after < 5:  # at least 5 reads after the kill
                    k = killed.is_set()
                    t0 = time.monotonic()
                    res = c.get_into(NS, keys, bufs)
                    if time.monotonic() - t0 > BOUND:
                        slow.append(time.monotonic() - t0)
                    for r in res:
                        seen[t].add(r.reason)
                    if k:
                        after += 1
                        assert not any(r.hit for r in res), "a hit from a dead daemon"
            except Exception as e:  # reported below
                errors.append(e)
        ths = [threading.Thread(target=reader, args=(t,)) for t in range(8)]
        for t in ths:
            t.start()
        started.wait()
        d.kill()
        killed.set()
        for t in ths:
            t.join()
        c.close()
        d.stop()
        self.assertEqual(errors, [])
        self.assertEqual(slow, [])
        reasons = set().union(*seen)
        self.assertTrue(reasons <= {"", "dropped", "refused", "timeout"}, reasons)
        self.assertTrue(reasons & {"dropped", "refused"}, reasons)


class WrongEpoch(unittest.TestCase):
    """Node A's view moves from {A} (epoch 5) to {A, B} (epoch 6): a GET for a
    key B now owns is refused WRONG_EPOCH; the client fetches MEMBERS, installs
    epoch 6 and retries on B once."""

    def test_refresh_and_reroute(self):
        state = {"epoch": 5}
        served = {"a": 0, "b": 0}

        def members_body(ms):
            b = struct.pack("<QI", state["epoch"], len(ms))
            for m in ms:
                for f in (m.id, m.addr, m.domain):
                    b += struct.pack("<H", len(f)) + f.encode()
                b += struct.pack("<BQB", 3, m.capacity, 0)
            return b

        def view_members():
            ms = [placement.Member("a", a.addr, "z1", 3, 1 << 30)]
            if state["epoch"] >= 6:
                ms.append(placement.Member("b", b.addr, "z2", 3, 1 << 30))
            return ms

        def handler_for(name):
            def h(op, rid, body, s):
                if op == wire.Op.MEMBERS:
                    return frame(op, rid, members_body(view_members()))
                if op == wire.Op.GET:
                    keys = [body[4 + len(NS.canonical()) + 8 + 4 + 32 * i:][:32] for i in range((len(body) - 4 - len(NS.canonical()) - 12) // 32)]
                    view = placement.View(6, [placement.Member("a", "", "z1", 3, 1 << 30),
                                              placement.Member("b", "", "z2", 3, 1 << 30)])
                    if name == "a" and any(view.owner(k).id != "a" for k in keys):
                        state["epoch"] = 6
                        return frame(op, rid, error_body(19, b"not mine", epoch=6), flags=3)
                    served[name] += len(keys)
                    return frame(op, rid, get_body([(0, 2)] * len(keys), name.encode() * 2 * len(keys)))
                return frame(op, rid, error_body(3, b"no"), flags=3)
            return h
        a = FakeServer(handler_for("a"))
        b = FakeServer(handler_for("b"))
        try:
            keys = chain(NS, list(range(400)))
            view = placement.View(6, [placement.Member("a", "", "z1", 3, 1 << 30),
                                      placement.Member("b", "", "z2", 3, 1 << 30)])
            owners = [view.owner(k).id for k in keys]
            self.assertIn("a", owners)
            self.assertIn("b", owners)
            c = Client([a.addr], tenant="acme", timeout=2.0, cluster=True)
            got = c.get(NS, keys)
            self.assertEqual([bytes(g) for g in got], [o.encode() * 2 for o in owners])
            self.assertEqual(c.members().epoch, 6)
            self.assertEqual(served["b"], owners.count("b"))
            c.close()
        finally:
            a.close()
            b.close()


if __name__ == "__main__":
    unittest.main()


class NotADataPort(unittest.TestCase):
    """An address that is an HTTP port (a node's admin listener) fails at
    once with a reason that says so, not after the request's deadline."""

    def test_http_port(self):
        import http.server

        class Quiet(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

        srv = http.server.HTTPServer(("127.0.0.1", 0), Quiet)
        th = threading.Thread(target=srv.serve_forever)
        th.start()
        try:
            # A deadline of an hour: the answer must come from the HTTP
            # reply, not from waiting the deadline out.
            c = Client(["127.0.0.1:%d" % srv.server_address[1]], tenant="acme", timeout=3600.0)
            with self.assertRaises(Exception) as cm:
                c.ping()
            c.close()
        finally:
            srv.shutdown()
            srv.server_close()
            th.join()
        msg = str(cm.exception)
        self.assertIn("not a gpucache data port", msg)
        self.assertIn("answered HTTP", msg)
