package soak

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/rand/v2"

	"github.com/gpucache/gpucache/client"
)

// Oracle knows every block's payload without remembering any: a block's
// bytes are a pure function of its key (a ChaCha8 stream seeded by the
// key's SHA-256), and so is their length, in [Min, Max]. A key binds the
// block's whole identity (tenant, model, layout, parent chain, tokens), so
// a block served under the wrong identity, another tenant's block, a stale
// or torn payload all differ from what the oracle computes.
type Oracle struct {
	Min, Max int
}

// Size returns the payload length of key.
func (o Oracle) Size(k client.BlockKey) int {
	s := sha256.Sum256(append([]byte("gpucache-soak-size"), k[:]...))
	span := uint64(o.Max - o.Min + 1)
	return o.Min + int(binary.LittleEndian.Uint64(s[:8])%span)
}

// Payload returns key's payload, freshly allocated.
func (o Oracle) Payload(k client.BlockKey) []byte {
	b := make([]byte, o.Size(k))
	o.fill(k, b)
	return b
}

func (o Oracle) fill(k client.BlockKey, b []byte) {
	seed := sha256.Sum256(append([]byte("gpucache-soak-payload"), k[:]...))
	r := rand.NewChaCha8(seed)
	r.Read(b)
}

// Check reports whether got is key's payload. It generates the expected
// bytes in chunks and compares as it goes, so it allocates nothing beyond
// one small buffer.
func (o Oracle) Check(k client.BlockKey, got []byte) bool {
	if len(got) != o.Size(k) {
		return false
	}
	seed := sha256.Sum256(append([]byte("gpucache-soak-payload"), k[:]...))
	r := rand.NewChaCha8(seed)
	var buf [4096]byte
	for off := 0; off < len(got); off += len(buf) {
		n := min(len(buf), len(got)-off)
		r.Read(buf[:n])
		if string(buf[:n]) != string(got[off:off+n]) {
			return false
		}
	}
	return true
}

// chain is one token chain of a tenant: its blocks' identities and keys.
type chain struct {
	tokens []uint32
	ids    []client.CacheIdentity
	keys   []client.BlockKey
}

// keyspace is a tenant's chains: hot chains first, then scan chains.
type keyspace struct {
	ns     client.Namespace
	chains []chain
	hot    int // chains[:hot] are hot
}

// blockTokens is the tokens per block of every soak namespace.
const blockTokens = 16

// namespace returns the soak's namespace of a tenant.
func namespace(tenant, model string) client.Namespace {
	return client.Namespace{Tenant: tenant, TrustDomain: "soak", ModelID: model, ConfigRevision: "r1",
		TokenizerRevision: "t1", RoPE: "rope:theta=10000", DType: "fp16", Quantization: "none",
		Layout: client.Layout{Format: "raw", TPSize: 1, PPSize: 1, LayerCount: 1, KVHeads: 1, HeadDim: 1, BlockTokens: blockTokens}}
}

// newKeyspace builds hot+scan chains of blocks each for ns. Chain c's
// tokens are distinct from every other chain's, so no two chains share a
// block.
func newKeyspace(ns client.Namespace, hot, scan, blocks int) (*keyspace, error) {
	ks := &keyspace{ns: ns, hot: hot, chains: make([]chain, 0, hot+scan)}
	for c := range hot + scan {
		tokens := make([]uint32, blocks*blockTokens)
		for i := range tokens {
			tokens[i] = uint32(c)*uint32(blocks*blockTokens) + uint32(i) + 1
		}
		ids, err := client.Identities(ns, tokens)
		if err != nil {
			return nil, fmt.Errorf("gpucache/soak: chain %d: %w", c, err)
		}
		keys := make([]client.BlockKey, len(ids))
		for i := range ids {
			if keys[i], err = ids[i].Key(); err != nil {
				return nil, fmt.Errorf("gpucache/soak: chain %d block %d: %w", c, i, err)
			}
		}
		ks.chains = append(ks.chains, chain{tokens: tokens, ids: ids, keys: keys})
	}
	return ks, nil
}

// pick returns a chain: a scan chain with probability scanShare, else a
// hot one.
func (ks *keyspace) pick(rng *rand.Rand, scanShare float64) *chain {
	if rng.Float64() < scanShare && len(ks.chains) > ks.hot {
		return &ks.chains[ks.hot+rng.IntN(len(ks.chains)-ks.hot)]
	}
	return &ks.chains[rng.IntN(ks.hot)]
}
