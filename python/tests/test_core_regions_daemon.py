"""Registered regions against a real gpucached over its Unix socket
(unix_listen): byte equality through GET_INTO, PUT_FROM and PUT_OPAQUE_FROM
at 4 KiB to 32 MiB, a /dev/shm file laid out and unlinked as vLLM's CPU offload tier
does (GUARDED), the file truncated under the server (FAULT, the daemon
stays up), the fallbacks to the socket path (TCP, a server pinned to
version 4, the per-tenant bound), and a client killed with SIGKILL while
its regions are registered: the daemon unmaps them and serves another
client. The server's own STAT counters (region_bytes_in/out,
regions_mapped) say which path carried the bytes."""

import mmap
import os
import random
import signal
import subprocess
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

from gpucache import Client, Layout, Namespace, Status, identities, opaque_key, shm, wire  # noqa: E402
from gpucached import Daemon  # noqa: E402

MiB = 1 << 20
SIZES = [4096, 65536, MiB, MiB + 3, 32 * MiB]


def ns_for(model):
    return Namespace("default", "test", model, "1", "1", layout=Layout("flat", block_tokens=4))


def blocks(model, n):
    return identities(ns_for(model), list(range(4 * n)))


def rand(seed, n):
    return random.Random(seed).randbytes(n)


def server_stat(c, *names):
    st = c.stat()
    return tuple(st.get(n, 0) for n in names)


