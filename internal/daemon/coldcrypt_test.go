package daemon

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpucache/gpucache/internal/config"
	"github.com/gpucache/gpucache/internal/security/nodesec"
)

// TestEncryptedColdTierAudited: with cold_encryption_keys (and zstd) the
// blocks written behind are encrypted on disk and come back after a
// restart; a wrong secret under the same key id, or a key no longer
// configured, turns them into misses with integrity audit events
// (decrypt_failed, cipher_key_unavailable) that hold no secret.
func TestEncryptedColdTierAudited(t *testing.T) {
	c := auditedColdConfig(t)
	c.ColdEncryptionKeys = []config.SecretConfig{{ID: "c1", Env: "COLD_C1"}}
	c.ColdCompression = config.ColdCompressionZstdPlanes
	env := map[string]string{"COLD_C1": strings.Repeat("1", 64), "COLD_C2": strings.Repeat("2", 64), "COLD_BAD": strings.Repeat("3", 64)}
	opts := envOptions(env)
	ns, _, ids, keys, payloads := coldBlocks(t)
	runNode(t, c, opts, func(addr string) { writeBlocks(t, addr, ns, ids, payloads).Close() })
	served := func() (int, []map[string]any) { return servedAfterRestart(t, c, opts, ns, keys, payloads) }
	clean, _ := served()
	if clean == 0 {
		t.Fatal("no encrypted block came back from the cold tier")
	}
	// No payload is on disk in the clear.
	for _, p := range packFiles(c.ColdDir) {
		b := must(os.ReadFile(p))
		for _, pl := range payloads {
			if bytes.Contains(b, pl[:64]) {
				t.Fatalf("%s holds a payload in the clear", p)
			}
		}
	}

	// Rotation: c2 current, c1 still listed: c1's packs still decrypt.
	c.ColdEncryptionKeys = []config.SecretConfig{{ID: "c1", Env: "COLD_C1"}, {ID: "c2", Env: "COLD_C2"}}
	rotated, _ := served()
	if rotated != clean {
		t.Fatalf("with c1 still listed %d blocks served, want %d", rotated, clean)
	}
	// A wrong secret under c1's id: misses, audited decrypt_failed.
	c.ColdEncryptionKeys = []config.SecretConfig{{ID: "c1", Env: "COLD_BAD"}}
	wrong, evs := served()
	if wrong != 0 || len(evs) == 0 || evs[0]["kind"] != "decrypt_failed" {
		t.Fatalf("wrong key: %d blocks served, events %v", wrong, evs)
	}
	// c1 gone: misses, audited cipher_key_unavailable.
	c.ColdEncryptionKeys = []config.SecretConfig{{ID: "c2", Env: "COLD_C2"}}
	gone, evs := served()
	if gone != 0 || len(evs) == 0 || evs[0]["kind"] != "cipher_key_unavailable" {
		t.Fatalf("key gone: %d blocks served, events %v", gone, evs)
	}
	log := string(must(os.ReadFile(c.AuditLog)))
	for _, s := range []string{env["COLD_C1"], env["COLD_C2"], env["COLD_BAD"]} {
		if strings.Contains(log, s) {
			t.Fatal("audit log holds a cold encryption secret")
		}
	}
}

// Bad settings are refused with messages that say what to change.
func TestColdCryptConfigRefused(t *testing.T) {
	c := testConfig()
	c.ColdStore, c.ColdDir = "fs", t.TempDir()
	c.ColdEncryptionKeys = []config.SecretConfig{{ID: "c1", Env: "SHORT"}}
	opts := Options{Getenv: func(k string) (string, bool) { return "tooshort", true }}
	if _, err := nodesec.ColdKeyring(c, opts.Getenv); !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "openssl rand -hex 32") {
		t.Fatalf("short key: %v", err)
	}
	for _, mod := range []func(*config.Config){
		func(c *config.Config) { c.ColdCompression = "lz4" },
		func(c *config.Config) { c.ColdCompressionMinSaving = 0 },
		func(c *config.Config) { c.ColdEncryptionGrace = -time.Second },
		func(c *config.Config) {
			c.ColdEncryptionKeys = []config.SecretConfig{{ID: "a", Env: "A"}, {ID: "a", Env: "B"}}
		},
		func(c *config.Config) { c.ColdStore = "off" },
	} {
		d := c
		mod(&d)
		if d.ColdStore == "off" {
			d.ColdCompression = config.ColdCompressionZstd
		}
		if err := d.Validate(); !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "cold_") {
			t.Fatalf("config %+v: %v", d.ColdCompression, err)
		}
	}
}
