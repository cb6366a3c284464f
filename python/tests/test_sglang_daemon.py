"""gpucache.sglang against a real gpucached built from this tree, through the
real gpucache.Client, driven the way SGLang's HiCacheController drives it.
Where sglang imports, the storage config, host pools and page keys are
SGLang's own (sglang_harness.REAL_SGLANG); elsewhere the harness's stand-ins.

Skips when gpucache.Client is not importable or no Go toolchain / binary is
found. GPUCACHE_BIN=/path/to/gpucached (what scripts/test sets; the older
GPUCACHE_GPUCACHED is read too) skips the build.

Run: cd python && /usr/bin/python3 -m unittest tests.test_sglang_daemon -v
"""

import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import gpucache  # noqa: E402

from sglang_harness import torch  # noqa: E402

HAVE_CLIENT = hasattr(gpucache, "Client")
if HAVE_CLIENT and torch is not None:
    from gpucache import sglang as gs  # noqa: E402
    from sglang_harness import Controller, MHAHostPool, StorageConfig, host_indices, page_keys  # noqa: E402

REPO = os.path.dirname(os.path.dirname(HERE))
# The client's deadline for the calls made to a frozen or stopped daemon:
# each of them waits this long for an answer that never comes.
TIMEOUT = 1.0
# A hang detector, not a performance bound: a call after the daemon stopped
# must come back; generous so a busy 2-core machine never trips it. It is
# also the client's deadline for every call to a running daemon, so that a
# slow answer on a loaded machine is never taken for a miss.
HANG = 30.0

CONFIG = """listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
hot_capacity: 64MiB
hot_max_class: 1MiB
cold_dir: {cold}
unix_listen: {sock}
tenants:
  - name: acme
    secrets: [{{id: acme-1, env: GPUCACHE_PYSGLANG_ACME}}]
  - name: bob
    secrets: [{{id: bob-1, env: GPUCACHE_PYSGLANG_BOB}}]
"""


