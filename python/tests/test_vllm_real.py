"""gpucache.vllm.GpucacheTier against a real gpucached built from this tree.

Store, wipe, lookup, load into other slots, compare bytes, drain; another
model misses; the daemon stopped mid-run turns into misses and failed jobs
within the client deadline, with no exception.

Skips while the package has no Client (gpucache.Client, from h/pycore).
GPUCACHED=/path/to/gpucached skips the build.
"""

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
            raise unittest.SkipTest("no go toolchain to build gpucached")
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


@unittest.skipUnless(hasattr(gpucache, "Client"), "gpucache.Client not present yet")
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


if __name__ == "__main__":
    unittest.main()
