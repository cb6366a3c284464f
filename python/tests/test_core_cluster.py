"""Cluster routing against real nodes: a real etcd (Debian's /usr/bin/etcd)
and three gpucached processes. A cluster client learns the view with
MEMBERS, routes every key to its owner and reads back what it wrote; a
client pinned to one node gets the other nodes' keys refused (WRONG_EPOCH)
and reports them as misses."""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gpucache import Client, Layout, Namespace, Status, identities  # noqa: E402
from gpucached import Daemon  # noqa: E402

ETCD = shutil.which("etcd")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def converge(pred, bound=60.0):
    """Poll an external cluster's convergence (etcd watch propagation between
    processes: no hook can signal it), failing after a generous bound."""
    end = time.monotonic() + bound
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.1)
    return False


# Skipped without etcd, except under CI=true, where a missing etcd fails
# (scripts/test installs Debian's etcd-server).
@unittest.skipUnless(ETCD or os.environ.get("CI") == "true", "etcd is not installed (apt-get install etcd-server)")
class RealCluster(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not ETCD:
            raise RuntimeError("etcd is not installed (apt-get install etcd-server); CI=true needs it")
        cls.dir = tempfile.mkdtemp(prefix="gpucache-etcd-")
        cp, pp = free_port(), free_port()
        cls.endpoint = "http://127.0.0.1:%d" % cp
        cls.etcd = subprocess.Popen(
            [ETCD, "--data-dir", os.path.join(cls.dir, "data"), "--name", "e1",
             "--listen-client-urls", cls.endpoint, "--advertise-client-urls", cls.endpoint,
             "--listen-peer-urls", "http://127.0.0.1:%d" % pp,
             "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % pp,
             "--initial-cluster", "e1=http://127.0.0.1:%d" % pp],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        cls.nodes = []
        try:
            for nid, dom in (("n1", "rack-a"), ("n2", "rack-a"), ("n3", "rack-b")):
                cls.nodes.append(Daemon.start(extra_args=[
                    "--etcd-endpoints", cls.endpoint, "--node-id", nid, "--fault-domain", dom,
                    "--member-lease-ttl", "5s", "--control-probe", "100ms", "--control-grace", "10s"]))
        except Exception:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        for d in cls.nodes:
            d.stop()
        cls.etcd.terminate()
        try:
            cls.etcd.wait(10)
        except subprocess.TimeoutExpired:
            cls.etcd.kill()
            cls.etcd.wait()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_routes_by_placement(self):
        def all_see_three():
            for d in self.nodes:
                c = Client([d.addr], tenant="acme", timeout=2.0, cluster=True)
                v = c.members()
                c.close()
                if v is None or len(v.members) != 3:
                    return False
            return True
        self.assertTrue(converge(all_see_three), "the nodes never saw each other")
        ns = Namespace("acme", "test", "m", "1", "1", layout=Layout("flat", block_tokens=4))
        ids = identities(ns, list(range(4 * 60)))
        keys = [i.key() for i in ids]
        c = Client([self.nodes[0].addr], tenant="acme", timeout=5.0, cluster=True)
        view = c.members()
        owners = [view.owner(k).addr for k in keys]
        self.assertEqual(len(set(owners)), 3)  # 60 keys spread over all three nodes
        self.assertEqual(c.put(ns, [(i, b"v%d" % n) for n, i in enumerate(ids)]), [Status.STORED] * 60)
        self.assertEqual(c.lookup(ns, keys)[0], 60)
        self.assertEqual([bytes(g) for g in c.get(ns, keys)], [b"v%d" % n for n in range(60)])
        # A client pinned to n1 (no routing): n1 refuses keys it does not own.
        pinned = Client([self.nodes[0].addr], tenant="acme", timeout=5.0)
        res = pinned.get_into(ns, keys, [bytearray(8) for _ in keys])
        for r, o in zip(res, owners):
            if o != self.nodes[0].addr:
                self.assertEqual((r.hit, r.reason), (False, "unavailable"))
        pinned.close()
        c.close()


if __name__ == "__main__":
    unittest.main()
