package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpucache/gpucache/client"
	"github.com/gpucache/gpucache/internal/security/tlsconf"
	"github.com/gpucache/gpucache/internal/security/tlsconf/tlstest"
)

// TestRemoteBindWithoutAuthRefuses starts the daemon on non-loopback
// addresses without tenants: it must refuse to start, exit 2, and say why
// and what to do.
func TestRemoteBindWithoutAuthRefuses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds binaries")
	}
	bin := buildDaemon(t)
	for _, args := range [][]string{
		{"--listen", "0.0.0.0:0", "--admin-listen", "off"},
		{"--listen", "127.0.0.1:0", "--admin-listen", "0.0.0.0:0"},
	} {
		cmd := exec.Command(bin, append(args, "--cold-store", "off")...)
		out, err := cmd.CombinedOutput()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 2 {
			t.Fatalf("%v: exit %v, want 2\n%s", args, err, out)
		}
		for _, want := range []string{"not a loopback address and authentication is not configured", "define tenants", "bind to 127.0.0.1"} {
			if !strings.Contains(string(out), want) {
				t.Fatalf("%v: message lacks %q:\n%s", args, want, out)
			}
		}
		if strings.Contains(string(out), "gpucached serving") {
			t.Fatalf("%v: the daemon served", args)
		}
	}
}

