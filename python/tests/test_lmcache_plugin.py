"""gpucache.lmcache.GpucacheL2Adapter against a real gpucached, standard
library only.

Stand-ins: LMCache's ObjectKey (a frozen dataclass with its fields) and its
MemoryObj (a bytearray: the adapter reads and fills any writable buffer);
where LMCache is absent the adapter's base class, Bitmap and L2StoreResult
are the module's own stand-ins (a set of hit indexes, an (ok, bytes) pair).
LMCache's real classes drive the adapter inside its multiprocess server in
engine_tests/test_lmcache.py. Completion is awaited through the adapter's
event fds (select), never with sleeps.
"""

import dataclasses
import os
import select
import sys
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from gpucache import lmcache as gl  # noqa: E402
from gpucached import Daemon  # noqa: E402

CHUNK = 4096


@dataclasses.dataclass(frozen=True)
class Key:  # LMCache's ObjectKey's fields
    chunk_hash: bytes
    model_name: str
    kv_rank: int
    object_group_id: int = 0
    cache_salt: str = ""


def keys(n, salt="", model="acme/llm", start=0):
    return [Key(bytes([i]) * 16, model, 0, 0, salt) for i in range(start, start + n)]


def payload(i):
    return bytes((i * 7 + j) % 251 for j in range(CHUNK))


def wait(fd, timeout=30.0):
    r, _, _ = select.select([fd], [], [], timeout)
    if not r:
        raise AssertionError("no completion signalled within %.0f s" % timeout)
    os.eventfd_read(fd)


def hits_of(res, n):
    if isinstance(res, set):
        return sorted(res)
    return [i for i in range(n) if res.test(i)]  # LMCache's Bitmap


@unittest.skipIf(gl.HAVE_LMCACHE, "LMCache is installed: engine_tests/test_lmcache.py runs the real classes instead")
class AdapterTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon.start()

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()

    def adapter(self, **kw):
        p = {"addrs": self.daemon.addr, "tenant": "default", "dtype": "bfloat16", "timeout": 5.0}
        p.update(kw)
        a = gl.GpucacheL2Adapter(p)
        self.addCleanup(a.close)
        return a

    def store(self, a, ks):
        tid = a.submit_store_task(ks, [bytearray(payload(i)) for i in range(len(ks))])
        wait(a.get_store_event_fd())
        return a.pop_completed_store_tasks()[tid]

    def lookup(self, a, ks):
        tid = a.submit_lookup_and_lock_task(ks, {})
        wait(a.get_lookup_and_lock_event_fd())
        return hits_of(a.query_lookup_and_lock_result(tid), len(ks))

    def load(self, a, ks):
        bufs = [bytearray(CHUNK) for _ in ks]
        tid = a.submit_load_task(ks, bufs)
        wait(a.get_load_event_fd())
        return hits_of(a.query_load_result(tid), len(ks)), bufs

    def test_store_lookup_load_round_trip(self):
        a = self.adapter()
        ks = keys(4)
        self.assertEqual(self.store(a, ks), (True, 4 * CHUNK))
        self.assertEqual(self.lookup(a, ks), [0, 1, 2, 3])
        got, bufs = self.load(a, ks)
        self.assertEqual(got, [0, 1, 2, 3])
        for i, b in enumerate(bufs):
            self.assertEqual(bytes(b), payload(i))
        a.submit_unlock(ks)
        c = a.counters()
        self.assertEqual((c["keys_stored"], c["keys_hit"], c["keys_loaded"], c["bytes_loaded"]),
                         (4, 4, 4, 4 * CHUNK))
        # stored again: EXISTS, still a successful task
        self.assertEqual(self.store(a, ks), (True, 0))
        self.assertEqual(a.counters()["keys_existed"], 4)

    def test_lookup_is_the_leading_run(self):
        a = self.adapter()
        ks = keys(3, start=20)
        self.store(a, [ks[0], ks[2]])
        self.assertEqual(self.lookup(a, ks), [0])

    def test_salt_model_and_revision_are_other_namespaces(self):
        a = self.adapter()
        self.store(a, keys(2, salt="alice", start=40))
        self.assertEqual(self.lookup(a, keys(2, salt="bob", start=40)), [])
        self.assertEqual(self.lookup(a, keys(2, salt="", start=40)), [])
        self.assertEqual(self.lookup(a, keys(2, salt="alice", model="acme/other", start=40)), [])
        self.assertEqual(self.lookup(self.adapter(model_revision="r2"), keys(2, salt="alice", start=40)), [])
        self.assertEqual(self.lookup(self.adapter(dtype="float16"), keys(2, salt="alice", start=40)), [])
        got, bufs = self.load(a, keys(2, salt="bob", start=40))
        self.assertEqual(got, [])
        self.assertEqual(bytes(bufs[0]), bytes(CHUNK))  # a miss leaves the buffer as it was
        self.assertEqual(self.lookup(a, keys(2, salt="alice", start=40)), [0, 1])

    def test_a_stopped_daemon_is_a_miss_and_a_failed_store(self):
        d = Daemon.start()
        a = gl.GpucacheL2Adapter({"addrs": d.addr, "tenant": "default", "timeout": 2.0})
        self.addCleanup(a.close)
        ks = keys(2, start=60)
        ok, _ = self.store(a, ks)
        self.assertTrue(ok)
        d.stop()
        self.assertEqual(self.lookup(a, ks), [])
        self.assertEqual(self.load(a, ks)[0], [])
        ok, n = self.store(a, keys(2, start=70))
        self.assertFalse(ok)
        self.assertEqual(n, 0)
        self.assertEqual(a.counters()["store_failures"], 1)

    def test_queued_tasks_are_bounded(self):
        entered, release = threading.Event(), threading.Event()

        class BlockingClient:  # stand-in: holds the adapter's thread in its first lookup
            def lookup(self, ns, keys, lease_ttl=0.0):
                entered.set()
                release.wait(30)
                return 0, 0

            def close(self):
                pass
        a = gl.GpucacheL2Adapter({"tenant": "default", "max_queued_tasks": 2}, client=BlockingClient())
        self.addCleanup(a.close)
        self.addCleanup(release.set)
        first = a.submit_lookup_and_lock_task(keys(1), {})
        self.assertTrue(entered.wait(30))
        queued = [a.submit_lookup_and_lock_task(keys(1), {}) for _ in range(2)]
        refused = a.submit_lookup_and_lock_task(keys(1), {})
        wait(a.get_lookup_and_lock_event_fd())
        self.assertEqual(hits_of(a.query_lookup_and_lock_result(refused), 1), [])
        self.assertEqual(a.counters()["tasks_refused"], 1)
        self.assertIsNone(a.query_lookup_and_lock_result(first))
        release.set()
        self.assertTrue(a.drain())
        for tid in [first] + queued:
            self.assertEqual(hits_of(a.query_lookup_and_lock_result(tid), 1), [])

    def test_status_and_config_errors(self):
        a = self.adapter()
        st = a.report_status()
        self.assertEqual((st["type"], st["is_healthy"]), ("gpucache", True))
        self.assertIn("keys_hit", st["counters"])
        with self.assertRaisesRegex(ValueError, "tenant"):
            gl.GpucacheL2Adapter({"addrs": self.daemon.addr})
        self.assertEqual(gl.salt_domain(""), "default")
        self.assertNotEqual(gl.salt_domain("a"), gl.salt_domain("b"))
        self.assertNotIn("alice", gl.salt_domain("alice"))  # the salt itself is never sent


if __name__ == "__main__":
    unittest.main()
