"""Cache identities, their canonical encoding and block keys.

This mirrors Go's api/identity byte for byte (the golden vectors in
api/identity/testdata pin it; see its README.md):

    namespace encoding  "GCNS" | 0x01 | 0x0f | 15 fields, each u8 tag | u32 len | value
    identity encoding   "GCID" | 0x01 | 0x13 | the 15 fields | parent | position |
                        valid_length | tokens     (opaque: 0x10 fields, tag 20 = name)
    namespace digest    SHA-256(namespace encoding)
    block key           SHA-256("gpucache/blockkey/v1\\0" | digest | parent |
                        u32 valid_length | u32 n | n x u32 token)
    opaque key          SHA-256("gpucache/opaquekey/v1\\0" | digest | u32 len | name)

All integers are little-endian.
"""

import hashlib
import struct
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

from .errors import InvalidIdentity

KEY_SIZE = 32
ZERO_KEY = bytes(KEY_SIZE)
MAX_STRING = 256
MAX_BLOCK_TOKENS = 1 << 16
MAX_OPAQUE_LEN = 1024
MAX_CANONICAL_LEN = 4096

_NS_MAGIC = b"GCNS"
_ID_MAGIC = b"GCID"
_VERSION = 1
_NUM_NS_TAGS = 15
_TAG_PARENT, _TAG_POSITION, _TAG_VALID, _TAG_TOKENS, _TAG_OPAQUE = 16, 17, 18, 19, 20
_KEY_DOMAIN = b"gpucache/blockkey/v1\x00"
_OPAQUE_DOMAIN = b"gpucache/opaquekey/v1\x00"
_U32 = (1 << 32) - 1


@dataclass(frozen=True)
class Layout:
    """How the KV tensors of one block are laid out and sharded."""

    format: str
    tp_rank: int = 0
    tp_size: int = 1
    pp_rank: int = 0
    pp_size: int = 1
    layer_start: int = 0
    layer_count: int = 1
    kv_heads: int = 1
    head_dim: int = 1
    block_tokens: int = 16


@dataclass(frozen=True)
class Namespace:
    """Every part of an identity shared by all blocks of one token chain."""

    tenant: str
    trust_domain: str
    model_id: str
    config_revision: str
    tokenizer_revision: str
    adapter: str = ""
    rope: str = "none"
    dtype: str = "fp16"
    quantization: str = "none"
    layout: Layout = field(default_factory=lambda: Layout(format="flat"))

    def _str_fields(self):
        return (
            (1, "tenant", self.tenant, False),
            (2, "trust_domain", self.trust_domain, False),
            (3, "model_id", self.model_id, False),
            (4, "config_revision", self.config_revision, False),
            (5, "tokenizer_revision", self.tokenizer_revision, False),
            (6, "adapter", self.adapter, True),
            (7, "rope", self.rope, False),
            (8, "dtype", self.dtype, False),
            (9, "quantization", self.quantization, False),
            (10, "layout.format", self.layout.format, False),
        )

    def validate(self):
        for _, name, val, may_be_empty in self._str_fields():
            if not isinstance(val, str):
                raise InvalidIdentity("gpucache/identity: field %s is not a str" % name)
            n = len(val.encode("utf-8"))
            if n == 0 and not may_be_empty:
                raise InvalidIdentity("gpucache/identity: field %s is empty" % name)
            if n > MAX_STRING:
                raise InvalidIdentity("gpucache/identity: field %s is %d bytes, limit %d" % (name, n, MAX_STRING))
        l = self.layout
        for name in ("tp_rank", "tp_size", "pp_rank", "pp_size", "layer_start", "layer_count",
                     "kv_heads", "head_dim", "block_tokens"):
            v = getattr(l, name)
            if not isinstance(v, int) or v < 0 or v > _U32:
                raise InvalidIdentity("gpucache/identity: layout.%s %r is not a u32" % (name, v))
        if l.tp_rank >= l.tp_size:
            raise InvalidIdentity("gpucache/identity: tp_rank %d not below tp_size %d" % (l.tp_rank, l.tp_size))
        if l.pp_rank >= l.pp_size:
            raise InvalidIdentity("gpucache/identity: pp_rank %d not below pp_size %d" % (l.pp_rank, l.pp_size))
        if l.layer_count < 1 or l.layer_start + l.layer_count > _U32:
            raise InvalidIdentity("gpucache/identity: layers %d+%d invalid" % (l.layer_start, l.layer_count))
        if l.kv_heads < 1 or l.head_dim < 1:
            raise InvalidIdentity("gpucache/identity: kv_heads and head_dim must be >= 1")
        if not 1 <= l.block_tokens <= MAX_BLOCK_TOKENS:
            raise InvalidIdentity("gpucache/identity: block_tokens %d not in 1..%d" % (l.block_tokens, MAX_BLOCK_TOKENS))

    def _fields(self) -> bytes:
        out = bytearray()
        for tag, _, val, _ in self._str_fields():
            v = val.encode("utf-8")
            out += struct.pack("<BI", tag, len(v)) + v
        l = self.layout
        out += struct.pack("<BIII", 11, 8, l.tp_rank, l.tp_size)
        out += struct.pack("<BIII", 12, 8, l.pp_rank, l.pp_size)
        out += struct.pack("<BIII", 13, 8, l.layer_start, l.layer_count)
        out += struct.pack("<BIII", 14, 8, l.kv_heads, l.head_dim)
        out += struct.pack("<BII", 15, 4, l.block_tokens)
        return bytes(out)

    def canonical(self) -> bytes:
        """The canonical encoding: the namespace blob of the wire protocol."""
        self.validate()
        return _NS_MAGIC + bytes((_VERSION, _NUM_NS_TAGS)) + self._fields()

    def digest(self) -> bytes:
        return hashlib.sha256(self.canonical()).digest()


