"""Golden frames shared with Go: every frame of
api/wire/testdata/golden_frames.json (its README.md gives the format), in
both directions. Requests are encoded with the client's own encoders and
responses decoded with its own decoders (gpucache.wire), as the client
sends and reads them; the other two directions, which the client never
needs (a server's), use the small decoders and encoders of this module."""

import json
import os
import struct
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from gpucache import identity, wire  # noqa: E402
from gpucache.identity import Layout, Namespace  # noqa: E402
from gpucache.placement import Member  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
GOLDEN = os.path.join(ROOT, "api", "wire", "testdata", "golden_frames.json")

# The version-5 codec (registered regions) of gpucache.wire: until the
# client has all of it, the version-5 frames are skipped, saying so.
V5_CODEC = ("register_request", "unregister_request", "get_into_request", "put_from_request",
            "put_opaque_from_request", "decode_register_response", "decode_get_into_response")


def v5_missing():
    missing = [n for n in V5_CODEC if not hasattr(wire, n)]
    if not hasattr(wire.Status, "FAULT"):
        missing.append("Status.FAULT")
    if not hasattr(wire.Code, "REGION"):
        missing.append("Code.REGION")
    return missing


def load():
    with open(GOLDEN, encoding="utf-8") as f:
        return json.load(f)


def h(s):
    return bytes.fromhex(s)


def status_name(v):
    return wire.Status(v).name


# ---- the client's own codec: requests out, responses in ----

def put_block(b):
    return wire.PutBlock(key=h(b["key"]), parent=h(b["parent"]), valid_length=b["valid_length"],
                         length=b["length"], position=b["position"], tokens=tuple(b["token_ids"]))


def payloads(f):
    return b"".join(h(p) for p in f["payloads"])


def client_encode_request(op, f):
    """The body the client sends for a request of op with fields f."""
    ns = h(f["namespace"]) if "namespace" in f else None
    if op == wire.Op.HELLO:
        a = f.get("auth")
        if a is None:
            return wire.hello_request(f["min_version"], f["max_version"], f["tenant"], f["client"])
        kind = {"NONE": wire.AUTH_NONE, "BEARER": wire.AUTH_BEARER}[a["kind"]]
        return wire.hello_request(f["min_version"], f["max_version"], f["tenant"], f["client"],
                                  auth=True, auth_kind=kind, credential=h(a["credential"]))
    if op == wire.Op.LOOKUP:
        return wire.lookup_request(ns, f["lease_ttl_ms"], [h(k) for k in f["keys"]])
    if op == wire.Op.GET:
        return wire.get_request(ns, f["lease_id"], [h(k) for k in f["keys"]])
    if op == wire.Op.PUT:
        return wire.with_table_length(wire.put_table(ns, [put_block(b) for b in f["blocks"]])) + payloads(f)
    if op == wire.Op.DELETE:
        return wire.delete_request(ns, [h(k) for k in f["keys"]])
    if op in (wire.Op.STAT, wire.Op.MEMBERS):
        return b""
    if op == wire.Op.PING:
        return h(f["data"])
    if op == wire.Op.ACQUIRE:
        return wire.acquire_request(ns, [h(k) for k in f["keys"]])
    if op == wire.Op.FILL_COMMIT:
        entries = [(wire.FillToken(b["fill"], b["epoch"], b["turn"]), put_block(b)) for b in f["blocks"]]
        return wire.with_table_length(wire.fill_commit_table(ns, entries)) + payloads(f)
    if op == wire.Op.FILL_ABORT:
        return wire.fill_abort_request(ns, [wire.FillToken(t["fill"], t["epoch"], t["turn"]) for t in f["tokens"]])
    if op == wire.Op.WAIT:
        return wire.wait_request(ns, f["timeout_ms"], f["fills"])
    if op == wire.Op.PUT_OPAQUE:
        entries = [(h(b["key"]), h(b["name"]), b["length"]) for b in f["blocks"]]
        return wire.with_table_length(wire.put_opaque_table(ns, entries)) + payloads(f)
    if op == 14:  # REGISTER
        return wire.register_request(f["region"], f["length"])
    if op == 15:  # UNREGISTER
        return wire.unregister_request(f["region"])
    if op == 16:  # GET_INTO
        es = f["entries"]
        return wire.get_into_request(ns, f["lease_id"], f["region"], [h(e["key"]) for e in es],
                                     [(e["offset"], e["capacity"]) for e in es])
    if op == 17:  # PUT_FROM
        return wire.put_from_request(f["region"], f["offsets"], ns, [put_block(b) for b in f["blocks"]])
    if op == 18:  # PUT_OPAQUE_FROM
        return wire.put_opaque_from_request(f["region"], f["offsets"], ns,
                                            [(h(b["key"]), h(b["name"]), b["length"]) for b in f["blocks"]])
    raise AssertionError("no client encoder for op %d" % op)


