package server

import (
	"strings"
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/security"
	"github.com/gpucache/gpucache/internal/security/antireplay"
	"github.com/gpucache/gpucache/internal/security/audit"
	"github.com/gpucache/gpucache/internal/security/ratelimit"
	"github.com/gpucache/gpucache/internal/security/seal"
	"github.com/gpucache/gpucache/internal/testfix"
)

// TestRESPRightsOnTheProfileModel: RESP requests are authorised on the
// tenant's profile model, with the native ACL, and denials are audited.
// gamma may only read testNamespace("gamma")'s model (respModel): under a
// profile of another model it can neither SET nor GET; under a profile of
// that model it can GET (a miss) but not SET.
func TestRESPRightsOnTheProfileModel(t *testing.T) {
	store := bigStore(t, 64<<20)
	other := respProfile(0)
	other.Namespace.ModelID = "private/other-model"
	other.AnyKey = true
	for _, tc := range []struct {
		name          string
		prof          RESPProfile
		key           string
		getOK, setErr string
	}{
		{"another model", other, "chunk-1", "-ERR tenant \"gamma\" lacks read", "-ERR tenant \"gamma\" lacks write"},
		{"its read-only model", respProfile(0), mpKey(1), "$-1\r\n", "-ERR tenant \"gamma\" lacks write"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startRESP(t, store, true, func(c *Config) { c.RESPProfiles = map[string]RESPProfile{"gamma": tc.prof} })
			c := dialRESP(t, f.addr)
			authAs(t, c, "gamma", secretGamma)
			key := tc.key
			if got := c.do("GET", key); !strings.HasPrefix(got, tc.getOK) {
				t.Fatalf("GET: %q, want %q", got, tc.getOK)
			}
			if got := c.do("SET", key, "v"); !strings.HasPrefix(got, tc.setErr) {
				t.Fatalf("SET: %q, want %q", got, tc.setErr)
			}
			evs := f.audit.events(t, audit.EventDenied)
			if len(evs) == 0 || evs[len(evs)-1]["tenant"] != "gamma" || evs[len(evs)-1]["model"] != tc.prof.Namespace.ModelID ||
				evs[len(evs)-1]["right"] != "write" {
				t.Fatalf("denied events: %v", evs)
			}
			if got := c.do("PING"); got != "+PONG\r\n" {
				t.Fatalf("the connection after a denial: %q", got)
			}
		})
	}
}

// TestRESPRateLimited: the tenant's rate limit applies to RESP commands:
// past its burst a GET is a miss and a SET is dropped with +OK (LMCache
// must not see an error), the refusal is audited, and another tenant is
// not charged.
func TestRESPRateLimited(t *testing.T) {
	store := bigStore(t, 64<<20)
	clock := testfix.NewClock(time.Unix(1_800_000_000, 0))
	f := startRESP(t, store, true, func(c *Config) {
		c.RESPProfiles = map[string]RESPProfile{"acme": respProfile(0), "beta": respProfile(0)}
		lim, err := ratelimit.New(ratelimit.Config{Now: clock.Now, Tenants: map[string]ratelimit.Limit{
			"acme": {OpsPerSec: 1, OpsBurst: 3, BytesPerSec: 1 << 30, BytesBurst: 1 << 30},
		}})
		if err != nil {
			t.Fatal(err)
		}
		w, err := antireplay.New(antireplay.Config{Window: 5 * time.Minute, MaxNonces: 1024, TenantNonces: 256, Now: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		g, err := security.NewGuard(testPolicy(t, testTenants(), lim), w, c.Guard.Audit(), clock.Now)
		if err != nil {
			t.Fatal(err)
		}
		c.Guard = g
	})
	a := dialRESP(t, f.addr)
	authAs(t, a, "acme", secretA)
	key := mpKey(2)
	for i, want := range []string{"+OK\r\n", "$1\r\nv\r\n", "$1\r\nv\r\n"} { // the burst: 3 ops
		cmd := []string{"GET", key}
		if i == 0 {
			cmd = []string{"SET", key, "v"}
		}
		if got := a.do(cmd...); got != want {
			t.Fatalf("op %d: %q, want %q", i, got, want)
		}
	}
	if got := a.do("GET", key); got != "$-1\r\n" {
		t.Fatalf("GET over the limit: %q, want a miss", got)
	}
	if got := a.do("SET", mpKey(3), "w"); got != "+OK\r\n" {
		t.Fatalf("SET over the limit: %q, want +OK (dropped)", got)
	}
	if n := f.stat(t, "resp_set_dropped"); n != 1 {
		t.Fatalf("resp_set_dropped %d", n)
	}
	if evs := f.audit.events(t, audit.EventRateLimited); len(evs) == 0 || evs[0]["tenant"] != "acme" {
		t.Fatalf("rate-limited events: %v", evs)
	}
	b := dialRESP(t, f.addr)
	authAs(t, b, "beta", secretB)
	for range 10 {
		if got := b.do("SET", mpKey(4), "b"); got != "+OK\r\n" {
			t.Fatalf("beta SET: %q", got)
		}
	}
	if got := b.do("GET", mpKey(4)); got != "$1\r\nb\r\n" {
		t.Fatalf("beta GET: %q", got)
	}
	// After the wait acme is served again, and the dropped SET left nothing.
	clock.Advance(2 * time.Second)
	if got := a.do("GET", mpKey(3)); got != "$-1\r\n" {
		t.Fatalf("the dropped SET was stored: %q", got)
	}
}

// TestRESPHotSeal: with hot seals on, a chunk stored over RESP is sealed;
// a bit flipped in slab memory makes GET a miss (never the bad bytes),
// drops the block and audits an integrity event.
func TestRESPHotSeal(t *testing.T) {
	store := bigStore(t, 64<<20)
	ring := seal.New(nil)
	if err := ring.Add("k1", []byte("0123456789abcdef0123456789abcdef"), time.Time{}); err != nil {
		t.Fatal(err)
	}
	prof := respProfile(0)
	f := startRESP(t, store, true, func(c *Config) {
		c.RESPProfiles = map[string]RESPProfile{"acme": prof}
		c.HotSeal = ring
	})
	c := dialRESP(t, f.addr)
	authAs(t, c, "acme", secretA)
	key := mpKey(5)
	val := strings.Repeat("kv", 10<<10)
	if got := c.do("SET", key, val); got != "+OK\r\n" {
		t.Fatalf("SET: %q", got)
	}
	if got := c.do("GET", key); got != "$20480\r\n"+val+"\r\n" {
		t.Fatalf("GET of a sealed chunk: %.40q", got)
	}
	ns := prof.Namespace
	ns.Tenant = "acme"
	d, err := ns.Digest()
	if err != nil {
		t.Fatal(err)
	}
	v, ok := store.Acquire(d, identity.OpaqueKey(d, []byte(key)))
	if !ok {
		t.Fatal("the chunk is not where the RESP key derivation says")
	}
	v.Bytes[777] ^= 0x10
	store.Release(v)
	if got := c.do("GET", key); got != "$-1\r\n" {
		t.Fatalf("GET of a corrupt chunk: %.40q, want a miss", got)
	}
	if got := c.do("EXISTS", key); got != ":0\r\n" {
		t.Fatalf("the corrupt chunk was kept: EXISTS %q", got)
	}
	if evs := f.audit.events(t, audit.EventIntegrity); len(evs) != 1 || evs[0]["kind"] != "hot_seal_invalid" {
		t.Fatalf("integrity events: %v", evs)
	}
}
