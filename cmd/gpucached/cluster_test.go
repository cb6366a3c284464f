package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/client"
	"github.com/gpucache/gpucache/internal/control/etcdmember/etcdtest"
)

// The cluster tests run real gpucached processes against a real etcd (the
// embedded server, in the test process) on loopback, with a client routing
// by placement and a load whose every byte is checked against an oracle:
// the payload of a block is a pure function of its key.

const (
	clusterBlockTokens = 16
	clusterPayload     = 8 << 10
	clusterChains      = 48
	clusterChainLen    = 4
	opDeadline         = 750 * time.Millisecond
	// overrunSlack is the acceptance bound: no request may wait past its
	// deadline plus this.
	overrunSlack = 50 * time.Millisecond
)

func oracle(k client.BlockKey) []byte {
	b := make([]byte, clusterPayload)
	s := sha256.Sum256(k[:])
	for i := range b {
		b[i] = s[i%32] ^ byte(i>>5)
	}
	return b
}

// clusterNode starts one gpucached of the cluster.
func clusterNode(t *testing.T, bin, etcd, id, domain string, extra ...string) *daemonProc {
	t.Helper()
	args := []string{"--admin-listen", "127.0.0.1:0", "--cold-store", "off", "--hot-capacity", "64MiB",
		"--etcd-endpoints", etcd, "--node-id", id, "--fault-domain", domain,
		"--member-lease-ttl", "2s", "--control-probe", "100ms", "--control-grace", "3s", "--drain-timeout", "5s"}
	return startDaemon(t, bin, append(args, extra...)...)
}

type nodeView struct {
	Epoch   uint64 `json:"epoch"`
	Members []struct {
		ID           string `json:"id"`
		FaultDomain  string `json:"fault_domain"`
		ProtoVersion uint8  `json:"proto_version"`
		Draining     bool   `json:"draining"`
	} `json:"members"`
}

func (v nodeView) ids() []string {
	var out []string
	for _, m := range v.Members {
		out = append(out, m.ID)
	}
	sort.Strings(out)
	return out
}

func viewOf(t *testing.T, d *daemonProc) nodeView {
	t.Helper()
	resp, err := http.Get("http://" + d.admin + "/cluster")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v nodeView
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// awaitView polls a node's view (an admin read, not a synchronisation of
// the code under test: the membership converges through etcd's watch) until
// ok, failing after a generous bound.
func awaitView(t *testing.T, d *daemonProc, what string, ok func(nodeView) bool) nodeView {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		v := viewOf(t, d)
		if ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: view never converged; last %+v", what, v)
		}
		<-tick.C
	}
}

func hasIDs(ids ...string) func(nodeView) bool {
	want := fmt.Sprint(ids)
	return func(v nodeView) bool { return fmt.Sprint(v.ids()) == want }
}

