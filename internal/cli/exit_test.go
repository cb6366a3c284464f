package cli

import (
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/security/tlsconf/tlstest"
	"github.com/gpucache/gpucache/internal/server/servertest"
)

// writeSecret writes secret to a file and returns its path.
func writeSecret(t *testing.T, secret string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestExitCodes: a hit, a miss, a usage error, a refusal and an
// unavailable server each exit with their own documented code, and a
// refusal is never printed as a miss.
func TestExitCodes(t *testing.T) {
	open := startServer(t)
	const secret = "0123456789abcdef-acme"
	sec := servertest.StartSecure(t, "127.0.0.1:0", wire.Limits{},
		servertest.Tenant{Name: "acme", Secret: []byte(secret)},
		servertest.Tenant{Name: "reader", Secret: []byte("0123456789abcdef-reader"), Rights: []string{"*=r"}}).Addr

	if r := run(t, "x", "put", "--addr", open, "--key-text", "k", "-"); r.code != exitOK {
		t.Fatalf("put: %+v", r)
	}
	if r := run(t, "", "get", "--addr", open, "--key-text", "k"); r.code != exitOK || r.stdout != "x" {
		t.Fatalf("hit: %+v", r)
	}
	r := run(t, "", "get", "--addr", open, "--key-text", "absent")
	if r.code != exitMiss || !strings.Contains(r.stderr, "miss:") {
		t.Fatalf("miss: %+v", r)
	}
	// Wrong secret: refused, not a miss.
	r = run(t, "", "get", "--addr", sec, "--secret-file", writeSecret(t, "not-the-secret-at-all"), "--key-text", "k")
	if r.code != exitRefused || strings.Contains(r.stderr, "miss") || !strings.Contains(r.stderr, "refused") {
		t.Fatalf("bad secret: %+v", r)
	}
	// A read-only tenant's PUT: refused (rights).
	r = run(t, "x", "put", "--addr", sec, "--secret-file", writeSecret(t, "0123456789abcdef-reader"), "--key-text", "k", "-")
	if r.code != exitRefused || !strings.Contains(r.stderr, "refused") {
		t.Fatalf("no rights: %+v", r)
	}
	// Nothing listens: unavailable.
	r = run(t, "", "get", "--addr", "127.0.0.1:1", "--timeout", "2s", "--key-text", "k")
	if r.code != exitUnavailable || strings.Contains(r.stderr, "miss") || !strings.Contains(r.stderr, "unavailable") {
		t.Fatalf("unavailable: %+v", r)
	}
	if r := run(t, "", "stat", "--addr", "127.0.0.1:1", "--timeout", "2s"); r.code != exitUnavailable {
		t.Fatalf("stat unavailable: %+v", r)
	}
	// --help documents the codes, on stdout.
	r = run(t, "", "--help")
	if r.code != exitOK || !strings.Contains(r.stdout, "Exit codes:") || r.stderr != "" {
		t.Fatalf("--help: %+v", r)
	}
}

// TestSecretFileTenant: with --secret-file the tenant comes from the
// server's answer; --tenant is not needed.
func TestSecretFileTenant(t *testing.T) {
	const secret = "0123456789abcdef-acme"
	sec := servertest.StartSecure(t, "127.0.0.1:0", wire.Limits{}, servertest.Tenant{Name: "acme", Secret: []byte(secret)}).Addr
	sf := writeSecret(t, secret)
	if r := run(t, "payload", "put", "--addr", sec, "--secret-file", sf, "--key-text", "k", "-"); r.code != exitOK {
		t.Fatalf("put without --tenant: %+v", r)
	}
	if r := run(t, "", "get", "--addr", sec, "--secret-file", sf, "--key-text", "k"); r.code != exitOK || r.stdout != "payload" {
		t.Fatalf("get without --tenant: %+v", r)
	}
	// Different bytes under the same key: the stored bytes are kept, said plainly.
	r := run(t, "other", "put", "--addr", sec, "--secret-file", sf, "--key-text", "k", "-")
	if r.code != exitOK || !strings.Contains(r.stdout, "kept the bytes already stored") {
		t.Fatalf("exists: %+v", r)
	}
}

// TestUsageOneLine: a usage error is one line that points at --help and
// suggests the nearest flag; -h prints the flags on stdout.
func TestUsageOneLine(t *testing.T) {
	r := run(t, "", "get", "--kye-text", "a")
	if r.code != exitUsage || strings.Count(r.stderr, "\n") != 1 ||
		!strings.Contains(r.stderr, "did you mean --key-text?") || !strings.Contains(r.stderr, "see 'gpucache get --help'") {
		t.Fatalf("typo: %+v", r)
	}
	if r := run(t, "", "get", "-h"); r.code != exitOK || !strings.Contains(r.stdout, "-key-text") || r.stderr != "" {
		t.Fatalf("get -h: %+v", r)
	}
	r = run(t, "", "stta")
	if r.code != exitUsage || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, `did you mean "stat"?`) {
		t.Fatalf("command typo: %+v", r)
	}
}

