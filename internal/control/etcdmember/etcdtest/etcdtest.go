// Package etcdtest starts a real, single-member etcd for tests: the
// embedded server of go.etcd.io/etcd/server/v3/embed, on 127.0.0.1 ports,
// with its data in a test temp dir. Membership, daemon and cluster tests
// use it so that every etcd code path runs against real etcd, with nothing
// to install on a fresh machine.
package etcdtest

import (
	"context"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// ReadyTimeout bounds the wait for the server to be ready; generous for -race.
const ReadyTimeout = 30 * time.Second

// freeURL reserves a free 127.0.0.1 port by listening on :0 and releasing
// it for etcd to bind.
func freeURL(t testing.TB) url.URL {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return url.URL{Scheme: "http", Host: addr}
}

// Server is a running embedded etcd.
type Server struct {
	Endpoint string // client URL, e.g. http://127.0.0.1:34567
	e        *embed.Etcd
	once     sync.Once
}

// TLS makes the server speak https on its client URL with this
// certificate, requiring client certificates from ClientCA when it is set.
type TLS struct {
	CertFile, KeyFile string
	ClientCA          string // "": no client certificate required
}

// Start starts a single-member embedded etcd and returns it; it is closed
// at test end.
func Start(t testing.TB) *Server { return StartWith(t, nil) }

// StartWith is Start with an https client URL when tls is not nil.
func StartWith(t testing.TB, tls *TLS) *Server {
	t.Helper()
	var lastErr error
	for range 3 { // a reserved port may be taken in between: retry
		cfg := embed.NewConfig()
		cfg.Dir = t.TempDir()
		cu, pu := freeURL(t), freeURL(t)
		if tls != nil {
			cu.Scheme = "https"
			cfg.ClientTLSInfo = transport.TLSInfo{CertFile: tls.CertFile, KeyFile: tls.KeyFile,
				TrustedCAFile: tls.ClientCA, ClientCertAuth: tls.ClientCA != ""}
		}
		cfg.ListenClientUrls = []url.URL{cu}
		cfg.AdvertiseClientUrls = []url.URL{cu}
		cfg.ListenPeerUrls = []url.URL{pu}
		cfg.AdvertisePeerUrls = []url.URL{pu}
		cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
		// Passwords are hashed at bcrypt's minimum cost (bcrypt.MinCost):
		// the default cost makes each authentication cost seconds of CPU
		// under -race on a loaded machine, for nothing a test checks.
		cfg.BcryptCost = 4
		e, err := embed.StartEtcd(cfg)
		if err != nil {
			lastErr = err
			continue
		}
		select {
		case <-e.Server.ReadyNotify():
		case <-time.After(ReadyTimeout):
			e.Close()
			t.Fatal("embedded etcd not ready")
		}
		s := &Server{Endpoint: cu.String(), e: e}
		t.Cleanup(s.Close)
		return s
	}
	t.Fatalf("start embedded etcd: %v", lastErr)
	return nil
}

// Close stops the server (idempotent): clients see it as unreachable.
func (s *Server) Close() { s.once.Do(s.e.Close) }

// EnableAuth turns on etcd authentication with a root user of the given
// password, through cli (which must be able to reach s before auth is on).
func EnableAuth(t testing.TB, cli *clientv3.Client, password string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ReadyTimeout)
	defer cancel()
	if _, err := cli.UserAdd(ctx, "root", password); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.UserGrantRole(ctx, "root", "root"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.AuthEnable(ctx); err != nil {
		t.Fatal(err)
	}
}

// Client returns a client of s, closed at test end.
func (s *Server) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{s.Endpoint},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Proxy forwards TCP connections to s, each one only once hold is closed:
// until then a client's bytes wait unread and etcd's answers do not come,
// as when etcd is busy (hashing a password under load, say) or the network
// is slow. It returns the proxy's endpoint, with s's scheme; the proxy and
// its connections are closed at test end.
func (s *Server) Proxy(t testing.TB, hold <-chan struct{}) string {
	t.Helper()
	u, err := url.Parse(s.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		conns  []net.Conn // guarded by mu; closed at test end
		closed bool       // guarded by mu
		wg     sync.WaitGroup
	)
	// track keeps c to be closed at test end, or closes it now if the
	// test has ended.
	track := func(c net.Conn) bool {
		mu.Lock()
		defer mu.Unlock()
		if closed {
			c.Close()
			return false
		}
		conns = append(conns, c)
		return true
	}
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			if !track(c) {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				select {
				case <-hold:
				case <-stop:
					return // c is closed at test end
				}
				up, err := net.Dial("tcp", target)
				if err != nil {
					c.Close()
					return
				}
				if !track(up) {
					return
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					io.Copy(up, c)
					up.Close()
				}()
				io.Copy(c, up)
				c.Close()
			}()
		}
	}()
	t.Cleanup(func() {
		close(stop)
		l.Close()
		mu.Lock()
		closed = true
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	u.Host = l.Addr().String()
	return u.String()
}
