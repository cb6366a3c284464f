"""The gpucache native wire protocol (versions 1-5), written from api/wire/doc.go.

Frames are a 24-byte header ("GPUC", frame version 1, opcode, u16 flags,
u64 request id, u32 body length, 4 reserved zero bytes) and a body. All
integers are little-endian. Every decoder here is strict: wrong lengths,
trailing bytes, unknown statuses or counts over their limits raise
MalformedError, so a garbage reply never becomes data.

Version 4 adds the READ_ONLY block status; version 5 the registered-region
operations of a Unix-domain connection (REGISTER, UNREGISTER, GET_INTO,
PUT_FROM, PUT_OPAQUE_FROM), the FAULT status and the REGION error code.
"""

import enum
import os
import struct
import time
from dataclasses import dataclass
from typing import List, Sequence, Tuple

from .errors import MalformedError, ProtocolError

MAGIC = b"GPUC"
FRAME_VERSION = 1
HEADER_SIZE = 24
KEY_SIZE = 32
STAMP_SIZE = 24
VERSION_MAX = 5
VERSION_REGIONS = 5  # the first version with registered regions

DEFAULT_MAX_FRAME = (64 << 20) + (1 << 20)
DEFAULT_MAX_BATCH = 1024
DEFAULT_MAX_IN_FLIGHT = 64
MAX_NAMESPACE_LEN = 4096
MAX_STRING_LEN = 256
MAX_PING_LEN = 1024
MAX_STAT_ENTRIES = 256
MAX_MEMBERS = 4096
MAX_BLOCK_TOKENS = 1 << 16
MAX_REQUEST_TOKENS = 1 << 20
MAX_CREDENTIAL_LEN = 512
MAX_OPAQUE_NAME = 1024
MAX_REGIONS = 64  # regions one connection holds at once
GET_INTO_ENTRY_SIZE = KEY_SIZE + 12
DEFAULT_MAX_PAYLOAD = 4 << 20  # a server that announces max_payload 0 means this

# The largest well-formed bodies of the fixed-shape answers: the client reads
# no more than these, whatever max_frame a server announced.
MAX_HELLO_BODY = 1 + (2 + MAX_STRING_LEN) + 16 + (2 + MAX_STRING_LEN) + 1
MAX_STAT_BODY = 4 + MAX_STAT_ENTRIES * (2 + MAX_STRING_LEN + 8)
MAX_MEMBERS_BODY = 8 + 4 + MAX_MEMBERS * (3 * (2 + MAX_STRING_LEN) + 1 + 8 + 1)

FLAG_RESPONSE = 1 << 0
FLAG_ERROR = 1 << 1
FLAG_STAMPED = 1 << 2

SESSION_STAMP_REQUIRED = 1 << 0

AUTH_NONE = 0
AUTH_BEARER = 1

_HDR = struct.Struct("<4sBBHQII")


class Op(enum.IntEnum):
    HELLO = 1
    LOOKUP = 2
    GET = 3
    PUT = 4
    DELETE = 5
    STAT = 6
    PING = 7
    ACQUIRE = 8
    FILL_COMMIT = 9
    FILL_ABORT = 10
    WAIT = 11
    MEMBERS = 12
    PUT_OPAQUE = 13
    REGISTER = 14
    UNREGISTER = 15
    GET_INTO = 16
    PUT_FROM = 17
    PUT_OPAQUE_FROM = 18  # version 5: PUT_OPAQUE's table, the bytes in a registered region

    @property
    def mutating(self) -> bool:
        return self in (Op.PUT, Op.DELETE, Op.ACQUIRE, Op.FILL_COMMIT, Op.FILL_ABORT, Op.PUT_OPAQUE, Op.PUT_FROM,
                        Op.PUT_OPAQUE_FROM)

    @property
    def since(self) -> int:
        if self >= Op.REGISTER:
            return VERSION_REGIONS
        return {Op.MEMBERS: 2, Op.PUT_OPAQUE: 3}.get(self, 1)


class Code(enum.IntEnum):
    OK = 0
    BAD_MAGIC = 1
    UNSUPPORTED_VERSION = 2
    UNKNOWN_OPCODE = 3
    FRAME_TOO_LARGE = 4
    MALFORMED = 5
    BATCH_TOO_LARGE = 6
    TOO_MANY_IN_FLIGHT = 7
    INVALID_IDENTITY = 8
    TENANT_MISMATCH = 9
    HELLO_REQUIRED = 10
    PAYLOAD_TOO_LARGE = 11
    SHUTTING_DOWN = 12
    INTERNAL = 13
    TIMEOUT = 14
    UNAUTHENTICATED = 15
    DENIED = 16
    RATE_LIMITED = 17
    REPLAY = 18
    WRONG_EPOCH = 19
    REGION = 20  # version 5: a region operation refused (TCP, no such region, not shareable memory, a bound)


