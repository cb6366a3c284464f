package server

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/directory"
	"github.com/gpucache/gpucache/internal/hot"
	"github.com/gpucache/gpucache/internal/lower"
	"github.com/gpucache/gpucache/internal/testfix"
)

// tenantChain returns n chained identities of tenant's namespace: block i
// has position 16*i and the key of block i-1 as parent.
func tenantChain(t *testing.T, tenant string, seed uint32, n int) []identity.CacheIdentity {
	t.Helper()
	ids := make([]identity.CacheIdentity, n)
	var parent identity.BlockKey
	for i := range ids {
		toks := make([]uint32, 16)
		for j := range toks {
			toks[j] = seed*1000 + uint32(i*16+j)
		}
		ids[i] = identity.CacheIdentity{Namespace: testNamespace(tenant), Parent: parent, Position: uint64(16 * i),
			Tokens: toks, ValidLength: 16}
		parent = mustKey(t, ids[i])
	}
	return ids
}

// tenantHarness is a server over a 32 MiB hot tier (a tenant's share is
// half of it, 16 MiB), a directory of 64 fill slots (a tenant's share is
// 32), and a cold tier holding the blocks in cold. Reserved receives the
// result of each PUT reservation of tenant "acme".
type tenantHarness struct {
	ts       *testServer
	reserved chan error
}

