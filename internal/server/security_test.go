package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/client"
	"github.com/gpucache/gpucache/internal/security"
	"github.com/gpucache/gpucache/internal/security/acl"
	"github.com/gpucache/gpucache/internal/security/antireplay"
	"github.com/gpucache/gpucache/internal/security/audit"
	"github.com/gpucache/gpucache/internal/security/auth"
	"github.com/gpucache/gpucache/internal/security/ratelimit"
	"github.com/gpucache/gpucache/internal/testfix"
)

// Secrets of the test tenants.
var (
	secretA     = []byte("acme-secret-0123456789abcdef")
	secretB     = []byte("beta-secret-0123456789abcdef")
	secretOps   = []byte("ops-secret-0123456789abcdefgh")
	secretGamma = []byte("gamma-secret-0123456789abcdef")
)

// syncBuffer is an audit sink tests can read while the server writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// events returns the audit events of kind.
func (s *syncBuffer) events(t *testing.T, kind string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(s.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		if m["event"] == kind {
			out = append(out, m)
		}
	}
	return out
}

type secFixture struct {
	ts    *testServer
	guard *security.Guard
	clock *testfix.Clock
	audit *syncBuffer
}

func testTenants() []auth.Tenant {
	return []auth.Tenant{
		{Name: "acme", Secrets: []auth.Credential{{ID: "acme-1", Secret: secretA}}},
		{Name: "beta", Secrets: []auth.Credential{{ID: "beta-1", Secret: secretB}}},
		{Name: "ops", Secrets: []auth.Credential{{ID: "ops-1", Secret: secretOps}}},
		{Name: "gamma", Secrets: []auth.Credential{{ID: "gamma-1", Secret: secretGamma}}},
	}
}

func testPolicy(t *testing.T, tenants []auth.Tenant, lim *ratelimit.Limiter) *security.Policy {
	t.Helper()
	tab, err := auth.NewTable(tenants)
	if err != nil {
		t.Fatal(err)
	}
	var rules []acl.Rule
	for _, s := range []string{"acme:*=rw", "beta:*=rw", "ops:*=a",
		"gamma:" + testNamespace("gamma").ModelID + "=r"} {
		r, err := acl.ParseRule(s)
		if err != nil {
			t.Fatal(err)
		}
		rules = append(rules, r)
	}
	pol, err := acl.NewPolicy(rules...)
	if err != nil {
		t.Fatal(err)
	}
	return &security.Policy{Auth: tab, ACL: pol, Limiter: lim}
}

