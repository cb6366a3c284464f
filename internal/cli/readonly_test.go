package cli

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/control"
	"github.com/gpucache/gpucache/internal/security/tlsconf/tlstest"
	"github.com/gpucache/gpucache/internal/server"
	"github.com/gpucache/gpucache/internal/server/servertest"
)

// TestReadOnlyExitCode: a PUT to a node that lost its control plane says
// so in plain words and exits "unavailable" (4), next to a miss (1), a
// refusal (3) and an unreachable server (4); STAT counts the refusal in
// readonly_refused (gpucache-bench's TestBenchReadOnly: the bench counts
// READ_ONLY apart from errors).
func TestReadOnlyExitCode(t *testing.T) {
	cl := server.NewCluster("gpu-1", control.View{})
	node := servertest.StartWith(t, "127.0.0.1:0", wire.Limits{}, func(c *server.Config) { c.Cluster = cl })
	v, err := control.NewView(1, []control.Member{{ID: "gpu-1", Addr: node.Addr, FaultDomain: "r", ProtoVersion: wire.VersionMax, CapacityBytes: 1 << 30}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := node.Srv.AdvanceView(v); err != nil {
		t.Fatal(err)
	}
	if r := run(t, "x", "put", "--addr", node.Addr, "--key-text", "before", "-"); r.code != exitOK {
		t.Fatalf("put while live: %+v", r)
	}
	cl.SetMode(server.ControlReadOnly)

	r := run(t, "y", "put", "--addr", node.Addr, "--key-text", "during", "-")
	const want = "not stored: node is read-only (control plane unreachable); retry later or write to another node"
	if r.code != exitUnavailable || !strings.Contains(r.stderr, want) || strings.Contains(r.stderr, "refused") || r.stdout != "" {
		t.Fatalf("put while read-only: %+v, want exit %d and %q", r, exitUnavailable, want)
	}
	// Reads still work: a hit, and a miss is a miss (exit 1).
	if r := run(t, "", "get", "--addr", node.Addr, "--key-text", "before"); r.code != exitOK || r.stdout != "x" {
		t.Fatalf("get while read-only: %+v", r)
	}
	if r := run(t, "", "get", "--addr", node.Addr, "--key-text", "during"); r.code != exitMiss || !strings.Contains(r.stderr, "miss") {
		t.Fatalf("the refused block: %+v", r)
	}
	// A refusal (bad credential) is 3; nothing listening is 4.
	sec := servertest.StartSecure(t, "127.0.0.1:0", wire.Limits{}, servertest.Tenant{Name: "acme", Secret: []byte("0123456789abcdef-acme")}).Addr
	if r := run(t, "x", "put", "--addr", sec, "--secret-file", writeSecret(t, "not-the-secret-at-all"), "--key-text", "k", "-"); r.code != exitRefused {
		t.Fatalf("refusal: %+v", r)
	}
	if r := run(t, "x", "put", "--addr", "127.0.0.1:1", "--timeout", "2s", "--key-text", "k", "-"); r.code != exitUnavailable || !strings.Contains(r.stderr, "unavailable") {
		t.Fatalf("unreachable: %+v", r)
	}
	// STAT shows the refusal.
	r = run(t, "", "stat", "--addr", node.Addr, "--json")
	if r.code != exitOK || !strings.Contains(r.stdout, `"readonly_refused": 1`) {
		t.Fatalf("stat: readonly_refused is not 1: %+v", r)
	}
}

// TestMTLSWithoutCertificateRefused: a server that requires a client
// certificate ends the handshake of a client without one; the CLI says
// which flags to pass and exits "refused" (3), not "unavailable".
func TestMTLSWithoutCertificateRefused(t *testing.T) {
	ca := tlstest.NewCA(t, "mtls-ca")
	certPEM, keyPEM := ca.Issue(t, "server", tlstest.ServerAuth())
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	addr := serveHandshakes(t, &tls.Config{Certificates: []tls.Certificate{cert},
		ClientCAs: ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert})
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, ca.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	r := run(t, "", "get", "--addr", addr, "--tls-ca", caFile, "--key-text", "k")
	if r.code != exitRefused || !strings.Contains(r.stderr, "requires a client certificate") || !strings.Contains(r.stderr, "--tls-cert") {
		t.Fatalf("mTLS without a client certificate: %+v", r)
	}
}