func startTenantHarness(t *testing.T, cold map[identity.BlockKey][]byte) *tenantHarness {
	t.Helper()
	dir, err := directory.New(directory.Config{MaxFills: 64, FillDeadline: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dir.Close) // after the server's shutdown, registered next
	h := &tenantHarness{reserved: make(chan error, 256)}
	hc := hot.Config{CapacityBytes: 32 << 20, MinClass: 16 << 10, MaxClass: 1 << 20, SlabBytes: 2 << 20}
	h.ts = startServerStore(t, hc, func(c *Config) {
		c.Directory = dir
		c.Hooks = &Hooks{Reserved: func(tenant string, err error) {
			if tenant == "acme" {
				h.reserved <- err
			}
		}}
		c.Lower = &tierFuncs{refill: func(_ context.Context, _ identity.Namespace, key identity.BlockKey, alloc lower.Alloc) (int, bool) {
			p, ok := cold[key]
			if !ok {
				return 0, false
			}
			dst, ok := alloc(len(p))
			if !ok {
				return 0, false
			}
			return copy(dst, p), true
		}}
	})
	return h
}

// hogResult is what tenant acme got while taking all it could.
type hogResult struct {
	leased, leaseRefused  int // single-block leases granted, and the big lease refused
	leaseHits             uint32
	stalled, stallRefused int // PUTs left waiting for their payload, and refused
	fillsLed, fillsDenied int
}

// hog makes tenant acme take everything it can: 24 blocks of 256 KiB
// stored and leased one lease each (6 MiB), 30 PUTs of a 1 MiB block that
// never send their payload (each on its own connection, which the server
// reads from until the payload arrives), one lease over all its blocks
// again, and an ACQUIRE of 64 new keys. It returns the stalled
// connections too.
func hog(t *testing.T, h *tenantHarness) (hogResult, []*rawConn) {
	t.Helper()
	var r hogResult
	var stalled []*rawConn
	blob := mustCanonical(t, testNamespace("acme"))
	a := helloConn(t, h.ts.addr, "acme")
	ids := tenantChain(t, "acme", 7, 24)
	for i := range ids {
		ids[i].Parent, ids[i].Position = identity.BlockKey{}, 0 // 24 first blocks, no chain
		if st := a.put(blob, ids[i], testfix.Payload(256<<10, byte(i))); st != wire.StatusStored {
			t.Fatalf("acme put %d: %s", i, st)
		}
		<-h.reserved
		if l := a.lookup(blob, 30_000, wireKeysOf(t, ids[i])); l.Hits == 1 && l.LeaseID != 0 {
			r.leased++
		}
	}
	stall := tenantChain(t, "acme", 8, 30)
	for i := range stall {
		id := stall[i]
		id.Parent, id.Position = identity.BlockKey{}, 0
		c := helloConn(t, h.ts.addr, "acme")
		meta := wire.AppendMeta(nil, (&wire.PutRequest{Namespace: blob,
			Blocks: []wire.PutBlock{putBlock(mustKey(t, id), id, 1<<20)}}).AppendTo(nil))
		hdr := wire.Header{Version: wire.FrameVersion, Op: wire.OpPut, RequestID: 1, BodyLen: uint32(len(meta) + 1<<20)}
		c.writeRaw(append(hdr.Append(nil), meta...)) // and no payload
		if err := <-h.reserved; err == nil {
			r.stalled++
		} else {
			r.stallRefused++
		}
		stalled = append(stalled, c)
	}
	l := a.lookup(blob, 30_000, wireKeysOf(t, ids...))
	r.leaseHits = l.Hits
	if l.LeaseID == 0 {
		r.leaseRefused++
	}
	var keys []identity.BlockKey
	for i := range 64 {
		keys = append(keys, identity.BlockKey{byte(i), 0xac})
	}
	for _, e := range a.acquire(blob, keys...) {
		switch e.Outcome {
		case wire.AcquireLead:
			r.fillsLed++
		case wire.AcquireDenied:
			r.fillsDenied++
		}
	}
	return r, stalled
}

// tenantBetaScript is tenant beta's fixed script: a chain PUT, LOOKUP with
// a lease, GET under the lease, a repeated PUT, ACQUIRE and FILL_COMMIT of
// a new block, ACQUIRE of it again, GET of a block only the cold tier
// has, and a last LOOKUP. It returns what beta saw.
func tenantBetaScript(t *testing.T, h *tenantHarness, coldID identity.CacheIdentity) []string {
	t.Helper()
	var out []string
	log := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	blob := mustCanonical(t, testNamespace("beta"))
	b := helloConn(t, h.ts.addr, "beta")
	ids := tenantChain(t, "beta", 1, 8)
	payloads := make([][]byte, len(ids))
	for i := range payloads {
		payloads[i] = testfix.Payload(64<<10, byte(100+i))
	}
	log("put chain: %v", b.putMany(blob, ids, payloads))
	l := b.lookup(blob, 30_000, wireKeysOf(t, ids...))
	log("lookup: hits %d leased %v", l.Hits, l.LeaseID != 0)
	keys := make([]identity.BlockKey, len(ids))
	for i := range ids {
		keys[i] = mustKey(t, ids[i])
	}
	resp, payload, _ := b.get(blob, l.LeaseID, keys...)
	var want []byte
	for i, blk := range resp.Blocks {
		if blk.Status == wire.StatusHit {
			want = append(want, payloads[i]...)
		}
		log("get %d: %s", i, blk.Status)
	}
	log("payload intact: %v", bytes.Equal(payload, want))
	log("put again: %s", b.put(blob, ids[2], payloads[2]))

	fill := tenantChain(t, "beta", 2, 1)[0]
	e := b.acquire(blob, mustKey(t, fill))[0]
	log("acquire: %s", e.Outcome)
	if e.Outcome == wire.AcquireLead {
		log("fill commit: %s", b.commit(blob, e.Token, fill, testfix.Payload(32<<10, 9)))
	}
	log("acquire again: %s", b.acquire(blob, mustKey(t, fill))[0].Outcome)

	resp, payload, _ = b.get(blob, 0, mustKey(t, coldID))
	log("cold get: %s, intact %v", resp.Blocks[0].Status, bytes.Equal(payload, testfix.Payload(48<<10, 77)))
	l = b.lookup(blob, 0, wireKeysOf(t, append(ids, fill, coldID)...))
	log("lookup all: hits %d", l.Hits)
	return out
}

// TestTenantAtItsCapsDoesNotStarveAnother: one tenant at its caps does
// not change another tenant's results, over the wire. Tenant acme leases, stalls PUTs and ACQUIREs all it can (with
// no per-tenant caps it pinned and reserved the whole hot tier, so every
// other PUT answered NO_SPACE, and took every fill slot, so other
// tenants' ACQUIREs were DENIED and their cold-tier refills never ran).
// Tenant beta's script must get exactly the answers it gets on a server
// of its own.
func TestTenantAtItsCapsDoesNotStarveAnother(t *testing.T) {
	coldID := tenantChain(t, "beta", 3, 1)[0]
	cold := map[identity.BlockKey][]byte{mustKey(t, coldID): testfix.Payload(48<<10, 77)}

	want := tenantBetaScript(t, startTenantHarness(t, cold), coldID)

	h := startTenantHarness(t, cold)
	r, stalled := hog(t, h)
	// acme's share is 16 MiB of hot tier: 6 MiB of leases plus ten 1 MiB
	// PUTs in flight; its second lease (6 MiB more) is refused; and 32 of
	// the 64 fill slots.
	if r.leased != 24 || r.stalled != 10 || r.stallRefused != 20 || r.leaseRefused != 1 || r.leaseHits != 24 ||
		r.fillsLed != 32 || r.fillsDenied != 32 {
		t.Errorf("tenant acme got %+v; want 24 leases, 10 stalled and 20 refused PUTs, the big lease refused, 32 fills led and 32 denied", r)
	}
	got := tenantBetaScript(t, h, coldID)
	if !slices.Equal(got, want) {
		t.Errorf("tenant beta's answers changed while acme held its share:\n have %q\n want %q", got, want)
	}
	st := statsOf(h.ts.srv)
	if st["hot_tenant_rejects"] != 20 || st["hot_leases_refused"] != 1 || st["fill_denied_tenant"] != 32 {
		t.Errorf("stats: hot_tenant_rejects %d, hot_leases_refused %d, fill_denied_tenant %d",
			st["hot_tenant_rejects"], st["hot_leases_refused"], st["fill_denied_tenant"])
	}
	for _, c := range stalled {
		c.nc.Close() // the stalled PUTs end; their reservations are aborted
	}
}
