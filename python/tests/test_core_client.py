"""The client against a real gpucached built from the tree: round trips into
every kind of buffer, namespace isolation, leases, opaque keys, 8 threads,
single-flight fills, bearer auth with replay stamps, TLS and mTLS."""

import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gpucache import (FAILED, Client, Layout, Namespace, ProtocolError, Status, chain,  # noqa: E402
                      identities, namespace_digest, opaque_key)
from gpucache import wire  # noqa: E402
from gpucached import Daemon  # noqa: E402

try:
    import numpy
except ImportError:  # optional
    numpy = None
try:
    import torch
except ImportError:  # optional
    torch = None


def ns_for(tenant="acme", model="m", dtype="fp16", block_tokens=4):
    return Namespace(tenant=tenant, trust_domain="test", model_id=model, config_revision="1",
                     tokenizer_revision="1", dtype=dtype, layout=Layout("flat", block_tokens=block_tokens))


def payload(i, n):
    return bytes((i * 7 + j) & 0xFF for j in range(256)) * (n // 256) + bytes(n % 256)


class RoundTrip(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = Daemon.start()
        cls.c = Client([cls.d.addr], tenant="acme", timeout=5.0, pool_size=8)

    @classmethod
    def tearDownClass(cls):
        cls.c.close()
        cls.d.stop()

    def stored(self, ns, tokens, size):
        ids = identities(ns, tokens)
        data = [payload(k, size) for k in range(len(ids))]
        st = self.c.put(ns, list(zip(ids, data)))
        self.assertEqual(st, [Status.STORED] * len(ids))
        return [i.key() for i in ids], data

    def test_put_lookup_get_delete(self):
        ns = ns_for(model="rt")
        keys, data = self.stored(ns, list(range(40)), 4096)
        self.assertEqual(keys, chain(ns, list(range(40))))
        self.assertEqual(self.c.lookup(ns, keys), (10, 0))
        self.assertEqual([bytes(b) for b in self.c.get(ns, keys)], data)
        st = self.c.put(ns, list(zip(identities(ns, list(range(40))), data)))
        self.assertEqual(st, [Status.EXISTS] * 10)
        # A missing middle block stops the run.
        self.assertEqual(self.c.delete(ns, [keys[4]]), [Status.DELETED])
        self.assertEqual(self.c.lookup(ns, keys)[0], 4)
        got = self.c.get(ns, keys)
        self.assertIsNone(got[4])
        self.assertEqual(bytes(got[5]), data[5])
        self.assertEqual(self.c.delete(ns, [keys[4]]), [Status.MISS])

    def test_other_namespace_misses(self):
        ns = ns_for(model="iso")
        keys, _ = self.stored(ns, list(range(8)), 1024)
        for other in (ns_for(model="iso2"), ns_for(model="iso", dtype="bf16")):
            self.assertEqual(self.c.lookup(other, keys), (0, 0))
            self.assertEqual(self.c.get(other, keys), [None, None])
        other_tenant = ns_for(tenant="bob", model="iso")
        self.assertEqual(self.c.lookup(other_tenant, keys), (0, 0))  # TENANT_MISMATCH: a miss
        r = self.c.get_into(other_tenant, keys, [bytearray(1024)] * 2)
        self.assertEqual([x.reason for x in r], ["denied", "denied"])

    def test_lease_then_get_into_bytearray_and_memoryview(self):
        ns = ns_for(model="lease")
        keys, data = self.stored(ns, list(range(16)), 65536)
        hits, lease = self.c.lookup(ns, keys, lease_ttl=5.0)
        self.assertEqual(hits, 4)
        self.assertNotEqual(lease, 0)
        self.assertEqual(self.c.delete(ns, keys[:1]), [Status.BUSY])  # leased
        backing = bytearray(4 * 65536 + 100)
        mv = memoryview(backing)
        bufs = [mv[i * 65536:(i + 1) * 65536] for i in range(4)]
        res = self.c.get_into(ns, keys, bufs, lease_id=lease)
        self.assertTrue(all(r.hit and r.length == 65536 and r.reason == "" for r in res))
        self.assertEqual(bytes(backing[:4 * 65536]), b"".join(data))
        # The GET released the lease.
        self.assertEqual(self.c.delete(ns, keys[:1]), [Status.DELETED])

    def test_small_buffer_is_a_miss(self):
        ns = ns_for(model="small")
        keys, data = self.stored(ns, list(range(8)), 1000)
        buf = bytearray(10)
        res = self.c.get_into(ns, keys, [buf, bytearray(1000)])
        self.assertEqual((res[0].hit, res[0].reason), (False, "over_budget"))
        self.assertTrue(res[1].hit)

    @unittest.skipIf(numpy is None, "numpy is not installed: apt-get install python3-numpy (scripts/test installs it)")
    def test_numpy_in_and_out(self):
        ns = ns_for(model="np")
        ids = identities(ns, list(range(8)))
        src = numpy.arange(2 * 512, dtype=numpy.float32).reshape(2, 512)
        self.assertEqual(self.c.put(ns, [(ids[0], src[0]), (ids[1], src[1])]), [Status.STORED] * 2)
        dst = numpy.zeros((2, 512), dtype=numpy.float32)
        res = self.c.get_into(ns, [i.key() for i in ids], [dst[0], dst[1]])
        self.assertTrue(all(r.hit for r in res))
        self.assertTrue(numpy.array_equal(src, dst))

    @unittest.skipIf(torch is None, "torch is not installed: apt-get install python3-torch (scripts/test installs it)")
    def test_torch_bf16_and_ctypes(self):
        ns = ns_for(model="torch")
        ids = identities(ns, list(range(8)))
        src = torch.randn(2, 1024, dtype=torch.float32).to(torch.bfloat16)
        # scatter/gather: one block from two tensors (K half, V half)
        self.assertEqual(self.c.put(ns, [(ids[0], [src[0, :512], src[0, 512:]]), (ids[1], src[1])]),
                         [Status.STORED] * 2)
        dst = torch.zeros(2, 1024, dtype=torch.bfloat16)
        res = self.c.get_into(ns, [i.key() for i in ids], [dst[0], dst[1]])
        self.assertTrue(all(r.hit for r in res), res)
        self.assertTrue(torch.equal(src, dst))
        raw = (ctypes.c_char * 2048)()
        res = self.c.get_into(ns, [ids[1].key()], [(ctypes.addressof(raw), 2048)])
        self.assertTrue(res[0].hit)
        self.assertEqual(raw.raw, bytes(src[1].view(torch.uint8).numpy()))

    def test_opaque_keys(self):
        ns = ns_for(model="opaque")
        st = self.c.put_opaque(ns, [(b"chunk-1", b"a" * 100), ("chunk-2", [b"b" * 50, bytearray(b"c" * 50)])])
        self.assertEqual(st, [Status.STORED] * 2)
        d = namespace_digest(ns)
        got = self.c.get(ns, [opaque_key(d, b"chunk-1"), opaque_key(d, b"chunk-2"), opaque_key(d, b"nope")])
        self.assertEqual([None if g is None else bytes(g) for g in got], [b"a" * 100, b"b" * 50 + b"c" * 50, None])

    def test_stat_and_ping(self):
        self.assertGreater(self.c.ping(), 0.0)
        s = self.c.stat()
        self.assertIsInstance(s, dict)
        self.assertIn("blocks_hit", s)

    def test_large_batch_splits(self):
        ns = ns_for(model="batch", block_tokens=1)
        tokens = list(range(1500))  # > max_batch (1024): two requests
        ids = identities(ns, tokens)
        st = self.c.put(ns, [(i, b"%06d" % k) for k, i in enumerate(ids)])
        self.assertEqual(st.count(Status.STORED), 1500)
        keys = [i.key() for i in ids]
        self.assertEqual(self.c.lookup(ns, keys)[0], 1500)
        got = self.c.get(ns, keys)
        self.assertEqual([bytes(g) for g in got], [b"%06d" % k for k in range(1500)])

    def test_eight_threads(self):
        ns = ns_for(model="threads")
        errors = []

        def worker(t):
            try:
                ids = identities(ns, [t * 1000 + k for k in range(64)])
                data = [os.urandom(32768) for _ in ids]
                for _ in range(5):
                    st = self.c.put(ns, list(zip(ids, data)))
                    assert all(s in (Status.STORED, Status.EXISTS) for s in st), st
                    bufs = [bytearray(32768) for _ in ids]
                    res = self.c.get_into(ns, [i.key() for i in ids], bufs)
                    assert all(r.hit for r in res), res
                    assert [bytes(b) for b in bufs] == data
            except Exception as e:  # reported below
                errors.append(e)
        ths = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
        for t in ths:
            t.start()
        for t in ths:
            t.join()
        self.assertEqual(errors, [])

    def test_get_or_fill_single_flight(self):
        ns = ns_for(model="fill")
        ids = identities(ns, list(range(32)))
        a = Client([self.d.addr], tenant="acme", timeout=5.0)
        b = Client([self.d.addr], tenant="acme", timeout=5.0)
        b_joined = threading.Event()
        b._after_acquire = lambda outcomes: b_joined.set()
        computed = {"a": [], "b": []}
        result = {}

        def fill_a(idxs):
            computed["a"].extend(idxs)
            # B asks while A leads: B joins and waits for A's commit.
            tb = threading.Thread(target=lambda: result.setdefault("b", b.get_or_fill(ns, ids, fill_b)))
            tb.start()
            result["tb"] = tb
            self.assertTrue(b_joined.wait(30))
            return [b"blk%d" % i for i in idxs]

        def fill_b(idxs):
            computed["b"].extend(idxs)
            return [b"other%d" % i for i in idxs]
        out_a, rep_a = a.get_or_fill(ns, ids, fill_a)
        result["tb"].join()
        out_b, rep_b = result["b"]
        self.assertEqual(sorted(computed["a"]), list(range(8)))
        self.assertEqual(computed["b"], [])
        self.assertEqual(rep_a["led"], 8)
        self.assertEqual(rep_b["joined"], 8)
        self.assertEqual(rep_b["hit"], 8)
        self.assertEqual([bytes(x) for x in out_b], [b"blk%d" % i for i in range(8)])
        self.assertEqual([bytes(x) for x in out_a], [b"blk%d" % i for i in range(8)])
        a.close()
        b.close()

    def test_fill_session_put_publishes(self):
        # A scheduler-like session leads, another engine's session joins, a
        # third connection (the worker) PUTs the block: the joiner is told
        # finished and reads the PUT's bytes; the leader's abort afterwards
        # changes nothing.
        ns = ns_for(model="session")
        ids = identities(ns, list(range(16)))
        keys = [i.key() for i in ids]
        a, b = self.c.fill_session(), self.c.fill_session()
        try:
            led = a.acquire(ns, keys)
            self.assertEqual([h.outcome for h in led], ["lead"] * 4)
            joined = b.acquire(ns, keys)
            self.assertEqual([h.outcome for h in joined], ["joined"] * 4)
            b.wait(ns, joined, 0)
            self.assertEqual([h.outcome for h in joined], ["joined"] * 4)  # pending
            self.assertEqual(self.c.put(ns, [(ids[0], b"w0"), (ids[1], b"w1")]), [Status.STORED] * 2)
            b.wait(ns, joined[:2], 5.0)
            self.assertEqual([h.outcome for h in joined[:2]], ["finished"] * 2)
            self.assertEqual([bytes(x) for x in self.c.get(ns, keys[:2])], [b"w0", b"w1"])
            # The leader gives up blocks 2 and 3 without writing them: the
            # joiner is promoted and leads them now.
            a.abort(ns, led)
            self.assertEqual([h.outcome for h in led], ["aborted"] * 4)
            b.wait(ns, joined[2:], 5.0)
            self.assertEqual([h.outcome for h in joined[2:]], ["promoted"] * 2)
            self.assertEqual(a.acquire(ns, keys[2:3])[0].outcome, "joined")
            self.assertEqual(self.c.put(ns, [(ids[2], b"w2"), (ids[3], b"w3")]), [Status.STORED] * 2)
            self.assertEqual([h.outcome for h in a.acquire(ns, keys)], ["hit"] * 4)
        finally:
            a.close()
            b.close()

    def test_fill_session_faults_are_misses(self):
        # A session whose connection is lost reports its joins failed and
        # its new acquires denied, without raising; a daemon that is gone
        # answers denied.
        ns = ns_for(model="session-faults")
        keys = [i.key() for i in identities(ns, list(range(8)))]
        a, b = self.c.fill_session(), self.c.fill_session()
        try:
            a.acquire(ns, keys)
            joined = b.acquire(ns, keys)
            b.close()  # the server withdraws b's waits
            b.wait(ns, joined, 1.0)
            self.assertEqual([h.outcome for h in joined], ["failed"] * 2)
            a.close()  # a's turns end with its connection
            self.assertEqual([h.outcome for h in b.acquire(ns, keys)], ["lead"] * 2)
        finally:
            a.close()
            b.close()
        gone = Client(["127.0.0.1:1"], tenant="acme", timeout=0.5).fill_session()
        handles = gone.acquire(ns, keys)
        self.assertEqual([h.outcome for h in handles], ["denied"] * 2)
        gone.wait(ns, handles, 0.1)
        gone.abort(ns, handles)
        gone.close()

    def test_get_or_fill_slower_than_the_deadline_still_commits(self):
        # The request deadline bounds I/O, not the caller's computation: a
        # fill that outlasts it (simulated: 3 x timeout) is still committed.
        ns = ns_for(model="slowfill")
        ids = identities(ns, list(range(8)))
        c = Client([self.d.addr], tenant="acme", timeout=0.2)

        def slow_fill(idxs):
            threading.Event().wait(0.6)  # stands for computing the KV
            return [b"slow%d" % i for i in idxs]
        out, rep = c.get_or_fill(ns, ids, slow_fill)
        self.assertEqual((rep["led"], rep["fallback"]), (2, 0), rep)
        self.assertEqual([bytes(g) for g in self.c.get(ns, [i.key() for i in ids])], [b"slow0", b"slow1"])
        c.close()


def openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def make_pki(d):
    """A CA, a server certificate for 127.0.0.1 and a client certificate "acme-engine"."""
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
            "-subj", "/CN=test CA", "-keyout", "ca.key", "-out", "ca.pem", cwd=d)
    for name, cn, ext in (("server", "gpucached", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth"),
                          ("client", "acme-engine", "extendedKeyUsage=clientAuth")):
        with open(os.path.join(d, name + ".ext"), "w") as f:
            f.write(ext + "\n")
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=" + cn,
                "-keyout", name + ".key", "-out", name + ".csr", cwd=d)
        openssl("x509", "-req", "-in", name + ".csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                "-days", "2", "-extfile", name + ".ext", "-out", name + ".pem", cwd=d)


class Secure(unittest.TestCase):
    """Bearer secrets (stamps required) and mTLS against one daemon."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="gpucache-pki-")
        make_pki(cls.dir)
        cls.secret = os.urandom(16).hex()
        with open(os.path.join(cls.dir, "acme.secret"), "w") as f:
            f.write(cls.secret + "\n")
        os.chmod(os.path.join(cls.dir, "acme.secret"), 0o600)
        p = lambda n: os.path.join(cls.dir, n)  # noqa: E731
        cls.d = Daemon.start(config="""tls_cert: %s
tls_key: %s
tls_client_ca: %s
audit_log: "off"
tenants:
  - name: acme
    secrets: [{id: a1, file: %s}]
    cert_names: [acme-engine]
    rights: ["*=rw"]
""" % (p("server.pem"), p("server.key"), p("ca.pem"), p("acme.secret")))

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def ctx(self, cert=True):
        import ssl
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=os.path.join(self.dir, "ca.pem"))
        if cert:
            ctx.load_cert_chain(os.path.join(self.dir, "client.pem"), os.path.join(self.dir, "client.key"))
        return ctx

    def test_mtls_round_trip_with_stamps(self):
        c = Client([self.d.addr], tenant="acme", ssl_context=self.ctx(), timeout=5.0)
        h = c.connect()
        self.assertEqual(h.tenant, "acme")
        self.assertTrue(h.session_flags & wire.SESSION_STAMP_REQUIRED)
        ns = ns_for(model="secure")
        ids = identities(ns, list(range(8)))
        self.assertEqual(c.put(ns, [(i, b"s" * 70000) for i in ids]), [Status.STORED] * 2)
        bufs = [bytearray(70000), bytearray(70000)]
        self.assertTrue(all(r.hit for r in c.get_into(ns, [i.key() for i in ids], bufs)))
        self.assertEqual(bytes(bufs[1]), b"s" * 70000)
        self.assertEqual(c.delete(ns, [ids[1].key()]), [Status.DELETED])
        c.close()

    def test_bearer_secret_over_tls(self):
        c = Client([self.d.addr], tenant="acme", secret=self.secret, ssl_context=self.ctx(cert=True), timeout=5.0)
        self.assertEqual(c.connect().tenant, "acme")
        c.close()

    def test_wrong_secret_and_no_cert_are_refused(self):
        c = Client([self.d.addr], tenant="acme", secret="wrong", ssl_context=self.ctx(cert=True), timeout=5.0)
        with self.assertRaises(ProtocolError) as cm:
            c.connect()
        self.assertEqual(cm.exception.code, wire.Code.UNAUTHENTICATED)
        ns = ns_for(model="secure")
        self.assertEqual(c.lookup(ns, chain(ns, [1, 2, 3, 4])), (0, 0))
        r = c.get_into(ns, chain(ns, [1, 2, 3, 4]), [bytearray(10)])
        self.assertEqual(r[0].reason, "denied")
        self.assertEqual(c.put(ns, [(identities(ns, [1, 2, 3, 4])[0], b"x")]), [FAILED])
        c.close()
        c = Client([self.d.addr], tenant="acme", secret=self.secret, ssl_context=self.ctx(cert=False), timeout=5.0)
        self.assertEqual(c.get(ns, chain(ns, [1, 2, 3, 4])), [None])
        c.close()


if __name__ == "__main__":
    unittest.main()