def token_fields(t):
    return {"fill": t.fill, "epoch": t.epoch, "turn": t.turn}


def client_decode_response(op, body, req):
    """The fields the client reads from a response body of op; req is the
    request's fields (the client knows how many keys it asked for)."""
    if op == wire.Op.HELLO:
        r = wire.decode_hello_response(body)
        f = {"version": r.version, "server": r.server, "max_frame": r.max_frame, "max_batch": r.max_batch,
             "max_in_flight": r.max_in_flight, "max_payload": r.max_payload}
        if r.has_session:
            f["session"] = {"tenant": r.tenant, "flags": r.session_flags}
        return f
    if op == wire.Op.LOOKUP:
        r = wire.decode_lookup_response(body, len(req["keys"]))
        return {"hits": r.hits, "lease_id": r.lease_id, "lease_ttl_ms": r.lease_ttl_ms}
    if op == wire.Op.GET:
        tl = struct.unpack_from("<I", body)[0]
        table = wire.decode_get_table(body[4:4 + tl], len(req["keys"]))
        rest, ps = body[4 + tl:], []
        for st, ln in table:
            if st == wire.Status.HIT:
                ps.append(rest[:ln].hex())
                rest = rest[ln:]
        if rest:
            raise AssertionError("%d bytes after the payloads" % len(rest))
        return {"blocks": [{"status": status_name(st), "length": ln} for st, ln in table], "payloads": ps}
    if op in (wire.Op.PUT, wire.Op.FILL_COMMIT, wire.Op.PUT_OPAQUE, 17, 18):
        return {"statuses": [s.name for s in wire.decode_status_response(body, len(req["blocks"]))]}
    if op == wire.Op.DELETE:
        return {"statuses": [s.name for s in wire.decode_status_response(body, len(req["keys"]))]}
    if op == wire.Op.FILL_ABORT:
        return {"statuses": [s.name for s in wire.decode_status_response(body, len(req["tokens"]))]}
    if op == wire.Op.STAT:
        return wire.decode_stat_response(body)  # a dict: compared as one
    if op == wire.Op.PING:
        return {"data": bytes(body).hex()}
    if op == wire.Op.ACQUIRE:
        es = wire.decode_acquire_response(body, len(req["keys"]))
        return {"entries": [dict(outcome=o.name, **token_fields(t)) for o, t in es]}
    if op == wire.Op.WAIT:
        es = wire.decode_wait_response(body, len(req["fills"]))
        return {"entries": [dict(notice=k.name, **token_fields(t)) for k, t in es]}
    if op == wire.Op.MEMBERS:
        epoch, ms = wire.decode_members_response(body)
        return {"epoch": epoch, "members": [{"id": m.id, "addr": m.addr, "domain": m.domain, "proto": m.proto,
                                             "capacity": m.capacity, "flags": m.flags} for m in ms]}
    if op == 14:  # REGISTER
        return {"mode": wire.decode_register_response(body).name}
    if op == 15:  # UNREGISTER: an empty body
        if body:
            raise AssertionError("UNREGISTER answer of %d bytes" % len(body))
        return {}
    if op == 16:  # GET_INTO
        es = wire.decode_get_into_response(body, len(req["entries"]))
        return {"blocks": [{"status": status_name(st), "length": ln} for st, ln in es]}
    raise AssertionError("no client decoder for op %d" % op)