def namespace_digest(ns: Namespace) -> bytes:
    """SHA-256 of the namespace's canonical encoding (32 bytes)."""
    return ns.digest()


def _key_bytes(k, name="key") -> bytes:
    b = bytes(k)
    if len(b) != KEY_SIZE:
        raise InvalidIdentity("gpucache/identity: %s is %d bytes, want %d" % (name, len(b), KEY_SIZE))
    return b


def key_for(ns_digest: bytes, parent: bytes, tokens: Sequence[int], valid_length: int) -> bytes:
    """The BlockKey of a token-chain block (Go identity.KeyFor)."""
    h = hashlib.sha256(_KEY_DOMAIN)
    h.update(_key_bytes(ns_digest, "namespace digest"))
    h.update(_key_bytes(parent, "parent"))
    h.update(struct.pack("<II", valid_length, len(tokens)))
    h.update(struct.pack("<%dI" % len(tokens), *tokens))
    return h.digest()


def opaque_key(ns_digest: bytes, name: bytes) -> bytes:
    """The BlockKey of an opaque-key block (Go identity.OpaqueKey)."""
    name = bytes(name)
    h = hashlib.sha256(_OPAQUE_DOMAIN)
    h.update(_key_bytes(ns_digest, "namespace digest"))
    h.update(struct.pack("<I", len(name)))
    h.update(name)
    return h.digest()


