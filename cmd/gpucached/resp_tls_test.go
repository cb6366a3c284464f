package main

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpucache/gpucache/internal/security/tlsconf/tlstest"
)

// TestRESPOverTLS: resp_listen follows the daemon's TLS settings, so
// `rediss://` works: the real redis-cli (--tls) stores and reads a chunk
// over TLS with AUTH, and a plaintext RESP command on the same port gets
// no RESP answer.
func TestRESPOverTLS(t *testing.T) {
	cli := needClient(t, "redis-cli", "--version")
	if err := exec.Command(cli, "--tls", "--version").Run(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis-cli has no TLS support: %v", err)
		}
		t.Skipf("redis-cli has no TLS support: %v", err)
	}
	bin := buildDaemon(t)
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "gpucache test CA")
	srvCert, srvKey := ca.IssueFiles(t, dir, "server", "127.0.0.1", tlstest.ServerAuth(), tlstest.Serial(2001))
	caFile := tlstest.WriteFile(t, filepath.Join(dir, "ca.pem"), ca.CertPEM())
	secret := string(randomSecret(t, filepath.Join(dir, "acme.secret")))
	cfg := `tls_cert: ` + srvCert + `
tls_key: ` + srvKey + `
cold_store: "off"
tenants:
  - name: acme
    secrets: [{id: acme-1, file: ` + dir + `/acme.secret}]
    resp: {model: ` + exampleModel + `, config_revision: main, tokenizer_revision: main, dtype: bfloat16, variable_length: true}
`
	cfgPath := filepath.Join(dir, "gpucached.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	respAddr := "127.0.0.1:" + freeLoopbackPort(t)
	startDaemon(t, bin, "--config", cfgPath, "--resp-listen", respAddr, "--audit-log", "off")
	host, port, _ := net.SplitHostPort(respAddr)

	run := func(stdin []byte, args ...string) []byte {
		t.Helper()
		return redisCLI(t, cli, []string{"--tls", "--cacert", caFile, "-h", host, "-p", port}, "acme", secret, stdin, args...)
	}
	key := mpKey(t.Name())
	chunk := make([]byte, 1<<20)
	rand.Read(chunk)
	if out := run(chunk, "-x", "SET", key); string(out) != "OK\n" {
		t.Fatalf("SET over TLS: %q", truncate(out))
	}
	got := run(nil, "--raw", "GET", key)
	if len(got) != len(chunk)+1 || !bytes.Equal(got[:len(chunk)], chunk) {
		t.Fatalf("GET over TLS returned %d bytes, want the %d stored", len(got)-1, len(chunk))
	}

	// Go's TLS client, as redis-py's rediss:// does: the handshake
	// verifies the server against the CA.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM())
	tc, err := tls.Dial("tcp", respAddr, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatalf("TLS dial: %v", err)
	}
	tc.SetDeadline(time.Now().Add(rcHangGuard)) // a hang guard only
	tc.Write([]byte("*1\r\n$4\r\nPING\r\n"))
	buf := make([]byte, 7)
	if _, err := io.ReadFull(tc, buf); err != nil || string(buf) != "+PONG\r\n" {
		t.Fatalf("PING over TLS: %q %v", buf, err)
	}
	tc.Close()

	// Plaintext RESP on the TLS port: the server answers a TLS alert (or
	// closes), never a RESP reply.
	nc, err := net.Dial("tcp", respAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(rcHangGuard))
	nc.Write([]byte("*1\r\n$4\r\nPING\r\n"))
	b, _ := io.ReadAll(nc)
	if bytes.Contains(b, []byte("PONG")) || bytes.HasPrefix(b, []byte("+")) || bytes.HasPrefix(b, []byte("-")) {
		t.Fatalf("plaintext RESP on the TLS port answered %q", b)
	}
}
