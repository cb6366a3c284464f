package daemon

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gpucache/gpucache/client"
	"github.com/gpucache/gpucache/internal/config"
)

// syncLog is a log sink safe for the node's goroutines.
type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *syncLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncLog) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestHotPolicyConfigured runs a node with hot_policy builtin, lru and
// prefix (the policies registered in internal/policy that are not
// experiments) over a 4 MiB hot tier, writes 10 MiB through it and reads
// the newest block back. The startup line names the policy. A policy may
// refuse blocks (NO_SPACE); builtin and lru store every one and evict.
func TestHotPolicyConfigured(t *testing.T) {
	ns, _, ids, keys, payloads := coldBlocks(t)
	for _, name := range []string{config.BuiltinHotPolicy, "lru", "prefix"} {
		t.Run(name, func(t *testing.T) {
			if !slices.Contains(config.HotPolicies(), name) {
				t.Skipf("policy %s not registered yet", name)
			}
			c := testConfig()
			c.HotCapacity, c.HotSlab, c.HotMaxClass = 4<<20, 1<<20, 1<<20
			c.HotPolicy = name
			var logs syncLog
			n := mustStart(t, c, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			a := n.Addrs()
			if !strings.Contains(logs.String(), "policy="+name+" ") {
				t.Errorf("startup log does not name policy %s:\n%s", name, logs.String())
			}
			cl, err := client.Dial(context.Background(), client.Config{Addr: a.Data, Conns: 1})
			if err != nil {
				t.Fatal(err)
			}
			stored := 0
			for off := 0; off < len(ids); off += 16 {
				st, err := cl.Put(context.Background(), ns, client.BlocksOf(ids[off:off+16], payloads[off:off+16]))
				if err != nil {
					t.Fatal(err)
				}
				for _, s := range st {
					switch s {
					case client.StatusStored:
						stored++
					case client.StatusNoSpace:
					default:
						t.Fatalf("put: %s", s)
					}
				}
			}
			stat, err := cl.Stat(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if stat["hot_puts"] != uint64(stored) || stat["hot_blocks"] > 64 {
				t.Fatalf("stored %d; stat %v", stored, stat)
			}
			if name == config.BuiltinHotPolicy || name == "lru" {
				if stored != len(ids) || stat["hot_evictions"] == 0 || stat["hot_not_admitted"] != 0 {
					t.Fatalf("stored %d of %d; stat %v", stored, len(ids), stat)
				}
				last := len(keys) - 1
				if r := cl.Get(context.Background(), ns, keys[last:])[0]; !r.Hit || string(r.Data) != string(payloads[last]) {
					t.Fatalf("newest block not served (hit %v)", r.Hit)
				}
			}
			cl.Close()
			stopNode(t, n)
		})
	}
}

// TestHotPolicyUnknown: an unknown hot_policy stops the node at startup
// with the accepted values.
func TestHotPolicyUnknown(t *testing.T) {
	c := testConfig()
	c.HotPolicy = "clairvoyant"
	err := startErr(t, c, Options{})
	if err == nil || !strings.Contains(err.Error(), "hot_policy") || !strings.Contains(err.Error(), config.BuiltinHotPolicy) {
		t.Fatalf("unknown policy: %v", err)
	}
}