@dataclass(frozen=True)
class CacheIdentity:
    """The full identity of one block: namespace, parent, position, tokens,
    valid length, or (for an opaque-key block) a name in place of the last four."""

    namespace: Optional[Namespace] = None
    parent: bytes = ZERO_KEY
    position: int = 0
    tokens: Tuple[int, ...] = ()
    valid_length: int = 0
    opaque: bytes = b""

    def validate(self, ns: Optional[Namespace] = None):
        ns = ns or self.namespace
        if ns is None:
            raise InvalidIdentity("gpucache/identity: identity has no namespace")
        ns.validate()
        if self.opaque:
            if len(self.opaque) > MAX_OPAQUE_LEN:
                raise InvalidIdentity("gpucache/identity: opaque name is %d bytes, limit %d" % (len(self.opaque), MAX_OPAQUE_LEN))
            if self.tokens or self.valid_length or self.position or bytes(self.parent) != ZERO_KEY:
                raise InvalidIdentity("gpucache/identity: an opaque-key identity has no parent, position, tokens or valid_length")
            return
        _key_bytes(self.parent, "parent")
        n = len(self.tokens)
        if n == 0:
            raise InvalidIdentity("gpucache/identity: field tokens is empty")
        if n > ns.layout.block_tokens:
            raise InvalidIdentity("gpucache/identity: %d tokens exceed block_tokens %d" % (n, ns.layout.block_tokens))
        if not 1 <= self.valid_length <= n:
            raise InvalidIdentity("gpucache/identity: valid_length %d not in 1..%d" % (self.valid_length, n))
        if self.position % ns.layout.block_tokens != 0:
            raise InvalidIdentity("gpucache/identity: position %d is not a multiple of block_tokens" % self.position)
        if (bytes(self.parent) == ZERO_KEY) != (self.position == 0):
            raise InvalidIdentity("gpucache/identity: parent must be zero exactly when position is 0")
        for t in self.tokens:
            if not 0 <= t <= _U32:
                raise InvalidIdentity("gpucache/identity: token id %r is not a u32" % (t,))

    def canonical(self, ns: Optional[Namespace] = None) -> bytes:
        ns = ns or self.namespace
        self.validate(ns)
        if self.opaque:
            o = bytes(self.opaque)
            return (_ID_MAGIC + bytes((_VERSION, _NUM_NS_TAGS + 1)) + ns._fields()
                    + struct.pack("<BI", _TAG_OPAQUE, len(o)) + o)
        n = len(self.tokens)
        return b"".join((
            _ID_MAGIC, bytes((_VERSION, _TAG_TOKENS)), ns._fields(),
            struct.pack("<BI", _TAG_PARENT, KEY_SIZE), bytes(self.parent),
            struct.pack("<BIQ", _TAG_POSITION, 8, self.position),
            struct.pack("<BII", _TAG_VALID, 4, self.valid_length),
            struct.pack("<BI%dI" % n, _TAG_TOKENS, 4 * n, *self.tokens),
        ))

    def key_in(self, ns_digest: bytes) -> bytes:
        """OpaqueKey or KeyFor under a digest the caller computed (never validates)."""
        if self.opaque:
            return opaque_key(ns_digest, self.opaque)
        return key_for(ns_digest, self.parent, self.tokens, self.valid_length)

    def key(self, ns: Optional[Namespace] = None) -> bytes:
        ns = ns or self.namespace
        self.validate(ns)
        return self.key_in(ns.digest())


def identities(ns: Namespace, tokens: Sequence[int]) -> List[CacheIdentity]:
    """Split tokens into blocks of layout.block_tokens (the last may be shorter)
    and chain them: block i has position i*block_tokens and block i-1's key as parent."""
    digest = ns.digest()
    bt = ns.layout.block_tokens
    out = []
    parent = ZERO_KEY
    toks = [int(t) for t in tokens]
    for pos in range(0, len(toks), bt):
        blk = tuple(toks[pos:pos + bt])
        ident = CacheIdentity(namespace=ns, parent=parent, position=pos, tokens=blk, valid_length=len(blk))
        ident.validate(ns)
        out.append(ident)
        parent = ident.key_in(digest)
    return out


def chain(ns: Namespace, tokens: Sequence[int]) -> List[bytes]:
    """The BlockKeys of a token chain (Go identity.Chain)."""
    digest = ns.digest()
    keys = []
    parent = ZERO_KEY
    bt = ns.layout.block_tokens
    ns.validate()
    toks = list(tokens)
    for pos in range(0, len(toks), bt):
        blk = toks[pos:pos + bt]
        parent = key_for(digest, parent, blk, len(blk))
        keys.append(parent)
    return keys
