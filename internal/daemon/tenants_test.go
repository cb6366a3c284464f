package daemon

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/client"
	"github.com/gpucache/gpucache/internal/config"
	"github.com/gpucache/gpucache/internal/directory"
	"github.com/gpucache/gpucache/internal/hot"
	"github.com/gpucache/gpucache/internal/server"
)

// TestDaemonCapsTenantLeases: the daemon hands tenant_hold_bytes to the
// hot tier: with 16 MiB, a tenant leasing one 1 MiB block over and over
// gets 16 leases, then the hits without a lease; another tenant, with the
// first at its cap, gets the same.
func TestDaemonCapsTenantLeases(t *testing.T) {
	c := testConfig() // 64 MiB hot tier, open mode
	c.TenantHoldBytes = 16 << 20
	runNode(t, c, Options{}, func(addr string) {
		ctx := context.Background()
		lease := func(tenant string) (granted, refused int) {
			cl, err := client.Dial(ctx, client.Config{Addr: addr, Tenant: tenant, Conns: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ns := client.Namespace{Tenant: tenant, TrustDomain: "t", ModelID: "m", ConfigRevision: "c", TokenizerRevision: "k",
				RoPE: "rope", DType: "fp16", Quantization: "none",
				Layout: client.Layout{Format: "raw", TPSize: 1, PPSize: 1, LayerCount: 1, KVHeads: 1, HeadDim: 1, BlockTokens: 16}}
			ids, err := client.Identities(ns, make([]uint32, 16))
			if err != nil {
				t.Fatal(err)
			}
			key, _ := ids[0].Key()
			st, err := cl.Put(ctx, ns, client.BlocksOf(ids, [][]byte{make([]byte, 1<<20)}))
			if err != nil || st[0] != client.StatusStored {
				t.Fatalf("%s: put %v %v", tenant, st, err)
			}
			for range 40 {
				hits, id, err := cl.Lookup(ctx, ns, []client.BlockKey{key}, 30*time.Second)
				switch {
				case err != nil || hits != 1:
					t.Fatalf("%s: lookup %d %v", tenant, hits, err)
				case id != 0:
					granted++
				default:
					refused++
				}
			}
			return granted, refused
		}
		if g, r := lease("acme"); g != 16 || r != 24 {
			t.Fatalf("acme: %d leases granted, %d refused; want 16 and 24", g, r)
		}
		if g, r := lease("beta"); g != 16 || r != 24 {
			t.Fatalf("beta, with acme at its cap: %d leases granted, %d refused; want 16 and 24", g, r)
		}
	})
}

// TestApplyTenantShares: a reload that changes the number of tenants
// changes each tenant's share of the hot tier, of the fill table and of
// the request buffers (over the running request_buffers, which a reload
// does not change).
func TestApplyTenantShares(t *testing.T) {
	c := testConfig()
	c.HotCapacity, c.HotSlab, c.HotMaxClass = 8<<20, 1<<20, 1<<20
	store, err := hot.New(hot.Config{CapacityBytes: 8 << 20, MaxClass: 1 << 20, SlabBytes: 1 << 20,
		TenantHoldBytes: c.TenantHoldCap(), TenantLeases: c.TenantLeaseCap(hot.DefaultMaxLeases)})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	dir, err := directory.New(directory.Config{MaxFills: config.FillSlots, TenantFills: c.TenantFillCap()})
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	srv, err := server.New(server.Config{Store: store, Directory: dir, Logger: quiet(),
		Limits:         wire.Limits{MaxBatch: uint32(c.MaxBatch)},
		RequestBuffers: int64(c.RequestBuffers), TenantRequestBuffers: c.TenantRequestBufferCap()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	if _, share := srv.RequestBuffers(); share != (int64(c.RequestBuffers)-int64(config.PreSessionBuffers(c.MaxBatch)))/2 {
		t.Fatalf("open mode: request-buffer share %d", share)
	}

	next := c
	next.Tenants = make([]config.TenantConfig, 4) // 2 MiB each
	next.TenantFills = 3
	next.RequestBuffers *= 2 // needs a restart: the share divides the running budget
	applyTenantShares(quiet(), next, store, dir, srv)
	if _, share := srv.RequestBuffers(); share != (int64(c.RequestBuffers)-int64(config.PreSessionBuffers(c.MaxBatch)))/4 {
		t.Fatalf("4 tenants: request-buffer share %d", share)
	}
	var ns identity.NamespaceDigest
	for i := range 3 {
		_, err := store.ReserveBlock(ns, identity.BlockKey{byte(i)}, identity.BlockKey{}, hot.BlockMeta{Tenant: "a"}, 1<<20)
		if want := i == 2; errors.Is(err, hot.ErrTenantQuota) != want {
			t.Fatalf("reservation %d of 1 MiB with a 2 MiB share: %v", i, err)
		}
	}
	for i := range 4 {
		res := dir.Acquire(directory.Request{Key: identity.BlockKey{byte(i)}, Tenant: "a"}, nil)
		if want := directory.Lead; i == 3 {
			want = directory.Denied
			if res.Outcome != want {
				t.Fatalf("fill %d with tenant_fills 3: %v", i, res.Outcome)
			}
		} else if res.Outcome != want {
			t.Fatalf("fill %d: %v", i, res.Outcome)
		}
	}
}

// TestDaemonRequestBufferShare: the daemon gives the server the fair
// request-buffer share at start (half of what the pre-session bucket
// leaves, in open mode), and a reload that sets tenant_request_buffers
// applies it, as /metrics shows.
func TestDaemonRequestBufferShare(t *testing.T) {
	c := testConfig()
	c.AuditLog = "off"
	next := c
	next.TenantRequestBuffers = 40 << 20
	n := mustStart(t, c, Options{Reload: func() (config.Config, error) { return next, nil }})
	a := n.Addrs()
	share := func() int64 {
		_, metrics := httpGet(t, "http://"+a.Admin+"/metrics")
		for _, line := range strings.Split(metrics, "\n") {
			if v, ok := strings.CutPrefix(line, "gpucache_request_buffer_tenant_limit_bytes "); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatalf("%q: %v", line, err)
				}
				return int64(f)
			}
		}
		t.Fatalf("no gpucache_request_buffer_tenant_limit_bytes in /metrics")
		return 0
	}
	if got, want := share(), c.TenantRequestBufferCap(); got != want {
		t.Errorf("share at start %d, want %d (fair, open mode)", got, want)
	}
	resp, err := http.Post("http://"+a.Admin+"/admin/reload", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("reload: %s", resp.Status)
	}
	if got := share(); got != 40<<20 {
		t.Errorf("share after a reload that set 40MiB: %d", got)
	}
	stopNode(t, n)
}