def client_decode_error(body):
    e = wire.decode_error(body)
    f = {"code": getattr(e.code, "name", e.code), "message": e.message}
    if e.code == wire.Code.WRONG_EPOCH:
        f["epoch"] = e.epoch
    if e.retry_after:
        f["retry_after_ms"] = round(e.retry_after * 1000)
    return f


# ---- this module's codec: requests in, responses out (a server's side) ----

def _keys(r):
    n = r.count(wire.DEFAULT_MAX_BATCH, wire.KEY_SIZE)
    return [bytes(r.take(wire.KEY_SIZE)).hex() for _ in range(n)]


def _blob(r):
    n = r.u32()
    if n > wire.MAX_NAMESPACE_LEN:
        raise AssertionError("namespace of %d bytes" % n)
    return bytes(r.take(n)).hex()


def _put_entry(r):
    key, parent = bytes(r.take(32)).hex(), bytes(r.take(32)).hex()
    valid, length, pos, n = r.u32(), r.u32(), r.u64(), r.u32()
    ids = list(struct.unpack_from("<%dI" % n, bytes(r.take(4 * n))))
    return {"key": key, "parent": parent, "valid_length": valid, "length": length, "position": pos, "token_ids": ids}


def _token(r):
    return {"fill": r.u64(), "epoch": r.u64(), "turn": r.u32()}


def _with_payloads(body, decode_table):
    """u32 table length | table | payloads: decode_table returns (fields,
    the payload lengths in order)."""
    tl = struct.unpack_from("<I", body)[0]
    r = wire.Reader(bytes(body[4:4 + tl]))
    f, lens = decode_table(r)
    r.done()
    rest, ps = bytes(body[4 + tl:]), []
    for ln in lens:
        if ln > len(rest):
            raise AssertionError("payload of %d bytes, %d left" % (ln, len(rest)))
        ps.append(rest[:ln].hex())
        rest = rest[ln:]
    if rest:
        raise AssertionError("%d bytes after the payloads" % len(rest))
    f["payloads"] = ps
    return f


def _put_table(r):
    f = {"namespace": _blob(r)}
    n = r.count(wire.DEFAULT_MAX_BATCH, 88)
    f["blocks"] = [_put_entry(r) for _ in range(n)]
    return f, [b["length"] for b in f["blocks"]]


def _fill_table(r):
    f = {"namespace": _blob(r)}
    n = r.count(wire.DEFAULT_MAX_BATCH, 108)
    f["blocks"] = []
    for _ in range(n):
        t = _token(r)
        t.update(_put_entry(r))
        f["blocks"].append(t)
    return f, [b["length"] for b in f["blocks"]]


def _opaque_table(r):
    f = {"namespace": _blob(r), "blocks": []}
    n = r.count(wire.DEFAULT_MAX_BATCH, 39)
    for _ in range(n):
        key = bytes(r.take(32)).hex()
        name = bytes(r.take(r.u16())).hex()
        f["blocks"].append({"key": key, "name": name, "length": r.u32()})
    return f, [b["length"] for b in f["blocks"]]