def code_of(v: int):
    """The Code for v, or the int itself for a code this version does not know."""
    try:
        return Code(v)
    except ValueError:
        return v


class Status(enum.IntEnum):
    HIT = 0
    MISS = 1
    STORED = 2
    EXISTS = 3
    TOO_LARGE = 4
    NO_SPACE = 5
    DELETED = 6
    BUSY = 7
    FENCED = 8
    NOT_LEADER = 9
    ABORTED = 10
    KEY_MISMATCH = 11
    READ_ONLY = 12  # version 4, PUT and PUT_OPAQUE: the node's control plane is unreachable
    FAULT = 13  # version 5, GET_INTO, PUT_FROM, PUT_OPAQUE_FROM: the region faulted; the server dropped it

    @property
    def since(self) -> int:
        """The protocol version that introduced this status."""
        return {Status.READ_ONLY: 4, Status.FAULT: 5}.get(self, 1)


class RegionMode(enum.IntEnum):
    """How the server copies to and from a registered region (REGISTER's answer)."""
    SEALED = 0  # a memfd sealed against shrinking: plain copies
    GUARDED = 1  # a file that cannot be sealed (/dev/shm): every copy is fault-guarded


class Outcome(enum.IntEnum):
    """ACQUIRE outcomes."""
    HIT = 0
    LEAD = 1
    JOINED = 2
    DENIED = 3


class Notice(enum.IntEnum):
    """WAIT notices."""
    PENDING = 0
    FINISHED = 1
    FAILED = 2
    FENCED = 3
    PROMOTED = 4


@dataclass(frozen=True)
class Header:
    version: int
    op: int
    flags: int
    request_id: int
    body_len: int


def encode_header(op: int, flags: int, request_id: int, body_len: int) -> bytes:
    return _HDR.pack(MAGIC, FRAME_VERSION, op, flags, request_id, body_len, 0)


def decode_header(b) -> Header:
    """Parse a response header; raises MalformedError on bad magic, reserved bytes
    or a frame version other than 1."""
    if len(b) != HEADER_SIZE:
        raise MalformedError("gpucache/wire: header is %d bytes, want %d" % (len(b), HEADER_SIZE))
    magic, ver, op, flags, rid, blen, reserved = _HDR.unpack(b)
    if magic != MAGIC:
        raise MalformedError("gpucache/wire: bad magic %r" % (magic,))
    if reserved != 0:
        raise MalformedError("gpucache/wire: reserved header bytes are not zero")
    if ver != FRAME_VERSION:
        raise MalformedError("gpucache/wire: frame version %d, want %d" % (ver, FRAME_VERSION))
    return Header(ver, op, flags, rid, blen)


def stamp(unix_nanos: int = None, nonce: bytes = None) -> bytes:
    """A replay stamp: u64 LE unix nanoseconds (top bit clear) | 16-byte nonce."""
    if unix_nanos is None:
        unix_nanos = time.time_ns()
    if nonce is None:
        nonce = os.urandom(16)
    if not 0 <= unix_nanos < (1 << 63):
        raise ValueError("gpucache/wire: stamp time %d out of range" % unix_nanos)
    if len(nonce) != 16:
        raise ValueError("gpucache/wire: nonce must be 16 bytes")
    return struct.pack("<Q", unix_nanos) + bytes(nonce)


def parse_stamp(b) -> Tuple[int, bytes]:
    """(unix_nanos, nonce) of a 24-byte stamp; MalformedError otherwise."""
    b = bytes(b)
    if len(b) != STAMP_SIZE:
        raise MalformedError("gpucache/wire: stamp is %d bytes, want %d" % (len(b), STAMP_SIZE))
    t = struct.unpack_from("<Q", b)[0]
    if t >> 63:
        raise MalformedError("gpucache/wire: stamp time has the top bit set")
    return t, b[8:]


# ---- encoders ----

def _str(s) -> bytes:
    b = s.encode("utf-8") if isinstance(s, str) else bytes(s)
    if len(b) > MAX_STRING_LEN:
        raise ValueError("gpucache/wire: string of %d bytes exceeds %d" % (len(b), MAX_STRING_LEN))
    return struct.pack("<H", len(b)) + b


