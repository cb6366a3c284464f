"""The client against a server that lies: it announces huge limits, answers
with gigabyte headers, drips bytes, answers another request or stops in the
middle of a frame. An engine's process must never be at a cache server's
mercy, so each case checks, in a fresh process (untrusted_probe.py), that
the call

- gives a miss with a reason (or, for STAT, raises ConnectionFailed),
- returns within its deadline plus MARGIN,
- raises the process's peak resident memory by less than RSS_BOUND above
  what it was before the calls (VmHWM after minus VmRSS before),
- leaves no byte of a failed answer in the caller's buffer (the bytes a
  failed read wrote are zeroed, the rest of the buffer is untouched),
- and does not reuse a connection whose stream position it lost.
"""

import json
import os
import socket
import struct
import subprocess
import sys
import threading
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from gpucache import Layout, Namespace, chain, placement, wire  # noqa: E402

PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "untrusted_probe.py")
NS = Namespace("acme", "test", "m", "1", "1", layout=Layout("flat", block_tokens=4))

# The one time bound these tests assert: a call ends within its deadline
# plus MARGIN. The margin is generous because the machine may be loaded;
# none of the lies below can be answered in time without the client's own
# bounds (a 3 GiB allocation, 8 nodes of 1 s each, a drip of 1 byte/s).
MARGIN = 3.0
# How far a call may raise the probe's peak resident memory. The lies
# below announce 256 MiB to 3 GiB; the client reads them through at most
# a 64 KiB scratch buffer or not at all.
RSS_BOUND_KIB = 64 << 10
# A liveness bound for one probe process (start-up included), so a broken
# client fails the test instead of hanging it.
PROBE_LIVENESS = 120.0

GIB = 1 << 30
FILL = 0xAA  # untrusted_probe.FILL
SERVED = 0x55  # the payload bytes the fake servers send


def frame(op, rid, body=b"", body_len=None, flags=wire.FLAG_RESPONSE):
    n = len(body) if body_len is None else body_len
    return struct.pack("<4sBBHQII", b"GPUC", 1, op, flags, rid, n, 0) + body


def get_head(entries, payload_total):
    """Header-less start of a GET body: table length, table; and the body
    length the header must announce for payload_total payload bytes."""
    table = struct.pack("<I", len(entries)) + b"".join(struct.pack("<BI", s, n) for s, n in entries)
    return struct.pack("<I", len(table)) + table, 4 + len(table) + payload_total


class LyingServer:
    """A loopback server that answers HELLO with the limits it is given and
    hands every other request to answer(srv, sock, op, rid, body), which
    writes what it likes. A connection stays open until the client closes
    it or close() is called, so a silent answer stays silent until then.
    It counts connections (accepted) and records each request's opcode."""

    def __init__(self, answer, max_frame=wire.DEFAULT_MAX_FRAME, max_payload=4 << 20):
        self.answer = answer
        self.hello = struct.pack("<BH", 3, 4) + b"liar" + struct.pack("<IIII", max_frame, 1024, 64, max_payload)
        self.stop = threading.Event()
        self.mu = threading.Lock()
        self.accepted = 0
        self.ops = []
        self.socks = []
        self.threads = []
        self.ls = socket.socket()
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(16)
        self.addr = "127.0.0.1:%d" % self.ls.getsockname()[1]
        self._go(self._accept)

    def _go(self, fn, *args):
        t = threading.Thread(target=fn, args=args, daemon=True)
        with self.mu:
            self.threads.append(t)
        t.start()

    def _accept(self):
        while not self.stop.is_set():
            try:
                s, _ = self.ls.accept()
            except OSError:
                return
            with self.mu:
                self.accepted += 1
                self.socks.append(s)
            self._go(self._serve, s)

    @staticmethod
    def _recv(s, n):
        b = bytearray()
        while len(b) < n:
            r = s.recv(n - len(b))
            if not r:
                raise EOFError
            b += r
        return bytes(b)

    def _serve(self, s):
        try:
            while not self.stop.is_set():
                _, _, op, _, rid, n, _ = struct.unpack("<4sBBHQII", self._recv(s, 24))
                body = self._recv(s, n)
                if op == wire.Op.HELLO:
                    s.sendall(frame(op, rid, self.hello))
                    continue
                with self.mu:
                    self.ops.append(op)
                self.answer(self, s, op, rid, body)
        except (EOFError, OSError):
            pass

    def hold(self, s):
        """Stay silent on s until the client closes it or the test ends."""
        try:
            while not self.stop.is_set() and s.recv(1 << 16):
                pass
        except OSError:
            pass

    def close(self):
        self.stop.set()
        for s in [self.ls] + self.socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        for t in self.threads:
            t.join(PROBE_LIVENESS)
            assert not t.is_alive(), "a fake-server thread did not end"


