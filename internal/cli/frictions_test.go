package cli

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/security/tlsconf/tlstest"
	"github.com/gpucache/gpucache/internal/server/servertest"
)

// TestAddrIsAdminPort: --addr pointed at an HTTP listener (a node's admin
// port) exits 4 at once with a message that names the port's kind and the
// flag for it. --timeout is an hour: a CLI that waited for it would run
// into run's own 30 s context and fail the test.
func TestAddrIsAdminPort(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	r := run(t, "", "stat", "--addr", addr, "--timeout", "1h")
	if r.code != exitUnavailable {
		t.Fatalf("stat --addr ADMIN: %+v", r)
	}
	for _, want := range []string{addr + " answered HTTP", "not a gpucache data port", "gpucache admin --admin"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr %q does not say %q", r.stderr, want)
		}
	}
	if strings.Contains(r.stderr, "deadline") || strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("stderr %q: want one line and no timeout", r.stderr)
	}
}

// TestAdminIsDataPort: `gpucache admin --admin` pointed at a real data
// port says so, instead of `malformed HTTP status code "magic"`.
func TestAdminIsDataPort(t *testing.T) {
	addr := startServer(t)
	for _, url := range []string{addr, "http://" + addr} {
		r := run(t, "", "admin", "inventory", "--admin", url)
		want := addr + " is a gpucache data port, not the admin port (admin is usually :9401"
		if r.code != exitUnavailable || !strings.Contains(r.stderr, want) || strings.Contains(r.stderr, "magic") {
			t.Fatalf("admin --admin %s: %+v, want %q", url, r, want)
		}
	}
}

// otherCA writes the certificate of a CA that signed nothing the servers
// present, and returns its path.
func otherCA(t *testing.T) string {
	return tlstest.WriteFile(t, filepath.Join(t.TempDir(), "other-ca.crt"), tlstest.NewCA(t, "other-ca").CertPEM())
}

// TestWrongCAExitsRefused: a server certificate that --tls-ca (or the
// admin command's --cacert) does not verify is an authentication failure:
// exit 3, with a message naming the flag, not 4 (unavailable).
func TestWrongCAExitsRefused(t *testing.T) {
	ca := otherCA(t)
	addr := startTLSServer(t)
	r := run(t, "", "stat", "--addr", addr, "--tls-ca", ca)
	if r.code != exitRefused || !strings.Contains(r.stderr, "not trusted by --tls-ca "+ca) || !strings.Contains(r.stderr, "unknown authority") {
		t.Fatalf("stat with another CA: %+v", r)
	}
	r = run(t, "", "get", "--cluster", addr, "--tls-ca", ca, "--key-text", "k")
	if r.code != exitRefused || !strings.Contains(r.stderr, "not trusted by --tls-ca") {
		t.Fatalf("get --cluster with another CA: %+v", r)
	}
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshake it refuses
	srv.StartTLS()
	defer srv.Close()
	r = run(t, "", "admin", "inventory", "--admin", srv.URL, "--cacert", ca)
	if r.code != exitRefused || !strings.Contains(r.stderr, "not trusted by --cacert") {
		t.Fatalf("admin with another CA: %+v", r)
	}
}

// TestAuthErrorPrefixOnce: an authentication failure names the auth
// package once, not "gpucache/auth: unauthenticated: gpucache/auth:
// unauthenticated: ...".
func TestAuthErrorPrefixOnce(t *testing.T) {
	sec := servertest.StartSecure(t, "127.0.0.1:0", wire.Limits{},
		servertest.Tenant{Name: "acme", Secret: []byte("0123456789abcdef-acme")}).Addr
	for name, args := range map[string][]string{
		"wrong secret": {"stat", "--addr", sec, "--secret-file", writeSecret(t, "not-the-secret-at-all")},
		"no secret":    {"stat", "--addr", sec},
	} {
		r := run(t, "", args...)
		if r.code != exitRefused || strings.Count(r.stderr, "gpucache/auth: unauthenticated") != 1 {
			t.Errorf("%s: %+v, want exit 3 and the prefix once", name, r)
		}
	}
}

// TestAdminResultBytes: byte counts print as integers with binary units,
// never as floats (2.68435716e+08B).
func TestAdminResultBytes(t *testing.T) {
	inv := `[{"tenant":"acme","namespace":"ns1","model_id":"m","packs":{"objects":3,"bytes":268435716},` +
		`"manifests":{"objects":1,"bytes":512},"pointers":{"objects":2,"bytes":2048},"other":{"objects":0,"bytes":0}}]`
	var out bytes.Buffer
	if err := printResult(&out, []byte(inv), false); err != nil {
		t.Fatal(err)
	}
	want := `tenant="acme" namespace=ns1 model="m" packs=3 objects, 268435716 B (256.0 MiB); manifests=1 object, 512 B; pointers=2 objects, 2048 B (2.0 KiB)` + "\n"
	if out.String() != want {
		t.Errorf("inventory:\n got %q\nwant %q", out.String(), want)
	}
	out.Reset()
	res := `{"namespaces":2,"bytes_read":268435716,"budget_exhausted":false,"node":{"dram_blocks_dropped":1500000}}`
	if err := printResult(&out, []byte(res), false); err != nil {
		t.Fatal(err)
	}
	want = "budget_exhausted: false\nbytes_read: 268435716 B (256.0 MiB)\nnamespaces: 2\nnode: {dram_blocks_dropped=1500000}\n"
	if out.String() != want {
		t.Errorf("result:\n got %q\nwant %q", out.String(), want)
	}
}

// TestClusterOwnerDownNamed: with a member killed (its port refuses
// connections) but still in the view, every command on a key it owns
// exits 4 with an error that names the owner, member id and address; a
// PUT is not reported as the server's NO_SPACE refusal.
func TestClusterOwnerDownNamed(t *testing.T) {
	nodes := servertest.StartCluster(t, 3)
	seeds := nodes[0].Addr + "," + nodes[1].Addr
	nodes[2].Stop()
	owner := "member gpu-3 at " + nodes[2].Addr
	down := 0
	for i := range 12 {
		key := fmt.Sprintf("key-%d", i)
		r := run(t, key, "put", "--cluster", seeds, "--key-text", key, "-")
		if r.code == exitOK {
			continue
		}
		down++
		if r.code != exitUnavailable || !strings.Contains(r.stderr, owner) || strings.Contains(r.stderr, "NO_SPACE") {
			t.Fatalf("put %s: %+v, want exit 4 naming %q", key, r, owner)
		}
		for _, args := range [][]string{
			{"get", "--cluster", seeds, "--key-text", key},
			{"lookup", "--cluster", seeds, "--key-text", key},
			{"delete", "--cluster", seeds, "--key-text", key},
		} {
			r := run(t, "", args...)
			if r.code != exitUnavailable || !strings.Contains(r.stderr, owner) || strings.Count(r.stderr, "\n") != 1 {
				t.Errorf("%s %s: %+v, want exit 4 naming %q", args[0], key, r, owner)
			}
		}
		if r := run(t, "", "get", "--cluster", seeds, "--key-text", key); !strings.Contains(r.stderr, "connection refused") {
			t.Errorf("get %s: %+v, want the dial error too", key, r)
		}
	}
	if down == 0 {
		t.Fatal("no key was owned by the stopped member")
	}
}
