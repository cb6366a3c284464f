"""A fake gpucached on a Unix socket that speaks the region operations
(protocol version 5): it takes descriptors with SCM_RIGHTS, maps them, and
answers GET_INTO / PUT_FROM / PUT_OPAQUE_FROM by copying between its own
dictionary of blocks and the client's memory, so the client's region logic is tested
apart from the real daemon (which python/tests/test_core_regions_daemon.py
drives). It checks what it is sent as the spec says (offsets inside the
region, slots that do not overlap) and records every opcode it serves.

    srv = FakeRegionServer(version=5)
    c = Client([srv.addr], tenant="acme")
    srv.ops            # Counter of opcodes served
    srv.fault_next     # set: the next GET_INTO / PUT_FROM / PUT_OPAQUE_FROM entry answers FAULT
    srv.refuse_register = "why"   # REGISTER answers REGION
    srv.drop_all()     # close every connection (the client re-dials)
    srv.forget_regions()  # unmap every region, the client not told (the next use answers REGION)
"""

import array
import collections
import mmap
import os
import socket
import struct
import tempfile
import threading

from gpucache import wire

_HDR = struct.Struct("<4sBBHQII")


def frame(op, rid, body, flags=wire.FLAG_RESPONSE):
    return _HDR.pack(b"GPUC", 1, op, flags, rid, len(body), 0) + body


def error(op, rid, code, msg=b""):
    return frame(op, rid, struct.pack("<HH", code, len(msg)) + msg, wire.FLAG_RESPONSE | wire.FLAG_ERROR)


class _Conn:
    def __init__(self, sock):
        self.sock = sock
        self.buf = bytearray()
        self.fds = collections.deque()
        self.regions = {}  # id -> (mmap, length)
        self.version = 1

    def recv(self, n):
        while len(self.buf) < n:
            data, anc, _, _ = self.sock.recvmsg(1 << 16, socket.CMSG_SPACE(16 * 4))
            for level, kind, payload in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    a = array.array("i")
                    a.frombytes(payload[:len(payload) - len(payload) % 4])
                    self.fds.extend(a)
            if not data:
                raise EOFError
            self.buf += data
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def close(self):
        for m, _ in self.regions.values():
            m.close()
        self.regions.clear()
        while self.fds:
            os.close(self.fds.popleft())
        try:
            self.sock.close()
        except OSError:
            pass