class ThroughRegions(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = Daemon.start(unix=True, extra_args=["--hot-capacity", "512MiB"])
        cls.c = Client([cls.d.unix_addr], tenant="default", timeout=30.0)
        cls.tcp = Client([cls.d.addr], tenant="default", timeout=30.0)

    @classmethod
    def tearDownClass(cls):
        cls.c.close()
        cls.tcp.close()
        cls.d.stop()

    def test_put_from_and_get_into_bytes_equal(self):
        ns = ns_for("sizes")
        ids = blocks("sizes", len(SIZES))
        offs = [0]
        for n in SIZES:
            offs.append(offs[-1] + n)
        buf = self.c.allocate(offs[-1])
        mv = memoryview(buf)
        want = [rand(i, n) for i, n in enumerate(SIZES)]
        for i, w in enumerate(want):
            mv[offs[i]:offs[i + 1]] = w
        slots = [mv[offs[i]:offs[i + 1]] for i in range(len(SIZES))]
        in0, out0 = server_stat(self.c, "region_bytes_in", "region_bytes_out")
        self.assertEqual(self.c.put(ns, list(zip(ids, slots))), [Status.STORED] * len(SIZES))
        self.assertEqual(server_stat(self.c, "region_bytes_in")[0] - in0, sum(SIZES))
        mv[:] = bytes(len(mv))
        keys = [i.key() for i in ids]
        res = self.c.get_into(ns, keys, slots)
        self.assertEqual([(r.hit, r.length) for r in res], [(True, n) for n in SIZES])
        for i, w in enumerate(want):
            self.assertEqual(bytes(slots[i]), w, "block %d (%d bytes)" % (i, SIZES[i]))
        self.assertEqual(server_stat(self.c, "region_bytes_out")[0] - out0, sum(SIZES))
        st = self.c.region_stats()
        self.assertGreaterEqual(st.get("get_into", 0), len(SIZES))
        self.assertGreaterEqual(st.get("put_from", 0), len(SIZES))
        self.assertFalse([k for k in st if k.startswith("fallback_")], st)
        # What PUT_FROM stored is what a socket reader gets.
        got = self.tcp.get(ns, keys, max_len=32 * MiB)
        self.assertEqual([bytes(g) for g in got], want)
        del slots, got
        mv.release()
        buf.close()

    def test_put_opaque_from_bytes_equal(self):
        """Opaque-key blocks (as the vLLM tier and SGLang store them) from a
        region: PUT_OPAQUE_FROM, the server's region_bytes_in counts every
        byte, and what it stored reads back equal through the socket and
        through GET_INTO."""
        ns = ns_for("opaque-sizes")
        names = [b"chunk-%d" % i for i in range(len(SIZES))]
        keys = [opaque_key(ns.digest(), nm) for nm in names]
        offs = [0]
        for n in SIZES:
            offs.append(offs[-1] + n)
        buf = self.c.allocate(offs[-1])
        mv = memoryview(buf)
        want = [rand(1000 + i, n) for i, n in enumerate(SIZES)]
        for i, w in enumerate(want):
            mv[offs[i]:offs[i + 1]] = w
        slots = [mv[offs[i]:offs[i + 1]] for i in range(len(SIZES))]
        stats0 = self.c.region_stats()
        in0, out0 = server_stat(self.c, "region_bytes_in", "region_bytes_out")
        self.assertEqual(self.c.put_opaque(ns, list(zip(names, slots))), [Status.STORED] * len(SIZES))
        self.assertEqual(server_stat(self.c, "region_bytes_in")[0] - in0, sum(SIZES))
        st = self.c.region_stats()
        self.assertEqual(st.get("put_opaque_from", 0) - stats0.get("put_opaque_from", 0), len(SIZES))
        self.assertFalse([k for k in st if k.startswith("fallback_")], st)
        # What PUT_OPAQUE_FROM stored is what a socket reader gets.
        got = self.tcp.get(ns, keys, max_len=32 * MiB)
        self.assertEqual([bytes(g) for g in got], want)
        mv[:] = bytes(len(mv))
        res = self.c.get_into(ns, keys, slots)
        self.assertEqual([(r.hit, r.length) for r in res], [(True, n) for n in SIZES])
        for i, w in enumerate(want):
            self.assertEqual(bytes(slots[i]), w, "block %d (%d bytes)" % (i, SIZES[i]))
        self.assertEqual(server_stat(self.c, "region_bytes_out")[0] - out0, sum(SIZES))
        # Stored again from the region: EXISTS, no byte counted in.
        in1 = server_stat(self.c, "region_bytes_in")[0]
        self.assertEqual(self.c.put_opaque(ns, list(zip(names[:2], slots[:2]))), [Status.EXISTS] * 2)
        self.assertEqual(server_stat(self.c, "region_bytes_in")[0], in1)
        # A socket writer and a region writer of the same name agree.
        self.assertEqual(self.tcp.put_opaque(ns, [(names[0], want[0])]), [Status.EXISTS])
        del slots, got
        mv.release()
        buf.close()

    def test_socket_put_region_get_and_the_reverse(self):
        ns = ns_for("mixed")
        ids = blocks("mixed", 4)
        want = [rand(100 + i, MiB) for i in range(4)]
        self.assertEqual(self.tcp.put(ns, list(zip(ids[:2], want[:2]))), [Status.STORED] * 2)
        buf = self.c.allocate(4 * MiB)
        mv = memoryview(buf)
        for i in (2, 3):
            mv[i * MiB:(i + 1) * MiB] = want[i]
        self.assertEqual(self.c.put(ns, [(ids[i], mv[i * MiB:(i + 1) * MiB]) for i in (2, 3)]), [Status.STORED] * 2)
        mv[:] = bytes(len(mv))
        res = self.c.get_into(ns, [i.key() for i in ids], [mv[i * MiB:(i + 1) * MiB] for i in range(4)])
        self.assertTrue(all(r.hit for r in res), res)
        self.assertEqual(bytes(mv), b"".join(want))
        plain = [bytearray(MiB) for _ in range(4)]
        self.assertTrue(all(r.hit for r in self.tcp.get_into(ns, [i.key() for i in ids], plain)))
        self.assertEqual(b"".join(plain), b"".join(want))
        mv.release()
        buf.close()

    def test_torch_tensor_and_numpy_views(self):
        try:
            import numpy
            import torch
        except ImportError:
            self.skipTest("neither numpy nor torch is installed: apt-get install python3-numpy python3-torch (scripts/test installs them)")
        ns = ns_for("views")
        ids = blocks("views", 8)
        buf = self.c.allocate(8 * 65536)
        t = buf.tensor(torch.bfloat16).view(8, 32768)
        g = torch.Generator().manual_seed(3)
        t.copy_(torch.randn(8, 32768, generator=g).to(torch.bfloat16))
        want = bytes(buf)
        self.assertEqual(self.c.put(ns, [(ids[i], t[i]) for i in range(8)]), [Status.STORED] * 8)
        t.zero_()
        a = buf.numpy("uint8", (8, 65536))
        res = self.c.get_into(ns, [i.key() for i in ids], [a[i] for i in range(8)])
        self.assertTrue(all(r.hit for r in res))
        self.assertEqual(bytes(buf), want)
        self.assertEqual(numpy.asarray(t.view(torch.uint8)).tobytes(), want)
        del t, a
        buf.close()

    def test_vllm_offload_file_layout(self):
        """A file as vLLM's SharedOffloadRegion makes it: /dev/shm/
        vllm_offload_<engine_id>.mmap, num_chunks rows of row_stride bytes
        (one cpu_page per worker), mapped MAP_SHARED by every worker, then
        unlinked; the tier's view is (num_chunks, row_stride). Registered
        through the view alone, it is GUARDED (a /dev/shm file cannot be
        sealed), and each worker's slot of a row is read and written in
        place."""
        workers, chunks, page = 2, 6, 64 << 10
        row = workers * page
        path = "/dev/shm/vllm_offload_gpucache-test-%d.mmap" % os.getpid()
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.ftruncate(fd, chunks * row)
            m = mmap.mmap(fd, chunks * row, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.unlink(path)  # every worker mapped it: the name goes, the mapping stays
        c = Client([self.d.unix_addr], tenant="default", timeout=30.0)
        try:
            view = memoryview(m).cast("B", (chunks, row))
            flat = view.cast("B")
            r = c.register(buffer=view)
            self.assertEqual(c.check_region(r), (True, "guarded"))
            self.assertEqual((r.length, r.file_offset), (chunks * row, 0))
            ns = ns_for("vllm-file")
            ids = blocks("vllm-file", chunks)
            slot = [flat[i * row + (i % workers) * page:i * row + (i % workers + 1) * page] for i in range(chunks)]
            want = [rand(200 + i, page) for i in range(chunks)]
            for i, w in enumerate(want):
                slot[i][:] = w
            self.assertEqual(c.put(ns, list(zip(ids, slot))), [Status.STORED] * chunks)
            flat[:] = bytes(len(flat))
            res = c.get_into(ns, [i.key() for i in ids], slot[::-1])  # other rows
            self.assertTrue(all(x.hit for x in res), res)
            self.assertEqual([bytes(s) for s in slot[::-1]], want)
            self.assertEqual(c.region_stats().get("get_into"), chunks)
            self.assertEqual(c.region_stats().get("put_from"), chunks)
            del slot, flat
            view.release()
        finally:
            c.close()  # closes the region: the view's export ends
        m.close()
        os.close(fd)

    def test_tcp_falls_back_to_the_socket(self):
        c = Client([self.d.addr], tenant="default", timeout=30.0)
        try:
            buf = c.allocate(2 * MiB)
            ns = ns_for("tcp")
            ids = blocks("tcp", 2)
            want = rand(300, 2 * MiB)
            buf[:] = want
            in0, out0 = server_stat(c, "region_bytes_in", "region_bytes_out")
            with self.assertLogs("gpucache.client", "WARNING") as logs:
                st = c.put(ns, [(ids[i], memoryview(buf)[i * MiB:(i + 1) * MiB]) for i in range(2)])
                buf[:] = bytes(2 * MiB)
                res = c.get_into(ns, [i.key() for i in ids], [memoryview(buf)[i * MiB:(i + 1) * MiB] for i in range(2)])
            self.assertEqual(st, [Status.STORED] * 2)
            self.assertTrue(all(r.hit for r in res))
            self.assertEqual(bytes(buf), want)
            self.assertEqual(len(logs.output), 1, logs.output)
            self.assertIn("(tcp)", logs.output[0])
            self.assertEqual(server_stat(c, "region_bytes_in", "region_bytes_out"), (in0, out0))
            self.assertEqual(c.region_stats()["fallback_tcp"], 4)
            buf.close()
        finally:
            c.close()

    def test_put_opaque_over_tcp_falls_back_to_the_socket(self):
        c = Client([self.d.addr], tenant="default", timeout=30.0)
        try:
            buf = c.allocate(2 * MiB)
            ns = ns_for("tcp-opaque")
            names = [b"tcp-a", b"tcp-b"]
            want = rand(310, 2 * MiB)
            buf[:] = want
            in0 = server_stat(c, "region_bytes_in")[0]
            with self.assertLogs("gpucache.client", "WARNING") as logs:
                for _ in range(2):  # logged once, not per call
                    st = c.put_opaque(ns, [(names[i], memoryview(buf)[i * MiB:(i + 1) * MiB]) for i in range(2)])
                    self.assertIn(st, ([Status.STORED] * 2, [Status.EXISTS] * 2))
            self.assertEqual(len(logs.output), 1, logs.output)
            self.assertIn("(tcp)", logs.output[0])
            self.assertEqual(server_stat(c, "region_bytes_in")[0], in0)
            self.assertEqual(c.region_stats()["fallback_tcp"], 4)
            self.assertNotIn("put_opaque_from", c.region_stats())
            got = self.c.get(ns, [opaque_key(ns.digest(), nm) for nm in names], max_len=MiB)
            self.assertEqual(b"".join(bytes(g) for g in got), want)
            buf.close()
        finally:
            c.close()

    def test_truncation_under_a_put_opaque_from(self):
        """The client shrinks its file between REGISTER and PUT_OPAQUE_FROM:
        the pages before the new end are stored, the ones past it FAILED
        (the server answered FAULT and dropped the region; the socket path
        is not tried on memory that is gone), and the daemon stays up."""
        path = "/dev/shm/gpucache-test-trunc3-%d" % os.getpid()
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        os.unlink(path)
        os.ftruncate(fd, 4 * MiB)
        c = Client([self.d.unix_addr], tenant="default", timeout=30.0)
        try:
            r = c.register(fd)
            self.assertEqual(c.check_region(r), (True, "guarded"))
            ns = ns_for("trunc3")
            names = [b"t3-%d" % i for i in range(4)]
            want = [rand(900 + i, MiB) for i in range(4)]
            mv = memoryview(r.buffer)
            slots = [mv[i * MiB:(i + 1) * MiB] for i in range(4)]
            for i, w in enumerate(want):
                slots[i][:] = w
            faults0 = server_stat(self.c, "region_faults")[0]
            os.ftruncate(fd, 2 * MiB)
            with self.assertLogs("gpucache.client", "WARNING") as logs:
                st = c.put_opaque(ns, list(zip(names, slots)))
            self.assertEqual(st, [Status.STORED, Status.STORED, 255, 255])  # FAILED
            self.assertIn("(fault)", logs.output[0])
            self.assertEqual(server_stat(self.c, "region_faults")[0] - faults0, 1)
            self.assertIsNone(self.d.proc.poll())
            got = self.c.get(ns, [opaque_key(ns.digest(), nm) for nm in names], max_len=MiB)
            self.assertEqual([bytes(g) if g is not None else None for g in got], want[:2] + [None, None])
            del slots
            mv.release()
        finally:
            c.close()
            os.close(fd)

    def test_truncated_file_faults_and_the_daemon_stays_up(self):
        path = "/dev/shm/gpucache-test-trunc-%d" % os.getpid()
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        os.unlink(path)
        os.ftruncate(fd, 4 * MiB)
        c = Client([self.d.unix_addr], tenant="default", timeout=30.0)
        try:
            r = c.register(fd)  # the client maps it itself
            ns = ns_for("trunc")
            ids = blocks("trunc", 4)
            self.assertEqual(self.tcp.put(ns, [(i, rand(400, MiB)) for i in ids]), [Status.STORED] * 4)
            faults0 = server_stat(c, "region_faults")[0]

            def raw(conn, op_keys):
                # Straight GET_INTO on one connection: no socket fallback,
                # whose read into the truncated mapping would fault here.
                self.assertTrue(c._region_ready(conn, r))
                os.ftruncate(fd, 0)  # the client shrinks its file under the server
                body = conn.call(wire.Op.GET_INTO, [wire.get_into_request(
                    ns.canonical(), 0, r.id, op_keys, [(i * MiB, MiB) for i in range(len(op_keys))])],
                    max_body=4 + 5 * len(op_keys))
                first = wire.decode_get_into_response(body, len(op_keys))
                with self.assertRaises(Exception) as again:
                    conn.call(wire.Op.GET_INTO, [wire.get_into_request(
                        ns.canonical(), 0, r.id, op_keys[:1], [(0, MiB)])], max_body=9)
                return first, again.exception
            first, again = c._with_conn(c._addrs[0], lambda conn: raw(conn, [i.key() for i in ids]))
            self.assertEqual(first, [(Status.FAULT, 0)] * 4)
            self.assertEqual(getattr(again, "code", None), wire.Code.REGION)  # the server dropped the region
            self.assertIsNone(self.d.proc.poll())
            self.assertEqual(server_stat(self.c, "region_faults")[0] - faults0, 1)
            # Other clients are served as before.
            got = self.c.get(ns, [i.key() for i in ids], max_len=MiB)
            self.assertEqual([bytes(g) for g in got], [rand(400, MiB)] * 4)
        finally:
            c.close()
            os.close(fd)

    def test_truncation_under_a_get_into_is_a_fault_miss(self):
        """The client shrinks its file between REGISTER and GET_INTO: the
        blocks before the new end are hits, the ones past it miss with
        reason "fault" (the socket path is not tried on memory that is
        gone), and the client process is not hurt."""
        path = "/dev/shm/gpucache-test-trunc2-%d" % os.getpid()
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        os.unlink(path)
        os.ftruncate(fd, 4 * MiB)
        c = Client([self.d.unix_addr], tenant="default", timeout=30.0)
        try:
            r = c.register(fd)
            self.assertEqual(c.check_region(r), (True, "guarded"))
            ns = ns_for("trunc2")
            ids = blocks("trunc2", 4)
            want = [rand(800 + i, MiB) for i in range(4)]
            self.assertEqual(self.tcp.put(ns, list(zip(ids, want))), [Status.STORED] * 4)
            mv = memoryview(r.buffer)
            slots = [mv[i * MiB:(i + 1) * MiB] for i in range(4)]
            os.ftruncate(fd, 2 * MiB)
            with self.assertLogs("gpucache.client", "WARNING") as logs:
                res = c.get_into(ns, [i.key() for i in ids], slots)
            self.assertEqual([(x.hit, x.reason) for x in res], [(True, ""), (True, ""), (False, "fault"), (False, "fault")])
            self.assertEqual([bytes(slots[0]), bytes(slots[1])], want[:2])
            self.assertIn("(fault)", logs.output[0])
            self.assertIsNone(self.d.proc.poll())
            del slots
            mv.release()
        finally:
            c.close()
            os.close(fd)


class Bounds(unittest.TestCase):
    def test_tenant_bound_refuses_register(self):
        d = Daemon.start(unix=True, extra_args=["--tenant-region-bytes", "1MiB", "--region-bytes", "2MiB"])
        c = Client([d.unix_addr], tenant="default", timeout=30.0)
        try:
            big, small = c.allocate(2 * MiB), c.allocate(MiB)
            ns = ns_for("bound")
            ids = blocks("bound", 2)
            want = rand(500, MiB)
            big[:MiB] = want
            with self.assertLogs("gpucache.client", "WARNING") as logs:
                self.assertEqual(c.put(ns, [(ids[0], memoryview(big)[:MiB])]), [Status.STORED])
            self.assertIn("(refused)", logs.output[0])
            self.assertIn("REGION", logs.output[0])
            self.assertGreater(server_stat(c, "region_refused")[0], 0)
            res = c.get_into(ns, [ids[0].key()], [small])  # within the bound: through the region
            self.assertTrue(res[0].hit)
            self.assertEqual(bytes(small), want)
            self.assertEqual(c.region_stats().get("get_into"), 1)
            big.close()
            small.close()
        finally:
            c.close()
            d.stop()

    def test_server_at_version_4_falls_back(self):
        d = Daemon.start(unix=True, extra_args=["--protocol-max", "4"])
        c = Client([d.unix_addr], tenant="default", timeout=30.0)
        try:
            self.assertEqual(c.connect().version, 4)
            buf = c.allocate(MiB)
            ns = ns_for("v4")
            ids = blocks("v4", 1)
            want = rand(600, MiB)
            buf[:] = want
            with self.assertLogs("gpucache.client", "WARNING") as logs:
                self.assertEqual(c.put(ns, [(ids[0], buf)]), [Status.STORED])
                self.assertEqual(c.put_opaque(ns, [(b"v4-page", buf)]), [Status.STORED])
                buf[:] = bytes(MiB)
                self.assertTrue(c.get_into(ns, [ids[0].key()], [buf])[0].hit)
                self.assertEqual(bytes(buf), want)
                buf[:] = bytes(MiB)
                self.assertTrue(c.get_into(ns, [opaque_key(ns.digest(), b"v4-page")], [buf])[0].hit)
            self.assertEqual(bytes(buf), want)
            self.assertEqual(len(logs.output), 1)
            self.assertIn("(version)", logs.output[0])
            self.assertEqual(server_stat(c, "regions_registered")[0], 0)
            buf.close()
        finally:
            c.close()
            d.stop()


CHILD = r"""
import os, sys
from gpucache import Client, Layout, Namespace, identities
c = Client([sys.argv[1]], tenant="default", timeout=30.0)
ns = Namespace("default", "test", "killed", "1", "1", layout=Layout("flat", block_tokens=4))
ids = identities(ns, list(range(8)))
bufs = [c.allocate(4 << 20) for _ in range(3)]
for i, b in enumerate(bufs):
    b[:1 << 20] = bytes([i + 1]) * (1 << 20)
assert [s.name for s in c.put(ns, [(ids[0], memoryview(bufs[0])[:1 << 20])])] in (["STORED"], ["EXISTS"])
for b in bufs:  # each region registered on the connection
    assert c.get_into(ns, [ids[0].key()], [memoryview(b)[:1 << 20]])[0].hit
print("READY %d" % c.region_stats().get("registered", 0), flush=True)
sys.stdin.readline()  # killed here
"""


class KilledClient(unittest.TestCase):
    def test_sigkill_with_regions_registered(self):
        d = Daemon.start(unix=True)
        other = Client([d.unix_addr], tenant="default", timeout=30.0)
        try:
            env = dict(os.environ, PYTHONPATH=os.path.join(HERE, ".."))
            p = subprocess.Popen([sys.executable, "-c", CHILD, d.unix_addr], env=env, stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
            try:
                line = p.stdout.readline()
                self.assertEqual(line.split(), ["READY", "3"], line)
                mapped, nbytes = server_stat(other, "regions_mapped", "region_bytes_mapped")
                self.assertEqual((mapped, nbytes), (3, 12 * MiB))
                p.send_signal(signal.SIGKILL)
                self.assertEqual(p.wait(30), -signal.SIGKILL)
            finally:
                if p.poll() is None:
                    p.kill()
                    p.wait()
                p.stdin.close()
                p.stdout.close()
            # The kernel closed the dead client's socket; the server unmaps
            # its regions when it reads the close. STAT until it has (a
            # bound, not a pace: each STAT is one round trip).
            end = time.monotonic() + 30
            while server_stat(other, "regions_mapped")[0] and time.monotonic() < end:
                pass
            self.assertEqual(server_stat(other, "regions_mapped", "region_bytes_mapped"), (0, 0))
            self.assertIsNone(d.proc.poll())
            # Another client is served, through its own region.
            ns = ns_for("after-kill")
            ids = blocks("after-kill", 1)
            buf = other.allocate(MiB)
            want = rand(700, MiB)
            buf[:] = want
            self.assertEqual(other.put(ns, [(ids[0], buf)]), [Status.STORED])
            buf[:] = bytes(MiB)
            self.assertTrue(other.get_into(ns, [ids[0].key()], [buf])[0].hit)
            self.assertEqual(bytes(buf), want)
            self.assertEqual(other.region_stats().get("get_into"), 1)
            killed_ns = Namespace("default", "test", "killed", "1", "1", layout=Layout("flat", block_tokens=4))
            got = other.get(killed_ns, [identities(killed_ns, list(range(8)))[0].key()])
            self.assertEqual(bytes(got[0]), b"\x01" * MiB)  # what the killed client stored
            buf.close()
        finally:
            other.close()
            d.stop()


if __name__ == "__main__":
    unittest.main()
