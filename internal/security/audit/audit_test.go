package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

func lines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimRight(buf.String(), "\n"), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("invalid JSON line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

func one(t *testing.T, buf *bytes.Buffer) map[string]any {
	t.Helper()
	ls := lines(t, buf)
	if len(ls) != 1 {
		t.Fatalf("got %d lines, want 1: %q", len(ls), buf.String())
	}
	return ls[0]
}

func wantFields(t *testing.T, m map[string]any, want map[string]any) {
	t.Helper()
	for k, v := range want {
		if got, ok := m[k]; !ok || got != v {
			t.Errorf("field %q = %#v, want %#v (line %v)", k, got, v, m)
		}
	}
	for _, k := range []string{"time", "level", "msg"} {
		if _, ok := m[k]; !ok {
			t.Errorf("missing %q", k)
		}
	}
}

func TestHelpersEmitOneJSONLine(t *testing.T) {
	fixed := time.Date(2026, 2, 3, 4, 5, 6, 0, time.UTC)
	cases := []struct {
		name string
		emit func(*Logger)
		want map[string]any
	}{
		{"AuthFailure", func(l *Logger) { l.AuthFailure("acme", "bad_token", "10.0.0.1:5555") },
			map[string]any{"event": EventAuthFailure, "tenant": "acme", "reason": "bad_token", "remote": "10.0.0.1:5555"}},
		{"Denied", func(l *Logger) { l.Denied("acme", "llama-3-8b", "write", "PUT") },
			map[string]any{"event": EventDenied, "tenant": "acme", "model": "llama-3-8b", "right": "write", "op": "PUT"}},
		{"Rotation", func(l *Logger) { l.Rotation("seal_key", "k-2026-02") },
			map[string]any{"event": EventRotation, "kind": "seal_key", "key_id": "k-2026-02"}},
		{"RateLimited", func(l *Logger) { l.RateLimited("acme", 1500*time.Millisecond) },
			map[string]any{"event": EventRateLimited, "tenant": "acme", "retry_after_ms": float64(1500), "retry_after": "1.5s"}},
		{"AdminAction", func(l *Logger) {
			l.AdminAction("ops", "evict_model", slog.String("model", "llama-3-8b"), slog.Int("entries", 42))
		}, map[string]any{"event": EventAdminAction, "actor": "ops", "action": "evict_model"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			c.emit(NewWithOptions(&buf, Options{Now: func() time.Time { return fixed }}))
			m := one(t, &buf)
			wantFields(t, m, c.want)
			if m["audit"] != true || m["level"] != "INFO" {
				t.Errorf("audit/level: %v", m)
			}
			if m["time"] != "2026-02-03T04:05:06Z" {
				t.Errorf("time = %v", m["time"])
			}
			if c.name == "AdminAction" {
				d, _ := m["details"].(map[string]any)
				if d["model"] != "llama-3-8b" || d["entries"] != float64(42) {
					t.Errorf("details = %v", m["details"])
				}
			}
		})
	}
}

func TestNilLoggerDiscards(t *testing.T) {
	var l *Logger
	l.AuthFailure("a", "b", "c")
	l.AdminAction("a", "b", slog.String("x", "y"))
}

func TestIsSecretKey(t *testing.T) {
	secret := []string{"secret", "bearer_secret", "Token", "access-token", "password", "PASSWD",
		"key", "private_key", "key_material", "keyMaterial", "fingerprint", "key_fingerprint",
		"hash", "secret_hash", "sha256", "digest", "hmac", "api_key", "Authorization", "credentials", "fp", "salt"}
	safe := []string{"tenant", "model", "key_id", "keyID", "kind", "actor", "action", "reason",
		"remote", "op", "right", "retry_after", "shard", "entries", "audit", "event", "msg", "time", "level"}
	for _, k := range secret {
		if !IsSecretKey(k) {
			t.Errorf("IsSecretKey(%q) = false", k)
		}
	}
	for _, k := range safe {
		if IsSecretKey(k) {
			t.Errorf("IsSecretKey(%q) = true", k)
		}
	}
}

func TestSecretFormatting(t *testing.T) {
	s := Secret("hunter2-very-secret")
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%10s", "%T"} {
		got := fmt.Sprintf(verb, s)
		if strings.Contains(got, "hunter2") || strings.Contains(got, hex.EncodeToString(s)) {
			t.Errorf("%s leaked: %q", verb, got)
		}
	}
	js, _ := json.Marshal(struct{ S Secret }{s})
	if strings.Contains(string(js), "hunter2") {
		t.Errorf("json leaked: %s", js)
	}
	if string(s.Bytes()) != "hunter2-very-secret" {
		t.Fatal("Bytes lost content")
	}
}

type withSecret struct {
	Name  string
	Inner Secret
}

