package tlsconf_test

import (
	"crypto/tls"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/gpucache/gpucache/internal/security/tlsconf"
	"github.com/gpucache/gpucache/internal/security/tlsconf/tlstest"
)

func TestReloadRotatesServerCert(t *testing.T) {
	p := newPKI(t)
	f := p.serverFiles(t, "srv", tlstest.Serial(1001))
	srv := mustServer(t, f)
	es := startEchoServer(t, srv.Config())
	cli := p.client(t, nil, "")

	established, err := dial(t, es.addr, cli)
	if err != nil {
		t.Fatal(err)
	}
	if err := echo(established, "before"); err != nil {
		t.Fatal(err)
	}
	es.next(t)

	// Rotate: rewrite both files with certificate B, then Reload.
	certPEM, keyPEM := p.ca.Issue(t, "gpucache-server", tlstest.Serial(1002))
	tlstest.WriteFiles(t, p.dir, "srv", certPEM, keyPEM)
	if err := srv.Reload(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(srv.Describe(), "serial=1002") {
		t.Fatalf("Describe after reload: %s", srv.Describe())
	}

	// The established connection is untouched and still works.
	if err := echo(established, "after"); err != nil {
		t.Fatalf("established connection broke on reload: %v", err)
	}
	if got := peerSerial(t, established.ConnectionState()); got != 1001 {
		t.Fatalf("established connection serial = %d, want 1001", got)
	}
	// A new connection sees certificate B.
	cs, err := roundTrip(t, es.addr, cli)
	if err != nil {
		t.Fatal(err)
	}
	if got := peerSerial(t, cs); got != 1002 {
		t.Fatalf("new connection serial = %d, want 1002", got)
	}
	if h := es.next(t); h.err != nil {
		t.Fatal(h.err)
	}
}

func TestReloadRotatesClientCA(t *testing.T) {
	for _, v := range tlsVersions {
		t.Run(v.name, func(t *testing.T) {
			p := newPKI(t)
			f := p.serverFiles(t, "srv")
			f.ClientCAFile = p.caFile
			srv := mustServer(t, f)
			es := startEchoServer(t, srv.Config())

			oldCA := p.ca
			newCA := tlstest.NewCA(t, "gpucache-test-ca-2")
			oldClient := withMax(p.client(t, oldCA, "old-tenant"), v.max)
			newClient := withMax(p.client(t, newCA, "new-tenant"), v.max)
			// The old client keeps a session cache: a ticket from before the
			// rotation must not let it back in afterwards.
			oldClient.ClientSessionCache = tls.NewLRUClientSessionCache(8)

			established, err := dial(t, es.addr, oldClient)
			if err != nil {
				t.Fatal(err)
			}
			if err := echo(established, "hello"); err != nil {
				t.Fatal(err)
			}
			es.next(t)
			if _, err := roundTrip(t, es.addr, newClient); err == nil {
				t.Fatal("client of the not-yet-trusted CA accepted")
			}
			es.next(t)

			// Replace the client CA bundle with the new CA only.
			tlstest.WriteFile(t, p.caFile, newCA.CertPEM())
			if err := srv.Reload(); err != nil {
				t.Fatal(err)
			}
			if d := srv.Describe(); !strings.Contains(d, `client_cas=["gpucache-test-ca-2"]`) {
				t.Fatalf("Describe after CA rotation: %s", d)
			}

			if _, err := roundTrip(t, es.addr, newClient); err != nil {
				t.Fatalf("client of the new CA rejected: %v", err)
			}
			if h := es.next(t); h.err != nil {
				t.Fatal(h.err)
			}
			cs, err := roundTrip(t, es.addr, oldClient)
			if err == nil {
				t.Fatalf("client of the removed CA accepted (resumed=%v)", cs.DidResume)
			}
			if h := es.next(t); h.err == nil {
				t.Fatal("server accepted a client of the removed CA")
			}
			// Established connections are not re-checked.
			if err := echo(established, "still here"); err != nil {
				t.Fatalf("established connection broke on CA rotation: %v", err)
			}
		})
	}
}

// TestReloadEndsSessionResumption checks that tickets issued before a
// Reload do not resume after it, so every connection after a Reload is
// authenticated with the new material.
func TestReloadEndsSessionResumption(t *testing.T) {
	for _, v := range tlsVersions {
		t.Run(v.name, func(t *testing.T) {
			p := newPKI(t)
			f := p.serverFiles(t, "srv", tlstest.Serial(1))
			f.ClientCAFile = p.caFile
			srv := mustServer(t, f)
			es := startEchoServer(t, srv.Config())
			cli := withMax(p.client(t, p.ca, "acme"), v.max)
			cli.ClientSessionCache = tls.NewLRUClientSessionCache(8)

			connect := func() tls.ConnectionState {
				t.Helper()
				cs, err := roundTrip(t, es.addr, cli)
				if err != nil {
					t.Fatal(err)
				}
				if h := es.next(t); h.err != nil {
					t.Fatal(h.err)
				}
				return cs
			}
			if cs := connect(); cs.DidResume {
				t.Fatal("first connection resumed")
			}
			if cs := connect(); !cs.DidResume {
				t.Fatal("second connection did not resume: the test does not exercise resumption")
			}
			certPEM, keyPEM := p.ca.Issue(t, "gpucache-server", tlstest.Serial(2))
			tlstest.WriteFiles(t, p.dir, "srv", certPEM, keyPEM)
			if err := srv.Reload(); err != nil {
				t.Fatal(err)
			}
			cs := connect()
			if cs.DidResume {
				t.Fatal("connection after Reload resumed a pre-Reload session")
			}
			if got := peerSerial(t, cs); got != 2 {
				t.Fatalf("serial after Reload = %d, want 2", got)
			}
			if cs := connect(); !cs.DidResume {
				t.Fatal("sessions issued after Reload do not resume")
			}
		})
	}
}

func TestReloadFailureKeepsServing(t *testing.T) {
	garbage := []byte("this is not PEM\n")
	cases := []struct {
		name string
		// break damages the files and returns the path the error must name.
		breakFiles func(t *testing.T, p *pki, f tlsconf.Files) string
		kind       error
	}{
		{"garbage certificate", func(t *testing.T, p *pki, f tlsconf.Files) string {
			return tlstest.WriteFile(t, f.CertFile, garbage)
		}, tlsconf.ErrNoPEM},
		{"garbage key", func(t *testing.T, p *pki, f tlsconf.Files) string {
			return tlstest.WriteFile(t, f.KeyFile, garbage)
		}, tlsconf.ErrNoPEM},
		{"key does not match certificate", func(t *testing.T, p *pki, f tlsconf.Files) string {
			certPEM, _ := p.ca.Issue(t, "gpucache-server", tlstest.Serial(999))
			tlstest.WriteFile(t, f.CertFile, certPEM) // new cert, old key
			return f.KeyFile
		}, tlsconf.ErrKeyMismatch},
		{"missing certificate", func(t *testing.T, p *pki, f tlsconf.Files) string {
			if err := os.Remove(f.CertFile); err != nil {
				t.Fatal(err)
			}
			return f.CertFile
		}, fs.ErrNotExist},
		{"missing key", func(t *testing.T, p *pki, f tlsconf.Files) string {
			if err := os.Remove(f.KeyFile); err != nil {
				t.Fatal(err)
			}
			return f.KeyFile
		}, fs.ErrNotExist},
		{"expired certificate", func(t *testing.T, p *pki, f tlsconf.Files) string {
			certPEM, keyPEM := p.ca.Issue(t, "gpucache-server", tlstest.Expired())
			tlstest.WriteFiles(t, p.dir, "srv", certPEM, keyPEM)
			return f.CertFile
		}, tlsconf.ErrExpired},
		{"garbage client CA bundle", func(t *testing.T, p *pki, f tlsconf.Files) string {
			return tlstest.WriteFile(t, f.ClientCAFile, garbage)
		}, tlsconf.ErrNoPEM},
		{"missing client CA bundle", func(t *testing.T, p *pki, f tlsconf.Files) string {
			if err := os.Remove(f.ClientCAFile); err != nil {
				t.Fatal(err)
			}
			return f.ClientCAFile
		}, fs.ErrNotExist},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newPKI(t)
			f := p.serverFiles(t, "srv", tlstest.Serial(500))
			f.ClientCAFile = p.caFile
			srv := mustServer(t, f)
			before := srv.Describe()
			es := startEchoServer(t, srv.Config())
			cli := p.client(t, p.ca, "acme")

			path := tc.breakFiles(t, p, f)
			err := srv.Reload()
			fileError(t, err, path, tc.kind)
			t.Logf("Reload error: %v", err)

			if d := srv.Describe(); d != before {
				t.Fatalf("Describe changed after failed Reload:\n%s\n%s", before, d)
			}
			cs, err := roundTrip(t, es.addr, cli)
			if err != nil {
				t.Fatalf("server stopped serving after failed Reload: %v", err)
			}
			if got := peerSerial(t, cs); got != 500 {
				t.Fatalf("serial after failed Reload = %d, want 500", got)
			}
			if h := es.next(t); h.err != nil {
				t.Fatal(h.err)
			}
		})
	}
}

