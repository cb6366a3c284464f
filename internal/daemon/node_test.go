package daemon

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/gpucache/gpucache/internal/config"
	"github.com/gpucache/gpucache/internal/control/etcdmember/etcdtest"
)

// freeAddr returns a 127.0.0.1 address nothing listens on (it was free a
// moment ago).
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// busyAddr returns an address that is in use until the test ends.
func busyAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

// assertFree fails the test unless addr can be bound again.
func assertFree(t *testing.T, what, addr string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("%s %s still held after the failed start: %v", what, addr, err)
	}
	ln.Close()
}

// TestLateStartFailureReleasesEarlierPhases: when a late phase of Start
// fails (the admin listener's or the RESP listener's address is in use),
// the phases built before it are released: the data port (and the admin
// port, when it was bound) can be bound again, the cold tier's loops and
// the admin server's goroutines are gone, the audit log is closed, and a
// second node starts on the same ports.
func TestLateStartFailureReleasesEarlierPhases(t *testing.T) {
	for _, tc := range []struct {
		name, flag string
		set        func(c *config.Config, busy string)
	}{
		{"admin_listen", "--admin-listen", func(c *config.Config, busy string) { c.AdminListen = busy }},
		{"resp_listen", "--resp-listen", func(c *config.Config, busy string) { c.RESPListen = busy }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := goleak.IgnoreCurrent()
			t.Cleanup(func() { goleak.VerifyNone(t, before) }) // after the nodes' cleanups
			c := testConfig()
			c.ColdStore, c.ColdDir = "fs", t.TempDir() // the cold tier's loops run before the listeners
			c.AuditLog = filepath.Join(t.TempDir(), "audit.log")
			c.Listen, c.AdminListen = freeAddr(t), freeAddr(t)
			c.RESPProfile = &config.RESPProfileConfig{Model: "m", ConfigRevision: "r1", TokenizerRevision: "t1",
				DType: "bfloat16", VariableLength: true, KeyFormat: "any"}
			ok := c
			ok.RESPListen = freeAddr(t)
			tc.set(&c, busyAddr(t))
			err := startErr(t, c, Options{})
			if err == nil || !strings.Contains(err.Error(), "address already in use") || !strings.Contains(err.Error(), tc.flag) {
				t.Fatalf("start with %s in use: %v", tc.name, err)
			}
			assertFree(t, "data port", c.Listen)
			if tc.name != "admin_listen" {
				assertFree(t, "admin port", c.AdminListen)
			}
			// Nothing the failed start built is left holding a port or a
			// file: a node starts on the same addresses and cold_dir.
			n := mustStart(t, ok, Options{})
			if a := n.Addrs(); a.Data != ok.Listen || a.Admin != ok.AdminListen || a.RESP != ok.RESPListen {
				t.Fatalf("second node on %+v, want %s, %s, %s", a, ok.Listen, ok.AdminListen, ok.RESPListen)
			}
			stopNode(t, n)
		})
	}
}

// TestLateStartFailureLeavesCluster: a node that joined the cluster and
// then fails to start (the admin listener's address is in use) leaves
// again: its member key is gone from etcd and its etcd client is closed
// (goleak in TestMain).
func TestLateStartFailureLeavesCluster(t *testing.T) {
	etcd := etcdtest.Start(t)
	c := clusterConfig(etcd.Endpoint, "node-late", "rack-a")
	c.Listen, c.AdminListen = freeAddr(t), busyAddr(t)
	err := startErr(t, c, Options{})
	if err == nil || !strings.Contains(err.Error(), "--admin-listen") {
		t.Fatalf("start with admin_listen in use: %v", err)
	}
	assertFree(t, "data port", c.Listen)
	cli := etcd.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := cli.Get(ctx, c.EtcdPrefix+"members/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) != 0 {
		t.Fatalf("member keys left after the failed start: %s", r.Kvs[0].Key)
	}
}

// TestCloseAfterStopAndCutShort: Close after the node stopped returns the
// same result again; Close with a context that has ended cuts the drain
// short and returns the context's error, and the node still finishes.
func TestCloseAfterStopAndCutShort(t *testing.T) {
	n := mustStart(t, testConfig(), Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := n.Close(ctx); err != context.Canceled && err != nil {
		t.Fatalf("Close with an ended context: %v", err)
	}
	<-n.Done()
	if err := n.Err(); err != nil {
		t.Fatalf("Err: %v", err)
	}
	if err := n.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}
