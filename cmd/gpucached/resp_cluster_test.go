package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/cold/s3store/s3test"
	"github.com/gpucache/gpucache/internal/config"
	"github.com/gpucache/gpucache/internal/control"
	"github.com/gpucache/gpucache/internal/control/etcdmember/etcdtest"
)

// The RESP cluster test (a key sent to any node is forwarded to its owner): three
// gpucached processes, a real etcd and a real S3 server (versitygw, the
// nodes' shared cold tier), every node with a RESP listener and the same
// tenants. LMCache-style keys are written, read and tested through every
// node over RESP, as authenticated tenants, so a key owned by another node
// takes the forwarded path with the caller's tenant and secret. The owner
// of some keys is then killed with SIGKILL: its keys are misses ($-1, :0)
// from the survivors, the others still hit, and no reply ever carries
// another key's bytes.

const (
	rcModel = "meta-llama/Llama-3.1-8B"
	// rcHangGuard is a read deadline on every RESP call: it only turns a
	// hang into a failure, it measures nothing.
	rcHangGuard = 30 * time.Second
	rcKeysEach  = 3  // keys each node owns, at least
	rcKeysMin   = 12 // keys in all, at least
)

// rcProfile is the RESP profile both tenants use (one namespace each).
var rcProfile = config.RESPProfileConfig{Model: rcModel, ConfigRevision: "r1", TokenizerRevision: "t1",
	DType: "bfloat16", VariableLength: true}

// rcKey is the LMCache MP-mode key of chunk i: model@kv_rank@group@hash.
func rcKey(i int) string {
	h := sha256.Sum256([]byte(fmt.Sprintf("resp-cluster-chunk-%d", i)))
	return rcModel + "@0000000a@0@" + hex.EncodeToString(h[:])
}

// rcPayload is the value of key, a pure function of it: 1..4 MiB, or n
// bytes when n > 0.
func rcPayload(key string, n int) []byte {
	s := sha256.Sum256([]byte(key))
	if n == 0 {
		n = 1<<20 + int(s[0])%4*(768<<10) + int(s[1])
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = s[i%32] ^ byte(i>>5) ^ byte(i>>13)
	}
	return b
}

// rcConn is a minimal RESP2 client: one command outstanding, as LMCache's
// C++ client.
type rcConn struct {
	t    *testing.T
	name string
	nc   net.Conn
	r    *bufio.Reader
}

// rcReply is one reply: its type byte and its line, or a bulk's bytes
// (nil for $-1).
type rcReply struct {
	kind byte
	line string
	bulk []byte
}

func (r rcReply) String() string {
	if r.kind == '$' {
		if r.bulk == nil {
			return "$-1"
		}
		return fmt.Sprintf("$%d", len(r.bulk))
	}
	return string(r.kind) + r.line
}

func rcDial(t *testing.T, name, addr, user, secret string) *rcConn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("%s: dial RESP %s: %v", name, addr, err)
	}
	t.Cleanup(func() { nc.Close() })
	c := &rcConn{t: t, name: name, nc: nc, r: bufio.NewReaderSize(nc, 1<<16)}
	if r := c.do("AUTH", user, secret); r.kind != '+' || r.line != "OK" {
		t.Fatalf("%s: AUTH %s: %s", name, user, r)
	}
	return c
}

// do sends one command and reads its reply within the hang guard.
func (c *rcConn) do(args ...any) rcReply {
	c.t.Helper()
	var b bytes.Buffer
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		var v []byte
		switch a := a.(type) {
		case string:
			v = []byte(a)
		case []byte:
			v = a
		}
		fmt.Fprintf(&b, "$%d\r\n", len(v))
		b.Write(v)
		b.WriteString("\r\n")
	}
	c.nc.SetDeadline(time.Now().Add(rcHangGuard))
	if _, err := c.nc.Write(b.Bytes()); err != nil {
		c.t.Fatalf("%s: write %v: %v", c.name, args[0], err)
	}
	line, err := c.r.ReadString('\n')
	if err != nil || len(line) < 3 || !strings.HasSuffix(line, "\r\n") {
		c.t.Fatalf("%s: %v: reply line %q: %v", c.name, args[0], line, err)
	}
	r := rcReply{kind: line[0], line: line[1 : len(line)-2]}
	if r.kind != '$' {
		return r
	}
	n, err := strconv.Atoi(r.line)
	switch {
	case err != nil || n < -1:
		c.t.Fatalf("%s: %v: bad bulk length %q", c.name, args[0], r.line)
	case n == -1:
		return r
	}
	r.bulk = make([]byte, n+2)
	if _, err := io.ReadFull(c.r, r.bulk); err != nil || !bytes.HasSuffix(r.bulk, []byte("\r\n")) {
		c.t.Fatalf("%s: %v: bulk of %d bytes: %v", c.name, args[0], n, err)
	}
	r.bulk = r.bulk[:n]
	return r
}