// TestReloadConcurrent runs handshakes while reloading, for the race
// detector: every handshake must see complete material.
func TestReloadConcurrent(t *testing.T) {
	p := newPKI(t)
	f := p.serverFiles(t, "srv")
	f.ClientCAFile = p.caFile
	srv := mustServer(t, f)
	cfg := srv.Config()
	es := startEchoServer(t, cfg)
	cli := p.client(t, p.ca, "acme")

	const clients, perClient = 4, 8
	stop := make(chan struct{})
	reloaded := make(chan error, 1)
	go func() {
		var err error
		for n := 0; ; n++ {
			select {
			case <-stop:
				reloaded <- err
				return
			default:
			}
			if e := srv.Reload(); e != nil && err == nil {
				err = e
			}
			_ = srv.Describe()
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, clients*perClient)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perClient {
				if _, err := roundTrip(t, es.addr, cli); err != nil {
					errs <- err
				}
			}
		}()
	}
	for range clients * perClient {
		if h := es.next(t); h.err != nil {
			t.Errorf("server handshake: %v", h.err)
		}
	}
	wg.Wait()
	close(stop)
	if err := <-reloaded; err != nil {
		t.Fatalf("Reload: %v", err)
	}
	close(errs)
	for err := range errs {
		t.Errorf("client: %v", err)
	}
}

// TestReloadAfterFailure: a Reload after a failed one picks up fixed files.
func TestReloadAfterFailure(t *testing.T) {
	p := newPKI(t)
	f := p.serverFiles(t, "srv", tlstest.Serial(1))
	srv := mustServer(t, f)
	tlstest.WriteFile(t, f.KeyFile, []byte("junk"))
	if err := srv.Reload(); err == nil {
		t.Fatal("Reload with a junk key succeeded")
	}
	certPEM, keyPEM := p.ca.Issue(t, "gpucache-server", tlstest.Serial(2))
	tlstest.WriteFiles(t, filepath.Dir(f.CertFile), "srv", certPEM, keyPEM)
	if err := srv.Reload(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(srv.Describe(), "serial=2 ") {
		t.Fatalf("Describe = %s", srv.Describe())
	}
	if err := srv.Reload(); err != nil {
		t.Fatalf("repeat Reload: %v", err)
	}
}