type tokenHolder struct {
	User  string
	Token string
}

// TestSecretNeverLogged feeds one known secret through every path and checks
// that neither it nor its hex, base64 or SHA-256 "fingerprint" reaches the sink.
func TestSecretNeverLogged(t *testing.T) {
	raw := []byte("s3cr3t-bearer-Zq9!xK")
	sec := Secret(raw)
	sum := sha256.Sum256(raw)
	fpHex := hex.EncodeToString(sum[:])
	forbidden := []string{
		string(raw),
		hex.EncodeToString(raw), strings.ToUpper(hex.EncodeToString(raw)),
		base64.StdEncoding.EncodeToString(raw), base64.RawURLEncoding.EncodeToString(raw),
		base64.RawStdEncoding.EncodeToString(raw),
		fpHex, strings.ToUpper(fpHex), fpHex[:16], // full and truncated fingerprints
		base64.StdEncoding.EncodeToString(sum[:]),
	}

	var buf bytes.Buffer
	l := New(&buf)
	// Secret-bearing keys, whatever the value type.
	l.AdminAction("ops", "set_tenant_secret",
		slog.Any("secret", sec),
		slog.Any("secret_ptr", &sec),
		slog.String("token", string(raw)),
		slog.String("password", string(raw)),
		slog.String("key_material", hex.EncodeToString(raw)),
		slog.String("fingerprint", fpHex),
		slog.String("secret_sha256", fpHex),
		slog.String("hash", base64.StdEncoding.EncodeToString(sum[:])),
		slog.String("api-key", base64.StdEncoding.EncodeToString(raw)),
		slog.Any("Authorization", "Bearer "+string(raw)),
	)
	// Secret-typed or raw-byte values under innocent keys.
	l.AdminAction("ops", "rotate",
		slog.Any("value", sec),
		slog.Any("blob", raw),
		slog.Any("fp_bytes", sum[:]),
		slog.Any("holder", withSecret{Name: "n", Inner: sec}),
		slog.Any("tokens", tokenHolder{User: "u", Token: string(raw)}),
		slog.Any("map", map[string]string{"t": string(raw)}),
		slog.Group("credentials", slog.String("user", "u"), slog.String("value", string(raw))),
		slog.Group("nested", slog.Group("deeper", slog.String("bearer", string(raw)), slog.Any("v", sec))),
		slog.Any("err", fmt.Errorf("wrapped: %v", sec)),
		slog.String("sv", fmt.Sprintf("%v|%+v|%#v|%s|%q|%x|%X", sec, sec, sec, sec, sec, sec, sec)),
		slog.Any("stringer", sec),
	)
	// Every helper with formatted Secret values in its string arguments.
	for _, f := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X"} {
		v := fmt.Sprintf(f, sec)
		l.AuthFailure(v, v, v)
		l.Denied(v, v, v, v)
		l.Rotation(v, v)
		l.RateLimited(v, time.Second)
		l.AdminAction(v, v, slog.String("note", v))
	}
	// A plain slog logger using the same redaction rules, via LogValuer.
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("x", "s", sec)

	out := buf.String()
	if n := len(lines(t, &buf)); n != 2+5*7+1 {
		t.Fatalf("got %d lines", n)
	}
	for _, f := range forbidden {
		if strings.Contains(out, f) {
			t.Errorf("output contains forbidden %q", f)
		}
	}
	if !strings.Contains(out, Redacted) {
		t.Error("nothing was redacted; test ineffective")
	}
	// Redaction keeps keys so the event shows something was withheld.
	for _, k := range []string{`"secret":"[REDACTED]"`, `"token":"[REDACTED]"`, `"credentials":"[REDACTED]"`, `"fingerprint":"[REDACTED]"`} {
		if !strings.Contains(out, k) {
			t.Errorf("output lacks %s", k)
		}
	}
}

func TestErrorAndStringerValuesKept(t *testing.T) {
	var buf bytes.Buffer
	New(&buf).AdminAction("ops", "flush", slog.Any("err", errors.New("disk full")), slog.Duration("took", time.Second))
	m := one(t, &buf)
	d := m["details"].(map[string]any)
	if d["err"] != "disk full" || d["took"] != float64(time.Second) {
		t.Fatalf("details = %v", d)
	}
}

func TestConcurrentWritesAreWholeLines(t *testing.T) {
	var buf safeBuf
	l := New(&buf)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 50 {
				l.Denied(fmt.Sprint("t", i), "m", "read", fmt.Sprint("op", j))
			}
		})
	}
	wg.Wait()
	b := bytes.NewBufferString(buf.String())
	if n := len(lines(t, b)); n != 400 {
		t.Fatalf("lines = %d", n)
	}
}

type safeBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *safeBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *safeBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }
