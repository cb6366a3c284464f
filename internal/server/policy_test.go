package server

import (
	"slices"
	"sync"
	"testing"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/hot"
	"github.com/gpucache/gpucache/internal/policy"
	"github.com/gpucache/gpucache/internal/testfix"
)

// recordingPolicy admits full blocks only and records what the store tells
// it. Its eviction order is insertion order. The store calls it under its
// lock; the test reads it under mu.
type recordingPolicy struct {
	mu       sync.Mutex
	offered  []policy.Block
	inserted []policy.Block
	ids      []policy.ID
}

func (p *recordingPolicy) Name() string { return "recording" }

func (p *recordingPolicy) Admit(b policy.Block) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.offered = append(p.offered, b)
	return !b.Partial
}

func (p *recordingPolicy) Insert(b policy.Block) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inserted = append(p.inserted, b)
	p.ids = append(p.ids, b.ID)
}

func (p *recordingPolicy) Touch(policy.ID) {}

func (p *recordingPolicy) Remove(id policy.ID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ids = slices.DeleteFunc(p.ids, func(x policy.ID) bool { return x == id })
}

func (p *recordingPolicy) Victims(yield func(policy.ID) bool) {
	for _, id := range p.ids {
		if !yield(id) {
			return
		}
	}
}

func (p *recordingPolicy) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ids)
}

// policyChain returns the identities of a chain of n blocks of
// testNamespace("acme") (16 tokens per block); the last one holds only
// lastValid tokens.
func policyChain(t *testing.T, seed uint32, n int, lastValid uint32) []identity.CacheIdentity {
	t.Helper()
	ids := make([]identity.CacheIdentity, n)
	var parent identity.BlockKey
	for i := range ids {
		id := testID(seed + uint32(i))
		id.Parent, id.Position = parent, uint64(16*i)
		if i == n-1 && lastValid < 16 {
			id.Tokens, id.ValidLength = id.Tokens[:lastValid], lastValid
		}
		ids[i] = id
		parent = mustKey(t, id)
	}
	return ids
}

