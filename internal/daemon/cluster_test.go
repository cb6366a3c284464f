package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/wire"

	"os"
	"path/filepath"
	"strings"

	"github.com/gpucache/gpucache/client"
	"github.com/gpucache/gpucache/internal/cold/s3store/s3test"
	"github.com/gpucache/gpucache/internal/config"
	"github.com/gpucache/gpucache/internal/control/etcdmember/etcdtest"
	"github.com/gpucache/gpucache/internal/degrade"
	"github.com/gpucache/gpucache/internal/security/tlsconf"
	"github.com/gpucache/gpucache/internal/security/tlsconf/tlstest"
	"github.com/gpucache/gpucache/internal/server"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// clusterConfig is a test node of the cluster at endpoint.
func clusterConfig(endpoint, id, domain string) config.Config {
	c := testConfig()
	c.EtcdEndpoints, c.NodeID, c.FaultDomain = endpoint, id, domain
	c.MemberLeaseTTL = 2 * time.Second
	return c
}

// startNode runs a node until the test ends (or until it stops on its own,
// after a drain); it returns its addresses and the node.
func startNode(t *testing.T, c config.Config, opts Options) (Addrs, *Node) {
	t.Helper()
	n := mustStart(t, c, opts)
	return n.Addrs(), n
}

// clusterView reads a node's GET /cluster.
func clusterView(t *testing.T, admin string) viewJSON {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/cluster")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v viewJSON
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestDegradeControlPlaneLoss: a cluster node whose etcd becomes
// unreachable (the control_plane_loss failpoint on its health probe) keeps
// serving the blocks it owns under the last known epoch but stores nothing
// new (read-only); once control_grace has passed without etcd, the owner of
// every key is unknown and every read is a clean miss; when etcd answers
// again the node is live and the block, never lost, hits again. Then etcd
// really stops, and the node degrades the same way.
func TestDegradeControlPlaneLoss(t *testing.T) {
	etcd := etcdtest.Start(t)
	c := clusterConfig(etcd.Endpoint, "solo", "rack-a")
	// A probe's budget is min(control_probe, 2s): at 20 ms a loaded machine
	// failed probes on its own, and the node flipped to read-only and back
	// before the failpoint was armed (a stale event then passed for the
	// fault's). 250 ms keeps such flips rare; stale events are drained below.
	c.ControlProbe, c.ControlGrace = 250*time.Millisecond, 1500*time.Millisecond
	c.DrainTimeout = 2 * time.Second
	faults := &degrade.Registry{}
	modes := make(chan server.ControlMode, 16)
	a, _ := startNode(t, c, Options{Faults: faults, OnControlMode: func(m server.ControlMode) { modes <- m }})
	ns, _, ids, keys, payloads := coldBlocks(t)
	cl := writeBlocks(t, a.Data, ns, ids[:16], payloads[:16])
	defer cl.Close()
	if v := cl.ProtocolVersion(); v != wire.VersionMax { // protocol_max's default (READ_ONLY since 4)
		t.Fatalf("negotiated protocol %d, want %d", v, wire.VersionMax)
	}
	get := func(i int) client.GetResult {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		r := cl.Get(ctx, ns, keys[i:i+1])[0]
		if r.Hit && !bytes.Equal(r.Data, payloads[i]) {
			t.Fatalf("block %d: wrong bytes", i)
		}
		return r
	}
	put := func(i int) client.Status {
		st, err := cl.Put(context.Background(), ns, client.BlocksOf(ids[i:i+1], payloads[i:i+1]))
		if err != nil {
			t.Fatal(err)
		}
		return st[0]
	}
	waitMode := func(want server.ControlMode) time.Duration {
		t.Helper()
		start := time.Now()
		deadline := time.After(30 * time.Second)
		for {
			select {
			case m := <-modes:
				if m == want {
					return time.Since(start)
				}
			case <-deadline:
				t.Fatalf("mode %s never came", want)
			}
		}
	}
	if !get(0).Hit {
		t.Fatal("live: stored block missed")
	}

	// Only transitions after the fault count: forget earlier ones.
	for drained := false; !drained; {
		select {
		case <-modes:
		default:
			drained = true
		}
	}
	armed := time.Now()
	disarm := faults.Arm(degrade.ControlPlaneLoss, degrade.Fail)
	waitMode(server.ControlReadOnly)
	if !get(0).Hit {
		t.Fatal("read-only: a block of the last known epoch missed")
	}
	if st := put(20); st != client.StatusReadOnly {
		t.Fatalf("read-only: PUT answered %s, want READ_ONLY", st)
	}
	waitMode(server.ControlUnknown)
	toMiss := time.Since(armed)
	if r := get(0); r.Hit {
		t.Fatal("unknown owner: read hit")
	}
	// The order (read-only, then unknown) is what is asserted; the time it
	// took (about the grace, plus one probe interval and one probe budget)
	// is logged, not checked: a loaded machine stretches it.
	if faults.Hits(degrade.ControlPlaneLoss) == 0 {
		t.Fatal("failpoint never fired")
	}
	t.Logf("control_plane_loss: read-only, then every read a miss after %v (grace %v)", toMiss, c.ControlGrace)
	disarm()
	waitMode(server.ControlLive)
	if !get(0).Hit {
		t.Fatal("live again: block lost")
	}
	if st := put(20); st != client.StatusStored {
		t.Fatalf("live again: put %v", st)
	}

	// Real loss: stop etcd. Stopping it takes longer than this test's
	// grace, so only the order of the modes and the final miss are checked
	// here; the read-only phase was checked above.
	t0 := time.Now()
	etcd.Close()
	t.Logf("etcd close took %v", time.Since(t0))
	waitMode(server.ControlReadOnly)
	waitMode(server.ControlUnknown)
	t.Logf("unknown after %v", time.Since(t0))
	if get(0).Hit {
		t.Fatal("etcd down past grace: read hit")
	}
	t.Logf("end of body after %v", time.Since(t0))
}

// TestClusterDrainLeaves: two nodes join; the admin drain of one stops it
// after it deregisters, and the other's view loses it under a new epoch.
func TestClusterDrainLeaves(t *testing.T) {
	etcd := etcdtest.Start(t)
	a, _ := startNode(t, clusterConfig(etcd.Endpoint, "node-a", "rack-a"), Options{})
	b, bNode := startNode(t, clusterConfig(etcd.Endpoint, "node-b", "rack-b"), Options{})
	va := clusterView(t, a.Admin)
	vb := clusterView(t, b.Admin)
	if len(vb.Members) != 2 || vb.Epoch < va.Epoch {
		t.Fatalf("b's view after both joined: %+v", vb)
	}
	resp, err := http.Post("http://"+b.Admin+"/admin/drain", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("drain: %s", resp.Status)
	}
	select {
	case <-bNode.Done():
		if err := bNode.Err(); err != nil {
			t.Fatalf("drained node: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("drained node did not stop")
	}
	// b left in one transaction after its drain: two epochs past vb.
	cli := etcd.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := cli.Get(ctx, "/gpucache/epoch")
	if err != nil || len(r.Kvs) != 1 {
		t.Fatalf("epoch key: %v", err)
	}
	if got := string(r.Kvs[0].Value); got != strconv.FormatUint(vb.Epoch+2, 10) {
		t.Fatalf("epoch after drain+leave %s, want %d", got, vb.Epoch+2)
	}
}

// awaitMembers polls a node's /cluster (an admin read) until it lists
// exactly ids.
func awaitMembers(t *testing.T, admin string, ids ...string) viewJSON {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		v := clusterView(t, admin)
		var got []string
		for _, m := range v.Members {
			got = append(got, m.ID)
		}
		if fmt.Sprint(got) == fmt.Sprint(ids) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("members %v never became %v", got, ids)
		}
		<-tick.C
	}
}

// TestDrainedKeysRefillFromSharedS3: payloads never move between hot
// tiers; the shared cold tier serves the misses. Node A alone takes 10 MiB
// through a 4 MiB hot tier (the rest is evicted, written behind to S3 at
// the drain's flush); node B joins; A is drained and leaves. B now owns
// every key and serves from S3, byte-identical and as cold refills:
//   - with cold_spill_on_drain (the default), every block: A's drain wrote
//     the blocks its DRAM still held to S3 before it left;
//   - without it, exactly the blocks A had evicted; the blocks only A's
//     DRAM held are clean misses.
func TestDrainedKeysRefillFromSharedS3(t *testing.T) {
	etcd := etcdtest.Start(t)
	endpoint, ak, sk := s3test.Start(t)
	for _, spill := range []bool{true, false} {
		t.Run(fmt.Sprintf("spill=%v", spill), func(t *testing.T) {
			node := func(id, domain string) config.Config {
				c := clusterConfig(etcd.Endpoint, id, domain)
				c.EtcdPrefix = fmt.Sprintf("/spill-%v/", spill)
				c.ColdStore, c.S3Endpoint, c.S3Bucket, c.S3Prefix = "s3", endpoint, s3test.Bucket, fmt.Sprintf("cluster-spill-%v/", spill)
				c.S3AccessKey, c.S3SecretKey = ak, sk
				c.HotCapacity, c.HotSlab, c.HotMaxClass = 4<<20, 1<<20, 1<<20
				c.ColdFlushInterval = time.Hour // flushed by the drain
				c.ColdSpillOnDrain = spill
				return c
			}
			a, aNode := startNode(t, node("node-a", "rack-a"), Options{})
			ns, _, ids, keys, payloads := coldBlocks(t)
			cl := writeBlocks(t, a.Data, ns, ids, payloads)
			stat, err := cl.Stat(context.Background())
			cl.Close()
			if err != nil {
				t.Fatal(err)
			}
			evicted := stat["hot_evictions"]
			if evicted == 0 || evicted >= uint64(len(keys)) {
				t.Fatalf("%d of %d blocks evicted: the test needs some in DRAM and some evicted", evicted, len(keys))
			}
			b, _ := startNode(t, node("node-b", "rack-b"), Options{})
			awaitMembers(t, b.Admin, "node-a", "node-b")
			resp, err := http.Post("http://"+a.Admin+"/admin/drain", "", nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			<-aNode.Done()
			if err := aNode.Err(); err != nil {
				t.Fatalf("drained node: %v", err)
			}
			awaitMembers(t, b.Admin, "node-b")
			rb, hits := readBack(t, b.Data, ns, keys, payloads)
			defer rb.Close()
			st, _ := rb.Stat(context.Background())
			t.Logf("spill=%v: A evicted %d of %d blocks to S3; after A's drain B served %d from the cold tier (%d cold refills), %d clean misses",
				spill, evicted, len(keys), hits, st["cold_refill_hits"], len(keys)-hits)
			if spill && hits != len(keys) {
				t.Fatalf("with the drain spill B served %d of %d blocks", hits, len(keys))
			}
			if !spill && uint64(hits) != evicted {
				t.Fatalf("without the drain spill B served %d blocks, A had evicted %d to the shared cold tier", hits, evicted)
			}
			if st["cold_refill_hits"] != uint64(hits) {
				t.Fatalf("B's hits %d are not all cold refills (%d): a payload moved between hot tiers?", hits, st["cold_refill_hits"])
			}
		})
	}
}

// TestClusterOverEtcdTLSAndAuth: a node joins an etcd that requires TLS
// with client certificates and user authentication (etcd_ca, etcd_cert,
// etcd_key, etcd_username, etcd_password_file); without the password it
// refuses to start with etcd's reason, whenever etcd answers.
func TestClusterOverEtcdTLSAndAuth(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "etcd-ca")
	certFile, keyFile := ca.IssueFiles(t, dir, "etcd", "etcd")
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, ca.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	etcd := etcdtest.StartWith(t, &etcdtest.TLS{CertFile: certFile, KeyFile: keyFile, ClientCA: caFile})
	nodeCert, nodeKey := ca.IssueFiles(t, dir, "node", "gpucache-node", tlstest.ClientAuth())
	tc, err := tlsconf.NewClient(tlsconf.ClientFiles{CAFile: caFile, CertFile: nodeCert, KeyFile: nodeKey})
	if err != nil {
		t.Fatal(err)
	}
	admin, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.Endpoint}, TLS: tc, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	etcdtest.EnableAuth(t, admin, "s3cret-root")
	pw := filepath.Join(dir, "etcd.pw")
	if err := os.WriteFile(pw, []byte("s3cret-root\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	c := clusterConfig(etcd.Endpoint, "secure-node", "rack-a")
	c.EtcdCA, c.EtcdCert, c.EtcdKey = caFile, nodeCert, nodeKey
	c.EtcdUsername, c.EtcdPasswordFile = "root", pw
	a, _ := startNode(t, c, Options{})
	if v := awaitMembers(t, a.Admin, "secure-node"); v.Mode != "live" {
		t.Fatalf("control mode %s", v.Mode)
	}

	// A wrong password: the join fails, with etcd's reason.
	bad := filepath.Join(dir, "bad.pw")
	os.WriteFile(bad, []byte("wrong"), 0o600)
	c2 := clusterConfig(etcd.Endpoint, "other-node", "rack-b")
	c2.EtcdCA, c2.EtcdCert, c2.EtcdKey = caFile, nodeCert, nodeKey
	c2.EtcdUsername, c2.EtcdPasswordFile = "root", bad
	// The join ends when etcd answers (TestJoinWaitsForEtcdAuthAnswer);
	// its deadline, 70 s with this TTL, only bounds a hang.
	c2.MemberLeaseTTL = 30 * time.Second
	err = startErr(t, c2, Options{})
	if err == nil || !strings.Contains(err.Error(), "authentication failed") {
		t.Fatalf("join with a wrong etcd password: %v", err)
	}
}

// etcdBusy is how long TestJoinWaitsForEtcdAuthAnswer's proxy holds etcd's
// answers back: an injected latency (etcd busy hashing a password on a
// loaded machine), longer than the 5 s that used to bound authentication
// inside clientv3.New, and far below the join deadline the test configures.
// The test does not wait on it for anything to happen: it is the fault.
const etcdBusy = 6 * time.Second

// TestJoinWaitsForEtcdAuthAnswer: a join with a wrong etcd password ends
// with etcd's "authentication failed" when etcd answers, however late
// within the join deadline; it never gives up earlier on a deadline of its
// own, which a slow answer would lose to as "context deadline exceeded".
func TestJoinWaitsForEtcdAuthAnswer(t *testing.T) {
	etcd := etcdtest.Start(t)
	etcdtest.EnableAuth(t, etcd.Client(t), "s3cret-root")
	hold := make(chan struct{})
	endpoint := etcd.Proxy(t, hold)
	bad := filepath.Join(t.TempDir(), "bad.pw")
	if err := os.WriteFile(bad, []byte("wrong"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := clusterConfig(endpoint, "late-node", "rack-b")
	c.EtcdUsername, c.EtcdPasswordFile = "root", bad
	c.MemberLeaseTTL = 30 * time.Second // a join deadline of 70 s
	joined := make(chan error, 1)
	go func() {
		n, err := joinCluster(t.Context(), c, "127.0.0.1:1", quiet(), Options{})
		if n != nil {
			n.cli.Close()
		}
		joined <- err
	}()
	select {
	case err := <-joined:
		t.Fatalf("the join ended before etcd answered: %v", err)
	case <-time.After(etcdBusy):
	}
	close(hold)
	if err := <-joined; err == nil || !strings.Contains(err.Error(), "authentication failed") {
		t.Fatalf("join with a wrong etcd password, answered late: %v", err)
	}
}