// startSecure runs a server with authentication, the test tenants and a
// fake clock. lim may be nil.
func startSecure(t *testing.T, lim func(now func() time.Time) *ratelimit.Limiter) *secFixture {
	t.Helper()
	f := &secFixture{clock: testfix.NewClock(time.Unix(1_800_000_000, 0)), audit: &syncBuffer{}}
	w, err := antireplay.New(antireplay.Config{Window: 5 * time.Minute, MaxNonces: 1024, TenantNonces: 256, Now: f.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	var l *ratelimit.Limiter
	if lim != nil {
		l = lim(f.clock.Now)
	}
	f.guard, err = security.NewGuard(testPolicy(t, testTenants(), l), w, audit.New(f.audit), f.clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	f.ts = startServer(t, func(c *Config) { c.Guard = f.guard })
	return f
}

// authConn is a raw connection that stamps its mutating requests.
type authConn struct {
	*rawConn
	now   func() time.Time
	stamp bool
	last  antireplay.Stamp // the last stamp sent
}

// hello opens a session with secret (nil: no credential) and returns the
// HELLO response or the error.
func (c *authConn) hello(tenant string, secret []byte) (wire.HelloResponse, *wire.Error) {
	c.t.Helper()
	req := wire.HelloRequest{MinVersion: 1, MaxVersion: 1, Tenant: tenant, Client: "test", HasAuth: true}
	if secret != nil {
		req.Auth, req.Credential = wire.AuthBearer, secret
	}
	h, body := c.roundTrip(wire.OpHello, req.AppendTo(nil))
	if h.Flags&wire.FlagError != 0 {
		return wire.HelloResponse{}, decodeErr(c.t, body)
	}
	var resp wire.HelloResponse
	if err := resp.Decode(body); err != nil {
		c.t.Fatal(err)
	}
	c.stamp = resp.Session&wire.SessionStampRequired != 0
	return resp, nil
}

func (f *secFixture) dial(t *testing.T, secret []byte) *authConn {
	t.Helper()
	c := &authConn{rawConn: dialRaw(t, f.ts.addr), now: f.clock.Now}
	if secret != nil {
		if _, e := c.hello("", secret); e != nil {
			t.Fatalf("hello: %v", e)
		}
	}
	return c
}

// sendStamped sends op with stamp s in front of body.
func (c *authConn) sendStamped(op wire.Opcode, body []byte, s antireplay.Stamp) uint64 {
	c.t.Helper()
	return c.sendStampBytes(op, body, s.Append(nil))
}

// sendStampBytes sends op with the raw stamp bytes sb in front of body.
func (c *authConn) sendStampBytes(op wire.Opcode, body, sb []byte) uint64 {
	c.t.Helper()
	c.id++
	full := append(bytes.Clone(sb), body...)
	h := wire.Header{Version: wire.FrameVersion, Op: op, Flags: wire.FlagStamped, RequestID: c.id, BodyLen: uint32(len(full))}
	c.writeRaw(append(h.Append(nil), full...))
	return c.id
}

func freshStamp(t time.Time) antireplay.Stamp {
	var n [16]byte
	rand.Read(n[:])
	return antireplay.NewStamp(t, n)
}

// do sends op (stamped if the session asks, for a mutating op) and returns
// the response.
func (c *authConn) do(op wire.Opcode, body []byte) answer {
	c.t.Helper()
	if c.stamp && op.Mutating() {
		c.last = freshStamp(c.now())
		id := c.sendStamped(op, body, c.last)
		h, b := c.recv()
		if h.RequestID != id {
			c.t.Fatalf("response to %d, want %d", h.RequestID, id)
		}
		return answer{h, b}
	}
	h, b := c.roundTrip(op, body)
	return answer{h, b}
}

// answer is one response frame.
type answer struct {
	h    wire.Header
	body []byte
}

// errOf returns the error of a response, or nil.
func errOf(t *testing.T, a answer) *wire.Error {
	h, body := a.h, a.body
	t.Helper()
	if h.Flags&wire.FlagError == 0 {
		return nil
	}
	return decodeErr(t, body)
}

func wantErr(t *testing.T, what string, a answer, code wire.Code) *wire.Error {
	t.Helper()
	e := errOf(t, a)
	if e == nil || e.Code != code {
		t.Fatalf("%s: got %v, want %s", what, e, code)
	}
	return e
}

func (c *authConn) putID(blob []byte, id identity.CacheIdentity, payload []byte) wire.Status {
	c.t.Helper()
	a := c.do(wire.OpPut, putBody(blob, []wire.PutBlock{putBlock(mustKey(c.t, id), id, len(payload))}, [][]byte{payload}))
	if e := errOf(c.t, a); e != nil {
		c.t.Fatalf("put: %v", e)
	}
	var resp wire.StatusResponse
	if err := resp.Decode(a.body, 1); err != nil {
		c.t.Fatal(err)
	}
	return resp.Statuses[0]
}

func lookupBody(blob []byte, ttl uint32, keys ...identity.BlockKey) []byte {
	req := wire.LookupRequest{Namespace: blob, LeaseTTLMillis: ttl, Keys: keys}
	return req.AppendTo(nil)
}

func getBody(blob []byte, lease uint64, keys ...identity.BlockKey) []byte {
	req := wire.GetRequest{Namespace: blob, LeaseID: lease, Keys: keys}
	return req.AppendTo(nil)
}

func acquireBody(blob []byte, keys ...identity.BlockKey) []byte {
	req := wire.AcquireRequest{Namespace: blob, Keys: keys}
	return req.AppendTo(nil)
}

// getHits decodes a GET answer into its hit count and payload bytes.
func getHits(t *testing.T, a answer) (int, []byte) {
	t.Helper()
	body := a.body
	if e := errOf(t, a); e != nil {
		t.Fatalf("get: %v", e)
	}
	var resp wire.GetResponse
	metaLen := int(body[0]) | int(body[1])<<8 | int(body[2])<<16 | int(body[3])<<24
	if _, err := resp.Decode(body[4:4+metaLen], wire.DefaultMaxBatch); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, b := range resp.Blocks {
		if b.Status == wire.StatusHit {
			n++
		}
	}
	return n, body[4+metaLen:]
}

func lookupHits(t *testing.T, a answer) wire.LookupResponse {
	t.Helper()
	body := a.body
	if e := errOf(t, a); e != nil {
		t.Fatalf("lookup: %v", e)
	}
	var resp wire.LookupResponse
	if err := resp.Decode(body); err != nil {
		t.Fatal(err)
	}
	return resp
}

func statMap(t *testing.T, a answer) map[string]uint64 {
	t.Helper()
	body := a.body
	if e := errOf(t, a); e != nil {
		t.Fatalf("stat: %v", e)
	}
	var resp wire.StatResponse
	if err := resp.Decode(body); err != nil {
		t.Fatal(err)
	}
	m := make(map[string]uint64)
	for _, e := range resp.Entries {
		m[e.Name] = e.Value
	}
	return m
}

// chainIDs returns a chain of n blocks of ns whose tokens derive from seed.
func chainIDs(t *testing.T, ns identity.Namespace, n int, seed uint32) ([]identity.CacheIdentity, []identity.BlockKey) {
	t.Helper()
	bt := int(ns.Layout.BlockTokens)
	toks := make([]uint32, n*bt)
	for i := range toks {
		toks[i] = seed*1000 + uint32(i)
	}
	ids, err := identity.Identities(ns, toks)
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]identity.BlockKey, len(ids))
	for i := range ids {
		keys[i] = mustKey(t, ids[i])
	}
	return ids, keys
}

// TestTenantIsolationPaired: tenant A's blocks are reused by A on another
// connection, and tenant B can neither read, lease, join nor detect them, by
// any operation, under A's namespace or its own.
func TestTenantIsolationPaired(t *testing.T) {
	f := startSecure(t, nil)
	nsA, nsB := testNamespace("acme"), testNamespace("beta")
	blobA, blobB := mustCanonical(t, nsA), mustCanonical(t, nsB)
	idsA, keysA := chainIDs(t, nsA, 3, 7)
	_, keysB := chainIDs(t, nsB, 3, 7) // the same tokens under B's namespace
	payloads := [][]byte{testfix.Payload(20<<10, 1), testfix.Payload(20<<10, 2), testfix.Payload(20<<10, 3)}

	a1 := f.dial(t, secretA)
	for i := range idsA {
		if st := a1.putID(blobA, idsA[i], payloads[i]); st != wire.StatusStored {
			t.Fatalf("A put %d: %s", i, st)
		}
	}
	// A leases its chain and starts a fill on a fourth block.
	lease := lookupHits(t, a1.do(wire.OpLookup, lookupBody(blobA, 60_000, keysA...)))
	if lease.Hits != 3 || lease.LeaseID == 0 {
		t.Fatalf("A lookup: %+v", lease)
	}
	_, extraKeysA := chainIDs(t, nsA, 4, 7)
	_, extraKeysB := chainIDs(t, nsB, 4, 7)
	a := a1.do(wire.OpAcquire, acquireBody(blobA, extraKeysA[3]))
	var acq wire.AcquireResponse
	if e := errOf(t, a); e != nil || acq.Decode(a.body, 1) != nil || acq.Entries[0].Outcome != wire.AcquireLead {
		t.Fatalf("A acquire: %v %+v", e, acq)
	}
	fillA := acq.Entries[0].Token.Fill

	// Reuse within A, on a second connection: the test cannot pass trivially.
	a2 := f.dial(t, secretA)
	if got := lookupHits(t, a2.do(wire.OpLookup, lookupBody(blobA, 0, keysA...))); got.Hits != 3 {
		t.Fatalf("A's second session sees %d of its 3 blocks", got.Hits)
	}
	n, data := getHits(t, a2.do(wire.OpGet, getBody(blobA, 0, keysA...)))
	if n != 3 || !bytes.Equal(data, bytes.Join(payloads, nil)) {
		t.Fatalf("A's second session reads %d hits / %d bytes", n, len(data))
	}
	a = a2.do(wire.OpAcquire, acquireBody(blobA, keysA[0], extraKeysA[3]))
	acq = wire.AcquireResponse{}
	if errOf(t, a) != nil || acq.Decode(a.body, 2) != nil || acq.Entries[0].Outcome != wire.AcquireHit || acq.Entries[1].Outcome != wire.AcquireJoined {
		t.Fatalf("A's second session: acquire %+v, want HIT then JOINED A's fill", acq.Entries)
	}

	b := f.dial(t, secretB)
	statBefore := statMap(t, b.do(wire.OpStat, nil))
	if _, global := statBefore["hot_blocks"]; global {
		t.Fatal("a non-admin tenant's STAT shows server-wide counters")
	}
	// Under A's namespace: every operation is refused before it looks.
	for _, op := range []struct {
		op   wire.Opcode
		body []byte
	}{
		{wire.OpLookup, lookupBody(blobA, 1000, keysA...)},
		{wire.OpGet, getBody(blobA, lease.LeaseID, keysA...)},
		{wire.OpAcquire, acquireBody(blobA, keysA[0], extraKeysA[3])},
		{wire.OpDelete, (&wire.DeleteRequest{Namespace: blobA, Keys: []wire.Key{keysA[0]}}).AppendTo(nil)},
		{wire.OpWait, (&wire.WaitRequest{Namespace: blobA, TimeoutMillis: 1, Fills: []uint64{fillA}}).AppendTo(nil)},
		{wire.OpPut, putBody(blobA, []wire.PutBlock{putBlock(keysA[0], idsA[0], 10)}, [][]byte{make([]byte, 10)})},
	} {
		a := b.do(op.op, op.body)
		wantErr(t, "B "+op.op.String()+" under A's namespace", a, wire.CodeTenantMismatch)
	}
	// Under its own namespace, with the same tokens and even A's raw keys:
	// misses, no lease, its own fill (never A's).
	for _, keys := range [][]identity.BlockKey{keysB, keysA} {
		if got := lookupHits(t, b.do(wire.OpLookup, lookupBody(blobB, 1000, keys...))); got.Hits != 0 || got.LeaseID != 0 {
			t.Fatalf("B detects %d blocks (lease %d)", got.Hits, got.LeaseID)
		}
		if n, data := getHits(t, b.do(wire.OpGet, getBody(blobB, lease.LeaseID, keys...))); n != 0 || len(data) != 0 {
			t.Fatalf("B reads %d blocks, %d bytes", n, len(data))
		}
	}
	a = b.do(wire.OpAcquire, acquireBody(blobB, keysA[0], extraKeysA[3], extraKeysB[3]))
	acq = wire.AcquireResponse{}
	if errOf(t, a) != nil || acq.Decode(a.body, 3) != nil {
		t.Fatalf("B acquire: %v", errOf(t, a))
	}
	for i, e := range acq.Entries {
		if e.Outcome != wire.AcquireLead || e.Token.Fill == fillA {
			t.Fatalf("B acquire %d: %+v, want a LEAD of its own fill (A's fill is %d)", i, e, fillA)
		}
	}
	// B cannot wait on A's fill either: it never joined it.
	for _, e := range func() []wire.WaitEntry {
		a := b.do(wire.OpWait, (&wire.WaitRequest{Namespace: blobB, TimeoutMillis: 1, Fills: []uint64{fillA}}).AppendTo(nil))
		var w wire.WaitResponse
		if errOf(t, a) != nil || w.Decode(a.body, 1) != nil {
			t.Fatalf("B wait: %v", errOf(t, a))
		}
		return w.Entries
	}() {
		if e.Kind != wire.NoticeFailed && e.Kind != wire.NoticePending {
			t.Fatalf("B's WAIT on A's fill: %+v", e)
		}
	}
	// B's STAT moved only by B's own requests; A's lease was not released
	// by B's GET naming it; A still reads its chain.
	statAfter := statMap(t, b.do(wire.OpStat, nil))
	if statAfter["tenant_blocks_hit"] != 0 || statAfter["tenant_bytes_out"] != 0 {
		t.Fatalf("B's counters show hits: %v", statAfter)
	}
	if n, _ := getHits(t, a1.do(wire.OpGet, getBody(blobA, lease.LeaseID, keysA...))); n != 3 {
		t.Fatalf("A reads %d of its blocks after B's attempts", n)
	}
	// An admin sees the server-wide counters.
	adm := f.dial(t, secretOps)
	if st := statMap(t, adm.do(wire.OpStat, nil)); st["hot_blocks"] != 3 {
		t.Fatalf("admin STAT hot_blocks = %d, want 3", st["hot_blocks"])
	}
	if n := len(f.audit.events(t, audit.EventDenied)); n < 6 {
		t.Fatalf("%d denial audit events, want one per refused operation (6)", n)
	}
}

// TestAuthFailures: no credential, a wrong secret, a secret of another
// tenant than HELLO names; each is UNAUTHENTICATED, audited without the
// secret, and the third closes the connection.
func TestAuthFailures(t *testing.T) {
	f := startSecure(t, nil)
	c := f.dial(t, nil)
	// Before HELLO nothing but PING and HELLO is served.
	c.send(wire.OpStat, nil)
	c.expectError(wire.CodeHelloRequired)
	if _, e := c.hello("", nil); e == nil || e.Code != wire.CodeUnauthenticated {
		t.Fatalf("no credential: %v", e)
	}
	if _, e := c.hello("", []byte("wrong-secret-0123456789abcdef")); e == nil || e.Code != wire.CodeUnauthenticated {
		t.Fatalf("wrong secret: %v", e)
	}
	// The tenant field cannot pick the tenant: B's secret claiming acme.
	c.send(wire.OpHello, (&wire.HelloRequest{MinVersion: 1, MaxVersion: 1, Tenant: "acme", HasAuth: true, Auth: wire.AuthBearer, Credential: secretB}).AppendTo(nil))
	c.expectError(wire.CodeUnauthenticated)
	c.expectClosed()
	// A legacy HELLO (no auth section) naming a tenant is refused too.
	l := dialRaw(t, f.ts.addr)
	l.send(wire.OpHello, (&wire.HelloRequest{MinVersion: 1, MaxVersion: 1, Tenant: "acme"}).AppendTo(nil))
	l.expectError(wire.CodeUnauthenticated)

	evs := f.audit.events(t, audit.EventAuthFailure)
	if len(evs) != 4 {
		t.Fatalf("%d auth_failure events, want 4", len(evs))
	}
	reasons := []string{"no_credential", "unknown_credential", "tenant_mismatch", "no_credential"}
	for i, ev := range evs {
		if ev["reason"] != reasons[i] {
			t.Errorf("event %d reason %v, want %s", i, ev["reason"], reasons[i])
		}
	}
	for _, s := range [][]byte{secretA, secretB, []byte("wrong-secret")} {
		if strings.Contains(f.audit.String(), string(s)) {
			t.Fatalf("audit log contains a secret")
		}
	}
	// The server derives the tenant: HELLO without a tenant learns it.
	ok := &authConn{rawConn: dialRaw(t, f.ts.addr), now: f.clock.Now}
	resp, e := ok.hello("", secretB)
	if e != nil || resp.Tenant != "beta" || resp.Session&wire.SessionStampRequired == 0 {
		t.Fatalf("hello: %+v %v", resp, e)
	}
}

// TestACLRights: read, write and admin are separate rights, per model.
func TestACLRights(t *testing.T) {
	f := startSecure(t, nil)
	ns := testNamespace("gamma") // gamma may read this model and nothing else
	other := ns
	other.ModelID = "mistralai/Mistral-7B"
	blob, otherBlob := mustCanonical(t, ns), mustCanonical(t, other)
	ids, keys := chainIDs(t, ns, 1, 3)
	c := f.dial(t, secretGamma)
	if got := lookupHits(t, c.do(wire.OpLookup, lookupBody(blob, 0, keys...))); got.Hits != 0 {
		t.Fatalf("lookup %+v", got)
	}
	if n, _ := getHits(t, c.do(wire.OpGet, getBody(blob, 0, keys...))); n != 0 {
		t.Fatal("hit")
	}
	for _, tc := range []struct {
		op   wire.Opcode
		body []byte
	}{
		{wire.OpPut, putBody(blob, []wire.PutBlock{putBlock(keys[0], ids[0], 10)}, [][]byte{make([]byte, 10)})},
		{wire.OpDelete, (&wire.DeleteRequest{Namespace: blob, Keys: []wire.Key{keys[0]}}).AppendTo(nil)},
		{wire.OpAcquire, acquireBody(blob, keys[0])},
		{wire.OpLookup, lookupBody(otherBlob, 0, keys...)},
		{wire.OpGet, getBody(otherBlob, 0, keys...)},
	} {
		a := c.do(tc.op, tc.body)
		wantErr(t, "gamma "+tc.op.String(), a, wire.CodeDenied)
	}
	// The connection stays usable after a denial.
	if n, _ := getHits(t, c.do(wire.OpGet, getBody(blob, 0, keys...))); n != 0 {
		t.Fatal("hit")
	}
	// ops holds admin only: no reads.
	adm := f.dial(t, secretOps)
	a := adm.do(wire.OpLookup, lookupBody(mustCanonical(t, testNamespace("ops")), 0, keys...))
	wantErr(t, "admin-only LOOKUP", a, wire.CodeDenied)
	evs := f.audit.events(t, audit.EventDenied)
	if len(evs) != 6 || evs[0]["right"] != "write" || evs[0]["op"] != "PUT" || evs[0]["tenant"] != "gamma" {
		t.Fatalf("denied events: %v", evs)
	}
}

// TestReplayWindow: mutating requests need a fresh stamp; a repeated nonce,
// a stale or future timestamp and a missing stamp are REPLAY, while fresh
// requests from clients whose clocks are minutes behind or seconds ahead
// are accepted.
func TestReplayWindow(t *testing.T) {
	f := startSecure(t, nil)
	ns := testNamespace("acme")
	blob := mustCanonical(t, ns)
	ids, _ := chainIDs(t, ns, 8, 11)
	c := f.dial(t, secretA)
	put := func(i int) []byte {
		return putBody(blob, []wire.PutBlock{putBlock(mustKey(t, ids[i]), ids[i], 100)}, [][]byte{testfix.Payload(100, byte(i))})
	}
	status := func(what string, a answer) wire.Status {
		t.Helper()
		if e := errOf(t, a); e != nil {
			t.Fatalf("%s: %v", what, e)
		}
		var r wire.StatusResponse
		if err := r.Decode(a.body, 1); err != nil {
			t.Fatal(err)
		}
		return r.Statuses[0]
	}
	stamped := func(i int, s antireplay.Stamp) answer {
		id := c.sendStamped(wire.OpPut, put(i), s)
		h, b := c.recv()
		if h.RequestID != id {
			t.Fatalf("answer to %d, want %d", h.RequestID, id)
		}
		return answer{h, b}
	}
	now := f.clock.Now()

	// Unstamped: refused, body skipped, connection usable.
	c.send(wire.OpPut, put(0))
	c.expectError(wire.CodeReplay)
	// Fresh: accepted. The same stamp again, even on another request: refused.
	s0 := freshStamp(now)
	if st := status("fresh", stamped(0, s0)); st != wire.StatusStored {
		t.Fatalf("fresh stamp: %s", st)
	}
	wantErr(t, "replayed nonce", stamped(1, s0), wire.CodeReplay)
	// Replaying on another connection of the same tenant: refused too.
	c2 := f.dial(t, secretA)
	id := c2.sendStamped(wire.OpPut, put(1), s0)
	if h, b := c2.recv(); h.RequestID != id || errOf(t, answer{h, b}) == nil || errOf(t, answer{h, b}).Code != wire.CodeReplay {
		t.Fatalf("replay on a second connection accepted")
	}
	// Clock skew: a client 4m behind and one 4s ahead are fresh (the
	// window reaches 5m back but only antireplay.DefaultMaxFuture ahead).
	if st := status("4m behind", stamped(2, freshStamp(now.Add(-4*time.Minute)))); st != wire.StatusStored {
		t.Fatalf("4m behind: %s", st)
	}
	if st := status("4s ahead", stamped(3, freshStamp(now.Add(4*time.Second)))); st != wire.StatusStored {
		t.Fatalf("4s ahead: %s", st)
	}
	// Outside the window either way: refused.
	wantErr(t, "6m stale", stamped(4, freshStamp(now.Add(-6*time.Minute))), wire.CodeReplay)
	wantErr(t, "6s future", stamped(4, freshStamp(now.Add(6*time.Second))), wire.CodeReplay)
	// Time passes: the captured fresh request is now stale, and still refused.
	f.clock.Advance(10 * time.Minute)
	wantErr(t, "captured request after 10m", stamped(1, s0), wire.CodeReplay)
	if st := status("fresh after 10m", stamped(5, freshStamp(f.clock.Now()))); st != wire.StatusStored {
		t.Fatalf("fresh after 10m: %s", st)
	}
	// A malformed stamp is MALFORMED, and reads stay unstamped.
	bad := bytes.Repeat([]byte{0xff}, wire.StampSize) // a negative timestamp
	id = c.sendStampBytes(wire.OpPut, put(6), bad)
	if h, b := c.recv(); h.RequestID != id {
		t.Fatal("out of order")
	} else {
		wantErr(t, "negative timestamp", answer{h, b}, wire.CodeMalformed)
	}
	_, keys := chainIDs(t, ns, 1, 11)
	if n, _ := getHits(t, c.do(wire.OpGet, getBody(blob, 0, keys...))); n != 1 {
		t.Fatalf("unstamped GET: %d hits", n)
	}
	st := statMap(t, c.do(wire.OpStat, nil))
	if st["tenant_replays_rejected"] != 6 {
		t.Fatalf("tenant_replays_rejected = %d, want 6", st["tenant_replays_rejected"])
	}
}

// TestRateLimits: a tenant over its quota gets RATE_LIMITED with a
// retry-after, never a silent drop; other tenants are not charged; after
// the wait the tenant is served again.
func TestRateLimits(t *testing.T) {
	f := startSecure(t, func(now func() time.Time) *ratelimit.Limiter {
		l, err := ratelimit.New(ratelimit.Config{Now: now, Tenants: map[string]ratelimit.Limit{
			"acme": {OpsPerSec: 10, OpsBurst: 5, BytesPerSec: 64 << 10, BytesBurst: 64 << 10},
		}})
		if err != nil {
			t.Fatal(err)
		}
		return l
	})
	ns := testNamespace("acme")
	blob := mustCanonical(t, ns)
	_, keys := chainIDs(t, ns, 1, 1)
	a := f.dial(t, secretA)
	for i := range 5 {
		if n, _ := getHits(t, a.do(wire.OpGet, getBody(blob, 0, keys...))); n != 0 {
			t.Fatalf("get %d hit", i)
		}
	}
	e := wantErr(t, "6th op", a.do(wire.OpGet, getBody(blob, 0, keys...)), wire.CodeRateLimited)
	if e.RetryAfter < 100*time.Millisecond || e.RetryAfter > 101*time.Millisecond {
		t.Fatalf("retry-after %v, want 100ms (10 ops/s)", e.RetryAfter)
	}
	// Beta has no limit and is not charged for acme.
	b := f.dial(t, secretB)
	blobB := mustCanonical(t, testNamespace("beta"))
	for range 20 {
		getHits(t, b.do(wire.OpGet, getBody(blobB, 0, keys...)))
	}
	f.clock.Advance(e.RetryAfter)
	getHits(t, a.do(wire.OpGet, getBody(blob, 0, keys...)))
	// Bytes: a PUT larger than what the byte bucket holds after a big one.
	f.clock.Advance(time.Second)
	ids, _ := chainIDs(t, ns, 2, 2)
	if st := a.putID(blob, ids[0], testfix.Payload(60<<10, 1)); st != wire.StatusStored {
		t.Fatalf("put: %s", st)
	}
	pb := putBody(blob, []wire.PutBlock{putBlock(mustKey(t, ids[1]), ids[1], 60<<10)}, [][]byte{testfix.Payload(60<<10, 2)})
	e = wantErr(t, "second 60KiB PUT", a.do(wire.OpPut, pb), wire.CodeRateLimited)
	if e.RetryAfter < 800*time.Millisecond {
		t.Fatalf("byte retry-after %v", e.RetryAfter)
	}
	// The refused PUT's payload was skipped: the connection is in sync.
	if n, _ := getHits(t, a.do(wire.OpGet, getBody(blob, 0, mustKey(t, ids[0])))); n != 1 {
		t.Fatal("after a refused PUT the first block is not readable")
	}
	if evs := f.audit.events(t, audit.EventRateLimited); len(evs) == 0 || evs[0]["tenant"] != "acme" {
		t.Fatalf("rate-limit audit events: %v", evs)
	}
}

// TestSecretRotation: adding a secret keeps sessions; removing one ends the
// sessions opened with it at their next request; an expiry ends them when
// it passes; every step is clean UNAUTHENTICATED, then a new HELLO works.
func TestSecretRotation(t *testing.T) {
	f := startSecure(t, nil)
	newA := []byte("acme-secret-2-0123456789abcdef")
	blob := mustCanonical(t, testNamespace("acme"))
	_, keys := chainIDs(t, testNamespace("acme"), 1, 1)
	old := f.dial(t, secretA)
	swap := func(creds ...auth.Credential) {
		ts := testTenants()
		ts[0].Secrets = creds
		f.guard.Swap(testPolicy(t, ts, nil))
	}
	// Grace: both secrets.
	swap(auth.Credential{ID: "acme-1", Secret: secretA}, auth.Credential{ID: "acme-2", Secret: newA})
	getHits(t, old.do(wire.OpGet, getBody(blob, 0, keys...)))
	fresh := f.dial(t, newA)
	getHits(t, fresh.do(wire.OpGet, getBody(blob, 0, keys...)))
	// Revoke the old secret: its session ends, the new one continues.
	swap(auth.Credential{ID: "acme-2", Secret: newA})
	wantErr(t, "revoked session", old.do(wire.OpGet, getBody(blob, 0, keys...)), wire.CodeUnauthenticated)
	wantErr(t, "after the session ended", old.do(wire.OpGet, getBody(blob, 0, keys...)), wire.CodeHelloRequired)
	if _, e := old.hello("", secretA); e == nil {
		t.Fatal("revoked secret accepted")
	}
	if _, e := old.hello("", newA); e != nil {
		t.Fatalf("new secret refused: %v", e)
	}
	getHits(t, old.do(wire.OpGet, getBody(blob, 0, keys...)))
	getHits(t, fresh.do(wire.OpGet, getBody(blob, 0, keys...)))
	// Expiry: the secret stops at NotAfter, and so do its sessions.
	swap(auth.Credential{ID: "acme-2", Secret: newA, NotAfter: f.clock.Now().Add(time.Hour)})
	getHits(t, fresh.do(wire.OpGet, getBody(blob, 0, keys...)))
	f.clock.Advance(time.Hour)
	wantErr(t, "expired session", fresh.do(wire.OpGet, getBody(blob, 0, keys...)), wire.CodeUnauthenticated)
	if _, e := fresh.hello("", newA); e == nil || e.Code != wire.CodeUnauthenticated || !strings.Contains(e.Message, "expired") {
		t.Fatalf("expired secret: %v", e)
	}
	reasons := map[any]int{}
	for _, ev := range f.audit.events(t, audit.EventAuthFailure) {
		reasons[ev["reason"]]++
	}
	if reasons["revoked_credential"] != 1 || reasons["expired_credential"] != 2 || reasons["unknown_credential"] != 1 {
		t.Fatalf("auth_failure reasons %v", reasons)
	}
	if strings.Contains(f.audit.String(), string(newA)) || strings.Contains(f.audit.String(), string(secretA)) {
		t.Fatal("audit log contains a secret")
	}
}

// TestClientRedialsAfterSessionEnds: when a reload revokes the credential a
// client's session was opened with, its next call fails (a miss with a
// reason, never stale bytes) and the pool dials again; once the credential
// is valid again the client works without being rebuilt.
func TestClientRedialsAfterSessionEnds(t *testing.T) {
	f := startSecure(t, nil)
	f.clock.Set(time.Now()) // the client stamps with the real clock
	ctx := context.Background()
	c, err := client.Dial(ctx, client.Config{Addr: f.ts.addr, Secret: secretA, Conns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Tenant() != "acme" {
		t.Fatalf("tenant %q", c.Tenant())
	}
	ns := testNamespace("acme")
	ids, keys := chainIDs(t, ns, 1, 5)
	payload := testfix.Payload(1000, 5)
	if st, err := c.Put(ctx, ns, client.BlocksOf(ids, [][]byte{payload})); err != nil || st[0] != client.StatusStored {
		t.Fatalf("put (stamped by the client): %v %v", st, err)
	}
	ts := testTenants()
	ts[0].Secrets = []auth.Credential{{ID: "acme-9", Secret: []byte("acme-other-secret-0123456789")}}
	f.guard.Swap(testPolicy(t, ts, nil))
	res := c.Get(ctx, ns, keys)
	if res[0].Hit || len(res[0].Data) != 0 || res[0].Reason == nil {
		t.Fatalf("after revocation: %+v", res[0])
	}
	if res := c.Get(ctx, ns, keys); res[0].Hit {
		t.Fatal("a revoked secret still reads")
	}
	f.guard.Swap(testPolicy(t, testTenants(), nil))
	if res := c.Get(ctx, ns, keys); !res[0].Hit || !bytes.Equal(res[0].Data, payload) {
		t.Fatalf("after the secret is valid again: %+v", res[0])
	}
}