class FakeRegionServer:
    def __init__(self, version=5, max_payload=4 << 20):
        self.version = version
        self.max_payload = max_payload
        self.dir = tempfile.mkdtemp(prefix="gpucache-fake-")
        self.path = os.path.join(self.dir, "fake.sock")
        self.addr = "unix:" + self.path
        self.ls = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.ls.bind(self.path)
        self.ls.listen(16)
        self.mu = threading.Lock()
        self.blocks = {}  # key -> bytes
        self.ops = collections.Counter()
        self.fault_next = False
        self.refuse_register = None
        self.registered = []  # (region id, length, mode) per REGISTER accepted
        self.conns = []
        self.t = threading.Thread(target=self._accept, daemon=True)
        self.t.start()

    def _accept(self):
        while True:
            try:
                s, _ = self.ls.accept()
            except OSError:
                return
            c = _Conn(s)
            with self.mu:
                self.conns.append(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def drop_all(self):
        with self.mu:
            conns, self.conns = self.conns, []
        for c in conns:
            try:
                c.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def forget_regions(self):
        with self.mu:
            conns = list(self.conns)
        for c in conns:
            regions, c.regions = c.regions, {}
            for m, _ in regions.values():
                m.close()

    def close(self):
        self.ls.close()
        self.drop_all()
        try:
            os.unlink(self.path)
            os.rmdir(self.dir)
        except OSError:
            pass

    def _serve(self, c):
        try:
            while True:
                magic, ver, op, flags, rid, n, _ = _HDR.unpack(c.recv(24))
                body = c.recv(n)
                if flags & wire.FLAG_STAMPED:
                    body = body[wire.STAMP_SIZE:]
                with self.mu:
                    self.ops[wire.Op(op).name] += 1
                c.sock.sendall(self._answer(c, op, rid, body))
        except (EOFError, OSError):
            pass
        finally:
            c.close()

    def _answer(self, c, op, rid, body):
        r = wire.Reader(body)
        if op == wire.Op.HELLO:
            c.version = min(body[1], self.version)
            return frame(op, rid, struct.pack("<B", c.version) + struct.pack("<H", 4) + b"fake"
                         + struct.pack("<IIII", wire.DEFAULT_MAX_FRAME, 1024, 64, self.max_payload))
        if op >= wire.Op.REGISTER and c.version < 5:
            return error(op, rid, wire.Code.UNKNOWN_OPCODE, b"before version 5")
        if op == wire.Op.REGISTER:
            region, length = r.u32(), r.u64()
            if not c.fds:
                return error(op, rid, wire.Code.REGION, b"no descriptor")
            fd = c.fds.popleft()
            try:
                if self.refuse_register:
                    return error(op, rid, wire.Code.REGION, self.refuse_register.encode())
                if region in c.regions or os.fstat(fd).st_size < length:
                    return error(op, rid, wire.Code.REGION, b"bad region")
                m = mmap.mmap(fd, length, flags=mmap.MAP_SHARED)
            finally:
                os.close(fd)
            c.regions[region] = (m, length)
            with self.mu:
                self.registered.append((region, length))
            return frame(op, rid, b"\x00")
        if op == wire.Op.UNREGISTER:
            region = r.u32()
            got = c.regions.pop(region, None)
            if got is None:
                return error(op, rid, wire.Code.REGION, b"unknown region")
            got[0].close()
            return frame(op, rid, b"")
        if op == wire.Op.GET_INTO:
            r.take(r.u32())
            r.u64()
            region = r.u32()
            n = r.u32()
            entries = [(bytes(r.take(32)), r.u64(), r.u32()) for _ in range(n)]
            if region not in c.regions:
                return error(op, rid, wire.Code.REGION, b"unknown region")
            m, length = c.regions[region]
            spans = sorted((off, cap) for _, off, cap in entries)
            if any(off + cap > length for off, cap in spans) or any(
                    a + x > b for (a, x), (b, _) in zip(spans, spans[1:])):
                return error(op, rid, wire.Code.MALFORMED, b"slot out of range or overlapping")
            out, faulted = [], False
            for key, off, cap in entries:
                if faulted or self._take_fault():
                    faulted = True
                    out.append(struct.pack("<BI", wire.Status.FAULT, 0))
                    continue
                data = self.blocks.get(key)
                if data is None:
                    out.append(struct.pack("<BI", wire.Status.MISS, 0))
                elif len(data) > cap:
                    out.append(struct.pack("<BI", wire.Status.TOO_LARGE, len(data)))
                else:
                    m[off:off + len(data)] = data
                    out.append(struct.pack("<BI", wire.Status.HIT, len(data)))
            if faulted:
                c.regions.pop(region)[0].close()
            return frame(op, rid, struct.pack("<I", n) + b"".join(out))
        if op in (wire.Op.PUT_FROM, wire.Op.PUT_OPAQUE_FROM):
            region = r.u32()
            n = r.u32()
            offsets = [r.u64() for _ in range(n)]
            entries = self._put_table(r) if op == wire.Op.PUT_FROM else self._opaque_table(r)
            r.done()
            if region not in c.regions:
                return error(op, rid, wire.Code.REGION, b"unknown region")
            m, length = c.regions[region]
            if any(o + ln > length for o, (_, ln) in zip(offsets, entries)):
                return error(op, rid, wire.Code.MALFORMED, b"entry out of range")
            st, faulted = [], False
            for o, (key, ln) in zip(offsets, entries):
                if faulted or self._take_fault():
                    faulted = True
                    st.append(wire.Status.FAULT)
                    continue
                st.append(self._store(key, bytes(m[o:o + ln])))
            if faulted:
                c.regions.pop(region)[0].close()
            return frame(op, rid, struct.pack("<I", n) + bytes(st))
        if op == wire.Op.GET:
            r.take(r.u32())
            r.u64()
            n = r.u32()
            keys = [bytes(r.take(32)) for _ in range(n)]
            table, payloads = [], []
            for k in keys:
                d = self.blocks.get(k)
                table.append(struct.pack("<BI", *((wire.Status.HIT, len(d)) if d is not None else (wire.Status.MISS, 0))))
                if d is not None:
                    payloads.append(d)
            t = struct.pack("<I", n) + b"".join(table)
            return frame(op, rid, struct.pack("<I", len(t)) + t + b"".join(payloads))
        if op in (wire.Op.PUT, wire.Op.PUT_OPAQUE):
            tr = wire.Reader(r.take(r.u32()))
            entries = self._put_table(tr) if op == wire.Op.PUT else self._opaque_table(tr)
            st = []
            for key, ln in entries:
                st.append(self._store(key, bytes(r.take(ln))))
            return frame(op, rid, struct.pack("<I", len(st)) + bytes(st))
        return error(op, rid, wire.Code.UNKNOWN_OPCODE, b"not in the fake")

    def _take_fault(self):
        with self.mu:
            f, self.fault_next = self.fault_next, False
        return f

    def _store(self, key, data):
        with self.mu:
            if key in self.blocks:
                return wire.Status.EXISTS
            self.blocks[key] = data
            return wire.Status.STORED

    @staticmethod
    def _put_table(r):
        r.take(r.u32())
        n = r.u32()
        out = []
        for _ in range(n):
            key = bytes(r.take(32))
            r.take(32)
            r.u32()
            ln = r.u32()
            r.u64()
            r.take(4 * r.u32())
            out.append((key, ln))
        return out

    @staticmethod
    def _opaque_table(r):
        r.take(r.u32())
        n = r.u32()
        out = []
        for _ in range(n):
            key = bytes(r.take(32))
            r.take(r.u16())
            out.append((key, r.u32()))
        return out
