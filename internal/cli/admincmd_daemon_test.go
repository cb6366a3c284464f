package cli

// Daemon-level tests of the lifecycle commands: a real
// gpucached (daemon.Start, in process) with a real cold tier, blocks
// written through the client, and `gpucache admin ...` run through Main.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/client"
	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/cold/pack"
	"github.com/gpucache/gpucache/internal/cold/s3store"
	"github.com/gpucache/gpucache/internal/cold/s3store/s3test"
	"github.com/gpucache/gpucache/internal/config"
	"github.com/gpucache/gpucache/internal/daemon"
	"github.com/gpucache/gpucache/internal/testfix"
)

func lcConfig(t *testing.T) config.Config {
	c := config.Default()
	c.Listen, c.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	c.HotCapacity, c.HotSlab, c.HotMaxClass = 4<<20, 1<<20, 1<<20
	c.ColdStore, c.ColdDir = "fs", t.TempDir()
	c.ColdFlushInterval = time.Hour // written at shutdown (flush and drain spill)
	return c
}

// lcNode runs a node until stop is called (or the test ends) and returns
// its addresses.
func lcNode(t *testing.T, c config.Config, opts daemon.Options) (daemon.Addrs, func()) {
	t.Helper()
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	n, err := daemon.Start(t.Context(), c, opts)
	if err != nil {
		t.Fatalf("node did not start: %v", err)
	}
	stop := func() {
		if err := n.Close(context.Background()); err != nil {
			t.Errorf("node: %v", err)
		}
	}
	t.Cleanup(stop)
	return n.Addrs(), stop
}

// lcBlocks is n blocks of 64 KiB of one chain of tenant's.
func lcBlocks(t *testing.T, tenant string, n int) (client.Namespace, []client.CacheIdentity, []client.BlockKey, [][]byte) {
	t.Helper()
	ns := testfix.TinyNamespace(tenant)
	tokens := make([]uint32, n*16)
	for i := range tokens {
		tokens[i] = uint32(i)
	}
	ids, err := client.Identities(ns, tokens)
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]client.BlockKey, n)
	payloads := make([][]byte, n)
	for i, id := range ids {
		keys[i], _ = id.Key()
		s := sha256.Sum256(append([]byte(tenant), keys[i][:]...))
		payloads[i] = bytes.Repeat(s[:], (64<<10)/32)
	}
	return ns, ids, keys, payloads
}