def _binary(tmp):
    b = os.environ.get("GPUCACHE_BIN") or os.environ.get("GPUCACHE_GPUCACHED")
    if b:
        return b
    go = shutil.which("go")
    if not go:
        return None
    out = os.path.join(tmp, "gpucached")
    subprocess.run([go, "build", "-o", out, "./cmd/gpucached"], cwd=REPO, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return out


class Daemon:
    """One gpucached with tenants acme and bob on a free loopback port. Its
    config and cold tier live in a directory of its own under tmp: two
    daemons of one test never share a cold_dir."""

    def __init__(self, binary, tmp):
        self.secrets = {"acme": secrets.token_hex(32), "bob": secrets.token_hex(32)}
        home = tempfile.mkdtemp(prefix="gpucached-", dir=tmp)
        cfg = os.path.join(home, "gpucached.yaml")
        with open(cfg, "w") as f:
            f.write(CONFIG.format(cold=os.path.join(home, "cold"), sock=os.path.join(home, "gpucached.sock")))
        self.unix_addr = "unix:" + os.path.join(home, "gpucached.sock")
        env = dict(os.environ, GPUCACHE_PYSGLANG_ACME=self.secrets["acme"], GPUCACHE_PYSGLANG_BOB=self.secrets["bob"])
        self.proc = subprocess.Popen([binary, "--config", cfg], env=env, stderr=subprocess.PIPE, text=True)
        self.addr = None
        pat = re.compile(r'msg="gpucached serving" data=(\S+)')
        for line in self.proc.stderr:
            m = pat.search(line)
            if m:
                self.addr = m.group(1)
                break
        if self.addr is None:
            raise RuntimeError("gpucached exited before serving: rc=%s" % self.proc.wait())
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        with self.proc.stderr:
            for _ in self.proc.stderr:
                pass

    def freeze(self):
        """SIGSTOP the daemon and return once every thread of it has stopped.

        kill(2) only queues the signal: until one of the daemon's threads
        runs and starts the group stop, its other threads go on serving, and
        on a loaded machine a request sent right after the kill is still
        answered. waitpid(WUNTRACED) returns when the stop is complete (the
        test process is the daemon's parent, so it is told)."""
        self.proc.send_signal(signal.SIGSTOP)
        _, status = os.waitpid(self.proc.pid, os.WUNTRACED)
        if not os.WIFSTOPPED(status):  # it exited instead, and is reaped now
            self.proc.returncode = os.waitstatus_to_exitcode(status)
            raise RuntimeError("gpucached exited instead of stopping: status %#x" % status)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()


@unittest.skipIf(torch is None, "torch is not installed (scripts/test installs Debian's python3-torch)")
class DaemonBackendTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="pysglang-")
        try:
            binary = _binary(cls.tmp)
        except subprocess.CalledProcessError as e:
            raise unittest.SkipTest("go build failed: %s" % e.stderr[-500:])
        if binary is None:
            raise unittest.SkipTest("no gpucached binary and no Go toolchain: install Go 1.26, or set GPUCACHE_BIN to a built gpucached")
        cls.binary = binary
        cls.daemon = Daemon(binary, cls.tmp)

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def backend(self, pool, tenant="acme", extra=None, client=None, **cfg):
        """A backend on self.daemon: its own client (from extra_config), or
        client when given (the caller then owns and closes it)."""
        sf = os.path.join(self.tmp, tenant + ".secret")
        with open(sf, "w") as f:
            f.write(self.daemon.secrets[tenant] + "\n")
        ex = {"backend_name": "gpucache", "module_path": "gpucache.sglang", "class_name": "GpucacheStorage",
              "interface_v1": 1, "tenant": tenant, "secret_file": sf, "addrs": [self.daemon.addr],
              "timeout": HANG, "pool_size": 4, "model_revision": self.id()}
        ex.update(extra or {})
        b = gs.GpucacheStorage(StorageConfig(extra_config=ex, **cfg), {} if client is None else {"client": client})
        b.register_mem_pool_host(pool)
        self.addCleanup(b.close)
        return b

    def setUp(self):
        self.pool = MHAHostPool(pages=16, page_size=16, layer_num=2, head_num=2, head_dim=64)
        self.pool.fill_random(11)
        toks = list(range(5000, 5000 + 16 * 16))
        self.keys = page_keys(toks, self.pool.page_size)[:6]

    def test_set_wipe_exists_get_identical(self):
        b = self.backend(self.pool)
        ctl = Controller(b, self.pool)
        want = [self.pool.page_bytes(i) for i in range(6)]
        self.assertEqual(ctl.hit_query(self.keys), 0)
        self.assertEqual(ctl.backup(self.keys, host_indices(self.pool, 0, 6)), 6)
        self.pool.wipe()
        self.assertEqual(ctl.hit_query(self.keys), 6)
        self.assertEqual(ctl.fetch(self.keys, host_indices(self.pool, 8, 6)), 6)
        for i in range(6):
            self.assertEqual(self.pool.page_bytes(8 + i), want[i], "page %d" % i)

    def test_missing_middle_page_stops_count(self):
        b = self.backend(self.pool)
        self.assertEqual(b.batch_set_v1(self.keys[:2], host_indices(self.pool, 0, 2)), [True, True])
        self.assertEqual(b.batch_set_v1(self.keys[3:], host_indices(self.pool, 3, 3)), [True] * 3)
        self.assertEqual(b.batch_exists(self.keys), 2)
        self.assertEqual(Controller(b, self.pool).fetch(self.keys, host_indices(self.pool, 8, 6)), 2)

    def test_three_caller_threads(self):
        b = self.backend(self.pool)
        ctl = Controller(b, self.pool)
        self.assertEqual(ctl.backup(self.keys, host_indices(self.pool, 0, 6)), 6)
        more = page_keys(list(range(9000, 9000 + 16 * 6)), self.pool.page_size)
        out, errs = {}, []
        rounds = 20

        def loop(name, fn):
            try:
                out[name] = [fn() for _ in range(rounds)]
            except Exception as e:  # pragma: no cover
                errs.append((name, e))

        ths = [threading.Thread(target=loop, args=a) for a in (
            ("exists", lambda: ctl.hit_query(self.keys)),
            ("get", lambda: ctl.fetch(self.keys, host_indices(self.pool, 8, 6))),
            ("set", lambda: ctl.backup(more, host_indices(self.pool, 0, 6))),
        )]
        for t in ths:
            t.start()
        for t in ths:
            t.join(120)
        self.assertFalse(errs, errs)
        self.assertEqual(out["exists"], [6] * rounds)
        self.assertEqual(out["get"], [6] * rounds)
        self.assertEqual(out["set"], [6] * rounds)
        for i in range(6):
            self.assertEqual(self.pool.page_bytes(8 + i), self.pool.page_bytes(i))

    def test_other_model_rank_dtype_tenant_zero_hits(self):
        b = self.backend(self.pool)
        self.assertEqual(b.batch_set_v1(self.keys, host_indices(self.pool, 0, 6)), [True] * 6)
        geom = dict(pages=16, page_size=16, layer_num=2, head_num=2, head_dim=64)
        others = {
            "model": self.backend(MHAHostPool(**geom), model_name="acme/other-model"),
            "tp rank": self.backend(MHAHostPool(**geom), tp_rank=1, tp_size=2),
            "dtype": self.backend(MHAHostPool(dtype=torch.bfloat16, **geom)),
            "tenant": self.backend(MHAHostPool(**geom), tenant="bob"),
        }
        self.assertEqual(self.backend(MHAHostPool(**geom)).batch_exists(self.keys), 6)
        for what, o in others.items():
            self.assertEqual(o.batch_exists(self.keys), 0, what)
            self.assertEqual(o.batch_get_v1(self.keys, host_indices(o.mem_pool_host, 0, 6)), [False] * 6, what)

    def _own_daemon(self):
        """A daemon of this test's own, holding the six pages, and a backend
        on it with a pooled connection open. The pages are written and read
        back under the generous deadline; the backend's client then gets the
        short one, for the calls the test makes once the daemon is gone."""
        d = Daemon(self.binary, self.tmp)
        self.addCleanup(d.stop)
        client = gpucache.Client(addrs=[d.addr], tenant="acme", secret=d.secrets["acme"], timeout=HANG, pool_size=4)
        self.addCleanup(client.close)
        saved = self.daemon
        self.daemon = d
        try:
            b = self.backend(self.pool, client=client)
        finally:
            self.daemon = saved
        ctl = Controller(b, self.pool)
        self.assertEqual(ctl.backup(self.keys, host_indices(self.pool, 0, 6)), 6)
        self.assertEqual(ctl.hit_query(self.keys), 6)
        client.timeout = TIMEOUT
        return d, b

    def _all_miss(self, b):
        for name, call, miss in (
            ("batch_exists", lambda: b.batch_exists(self.keys), 0),
            ("batch_get_v1", lambda: b.batch_get_v1(self.keys, host_indices(self.pool, 8, 6)), [False] * 6),
            ("batch_set_v1", lambda: b.batch_set_v1(self.keys, host_indices(self.pool, 0, 6)), [False] * 6),
            ("exists", lambda: b.exists(self.keys[0]), False),
        ):
            t0 = time.monotonic()
            self.assertEqual(call(), miss, name)
            self.assertLess(time.monotonic() - t0, HANG, name + " hung")

    def test_daemon_frozen_mid_run_times_out(self):
        # SIGSTOP: connections stay open, nothing answers; every call must
        # come back a miss at its deadline
        d, b = self._own_daemon()
        d.freeze()
        self._all_miss(b)
        self.assertGreaterEqual(b.counters()["miss_reasons"].get("timeout", 0), 1)

    def test_daemon_stopped_mid_run(self):
        d, b = self._own_daemon()
        d.stop()
        self._all_miss(b)



