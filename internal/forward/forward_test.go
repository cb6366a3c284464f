package forward

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/client"
	"github.com/gpucache/gpucache/internal/control"
	"github.com/gpucache/gpucache/internal/security/audit"
	"github.com/gpucache/gpucache/internal/server"
	"github.com/gpucache/gpucache/internal/server/servertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	secretA = []byte("acme-secret-0123456789")
	secretB = []byte("beta-secret-0123456789")
)

// node is one in-process cluster member.
type node struct {
	id  control.MemberID
	srv *servertest.Server
	cl  *server.Cluster
}

// startNodes runs n servers, members node-0..node-n-1 of one view (epoch
// 1, real addresses), with authentication for tenants acme and beta.
func startNodes(t *testing.T, n int) ([]*node, control.View) {
	t.Helper()
	g := servertest.Guard(t, servertest.Tenant{Name: "acme", Secret: secretA}, servertest.Tenant{Name: "beta", Secret: secretB})
	nodes := make([]*node, n)
	for i := range nodes {
		nd := &node{id: control.MemberID(fmt.Sprintf("node-%d", i))}
		nd.cl = server.NewCluster(nd.id, control.View{})
		nd.srv = servertest.StartWith(t, "127.0.0.1:0", wire.Limits{}, func(c *server.Config) {
			c.Guard, c.Cluster = g, nd.cl
		})
		nodes[i] = nd
	}
	v := viewOf(t, 1, nodes, nil)
	for _, nd := range nodes {
		nd.srv.Srv.AdvanceView(v)
	}
	return nodes, v
}