func lcDial(t *testing.T, addr, tenant string) *client.Client {
	t.Helper()
	cl, err := client.Dial(context.Background(), client.Config{Addr: addr, Tenant: tenant, Conns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

func lcPut(t *testing.T, cl *client.Client, ns client.Namespace, ids []client.CacheIdentity, payloads [][]byte) {
	t.Helper()
	for off := 0; off < len(ids); off += 8 {
		end := min(off+8, len(ids))
		st, err := cl.Put(context.Background(), ns, client.BlocksOf(ids[off:end], payloads[off:end]))
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range st {
			if s != client.StatusStored {
				t.Fatalf("put: %s", s)
			}
		}
	}
}

// lcGet reads every block in small batches (a refill pins its slot until
// the answer is written) and returns how many hit with the right bytes.
func lcGet(t *testing.T, cl *client.Client, ns client.Namespace, keys []client.BlockKey, payloads [][]byte) int {
	t.Helper()
	hits := 0
	for off := 0; off < len(keys); off += 4 {
		end := min(off+4, len(keys))
		for j, r := range cl.Get(context.Background(), ns, keys[off:end]) {
			if r.Hit {
				if !bytes.Equal(r.Data, payloads[off+j]) {
					t.Fatalf("block %d: other bytes", off+j)
				}
				hits++
			}
		}
	}
	return hits
}

func lcAdmin(ctx context.Context, args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := Main(ctx, append([]string{"admin"}, args...), Stdio{Out: &out, Err: &errb})
	return code, out.String(), errb.String()
}

func lcStat(t *testing.T, cl *client.Client) map[string]uint64 {
	t.Helper()
	st, err := cl.Stat(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestAdminBackfillIntoDRAM: blocks written, the node restarted with DRAM
// empty, `gpucache admin backfill` publishes the cold blocks into DRAM, and
// a GET is then served from DRAM: every block hits and the cold tier is not
// asked (cold_refill_hits stays 0). The same holds when the packs are
// encrypted at rest and compressed (ADR 0019): backfill delivers plaintext.
func TestAdminBackfillIntoDRAM(t *testing.T) {
	t.Run("plain", func(t *testing.T) { testAdminBackfillIntoDRAM(t, lcConfig(t)) })
	t.Run("encrypted", func(t *testing.T) {
		c := lcConfig(t)
		key := filepath.Join(t.TempDir(), "cold.key")
		if err := os.WriteFile(key, []byte("0123456789abcdef0123456789abcdef0123456789abcdef"), 0o600); err != nil {
			t.Fatal(err)
		}
		c.ColdEncryptionKeys = []config.SecretConfig{{ID: "k1", File: key}}
		c.ColdCompression = "zstd"
		testAdminBackfillIntoDRAM(t, c)
	})
}

func testAdminBackfillIntoDRAM(t *testing.T, c config.Config) {
	ns, ids, keys, payloads := lcBlocks(t, "a", 24) // 1.5 MiB: fits the 4 MiB hot tier
	a, stop := lcNode(t, c, daemon.Options{})
	lcPut(t, lcDial(t, a.Data, "a"), ns, ids, payloads)
	stop() // the drain spill writes DRAM to the cold tier

	a, _ = lcNode(t, c, daemon.Options{})
	cl := lcDial(t, a.Data, "a")
	code, out, errs := lcAdmin(context.Background(), "backfill", "--budget", "64MiB", "--admin", "http://"+a.Admin, "--json")
	if code != 0 {
		t.Fatalf("backfill: exit %d\n%s%s", code, out, errs)
	}
	if !strings.Contains(out, `"blocks":24`) {
		t.Fatalf("backfill result: %s", out)
	}
	st := lcStat(t, cl)
	if st["cold_backfill_blocks"] != 24 {
		t.Fatalf("STAT cold_backfill_blocks %d", st["cold_backfill_blocks"])
	}
	if hits := lcGet(t, cl, ns, keys, payloads); hits != len(keys) {
		t.Fatalf("%d of %d blocks served after the backfill", hits, len(keys))
	}
	st = lcStat(t, cl)
	if st["cold_refill_hits"] != 0 || st["blocks_hit"] != uint64(len(keys)) {
		t.Fatalf("STAT after the GETs: cold_refill_hits %d (want 0: served from DRAM), blocks_hit %d",
			st["cold_refill_hits"], st["blocks_hit"])
	}
}

// holdDelete is the node's lifecycle store for the interrupted purge: once
// armed, its at-th Delete signals hit and waits for the request's context
// to end (the admin client went away), so the purge stops mid-way.
type holdDelete struct {
	cold.Store
	mu    sync.Mutex
	armed bool
	n, at int
	hit   chan struct{}
}

func (h *holdDelete) Delete(ctx context.Context, key string) error {
	h.mu.Lock()
	hold := false
	if h.armed {
		if h.n++; h.n == h.at {
			hold, h.armed = true, false
		}
	}
	h.mu.Unlock()
	if hold {
		close(h.hit)
		<-ctx.Done()
		return ctx.Err()
	}
	return h.Store.Delete(ctx, key)
}

// countNS counts the objects under a client namespace's cold prefixes.
func countNS(t *testing.T, st cold.Store, ns client.Namespace) int {
	t.Helper()
	d, err := identity.Namespace(ns).Digest()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range pack.NamespacePrefixes(d) {
		if err := st.List(context.Background(), p, func(cold.ObjectInfo) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// TestAdminPurgeS3: a real node on a real S3 cold tier (versitygw), three
// tenants' blocks written through the client and spilled at shutdown.
// After a restart: an interrupted `gpucache admin purge --tenant c` (the
// admin client goes away mid-way) leaves part of c, and its rerun removes
// the rest; `purge --tenant a`, run while a also has blocks in DRAM and
// pending in the write-behind, leaves none of a's objects, even after the
// node's shutdown flush and drain spill; every one of b's objects is still
// there (counted) and every b block is still served.
func TestAdminPurgeS3(t *testing.T) {
	endpoint, ak, sk := s3test.Start(t)
	c := lcConfig(t)
	c.ColdStore, c.S3Endpoint, c.S3Bucket, c.S3Prefix = "s3", endpoint, s3test.Bucket, "purge/"
	c.S3AccessKey, c.S3SecretKey = ak, sk
	scfg := s3store.Default()
	scfg.Endpoint, scfg.Bucket, scfg.Prefix, scfg.AccessKey, scfg.SecretKey = endpoint, s3test.Bucket, "purge/", ak, sk
	bucket, err := s3store.New(t.Context(), scfg)
	if err != nil {
		t.Fatal(err)
	}
	defer bucket.Close()

	type tenant struct {
		ns       client.Namespace
		ids      []client.CacheIdentity
		keys     []client.BlockKey
		payloads [][]byte
	}
	ts := map[string]*tenant{}
	node, stop := lcNode(t, c, daemon.Options{})
	for _, name := range []string{"a", "b", "c"} {
		tn := &tenant{}
		tn.ns, tn.ids, tn.keys, tn.payloads = lcBlocks(t, name, 16)
		lcPut(t, lcDial(t, node.Data, name), tn.ns, tn.ids, tn.payloads)
		ts[name] = tn
	}
	stop()
	before := map[string]int{}
	for name, tn := range ts {
		if before[name] = countNS(t, bucket, tn.ns); before[name] == 0 {
			t.Fatalf("tenant %s has no cold objects after the spill", name)
		}
	}

	hold := &holdDelete{at: 3, hit: make(chan struct{})}
	node, stop = lcNode(t, c, daemon.Options{LifecycleStore: func(s cold.Store) cold.Store { hold.Store = s; return hold }})
	url := "http://" + node.Admin

	// Interrupted: the client goes away at c's third delete.
	hold.mu.Lock()
	hold.armed = true
	hold.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-hold.hit; cancel() }()
	if code, out, errs := lcAdmin(ctx, "purge", "--tenant", "c", "--admin", url, "--json"); code == 0 {
		t.Fatalf("interrupted purge exited 0:\n%s%s", out, errs)
	}
	cancel()
	if n := countNS(t, bucket, ts["c"].ns); n == 0 || n >= before["c"] {
		t.Fatalf("after the interrupted purge c has %d of %d objects: want some deleted, some left", n, before["c"])
	} else {
		t.Logf("S3 objects before: a %d, b %d, c %d; after the interrupted purge of c: %d left", before["a"], before["b"], before["c"], n)
	}
	// The rerun finishes (it waits for the interrupted one to let go).
	var code int
	var out, errs string
	for code, out, errs = lcAdmin(context.Background(), "purge", "--tenant", "c", "--admin", url, "--json"); code != 0 && strings.Contains(errs, "409"); {
		code, out, errs = lcAdmin(context.Background(), "purge", "--tenant", "c", "--admin", url, "--json")
	}
	if code != 0 || !strings.Contains(out, `"complete":true`) {
		t.Fatalf("purge rerun: exit %d\n%s%s", code, out, errs)
	}
	if n := countNS(t, bucket, ts["c"].ns); n != 0 {
		t.Fatalf("after the rerun c has %d objects", n)
	}

	// a has new blocks in DRAM and pending in the write-behind when it is
	// purged: none of them may reach the store afterwards.
	more := &tenant{}
	more.ns, more.ids, more.keys, more.payloads = lcBlocks(t, "a", 48) // 3 MiB: some evicted into the write-behind
	acl := lcDial(t, node.Data, "a")
	lcPut(t, acl, more.ns, more.ids[16:], more.payloads[16:])
	if code, out, errs := lcAdmin(context.Background(), "purge", "--tenant", "a", "--admin", url, "--json"); code != 0 || !strings.Contains(out, `"complete":true`) {
		t.Fatalf("purge a: exit %d\n%s%s", code, out, errs)
	}
	if st := lcStat(t, acl); st["purge_dram_blocks"] == 0 {
		t.Fatalf("STAT purge_dram_blocks 0: a's DRAM blocks were not dropped")
	}
	if hits := lcGet(t, acl, more.ns, more.keys, more.payloads); hits != 0 {
		t.Fatalf("%d of a's blocks still served after the purge", hits)
	}
	bcl := lcDial(t, node.Data, "b")
	if hits := lcGet(t, bcl, ts["b"].ns, ts["b"].keys, ts["b"].payloads); hits != len(ts["b"].keys) {
		t.Fatalf("%d of b's %d blocks served after purging a and c", hits, len(ts["b"].keys))
	}
	stop() // shutdown flush and drain spill: nothing of a may come back
	if n := countNS(t, bucket, ts["a"].ns); n != 0 {
		t.Fatalf("tenant a has %d cold objects after the purge and the node's shutdown", n)
	}
	n := countNS(t, bucket, ts["b"].ns)
	t.Logf("after the rerun of c and the purge of a (and shutdown): a %d, c 0, b %d of %d; b's %d blocks all served", countNS(t, bucket, ts["a"].ns), n, before["b"], len(ts["b"].keys))
	if n != before["b"] {
		t.Fatalf("tenant b has %d cold objects, had %d", n, before["b"])
	}
}