func randomSecret(t *testing.T, path string) []byte {
	t.Helper()
	b := make([]byte, 32)
	rand.Read(b)
	s := []byte(hex.EncodeToString(b))
	if err := os.WriteFile(path, append(s, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSecureDaemonEndToEnd runs gpucached bound to every interface with
// tenants, mTLS, sealed cold manifests and a file audit log: an mTLS client
// round-trips a block; a client of another CA is refused; SIGHUP rotates
// the server certificate, a tenant secret and the seal key without dropping
// the established session; the admin reload endpoint needs the admin role;
// the audit log records it all and holds no secret.
func TestSecureDaemonEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds binaries")
	}
	bin := buildDaemon(t)
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "gpucache test CA")
	srvCert, srvKey := ca.IssueFiles(t, dir, "server", "gpucached", tlstest.ServerAuth(), tlstest.Serial(1001))
	acmeCert, acmeKey := ca.IssueFiles(t, dir, "acme", "acme-engine", tlstest.ClientAuth())
	opsCert, opsKey := ca.IssueFiles(t, dir, "ops", "ops-console", tlstest.ClientAuth())
	other := tlstest.NewCA(t, "someone else's CA")
	evilCert, evilKey := other.IssueFiles(t, dir, "evil", "acme-engine", tlstest.ClientAuth())
	caFile := tlstest.WriteFile(t, filepath.Join(dir, "ca.pem"), ca.CertPEM())
	secret1 := randomSecret(t, filepath.Join(dir, "acme-1.secret"))
	secret2 := randomSecret(t, filepath.Join(dir, "acme-2.secret"))
	seal1 := randomSecret(t, filepath.Join(dir, "seal-1.key"))
	seal2 := randomSecret(t, filepath.Join(dir, "seal-2.key"))
	auditPath := filepath.Join(dir, "audit.log")
	config := func(rotated bool) string {
		acmeSecrets := fmt.Sprintf("{id: acme-1, file: %s/acme-1.secret}", dir)
		sealKeys := fmt.Sprintf("[{id: seal-1, file: %s/seal-1.key}]", dir)
		if rotated {
			acmeSecrets += fmt.Sprintf(", {id: acme-2, file: %s/acme-2.secret}", dir)
			sealKeys = fmt.Sprintf("[{id: seal-1, file: %s/seal-1.key}, {id: seal-2, file: %s/seal-2.key}]", dir, dir)
		}
		return fmt.Sprintf(`cold_store: fs
cold_dir: %s/cold
hot_capacity: 64MiB
audit_log: %s
tls_cert: %s
tls_key: %s
tls_client_ca: %s
seal_keys: %s
tenants:
  - name: acme
    secrets: [%s]
    cert_names: [acme-engine]
    rights: ["*=rw"]
  - name: ops
    cert_names: [ops-console]
    rights: ["*=a"]
`, dir, auditPath, srvCert, srvKey, caFile, sealKeys, acmeSecrets)
	}
	cfgPath := filepath.Join(dir, "gpucached.yaml")
	os.WriteFile(cfgPath, []byte(config(false)), 0o600)

	d := startDaemon(t, bin, "--config", cfgPath, "--listen", "0.0.0.0:0", "--admin-listen", "127.0.0.1:0")
	_, port, _ := net.SplitHostPort(d.addr)
	addr := "127.0.0.1:" + port

	clientTLS := func(cert, key string) *tls.Config {
		tc, err := tlsconf.NewClient(tlsconf.ClientFiles{CAFile: caFile, CertFile: cert, KeyFile: key})
		if err != nil {
			t.Fatal(err)
		}
		return tc
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	acme, err := client.Dial(ctx, client.Config{Addr: addr, TLS: clientTLS(acmeCert, acmeKey), Conns: 1})
	if err != nil {
		t.Fatalf("mTLS dial: %v", err)
	}
	defer acme.Close()
	if acme.Tenant() != "acme" {
		t.Fatalf("session tenant %q, want acme (from the certificate)", acme.Tenant())
	}
	ns := client.Namespace{Tenant: "acme", TrustDomain: "e2e", ModelID: "m", ConfigRevision: "1", TokenizerRevision: "1",
		RoPE: "r", DType: "fp16", Quantization: "none", Layout: client.Layout{Format: "f", TPSize: 1, PPSize: 1,
			LayerCount: 1, KVHeads: 1, HeadDim: 1, BlockTokens: 4}}
	ids, err := client.Identities(ns, []uint32{1, 2, 3, 4})
	if err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, 64<<10)
	rand.Read(payload)
	blocks := client.BlocksOf(ids, [][]byte{payload})
	if st, err := acme.Put(ctx, ns, blocks); err != nil || st[0] != client.StatusStored {
		t.Fatalf("put over mTLS (stamped): %v %v", st, err)
	}
	get := func(c *client.Client) []byte {
		t.Helper()
		res := c.Get(ctx, ns, []client.BlockKey{blocks[0].Key})
		if !res[0].Hit {
			t.Fatalf("get: %v", res[0].Reason)
		}
		return res[0].Data
	}
	if !bytes.Equal(get(acme), payload) {
		t.Fatal("mTLS round trip differs")
	}
	// A certificate of another CA, even with a tenant's name, is refused.
	if c, err := client.Dial(ctx, client.Config{Addr: addr, TLS: clientTLS(evilCert, evilKey), Conns: 1, DialTimeout: 5 * time.Second}); err == nil {
		c.Close()
		t.Fatal("a client certificate of another CA was accepted")
	}
	// No certificate at all: refused too, even with the right secret.
	if c, err := client.Dial(ctx, client.Config{Addr: addr, TLS: clientTLS("", ""), Secret: secret1, Conns: 1, DialTimeout: 5 * time.Second}); err == nil {
		c.Close()
		t.Fatal("a client without a certificate was accepted under mTLS")
	}

	adminPost := func(cert, key string) (int, string) {
		t.Helper()
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: clientTLS(cert, key)}, Timeout: 30 * time.Second}
		defer hc.CloseIdleConnections()
		resp, err := hc.Post("https://"+d.admin+"/admin/reload", "text/plain", nil)
		if err != nil {
			t.Fatalf("admin reload: %v", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := adminPost(acmeCert, acmeKey); code != http.StatusForbidden {
		t.Fatalf("reload by a non-admin tenant: %d %s", code, body)
	}

	// Rotate: a new server certificate, a second tenant secret, a new
	// current seal key; SIGHUP applies them.
	newCert, newKey := ca.Issue(t, "gpucached", tlstest.ServerAuth(), tlstest.Serial(1002))
	tlstest.WriteFile(t, srvCert, newCert)
	tlstest.WriteFile(t, srvKey, newKey)
	os.WriteFile(cfgPath, []byte(config(true)), 0o600)
	reloaded := d.expect("configuration reloaded")
	d.cmd.Process.Signal(syscall.SIGHUP)
	select {
	case <-reloaded:
	case <-time.After(30 * time.Second):
		t.Fatal("no reload within 30s of SIGHUP")
	}
	// The established session carries on; a new handshake sees the new cert.
	if !bytes.Equal(get(acme), payload) {
		t.Fatal("established session broken by the rotation")
	}
	tc := clientTLS(acmeCert, acmeKey)
	conn, err := tls.Dial("tcp", addr, tc)
	if err != nil {
		t.Fatal(err)
	}
	if serial := conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64(); serial != 1002 {
		t.Fatalf("new handshake sees serial %d, want 1002", serial)
	}
	conn.Close()
	// The new secret authenticates (over TLS with a client cert, as mTLS
	// requires; the certificate then names the same tenant).
	acme2, err := client.Dial(ctx, client.Config{Addr: addr, TLS: tc, Secret: secret2, Conns: 1})
	if err != nil {
		t.Fatalf("dial with the rotated secret: %v", err)
	}
	if !bytes.Equal(get(acme2), payload) {
		t.Fatal("new session reads other bytes")
	}
	acme2.Close()
	// An admin may reload over the admin listener.
	reloaded = d.expect("configuration reloaded")
	if code, body := adminPost(opsCert, opsKey); code != http.StatusOK || !strings.Contains(body, "reloaded") {
		t.Fatalf("reload by the admin tenant: %d %s", code, body)
	}
	<-reloaded

	stopped := d.expect("gpucached stopped")
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-d.exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no exit within 30s of SIGTERM")
	}
	<-stopped

	log, err := os.ReadFile(auditPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"event":"rotation","kind":"seal_key","key_id":"seal-2"`,
		`"kind":"tenant_secret_added","key_id":"acme/acme-2"`, `"kind":"tls_certificate"`,
		`"event":"admin_action","actor":"SIGHUP","action":"reload"`, `"actor":"ops","action":"reload"`,
		`"event":"denied","tenant":"acme"`} {
		if !bytes.Contains(log, []byte(want)) {
			t.Errorf("audit log lacks %s", want)
		}
	}
	for _, s := range [][]byte{secret1, secret2, seal1, seal2} {
		if bytes.Contains(log, s) {
			t.Fatal("audit log contains a secret")
		}
	}
	if t.Failed() {
		t.Logf("audit log:\n%s", log)
	}
}