def decode_request(op, body):
    """The fields of a request body of op, as a server reads them."""
    if op == wire.Op.PUT:
        return _with_payloads(body, _put_table)
    if op == wire.Op.FILL_COMMIT:
        return _with_payloads(body, _fill_table)
    if op == wire.Op.PUT_OPAQUE:
        return _with_payloads(body, _opaque_table)
    if op == wire.Op.PING:
        return {"data": bytes(body).hex()}
    r = wire.Reader(bytes(body))
    if op == wire.Op.HELLO:
        f = {"min_version": r.u8(), "max_version": r.u8(), "tenant": r.str(), "client": r.str()}
        if r.left():
            kind = {wire.AUTH_NONE: "NONE", wire.AUTH_BEARER: "BEARER"}[r.u8()]
            f["auth"] = {"kind": kind, "credential": bytes(r.take(r.u16())).hex()}
    elif op == wire.Op.LOOKUP:
        f = {"namespace": _blob(r), "lease_ttl_ms": r.u32(), "keys": _keys(r)}
    elif op == wire.Op.GET:
        f = {"namespace": _blob(r), "lease_id": r.u64(), "keys": _keys(r)}
    elif op in (wire.Op.DELETE, wire.Op.ACQUIRE):
        f = {"namespace": _blob(r), "keys": _keys(r)}
    elif op in (wire.Op.STAT, wire.Op.MEMBERS):
        f = {}
    elif op == wire.Op.FILL_ABORT:
        f = {"namespace": _blob(r)}
        f["tokens"] = [_token(r) for _ in range(r.count(wire.DEFAULT_MAX_BATCH, 20))]
    elif op == wire.Op.WAIT:
        f = {"namespace": _blob(r), "timeout_ms": r.u32()}
        f["fills"] = [r.u64() for _ in range(r.count(wire.DEFAULT_MAX_BATCH, 8))]
    elif op == 14:  # REGISTER
        f = {"region": r.u32(), "length": r.u64()}
    elif op == 15:  # UNREGISTER
        f = {"region": r.u32()}
    elif op == 16:  # GET_INTO
        f = {"namespace": _blob(r), "lease_id": r.u64(), "region": r.u32(), "entries": []}
        for _ in range(r.count(wire.DEFAULT_MAX_BATCH, 44)):
            f["entries"].append({"key": bytes(r.take(32)).hex(), "offset": r.u64(), "capacity": r.u32()})
    elif op == 17:  # PUT_FROM
        f = {"region": r.u32()}
        f["offsets"] = [r.u64() for _ in range(r.count(wire.DEFAULT_MAX_BATCH, 8))]
        t, _ = _put_table(r)
        f.update(t)
    elif op == 18:  # PUT_OPAQUE_FROM
        f = {"region": r.u32()}
        f["offsets"] = [r.u64() for _ in range(r.count(wire.DEFAULT_MAX_BATCH, 8))]
        t, _ = _opaque_table(r)
        f.update(t)
    else:
        raise AssertionError("no request decoder for op %d" % op)
    r.done()
    return f


_STATUS_VALUES = {"HIT": 0, "MISS": 1, "STORED": 2, "EXISTS": 3, "TOO_LARGE": 4, "NO_SPACE": 5, "DELETED": 6,
                  "BUSY": 7, "FENCED": 8, "NOT_LEADER": 9, "ABORTED": 10, "KEY_MISMATCH": 11, "READ_ONLY": 12,
                  "FAULT": 13}
_OUTCOMES = {"HIT": 0, "LEAD": 1, "JOINED": 2, "DENIED": 3}
_NOTICES = {"PENDING": 0, "FINISHED": 1, "FAILED": 2, "FENCED": 3, "PROMOTED": 4}
_CODES = {"RATE_LIMITED": 17, "WRONG_EPOCH": 19, "MALFORMED": 5, "REGION": 20}


def _s(s):
    b = s.encode("utf-8")
    return struct.pack("<H", len(b)) + b


def _entries(es, kinds, key):
    return struct.pack("<I", len(es)) + b"".join(
        struct.pack("<BQQI", kinds[e[key]], e["fill"], e["epoch"], e["turn"]) for e in es)