@unittest.skipIf(torch is None, "torch is not installed (scripts/test installs Debian's python3-torch)")
class UnixSocketBackendTest(unittest.TestCase):
    """The backend on the daemon's Unix socket (authenticated, tenant acme):
    a host pool in registered memory is written with PUT_OPAQUE_FROM and
    read with GET_INTO; one in private memory goes through the socket and
    the backend says why."""

    @classmethod
    def setUpClass(cls):
        DaemonBackendTest.setUpClass.__func__(cls)

    @classmethod
    def tearDownClass(cls):
        DaemonBackendTest.tearDownClass.__func__(cls)

    def backend(self, pool):
        sf = os.path.join(self.tmp, "acme.secret")
        with open(sf, "w") as f:
            f.write(self.daemon.secrets["acme"] + "\n")
        ex = {"backend_name": "gpucache", "module_path": "gpucache.sglang", "class_name": "GpucacheStorage",
              "interface_v1": 1, "tenant": "acme", "secret_file": sf, "addrs": [self.daemon.unix_addr],
              "timeout": HANG, "pool_size": 2, "model_revision": self.id()}
        b = gs.GpucacheStorage(StorageConfig(extra_config=ex), {})
        b.register_mem_pool_host(pool)
        self.addCleanup(b.close)
        return b

    def pool_in(self, alloc):
        """A host pool whose kv_buffer lives in memory from alloc(nbytes)
        (SGLang's pool reads kv_buffer.data_ptr() at each call)."""
        pool = MHAHostPool(pages=16, page_size=16, layer_num=2, head_num=2, head_dim=64)
        kv = pool.kv_buffer
        pool.kv_buffer = alloc(kv.numel() * kv.element_size()).view(kv.dtype).view(kv.shape)
        pool.fill_random(12)
        return pool

    def round_trip(self, b, pool):
        keys = page_keys(list(range(7000, 7000 + 16 * 16)), pool.page_size)[:6]
        ctl = Controller(b, pool)
        want = [pool.page_bytes(i) for i in range(6)]
        self.assertEqual(ctl.backup(keys, host_indices(pool, 0, 6)), 6)
        pool.wipe()
        self.assertEqual(ctl.hit_query(keys), 6)
        self.assertEqual(ctl.fetch(keys, host_indices(pool, 8, 6)), 6)
        for i in range(6):
            self.assertEqual(pool.page_bytes(8 + i), want[i], "page %d" % i)

    def test_pool_in_a_registered_region(self):
        bufs = []

        def alloc(n):
            bufs.append(gpucache.shm.allocate(n))
            self.addCleanup(bufs[-1].close)
            return bufs[-1].tensor()
        pool = self.pool_in(alloc)
        b = self.backend(pool)
        self.assertTrue(b.region_note.startswith("registered the host pool"), b.region_note)
        self.assertIn("sealed", b.region_note)
        self.round_trip(b, pool)
        c = b.counters()
        self.assertEqual(c.get("region_get_into"), 12, c)  # 6 pages, K and V: no payload on the socket
        self.assertEqual(c.get("region_put_opaque_from"), 12, c)  # and none on the way in
        self.assertFalse([k for k in c if k.startswith("region_fallback")], c)
        del pool
        b.close()  # unregisters: the memory can be unmapped

    def test_private_pool_falls_back(self):
        pool = self.pool_in(lambda n: torch.zeros(n, dtype=torch.uint8))
        with self.assertLogs("gpucache.sglang", "WARNING") as logs:
            b = self.backend(pool)
        self.assertIn("not registered", logs.output[0])
        self.assertIn("not a shared file mapping", logs.output[0])
        self.round_trip(b, pool)
        c = b.counters()
        self.assertFalse(c.get("region_get_into"), c)
        self.assertFalse(c.get("region_put_opaque_from"), c)


if __name__ == "__main__":
    unittest.main()
