package daemon

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpucache/gpucache/client"
	"github.com/gpucache/gpucache/internal/config"
)

// runNode runs a node with c and opts until body returns.
func runNode(t *testing.T, c config.Config, opts Options, body func(addr string)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan Addrs, 1)
	done := make(chan error, 1)
	opts.Ready = func(a Addrs) { ready <- a }
	go func() { done <- RunWith(ctx, c, quiet(), opts) }()
	var a Addrs
	select {
	case a = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("node did not start: %v", err)
	}
	body(a.Data)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// auditEvents reads the audit log's events of kind.
func auditEvents(t *testing.T, path, kind string) []map[string]any {
	t.Helper()
	b, _ := os.ReadFile(path)
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m map[string]any
		if line == "" || json.Unmarshal([]byte(line), &m) != nil {
			continue
		}
		if m["event"] == kind {
			out = append(out, m)
		}
	}
	return out
}

// auditedColdConfig is a node on a fresh fs cold tier whose blocks are
// written behind at shutdown, auditing to a file in a temp dir.
func auditedColdConfig(t *testing.T) config.Config {
	c := testConfig()
	c.ColdStore, c.ColdDir = "fs", t.TempDir()
	c.HotCapacity, c.HotSlab, c.HotMaxClass = 4<<20, 1<<20, 1<<20
	c.ColdFlushInterval = time.Hour // flushed at shutdown
	c.AuditLog = filepath.Join(t.TempDir(), "audit.log")
	return c
}

// envOptions reads secrets from env instead of the process environment.
func envOptions(env map[string]string) Options {
	return Options{Getenv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }}
}

// servedAfterRestart runs a node with c and opts and returns how many of
// the blocks it serves byte-identical to payloads, and the integrity events
// it added to c.AuditLog.
func servedAfterRestart(t *testing.T, c config.Config, opts Options, ns client.Namespace, keys []client.BlockKey, payloads [][]byte) (int, []map[string]any) {
	t.Helper()
	before := len(auditEvents(t, c.AuditLog, "integrity"))
	var hits int
	runNode(t, c, opts, func(addr string) {
		var cl *client.Client
		cl, hits = readBack(t, addr, ns, keys, payloads)
		cl.Close()
	})
	return hits, auditEvents(t, c.AuditLog, "integrity")[before:]
}

// packFiles lists the .pack files under dir.
func packFiles(dir string) []string {
	var packs []string
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil && strings.HasSuffix(p, ".pack") {
			packs = append(packs, p)
		}
		return nil
	})
	return packs
}

// TestSealedColdTierTamperIsAuditedMiss: with seal keys, blocks written
// behind to the fs cold tier come back after a restart; a flipped payload
// bit, or a seal key that is no longer configured, turns them into misses
// with 0 bytes served and an integrity audit event, while untouched blocks
// still come back byte-identical.
func TestSealedColdTierTamperIsAuditedMiss(t *testing.T) {
	c := auditedColdConfig(t)
	c.SealKeys = []config.SecretConfig{{ID: "k1", Env: "SEAL_K1"}}
	c.SealHotReads = true // refilled blocks are sealed in DRAM too and verified on read
	env := map[string]string{"SEAL_K1": strings.Repeat("1", 64), "SEAL_K2": strings.Repeat("2", 64)}
	opts := envOptions(env)
	ns, _, ids, keys, payloads := coldBlocks(t)
	runNode(t, c, opts, func(addr string) { writeBlocks(t, addr, ns, ids, payloads).Close() })
	served := func() (int, []map[string]any) { return servedAfterRestart(t, c, opts, ns, keys, payloads) }
	clean, _ := served()
	if clean == 0 {
		t.Fatal("no sealed block came back from the cold tier")
	}
	if n := len(auditEvents(t, c.AuditLog, "integrity")); n != 0 {
		t.Fatalf("%d integrity events on untouched data", n)
	}

	// Flip one payload bit of one pack on disk.
	packs := packFiles(c.ColdDir)
	if len(packs) == 0 {
		t.Fatal("no pack on disk")
	}
	b, err := os.ReadFile(packs[0])
	if err != nil {
		t.Fatal(err)
	}
	b[52+len(b[52:])/2] ^= 0x10
	if err := os.WriteFile(packs[0], b, 0o600); err != nil {
		t.Fatal(err)
	}
	tampered, evs := served()
	if tampered >= clean || len(evs) == 0 || evs[0]["kind"] != "payload_checksum" {
		t.Fatalf("after a bit flip: %d of %d blocks served, integrity events %v", tampered, clean, evs)
	}

	// Rotation: k2 current, k1 still listed, so k1's seals verify.
	c.SealKeys = []config.SecretConfig{{ID: "k1", Env: "SEAL_K1"}, {ID: "k2", Env: "SEAL_K2"}}
	rotated, _ := served()
	if rotated != tampered {
		t.Fatalf("with k1 still listed %d blocks served, want %d", rotated, tampered)
	}
	// k1 removed: every block sealed with it is a miss, audited seal_invalid.
	c.SealKeys = []config.SecretConfig{{ID: "k2", Env: "SEAL_K2"}}
	dropped, evs := served()
	if dropped != 0 || len(evs) == 0 {
		t.Fatalf("with k1 gone %d blocks served, %d integrity events", dropped, len(evs))
	}
	for _, ev := range evs {
		if ev["kind"] != "seal_invalid" && ev["kind"] != "payload_checksum" {
			t.Fatalf("event %v", ev)
		}
	}
	if strings.Contains(string(must(os.ReadFile(c.AuditLog))), env["SEAL_K1"]) {
		t.Fatal("audit log holds a seal secret")
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