func post(t *testing.T, d *daemonProc, path string) (int, string) {
	t.Helper()
	resp, err := http.Post("http://"+d.admin+path, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}

// loadStats is what the load saw.
type loadStats struct {
	ops, gets, puts, fills      atomic.Int64
	hits, misses, wrong, errs   atomic.Int64
	worstMissNs, worstOverrunNs atomic.Int64
	worstOpNs                   atomic.Int64
}

func maxInto(a *atomic.Int64, v int64) {
	for {
		old := a.Load()
		if v <= old || a.CompareAndSwap(old, v) {
			return
		}
	}
}

func (s *loadStats) String() string {
	return fmt.Sprintf("ops=%d (get=%d put=%d getorfill=%d) hits=%d misses=%d wrong=%d errors=%d worst_time_to_miss=%v worst_op=%v worst_overrun=%v",
		s.ops.Load(), s.gets.Load(), s.puts.Load(), s.fills.Load(), s.hits.Load(), s.misses.Load(), s.wrong.Load(), s.errs.Load(),
		time.Duration(s.worstMissNs.Load()), time.Duration(s.worstOpNs.Load()), time.Duration(s.worstOverrunNs.Load()))
}

// clusterLoad is a mixed GET / PUT / ACQUIRE (GetOrFill) load on fixed
// chains, checked byte for byte against the oracle.
type clusterLoad struct {
	ns     client.Namespace
	chains [][]client.CacheIdentity
	keys   [][]client.BlockKey
	stats  loadStats
}

func newClusterLoad(t *testing.T, model string) *clusterLoad {
	t.Helper()
	l := &clusterLoad{ns: client.Namespace{Tenant: "default", TrustDomain: "t", ModelID: model, ConfigRevision: "c", TokenizerRevision: "k",
		RoPE: "rope", DType: "fp16", Quantization: "none",
		Layout: client.Layout{Format: "raw", TPSize: 1, PPSize: 1, LayerCount: 1, KVHeads: 1, HeadDim: 1, BlockTokens: clusterBlockTokens}}}
	for c := range clusterChains {
		tokens := make([]uint32, clusterChainLen*clusterBlockTokens)
		for i := range tokens {
			tokens[i] = uint32(c*100000 + i)
		}
		ids, err := client.Identities(l.ns, tokens)
		if err != nil {
			t.Fatal(err)
		}
		keys := make([]client.BlockKey, len(ids))
		for i := range ids {
			keys[i], _ = ids[i].Key()
		}
		l.chains, l.keys = append(l.chains, ids), append(l.keys, keys)
	}
	return l
}

func (l *clusterLoad) tokens(c int) []uint32 {
	out := make([]uint32, 0, clusterChainLen*clusterBlockTokens)
	for _, id := range l.chains[c] {
		out = append(out, id.Tokens...)
	}
	return out
}

// op runs one operation under opDeadline and checks what it returned.
func (l *clusterLoad) op(cl *client.Cluster, rng *rand.Rand) {
	c := rng.IntN(clusterChains)
	ctx, cancel := context.WithTimeout(context.Background(), opDeadline)
	defer cancel()
	start := time.Now()
	missed := false
	switch r := rng.IntN(4); {
	case r < 2: // GET
		l.stats.gets.Add(1)
		for i, res := range cl.Get(ctx, l.ns, l.keys[c]) {
			switch {
			case !res.Hit:
				l.stats.misses.Add(1)
				missed = true
			case !bytes.Equal(res.Data, oracle(l.keys[c][i])):
				l.stats.wrong.Add(1)
			default:
				l.stats.hits.Add(1)
			}
		}
		if missed { // refill what missed, as an engine would after recomputing
			l.put(ctx, cl, c)
		}
	case r == 2: // PUT
		l.stats.puts.Add(1)
		l.put(ctx, cl, c)
	default: // ACQUIRE, FILL_COMMIT, WAIT through GetOrFill
		l.stats.fills.Add(1)
		got, rep, err := cl.GetOrFill(ctx, l.ns, l.tokens(c), func(_ context.Context, idx []int) ([][]byte, error) {
			out := make([][]byte, len(idx))
			for j, i := range idx {
				out[j] = oracle(l.keys[c][i])
			}
			return out, nil
		})
		switch {
		case err != nil && ctx.Err() == nil:
			l.stats.errs.Add(1)
		case err == nil:
			for i := range got {
				if !bytes.Equal(got[i], oracle(l.keys[c][i])) {
					l.stats.wrong.Add(1)
				}
			}
			l.stats.hits.Add(int64(rep.Hits + rep.Joined))
			if n := len(got) - rep.Hits - rep.Joined; n > 0 {
				l.stats.misses.Add(int64(n))
				missed = true
			}
		}
	}
	el := time.Since(start)
	l.stats.ops.Add(1)
	maxInto(&l.stats.worstOpNs, int64(el))
	if missed {
		maxInto(&l.stats.worstMissNs, int64(el))
	}
	if over := el - opDeadline; over > 0 {
		maxInto(&l.stats.worstOverrunNs, int64(over))
	}
}

func (l *clusterLoad) put(ctx context.Context, cl *client.Cluster, c int) {
	payloads := make([][]byte, clusterChainLen)
	for i := range payloads {
		payloads[i] = oracle(l.keys[c][i])
	}
	if _, err := cl.Put(ctx, l.ns, client.BlocksOf(l.chains[c], payloads)); err != nil && ctx.Err() == nil {
		l.stats.errs.Add(1)
	}
}

// start drives the load with workers until the returned stop (idempotent)
// is called; stop returns when every worker has.
func (l *clusterLoad) start(cl *client.Cluster, workers int) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			for {
				select {
				case <-done:
					return
				default:
				}
				l.op(cl, rng)
			}
		}()
	}
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		wg.Wait()
	}
}

