package daemon

import (
	"context"
	"strings"
	"testing"

	"github.com/gpucache/gpucache/internal/config"
	"github.com/gpucache/gpucache/internal/degrade"
)

// flashConfig is a node with a 4 MiB hot tier above a flash tier in dir
// and no cold tier: what DRAM evicts is on flash or nowhere.
func flashConfig(dir string) config.Config {
	c := testConfig()
	c.HotCapacity, c.HotSlab, c.HotMaxClass = 4<<20, 1<<20, 1<<20
	c.FlashDir, c.FlashCapacity, c.FlashSegment, c.FlashWriteBuffer = dir, 64<<20, 4<<20, 16<<20
	return c
}

// TestFlashTierServesEvictionsAndSurvivesRestart: 10 MiB of blocks
// through a 4 MiB hot tier; the evicted ones are read back from flash
// byte for byte, LOOKUP counts them, and after a restart (the drain
// spills DRAM to flash) every block is served from flash at once.
func TestFlashTierServesEvictionsAndSurvivesRestart(t *testing.T) {
	c := flashConfig(t.TempDir())
	ns, _, ids, keys, payloads := coldBlocks(t)
	runNode(t, c, Options{}, func(addr string) {
		cl := writeBlocks(t, addr, ns, ids, payloads)
		defer cl.Close()
		st, err := cl.Stat(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if st["hot_evictions"] == 0 || st["flash_blocks"] == 0 {
			t.Fatalf("evictions %d, flash blocks %d: nothing reached flash", st["hot_evictions"], st["flash_blocks"])
		}
		hits, _, err := cl.Lookup(context.Background(), ns, keys, 0)
		if err != nil || hits != len(keys) {
			t.Fatalf("LOOKUP: %d of %d present (%v): flash blocks must count", hits, len(keys), err)
		}
		rc, n := readBack(t, addr, ns, keys, payloads)
		rc.Close()
		if n != len(keys) {
			t.Fatalf("%d of %d blocks served with DRAM and flash holding all of them", n, len(keys))
		}
		if st, _ := cl.Stat(context.Background()); st["flash_hits"] == 0 {
			t.Fatalf("no flash hit: %v", st)
		}
	})
	runNode(t, c, Options{}, func(addr string) {
		cl, n := readBack(t, addr, ns, keys, payloads)
		defer cl.Close()
		if n != len(keys) {
			t.Fatalf("after a restart %d of %d blocks served: the drain spill and the rebuilt index should hold all", n, len(keys))
		}
		st, _ := cl.Stat(context.Background())
		if st["flash_hits"] != uint64(len(keys)) {
			t.Fatalf("flash hits %d after a restart, want %d (DRAM starts empty)", st["flash_hits"], len(keys))
		}
	})
}

// TestFlashDiskFailureDegradesTheNode: with every flash write failing
// (the flash_io_error failpoint) the tier turns itself off, the node keeps
// serving PUT and GET from DRAM, and /readyz says why it is degraded.
func TestFlashDiskFailureDegradesTheNode(t *testing.T) {
	c := flashConfig(t.TempDir())
	reg := &degrade.Registry{}
	reg.Arm(degrade.FlashIOError, degrade.Fail)
	n := mustStart(t, c, Options{Faults: reg})
	ns, _, ids, keys, payloads := coldBlocks(t)
	cl := writeBlocks(t, n.Addrs().Data, ns, ids, payloads) // every PUT stored
	defer cl.Close()
	if err := n.flash.Flush(context.Background()); err == nil {
		t.Fatal("flush succeeded with every write failing")
	}
	st, _ := cl.Stat(context.Background())
	if st["flash_degraded"] != 1 || st["flash_write_errors"] == 0 {
		t.Fatalf("flash_degraded %d, write errors %d", st["flash_degraded"], st["flash_write_errors"])
	}
	code, body := httpGet(t, "http://"+n.Addrs().Admin+"/readyz")
	if code != 200 || !strings.Contains(body, "flash tier off") {
		t.Fatalf("/readyz: %d %q", code, body)
	}
	if r := cl.Get(context.Background(), ns, keys[len(keys)-1:])[0]; !r.Hit {
		t.Fatalf("the newest block (in DRAM) missed: %v", r.Reason)
	}
}