def _blob(ns: bytes) -> bytes:
    if len(ns) > MAX_NAMESPACE_LEN:
        raise ValueError("gpucache/wire: namespace of %d bytes exceeds %d" % (len(ns), MAX_NAMESPACE_LEN))
    return struct.pack("<I", len(ns)) + ns


def _keys(keys: Sequence[bytes]) -> bytes:
    for k in keys:
        if len(k) != KEY_SIZE:
            raise ValueError("gpucache/wire: key of %d bytes, want %d" % (len(k), KEY_SIZE))
    return struct.pack("<I", len(keys)) + b"".join(bytes(k) for k in keys)


def hello_request(min_version: int, max_version: int, tenant: str, client: str,
                  auth: bool = False, auth_kind: int = AUTH_NONE, credential: bytes = b"") -> bytes:
    b = bytes((min_version, max_version)) + _str(tenant) + _str(client)
    if auth:
        if len(credential) > MAX_CREDENTIAL_LEN:
            raise ValueError("gpucache/wire: credential of %d bytes exceeds %d" % (len(credential), MAX_CREDENTIAL_LEN))
        b += struct.pack("<BH", auth_kind, len(credential)) + bytes(credential)
    return b


def lookup_request(ns: bytes, lease_ttl_ms: int, keys) -> bytes:
    return _blob(ns) + struct.pack("<I", lease_ttl_ms) + _keys(keys)


def get_request(ns: bytes, lease_id: int, keys) -> bytes:
    return _blob(ns) + struct.pack("<Q", lease_id) + _keys(keys)


def delete_request(ns: bytes, keys) -> bytes:
    return _blob(ns) + _keys(keys)


acquire_request = delete_request


@dataclass(frozen=True)
class PutBlock:
    key: bytes
    parent: bytes
    valid_length: int
    length: int
    position: int
    tokens: Tuple[int, ...]


def _put_entry(blk: PutBlock) -> bytes:
    n = len(blk.tokens)
    if not 1 <= n <= MAX_BLOCK_TOKENS:
        raise ValueError("gpucache/wire: a block has %d token ids, want 1..%d" % (n, MAX_BLOCK_TOKENS))
    return (bytes(blk.key) + bytes(blk.parent)
            + struct.pack("<IIQI%dI" % n, blk.valid_length, blk.length, blk.position, n, *blk.tokens))


def put_table(ns: bytes, blocks: Sequence[PutBlock]) -> bytes:
    """The PUT table (without its u32 table_length prefix)."""
    return _blob(ns) + struct.pack("<I", len(blocks)) + b"".join(_put_entry(b) for b in blocks)


@dataclass(frozen=True)
class FillToken:
    fill: int
    epoch: int
    turn: int


_TOKEN = struct.Struct("<QQI")


def fill_commit_table(ns: bytes, entries: Sequence[Tuple[FillToken, PutBlock]]) -> bytes:
    return _blob(ns) + struct.pack("<I", len(entries)) + b"".join(
        _TOKEN.pack(t.fill, t.epoch, t.turn) + _put_entry(b) for t, b in entries)


def fill_abort_request(ns: bytes, tokens: Sequence[FillToken]) -> bytes:
    return _blob(ns) + struct.pack("<I", len(tokens)) + b"".join(_TOKEN.pack(t.fill, t.epoch, t.turn) for t in tokens)


def wait_request(ns: bytes, timeout_ms: int, fills: Sequence[int]) -> bytes:
    return _blob(ns) + struct.pack("<II", timeout_ms, len(fills)) + b"".join(struct.pack("<Q", f) for f in fills)


def put_opaque_table(ns: bytes, entries: Sequence[Tuple[bytes, bytes, int]]) -> bytes:
    """The PUT_OPAQUE table: entries are (key, name, payload length)."""
    out = [_blob(ns), struct.pack("<I", len(entries))]
    for key, name, length in entries:
        if not 1 <= len(name) <= MAX_OPAQUE_NAME:
            raise ValueError("gpucache/wire: opaque name of %d bytes, want 1..%d" % (len(name), MAX_OPAQUE_NAME))
        out.append(bytes(key) + struct.pack("<H", len(name)) + bytes(name) + struct.pack("<I", length))
    return b"".join(out)


def with_table_length(table: bytes) -> bytes:
    return struct.pack("<I", len(table)) + table


# ---- registered regions (version 5) ----

