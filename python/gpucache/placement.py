"""Weighted rendezvous placement: which member of a cluster view owns a key.

This is part of the wire contract (api/wire/doc.go, "Placement"; Go
api/placement/placement.go) and matches api/placement/testdata/
placement_golden.json:

    seed(m)  = FNV-1a 64 over the bytes of m.id
    k(key)   = little-endian u64 of key[0:8]
    h        = splitmix64 finalizer of k ^ seed(m)
    u        = (float(h >> 12) + 0.5) / 2**52
    score    = -(capacity / 2**30) / ln(u)

The owner is the active (not draining) member with the highest score; ties
go to the smaller id (byte order).
"""

import math
import struct
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

_M64 = (1 << 64) - 1
MEMBER_DRAINING = 1


@dataclass(frozen=True)
class Member:
    """One member of a cluster view, as MEMBERS returns it."""

    id: str
    addr: str
    domain: str = ""
    proto: int = 1
    capacity: int = 1 << 30
    flags: int = 0

    @property
    def draining(self) -> bool:
        return bool(self.flags & MEMBER_DRAINING)


def member_seed(member_id) -> int:
    """FNV-1a 64 of the member id's bytes (UTF-8 for a str)."""
    b = member_id.encode("utf-8") if isinstance(member_id, str) else bytes(member_id)
    h = 0xCBF29CE484222325
    for c in b:
        h = ((h ^ c) * 0x100000001B3) & _M64
    return h


def mix64(z: int) -> int:
    """The SplitMix64 finalizer (a bijection on u64)."""
    z &= _M64
    z ^= z >> 30
    z = (z * 0xBF58476D1CE4E5B9) & _M64
    z ^= z >> 27
    z = (z * 0x94D049BB133111EB) & _M64
    z ^= z >> 31
    return z


def key_word(key: bytes) -> int:
    return struct.unpack_from("<Q", key, 0)[0]


def score(seed: int, weight: float, k: int) -> float:
    u = (float(mix64(k ^ seed) >> 12) + 0.5) * 2.0 ** -52
    return -weight / math.log(u)


class View:
    """A cluster view: epoch and members. Epoch 0 with no members is a single
    node that owns every key (owner() then returns None and callers use their
    one address)."""

    def __init__(self, epoch: int, members: Sequence[Member]):
        self.epoch = epoch
        self.members = sorted(members, key=lambda m: m.id.encode("utf-8"))
        self._slots = [(member_seed(m.id), m.capacity / float(1 << 30), m)
                       for m in self.members if not m.draining]

    @property
    def clustered(self) -> bool:
        return self.epoch != 0

    def owner(self, key: bytes) -> Optional[Member]:
        """The active member with the highest score, or None without one."""
        k = key_word(key)
        best, bs = None, 0.0
        for seed, w, m in self._slots:
            sc = score(seed, w, k)
            if best is None or sc > bs:  # slots ascend by id: a tie keeps the smaller id
                best, bs = m, sc
        return best

    def route(self, keys: Sequence[bytes]) -> Dict[str, List[int]]:
        """Indexes of keys grouped by owner id; keys without an owner are left out."""
        out: Dict[str, List[int]] = {}
        for i, key in enumerate(keys):
            m = self.owner(key)
            if m is not None:
                out.setdefault(m.id, []).append(i)
        return out