// viewOf is the view of nodes at epoch, with the members in draining
// draining.
func viewOf(t *testing.T, epoch uint64, nodes []*node, draining map[control.MemberID]bool) control.View {
	t.Helper()
	ms := make([]control.Member, len(nodes))
	for i, nd := range nodes {
		ms[i] = control.Member{ID: nd.id, Addr: nd.srv.Addr, FaultDomain: "rack", ProtoVersion: wire.VersionMax,
			CapacityBytes: 1 << 30, Draining: draining[nd.id]}
	}
	v, err := control.NewView(epoch, ms)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func newForwarder(t *testing.T, cl *server.Cluster, mod func(*Config)) *Forwarder {
	t.Helper()
	cfg := Config{Cluster: cl, DialTimeout: 5 * time.Second, Timeout: 10 * time.Second,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	if mod != nil {
		mod(&cfg)
	}
	f, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func profile(tenant string) identity.Namespace {
	return identity.Namespace{Tenant: tenant, TrustDomain: "resp", ModelID: "llama", ConfigRevision: "r1",
		TokenizerRevision: "t1", RoPE: "rope", DType: "bf16", Quantization: "none",
		Layout: identity.Layout{Format: "lmcache", TPSize: 1, PPSize: 1, LayerCount: 32, KVHeads: 8, HeadDim: 128, BlockTokens: 256}}
}

// request is the ForwardRequest of RESP key name for tenant.
func request(t *testing.T, tenant string, secret []byte, name string) *server.ForwardRequest {
	t.Helper()
	ns := profile(tenant)
	d, err := ns.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return &server.ForwardRequest{Tenant: tenant, Secret: audit.Secret(secret), Namespace: ns, Name: []byte(name),
		Key: identity.OpaqueKey(d, []byte(name))}
}

// ownedBy returns RESP key names of tenant whose owner under v is id.
func ownedBy(t *testing.T, v control.View, id control.MemberID, tenant string, n int) []string {
	t.Helper()
	var out []string
	for i := 0; len(out) < n; i++ {
		if i > 100000 {
			t.Fatal("placement never picked the member")
		}
		name := fmt.Sprintf("llama@00000000@0@%08x", i)
		if m, ok := control.Owner(v, request(t, tenant, nil, name).Key); ok && m.ID == id {
			out = append(out, name)
		}
	}
	return out
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// get forwards a GET and returns a copy of the payload.
func get(t *testing.T, f *Forwarder, r *server.ForwardRequest) ([]byte, bool) {
	t.Helper()
	var got []byte
	hit, err := f.Get(testCtx(t), r, func(p []byte) error { got = bytes.Clone(p); return nil })
	if err != nil {
		t.Fatal(err)
	}
	return got, hit
}

// TestRemoteAgreesWithOwnership: Remote is true for exactly the keys the
// node itself refuses (WRONG_EPOCH) to a routing session, in live mode,
// while draining (every key is remote), and in unknown mode (none is).
func TestRemoteAgreesWithOwnership(t *testing.T) {
	nodes, v := startNodes(t, 3)
	f := newForwarder(t, nodes[0].cl, nil)
	c, err := client.Dial(testCtx(t), client.Config{Addr: nodes[0].srv.Addr, Secret: secretA, Conns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	check := func(phase string) (remote int) {
		for i := range 48 {
			r := request(t, "acme", secretA, fmt.Sprintf("k%d", i))
			_, _, err := c.Lookup(testCtx(t), r.Namespace, []client.BlockKey{r.Key}, 0)
			_, refused := client.WrongEpoch(err)
			if err != nil && !refused {
				t.Fatalf("%s: lookup: %v", phase, err)
			}
			if f.Remote(r.Key) != refused {
				t.Fatalf("%s: key %d: Remote %v, node refuses %v", phase, i, f.Remote(r.Key), refused)
			}
			if refused {
				remote++
			}
		}
		return remote
	}
	if n := check("live"); n == 0 || n == 48 {
		t.Fatalf("live: %d of 48 keys remote", n)
	}
	nodes[0].srv.Srv.AdvanceView(viewOf(t, 2, nodes, map[control.MemberID]bool{"node-0": true}))
	if n := check("draining"); n != 48 {
		t.Fatalf("draining: %d of 48 keys remote", n)
	}
	nodes[0].cl.SetMode(server.ControlUnknown)
	for i := range 48 {
		if f.Remote(request(t, "acme", nil, fmt.Sprintf("k%d", i)).Key) {
			t.Fatal("unknown mode: a key is remote")
		}
	}
	_ = v
}

// TestForwardRoundTrip: SET, GET, EXISTS and DEL of keys another member
// owns, forwarded as the caller's tenant: the bytes come back exactly, a
// second SET is existed with the first bytes kept, tenant beta misses
// acme's blocks (with its own profile, and with acme's namespace, which
// the owner refuses), and DEL makes the next GET and EXISTS miss.
func TestForwardRoundTrip(t *testing.T) {
	nodes, v := startNodes(t, 3)
	f := newForwarder(t, nodes[0].cl, nil)
	names := append(ownedBy(t, v, "node-1", "acme", 3), ownedBy(t, v, "node-2", "acme", 3)...)
	ctx := testCtx(t)
	for i, name := range names {
		r := request(t, "acme", secretA, name)
		if !f.Remote(r.Key) {
			t.Fatalf("%s is not remote", name)
		}
		payload := bytes.Repeat([]byte{byte(i + 1)}, 4000+i)
		if stored, existed, err := f.Set(ctx, r, payload); !stored || existed || err != nil {
			t.Fatalf("set %s: %v %v %v", name, stored, existed, err)
		}
		if stored, existed, err := f.Set(ctx, r, []byte("other")); stored || !existed || err != nil {
			t.Fatalf("second set %s: %v %v %v", name, stored, existed, err)
		}
		if got, hit := get(t, f, r); !hit || !bytes.Equal(got, payload) {
			t.Fatalf("get %s: hit %v, %d bytes", name, hit, len(got))
		}
		if !f.Exists(ctx, r) {
			t.Fatalf("exists %s: false", name)
		}
		b := request(t, "beta", secretB, name)
		if _, hit := get(t, f, b); hit || f.Exists(ctx, b) {
			t.Fatalf("beta reads acme's %s", name)
		}
		stolen := *r
		stolen.Tenant, stolen.Secret = "beta", audit.Secret(secretB)
		if _, hit := get(t, f, &stolen); hit || f.Exists(ctx, &stolen) || f.Del(ctx, &stolen) {
			t.Fatalf("beta reads acme's %s with acme's namespace", name)
		}
	}
	for _, name := range names {
		r := request(t, "acme", secretA, name)
		if !f.Del(ctx, r) {
			t.Fatalf("del %s: false", name)
		}
		if _, hit := get(t, f, r); hit || f.Exists(ctx, r) || f.Del(ctx, r) {
			t.Fatalf("%s still there after DEL", name)
		}
	}
	// The owners hold what was stored; node-0 holds nothing.
	if st := nodes[0].srv.Store.Stats(); st.Blocks != 0 {
		t.Fatalf("node-0 stored %d blocks", st.Blocks)
	}
	// A wrong secret is a refusal on SET (UNAUTHENTICATED) and a miss
	// elsewhere.
	bad := request(t, "acme", []byte("not-the-secret-0000000"), names[0])
	if _, _, err := f.Set(ctx, bad, []byte("x")); !errors.Is(err, ErrRefused) {
		t.Fatalf("set with a wrong secret: %v", err)
	}
	if _, hit := get(t, f, bad); hit || f.Exists(ctx, bad) {
		t.Fatal("a wrong secret reads")
	}
}

// TestForwardDeadOwner: an owner whose port is closed, and one that
// accepts and never answers, are misses: the closed port at once, the
// silent one when the caller's deadline passes; nothing hangs.
func TestForwardDeadOwner(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c // held open, never answered
		}
	}()
	defer func() {
		silent.Close()
		for c := range accepted {
			c.Close()
		}
	}()
	self := control.Member{ID: "self", Addr: "127.0.0.1:1", FaultDomain: "a", ProtoVersion: 3, CapacityBytes: 1}
	for _, tc := range []struct {
		name, addr string
		silent     bool
	}{{"closed port", closedAddr, false}, {"silent owner", silent.Addr().String(), true}} {
		t.Run(tc.name, func(t *testing.T) {
			// The other member has all the weight: it owns every key.
			v, err := control.NewView(1, []control.Member{self,
				{ID: "owner", Addr: tc.addr, FaultDomain: "b", ProtoVersion: 3, CapacityBytes: 1 << 40}})
			if err != nil {
				t.Fatal(err)
			}
			f := newForwarder(t, server.NewCluster("self", v), func(c *Config) { c.DialTimeout = time.Minute })
			r := request(t, "acme", nil, "k")
			if !f.Remote(r.Key) {
				t.Fatal("key not remote")
			}
			for _, op := range []string{"get", "set", "exists", "del"} {
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				var hit bool
				switch op {
				case "get":
					hit, err = f.Get(ctx, r, func([]byte) error { return errors.New("called") })
				case "set":
					hit, _, err = f.Set(ctx, r, []byte("v"))
				case "exists":
					hit = f.Exists(ctx, r)
				case "del":
					hit = f.Del(ctx, r)
				}
				if hit || err != nil {
					t.Fatalf("%s: %v %v, want a miss", op, hit, err)
				}
				// Only the deadline ends an operation on a silent owner (the
				// socket's deadline may fire a moment before ctx's timer).
				if dl, _ := ctx.Deadline(); tc.silent && time.Now().Before(dl) {
					t.Fatalf("%s: a silent owner answered before the deadline (%v)", op, err)
				}
				cancel()
			}
			// Four misses, each counted once, under its reason.
			reason := "forward_miss_unavailable"
			if tc.silent {
				reason = "forward_miss_timeout"
			}
			if st := statsOf(f); st[reason] != 4 || st["forward_misses"] != 4 || st["forward_ops"] != 4 {
				t.Fatalf("stats %v: want 4 operations, 4 misses, all %s", st, reason)
			}
		})
	}
}

// TestForwardWrongEpoch: an owner whose view is newer refuses with
// WRONG_EPOCH; the forwarder refreshes once (the refusing node's MEMBERS)
// and retries on the new owner. A second refusal is a miss.
func TestForwardWrongEpoch(t *testing.T) {
	nodes, v1 := startNodes(t, 3)
	f := newForwarder(t, nodes[0].cl, nil)
	// Epoch 2: node-1 drains; its keys move. Only node-1 and the new owner
	// learn it; node-0 keeps epoch 1. The key is node-1's under epoch 1
	// and node-2's under epoch 2.
	v2 := viewOf(t, 2, nodes, map[control.MemberID]bool{"node-1": true})
	var r *server.ForwardRequest
	for _, name := range ownedBy(t, v1, "node-1", "acme", 64) {
		if m, _ := control.Owner(v2, request(t, "acme", nil, name).Key); m.ID == "node-2" {
			r = request(t, "acme", secretA, name)
			break
		}
	}
	if r == nil {
		t.Fatal("no key moves from node-1 to node-2")
	}
	nodes[1].srv.Srv.AdvanceView(v2)
	other := nodes[2]
	other.srv.Srv.AdvanceView(v2)
	ctx := testCtx(t)
	if stored, _, err := f.Set(ctx, r, []byte("moved")); !stored || err != nil {
		t.Fatalf("set after one refusal: %v %v", stored, err)
	}
	if got, hit := get(t, f, r); !hit || string(got) != "moved" {
		t.Fatalf("get: %v %q", hit, got)
	}
	if st := statsOf(f); st["forward_retries"] != 2 {
		t.Fatalf("retries %d, want 2 (one per operation)", st["forward_retries"])
	}
	// Epoch 3 on the new owner only: the key is node-1's again, but
	// node-1 still says epoch 2 (node-2's). Both refuse: a miss.
	v3 := viewOf(t, 3, nodes, nil)
	other.srv.Srv.AdvanceView(v3)
	if _, hit := get(t, f, r); hit {
		t.Fatal("a key refused twice was a hit")
	}
	if f.Exists(ctx, r) {
		t.Fatal("a key refused twice exists")
	}
	if st := statsOf(f); st["forward_miss_wrong_epoch"] != 2 || st["forward_misses"] != 2 {
		t.Fatalf("stats %v: want the two refused-twice operations counted as wrong_epoch misses", st)
	}
}

// TestForwardByteBudget: a forwarded GET whose payload does not fit the
// byte budget left is a miss, and every GET gives back what it held.
func TestForwardByteBudget(t *testing.T) {
	nodes, v := startNodes(t, 2)
	f := newForwarder(t, nodes[0].cl, func(c *Config) { c.ByteBudget = 6000 })
	names := ownedBy(t, v, "node-1", "acme", 2)
	ctx := testCtx(t)
	small, big := request(t, "acme", secretA, names[0]), request(t, "acme", secretA, names[1])
	if ok, _, err := f.Set(ctx, small, bytes.Repeat([]byte{1}, 5000)); !ok || err != nil {
		t.Fatal(err)
	}
	if ok, _, err := f.Set(ctx, big, bytes.Repeat([]byte{2}, 7000)); !ok || err != nil {
		t.Fatal(err)
	}
	for range 3 { // the budget comes back after every GET
		if _, hit := get(t, f, small); !hit {
			t.Fatal("small block missed")
		}
		if _, hit := get(t, f, big); hit {
			t.Fatal("a block over the budget was a hit")
		}
	}
	// Held inside w: a second GET at the same time does not fit.
	hit, err := f.Get(ctx, small, func([]byte) error {
		if _, hit := get(t, f, small); hit {
			return errors.New("two 5000-byte payloads held in a 6000-byte budget")
		}
		return nil
	})
	if !hit || err != nil {
		t.Fatalf("outer get: %v %v", hit, err)
	}
	if st := statsOf(f); st["forward_get_over_budget"] != 4 || f.bytes.left != 6000 {
		t.Fatalf("over budget %d, left %d", st["forward_get_over_budget"], f.bytes.left)
	}
	if st := statsOf(f); st["forward_misses"] != 4 || st["forward_bytes_held"] != 0 || st["forward_byte_budget"] != 6000 {
		t.Fatalf("stats %v: want 4 misses (all over budget), nothing held of 6000", st)
	}
}

// TestPoolBounds: the pool keeps at most MaxClients clients, one per
// (owner, tenant, credential), and closes idle ones.
func TestPoolBounds(t *testing.T) {
	nodes, v := startNodes(t, 2)
	f := newForwarder(t, nodes[0].cl, func(c *Config) { c.MaxClients = 1 })
	name := ownedBy(t, v, "node-1", "acme", 1)[0]
	ctx := testCtx(t)
	a, b := request(t, "acme", secretA, name), request(t, "beta", secretB, name)
	f.Exists(ctx, a)
	f.Exists(ctx, a)
	if n := f.pool.size(); n != 1 {
		t.Fatalf("%d clients for one (owner, tenant)", n)
	}
	f.Exists(ctx, b)
	if n := f.pool.size(); n != 1 || statsOf(f)["forward_clients"] != 1 {
		t.Fatalf("%d clients pooled (STAT %d), MaxClients 1", n, statsOf(f)["forward_clients"])
	}
	f.pool.closeIdle(time.Now().Add(f.cfg.IdleClose))
	if n := f.pool.size(); n != 0 {
		t.Fatalf("%d idle clients left", n)
	}
	if !f.Remote(a.Key) || f.Exists(ctx, a) {
		t.Fatal("exists after the pool emptied")
	}
}

// TestForwardMissReasons: each kind of miss is counted once under its
// reason, the total is their sum, and an answer (EXISTS 0, a hit) is no
// miss: an absent block (not_cached), a key no other member owns
// (no_owner), a caller whose context is done (timeout), an owner that has
// stopped (unavailable).
func TestForwardMissReasons(t *testing.T) {
	nodes, v := startNodes(t, 2)
	f := newForwarder(t, nodes[0].cl, nil)
	names := ownedBy(t, v, "node-1", "acme", 2)
	ctx := testCtx(t)
	absent, stored := request(t, "acme", secretA, names[0]), request(t, "acme", secretA, names[1])
	want := map[string]uint64{}
	check := func(phase string) {
		t.Helper()
		st := statsOf(f)
		var sum uint64
		for _, r := range missNames {
			sum += st["forward_miss_"+r]
			if st["forward_miss_"+r] != want[r] {
				t.Fatalf("%s: forward_miss_%s %d, want %d (stats %v)", phase, r, st["forward_miss_"+r], want[r], st)
			}
		}
		if st["forward_misses"] != sum+st["forward_get_over_budget"] {
			t.Fatalf("%s: forward_misses %d is not the sum of the reasons (%v)", phase, st["forward_misses"], st)
		}
	}
	if ok, _, err := f.Set(ctx, stored, []byte("v")); !ok || err != nil {
		t.Fatalf("set: %v %v", ok, err)
	}
	if _, hit := get(t, f, stored); !hit || !f.Exists(ctx, stored) || f.Exists(ctx, absent) {
		t.Fatal("the stored block is not there, or the absent one is")
	}
	check("answers")
	if _, hit := get(t, f, absent); hit {
		t.Fatal("absent block hit")
	}
	want["not_cached"] = 1
	check("absent")

	done, cancel := context.WithCancel(context.Background())
	cancel()
	if hit, _ := f.Get(done, stored, func([]byte) error { return nil }); hit || f.Exists(done, stored) {
		t.Fatal("a done context read the block")
	}
	want["timeout"] = 2
	check("done context")

	solo, err := control.NewView(1, []control.Member{{ID: "solo", Addr: "127.0.0.1:1", FaultDomain: "a", ProtoVersion: 3, CapacityBytes: 1}})
	if err != nil {
		t.Fatal(err)
	}
	alone := newForwarder(t, server.NewCluster("solo", solo), nil)
	if _, hit := get(t, alone, stored); hit {
		t.Fatal("a forwarder that owns every key forwarded a GET")
	}
	if st := statsOf(alone); st["forward_miss_no_owner"] != 1 || st["forward_misses"] != 1 {
		t.Fatalf("no owner: %v", st)
	}

	nodes[1].srv.Stop()
	if _, hit := get(t, f, stored); hit {
		t.Fatal("a stopped owner answered")
	}
	if f.Exists(ctx, stored) || f.Del(ctx, stored) {
		t.Fatal("a stopped owner answered")
	}
	want["unavailable"] = 3
	check("owner stopped")
}

func statsOf(f *Forwarder) map[string]uint64 {
	m := map[string]uint64{}
	for _, e := range f.Stats() {
		m[e.Name] = e.Value
	}
	return m
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// TestRequestNeverShowsTheSecret: a ForwardRequest (and so the RESP
// client's AUTH password it carries to the owner) prints and logs with
// its secret redacted, whatever the verb or handler.
func TestRequestNeverShowsTheSecret(t *testing.T) {
	r := request(t, "acme", secretA, "k")
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("forward", "req", r, "secret", r.Secret)
	for _, s := range []string{fmt.Sprintf("%v", *r), fmt.Sprintf("%+v", *r), fmt.Sprintf("%#v", *r), fmt.Sprint(r.Secret), logged.String()} {
		if strings.Contains(s, string(secretA)) {
			t.Fatalf("the secret shows in %q", s)
		}
	}
	if string(r.Secret.Bytes()) != string(secretA) {
		t.Fatal("the secret was not kept")
	}
}