// TestPlaintextAgainstTLS: a plaintext client against a TLS listener is
// told that the server expects TLS and which flag turns it on.
func TestPlaintextAgainstTLS(t *testing.T) {
	addr := startTLSServer(t)
	r := run(t, "", "stat", "--addr", addr, "--timeout", "5s")
	if r.code != exitUnavailable || !strings.Contains(r.stderr, "expects TLS") || !strings.Contains(r.stderr, "--tls-ca") {
		t.Fatalf("plaintext to TLS: %+v", r)
	}
}

// TestClusterFlag: put, get, lookup and delete through --cluster work for
// every key against three real nodes; without it, a key owned by another
// node is refused with a message that names the owner's address and the
// flag to use.
func TestClusterFlag(t *testing.T) {
	nodes := servertest.StartCluster(t, 3)
	t.Setenv("GPUCACHE_CLUSTER", nodes[0].Addr+","+nodes[1].Addr)
	for i := range 12 {
		key := fmt.Sprintf("key-%d", i)
		if r := run(t, key, "put", "--key-text", key, "-"); r.code != exitOK || !strings.HasPrefix(r.stdout, "stored") {
			t.Fatalf("put %s: %+v", key, r)
		}
		if r := run(t, "", "get", "--key-text", key); r.code != exitOK || r.stdout != key {
			t.Fatalf("get %s: %+v", key, r)
		}
		if r := run(t, "", "lookup", "--key-text", key); r.code != exitOK || !strings.Contains(r.stdout, "1 of 1 blocks cached") {
			t.Fatalf("lookup %s: %+v", key, r)
		}
		if r := run(t, "", "delete", "--key-text", key); r.code != exitOK || !strings.HasPrefix(r.stdout, "deleted") {
			t.Fatalf("delete %s: %+v", key, r)
		}
	}
	// One node, no --cluster: some key is owned elsewhere, and the error
	// names the owner's address and the flag.
	t.Setenv("GPUCACHE_CLUSTER", "")
	refused := 0
	for i := range 12 {
		key := fmt.Sprintf("key-%d", i)
		r := run(t, key, "put", "--addr", nodes[0].Addr, "--key-text", key, "-")
		if r.code == exitOK {
			continue
		}
		refused++
		if r.code != exitUnavailable || !strings.Contains(r.stderr, "127.0.0.1:") || !strings.Contains(r.stderr, "--cluster") {
			t.Fatalf("put %s to one node: %+v", key, r)
		}
	}
	if refused == 0 {
		t.Fatal("no key was owned by another node")
	}
}

// startTLSServer listens with TLS on loopback and completes handshakes
// (what a gpucached with tls_cert answers before any gpucache byte).
func startTLSServer(t *testing.T) string {
	t.Helper()
	ca := tlstest.NewCA(t, "test-ca")
	certPEM, keyPEM := ca.Issue(t, "server", tlstest.ServerAuth())
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return serveHandshakes(t, &tls.Config{Certificates: []tls.Certificate{cert}})
}

// serveHandshakes listens on loopback with tc, completes each connection's
// handshake and closes it, until the test ends; it returns the address.
func serveHandshakes(t *testing.T, tc *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", tc)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}
