"""Registered regions without the daemon: the version-5 codec against the
Go package's own seed frames, gpucache.shm's memory and registration, and
the client's region path against a fake Unix-socket server (registration
per connection, again after a reconnect, UNREGISTER, PUT_FROM and
PUT_OPAQUE_FROM, and the fallbacks to the socket path: TCP, version 4, a
refused REGISTER, FAULT, REGION)."""

import ast
import fcntl
import logging
import mmap
import os
import re
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gpucache import Client, Layout, MalformedError, Namespace, Status, identities, opaque_key, shm, wire  # noqa: E402
from regionfake import FakeRegionServer  # noqa: E402

try:
    import numpy
except ImportError:  # optional
    numpy = None
try:
    import torch
except ImportError:  # optional
    torch = None

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SEEDS = os.path.join(ROOT, "api", "wire", "testdata", "fuzz")
NS = Namespace("acme", "test", "m", "1", "1", layout=Layout("flat", block_tokens=4))


def seed(target, name):
    """The bytes of one Go fuzz seed file ('go test fuzz v1' / []byte("..."))."""
    with open(os.path.join(SEEDS, target, name)) as f:
        lines = f.read().splitlines()
    assert lines[0] == "go test fuzz v1", lines[0]
    m = re.fullmatch(r'\[\]byte\((".*")\)', lines[1])
    # Go's escapes here are a subset of Python's (\xNN, \a, \b, \t, \n, \v, \f, \r, \", \\).
    return ast.literal_eval("b" + m.group(1))