class Untrusted(unittest.TestCase):
    def setUp(self):
        if not os.path.exists("/proc/self/status"):
            self.skipTest("needs /proc/self/status to measure memory: run on Linux with /proc mounted")
        self.servers = []

    def tearDown(self):
        for s in self.servers:
            s.close()

    def serve(self, answer, **kw):
        srv = LyingServer(answer, **kw)
        self.servers.append(srv)
        return srv

    def probe(self, spec):
        """Run the calls of spec in a fresh process; check the time and
        memory bounds of every call; return the probe's report."""
        out = subprocess.run([sys.executable, PROBE, json.dumps(spec)], capture_output=True, text=True,
                             timeout=PROBE_LIVENESS)
        self.assertEqual(out.returncode, 0, out.stderr)
        rep = json.loads(out.stdout)
        over = ["%s took %.2f s with a %.2f s deadline" % (call, took, spec["timeout"])
                for call, took in zip(spec["calls"], rep["elapsed"]) if took >= spec["timeout"] + MARGIN]
        grew = rep["hwm_end_kib"] - rep["rss_start_kib"]
        if grew >= RSS_BOUND_KIB:
            over.append("the calls raised peak RSS by %d KiB" % grew)
        self.assertEqual(over, [])
        return rep

    def assert_clean(self, rep, wrote_at_least=0, which=None):
        """Each get_into buffer (or those in which) holds zeros where a
        failed read wrote, at least wrote_at_least of them, and its original
        bytes after them: no byte the server sent is left."""
        for i, r in enumerate(rep["bufs"]):
            if which is not None and i not in which:
                continue
            zeroed = r[0][1] if r[0][0] == 0 else 0
            self.assertTrue(all(b == FILL for b, _ in r[1 if zeroed else 0:]),
                            "buffer %d holds bytes of a failed answer: runs %s" % (i, r))
            self.assertGreaterEqual(zeroed, wrote_at_least, "buffer %d: runs %s" % (i, r))

    def test_hello_max_frame_is_clamped_to_the_client_default(self):
        # HELLO announces 4 GiB frames; a GET answer announces 1 GiB (legal by
        # the server's word, over the client's default 65 MiB).
        def answer(srv, s, op, rid, body):
            head, blen = get_head([(wire.Status.HIT, GIB - 13)], GIB - 13)
            s.sendall(frame(op, rid, head, body_len=blen))
            srv.hold(s)
        srv = self.serve(answer, max_frame=0xFFFFFFFF, max_payload=0xFFFFFFFF)
        rep = self.probe({"addrs": [srv.addr], "timeout": 1.0, "calls": ["get", "get_into"]})
        self.assertEqual(rep["results"], [[False], [[False, "too_large"]]])
        self.assert_clean(rep)
        self.assertEqual(srv.accepted, 2, "a connection with an unread answer was reused")

    def test_hello_max_frame_is_clamped_to_the_configured_limit(self):
        # Client max_frame 1 MiB against a server announcing 4 GiB frames and
        # payloads: a 2 MiB PUT is TOO_LARGE without being sent, a 2 MiB
        # answer and a 256 MiB answer are refused unread.
        sizes = [2 << 20, 256 << 20]

        def answer(srv, s, op, rid, body):
            n = sizes.pop(0)
            head, blen = get_head([(wire.Status.HIT, n)], n)
            s.sendall(frame(op, rid, head + bytes([SERVED]) * 4096, body_len=blen))
            srv.hold(s)
        srv = self.serve(answer, max_frame=0xFFFFFFFF, max_payload=0xFFFFFFFF)
        rep = self.probe({"addrs": [srv.addr], "timeout": 1.0, "max_frame": 1 << 20, "put_size": 2 << 20,
                          "calls": ["put", "get", "get"]})
        self.assertEqual(rep["results"], [[int(wire.Status.TOO_LARGE)], [False], [False]])
        self.assertEqual(srv.ops, [wire.Op.GET, wire.Op.GET])
        self.assertEqual(srv.accepted, 2)

    def test_3gib_hit(self):
        # HELLO announces 4 GiB frames, then a GET answer's header a 3 GiB hit;
        # the server sends its first MiB and then nothing. get() must not
        # allocate it, get_into must not read it.
        def answer(srv, s, op, rid, body):
            n = 3 * GIB
            head, blen = get_head([(wire.Status.HIT, n)], n)
            try:
                s.sendall(frame(op, rid, head, body_len=blen) + bytes([SERVED]) * (1 << 20))
            except OSError:  # the client closed it unread
                return
            srv.hold(s)
        srv = self.serve(answer, max_frame=0xFFFFFFFF, max_payload=0xFFFFFFFF)
        rep = self.probe({"addrs": [srv.addr], "timeout": 1.0, "buf": 1 << 20, "calls": ["get", "get_into"]})
        self.assertEqual(rep["results"], [[False], [[False, "too_large"]]])
        self.assert_clean(rep)
        self.assertEqual(srv.accepted, 2)

    def test_2gib_stat_body(self):
        # HELLO announces 4 GiB frames, then a STAT answer 2 GiB of counters.
        def answer(srv, s, op, rid, body):
            try:
                s.sendall(frame(op, rid, struct.pack("<I", 1) + b"\xff" * 4096, body_len=2 * GIB))
            except OSError:
                return
            srv.hold(s)
        srv = self.serve(answer, max_frame=0xFFFFFFFF)
        rep = self.probe({"addrs": [srv.addr], "timeout": 1.0, "calls": ["stat", "stat"]})
        self.assertEqual(rep["results"], ["too_large", "too_large"])
        self.assertEqual(srv.accepted, 2)

    def test_hit_dripping_one_byte_a_second(self):
        # 100 payload bytes at once, then one byte a second: the call ends at
        # its 1 s deadline as a timeout miss, and the 100 bytes (and any drip
        # it read) are zeroed in the caller's buffer.
        def answer(srv, s, op, rid, body):
            head, blen = get_head([(wire.Status.HIT, 4096)], 4096)
            try:
                s.sendall(frame(op, rid, head, body_len=blen) + bytes([SERVED]) * 100)
                while not srv.stop.wait(1.0):
                    s.sendall(bytes([SERVED]))
            except OSError:  # the client gave up and closed
                pass
        srv = self.serve(answer)
        rep = self.probe({"addrs": [srv.addr], "timeout": 1.0, "buf": 4096, "calls": ["get_into"]})
        self.assertEqual(rep["results"], [[[False, "timeout"]]])
        self.assert_clean(rep, wrote_at_least=100)

    def test_hit_longer_than_its_buffer(self):
        # Key 0's hit is 4096 bytes for a 64-byte buffer, key 1's 64 bytes for
        # a 4096-byte one: within what the call accepts (two keys of at most
        # 4096 bytes), so key 0's payload is read through scratch and dropped,
        # key 1 hits, and the connection, still in step, is reused.
        def answer(srv, s, op, rid, body):
            head, _ = get_head([(wire.Status.HIT, 4096), (wire.Status.HIT, 64)], 4160)
            s.sendall(frame(op, rid, head + bytes([SERVED]) * 4160))
        srv = self.serve(answer)
        rep = self.probe({"addrs": [srv.addr], "timeout": 1.0, "nkeys": 2, "buf": [64, 4096],
                          "calls": ["get_into", "get_into"]})
        self.assertEqual(rep["results"], [[[False, "over_budget"], [True, ""]]] * 2)
        self.assertEqual(rep["bufs"], [[[FILL, 64]], [[SERVED, 64], [FILL, 4032]]])
        self.assertEqual(srv.accepted, 1)

    def test_wrong_request_id(self):
        def answer(srv, s, op, rid, body):
            head, blen = get_head([(wire.Status.HIT, 64)], 64)
            s.sendall(frame(op, rid + 1, head + bytes([SERVED]) * 64))
        srv = self.serve(answer)
        rep = self.probe({"addrs": [srv.addr], "timeout": 1.0, "buf": 64, "calls": ["get_into", "get"]})
        self.assertEqual(rep["results"], [[[False, "malformed"]], [False]])
        self.assert_clean(rep)
        self.assertEqual(srv.accepted, 2)

    def test_truncated_frame(self):
        # A header cut short, then a payload cut short, each then closed.
        def answer(srv, s, op, rid, body):
            head, blen = get_head([(wire.Status.HIT, 4096)], 4096)
            whole = frame(op, rid, head, body_len=blen) + bytes([SERVED]) * 4096
            cut = 10 if len(srv.ops) == 1 else len(whole) - 4096 + 100
            s.sendall(whole[:cut])
            s.shutdown(socket.SHUT_RDWR)
        srv = self.serve(answer)
        rep = self.probe({"addrs": [srv.addr], "timeout": 1.0, "buf": 4096, "calls": ["get_into", "get_into"]})
        self.assertEqual(rep["results"], [[[False, "dropped"]], [[False, "dropped"]]])
        self.assert_clean(rep, wrote_at_least=100)

    def test_drop_after_a_whole_payload(self):
        # Key 0's 64 bytes arrive in full, key 1's stop after 10 of 64: key 0
        # stays a hit with its bytes, key 1 misses with its 10 bytes zeroed.
        def answer(srv, s, op, rid, body):
            head, blen = get_head([(wire.Status.HIT, 64), (wire.Status.HIT, 64)], 128)
            s.sendall(frame(op, rid, head, body_len=blen) + bytes([SERVED]) * 74)
            s.shutdown(socket.SHUT_RDWR)
        srv = self.serve(answer)
        rep = self.probe({"addrs": [srv.addr], "timeout": 1.0, "nkeys": 2, "buf": 64, "calls": ["get_into"]})
        self.assertEqual(rep["results"], [[[True, ""], [False, "dropped"]]])
        self.assertEqual(rep["bufs"][0], [[SERVED, 64]])
        self.assert_clean(rep, wrote_at_least=10, which=[1])

    def test_deadline_covers_every_node(self):
        # Eight members, each silent on GET: the call's one deadline ends it,
        # not one deadline per node (which would take 8 s).
        nodes = []

        def answer(srv, s, op, rid, body):
            if op == wire.Op.MEMBERS:
                b = struct.pack("<QI", 7, len(nodes))
                for i, n in sorted(enumerate(nodes), key=lambda x: "m%d" % x[0]):
                    for f in ("m%d" % i, n.addr, "z%d" % i):
                        b += struct.pack("<H", len(f)) + f.encode()
                    b += struct.pack("<BQB", 3, 1 << 30, 0)
                s.sendall(frame(op, rid, b))
                return
            srv.hold(s)
        for _ in range(8):
            nodes.append(self.serve(answer))
        keys = chain(NS, list(range(4 * 64)))
        view = placement.View(7, [placement.Member("m%d" % i, n.addr, "z%d" % i, 3, 1 << 30)
                                  for i, n in enumerate(nodes)])
        owners = {view.owner(k).id for k in keys}
        self.assertEqual(len(owners), 8, "the keys do not reach every node")
        rep = self.probe({"addrs": [nodes[0].addr], "timeout": 1.0, "cluster": True, "nkeys": 64, "buf": 64,
                          "calls": ["get_into"]})
        self.assertEqual({(hit, r) for hit, r in rep["results"][0]}, {(False, "timeout")})
        self.assert_clean(rep)


if __name__ == "__main__":
    unittest.main()
