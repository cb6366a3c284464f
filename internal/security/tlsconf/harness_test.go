package tlsconf_test

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gpucache/gpucache/internal/security/tlsconf"
	"github.com/gpucache/gpucache/internal/security/tlsconf/tlstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// ioTimeout bounds every network operation so a broken test fails instead
// of hanging; it is a deadline, never a synchronisation device.
const ioTimeout = 10 * time.Second

// handshake is what the server side saw for one accepted connection.
type handshake struct {
	state tls.ConnectionState
	err   error
}

// echoServer accepts TLS connections on 127.0.0.1, reports each server-side
// handshake result on results, and echoes bytes on successful connections.
type echoServer struct {
	addr    string
	results chan handshake
}

func startEchoServer(t *testing.T, cfg *tls.Config) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &echoServer{addr: ln.Addr().String(), results: make(chan handshake, 64)}
	done := make(chan struct{})
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		conns  = map[net.Conn]struct{}{}
		closed bool
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			if closed {
				mu.Unlock()
				c.Close()
				return
			}
			conns[c] = struct{}{}
			wg.Add(1)
			mu.Unlock()
			go func() {
				defer wg.Done()
				defer func() {
					c.Close()
					mu.Lock()
					delete(conns, c)
					mu.Unlock()
				}()
				tc := tls.Server(c, cfg)
				_ = c.SetDeadline(time.Now().Add(ioTimeout))
				err := tc.Handshake()
				select {
				case s.results <- handshake{state: tc.ConnectionState(), err: err}:
				case <-done:
					return
				}
				if err != nil {
					return
				}
				_ = c.SetDeadline(time.Time{})
				_, _ = io.Copy(tc, tc)
			}()
		}
	}()
	t.Cleanup(func() {
		close(done)
		ln.Close()
		mu.Lock()
		closed = true
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return s
}

// next returns the server side's result for the next accepted connection.
func (s *echoServer) next(t *testing.T) handshake {
	t.Helper()
	select {
	case h := <-s.results:
		return h
	case <-time.After(ioTimeout):
		t.Fatal("timed out waiting for the server-side handshake")
		return handshake{}
	}
}

// dial opens a client connection and completes the client-side handshake.
func dial(t *testing.T, addr string, cfg *tls.Config) (*tls.Conn, error) {
	t.Helper()
	d := &net.Dialer{Timeout: ioTimeout}
	c, err := tls.DialWithDialer(d, "tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { c.Close() })
	return c, nil
}

// echo writes msg and reads it back. In TLS 1.3 a client learns that the
// server rejected its certificate only here, not from Handshake.
func echo(c *tls.Conn, msg string) error {
	if err := c.SetDeadline(time.Now().Add(ioTimeout)); err != nil {
		return err
	}
	if _, err := io.WriteString(c, msg); err != nil {
		return err
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	if !bytes.Equal(buf, []byte(msg)) {
		return fmt.Errorf("echo: got %q, want %q", buf, msg)
	}
	return nil
}

// roundTrip dials, handshakes and exchanges one message; it returns the
// client's view of the connection and the first error.
func roundTrip(t *testing.T, addr string, cfg *tls.Config) (tls.ConnectionState, error) {
	t.Helper()
	c, err := dial(t, addr, cfg)
	if err != nil {
		return tls.ConnectionState{}, err
	}
	defer c.Close()
	if err := echo(c, "ping"); err != nil {
		return c.ConnectionState(), err
	}
	return c.ConnectionState(), nil
}

// pki is a test PKI: a CA, an unrelated second CA, and file paths in dir.
type pki struct {
	dir    string
	ca     *tlstest.CA
	other  *tlstest.CA
	caFile string // bundle holding ca
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	p := &pki{dir: t.TempDir(), ca: tlstest.NewCA(t, "gpucache-test-ca"), other: tlstest.NewCA(t, "unrelated-ca")}
	p.caFile = tlstest.WriteFile(t, filepath.Join(p.dir, "ca.pem"), p.ca.CertPEM())
	return p
}

// server issues a server certificate from ca (with opts) into name.crt/.key.
func (p *pki) serverFiles(t *testing.T, name string, opts ...tlstest.Option) tlsconf.Files {
	t.Helper()
	cert, key := p.ca.IssueFiles(t, p.dir, name, "gpucache-server", opts...)
	return tlsconf.Files{CertFile: cert, KeyFile: key}
}

// client builds a client config trusting caFile for the server, with a
// client certificate from issuer (nil: no client certificate).
func (p *pki) client(t *testing.T, issuer *tlstest.CA, cn string, opts ...tlstest.Option) *tls.Config {
	t.Helper()
	f := tlsconf.ClientFiles{CAFile: p.caFile, ServerName: "localhost"}
	if issuer != nil {
		f.CertFile, f.KeyFile = issuer.IssueFiles(t, p.dir, "client-"+cn, cn, append([]tlstest.Option{tlstest.ClientAuth()}, opts...)...)
	}
	cfg, err := tlsconf.NewClient(f)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func mustServer(t *testing.T, f tlsconf.Files) *tlsconf.Server {
	t.Helper()
	s, err := tlsconf.NewServer(f)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// peerSerial is the serial of the server leaf a client saw.
func peerSerial(t *testing.T, cs tls.ConnectionState) int64 {
	t.Helper()
	if len(cs.PeerCertificates) == 0 {
		t.Fatal("no peer certificates")
	}
	return cs.PeerCertificates[0].SerialNumber.Int64()
}

func fileError(t *testing.T, err error, wantPath string, kind error) *tlsconf.FileError {
	t.Helper()
	if err == nil {
		t.Fatal("expected an error")
	}
	var fe *tlsconf.FileError
	if !errors.As(err, &fe) {
		t.Fatalf("error %v (%T) is not a *FileError", err, err)
	}
	if fe.Path != wantPath {
		t.Fatalf("FileError.Path = %q, want %q (error: %v)", fe.Path, wantPath, err)
	}
	if !bytes.Contains([]byte(err.Error()), []byte(wantPath)) {
		t.Fatalf("error text does not name %q: %v", wantPath, err)
	}
	if kind != nil && !errors.Is(err, kind) {
		t.Fatalf("error is not %v: %v", kind, err)
	}
	return fe
}
