package doctor

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpucache/gpucache/internal/cold/s3store/s3test"
	"github.com/gpucache/gpucache/internal/config"
	"github.com/gpucache/gpucache/internal/control/etcdmember/etcdtest"
	"github.com/gpucache/gpucache/internal/security/tlsconf/tlstest"
)

// closedAddr returns a loopback address nothing listens on: a port that
// was bound and released.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

func s3Config(cfg *config.Config, endpoint, access, secret string) {
	cfg.ColdStore = "s3"
	cfg.S3Endpoint, cfg.S3Bucket = endpoint, s3test.Bucket
	cfg.S3AccessKey, cfg.S3SecretKey = access, secret
}

// TestUnreachableS3AndEtcd: a node configured with S3 and two etcd
// endpoints on closed loopback ports. S3 is WARN (gpucached starts
// degraded), each etcd endpoint is FAIL (no endpoint answers: the node
// cannot join), the clock is WARN (nothing to compare with), and the
// report fails.
func TestUnreachableS3AndEtcd(t *testing.T) {
	cfg := config.Default()
	s3ep := "http://" + closedAddr(t)
	s3Config(&cfg, s3ep, "access", "secret")
	e1, e2 := "http://"+closedAddr(t), "http://"+closedAddr(t)
	cfg.EtcdEndpoints = e1 + "," + e2
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	r := Run(context.Background(), cfg, nil, Env{Timeout: 5 * time.Second})
	s3 := must(t, r, "s3", s3ep)
	if s3.Status != Warn || !strings.Contains(s3.Detail, "unreachable") || !strings.Contains(s3.Detail, "start degraded") || s3.LatencyNS != 0 {
		t.Errorf("s3: %+v", s3)
	}
	for _, ep := range []string{e1, e2} {
		c := must(t, r, "etcd", ep)
		if c.Status != Fail || !strings.Contains(c.Detail, "unreachable") || !strings.Contains(c.Detail, "cannot join") || c.LatencyNS != 0 {
			t.Errorf("etcd %s: %+v", ep, c)
		}
	}
	clk := must(t, r, "clock_etcd", "")
	if clk.Status != Warn || !strings.Contains(clk.Detail, "not compared") || clk.SkewMinNS != nil {
		t.Errorf("clock: %+v", clk)
	}
	if !r.Failed() {
		t.Error("no etcd endpoint answers, but the report does not fail")
	}
	// S3 without credentials: gpucached refuses to start.
	cfg.S3AccessKey, cfg.S3SecretKey = "", ""
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	r = Run(context.Background(), cfg, nil, Env{Timeout: 5 * time.Second})
	if c := must(t, r, "s3", s3ep); c.Status != Fail || !strings.Contains(c.Detail, "no credentials") {
		t.Errorf("s3 without credentials: %+v", c)
	}
}

// TestReachableS3AndEtcd: a real etcd (embedded) and a real S3
// (versitygw). Both are OK with a measured latency, the clock against
// etcd is OK with bounds around zero, and one endpoint down among
// reachable ones is only WARN.
func TestReachableS3AndEtcd(t *testing.T) {
	etcd := etcdtest.Start(t)
	ep, ak, sk := s3test.Start(t)
	cfg := config.Default()
	s3Config(&cfg, ep, ak, sk)
	down := "http://" + closedAddr(t)
	cfg.EtcdEndpoints = etcd.Endpoint + "," + down
	r := Run(context.Background(), cfg, nil, Env{Timeout: 10 * time.Second})
	if c := must(t, r, "s3", ep); c.Status != OK || c.LatencyNS <= 0 || !strings.Contains(c.Detail, "answered HeadBucket in") {
		t.Errorf("s3: %+v", c)
	}
	c := must(t, r, "etcd", etcd.Endpoint)
	if c.Status != OK || c.LatencyNS <= 0 || !strings.Contains(c.Detail, "etcd server 3.") {
		t.Errorf("etcd: %+v", c)
	}
	if c := must(t, r, "etcd", down); c.Status != Warn || !strings.Contains(c.Detail, "the other endpoints answer") {
		t.Errorf("etcd down: %+v", c)
	}
	clk := must(t, r, "clock_etcd", etcd.Endpoint)
	if clk.Status != OK || clk.SkewMinNS == nil || *clk.SkewMinNS > 0 || *clk.SkewMaxNS < 0 {
		t.Errorf("clock: %+v", clk)
	}
	if r.Failed() {
		t.Errorf("report fails: %+v", r.Checks)
	}
}

// fakeEtcd answers /version as etcd does, with the Date header date.
func fakeEtcd(t *testing.T, date time.Time) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/version" {
			http.NotFound(w, req)
			return
		}
		w.Header().Set("Date", date.UTC().Format(http.TimeFormat))
		w.Write([]byte(`{"etcdserver":"3.6.16","etcdcluster":"3.6.0"}`))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestClockAgainstEtcd: the offset's bounds follow from the Date header