_U32_MAX = 0xFFFFFFFF
_U64_MAX = (1 << 64) - 1


def register_request(region: int, length: int) -> bytes:
    """REGISTER: u32 region (> 0) | u64 length (> 0, <= 2^63-1). The
    descriptor travels beside the frame as SCM_RIGHTS."""
    if not 0 < region <= _U32_MAX:
        raise ValueError("gpucache/wire: region id %d out of range 1..%d" % (region, _U32_MAX))
    if not 0 < length < (1 << 63):
        raise ValueError("gpucache/wire: region length %d out of range" % length)
    return struct.pack("<IQ", region, length)


def unregister_request(region: int) -> bytes:
    """UNREGISTER: u32 region (> 0)."""
    if not 0 < region <= _U32_MAX:
        raise ValueError("gpucache/wire: region id %d out of range 1..%d" % (region, _U32_MAX))
    return struct.pack("<I", region)


_SLOT = struct.Struct("<QI")


def get_into_request(ns: bytes, lease_id: int, region: int, keys: Sequence[bytes],
                     slots: Sequence[Tuple[int, int]]) -> bytes:
    """GET_INTO: blob namespace | u64 lease | u32 region | u32 count |
    count x {key, u64 offset, u32 capacity}; slots are (offset, capacity)."""
    if len(keys) != len(slots):
        raise ValueError("gpucache/wire: %d keys for %d slots" % (len(keys), len(slots)))
    if not 0 < region <= _U32_MAX:
        raise ValueError("gpucache/wire: region id %d out of range 1..%d" % (region, _U32_MAX))
    out = [_blob(ns), struct.pack("<QII", lease_id, region, len(keys))]
    for k, (off, cap) in zip(keys, slots):
        if len(k) != KEY_SIZE:
            raise ValueError("gpucache/wire: key of %d bytes, want %d" % (len(k), KEY_SIZE))
        if not 0 <= off <= _U64_MAX or not 0 <= cap <= _U32_MAX:
            raise ValueError("gpucache/wire: slot (%d, %d) out of range" % (off, cap))
        out.append(bytes(k))
        out.append(_SLOT.pack(off, cap))
    return b"".join(out)


def put_from_head(region: int, offsets: Sequence[int]) -> bytes:
    """The part of a PUT_FROM or PUT_OPAQUE_FROM body before its table
    (put_table or put_opaque_table, with no table-length prefix):
    u32 region | u32 count | count x u64 offset."""
    if not 0 < region <= _U32_MAX:
        raise ValueError("gpucache/wire: region id %d out of range 1..%d" % (region, _U32_MAX))
    return struct.pack("<II%dQ" % len(offsets), region, len(offsets), *offsets)


def put_from_request(region: int, offsets: Sequence[int], ns: bytes, blocks: Sequence["PutBlock"]) -> bytes:
    """A whole PUT_FROM body: head, then the PUT table of blocks."""
    if len(offsets) != len(blocks):
        raise ValueError("gpucache/wire: %d offsets for %d blocks" % (len(offsets), len(blocks)))
    return put_from_head(region, offsets) + put_table(ns, blocks)


def put_opaque_from_request(region: int, offsets: Sequence[int], ns: bytes,
                            entries: Sequence[Tuple[bytes, bytes, int]]) -> bytes:
    """A whole PUT_OPAQUE_FROM body: head, then the PUT_OPAQUE table of
    entries (key, name, payload length); entry i's bytes start at offsets[i]
    in the region."""
    if len(offsets) != len(entries):
        raise ValueError("gpucache/wire: %d offsets for %d entries" % (len(offsets), len(entries)))
    return put_from_head(region, offsets) + put_opaque_table(ns, entries)


# ---- decoders ----

