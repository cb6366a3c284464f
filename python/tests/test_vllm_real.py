"""gpucache.vllm.GpucacheTier against a real gpucached built from this tree.

Store, wipe, lookup, load into other slots, compare bytes, drain; another
model misses; the daemon stopped mid-run turns into misses and failed jobs
within the client deadline, with no exception.

Skips while the package has no Client (gpucache.Client, from h/pycore).
GPUCACHED=/path/to/gpucached skips the build.

SharedOffloadFileTest runs the tier over a primary region laid out as
vLLM's SharedOffloadRegion lays out its /dev/shm file, against a gpucached
on its Unix socket: the tier registers the file, and stores and loads
copy once in gpucached (PUT_OPAQUE_FROM, GET_INTO); over TCP the same jobs
use the socket. The daemon's region_bytes_in / region_bytes_out say which
path carried the bytes.
"""

import logging
import mmap
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import gpucache  # noqa: E402
from gpucache import vllm as gv  # noqa: E402
from test_vllm_tier import key, new_spec, primary  # noqa: E402

REPO = os.path.dirname(os.path.dirname(HERE))
BLOCK = 64 << 10
SLOTS = 8


def start_daemon(tmp):
    """Start gpucached in open mode on loopback; returns (process, address)."""
    binary = os.environ.get("GPUCACHED")
    if not binary:
        if not shutil.which("go"):
            raise unittest.SkipTest("no Go toolchain to build gpucached: install Go 1.26, or set GPUCACHED to a built gpucached")
        binary = os.path.join(tmp, "gpucached")
        subprocess.run(["go", "build", "-o", binary, "./cmd/gpucached"], cwd=REPO, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    p = subprocess.Popen([binary, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
                          "--hot-capacity", "64MiB", "--cold-dir", os.path.join(tmp, "cold")],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    serving = re.compile(r'msg="gpucached serving" data=(\S+)')
    for line in p.stderr:
        m = serving.search(line)
        if m:
            return p, m.group(1)
    p.wait()
    raise RuntimeError("gpucached exited before serving")


class RealDaemonTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="gpucache-vllm-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.proc, self.addr = start_daemon(self.tmp)
        self.addCleanup(self.stop)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.proc.stderr.close()

    def tier(self, **cfg):
        view = primary(SLOTS, BLOCK)
        cfg.setdefault("tenant", "default")  # open mode's tenant
        t = gv.GpucacheTier(offloading_spec=cfg.pop("spec", new_spec()), primary_kv_view=view,
                            tier_type="GpucacheTier", addrs=[self.addr], timeout=2.0, **cfg)
        self.addCleanup(t.shutdown)
        return t, view

    @staticmethod
    def row(view, slot):
        return view.cast("B")[slot * BLOCK:(slot + 1) * BLOCK]

    def settle(self, t, keys, req):
        for k in keys:
            t.lookup(k, req)
        t.drain_jobs()
        return [t.lookup(k, req) for k in keys]

    def test_store_wipe_lookup_load_compare_drain(self):
        t, view = self.tier()
        want = [os.urandom(BLOCK) for _ in range(4)]
        for s, data in enumerate(want):
            self.row(view, s)[:] = data
        keys = [key(s + 1) for s in range(4)]
        t.submit_store(gv.JobMetadata(1, keys, [0, 1, 2, 3], False, gv.ReqContext(req_id="")))
        t.drain_jobs()
        self.assertEqual({r.job_id: r.success for r in t.get_finished_jobs()}, {1: True})
        view.cast("B")[:] = bytes(SLOTS * BLOCK)
        req = gv.ReqContext(req_id="r1")
        self.assertEqual(self.settle(t, keys + [key(77)], req),
                         [gv._answer(True)] * 4 + [gv._answer(False)])
        t.submit_load(gv.JobMetadata(2, keys, [7, 6, 5, 4], True, req))
        t.drain_jobs()
        self.assertEqual({r.job_id: r.success for r in t.get_finished_jobs()}, {2: True})
        for i, s in enumerate([7, 6, 5, 4]):
            self.assertEqual(bytes(self.row(view, s)), want[i])

        other, oview = self.tier(spec=new_spec(model="acme/other-llm"))
        self.assertEqual(self.settle(other, keys[:1], req), [gv._answer(False)])
        other.submit_load(gv.JobMetadata(3, keys[:1], [0], True, req))
        other.drain_jobs()
        self.assertEqual({r.job_id: r.success for r in other.get_finished_jobs()}, {3: False})

    def test_daemon_stopped_mid_run(self):
        t, view = self.tier()
        self.row(view, 0)[:] = os.urandom(BLOCK)
        t.submit_store(gv.JobMetadata(1, [key(1)], [0], False, gv.ReqContext(req_id="")))
        t.drain_jobs()
        self.stop()
        req = gv.ReqContext(req_id="r")
        self.assertEqual(self.settle(t, [key(1)], req), [gv._answer(False)])
        t.submit_load(gv.JobMetadata(2, [key(1)], [1], True, req))
        t.submit_store(gv.JobMetadata(3, [key(2)], [0], False, req))
        t.drain_jobs()
        got = {r.job_id: r.success for r in t.get_finished_jobs()}
        self.assertEqual(got, {1: True, 2: False, 3: False})



def vllm_offload_file(test, engine_id, num_chunks, row_stride):
    """The primary region as vLLM 0.32's SharedOffloadRegion makes it: the
    file /dev/shm/vllm_offload_<engine_id>.mmap (O_CREAT | O_EXCL, O_RDWR,
    0600), ftruncate'd to num_chunks * row_stride, mapped MAP_SHARED, then
    unlinked once every worker mapped it; the tier's view is the
    (num_chunks, row_stride) memoryview create_kv_memoryview returns (over
    numpy when it is installed, as there). Returns (view, mmap, fd)."""
    path = "/dev/shm/vllm_offload_%s.mmap" % engine_id
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        os.ftruncate(fd, num_chunks * row_stride)
        m = mmap.mmap(fd, num_chunks * row_stride, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.unlink(path)
    test.addCleanup(os.close, fd)
    try:
        import numpy
        view = memoryview(numpy.frombuffer(m, dtype=numpy.uint8).reshape(num_chunks, row_stride))
    except ImportError:
        view = memoryview(m).cast("B", (num_chunks, row_stride))
    return view, m, fd


class SharedOffloadFileTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from gpucached import Daemon
        cls.d = Daemon.start(unix=True)

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()

    def daemon_stat(self):
        """The daemon's (region_bytes_in, region_bytes_out)."""
        c = gpucache.Client([self.d.addr], tenant="default", timeout=30.0)
        try:
            st = c.stat()
        finally:
            c.close()
        return st.get("region_bytes_in", 0), st.get("region_bytes_out", 0)

    def run_jobs(self, addr, engine):
        """Store 4 slots, wipe, load them into 4 others: the tier's stats,
        its region note, and the daemon's region bytes (in, out) of these
        jobs."""
        view, m, _ = vllm_offload_file(self, "%s-%d" % (engine, os.getpid()), SLOTS, BLOCK)
        in0, out0 = self.daemon_stat()
        t = gv.GpucacheTier(offloading_spec=new_spec(model="acme/" + engine), primary_kv_view=view,
                            tier_type="GpucacheTier", addrs=[addr], timeout=30.0, tenant="default")
        flat = view.cast("B") if view.format == "B" else memoryview(m)
        want = [os.urandom(BLOCK) for _ in range(4)]
        for s, data in enumerate(want):
            flat[s * BLOCK:(s + 1) * BLOCK] = data
        keys = [key(s + 1) for s in range(4)]
        t.submit_store(gv.JobMetadata(1, keys, [0, 1, 2, 3], False, gv.ReqContext(req_id="")))
        t.drain_jobs()
        flat[:] = bytes(SLOTS * BLOCK)
        req = gv.ReqContext(req_id="r")
        t.submit_load(gv.JobMetadata(2, keys, [7, 6, 5, 4], True, req))
        t.drain_jobs()
        self.assertEqual({r.job_id: r.success for r in t.get_finished_jobs()}, {1: True, 2: True})
        for i, s in enumerate([7, 6, 5, 4]):
            self.assertEqual(bytes(flat[s * BLOCK:(s + 1) * BLOCK]), want[i], "slot %d" % s)
        stats, note = t.stats(), t.region_note
        in1, out1 = self.daemon_stat()
        del flat
        t.shutdown()
        view.release()
        m.close()  # what vLLM's cleanup does after its tiers shut down: nothing exports the mapping
        return stats, note, (in1 - in0, out1 - out0)

    def test_unix_socket_stores_and_loads_through_the_file(self):
        stats, note, region = self.run_jobs(self.d.unix_addr, "unix")
        self.assertTrue(note.startswith("registered /dev/shm/vllm_offload_unix-"), note)
        self.assertIn("guarded", note)
        self.assertEqual(stats.get("region_put_opaque_from"), 4, stats)
        self.assertEqual(stats.get("region_get_into"), 4, stats)
        self.assertEqual(stats.get("bytes_stored"), 4 * BLOCK)
        self.assertEqual(stats.get("bytes_loaded"), 4 * BLOCK)
        self.assertFalse([k for k in stats if k.startswith("region_fallback")], stats)
        self.assertEqual(region, (4 * BLOCK, 4 * BLOCK))  # every byte through the file, both ways

    def test_tcp_uses_the_socket(self):
        with self.assertLogs("gpucache.vllm", logging.INFO) as logs:
            stats, note, region = self.run_jobs(self.d.addr, "tcp")
        self.assertIn("not on a Unix socket", note)
        self.assertIn(note, logs.output[0])
        self.assertFalse(stats.get("region_get_into"), stats)
        self.assertFalse(stats.get("region_put_opaque_from"), stats)
        self.assertEqual(stats.get("bytes_loaded"), 4 * BLOCK)
        self.assertEqual(region, (0, 0))


if __name__ == "__main__":
    unittest.main()
