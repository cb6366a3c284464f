package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpucache/gpucache/internal/security/seal"
)

// Integrity keeps every field it is given (hex digests and key ids are
// public, so nothing is redacted by key name or by value), and an event
// built from a real seal failure carries no secret.
func TestIntegrityEvent(t *testing.T) {
	ns := strings.Repeat("ab", 32) // a namespace digest in hex
	block := strings.Repeat("0f", 32)
	var buf bytes.Buffer
	fixed := time.Date(2026, 2, 3, 4, 5, 6, 0, time.UTC)
	l := NewWithOptions(&buf, Options{Now: func() time.Time { return fixed }})
	l.Integrity("seal_invalid", ns, block, "k-2026-02", "manifest seal does not verify")
	m := one(t, &buf)
	wantFields(t, m, map[string]any{
		"event": EventIntegrity, "kind": "seal_invalid", "namespace": ns, "block": block,
		"key_id": "k-2026-02", "reason": "manifest seal does not verify", "audit": true, "level": "INFO",
	})
	if strings.Contains(buf.String(), Redacted) {
		t.Fatalf("an integrity field was redacted: %s", buf.String())
	}
	if EventIntegrity != "integrity" {
		t.Fatal("EventIntegrity")
	}

	// A real seal failure: the keyring's error text and its printed form
	// name key ids only.
	secret := []byte("integrity-test-secret-0123456789abcdef")
	kr := seal.New(func() time.Time { return fixed })
	if err := kr.Add("k1", secret, fixed); err != nil {
		t.Fatal(err)
	}
	s, err := kr.Seal([]byte("ns"), []byte("manifest"))
	if err != nil {
		t.Fatal(err)
	}
	s.MAC[0] ^= 1
	verr := kr.Verify([]byte("ns"), []byte("manifest"), s)
	if verr == nil {
		t.Fatal("tampered seal verified")
	}
	buf.Reset()
	l.Integrity("seal_invalid", ns, block, string(s.KeyID), verr.Error())
	l.Integrity("seal_invalid", ns, block, string(s.KeyID), fmt.Sprintf("%v %+v %#v %s", kr, kr, kr, kr))
	out := buf.String()
	if n := len(lines(t, &buf)); n != 2 {
		t.Fatalf("%d lines", n)
	}
	sum := sha256.Sum256(secret)
	for _, f := range []string{string(secret), hex.EncodeToString(secret), base64.StdEncoding.EncodeToString(secret),
		hex.EncodeToString(sum[:]), hex.EncodeToString(sum[:8])} {
		if strings.Contains(out, f) {
			t.Errorf("integrity event contains secret material %q", f)
		}
	}
	if !strings.Contains(out, `"key_id":"k1"`) {
		t.Errorf("key id missing: %s", out)
	}

	var nl *Logger
	nl.Integrity("seal_invalid", ns, block, "k1", "x") // nil-safe
}
