package control

import (
	"math/rand/v2"
	"testing"

	"github.com/gpucache/gpucache/api/identity"
)

// The placement tests (and their helpers' twins) live with the placement
// code in api/placement; these are the helpers the membership and
// isolation tests use.

const gib = 1 << 30

func mem(id, domain string, capGiB uint64) Member {
	return Member{ID: MemberID(id), Addr: id + ":7400", FaultDomain: domain, ProtoVersion: 1, CapacityBytes: capGiB * gib}
}

func mustView(t testing.TB, epoch uint64, ms ...Member) View {
	t.Helper()
	v, err := NewView(epoch, ms)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func randomKeys(n int, seed uint64) []identity.BlockKey {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	keys := make([]identity.BlockKey, n)
	for i := range keys {
		for j := 0; j < 32; j += 8 {
			v := r.Uint64()
			for b := 0; b < 8; b++ {
				keys[i][j+b] = byte(v >> (8 * b))
			}
		}
	}
	return keys
}
