package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpucache/gpucache/internal/control/etcdmember/etcdtest"
)

// TestCLIAgainstEtcdCluster: the
// built gpucache binary runs put, get, lookup and delete, and the built
// gpucache-bench binary runs bench, with --cluster against three gpucached
// processes that form a cluster through a real etcd. Every key works, and
// the bench reports 0 errors and a share for every node.
func TestCLIAgainstEtcdCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three daemons and etcd")
	}
	etcd := etcdtest.Start(t)
	bin := buildDaemon(t)
	binDir := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", binDir+"/", "github.com/gpucache/gpucache/cmd/gpucache", "github.com/gpucache/gpucache/tools/cmd/gpucache-bench").CombinedOutput(); err != nil {
		t.Fatalf("build gpucache, gpucache-bench: %v\n%s", err, out)
	}
	n1 := clusterNode(t, bin, etcd.Endpoint, "n1", "rack-a")
	n2 := clusterNode(t, bin, etcd.Endpoint, "n2", "rack-a")
	n3 := clusterNode(t, bin, etcd.Endpoint, "n3", "rack-b")
	for _, n := range []*daemonProc{n1, n2, n3} {
		awaitView(t, n, "three members", hasIDs("n1", "n2", "n3"))
	}
	seeds := n1.addr + "," + n3.addr
	// run runs the built command prog (gpucache or gpucache-bench).
	run := func(prog, stdin string, args ...string) (string, string, int) {
		c := exec.Command(filepath.Join(binDir, prog), args...)
		c.Env = append(os.Environ(), "GPUCACHE_CLUSTER="+seeds, "GPUCACHE_ADDR=")
		c.Stdin = strings.NewReader(stdin)
		var out, errb strings.Builder
		c.Stdout, c.Stderr = &out, &errb
		err := c.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return out.String(), errb.String(), code
	}
	cli := func(stdin string, args ...string) (string, string, int) { return run("gpucache", stdin, args...) }
	for i := range 24 {
		key := fmt.Sprintf("cli-key-%d", i)
		if out, errs, code := cli(key, "put", "--key-text", key, "-"); code != 0 || !strings.HasPrefix(out, "stored") {
			t.Fatalf("put %s: %d %q %q", key, code, out, errs)
		}
		if out, errs, code := cli("", "get", "--key-text", key); code != 0 || out != key {
			t.Fatalf("get %s: %d %q %q", key, code, out, errs)
		}
		if out, errs, code := cli("", "lookup", "--key-text", key); code != 0 || !strings.Contains(out, "1 of 1 blocks cached") {
			t.Fatalf("lookup %s: %d %q %q", key, code, out, errs)
		}
		if out, errs, code := cli("", "delete", "--key-text", key); code != 0 || !strings.HasPrefix(out, "deleted") {
			t.Fatalf("delete %s: %d %q %q", key, code, out, errs)
		}
		if out, errs, code := cli("", "get", "--key-text", key); code != 1 {
			t.Fatalf("get %s after delete: %d %q %q, want exit 1 (miss)", key, code, out, errs)
		}
	}

	js := filepath.Join(t.TempDir(), "bench.json")
	out, errs, code := run("gpucache-bench", "", "bench", "--op", "both", "--sizes", "16KiB", "--conns", "1,4", "--requests", "100",
		"--keys", "64", "--batch", "4", "--json", js)
	if code != 0 {
		t.Fatalf("bench: %d\n%s\n%s", code, out, errs)
	}
	t.Logf("bench:\n%s", out)
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Cluster *struct {
			Members []struct{ ID string } `json:"members"`
		} `json:"cluster"`
		Cases []struct {
			Op     string `json:"op"`
			Conns  int    `json:"conns"`
			Blocks uint64 `json:"blocks"`
			Errors uint64 `json:"errors"`
			Misses uint64 `json:"misses"`
			Nodes  []struct {
				ID     string `json:"id"`
				Blocks uint64 `json:"blocks"`
				Errors uint64 `json:"errors"`
			} `json:"nodes"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Cluster == nil || len(rep.Cluster.Members) != 3 || len(rep.Cases) != 4 {
		t.Fatalf("bench report: cluster %+v, %d cases", rep.Cluster, len(rep.Cases))
	}
	for _, c := range rep.Cases {
		if c.Errors != 0 || c.Misses != 0 || c.Blocks == 0 || len(c.Nodes) != 3 {
			t.Errorf("case %s conns=%d: %+v", c.Op, c.Conns, c)
		}
		for _, n := range c.Nodes {
			if n.Blocks == 0 || n.Errors != 0 {
				t.Errorf("case %s conns=%d node %s: %+v", c.Op, c.Conns, n.ID, n)
			}
		}
	}
}
