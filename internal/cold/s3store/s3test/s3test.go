// Package s3test runs a real S3 server, versitygw with its posix backend,
// for tests. Each Start launches a private server on a free loopback port
// with a fresh data directory, random credentials and one empty bucket
// (Bucket), and stops it when the test ends. NewServer gives a server a
// test can stop and start again on the same port and data (an outage).
//
// The binary is found, in order, at $GPUCACHE_VERSITYGW, at
// <module root>/.cache/bin/versitygw (what `scripts/s3-server install`
// builds), or as versitygw in PATH. Without one, Start skips the test, or
// fails it when $CI is set, so CI cannot pass by skipping.
package s3test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/gpucache/gpucache/internal/cold/s3store"
)

// Bucket is the bucket every Start creates.
const Bucket = "gpucache-test"

// readyTimeout bounds the wait for the server to answer ListBuckets.
const readyTimeout = 20 * time.Second

const missingMsg = "versitygw not found: run scripts/s3-server install (or set GPUCACHE_VERSITYGW to the binary)"

// Binary returns the versitygw binary's path, or "" if none is found.
func Binary() (string, error) {
	if p := os.Getenv("GPUCACHE_VERSITYGW"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("GPUCACHE_VERSITYGW=%s: %w", p, err)
		}
		return p, nil
	}
	if root, err := moduleRoot(); err == nil {
		p := filepath.Join(root, ".cache", "bin", "versitygw")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p, nil
	}
	return "", nil
}

// moduleRoot walks up from the working directory (a test's package
// directory) to the directory holding go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// Start launches versitygw and returns its endpoint and root credentials.
// The server, with an empty bucket named Bucket, lives until t ends.
func Start(t testing.TB) (endpoint, accessKey, secretKey string) {
	t.Helper()
	s := NewServer(t)
	s.Start(t)
	return s.Endpoint, s.AccessKey, s.SecretKey
}

// Server is a versitygw that a test can stop and start again: same
// address, credentials and data, so a client sees an outage and then the
// same store back.
type Server struct {
	Endpoint             string // http://127.0.0.1:port
	AccessKey, SecretKey string

	bin, addr, data, logPath string
	cmd                      *exec.Cmd
	exited                   chan struct{} // closed when cmd has exited; nil while stopped
}

// NewServer prepares a server on a free loopback port without starting
// it: until Start, its endpoint refuses connections. It is stopped when t
// ends. Without a versitygw binary the test is skipped (failed under CI).
func NewServer(t testing.TB) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	if bin == "" {
		if os.Getenv("CI") != "" {
			t.Fatal(missingMsg)
		}
		t.Skip("NOT_RUN: " + missingMsg)
	}
	dir := t.TempDir()
	s := &Server{bin: bin, data: filepath.Join(dir, "data"), logPath: filepath.Join(dir, "versitygw.log"), addr: freeAddr(t)}
	if err := os.Mkdir(s.data, 0o755); err != nil {
		t.Fatal(err)
	}
	s.AccessKey, s.SecretKey = "gpucache-"+rand.Text()[:12], rand.Text()
	s.Endpoint = "http://" + s.addr
	t.Cleanup(func() {
		s.Stop(t)
		if t.Failed() {
			out, _ := os.ReadFile(s.logPath)
			t.Logf("versitygw log (%s):\n%s", s.addr, out)
		}
	})
	return s
}

// Start starts the server (again) and waits until it answers, with the
// bucket Bucket in place.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	if s.exited != nil {
		t.Fatal("s3test: Start of a running server")
	}
	logFile, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(s.bin,
		"--access", s.AccessKey,
		"--secret", s.SecretKey,
		"--port", s.addr,
		"--quiet", // no per-request lines on stdout
		"posix", s.data)
	// Files, not pipes: exec then needs no copying goroutines.
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		t.Fatalf("start %s: %v", s.bin, err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		logFile.Close()
		close(exited)
	}()
	s.cmd, s.exited = cmd, exited
	waitReady(t, s.Endpoint, s.AccessKey, s.SecretKey, exited, s.logPath)
}

// Stop kills the server and waits for it to exit; its data stays for the
// next Start. Stopping a stopped server does nothing.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	if s.exited == nil {
		return
	}
	s.cmd.Process.Kill()
	<-s.exited
	s.cmd, s.exited = nil, nil
}

// NewStore starts a server and returns a Store on its bucket under prefix
// ("" or ending in "/"), closed when t ends. Retries are off so faults show.
func NewStore(t testing.TB, prefix string) *s3store.Store {
	t.Helper()
	endpoint, ak, sk := Start(t)
	cfg := s3store.Default()
	cfg.Endpoint, cfg.Bucket, cfg.Prefix = endpoint, Bucket, prefix
	cfg.AccessKey, cfg.SecretKey = ak, sk
	cfg.Timeout, cfg.MaxAttempts = 10*time.Second, 1
	s, err := s3store.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// freeAddr returns a loopback address whose port was free a moment ago.
// Another process could take it before versitygw binds it; waitReady then
// reports versitygw's exit.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// waitReady polls until the server answers ListBuckets, then creates Bucket.
func waitReady(t testing.TB, endpoint, ak, sk string, exited <-chan struct{}, logPath string) {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	defer tr.CloseIdleConnections()
	client := s3.New(s3.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		UsePathStyle: true,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: ak, SecretAccessKey: sk}, nil
		}),
		HTTPClient:       &http.Client{Transport: tr},
		RetryMaxAttempts: 1,
	})
	ctx := t.Context()
	deadline := time.Now().Add(readyTimeout)
	backoff := 10 * time.Millisecond
	var lastErr error
	for {
		attempt, cancel := context.WithTimeout(ctx, time.Second)
		_, lastErr = client.ListBuckets(attempt, &s3.ListBucketsInput{})
		cancel()
		if lastErr == nil {
			break
		}
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(logPath)
			t.Fatalf("versitygw at %s not ready after %v: %v\nlog:\n%s", endpoint, readyTimeout, lastErr, out)
		}
		// The one timed wait in our tests: an external process is starting
		// and offers nothing to wait on but its port. Bounded by
		// readyTimeout, with a short capped backoff.
		select {
		case <-exited:
			out, _ := os.ReadFile(logPath)
			t.Fatalf("versitygw exited during startup (%v)\nlog:\n%s", lastErr, out)
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 250*time.Millisecond)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := client.CreateBucket(cctx, &s3.CreateBucketInput{Bucket: aws.String(Bucket)})
	var owned *types.BucketAlreadyOwnedByYou
	var exists *types.BucketAlreadyExists
	if err != nil && !errors.As(err, &owned) && !errors.As(err, &exists) { // a restarted server has it already
		t.Fatalf("create bucket %s: %v", Bucket, err)
	}
}
