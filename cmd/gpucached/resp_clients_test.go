package main

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The real-client tests: redis-cli and redis-py (Debian's python3-redis
// under /usr/bin/python3) against a gpucached process started from
// examples/lmcache/llama3-8b.yaml, the configuration docs/ENGINES.md shows.
// scripts/test installs the clients; with CI=true a missing client fails
// the test, elsewhere it skips with the install line.

const (
	exampleConfig = "../../examples/lmcache/llama3-8b.yaml"
	exampleModel  = "meta-llama/Meta-Llama-3-8B"
	exampleChunk  = 32 << 20 // the example profile's chunk_bytes
)

// needClient returns the path of a real client, or skips (fails on CI).
func needClient(t *testing.T, path string, probe ...string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds binaries and runs real clients")
	}
	err := exec.Command(path, probe...).Run()
	if err == nil {
		return path
	}
	msg := path + " is not usable (" + err.Error() + "); install it: apt-get install -y redis-tools redis-server python3-redis (scripts/test does)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// respTenants are the example's two tenants with fresh secrets.
type respTenants struct{ a, secretA, b, secretB string }

func newSecret(t *testing.T) string {
	t.Helper()
	b := make([]byte, 32)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// freeLoopbackPort returns a port nothing listens on at the moment.
func freeLoopbackPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// startExampleDaemon runs gpucached with docs/ENGINES.md's LMCache example
// config (free ports, a private cold directory) and returns its RESP
// address and tenants. The RESP listener is bound before the daemon logs
// "gpucached serving".
func startExampleDaemon(t *testing.T) (string, respTenants) {
	t.Helper()
	ten := respTenants{a: "team-a", secretA: newSecret(t), b: "team-b", secretB: newSecret(t)}
	t.Setenv("GPUCACHE_TEAM_A_SECRET", ten.secretA)
	t.Setenv("GPUCACHE_TEAM_B_SECRET", ten.secretB)
	bin := buildDaemon(t)
	respAddr := "127.0.0.1:" + freeLoopbackPort(t)
	startDaemon(t, bin, "--config", exampleConfig, "--resp-listen", respAddr,
		"--hot-capacity", "1GiB", "--cold-dir", filepath.Join(t.TempDir(), "cold"), "--audit-log", "off")
	return respAddr, ten
}

// mpKey is an LMCache MP-mode key: model@kv_rank(8 hex)@group@chunk_hash.
// kv_rank packs world size, global rank, local world size and local rank
// one byte each (lmcache/v1/distributed/api.py ComputeKVRank): 01000100 is
// world size 1, rank 0.
func mpKey(name string) string {
	h := sha256.Sum256([]byte(name))
	return exampleModel + "@01000100@0@" + hex.EncodeToString(h[:])
}

// TestRESPRedisCLIChunkRoundTrip: redis-cli stores a 32 MiB chunk (the
// Llama-3-8B profile's chunk_bytes) through gpucached's RESP endpoint,
// reads it back byte for byte, sees EXISTS 1, and the other tenant sees 0.
func TestRESPRedisCLIChunkRoundTrip(t *testing.T) {
	cli := needClient(t, "redis-cli", "--version")
	addr, ten := startExampleDaemon(t)
	host, port, _ := net.SplitHostPort(addr)
	run := func(user, secret string, stdin []byte, args ...string) []byte {
		t.Helper()
		return redisCLI(t, cli, []string{"-h", host, "-p", port}, user, secret, stdin, args...)
	}

	key := mpKey(t.Name())
	chunk := make([]byte, exampleChunk)
	rand.Read(chunk)
	if out := run(ten.a, ten.secretA, nil, "EXISTS", key); string(out) != "0\n" {
		t.Fatalf("EXISTS before SET: %q", out)
	}
	if out := run(ten.a, ten.secretA, chunk, "-x", "SET", key); string(out) != "OK\n" {
		t.Fatalf("SET of a 32 MiB chunk: %q", truncate(out))
	}
	if out := run(ten.a, ten.secretA, nil, "EXISTS", key); string(out) != "1\n" {
		t.Fatalf("EXISTS after SET: %q", out)
	}
	// --raw prints the bulk string's bytes and one newline.
	got := run(ten.a, ten.secretA, nil, "--raw", "GET", key)
	if len(got) != len(chunk)+1 || !bytes.Equal(got[:len(chunk)], chunk) || got[len(chunk)] != '\n' {
		t.Fatalf("GET returned %d bytes, want the %d stored", len(got)-1, len(chunk))
	}
	if out := run(ten.b, ten.secretB, nil, "EXISTS", key); string(out) != "0\n" {
		t.Fatalf("the other tenant's EXISTS: %q", out)
	}
	if out := run(ten.b, ten.secretB, nil, "GET", key); strings.TrimSpace(string(out)) != "" {
		t.Fatalf("the other tenant's GET: %q", truncate(out))
	}
	if out := run(ten.a, ten.secretA, nil, "GET", mpKey("never stored")); strings.TrimSpace(string(out)) != "" {
		t.Fatalf("GET of an absent key: %q", truncate(out))
	}
}

// redisCLI runs redis-cli with the connection flags conn, AUTH as user
// (the secret through REDISCLI_AUTH, off the command line) and stdin, and
// returns its output; a failure ends the test.
func redisCLI(t *testing.T, cli string, conn []string, user, secret string, stdin []byte, args ...string) []byte {
	t.Helper()
	c := exec.Command(cli, append(append(conn, "--user", user, "--no-auth-warning"), args...)...)
	c.Env = append(os.Environ(), "REDISCLI_AUTH="+secret)
	if stdin != nil {
		c.Stdin = bytes.NewReader(stdin)
	}
	var stderr bytes.Buffer
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		t.Fatalf("redis-cli %s: %v\n%s", args[0], err, stderr.String())
	}
	return out
}

func truncate(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "..."
	}
	return string(b)
}

// TestRESPRedisPy runs python/tests (stdlib unittest + redis-py) against
// gpucached: LMCache's in-process two-key layout with 32 MiB chunks, AUTH
// by URL, pipelining, and tenant isolation.
func TestRESPRedisPy(t *testing.T) {
	py := needClient(t, "/usr/bin/python3", "-c", "import redis")
	addr, ten := startExampleDaemon(t)
	c := exec.Command(py, "-m", "unittest", "-v", "test_lmcache_redis")
	c.Dir = "../../python/tests"
	c.Env = append(os.Environ(),
		"GPUCACHE_RESP_ADDR="+addr,
		"GPUCACHE_RESP_TENANT_A="+ten.a, "GPUCACHE_RESP_SECRET_A="+ten.secretA,
		"GPUCACHE_RESP_TENANT_B="+ten.b, "GPUCACHE_RESP_SECRET_B="+ten.secretB,
		"GPUCACHE_RESP_MODEL="+exampleModel, "GPUCACHE_RESP_CHUNK="+strconv.Itoa(exampleChunk),
		"PYTHONDONTWRITEBYTECODE=1")
	out, err := c.CombinedOutput()
	t.Logf("python3 -m unittest:\n%s", out)
	if err != nil {
		t.Fatalf("redis-py tests failed: %v", err)
	}
	if bytes.Contains(out, []byte("skipped")) {
		t.Fatal("redis-py tests skipped: the address did not reach them")
	}
}