// TestPutPolicyAdmission: a PUT block the policy refuses answers NO_SPACE,
// its payload is skipped (the next block of the same request and the next
// request are read in sync), and the policy learns each block's position,
// tokens, partial flag and cached parent.
func TestPutPolicyAdmission(t *testing.T) {
	p := &recordingPolicy{}
	ts := startServerStore(t, hot.Config{CapacityBytes: 32 << 20, MinClass: 16 << 10, MaxClass: 1 << 20, SlabBytes: 2 << 20, Policy: p}, nil)
	blob := mustCanonical(t, testNamespace("acme"))
	c := helloConn(t, ts.addr, "acme")

	chain := policyChain(t, 10, 3, 5) // 16, 16, 5 tokens: the last is partial
	other := testID(77)
	ids := append(chain, other)
	payloads := [][]byte{testfix.Payload(20<<10, 1), testfix.Payload(20<<10, 2), testfix.Payload(7<<10, 3), testfix.Payload(30<<10, 4)}
	st := c.putMany(blob, ids, payloads)
	want := []wire.Status{wire.StatusStored, wire.StatusStored, wire.StatusNoSpace, wire.StatusStored}
	if !slices.Equal(st, want) {
		t.Fatalf("statuses %v, want %v", st, want)
	}

	p.mu.Lock()
	offered, inserted := slices.Clone(p.offered), slices.Clone(p.inserted)
	p.mu.Unlock()
	if len(offered) != 4 || len(inserted) != 3 {
		t.Fatalf("offered %d, inserted %d", len(offered), len(inserted))
	}
	wantMeta := []struct {
		pos, tokens uint32
		partial     bool
	}{{0, 16, false}, {1, 16, false}, {2, 5, true}, {0, 16, false}}
	for i, m := range wantMeta {
		b := offered[i]
		if b.Position != m.pos || b.Tokens != m.tokens || b.Partial != m.partial {
			t.Fatalf("offered block %d: %+v, want position %d tokens %d partial %v", i, b, m.pos, m.tokens, m.partial)
		}
	}
	if inserted[0].Parent != policy.NoParent || inserted[1].Parent != inserted[0].ID || inserted[2].Parent != policy.NoParent {
		t.Fatalf("inserted parents: %+v", inserted)
	}
	if inserted[1].Position != 1 || inserted[2].Position != 0 || inserted[2].Tokens != 16 {
		t.Fatalf("inserted: %+v", inserted)
	}
	if offered[2].Parent != inserted[1].ID {
		t.Fatalf("refused block offered with parent %d, want %d", offered[2].Parent, inserted[1].ID)
	}

	// The stream is in sync: reads see exactly the stored blocks.
	keys := []identity.BlockKey{mustKey(t, ids[0]), mustKey(t, ids[1]), mustKey(t, ids[2]), mustKey(t, ids[3])}
	resp, payload, _ := c.get(blob, 0, keys...)
	off := 0
	for i, bm := range resp.Blocks {
		if wantHit := i != 2; (bm.Status == wire.StatusHit) != wantHit {
			t.Fatalf("block %d: %s", i, bm.Status)
		}
		if bm.Status == wire.StatusHit {
			equalBytes(t, payload[off:off+int(bm.Len)], payloads[i])
			off += int(bm.Len)
		}
	}
	// A full version of the refused block's position is admitted.
	full := policyChain(t, 10, 3, 16)[2]
	if s := c.put(blob, full, testfix.Payload(20<<10, 5)); s != wire.StatusStored {
		t.Fatalf("full block: %s", s)
	}
	if got := ts.store.Stats(); got.NotAdmitted != 1 || got.Blocks != 4 || p.Len() != 4 {
		t.Fatalf("Stats %+v, policy Len %d", got, p.Len())
	}
	_, body := c.roundTrip(wire.OpStat, nil)
	var sr wire.StatResponse
	if err := sr.Decode(body); err != nil {
		t.Fatal(err)
	}
	for _, e := range sr.Entries {
		if e.Name == "hot_not_admitted" && e.Value != 1 {
			t.Fatalf("hot_not_admitted = %d", e.Value)
		}
	}
}

// TestFillCommitPolicyMetadata: FILL_COMMIT passes position and partial to
// the policy too, and a refused block answers NO_SPACE.
func TestFillCommitPolicyMetadata(t *testing.T) {
	p := &recordingPolicy{}
	ts := startServerStore(t, hot.Config{CapacityBytes: 32 << 20, MinClass: 16 << 10, MaxClass: 1 << 20, SlabBytes: 2 << 20, Policy: p}, nil)
	blob := mustCanonical(t, testNamespace("acme"))
	c := helloConn(t, ts.addr, "acme")
	chain := policyChain(t, 40, 2, 3)
	if s := c.put(blob, chain[0], testfix.Payload(20<<10, 1)); s != wire.StatusStored {
		t.Fatalf("put: %s", s)
	}
	lead := c.acquire(blob, mustKey(t, chain[1]))[0]
	if lead.Outcome != wire.AcquireLead {
		t.Fatalf("acquire: %+v", lead)
	}
	if s := c.commit(blob, lead.Token, chain[1], testfix.Payload(5<<10, 2)); s != wire.StatusNoSpace {
		t.Fatalf("commit of a refused block: %s", s)
	}
	p.mu.Lock()
	last := p.offered[len(p.offered)-1]
	p.mu.Unlock()
	if last.Position != 1 || last.Tokens != 3 || !last.Partial {
		t.Fatalf("offered %+v", last)
	}
	// The session still works.
	if s := c.put(blob, testID(99), testfix.Payload(20<<10, 3)); s != wire.StatusStored {
		t.Fatalf("put after: %s", s)
	}
}
