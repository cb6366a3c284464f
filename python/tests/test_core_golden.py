"""Golden vectors shared with Go: identity encoding, block-key chain, opaque
keys, placement and replay stamps. Every vector of the Go testdata files."""

import json
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from gpucache import identity, placement, wire  # noqa: E402
from gpucache.identity import CacheIdentity, Layout, Namespace  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def load(*path):
    with open(os.path.join(ROOT, *path), encoding="utf-8") as f:
        return json.load(f)


def ns_of(d):
    l = d["layout"]
    return Namespace(
        tenant=d["tenant"], trust_domain=d["trust_domain"], model_id=d["model_id"],
        config_revision=d["config_revision"], tokenizer_revision=d["tokenizer_revision"],
        adapter=d["adapter"], rope=d["rope"], dtype=d["dtype"], quantization=d["quantization"],
        layout=Layout(**l))


class IdentityGolden(unittest.TestCase):
    def setUp(self):
        self.vectors = load("api", "identity", "testdata", "golden.json")["vectors"]
        self.assertGreaterEqual(len(self.vectors), 3)

    def test_namespace_encoding_and_digest(self):
        for v in self.vectors:
            with self.subTest(v["name"]):
                ns = ns_of(v["namespace"])
                self.assertEqual(ns.canonical().hex(), v["namespace_canonical"])
                self.assertEqual(identity.namespace_digest(ns).hex(), v["namespace_digest"])

    def test_chain_and_blocks(self):
        n = 0
        for v in self.vectors:
            with self.subTest(v["name"]):
                ns = ns_of(v["namespace"])
                keys = identity.chain(ns, v["tokens"])
                self.assertEqual([k.hex() for k in keys], [b["key"] for b in v["blocks"]])
                ids = identity.identities(ns, v["tokens"])
                self.assertEqual(len(ids), len(v["blocks"]))
                for got, b in zip(ids, v["blocks"]):
                    self.assertEqual(got.parent.hex(), b["parent"])
                    self.assertEqual(got.position, b["position"])
                    self.assertEqual(list(got.tokens), b["tokens"])
                    self.assertEqual(got.valid_length, b["valid_length"])
                    self.assertEqual(got.canonical().hex(), b["identity_canonical"])
                    self.assertEqual(got.key().hex(), b["key"])
                    n += 1
                for b in v.get("identities") or []:
                    ci = CacheIdentity(namespace=ns, parent=bytes.fromhex(b["parent"]), position=b["position"],
                                       tokens=tuple(b["tokens"]), valid_length=b["valid_length"])
                    self.assertEqual(ci.canonical().hex(), b["identity_canonical"])
                    self.assertEqual(ci.key().hex(), b["key"])
                    self.assertEqual(identity.key_for(ns.digest(), ci.parent, ci.tokens, ci.valid_length).hex(), b["key"])
                    n += 1
        self.assertGreater(n, 3)

    def test_invalid_identities_refused(self):
        ns = ns_of(self.vectors[0]["namespace"])
        bad = [
            CacheIdentity(namespace=ns, tokens=(), valid_length=0),
            CacheIdentity(namespace=ns, tokens=(1, 2), valid_length=3),
            CacheIdentity(namespace=ns, tokens=(1,), valid_length=1, position=16),  # zero parent, position > 0
            CacheIdentity(namespace=ns, tokens=(1,), valid_length=1, position=3, parent=b"\x01" * 32),
            CacheIdentity(namespace=ns, opaque=b"x" * 1025),
            CacheIdentity(namespace=ns, opaque=b"x", tokens=(1,), valid_length=1),
        ]
        for ci in bad:
            with self.subTest(ci=ci), self.assertRaises(identity.InvalidIdentity):
                ci.key()
        with self.assertRaises(identity.InvalidIdentity):
            Namespace("", "d", "m", "c", "t").canonical()
        with self.assertRaises(identity.InvalidIdentity):
            Namespace("t", "d", "m", "c", "t", layout=Layout("f", tp_rank=1, tp_size=1)).canonical()


class OpaqueGolden(unittest.TestCase):
    def test_opaque_vectors(self):
        vectors = load("api", "identity", "testdata", "opaque_golden.json")["vectors"]
        basic = ns_of(load("api", "identity", "testdata", "golden.json")["vectors"][0]["namespace"])
        self.assertGreaterEqual(len(vectors), 1)
        for v in vectors:
            with self.subTest(v["name"]):
                name = bytes.fromhex(v["opaque_hex"])
                d = bytes.fromhex(v["namespace_digest"])
                self.assertEqual(identity.opaque_key(d, name).hex(), v["key"])
                if basic.digest() == d:
                    ci = CacheIdentity(namespace=basic, opaque=name)
                    self.assertEqual(ci.canonical().hex(), v["identity_canonical"])
                    self.assertEqual(ci.key().hex(), v["key"])


class PlacementGolden(unittest.TestCase):
    def test_placement_vectors(self):
        g = load("api", "placement", "testdata", "placement_golden.json")
        members = [placement.Member(m["id"], m["addr"], m["fault_domain"], m["proto_version"], m["capacity_bytes"],
                                    placement.MEMBER_DRAINING if m["draining"] else 0) for m in g["members"]]
        for m in g["members"]:
            self.assertEqual("%016x" % placement.member_seed(m["id"]), m["seed_fnv1a64"], m["id"])
        view = placement.View(g["epoch"], members)
        self.assertGreaterEqual(len(g["cases"]), 8)
        for c in g["cases"]:
            with self.subTest(c["key"]):
                key = bytes.fromhex(c["key"])
                self.assertEqual(key[:8][::-1].hex(), c["key_word_le64"])
                k = placement.key_word(key)
                for mid, want in c["mix64_k_xor_seed"].items():
                    self.assertEqual("%016x" % placement.mix64(k ^ placement.member_seed(mid)), want, mid)
                self.assertEqual(view.owner(key).id, c["owner"])

    def test_no_active_member_owns_nothing(self):
        view = placement.View(3, [placement.Member("a", "a:1", "z", 1, 1 << 30, placement.MEMBER_DRAINING)])
        self.assertIsNone(view.owner(b"\x00" * 32))
        self.assertEqual(view.route([b"\x00" * 32]), {})


class StampGolden(unittest.TestCase):
    def test_stamps(self):
        g = load("internal", "security", "antireplay", "testdata", "stamp_golden.json")
        for s in g["stamps"]:
            with self.subTest(s["name"]):
                self.assertEqual(wire.stamp(s["unix_nanos"], bytes.fromhex(s["nonce"])).hex(), s["hex"])
                self.assertEqual(wire.parse_stamp(bytes.fromhex(s["hex"])), (s["unix_nanos"], bytes.fromhex(s["nonce"])))
        for s in g["malformed"]:
            with self.subTest(s["name"]), self.assertRaises(wire.MalformedError):
                wire.parse_stamp(bytes.fromhex(s["hex"]))
        for s in g["legacy_big_endian"]:
            self.assertEqual(wire.parse_stamp(bytes.fromhex(s["hex"]))[0], s["unix_nanos"])
        # The doc.go example.
        self.assertEqual(wire.stamp(1767323045000000006, bytes.fromhex("f0e1d2c3b4a5968778695a4b3c2d1e0f")).hex(),
                         "0632961cf2ca8618f0e1d2c3b4a5968778695a4b3c2d1e0f")


if __name__ == "__main__":
    unittest.main()
