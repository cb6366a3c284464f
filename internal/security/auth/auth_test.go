package auth

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

var (
	sA = []byte("acme-secret-0123456789")
	sB = []byte("beta-secret-0123456789")
)

func table(t *testing.T, ts ...Tenant) *Table {
	t.Helper()
	tab, err := NewTable(ts)
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

func TestBearer(t *testing.T) {
	now := time.Unix(1000, 0)
	tab := table(t,
		Tenant{Name: "acme", Secrets: []Credential{{ID: "a1", Secret: sA}, {ID: "a0", Secret: []byte("acme-old-secret-0123456"), NotAfter: now}}},
		Tenant{Name: "beta", Secrets: []Credential{{ID: "b1", Secret: sB}}, CertNames: []string{"spiffe://gpucache/beta"}},
	)
	s, err := tab.Bearer(sA, now)
	if err != nil || s.Tenant != "acme" || s.CredID != "a1" || s.Method != MethodBearer {
		t.Fatalf("acme: %+v %v", s, err)
	}
	if s, err := tab.Bearer(sB, now); err != nil || s.Tenant != "beta" {
		t.Fatalf("beta: %+v %v", s, err)
	}
	for _, tc := range []struct {
		secret []byte
		want   error
		reason string
	}{
		{nil, ErrNoCredential, "no_credential"},
		{[]byte("acme-secret-0123456788"), ErrUnknown, "unknown_credential"},
		{[]byte("acme-old-secret-0123456"), ErrExpired, "expired_credential"},
	} {
		_, err := tab.Bearer(tc.secret, now)
		if !errors.Is(err, ErrUnauthenticated) || !errors.Is(err, tc.want) || Reason(err) != tc.reason {
			t.Errorf("%q: %v (%s)", tc.secret, err, Reason(err))
		}
		if tc.secret != nil && strings.Contains(err.Error(), string(tc.secret)) {
			t.Errorf("error echoes the secret: %v", err)
		}
	}
	if _, err := tab.Bearer([]byte("acme-old-secret-0123456"), now.Add(-time.Nanosecond)); err != nil {
		t.Fatalf("before expiry: %v", err)
	}
	if s, err := tab.Cert([]string{"cn-unknown", "spiffe://gpucache/beta"}); err != nil || s.Tenant != "beta" || s.Method != MethodMTLS {
		t.Fatalf("cert: %+v %v", s, err)
	}
	if _, err := tab.Cert([]string{"nobody"}); !errors.Is(err, ErrUnknown) {
		t.Fatalf("unknown cert: %v", err)
	}
	if _, err := tab.Cert(nil); !errors.Is(err, ErrNoCredential) {
		t.Fatalf("no cert: %v", err)
	}
}

func TestStill(t *testing.T) {
	now := time.Unix(1000, 0)
	old := table(t, Tenant{Name: "acme", Secrets: []Credential{{ID: "a1", Secret: sA}}, CertNames: []string{"acme-engine"}})
	s, _ := old.Bearer(sA, now)
	c, _ := old.Cert([]string{"acme-engine"})
	renewed := table(t, Tenant{Name: "acme", Secrets: []Credential{{ID: "a1", Secret: sA, NotAfter: now.Add(time.Hour)}}})
	if na, err := renewed.Still(s, now); err != nil || !na.Equal(now.Add(time.Hour)) {
		t.Fatalf("still: %v %v", na, err)
	}
	if _, err := renewed.Still(s, now.Add(time.Hour)); !errors.Is(err, ErrExpired) {
		t.Fatalf("expired: %v", err)
	}
	if _, err := renewed.Still(c, now); err == nil || Reason(err) != "revoked_credential" {
		t.Fatalf("cert name removed: %v", err)
	}
	moved := table(t, Tenant{Name: "beta", Secrets: []Credential{{ID: "a1", Secret: sA}}})
	if _, err := moved.Still(s, now); err == nil {
		t.Fatal("a secret moved to another tenant keeps the old session")
	}
}

func TestNewTableRejects(t *testing.T) {
	good := Credential{ID: "x", Secret: sA}
	for _, tc := range []struct {
		name string
		ts   []Tenant
		want string
	}{
		{"no name", []Tenant{{Secrets: []Credential{good}}}, "no name"},
		{"colon", []Tenant{{Name: "a:b", Secrets: []Credential{good}}}, "contains"},
		{"twice", []Tenant{{Name: "a", Secrets: []Credential{good}}, {Name: "a", CertNames: []string{"c"}}}, "twice"},
		{"no credentials", []Tenant{{Name: "a"}}, "no secrets, cert_names or unix_uids"},
		{"shared uid", []Tenant{{Name: "a", UnixUIDs: []uint32{7}}, {Name: "b", UnixUIDs: []uint32{7}}}, "unix uid 7 belongs to"},
		{"short secret", []Tenant{{Name: "a", Secrets: []Credential{{ID: "x", Secret: []byte("short")}}}}, "at least 16"},
		{"no id", []Tenant{{Name: "a", Secrets: []Credential{{Secret: sA}}}}, "no id"},
		{"dup id", []Tenant{{Name: "a", Secrets: []Credential{good, {ID: "x", Secret: sB}}}}, "two secrets"},
		{"shared secret", []Tenant{{Name: "a", Secrets: []Credential{good}}, {Name: "b", Secrets: []Credential{{ID: "y", Secret: sA}}}}, "also another"},
		{"shared cert", []Tenant{{Name: "a", CertNames: []string{"c"}}, {Name: "b", CertNames: []string{"c"}}}, "belongs to"},
		{"empty cert", []Tenant{{Name: "a", CertNames: []string{""}}}, "empty cert"},
	} {
		_, err := NewTable(tc.ts)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v", tc.name, err)
		}
		if err != nil && (strings.Contains(err.Error(), string(sA)) || strings.Contains(fmt.Sprint(err), string(sB))) {
			t.Errorf("%s: error contains a secret", tc.name)
		}
	}
}

func FuzzBearer(f *testing.F) {
	tab, err := NewTable([]Tenant{{Name: "acme", Secrets: []Credential{{ID: "a1", Secret: sA}}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(sA)
	f.Add([]byte{})
	f.Add([]byte("acme-secret-012345678"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := tab.Bearer(b, time.Unix(0, 0))
		if (err == nil) != (string(b) == string(sA)) {
			t.Fatalf("Bearer(%q) = %+v, %v", b, s, err)
		}
	})
}