def encode_response(op, f):
    """The body a server sends for a response of op with fields f."""
    if op == wire.Op.HELLO:
        b = bytes((f["version"],)) + _s(f["server"]) + struct.pack(
            "<IIII", f["max_frame"], f["max_batch"], f["max_in_flight"], f["max_payload"])
        if "session" in f:
            b += _s(f["session"]["tenant"]) + bytes((f["session"]["flags"],))
        return b
    if op == wire.Op.LOOKUP:
        return struct.pack("<IQI", f["hits"], f["lease_id"], f["lease_ttl_ms"])
    if op in (wire.Op.GET, 16):
        table = struct.pack("<I", len(f["blocks"])) + b"".join(
            struct.pack("<BI", _STATUS_VALUES[b["status"]], b["length"]) for b in f["blocks"])
        if op == 16:
            return table
        return struct.pack("<I", len(table)) + table + b"".join(h(p) for p in f["payloads"])
    if "statuses" in f:
        return struct.pack("<I", len(f["statuses"])) + bytes(_STATUS_VALUES[s] for s in f["statuses"])
    if op == wire.Op.STAT:
        return struct.pack("<I", len(f["entries"])) + b"".join(_s(e["name"]) + struct.pack("<Q", e["value"])
                                                               for e in f["entries"])
    if op == wire.Op.PING:
        return h(f["data"])
    if op == wire.Op.ACQUIRE:
        return _entries(f["entries"], _OUTCOMES, "outcome")
    if op == wire.Op.WAIT:
        return _entries(f["entries"], _NOTICES, "notice")
    if op == wire.Op.MEMBERS:
        return struct.pack("<QI", f["epoch"], len(f["members"])) + b"".join(
            _s(m["id"]) + _s(m["addr"]) + _s(m["domain"]) + struct.pack("<BQB", m["proto"], m["capacity"], m["flags"])
            for m in f["members"])
    if op == 14:  # REGISTER
        return bytes(({"SEALED": 0, "GUARDED": 1}[f["mode"]],))
    if op == 15:  # UNREGISTER
        return b""
    raise AssertionError("no response encoder for op %d" % op)


def encode_error(f):
    b = struct.pack("<H", _CODES[f["code"]]) + _s(f["message"])
    if "epoch" in f:
        b += struct.pack("<Q", f["epoch"])
    if "retry_after_ms" in f:
        b += struct.pack("<I", f["retry_after_ms"])
    return b


# ---- the tests ----