class Reader:
    """Strict little-endian reader over a bytes-like body."""

    __slots__ = ("b", "off")

    def __init__(self, b):
        self.b = memoryview(b).cast("B") if not isinstance(b, bytes) else b
        self.off = 0

    def left(self) -> int:
        return len(self.b) - self.off

    def take(self, n: int):
        if n < 0 or n > self.left():
            raise MalformedError("gpucache/wire: truncated: need %d bytes, have %d" % (n, self.left()))
        v = self.b[self.off:self.off + n]
        self.off += n
        return v

    def _unpack(self, fmt: str, n: int):
        if n > self.left():
            raise MalformedError("gpucache/wire: truncated: need %d bytes, have %d" % (n, self.left()))
        v = struct.unpack_from(fmt, self.b, self.off)[0]
        self.off += n
        return v

    def u8(self) -> int:
        return self._unpack("<B", 1)

    def u16(self) -> int:
        return self._unpack("<H", 2)

    def u32(self) -> int:
        return self._unpack("<I", 4)

    def u64(self) -> int:
        return self._unpack("<Q", 8)

    def str(self, limit: int = MAX_STRING_LEN) -> str:
        n = self.u16()
        if n > limit:
            raise MalformedError("gpucache/wire: string of %d bytes exceeds %d" % (n, limit))
        try:
            return bytes(self.take(n)).decode("utf-8")
        except UnicodeDecodeError as e:
            raise MalformedError("gpucache/wire: string is not UTF-8: %s" % e) from None

    def count(self, limit: int, elem_size: int) -> int:
        n = self.u32()
        if n > limit:
            raise MalformedError("gpucache/wire: BATCH_TOO_LARGE: %d entries exceed limit %d" % (n, limit))
        if n * elem_size > self.left():
            raise MalformedError("gpucache/wire: %d entries of %d bytes do not fit in %d bytes" % (n, elem_size, self.left()))
        return n

    def done(self):
        if self.left() != 0:
            raise MalformedError("gpucache/wire: %d trailing bytes" % self.left())


@dataclass(frozen=True)
class HelloResponse:
    version: int
    server: str
    max_frame: int
    max_batch: int
    max_in_flight: int
    max_payload: int
    has_session: bool = False
    tenant: str = ""
    session_flags: int = 0


def decode_hello_response(b) -> HelloResponse:
    r = Reader(b)
    version = r.u8()
    server = r.str()
    mf, mb, mi, mp = r.u32(), r.u32(), r.u32(), r.u32()
    if r.left() == 0:
        return HelloResponse(version, server, mf, mb, mi, mp)
    tenant = r.str()
    flags = r.u8()
    r.done()
    if not tenant:
        raise MalformedError("gpucache/wire: HELLO session tenant is empty")
    if flags & ~SESSION_STAMP_REQUIRED:
        raise MalformedError("gpucache/wire: unknown session flags %#x" % flags)
    return HelloResponse(version, server, mf, mb, mi, mp, True, tenant, flags)


def decode_error(b) -> ProtocolError:
    r = Reader(b)
    code = code_of(r.u16())
    msg = r.str()
    if code == Code.WRONG_EPOCH:
        epoch = r.u64()
        r.done()
        return ProtocolError(code, msg, epoch=epoch)
    retry = 0.0
    if r.left() == 4:
        ms = r.u32()
        if ms == 0:
            raise MalformedError("gpucache/wire: a zero retry-after must be omitted")
        retry = ms / 1000.0
    r.done()
    return ProtocolError(code, msg, retry_after=retry)


@dataclass(frozen=True)
class LookupResponse:
    hits: int
    lease_id: int
    lease_ttl_ms: int


def decode_lookup_response(b, nkeys: int) -> LookupResponse:
    r = Reader(b)
    hits, lease, ttl = r.u32(), r.u64(), r.u32()
    r.done()
    if hits > nkeys:
        raise MalformedError("gpucache/wire: %d hits for %d keys" % (hits, nkeys))
    if lease == 0 and ttl != 0:
        raise MalformedError("gpucache/wire: lease TTL without a lease")
    return LookupResponse(hits, lease, ttl)


def get_body_limit(nkeys: int, largest: int) -> int:
    """The longest GET answer body for nkeys keys none of whose payloads is
    longer than largest: u32 table length, the table (u32 count, 5 bytes a
    key), then at most largest bytes a key."""
    return 4 + 4 + 5 * nkeys + nkeys * largest


def decode_get_table(b, nkeys: int) -> List[Tuple[int, int]]:
    """The GET response table: (status, length) per key; count must equal nkeys."""
    r = Reader(b)
    n = r.count(DEFAULT_MAX_BATCH if nkeys <= DEFAULT_MAX_BATCH else nkeys, 5)
    if n != nkeys:
        raise MalformedError("gpucache/wire: GET table has %d entries for %d keys" % (n, nkeys))
    out = []
    for i in range(n):
        st, ln = struct.unpack_from("<BI", r.b, r.off)
        r.off += 5
        if st == Status.HIT:
            out.append((Status.HIT, ln))
        elif st == Status.MISS and ln == 0:
            out.append((Status.MISS, 0))
        else:
            raise MalformedError("gpucache/wire: GET entry %d: status %d length %d" % (i, st, ln))
    r.done()
    return out


