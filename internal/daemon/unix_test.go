package daemon

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpucache/gpucache/client"
	"github.com/gpucache/gpucache/internal/config"
)

// TestUnixListen runs the daemon in open mode with unix_listen: a client
// over the socket stores and reads through a registered region; the
// socket file has the configured mode, a stale socket left by a previous
// run is replaced, and the file goes when the node stops.
func TestUnixListen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gpucached.sock")
	// A stale socket of a previous run (nothing listens on it).
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close()
	cfg := testConfig()
	cfg.UnixListen, cfg.UnixListenMode = path, "0600"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	n := mustStart(t, cfg, Options{})
	if n.Addrs().Unix != path {
		t.Fatalf("Addrs().Unix = %q", n.Addrs().Unix)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket file: %v %v", fi, err)
	}
	ctx := t.Context()
	c, err := client.Dial(ctx, client.Config{Network: "unix", Addr: path})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := c.NewRegion(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	ns := client.Namespace{Tenant: "default", TrustDomain: "t", ModelID: "m", ConfigRevision: "c", TokenizerRevision: "k",
		RoPE: "r", DType: "fp16", Quantization: "none",
		Layout: client.Layout{Format: "raw", TPSize: 1, PPSize: 1, LayerCount: 1, KVHeads: 1, HeadDim: 1, BlockTokens: 4}}
	ids, err := client.Identities(ns, []uint32{1, 2, 3, 4})
	if err != nil {
		t.Fatal(err)
	}
	data := reg.Bytes()[:64<<10]
	for i := range data {
		data[i] = byte(i * 13)
	}
	if st, err := c.Put(ctx, ns, client.BlocksOf(ids, [][]byte{data})); err != nil || st[0] != client.StatusStored {
		t.Fatalf("put: %v %v", st, err)
	}
	res := make([]client.GetResult, 1)
	dst := reg.Bytes()[512<<10 : 576<<10]
	if c.GetInto(ctx, ns, []client.BlockKey{client.BlocksOf(ids, [][]byte{data})[0].Key}, [][]byte{dst}, res) != 1 || string(dst) != string(data) {
		t.Fatal("GetInto through the region failed")
	}
	stats, err := c.Stat(ctx)
	if err != nil || stats["region_bytes_in"] != 64<<10 || stats["region_bytes_out"] != 64<<10 {
		t.Fatalf("region counters: in %d out %d (%v)", stats["region_bytes_in"], stats["region_bytes_out"], err)
	}
	c.Close()
	stopNode(t, n)
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("socket file left after stop: %v", err)
	}
}

func TestUnixListenRefusals(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "not-a-socket")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		mod  func(*config.Config)
		want string
	}{
		"relative path":  {func(c *config.Config) { c.UnixListen = "g.sock" }, "absolute"},
		"bad mode":       {func(c *config.Config) { c.UnixListen = filepath.Join(dir, "a.sock"); c.UnixListenMode = "rw" }, "unix_listen_mode"},
		"tenant > total": {func(c *config.Config) { c.TenantRegionBytes = c.RegionBytes + 1 }, "tenant_region_bytes"},
		"uids, no unix": {func(c *config.Config) {
			c.Tenants = []config.TenantConfig{{Name: "a", UnixUIDs: []uint32{1}}}
		}, "unix_listen is off"},
	} {
		c := testConfig()
		tc.mod(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", name, err, tc.want)
		}
	}
	// A path that holds something else is never removed.
	c := testConfig()
	c.UnixListen = file
	if err := startErr(t, c, Options{}); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("start over a regular file: %v", err)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "x" {
		t.Fatal("the regular file was touched")
	}
}