// rcView reads a node's view and control mode (GET /cluster, as the
// admin tenant).
func rcView(t *testing.T, d *daemonProc, bearer string) (control.View, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+d.admin+"/cluster", nil)
	req.Header.Set("Authorization", "Bearer "+bearer)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /cluster: %d %s", resp.StatusCode, b)
	}
	var vj struct {
		Epoch   uint64 `json:"epoch"`
		Mode    string `json:"control_mode"`
		Members []struct {
			ID            string `json:"id"`
			Addr          string `json:"addr"`
			FaultDomain   string `json:"fault_domain"`
			ProtoVersion  uint8  `json:"proto_version"`
			CapacityBytes uint64 `json:"capacity_bytes"`
			Draining      bool   `json:"draining"`
		} `json:"members"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&vj); err != nil {
		t.Fatal(err)
	}
	ms := make([]control.Member, len(vj.Members))
	for i, m := range vj.Members {
		ms[i] = control.Member{ID: control.MemberID(m.ID), Addr: m.Addr, FaultDomain: m.FaultDomain,
			ProtoVersion: m.ProtoVersion, CapacityBytes: m.CapacityBytes, Draining: m.Draining}
	}
	v, err := control.NewView(vj.Epoch, ms)
	if err != nil {
		t.Fatal(err)
	}
	return v, vj.Mode
}

// rcAwaitMembers polls a node's view until its members are ids (the
// membership converges through etcd's watch) and it is in live control
// mode (it takes writes), failing after a generous bound, and returns it.
func rcAwaitMembers(t *testing.T, d *daemonProc, bearer string, ids ...string) control.View {
	t.Helper()
	want := strings.Join(ids, ",")
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		v, mode := rcView(t, d, bearer)
		var got []string
		for _, m := range v.Members() {
			got = append(got, string(m.ID))
		}
		if strings.Join(got, ",") == want && mode == "live" {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("node view never became %v, live; last %v at epoch %d, %s", ids, got, v.Epoch(), mode)
		}
		<-tick.C
	}
}

// rcMetrics scrapes a node's /metrics: the value of every unlabelled
// gpucache_* metric.
func rcMetrics(t *testing.T, d *daemonProc) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + d.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 || !strings.HasPrefix(f[0], "gpucache_") {
			continue
		}
		if v, err := strconv.ParseFloat(f[1], 64); err == nil {
			out[f[0]] = v
		}
	}
	return out
}

// TestRESPClusterForwarding: SET, GET and EXISTS of LMCache keys (1-4 MiB
// values and one of 32 MiB) through any of three nodes; every node answers
// the same bytes for the same key, the other tenant misses everywhere, the
// nodes count the forwarded operations (STAT and /metrics); SIGKILL of an
// owner turns its keys into misses on the survivors (before and after the
// view drops it) while the others keep hitting; a SET after the view
// change stores the key on its new owner. 0 wrong payloads throughout.
func TestRESPClusterForwarding(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three daemons, etcd and an S3 server")
	}
	s3 := s3test.NewServer(t) // skips without versitygw (fails under CI)
	s3.Start(t)
	etcd := etcdtest.Start(t)
	bin := buildDaemon(t)
	dir := t.TempDir()
	secrets := map[string]string{}
	for _, tenant := range []string{"acme", "beta", "ops"} {
		secrets[tenant] = string(randomSecret(t, filepath.Join(dir, tenant+".secret")))
	}
	prof := fmt.Sprintf("{model: %q, config_revision: %s, tokenizer_revision: %s, dtype: %s, variable_length: true}",
		rcProfile.Model, rcProfile.ConfigRevision, rcProfile.TokenizerRevision, rcProfile.DType)
	cfg := fmt.Sprintf(`tenants:
  - name: acme
    secrets: [{id: acme-1, file: %[1]s/acme.secret}]
    resp: %[2]s
  - name: beta
    secrets: [{id: beta-1, file: %[1]s/beta.secret}]
    resp: %[2]s
  - name: ops
    secrets: [{id: ops-1, file: %[1]s/ops.secret}]
    rights: ["*=a"]
`, dir, prof)
	cfgPath := filepath.Join(dir, "gpucached.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	extra := []string{"--config", cfgPath, "--audit-log", "off", "--resp-listen", "127.0.0.1:0",
		"--hot-capacity", "256MiB", "--hot-max-class", "32MiB",
		// The default etcd probe (1 s): clusterNode's 100 ms, against the
		// test's own etcd on a loaded machine, can flip a node read-only.
		"--control-probe", "1s",
		"--cold-store", "s3", "--s3-endpoint", s3.Endpoint, "--s3-bucket", s3test.Bucket, "--s3-prefix", "resp-cluster/",
		"--s3-access-key", s3.AccessKey, "--s3-secret-key", s3.SecretKey}
	ids := []string{"n1", "n2", "n3"}
	nodes := map[string]*daemonProc{}
	for i, id := range ids {
		nodes[id] = clusterNode(t, bin, etcd.Endpoint, id, fmt.Sprintf("rack-%d", i), extra...)
		if nodes[id].resp == "" {
			t.Fatalf("%s logged no RESP address", id)
		}
	}
	ops := secrets["ops"]
	v := rcAwaitMembers(t, nodes["n1"], ops, ids...)
	for _, id := range ids[1:] {
		rcAwaitMembers(t, nodes[id], ops, ids...)
	}
	t.Logf("cluster up at epoch %d", v.Epoch())

	// The keys: enough that every node owns rcKeysEach of them, the
	// first one (owned by whoever) 32 MiB.
	nsDigest := func(tenant string) identity.NamespaceDigest {
		d, err := rcProfile.Namespace(tenant).Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	acmeDigest := nsDigest("acme")
	owner := map[string]string{} // key -> owning node
	perNode := map[string]int{}
	var keys []string
	for i := 0; len(keys) < rcKeysMin || perNode["n1"] < rcKeysEach || perNode["n2"] < rcKeysEach || perNode["n3"] < rcKeysEach; i++ {
		if i > 1000 {
			t.Fatalf("placement gave %v after 1000 keys", perNode)
		}
		k := rcKey(i)
		m, ok := control.Owner(v, identity.OpaqueKey(acmeDigest, []byte(k)))
		if !ok {
			t.Fatal("no owner")
		}
		owner[k] = string(m.ID)
		perNode[string(m.ID)]++
		keys = append(keys, k)
	}
	payload := map[string][]byte{}
	for i, k := range keys {
		n := 0
		if i == 0 {
			n = 32 << 20
		}
		payload[k] = rcPayload(k, n)
	}
	t.Logf("%d keys, owners %v", len(keys), perNode)

	acme, beta := map[string]*rcConn{}, map[string]*rcConn{}
	for _, id := range ids {
		acme[id] = rcDial(t, "acme@"+id, nodes[id].resp, "acme", secrets["acme"])
		beta[id] = rcDial(t, "beta@"+id, nodes[id].resp, "beta", secrets["beta"])
	}
	var hits, wrong, misses int
	// get reads k through c: a hit must carry k's bytes.
	get := func(c *rcConn, k string) bool {
		t.Helper()
		r := c.do("GET", k)
		switch {
		case r.kind != '$':
			t.Fatalf("%s: GET %s: %s, want a bulk or $-1", c.name, k, r)
		case r.bulk == nil:
			misses++
			return false
		case !bytes.Equal(r.bulk, payload[k]):
			wrong++
			t.Errorf("%s: GET %s: %d wrong bytes (stored %d)", c.name, k, len(r.bulk), len(payload[k]))
			return false
		}
		hits++
		return true
	}
	exists := func(c *rcConn, k string) bool {
		t.Helper()
		switch r := c.do("EXISTS", k); {
		case r.kind == ':' && r.line == "1":
			return true
		case r.kind == ':' && r.line == "0":
			return false
		default:
			t.Fatalf("%s: EXISTS %s: %s", c.name, k, r)
			return false
		}
	}

	// SET each key through a node that is not its owner (forwarded), and
	// a second time through its owner (chunks are immutable: +OK, the
	// first bytes stay).
	for i, k := range keys {
		via := ids[i%3]
		if via == owner[k] {
			via = ids[(i+1)%3]
		}
		if r := acme[via].do("SET", k, payload[k]); r.kind != '+' || r.line != "OK" {
			t.Fatalf("SET %s through %s (owner %s): %s", k, via, owner[k], r)
		}
		if r := acme[owner[k]].do("SET", k, rcPayload(k+"other", 1<<20)); r.kind != '+' || r.line != "OK" {
			t.Fatalf("second SET %s at its owner: %s", k, r)
		}
	}
	// Every node answers the same bytes, and EXISTS 1, for every key; the
	// other tenant misses them everywhere.
	for _, k := range keys {
		for _, id := range ids {
			if !get(acme[id], k) {
				t.Fatalf("GET %s through %s (owner %s): a miss", k, id, owner[k])
			}
			if !exists(acme[id], k) {
				t.Fatalf("EXISTS %s through %s: 0", k, id)
			}
			if r := beta[id].do("GET", k); r.kind != '$' || r.bulk != nil {
				t.Fatalf("beta GET %s through %s: %s, want $-1", k, id, r)
			}
			if exists(beta[id], k) {
				t.Fatalf("beta EXISTS %s through %s: 1", k, id)
			}
		}
	}
	// The forwarded operations are counted: STAT's resp_forwarded and the
	// forwarder's own counters, on /metrics.
	var forwarded, forwardOps float64
	for _, id := range ids {
		m := rcMetrics(t, nodes[id])
		if _, ok := m["gpucache_forward_clients"]; !ok {
			t.Errorf("%s: /metrics has no gpucache_forward_clients gauge", id)
		}
		forwarded += m["gpucache_resp_forwarded_total"]
		forwardOps += m["gpucache_forward_ops_total"]
	}
	if forwarded == 0 || forwardOps < forwarded {
		t.Errorf("forwarded RESP commands %v, forwarder operations %v: want > 0 and the forwarder counting each", forwarded, forwardOps)
	}

	// SIGKILL the owner of the 32 MiB key. Its keys are misses on the
	// survivors at once (its address refuses) and after its lease expires
	// and the view drops it (their new owner never had them); the others
	// keep hitting.
	victim := owner[keys[0]]
	var survivors []string
	for _, id := range ids {
		if id != victim {
			survivors = append(survivors, id)
		}
	}
	nodes[victim].cmd.Process.Kill()
	<-nodes[victim].exited
	check := func(phase string) {
		t.Helper()
		var worst time.Duration
		for _, k := range keys {
			for _, id := range survivors {
				start := time.Now()
				hit, there := get(acme[id], k), exists(acme[id], k)
				worst = max(worst, time.Since(start))
				if dead := owner[k] == victim; hit == dead || there == dead {
					t.Fatalf("%s: %s through %s (owner %s, killed %s): GET hit %v, EXISTS %v",
						phase, k, id, owner[k], victim, hit, there)
				}
			}
		}
		t.Logf("%s: every key of %s missed, the others hit; slowest GET+EXISTS %v", phase, victim, worst)
	}
	check("owner killed")
	after := rcAwaitMembers(t, nodes[survivors[0]], ops, survivors...)
	rcAwaitMembers(t, nodes[survivors[1]], ops, survivors...)
	if after.Epoch() <= v.Epoch() {
		t.Fatalf("epoch %d after the kill, %d before", after.Epoch(), v.Epoch())
	}
	check("view without the killed owner")
	for _, id := range survivors {
		m := rcMetrics(t, nodes[id])
		var reasons []string
		for name, v := range m {
			if strings.HasPrefix(name, "gpucache_forward_miss") || name == "gpucache_forward_misses_total" {
				reasons = append(reasons, fmt.Sprintf("%s=%v", strings.TrimPrefix(name, "gpucache_"), v))
			}
		}
		sort.Strings(reasons)
		t.Logf("%s forwarder: %s", id, strings.Join(reasons, " "))
	}

	// Written again through a survivor, the lost keys are stored at their
	// new owners and read back everywhere (once both survivors take writes
	// again: a loaded machine may have put one read-only for a moment).
	for _, id := range survivors {
		rcAwaitMembers(t, nodes[id], ops, survivors...)
	}
	for i, k := range keys {
		if owner[k] != victim {
			continue
		}
		if r := acme[survivors[i%2]].do("SET", k, payload[k]); r.kind != '+' || r.line != "OK" {
			t.Fatalf("SET %s again after the kill: %s", k, r)
		}
		for _, id := range survivors {
			if !get(acme[id], k) || !exists(acme[id], k) {
				t.Fatalf("%s through %s after storing it again: a miss", k, id)
			}
		}
	}
	t.Logf("RESP CLUSTER RESULT: %d keys, owners %v, killed %s; hits=%d misses=%d wrong=%d; forwarded RESP commands %v",
		len(keys), perNode, victim, hits, misses, wrong, forwarded)
	if wrong != 0 {
		t.Fatalf("%d wrong payloads", wrong)
	}
}
