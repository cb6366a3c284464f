package server

import (
	"fmt"
	"testing"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/control"
	"github.com/gpucache/gpucache/internal/testfix"
)

// TestReadOnlyPutOpaque: in read-only and unknown modes a PUT_OPAQUE
// stores nothing and answers READ_ONLY to a version-4 session and
// NO_SPACE to a version-3 one (which does not know READ_ONLY); the
// stream stays in sync and the refusals are counted in readonly_refused.
func TestReadOnlyPutOpaque(t *testing.T) {
	v := testView(t, 4)
	ts, cl := startClusterServer(t, "node-a", v, nil)
	ns := testNamespace("acme")
	blob := mustCanonical(t, ns)
	name := ""
	for i := 0; name == ""; i++ {
		if i > 10000 {
			t.Fatal("no opaque name owned by node-a")
		}
		n := fmt.Sprintf("ro-%d", i)
		if m, ok := control.Owner(v, opaqueKeyOf(t, ns, n)); ok && m.ID == "node-a" {
			name = n
		}
	}
	key := opaqueKeyOf(t, ns, name)
	v3, r3 := helloV(t, ts.addr, "acme", 1, wire.Version3)
	v4, r4 := helloV(t, ts.addr, "acme", 1, wire.Version4)
	if r3.Version != wire.Version3 || r4.Version != wire.Version4 {
		t.Fatalf("negotiated %d and %d, want 3 and 4", r3.Version, r4.Version)
	}
	payload := testfix.Payload(3000, 7)
	for _, mode := range []ControlMode{ControlReadOnly, ControlUnknown} {
		cl.SetMode(mode)
		for _, tc := range []struct {
			c    *rawConn
			v    uint8
			want wire.Status
		}{{v3, 3, wire.StatusNoSpace}, {v4, 4, wire.StatusReadOnly}} {
			st := tc.c.putOpaque(blob, []string{name}, []identity.BlockKey{key}, [][]byte{payload})
			if st[0] != tc.want {
				t.Fatalf("%s mode, session v%d: PUT_OPAQUE %s, want %s", mode, tc.v, st[0], tc.want)
			}
			tc.c.roundTrip(wire.OpPing, nil)
		}
	}
	cl.SetMode(ControlLive)
	if g, _, _ := v4.get(blob, 0, key); g.Blocks[0].Status != wire.StatusMiss {
		t.Fatalf("a refused PUT_OPAQUE stored its block: %v", g)
	}
	if got := statsOf(ts.srv)["readonly_refused"]; got != 4 {
		t.Fatalf("readonly_refused %d, want 4", got)
	}
	// Live again: the version-4 session stores it.
	if st := v4.putOpaque(blob, []string{name}, []identity.BlockKey{key}, [][]byte{payload}); st[0] != wire.StatusStored {
		t.Fatalf("live PUT_OPAQUE: %s, want STORED", st[0])
	}
}