class WireGolden(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.golden = load()
        cls.frames = cls.golden["frames"]
        cls.requests = {(f["opcode"], f["request_id"]): f for f in cls.frames if f["kind"] == "request"}

    def request_of(self, f):
        return self.requests[(f["opcode"], f["request_id"])]["fields"]

    def each(self, kind, v5):
        """The frames of kind (request, response, error) of version 5 or of
        an earlier version."""
        for f in self.frames:
            if f["kind"] == kind and (f["version"] == 5) == v5:
                yield f

    def header(self, f):
        """The header the client reads or sends, checked against the vector."""
        frame = h(f["frame"])
        hd = wire.decode_header(frame[:wire.HEADER_SIZE])
        self.assertEqual((hd.version, hd.op, hd.flags, hd.request_id, hd.body_len),
                         (wire.FRAME_VERSION, f["opcode"], f["flags"], f["request_id"],
                          len(frame) - wire.HEADER_SIZE))
        return frame[wire.HEADER_SIZE:]

    def check_requests(self, v5):
        n = 0
        for f in self.each("request", v5):
            with self.subTest(f["name"]):
                fields = dict(f["fields"])
                body = self.header(f)
                st = fields.pop("stamp", None)
                prefix = b""
                if st is not None:
                    self.assertEqual(f["flags"], wire.FLAG_STAMPED)
                    prefix = wire.stamp(st["unix_nanos"], h(st["nonce"]))
                    t, nonce = wire.parse_stamp(body[:wire.STAMP_SIZE])
                    self.assertEqual({"unix_nanos": t, "nonce": nonce.hex()}, st)
                # Encode with the client's encoders.
                enc = prefix + client_encode_request(f["opcode"], fields)
                frame = wire.encode_header(f["opcode"], f["flags"], f["request_id"], len(enc)) + enc
                self.assertEqual(frame.hex(), f["frame"])
                # Decode as a server would.
                self.assertEqual(decode_request(f["opcode"], body[len(prefix):]), fields)
                n += 1
        return n

    def check_responses(self, v5):
        n = 0
        for f in self.each("response", v5):
            with self.subTest(f["name"]):
                body = self.header(f)
                self.assertEqual(f["flags"], wire.FLAG_RESPONSE)
                got = client_decode_response(f["opcode"], body, self.request_of(f))
                want = f["fields"]
                if f["opcode"] == wire.Op.STAT:  # the client keeps counters in a dict
                    want = {e["name"]: e["value"] for e in want["entries"]}
                    self.assertEqual(len(want), len(f["fields"]["entries"]))
                self.assertEqual(got, want)
                self.assertEqual(encode_response(f["opcode"], f["fields"]).hex(), body.hex())
                n += 1
        return n

    def check_errors(self, v5):
        n = 0
        for f in self.each("error", v5):
            with self.subTest(f["name"]):
                body = self.header(f)
                self.assertEqual(f["flags"], wire.FLAG_RESPONSE | wire.FLAG_ERROR)
                self.assertEqual(client_decode_error(body), f["fields"])
                self.assertEqual(encode_error(f["fields"]).hex(), body.hex())
                n += 1
        return n

    def test_requests(self):
        self.assertGreaterEqual(self.check_requests(False), 14)

    def test_responses(self):
        self.assertGreaterEqual(self.check_responses(False), 13)

    def test_errors(self):
        self.assertGreaterEqual(self.check_errors(False), 3)

    def test_version5(self):
        self.assertEqual(v5_missing(), [], "gpucache.wire lacks part of the version-5 codec (REGISTER, "
                         "UNREGISTER, GET_INTO, PUT_FROM, PUT_OPAQUE_FROM)")
        self.assertGreaterEqual(self.check_requests(True), 5)
        self.assertGreaterEqual(self.check_responses(True), 5)
        self.assertGreaterEqual(self.check_errors(True), 1)

    def test_every_operation_has_frames(self):
        ops = {(f["opcode"], f["kind"]) for f in self.frames}
        for op in range(1, max(wire.Op) + 1):
            self.assertIn((op, "request"), ops)
            self.assertIn((op, "response"), ops)
        for f in self.frames:
            if f["kind"] == "response":
                self.assertIn((f["opcode"], f["request_id"]), self.requests, f["name"])
        errs = [f["fields"] for f in self.frames if f["kind"] == "error"]
        self.assertTrue(any("retry_after_ms" in e for e in errs))
        self.assertTrue(any("epoch" in e for e in errs))
        self.assertTrue(any(f["flags"] & wire.FLAG_STAMPED for f in self.frames))
        for f in self.frames:
            if f["opcode"] <= max(wire.Op):
                self.assertEqual(wire.Op(f["opcode"]).name, f["op"])

    def test_namespace_and_keys(self):
        """The frames' namespace blob and keys are the client's own."""
        g = self.golden["namespace"]
        d = g["fields"]
        ns = Namespace(tenant=d["tenant"], trust_domain=d["trust_domain"], model_id=d["model_id"],
                       config_revision=d["config_revision"], tokenizer_revision=d["tokenizer_revision"],
                       adapter=d["adapter"], rope=d["rope"], dtype=d["dtype"], quantization=d["quantization"],
                       layout=Layout(**d["layout"]))
        self.assertEqual(ns.canonical().hex(), g["canonical"])
        self.assertEqual(identity.namespace_digest(ns).hex(), g["digest"])
        self.assertEqual([k.hex() for k in identity.chain(ns, g["tokens"])], g["keys"])
        for f in self.frames:
            if "namespace" in f["fields"]:
                self.assertEqual(f["fields"]["namespace"], g["canonical"], f["name"])
        opaque = [b for f in self.frames if f["op"] in ("PUT_OPAQUE", "PUT_OPAQUE_FROM") and f["kind"] == "request"
                  for b in f["fields"]["blocks"]]
        self.assertTrue(opaque)
        for b in opaque:
            self.assertEqual(identity.opaque_key(h(g["digest"]), h(b["name"])).hex(), b["key"])

    def test_members_decode_to_members(self):
        f = next(f for f in self.frames if f["name"] == "members_response")
        _, ms = wire.decode_members_response(h(f["frame"])[wire.HEADER_SIZE:])
        self.assertTrue(all(isinstance(m, Member) for m in ms))
        self.assertEqual([m.draining for m in ms], [bool(m["flags"] & 1) for m in f["fields"]["members"]])


if __name__ == "__main__":
    unittest.main()