def decode_status_response(b, n_expected: int, allowed=None, version: int = VERSION_MAX) -> List[Status]:
    """One status per entry. A status introduced after version (the
    session's) is MALFORMED, as is one outside allowed when given."""
    r = Reader(b)
    n = r.count(max(n_expected, 1), 1)
    if n != n_expected:
        raise MalformedError("gpucache/wire: %d statuses for %d entries" % (n, n_expected))
    out = []
    for i in range(n):
        v = r.u8()
        if v > Status.FAULT or Status(v).since > version or (allowed is not None and v not in allowed):
            raise MalformedError("gpucache/wire: entry %d: unexpected status %d" % (i, v))
        out.append(Status(v))
    r.done()
    return out


def decode_register_response(b) -> RegionMode:
    """REGISTER's answer: u8 mode (SEALED or GUARDED)."""
    r = Reader(b)
    m = r.u8()
    r.done()
    if m > RegionMode.GUARDED:
        raise MalformedError("gpucache/wire: unknown region mode %d" % m)
    return RegionMode(m)


def decode_get_into_response(b, nkeys: int) -> List[Tuple[Status, int]]:
    """GET_INTO's answer, no payload: (status, length) per key. HIT and
    TOO_LARGE carry a length; MISS and FAULT carry 0; no other status."""
    r = Reader(b)
    n = r.count(max(nkeys, 1), 5)
    if n != nkeys:
        raise MalformedError("gpucache/wire: GET_INTO answered %d entries for %d keys" % (n, nkeys))
    out = []
    for i in range(n):
        st, ln = struct.unpack_from("<BI", r.b, r.off)
        r.off += 5
        if st in (Status.HIT, Status.TOO_LARGE) or (st in (Status.MISS, Status.FAULT) and ln == 0):
            out.append((Status(st), ln))
        else:
            raise MalformedError("gpucache/wire: GET_INTO entry %d: status %d length %d" % (i, st, ln))
    r.done()
    return out


def decode_stat_response(b) -> dict:
    r = Reader(b)
    n = r.count(MAX_STAT_ENTRIES, 10)
    out = {}
    for _ in range(n):
        name = r.str()
        out[name] = r.u64()
    r.done()
    return out


def decode_acquire_response(b, nkeys: int) -> List[Tuple[Outcome, FillToken]]:
    r = Reader(b)
    n = r.count(max(nkeys, 1), 21)
    if n != nkeys:
        raise MalformedError("gpucache/wire: ACQUIRE answered %d entries for %d keys" % (n, nkeys))
    out = []
    for i in range(n):
        o = r.u8()
        tok = FillToken(r.u64(), r.u64(), r.u32())
        if o > Outcome.DENIED:
            raise MalformedError("gpucache/wire: entry %d: unknown outcome %d" % (i, o))
        out.append((Outcome(o), tok))
    r.done()
    return out


def decode_wait_response(b, nfills: int) -> List[Tuple[Notice, FillToken]]:
    r = Reader(b)
    n = r.count(max(nfills, 1), 21)
    if n != nfills:
        raise MalformedError("gpucache/wire: WAIT answered %d entries for %d fills" % (n, nfills))
    out = []
    for i in range(n):
        k = r.u8()
        tok = FillToken(r.u64(), r.u64(), r.u32())
        if k > Notice.PROMOTED:
            raise MalformedError("gpucache/wire: entry %d: unknown notice %d" % (i, k))
        out.append((Notice(k), tok))
    r.done()
    return out


def decode_members_response(b):
    """(epoch, [Member]) of a MEMBERS response, checked as the spec says."""
    from .placement import Member, MEMBER_DRAINING
    r = Reader(b)
    epoch = r.u64()
    n = r.count(MAX_MEMBERS, 16)
    if epoch == 0 and n:
        raise MalformedError("gpucache/wire: members under epoch 0")
    members, prev = [], None
    for i in range(n):
        mid, addr, dom = r.str(), r.str(), r.str()
        proto, cap, flags = r.u8(), r.u64(), r.u8()
        if not mid or not addr or not dom or cap == 0 or proto == 0 or flags & ~MEMBER_DRAINING:
            raise MalformedError("gpucache/wire: member %d is invalid" % i)
        if prev is not None and mid.encode() <= prev:
            raise MalformedError("gpucache/wire: member ids not increasing at %d" % i)
        prev = mid.encode()
        members.append(Member(mid, addr, dom, proto, cap, flags))
    r.done()
    return epoch, members