def payload(i, n):
    return bytes((i * 31 + j) & 0xFF for j in range(251)) * (n // 251) + bytes(n % 251)


class WireGolden(unittest.TestCase):
    """Python's encoders produce the bytes of the Go package's valid seeds;
    its decoders read the valid ones and refuse the malformed ones."""

    def test_get_into_request(self):
        keys = [bytes(range(32))] * 2
        got = wire.get_into_request(b"GCNS-not-a-real-namespace", 9, 1, keys, [(0, 100), (100, 100)])
        self.assertEqual(got, seed("FuzzGetIntoRequest", "valid-two"))

    def test_put_from_request(self):
        blk = wire.PutBlock(bytes(range(32)), bytes(32), 2, 10, 0, (1, 2))
        got = wire.put_from_request(2, [0], b"GCNS-not-a-real-namespace", [blk])
        self.assertEqual(got, seed("FuzzPutFromRequest", "valid-one"))

    def test_put_opaque_from_request(self):
        entries = [(bytes(range(32)), b"a@1@0", 10), (bytes(range(32)), b"b", 0)]
        got = wire.put_opaque_from_request(2, [0, 64], b"GCNS-not-a-real-namespace", entries)
        self.assertEqual(got, seed("FuzzPutOpaqueFromRequest", "valid-two"))
        with self.assertRaises(ValueError):  # an offset per entry
            wire.put_opaque_from_request(2, [0], b"GCNS-not-a-real-namespace", entries)
        with self.assertRaises(ValueError):  # region 0 is never registered
            wire.put_opaque_from_request(0, [0, 64], b"GCNS-not-a-real-namespace", entries)

    def test_register_and_unregister(self):
        self.assertEqual(wire.register_request(1, 1 << 20), seed("FuzzRegionControl", "valid-register"))
        self.assertEqual(wire.unregister_request(3), seed("FuzzRegionControl", "valid-unregister"))
        self.assertEqual(wire.decode_register_response(seed("FuzzRegionControl", "valid-register-response")),
                         wire.RegionMode.GUARDED)
        self.assertEqual(wire.decode_register_response(b"\x00"), wire.RegionMode.SEALED)
        for bad in (seed("FuzzRegionControl", "malformed-mode-9"), b"", b"\x00\x00"):
            with self.assertRaises(MalformedError):
                wire.decode_register_response(bad)
        for bad in ((0, 1), (1, 0), (1 << 32, 1), (1, 1 << 63)):
            with self.assertRaises(ValueError):
                wire.register_request(*bad)

    def test_get_into_response(self):
        self.assertEqual(wire.decode_get_into_response(seed("FuzzGetIntoResponse", "valid-three"), 3),
                         [(Status.HIT, 5), (Status.FAULT, 0), (Status.TOO_LARGE, 9)])
        for name in os.listdir(os.path.join(SEEDS, "FuzzGetIntoResponse")):
            if name.startswith("malformed"):
                b = seed("FuzzGetIntoResponse", name)
                n = int.from_bytes(b[:4], "little") if len(b) >= 4 else 0
                with self.subTest(name), self.assertRaises(MalformedError):
                    wire.decode_get_into_response(b, n)
        with self.assertRaises(MalformedError):  # a count other than the keys'
            wire.decode_get_into_response(seed("FuzzGetIntoResponse", "valid-three"), 2)

    def test_statuses_by_version(self):
        body = b"\x02\x00\x00\x00\x02\x0d"
        self.assertEqual(wire.decode_status_response(body, 2, version=5), [Status.STORED, Status.FAULT])
        with self.assertRaises(MalformedError):
            wire.decode_status_response(body, 2, version=4)
        ro = b"\x01\x00\x00\x00\x0c"
        self.assertEqual(wire.decode_status_response(ro, 1, version=4), [Status.READ_ONLY])
        with self.assertRaises(MalformedError):
            wire.decode_status_response(ro, 1, version=3)
        with self.assertRaises(MalformedError):
            wire.decode_status_response(b"\x01\x00\x00\x00\x0e", 1)

    def test_opcodes(self):
        self.assertEqual(wire.VERSION_MAX, 5)
        self.assertEqual([int(o) for o in (wire.Op.REGISTER, wire.Op.UNREGISTER, wire.Op.GET_INTO, wire.Op.PUT_FROM,
                                           wire.Op.PUT_OPAQUE_FROM)],
                         [14, 15, 16, 17, 18])
        self.assertTrue(all(o.since == 5 for o in (wire.Op.REGISTER, wire.Op.GET_INTO, wire.Op.PUT_FROM,
                                                   wire.Op.PUT_OPAQUE_FROM)))
        self.assertTrue(wire.Op.PUT_FROM.mutating and wire.Op.PUT_OPAQUE_FROM.mutating)
        self.assertFalse(wire.Op.GET_INTO.mutating or wire.Op.REGISTER.mutating)
        self.assertEqual(int(wire.Code.REGION), 20)
        self.assertEqual(int(Status.FAULT), 13)


class SharedMemory(unittest.TestCase):
    def test_allocate(self):
        buf = shm.allocate(1 << 20)
        try:
            self.assertEqual(len(buf), 1 << 20)
            seals = fcntl.fcntl(buf.fd, shm.F_GET_SEALS)
            self.assertEqual(seals & (shm.F_SEAL_SHRINK | shm.F_SEAL_GROW), shm.F_SEAL_SHRINK | shm.F_SEAL_GROW)
            with self.assertRaises(OSError):
                os.ftruncate(buf.fd, 4096)
            mv = memoryview(buf)
            mv[10:13] = b"abc"
            self.assertEqual(bytes(buf[10:13]), b"abc")
            self.assertTrue(os.readlink("/proc/self/fd/%d" % buf.fd).startswith("/memfd:"))
            mv.release()
            if numpy is not None:
                a = buf.numpy("uint16", (512, 1024))
                self.assertEqual(a.shape, (512, 1024))
                self.assertEqual(a.__array_interface__["data"][0], shm.address_of(buf))
                del a
            if torch is not None:
                t = buf.tensor(torch.bfloat16)
                self.assertEqual(t.numel(), 1 << 19)
                self.assertEqual(t.data_ptr(), shm.address_of(buf))
                del t
        finally:
            buf.close()
        self.assertTrue(buf.closed)
        with self.assertRaises(ValueError):
            shm.allocate(0)

    def vllm_like_file(self, rows, row_bytes, unlink=True):
        """A /dev/shm file mapped MAP_SHARED as vLLM's CPU offload tier maps
        its own (SharedOffloadRegion), unlinked after mapping when unlink."""
        path = "/dev/shm/vllm_offload_gpucache-test-%d-%d.mmap" % (os.getpid(), threading.get_ident())
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        os.ftruncate(fd, rows * row_bytes)
        m = mmap.mmap(fd, rows * row_bytes, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        if unlink:
            os.unlink(path)
        else:
            self.addCleanup(os.unlink, path)
        self.addCleanup(m.close)
        self.addCleanup(os.close, fd)
        return path, fd, m

    def test_register_by_buffer_of_an_unlinked_file(self):
        _, fd, m = self.vllm_like_file(4, 8192)
        c = Client(["unix:/nonexistent.sock"], tenant="acme")
        try:
            view = memoryview(m)[8192:]  # rows 1..3
            r = c.register(buffer=view)
            self.assertEqual((r.file_offset, r.span, r.length), (8192, 3 * 8192, 4 * 8192))
            self.assertEqual(os.fstat(r.fd).st_ino, os.fstat(fd).st_ino)
            base = shm.address_of(m)
            self.assertEqual(c._regions.locate(base + 2 * 8192, 8192), (r, 2 * 8192))
            self.assertIsNone(c._regions.locate(base, 8192))  # row 0 is not in the registered span
            with self.assertRaises(shm.RegionError):  # the same memory twice
                c.register(buffer=view)
            view.release()
            r.close()
            self.assertEqual(len(c.regions()), 0)
            self.assertEqual(r.fd, -1)
        finally:
            c.close()

    def test_register_by_path_and_fd(self):
        path, fd, m = self.vllm_like_file(2, 4096, unlink=False)
        c = Client(["unix:/nonexistent.sock"], tenant="acme")
        try:
            r1 = c.register(path)  # the client maps it itself
            m[:5] = b"hello"
            self.assertEqual(bytes(r1.buffer[:5]), b"hello")
            r2 = c.register(fd, buffer=memoryview(m))  # a descriptor and the caller's mapping of it
            self.assertEqual(r2.start, shm.address_of(m))
            other = shm.allocate(4096)
            with self.assertRaises(shm.RegionError):  # a descriptor the buffer does not map
                c.register(other.fd, buffer=memoryview(m))
            other.close()
            with self.assertRaises(shm.RegionError):  # private memory has no file
                c.register(buffer=bytearray(4096))
        finally:
            c.close()
        self.assertEqual(len(c.regions()), 0)

    def test_client_allocate(self):
        c = Client(["unix:/nonexistent.sock"], tenant="acme")
        buf = c.allocate(64 << 10)
        try:
            self.assertIs(c.regions()[0], buf.region)
            self.assertEqual(c._regions.locate(shm.address_of(buf) + 4096, 4096), (buf.region, 4096))
        finally:
            buf.close()
            c.close()
        self.assertEqual(len(c.regions()), 0)


class ClientRegions(unittest.TestCase):
    """The client against the fake server: which opcodes carry the bytes."""

    def start(self, version=5, pool_size=2):
        srv = FakeRegionServer(version=version)
        self.addCleanup(srv.close)
        c = Client([srv.addr], tenant="acme", timeout=5.0, pool_size=pool_size)
        self.addCleanup(c.close)
        return srv, c

    def store(self, c, sizes, base=0):
        ids = identities(NS, list(range(4 * len(sizes))))
        data = [payload(base + i, n) for i, n in enumerate(sizes)]
        return ids, data

    def test_get_into_and_put_from_through_a_region(self):
        srv, c = self.start()
        sizes = [4096, 100, 65536, 1]
        ids, data = self.store(c, sizes)
        buf = c.allocate(sum(sizes) + 4096)
        mv = memoryview(buf)
        offs = [0]
        for n in sizes:
            offs.append(offs[-1] + n)
        for i, d in enumerate(data):
            mv[offs[i]:offs[i] + len(d)] = d
        self.assertEqual(c.put(NS, [(ids[i], mv[offs[i]:offs[i + 1]]) for i in range(len(ids))]),
                         [Status.STORED] * len(ids))
        self.assertEqual(srv.ops["PUT_FROM"], 1)
        self.assertEqual(srv.ops["PUT"], 0)
        mv[:offs[-1]] = bytes(offs[-1])
        keys = [i.key() for i in ids]
        res = c.get_into(NS, keys, [mv[offs[i]:offs[i + 1]] for i in range(len(ids))])
        self.assertEqual([(r.hit, r.length) for r in res], [(True, n) for n in sizes])
        self.assertEqual([bytes(mv[offs[i]:offs[i + 1]]) for i in range(len(ids))], data)
        self.assertEqual((srv.ops["GET_INTO"], srv.ops["GET"], srv.ops["REGISTER"]), (1, 0, 1))
        self.assertEqual(c.region_stats()["get_into"], len(ids))
        self.assertEqual(c.region_stats()["put_from"], len(ids))
        # A buffer outside every region goes through the socket in the same call.
        plain = bytearray(4096)
        res = c.get_into(NS, [keys[0], keys[1]], [plain, mv[offs[1]:offs[2]]])
        self.assertEqual([r.hit for r in res], [True, True])
        self.assertEqual(bytes(plain), data[0])
        self.assertEqual((srv.ops["GET_INTO"], srv.ops["GET"]), (2, 1))
        # Misses and a block larger than its slot.
        small = [mv[0:10]]
        res = c.get_into(NS, [keys[2]], small)
        self.assertEqual((res[0].hit, res[0].length, res[0].reason), (False, 65536, "over_budget"))
        other = identities(NS, list(range(100, 104)))[0].key()
        self.assertEqual(c.get_into(NS, [other], [mv[0:4096]])[0].reason, "miss")
        del small
        mv.release()
        buf.close()

    def test_put_opaque_from_through_a_region(self):
        srv, c = self.start()
        sizes = [4096, 100, 65536, 1]
        names = [b"page-%d" % i for i in range(len(sizes))]
        data = [payload(i, n) for i, n in enumerate(sizes)]
        keys = [opaque_key(NS.digest(), nm) for nm in names]
        buf = c.allocate(sum(sizes) + 8192)
        mv = memoryview(buf)
        offs = [0]
        for n in sizes:
            offs.append(offs[-1] + n)
        for i, d in enumerate(data):
            mv[offs[i]:offs[i] + len(d)] = d
        self.assertEqual(c.put_opaque(NS, [(names[i], mv[offs[i]:offs[i + 1]]) for i in range(len(sizes))]),
                         [Status.STORED] * len(sizes))
        self.assertEqual((srv.ops["PUT_OPAQUE_FROM"], srv.ops["PUT_OPAQUE"], srv.ops["REGISTER"]), (1, 0, 1))
        self.assertEqual([srv.blocks[k] for k in keys], data)
        self.assertEqual(c.region_stats()["put_opaque_from"], len(sizes))
        self.assertNotIn("put_from", c.region_stats())
        # Read back through the same region.
        mv[:offs[-1]] = bytes(offs[-1])
        res = c.get_into(NS, keys, [mv[offs[i]:offs[i + 1]] for i in range(len(sizes))])
        self.assertEqual([(r.hit, r.length) for r in res], [(True, n) for n in sizes])
        self.assertEqual([bytes(mv[offs[i]:offs[i + 1]]) for i in range(len(sizes))], data)
        # Adjacent buffers of one payload go as one range; a buffer outside
        # every region goes through the socket in the same call; EXISTS
        # comes back through the region too.
        end = offs[-1]
        mv[end:end + 8192] = payload(9, 8192)
        got = c.put_opaque(NS, [(b"joined", [mv[end:end + 4096], mv[end + 4096:end + 8192]]),
                                (b"plain", bytearray(payload(8, 300))),
                                (names[0], mv[offs[0]:offs[1]])])
        self.assertEqual(got, [Status.STORED, Status.STORED, Status.EXISTS])
        self.assertEqual((srv.ops["PUT_OPAQUE_FROM"], srv.ops["PUT_OPAQUE"]), (2, 1))
        self.assertEqual(srv.blocks[opaque_key(NS.digest(), b"joined")], payload(9, 8192))
        self.assertEqual(srv.blocks[opaque_key(NS.digest(), b"plain")], payload(8, 300))
        self.assertEqual(c.region_stats()["put_opaque_from"], len(sizes) + 2)
        # Buffers of one payload that are not adjacent go through the socket.
        got = c.put_opaque(NS, [(b"gappy", [mv[0:10], mv[20:30]])])
        self.assertEqual(got, [Status.STORED])
        self.assertEqual((srv.ops["PUT_OPAQUE_FROM"], srv.ops["PUT_OPAQUE"]), (2, 2))
        mv.release()
        buf.close()

    def opaque_fallback(self, srv, c, cause, before=None):
        """put_opaque of three region pages twice: every page stored through
        the socket (PUT_OPAQUE), cause logged once."""
        names = [b"fb-%s-%d" % (cause.encode(), i) for i in range(6)]
        data = [payload(40 + i, 4096) for i in range(6)]
        buf = c.allocate(6 * 4096)
        mv = memoryview(buf)
        for i, d in enumerate(data):
            mv[i * 4096:(i + 1) * 4096] = d
        if before is not None:
            before(mv)
        with self.assertLogs("gpucache.client", "WARNING") as logs:
            for part in (range(3), range(3, 6)):  # logged once per cause, not per call
                self.assertEqual(c.put_opaque(NS, [(names[i], mv[i * 4096:(i + 1) * 4096]) for i in part]),
                                 [Status.STORED] * 3)
        self.assertEqual([srv.blocks[opaque_key(NS.digest(), nm)] for nm in names], data)
        self.assertEqual(len([l for l in logs.output if "(%s)" % cause in l]), 1, logs.output)
        self.assertGreaterEqual(srv.ops["PUT_OPAQUE"], 1)
        self.assertGreater(c.region_stats().get("fallback_" + cause, 0), 0)
        mv.release()
        buf.close()
        return logs.output

    def test_put_opaque_fallback_version_4(self):
        srv, c = self.start(version=4)
        self.opaque_fallback(srv, c, "version")
        self.assertEqual(srv.ops["REGISTER"] + srv.ops["PUT_OPAQUE_FROM"], 0)
        self.assertEqual(srv.ops["PUT_OPAQUE"], 2)

    def test_put_opaque_fallback_register_refused(self):
        srv, c = self.start()
        srv.refuse_register = "tenant_region_bytes would pass its bound"
        out = self.opaque_fallback(srv, c, "refused")
        self.assertIn("tenant_region_bytes", "".join(out))
        self.assertEqual(srv.ops["PUT_OPAQUE_FROM"], 0)

    def test_put_opaque_fallback_region_error(self):
        """The server no longer knows the region (REGION): the pages go
        through the socket and the connection stops naming the region."""
        srv, c = self.start(pool_size=1)

        def register_then_forget(mv):
            self.assertEqual(c.put_opaque(NS, [(b"first", mv[0:100])]), [Status.STORED])
            self.assertEqual(srv.ops["PUT_OPAQUE_FROM"], 1)
            srv.forget_regions()
        self.opaque_fallback(srv, c, "region", register_then_forget)
        self.assertEqual((srv.ops["PUT_OPAQUE_FROM"], srv.ops["PUT_OPAQUE"]), (2, 2))
        self.assertEqual(c.region_stats()["fallback_region"], 3 + 3)

    def test_put_opaque_fallback_fault(self):
        srv, c = self.start(pool_size=1)
        srv.fault_next = True
        self.opaque_fallback(srv, c, "fault")
        # The first call: PUT_OPAQUE_FROM answered FAULT for its first page
        # (so for all three), which went through the socket; the second
        # call does not name the dropped region again.
        self.assertEqual((srv.ops["PUT_OPAQUE_FROM"], srv.ops["PUT_OPAQUE"]), (1, 2))
        self.assertEqual(c.region_stats()["fallback_fault"], 6)
        self.assertEqual(c.region_stats().get("put_opaque_from", 0), 0)

    def test_tensor_slices(self):
        if torch is None:
            self.skipTest("torch is not installed: apt-get install python3-torch (scripts/test installs it)")
        srv, c = self.start()
        ids, data = self.store(c, [8192] * 3)
        self.assertEqual(c.put(NS, list(zip(ids, data))), [Status.STORED] * 3)
        buf = c.allocate(3 * 8192)
        t = buf.tensor(torch.bfloat16).view(3, 4096)
        res = c.get_into(NS, [i.key() for i in ids], [t[0], t[1], t[2]])
        self.assertTrue(all(r.hit for r in res))
        self.assertEqual(bytes(buf), b"".join(data))
        self.assertEqual(srv.ops["GET_INTO"], 1)
        del t

    def test_registered_on_each_connection_and_after_a_reconnect(self):
        srv, c = self.start(pool_size=2)
        ids, data = self.store(c, [4096] * 2)
        c.put(NS, list(zip(ids, data)))
        buf = c.allocate(8192)
        mv = memoryview(buf)
        keys = [i.key() for i in ids]
        blob = NS.canonical()
        # Two calls at once hold both pooled connections: each registers on its own.
        barrier = threading.Barrier(2)
        left = []

        def reader(j):
            def fn(conn):
                barrier.wait()  # both connections are taken
                return c._get_through_regions(conn, blob, keys, [mv[:4096], mv[4096:]], 0, [j], [None, None])
            left.append(c._with_conn(c._addrs[0], fn))
        ts = [threading.Thread(target=reader, args=(j,)) for j in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertEqual(left, [[], []])  # nothing left for the socket path
        self.assertEqual(c._pool(c._addrs[0]).stats()["open"], 2)
        self.assertEqual(srv.ops["REGISTER"], 2)
        # Later calls reuse registered connections.
        c.get_into(NS, keys, [mv[:4096], mv[4096:]])
        self.assertEqual(srv.ops["REGISTER"], 2)
        self.assertEqual(bytes(buf), b"".join(data))
        # The server drops every connection: the calls that take the dead
        # pooled ones miss, the next one re-dials and registers again.
        srv.drop_all()
        mv[:] = bytes(8192)
        for _ in range(3):
            res = c.get_into(NS, keys, [mv[:4096], mv[4096:]])
            if all(r.hit for r in res):
                break
        self.assertTrue(all(r.hit for r in res))
        self.assertEqual(bytes(buf), b"".join(data))
        self.assertEqual(srv.ops["REGISTER"], 3)
        mv.release()
        buf.close()

    def test_unregister(self):
        srv, c = self.start(pool_size=1)
        ids, data = self.store(c, [4096])
        c.put(NS, list(zip(ids, data)))
        buf = c.allocate(4096)
        c.get_into(NS, [ids[0].key()], [buf])
        self.assertEqual(srv.ops["REGISTER"], 1)
        r = buf.region
        buf.close()  # unregisters: UNREGISTER on the idle connection
        self.assertEqual(srv.ops["UNREGISTER"], 1)
        self.assertEqual(r.fd, -1)
        self.assertEqual(len(c.regions()), 0)
        b2 = c.allocate(4096)
        c.get_into(NS, [ids[0].key()], [b2])
        self.assertEqual(bytes(b2), data[0])
        self.assertEqual(srv.ops["REGISTER"], 2)
        b2.close()

    def fallback(self, srv, c, cause, get_op="GET", put_op="PUT"):
        ids, data = self.store(c, [4096] * 3)
        buf = c.allocate(3 * 4096)
        mv = memoryview(buf)
        for i, d in enumerate(data):
            mv[i * 4096:(i + 1) * 4096] = d
        with self.assertLogs("gpucache.client", "WARNING") as logs:
            self.assertEqual(c.put(NS, [(ids[i], mv[i * 4096:(i + 1) * 4096]) for i in range(3)]),
                             [Status.STORED] * 3)
            mv[:] = bytes(len(mv))
            for _ in range(2):  # logged once per cause, not per call
                res = c.get_into(NS, [i.key() for i in ids], [mv[i * 4096:(i + 1) * 4096] for i in range(3)])
                self.assertTrue(all(r.hit for r in res), res)
        self.assertEqual(bytes(mv), b"".join(data))
        self.assertEqual(len([l for l in logs.output if "(%s)" % cause in l]), 1, logs.output)
        self.assertGreaterEqual(srv.ops[get_op], 1)
        self.assertGreaterEqual(srv.ops[put_op], 1)
        self.assertGreater(c.region_stats().get("fallback_" + cause, 0), 0)
        mv.release()
        buf.close()
        return logs.output

    def test_fallback_version_4(self):
        srv, c = self.start(version=4)
        self.fallback(srv, c, "version")
        self.assertEqual(srv.ops["REGISTER"] + srv.ops["GET_INTO"] + srv.ops["PUT_FROM"], 0)

    def test_fallback_register_refused(self):
        srv, c = self.start()
        srv.refuse_register = "tenant_region_bytes would pass its bound"
        out = self.fallback(srv, c, "refused")
        self.assertIn("tenant_region_bytes", "".join(out))
        self.assertEqual(srv.ops["GET_INTO"] + srv.ops["PUT_FROM"], 0)

    def test_fallback_fault(self):
        srv, c = self.start(pool_size=1)
        ids, data = self.store(c, [4096] * 3)
        buf = c.allocate(3 * 4096)
        mv = memoryview(buf)
        for i, d in enumerate(data):
            mv[i * 4096:(i + 1) * 4096] = d
        srv.fault_next = True
        with self.assertLogs("gpucache.client", "WARNING") as logs:
            st = c.put(NS, [(ids[i], mv[i * 4096:(i + 1) * 4096]) for i in range(3)])
        self.assertEqual(st, [Status.STORED] * 3)
        self.assertEqual((srv.ops["PUT_FROM"], srv.ops["PUT"]), (1, 1))
        self.assertIn("(fault)", logs.output[0])
        # The server dropped the region on that connection: the client does
        # not name it there again.
        mv[:] = bytes(len(mv))
        with self.assertLogs("gpucache.client", "DEBUG") as logs:
            res = c.get_into(NS, [i.key() for i in ids], [mv[i * 4096:(i + 1) * 4096] for i in range(3)])
            logging.getLogger("gpucache.client").debug("end")
        self.assertEqual(len(logs.output), 1, logs.output)  # the fault was said once already
        self.assertTrue(all(r.hit for r in res))
        self.assertEqual(bytes(mv), b"".join(data))
        self.assertEqual((srv.ops["GET_INTO"], srv.ops["GET"]), (0, 1))
        self.assertEqual(c.region_stats()["fallback_fault"], 6)
        mv.release()
        buf.close()

    def test_fault_mid_get_into(self):
        srv, c = self.start(pool_size=1)
        ids, data = self.store(c, [4096] * 3)
        c.put(NS, list(zip(ids, data)))
        buf = c.allocate(3 * 4096)
        mv = memoryview(buf)
        srv.fault_next = True
        with self.assertLogs("gpucache.client", "WARNING"):
            res = c.get_into(NS, [i.key() for i in ids], [mv[i * 4096:(i + 1) * 4096] for i in range(3)])
        self.assertTrue(all(r.hit for r in res))
        self.assertEqual(bytes(mv), b"".join(data))
        self.assertEqual((srv.ops["GET_INTO"], srv.ops["GET"]), (1, 1))
        mv.release()
        buf.close()

    def test_tcp_falls_back(self):
        from test_core_faults import FakeServer, frame, get_body  # a TCP server
        payload0 = payload(0, 4096)

        def h(op, rid, body, s):
            return frame(op, rid, get_body([(0, 4096)], payload0))
        srv = FakeServer(h)
        self.addCleanup(srv.close)
        c = Client([srv.addr], tenant="acme", timeout=5.0)
        self.addCleanup(c.close)
        buf = c.allocate(4096)
        with self.assertLogs("gpucache.client", "WARNING") as logs:
            res = c.get_into(NS, [bytes(32)], [buf])
        self.assertTrue(res[0].hit)
        self.assertEqual(bytes(buf), payload0)
        self.assertIn("(tcp)", logs.output[0])
        self.assertEqual(c.check_region(buf.region)[0], False)
        buf.close()

    def test_overlapping_buffers_use_the_socket(self):
        srv, c = self.start()
        ids, data = self.store(c, [4096] * 2)
        c.put(NS, list(zip(ids, data)))
        buf = c.allocate(8192)
        mv = memoryview(buf)
        with self.assertLogs("gpucache.client", "WARNING") as logs:
            res = c.get_into(NS, [i.key() for i in ids], [mv[0:4096], mv[2048:6144]])
        self.assertTrue(all(r.hit for r in res))
        self.assertIn("(overlap)", logs.output[0])
        self.assertEqual(srv.ops["GET_INTO"], 0)
        mv.release()
        buf.close()

    def test_check_region(self):
        srv, c = self.start()
        buf = c.allocate(4096)
        self.assertEqual(c.check_region(buf.region), (True, "sealed"))
        srv.refuse_register = "no"
        b2 = c.allocate(4096)
        ok, why = c.check_region(b2.region)
        self.assertFalse(ok)
        self.assertIn("REGION", why)
        buf.close()
        b2.close()


if __name__ == "__main__":
    unittest.main()