// (1 s resolution) and the local clock around the request; here the
// local clock is fixed, so the bounds are exact.
func TestClockAgainstEtcd(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	env := Env{Now: func() time.Time { return now }, Timeout: 10 * time.Second}
	for _, tc := range []struct {
		name     string
		offset   time.Duration
		maxFut   time.Duration
		want     Status
		contains string
	}{
		{"in sync", 0, 5 * time.Second, OK, "in [0s, 1s]"},
		{"an hour ahead", time.Hour, 5 * time.Second, Fail, "outside replay_max_future 5s"},
		{"an hour behind", -time.Hour, 5 * time.Second, Fail, "in [-1h0m0s, -59m59s]"},
		{"too coarse to tell", 0, 500 * time.Millisecond, Warn, "cannot show"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.ReplayMaxFuture = tc.maxFut
			cfg.EtcdEndpoints = fakeEtcd(t, now.Add(tc.offset))
			r := Run(context.Background(), cfg, nil, env)
			if c := must(t, r, "etcd", cfg.EtcdEndpoints); c.Status != OK {
				t.Errorf("etcd: %+v", c)
			}
			c := must(t, r, "clock_etcd", "")
			if c.Status != tc.want || !strings.Contains(c.Detail, tc.contains) {
				t.Errorf("clock: %s %q, want %s containing %q", c.Status, c.Detail, tc.want, tc.contains)
			}
			lo, hi := tc.offset, tc.offset+time.Second
			if c.SkewMinNS == nil || *c.SkewMinNS != lo.Nanoseconds() || *c.SkewMaxNS != hi.Nanoseconds() {
				t.Errorf("bounds %v %v, want %v %v", c.SkewMinNS, c.SkewMaxNS, lo, hi)
			}
		})
	}
	// An HTTP server that is not etcd: FAIL, and its Date still bounds the
	// clock.
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	cfg := config.Default()
	cfg.EtcdEndpoints = srv.URL
	r := Run(context.Background(), cfg, nil, Env{Timeout: 10 * time.Second})
	if c := must(t, r, "etcd", srv.URL); c.Status != Fail || !strings.Contains(c.Detail, "HTTP 404") {
		t.Errorf("not etcd: %+v", c)
	}
}

// TestCertificates: the served certificate and the client CA bundle are
// FAIL once expired (or not yet valid), WARN within 14 days of expiry or
// when a bundle holds an expired CA beside valid ones, OK otherwise.
func TestCertificates(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	env := Env{Now: func() time.Time { return now }}
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "doctor-ca", tlstest.NotBefore(now.Add(-time.Hour)), tlstest.NotAfter(now.Add(365*24*time.Hour)))
	issue := func(name string, notBefore, notAfter time.Time) string {
		crt, _ := ca.Issue(t, name, tlstest.ServerAuth(), tlstest.NotBefore(notBefore), tlstest.NotAfter(notAfter))
		return tlstest.WriteFile(t, filepath.Join(dir, name+".pem"), append(crt, ca.CertPEM()...))
	}
	old := tlstest.NewCA(t, "old-ca", tlstest.NotBefore(now.Add(-48*time.Hour)), tlstest.NotAfter(now.Add(-24*time.Hour)))
	for _, tc := range []struct {
		name, path string
		leaf       bool
		want       Status
		contains   string
	}{
		{"valid", issue("valid", now.Add(-time.Hour), now.Add(90*24*time.Hour)), true, OK, `"valid" expires 2027-03-01T10:00:00Z, in 90 days`},
		{"expiring", issue("expiring", now.Add(-time.Hour), now.Add(5*24*time.Hour)), true, Warn, "in 5 days: renew it"},
		{"expired", issue("expired", now.Add(-48*time.Hour), now.Add(-time.Hour)), true, Fail, `"expired" expired 2026-12-01T09:00:00Z`},
		{"not yet", issue("notyet", now.Add(time.Hour), now.Add(48*time.Hour)), true, Fail, "not valid before"},
		{"ca bundle", tlstest.WriteFile(t, filepath.Join(dir, "ca.pem"), ca.CertPEM()), false, OK, `"doctor-ca" expires`},
		{"bundle with an expired CA", tlstest.WriteFile(t, filepath.Join(dir, "mixed.pem"), append(old.CertPEM(), ca.CertPEM()...)), false, Warn, `"old-ca" expired`},
		{"all expired", tlstest.WriteFile(t, filepath.Join(dir, "old.pem"), old.CertPEM()), false, Fail, "handshakes with it fail"},
		{"not PEM", tlstest.WriteFile(t, filepath.Join(dir, "junk.pem"), []byte("junk")), true, Fail, "no PEM CERTIFICATE"},
		{"missing", filepath.Join(dir, "missing.pem"), true, Fail, "cannot read"},
		{"unset", "", true, Absent, "not configured"},
	} {
		c := certCheck(env.withDefaults(), "tls_cert", tc.path, tc.leaf)
		if c.Status != tc.want || !strings.Contains(c.Detail, tc.contains) {
			t.Errorf("%s: %s %q, want %s containing %q", tc.name, c.Status, c.Detail, tc.want, tc.contains)
		}
	}
	// Through Run, with the config's fields.
	cfg := config.Default()
	cfg.TLSCert = issue("served", now.Add(-time.Hour), now.Add(-time.Minute))
	cfg.TLSClientCA = filepath.Join(dir, "ca.pem")
	r := Run(context.Background(), cfg, nil, env)
	expect(t, r, "tls_cert", Fail, "expired")
	expect(t, r, "tls_client_ca", OK, "doctor-ca")
	expect(t, r, "etcd_cert", Absent, "not configured")
	if !r.Failed() {
		t.Error("an expired tls_cert does not fail the report")
	}
}