// phase lets the load run until at least n more operations have completed.
func (l *clusterLoad) phase(t *testing.T, name string, n int64) {
	t.Helper()
	target := l.stats.ops.Load() + n
	deadline := time.Now().Add(60 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for l.stats.ops.Load() < target {
		if time.Now().After(deadline) {
			t.Fatalf("%s: load stalled at %s", name, &l.stats)
		}
		<-tick.C
	}
	t.Logf("after %s: %s", name, &l.stats)
}

func dialCluster(t *testing.T, seeds ...*daemonProc) *client.Cluster {
	t.Helper()
	var addrs []string
	for _, d := range seeds {
		addrs = append(addrs, d.addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := client.DialCluster(ctx, client.ClusterConfig{Seeds: addrs,
		Node: client.Config{Conns: 2, DialTimeout: 250 * time.Millisecond, RequestTimeout: opDeadline}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

func checkLoad(t *testing.T, l *clusterLoad) {
	t.Helper()
	s := &l.stats
	if s.wrong.Load() != 0 {
		t.Errorf("%d wrong payloads", s.wrong.Load())
	}
	if s.errs.Load() != 0 {
		t.Errorf("%d operations failed instead of degrading to a miss", s.errs.Load())
	}
	if over := time.Duration(s.worstOverrunNs.Load()); over > overrunSlack {
		t.Errorf("a request waited %v past its %v deadline (bound %v)", over, opDeadline, overrunSlack)
	}
	if s.hits.Load() == 0 {
		t.Error("the load never hit")
	}
}

// TestThreeNodeCluster: three gpucached processes and a real etcd; a
// client routes a mixed GET/PUT/ACQUIRE load by placement while one node is
// killed with SIGKILL and restarted (it rejoins under a new epoch), one is
// drained (it deregisters and exits 0), and a fault domain of two members
// is isolated in one transaction (a budget one short changes nothing).
// Throughout: zero wrong payloads, no failed operation, no request past its
// deadline plus 50 ms.
func TestThreeNodeCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three daemons and etcd")
	}
	etcd := etcdtest.Start(t)
	bin := buildDaemon(t)
	n1 := clusterNode(t, bin, etcd.Endpoint, "n1", "rack-a")
	n2 := clusterNode(t, bin, etcd.Endpoint, "n2", "rack-a")
	n3 := clusterNode(t, bin, etcd.Endpoint, "n3", "rack-b")
	v := awaitView(t, n1, "three members", hasIDs("n1", "n2", "n3"))
	t.Logf("cluster up: epoch %d, members %v", v.Epoch, v.ids())

	l := newClusterLoad(t, "three-node")
	cl := dialCluster(t, n1, n2, n3)
	stop := l.start(cl, 4)
	defer stop()
	l.phase(t, "warm-up", 400)

	// Fault 1: kill -9 n2. Its keys miss (its address refuses) until its
	// lease expires and the epoch moves them to n1 and n3, where they miss
	// once and are refilled.
	before := viewOf(t, n1).Epoch
	n2.cmd.Process.Kill()
	<-n2.exited
	v = awaitView(t, n1, "n2's lease expired", hasIDs("n1", "n3"))
	if v.Epoch <= before {
		t.Fatalf("epoch did not advance on n2's death: %d -> %d", before, v.Epoch)
	}
	l.phase(t, "kill -9 n2", 300)

	// Restart n2 with the same id: it rejoins under a new epoch.
	before = v.Epoch
	n2 = clusterNode(t, bin, etcd.Endpoint, "n2", "rack-a")
	v = awaitView(t, n2, "n2 rejoined", hasIDs("n1", "n2", "n3"))
	if v.Epoch <= before {
		t.Fatalf("rejoin did not advance the epoch: %d -> %d", before, v.Epoch)
	}
	t.Logf("n2 rejoined at epoch %d", v.Epoch)
	l.phase(t, "restart n2", 300)

	// Fault 2: drain n3. It takes no new fill, finishes its in-flight
	// ones, deregisters and exits 0.
	if code, body := post(t, n3, "/admin/drain"); code != http.StatusOK {
		t.Fatalf("drain n3: %d %s", code, body)
	}
	select {
	case err := <-n3.exited:
		if err != nil {
			t.Fatalf("drained n3 exited with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("n3 did not stop after its drain")
	}
	v = awaitView(t, n1, "n3 left", hasIDs("n1", "n2"))
	l.phase(t, "drain n3", 300)

	// Bring a rack-b node back, then isolate rack-a (n1 and n2) in one
	// transaction. A budget one short changes nothing.
	n3 = clusterNode(t, bin, etcd.Endpoint, "n3", "rack-b")
	v = awaitView(t, n1, "n3 back", hasIDs("n1", "n2", "n3"))
	l.phase(t, "n3 back", 200)
	if code, body := post(t, n3, "/admin/isolate?domain=rack-a&budget=1"); code != http.StatusConflict {
		t.Fatalf("isolate with a short budget: %d %s", code, body)
	}
	if after := viewOf(t, n3); after.Epoch != v.Epoch || fmt.Sprint(after.ids()) != fmt.Sprint(v.ids()) {
		t.Fatalf("a refused isolation changed the view: %+v -> %+v", v, after)
	}
	if code, body := post(t, n3, "/admin/isolate?domain=rack-a&budget=2"); code != http.StatusOK {
		t.Fatalf("isolate rack-a: %d %s", code, body)
	}
	iso := awaitView(t, n3, "rack-a isolated", hasIDs("n3"))
	if iso.Epoch != v.Epoch+2 {
		t.Fatalf("isolation of two members moved the epoch %d -> %d, want +2", v.Epoch, iso.Epoch)
	}
	l.phase(t, "isolate rack-a", 300)

	stop()
	st := cl.Stats()
	t.Logf("THREE-NODE RESULT: %s; faults: kill -9 n2 + restart, drain n3, isolate rack-a (2 members); client: %+v", &l.stats, st)
	checkLoad(t, l)
}

// TestMixedVersionCluster: a rolling upgrade and a rollback with the load
// running. n1 runs the previous protocol (--protocol-max 1: no MEMBERS, no
// WRONG_EPOCH; a simulated N-1 release) beside two version-2 nodes; the
// client negotiates per node and routes to all three. n1 is then upgraded
// (drained, restarted at version 2) and n3 rolled back (drained, restarted
// at version 1). Zero wrong payloads and no failed operation throughout.
func TestMixedVersionCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three daemons and etcd")
	}
	etcd := etcdtest.Start(t)
	bin := buildDaemon(t)
	n1 := clusterNode(t, bin, etcd.Endpoint, "n1", "rack-a", "--protocol-max", "1")
	n2 := clusterNode(t, bin, etcd.Endpoint, "n2", "rack-b")
	n3 := clusterNode(t, bin, etcd.Endpoint, "n3", "rack-c")
	v := awaitView(t, n2, "three members", hasIDs("n1", "n2", "n3"))
	versions := map[string]uint8{}
	for _, m := range v.Members {
		versions[m.ID] = m.ProtoVersion
	}
	if versions["n1"] != 1 || versions["n2"] != wire.VersionMax {
		t.Fatalf("registered versions %v", versions)
	}
	l := newClusterLoad(t, "mixed")
	cl := dialCluster(t, n2, n3, n1)
	stop := l.start(cl, 4)
	defer stop()
	l.phase(t, "mixed v1+v2", 400)

	restart := func(d *daemonProc, id, domain string, extra ...string) *daemonProc {
		if code, body := post(t, d, "/admin/drain"); code != http.StatusOK {
			t.Fatalf("drain %s: %d %s", id, code, body)
		}
		if err := <-d.exited; err != nil {
			t.Fatalf("%s exited with %v", id, err)
		}
		return clusterNode(t, bin, etcd.Endpoint, id, domain, extra...)
	}
	n1 = restart(n1, "n1", "rack-a") // upgrade
	awaitView(t, n1, "n1 upgraded", func(v nodeView) bool {
		for _, m := range v.Members {
			if m.ID == "n1" {
				return m.ProtoVersion == wire.VersionMax
			}
		}
		return false
	})
	l.phase(t, "n1 upgraded to v2", 300)
	n3 = restart(n3, "n3", "rack-c", "--protocol-max", "1") // rollback
	awaitView(t, n3, "n3 rolled back", func(v nodeView) bool {
		for _, m := range v.Members {
			if m.ID == "n3" {
				return m.ProtoVersion == 1
			}
		}
		return false
	})
	l.phase(t, "n3 rolled back to v1", 300)
	stop()
	t.Logf("MIXED-VERSION RESULT: %s; client: %+v", &l.stats, cl.Stats())
	checkLoad(t, l)
}
