package etcdmember

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/gpucache/gpucache/internal/control"
	"github.com/gpucache/gpucache/internal/control/etcdmember/etcdtest"
)

// waitTimeout bounds every wait on a watch channel; generous for -race.
const waitTimeout = 30 * time.Second

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// startEtcd starts a real embedded etcd (internal/control/etcdmember/etcdtest) and returns
// its client endpoint.
func startEtcd(t *testing.T) string { return etcdtest.Start(t).Endpoint }

func newClient(t *testing.T, endpoint string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func member(i int) *control.Member {
	return &control.Member{
		ID:            control.MemberID(fmt.Sprintf("node-%d", i)),
		Addr:          fmt.Sprintf("10.0.0.%d:7000", i),
		FaultDomain:   fmt.Sprintf("rack-%d", i%2),
		ProtoVersion:  1,
		CapacityBytes: 1 << 30,
	}
}

// join starts a member on its own client; both are closed at test end
// (Close deregisters unless the test closed it first).
func join(t *testing.T, endpoint string, cfg Config) *Membership {
	t.Helper()
	if cfg.Client == nil {
		cfg.Client = newClient(t, endpoint)
		t.Cleanup(func() { cfg.Client.Close() })
	}
	cfg.Logger = quiet
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	m, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// waitFor reads w until a view satisfies ok, failing after waitTimeout.
func waitFor(t *testing.T, w <-chan control.View, what string, ok func(control.View) bool) control.View {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		select {
		case v, open := <-w:
			if !open {
				t.Fatalf("%s: watch closed", what)
			}
			if ok(v) {
				return v
			}
		case <-deadline:
			t.Fatalf("%s: timed out", what)
		}
	}
}

func atEpoch(e uint64) func(control.View) bool {
	return func(v control.View) bool { return v.Epoch() >= e }
}

func ids(v control.View) []control.MemberID {
	var out []control.MemberID
	for _, m := range v.Members() {
		out = append(out, m.ID)
	}
	return out
}

func sameView(t *testing.T, a, b control.View) {
	t.Helper()
	if a.Epoch() != b.Epoch() || fmt.Sprint(a.Members()) != fmt.Sprint(b.Members()) {
		t.Fatalf("views differ: epoch %d %v vs epoch %d %v", a.Epoch(), a.Members(), b.Epoch(), b.Members())
	}
}

func TestJoinLeave(t *testing.T) {
	ep := startEtcd(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	watcher := join(t, ep, Config{}) // client-only
	if v := watcher.Current(); v.Epoch() != 0 || v.Len() != 0 {
		t.Fatalf("empty cluster: epoch %d, %d members", v.Epoch(), v.Len())
	}
	ww := watcher.Watch(ctx)
	<-ww

	a := join(t, ep, Config{Self: member(1)})
	if v := a.Current(); v.Epoch() != 1 || v.Len() != 1 {
		t.Fatalf("after first join: epoch %d, members %v", v.Epoch(), ids(v))
	}
	waitFor(t, ww, "watcher sees first join", atEpoch(1))
	aw := a.Watch(ctx)

	b := join(t, ep, Config{Self: member(2)})
	if v := b.Current(); v.Epoch() != 2 || v.Len() != 2 {
		t.Fatalf("after second join: epoch %d, members %v", v.Epoch(), ids(v))
	}
	va := waitFor(t, aw, "a sees b join", atEpoch(2))
	vw := waitFor(t, ww, "watcher sees b join", atEpoch(2))
	sameView(t, va, b.Current())
	sameView(t, vw, b.Current())

	// Leave: epoch + 1, member gone.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil { // idempotent
		t.Fatal(err)
	}
	va = waitFor(t, aw, "a sees b leave", atEpoch(3))
	if va.Epoch() != 3 {
		t.Fatalf("leave: epoch %d, want 3", va.Epoch())
	}
	if _, ok := va.Member(member(2).ID); ok || va.Len() != 1 {
		t.Fatalf("leave: members %v", ids(va))
	}
	sameView(t, waitFor(t, ww, "watcher sees b leave", atEpoch(3)), va)
	// A closed membership keeps its last view and closes its watchers.
	if _, open := <-b.Watch(ctx); open {
		t.Fatal("watch on a closed membership is open")
	}
	if _, err := b.Drain(ctx, member(1).ID); err == nil {
		t.Fatal("drain on a closed membership succeeded")
	}
}

func TestDuplicateJoin(t *testing.T) {
	ep := startEtcd(t)
	join(t, ep, Config{Self: member(1)})
	c := newClient(t, ep)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if m, err := New(ctx, Config{Client: c, Self: member(1), Logger: quiet}); err == nil {
		m.Close()
		t.Fatal("duplicate join succeeded")
	}
}

func TestDrain(t *testing.T) {
	ep := startEtcd(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := join(t, ep, Config{Self: member(1)})
	b := join(t, ep, Config{Self: member(2)})
	bw := b.Watch(ctx)

	v, err := a.Drain(ctx, member(2).ID)
	if err != nil {
		t.Fatal(err)
	}
	if v.Epoch() != 3 {
		t.Fatalf("drain: epoch %d, want 3", v.Epoch())
	}
	vb := waitFor(t, bw, "b sees itself draining", atEpoch(3))
	if m, ok := vb.Member(member(2).ID); !ok || !m.Draining {
		t.Fatalf("b not draining in %v", vb.Members())
	}
	sameView(t, vb, v)
	// Draining again changes nothing.
	if v2, err := b.Drain(ctx, member(2).ID); err != nil || v2.Epoch() != 3 {
		t.Fatalf("second drain: epoch %d, err %v", v2.Epoch(), err)
	}
	if _, err := a.Drain(ctx, "nobody"); err == nil {
		t.Fatal("drain of unknown member succeeded")
	}
	// The drained key keeps b's lease: b's leave still works and bumps.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	va := waitFor(t, a.Watch(ctx), "a sees b leave", atEpoch(4))
	if va.Len() != 1 {
		t.Fatalf("after leave: %v", ids(va))
	}
}

func TestLeaseExpiry(t *testing.T) {
	ep := startEtcd(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := join(t, ep, Config{Self: member(1)})
	watcher := join(t, ep, Config{})

	// b "crashes": its keepalive stops and its client goes away without
	// revoking. 2s is etcd's minimum TTL with the default election timeout.
	bc := newClient(t, ep)
	b := join(t, ep, Config{Client: bc, Self: member(2), LeaseTTL: 2 * time.Second, NoDeregister: true})
	aw := a.Watch(ctx)
	waitFor(t, aw, "a sees b", atEpoch(2))
	ww := watcher.Watch(ctx)
	waitFor(t, ww, "watcher sees b", atEpoch(2))
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := bc.Close(); err != nil {
		t.Fatal(err)
	}

	va := waitFor(t, aw, "a sees b expire", atEpoch(3))
	if va.Epoch() != 3 || va.Len() != 1 {
		t.Fatalf("after expiry: epoch %d, members %v", va.Epoch(), ids(va))
	}
	// Exactly one reconciler won: the watcher agrees, and no further bump.
	sameView(t, waitFor(t, ww, "watcher sees b expire", atEpoch(3)), va)
	c := newClient(t, ep)
	defer c.Close()
	resp, err := c.Get(ctx, DefaultPrefix+"epoch")
	if err != nil {
		t.Fatal(err)
	}
	if got := string(resp.Kvs[0].Value); got != "3" {
		t.Fatalf("epoch key %s, want 3", got)
	}
}

func TestConcurrentJoins(t *testing.T) {
	const n = 8
	ep := startEtcd(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watcher := join(t, ep, Config{Prefix: "/concurrent"})
	ww := watcher.Watch(ctx)

	clients := make([]*clientv3.Client, n)
	for i := range clients {
		clients[i] = newClient(t, ep)
		defer clients[i].Close()
	}
	ms := make([]*Membership, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ms[i], errs[i] = New(ctx, Config{Client: clients[i], Prefix: "/concurrent", Self: member(i), Logger: quiet})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("join %d: %v", i, err)
		}
		defer ms[i].Close()
	}
	v := waitFor(t, ww, "watcher sees all joins", atEpoch(n))
	if v.Epoch() != n || v.Len() != n {
		t.Fatalf("after %d joins: epoch %d, members %v", n, v.Epoch(), ids(v))
	}
	// The epoch key's history is exactly 1..n: one +1 write per join.
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	hist := clients[0].Watch(wctx, "/concurrent/epoch", clientv3.WithRev(1))
	for want := uint64(1); want <= n; {
		select {
		case wr := <-hist:
			if err := wr.Err(); err != nil {
				t.Fatal(err)
			}
			for _, ev := range wr.Events {
				if got := string(ev.Kv.Value); got != fmt.Sprint(want) {
					t.Fatalf("epoch write %d is %s", want, got)
				}
				want++
			}
		case <-time.After(waitTimeout):
			t.Fatal("epoch history: timed out")
		}
	}
	for _, m := range ms {
		sameView(t, waitFor(t, m.Watch(ctx), "member sees all joins", atEpoch(n)), v)
	}
}

func TestInvalidKeyIgnored(t *testing.T) {
	ep := startEtcd(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := join(t, ep, Config{Self: member(1)})
	aw := a.Watch(ctx)
	c := newClient(t, ep)
	defer c.Close()
	if _, err := c.Put(ctx, DefaultPrefix+"members/bad", "{not json"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, DefaultPrefix+"members/other", `{"id":"mismatch","addr":"x","fault_domain":"d","capacity_bytes":1}`); err != nil {
		t.Fatal(err)
	}
	b := join(t, ep, Config{Self: member(2)})
	v := waitFor(t, aw, "a sees b despite invalid keys", atEpoch(2))
	if v.Epoch() != 2 || fmt.Sprint(ids(v)) != "[node-1 node-2]" {
		t.Fatalf("epoch %d, members %v", v.Epoch(), ids(v))
	}
	sameView(t, v, b.Current())
}

// TestIsolateAllOrNothing isolates a fault domain of two members: a budget
// one short changes nothing (epoch, members, member keys), the exact budget
// removes both victims in one transaction (epoch +2, no intermediate view),
// and every node, victims included, converges on the same view.
func TestIsolateAllOrNothing(t *testing.T) {
	ep := startEtcd(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var ms []*Membership
	for i := range 4 { // rack-0: node-0, node-2; rack-1: node-1, node-3
		ms = append(ms, join(t, ep, Config{Self: member(i)}))
	}
	watcher := join(t, ep, Config{})
	w := watcher.Watch(ctx)
	before := waitFor(t, w, "all four joined", atEpoch(4))
	if before.Len() != 4 {
		t.Fatalf("before: %v", ids(before))
	}

	if _, err := ms[1].Isolate(ctx, "rack-0", 1); !errors.Is(err, control.ErrEpochOverflow) {
		t.Fatalf("short budget: %v, want ErrEpochOverflow", err)
	}
	cli := newClient(t, ep)
	defer cli.Close()
	again := join(t, ep, Config{Client: cli}).Current()
	sameView(t, again, before)
	if _, err := ms[1].Isolate(ctx, "rack-9", 10); !errors.Is(err, control.ErrUnknownDomain) {
		t.Fatalf("unknown domain: %v", err)
	}

	p, err := ms[1].Isolate(ctx, "rack-0", 2)
	if err != nil {
		t.Fatal(err)
	}
	if p.From != 4 || p.To != 6 || len(p.Victims) != 2 || len(p.Remaining) != 2 {
		t.Fatalf("plan %+v", p)
	}
	after := waitFor(t, w, "isolation", atEpoch(6))
	if after.Epoch() != 6 || after.Len() != 2 {
		t.Fatalf("after: epoch %d, %v", after.Epoch(), ids(after))
	}
	for _, m := range after.Members() {
		if m.FaultDomain == "rack-0" {
			t.Fatalf("victim %s still a member", m.ID)
		}
	}
	// A victim sees itself gone.
	vv := waitFor(t, ms[0].Watch(ctx), "victim sees isolation", atEpoch(6))
	if _, ok := vv.Member(member(0).ID); ok {
		t.Fatal("victim still in its own view")
	}
}
