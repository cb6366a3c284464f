package placement

import (
	"encoding/binary"
	"math"

	"github.com/gpucache/gpucache/api/identity"
)

// Placement contract (wire level: clients and nodes of every version and
// language must compute exactly this; changing any step moves keys and
// needs a protocol version bump).
//
//	seed(m)     = FNV-1a 64 over the bytes of m.ID
//	                (offset 0xcbf29ce484222325, prime 0x100000001b3)
//	k(key)      = little-endian uint64 of key[0:8]
//	                (keys are SHA-256 outputs, so these bits are uniform)
//	h(m, key)   = mix64(k ^ seed(m)), mix64 the SplitMix64 finalizer:
//	                z ^= z >> 30; z *= 0xbf58476d1ce4e5b9
//	                z ^= z >> 27; z *= 0x94d049bb133111eb
//	                z ^= z >> 31
//	u           = (float64(h >> 12) + 0.5) / 2^52      in (0, 1), exact
//	w(m)        = float64(m.CapacityBytes) / 2^30       exact scaling
//	score(m, k) = -w(m) / ln(u)                        IEEE-754 binary64
//
// The owner of a key is the active (non-draining) member with the highest
// score; equal scores go to the smaller ID (byte order).
//
// The only non-exact step is ln. Two implementations whose ln differ in the
// last bit can disagree only when two scores are within an ulp of each
// other (about 2^-50 per key); the disagreement costs a WRONG_EPOCH round
// trip and then a miss, never a wrong payload.

// MemberSeed is FNV-1a 64 of the member ID: the per-member placement seed.
func MemberSeed(id MemberID) uint64 {
	h := uint64(0xcbf29ce484222325)
	for i := 0; i < len(id); i++ {
		h ^= uint64(id[i])
		h *= 0x100000001b3
	}
	return h
}

// mix64 is the SplitMix64 finalizer, a bijection on uint64.
func mix64(z uint64) uint64 {
	z ^= z >> 30
	z *= 0xbf58476d1ce4e5b9
	z ^= z >> 27
	z *= 0x94d049bb133111eb
	z ^= z >> 31
	return z
}

func keyWord(key identity.BlockKey) uint64 { return binary.LittleEndian.Uint64(key[:8]) }

// Score is the weighted rendezvous score of a member with the given seed and
// weight for key word k (see the contract above). Exported for golden tests
// and for other implementations to check against.
func Score(seed uint64, weight float64, k uint64) float64 {
	u := (float64(mix64(k^seed)>>12) + 0.5) * 0x1p-52
	return -weight / math.Log(u)
}

// ownerIndex is the index into v.members of the key's owner, or -1.
func (v View) ownerIndex(k uint64) int {
	best, bs := -1, 0.0
	for _, s := range v.slots {
		// Slots are in ascending ID order, so strict > keeps the smaller
		// ID on a tie.
		if sc := Score(s.seed, s.weight, k); best < 0 || sc > bs {
			best, bs = s.idx, sc
		}
	}
	return best
}

// Owner is the member that owns key under v: the active member with the
// highest weighted rendezvous score. ok is false when v has no active
// member (every key is then a miss).
func Owner(v View, key identity.BlockKey) (m Member, ok bool) {
	i := v.ownerIndex(keyWord(key))
	if i < 0 {
		return Member{}, false
	}
	return v.members[i], true
}

// Route splits a batch by owner: for each owning member, the indexes into
// keys (ascending) of the keys it owns. When v has no active member the
// result is empty and every key is a miss.
func Route(v View, keys []identity.BlockKey) map[MemberID][]int {
	out := make(map[MemberID][]int)
	if len(v.slots) == 0 {
		return out
	}
	per := make([][]int, len(v.members))
	for i := range keys {
		o := v.ownerIndex(keyWord(keys[i]))
		per[o] = append(per[o], i)
	}
	for i, idx := range per {
		if len(idx) > 0 {
			out[v.members[i].ID] = idx
		}
	}
	return out
}
