package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/server/servertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startServer runs a real server on 127.0.0.1:0 over a small hot store.
func startServer(t *testing.T) string {
	return servertest.Start(t, "127.0.0.1:0", wire.Limits{MaxBatch: 8}).Addr
}

func TestRunEndToEnd(t *testing.T) {
	addr := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var progress bytes.Buffer
	cfg := Config{
		Addr: addr, Tenant: "bench", Ops: []string{OpPut, OpGet}, Sizes: []int{4 << 10, 64 << 10},
		Conns: []int{1, 3}, Batch: 10, Pipeline: 2, Requests: 50, Keys: 40, HoldBytes: 4 << 20, HoldBlock: 256 << 10,
	}
	rep, err := Run(ctx, cfg, Output{Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Cases) != 8 {
		t.Fatalf("%d cases, want 2 ops × 2 sizes × 2 conns", len(rep.Cases))
	}
	for _, c := range rep.Cases {
		if c.Requests != 50 || c.Blocks != 500 {
			t.Errorf("%s: %d requests, %d blocks; want 50, 500", c.label(), c.Requests, c.Blocks)
		}
		if c.Errors != 0 || c.Corrupt != 0 || c.Misses != 0 {
			t.Errorf("%s: errors %d corrupt %d misses %d (%s)", c.label(), c.Errors, c.Corrupt, c.Misses, c.FirstError)
		}
		if c.Bytes != c.Blocks*uint64(c.Size) || c.OpsPerSec <= 0 || c.GBPerSec <= 0 {
			t.Errorf("%s: bytes %d ops/s %v GB/s %v", c.label(), c.Bytes, c.OpsPerSec, c.GBPerSec)
		}
		if c.P50Ns <= 0 || c.P50Ns > c.P90Ns || c.P90Ns > c.P99Ns || c.P99Ns > c.P999Ns || c.P999Ns > c.MaxNs {
			t.Errorf("%s: percentiles %d %d %d %d max %d", c.label(), c.P50Ns, c.P90Ns, c.P99Ns, c.P999Ns, c.MaxNs)
		}
	}
	if rep.Hold == nil || rep.Hold.Held != 4<<20 || rep.Hold.Blocks != 16 {
		t.Fatalf("hold: %+v", rep.Hold)
	}
	if rep.Summary.HotBytesCached == 0 || rep.Summary.GoHeapInUseBytes == 0 || rep.ServerStat["requests_get"] == 0 {
		t.Fatalf("server summary %+v", rep.Summary)
	}
	if got := strings.Count(progress.String(), "\ncase ") + strings.Count(progress.String()[:5], "case "); got != 8 {
		t.Errorf("progress has %d case lines:\n%s", got, progress.String())
	}

	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ops/s", "p999", "64KiB", "go_heap_inuse", "hold: "} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if _, ok := back["summary"].(map[string]any)["go_gc_pause_p99_ns"]; !ok {
		t.Fatalf("JSON lacks summary.go_gc_pause_p99_ns:\n%s", js.String())
	}
}

// A size over the server's MaxPayload is refused before any case runs.
func TestRunRejectsOversizedBlocks(t *testing.T) {
	addr := startServer(t)
	_, err := Run(context.Background(), Config{Addr: addr, Sizes: []int{2 << 20}, Requests: 1}, Output{})
	if err == nil || !strings.Contains(err.Error(), "MaxPayload") {
		t.Fatalf("err = %v", err)
	}
}

// TestPopulateShapeBoundsBuffers: populate's writers hold one buffer per
// block of a request; at 32 MiB that must stay near the working set, not
// 64 blocks (2 GiB), and every shape must still cover the working set.
func TestPopulateShapeBoundsBuffers(t *testing.T) {
	for _, c := range []struct{ keys, size, maxBytes int }{
		{8, 32 << 20, 256 << 20},
		{1, 32 << 20, 32 << 20},
		{8, 64 << 20, 256 << 20},
		{256, 1 << 20, 64 << 20},
		{256, 64 << 10, 4 << 20},
		{3, 64 << 10, 3 * 64 << 10},
	} {
		batch, workers := populateShape(c.keys, c.size)
		if batch < 1 || workers < 1 || batch > 16 || workers > 4 {
			t.Errorf("keys %d size %d: batch %d workers %d out of range", c.keys, c.size, batch, workers)
		}
		if held := batch * workers * c.size; held > c.maxBytes && held > c.size {
			t.Errorf("keys %d size %d: writers hold %d bytes of buffers, want at most %d", c.keys, c.size, held, c.maxBytes)
		}
	}
}
