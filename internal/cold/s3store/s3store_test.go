package s3store_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/cold/coldtest"
	"github.com/gpucache/gpucache/internal/cold/s3store"
	"github.com/gpucache/gpucache/internal/cold/s3store/s3test"
)

// Every Store in these tests is Closed, which drops its idle connections, so
// no net/http persistConn goroutine outlives a test and goleak needs no
// ignore list.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func config(endpoint, ak, sk string) s3store.Config {
	cfg := s3store.Default()
	cfg.Endpoint, cfg.Bucket = endpoint, s3test.Bucket
	cfg.AccessKey, cfg.SecretKey = ak, sk
	cfg.Timeout, cfg.MaxAttempts = 10*time.Second, 1
	return cfg
}

func open(t *testing.T, cfg s3store.Config) *s3store.Store {
	t.Helper()
	s, err := s3store.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// prefixFor gives each subtest its own key space in the shared bucket.
func prefixFor(t *testing.T) string {
	return "t/" + strings.NewReplacer(" ", "_", "#", "_").Replace(t.Name()) + "/"
}

// TestStoreSuite runs the shared suite against a real versitygw: one server,
// one key prefix per subtest.
func TestStoreSuite(t *testing.T) {
	endpoint, ak, sk := s3test.Start(t)
	coldtest.RunStoreSuite(t, func(t *testing.T) cold.Store {
		cfg := config(endpoint, ak, sk)
		cfg.Prefix = prefixFor(t)
		return open(t, cfg)
	})
}

// TestListSmallPages crosses many ListObjectsV2 pages with few keys.
func TestListSmallPages(t *testing.T) {
	endpoint, ak, sk := s3test.Start(t)
	cfg := config(endpoint, ak, sk)
	cfg.ListPageSize = 7
	small := open(t, cfg)
	ctx := t.Context()
	var want []string
	for i := range 30 {
		k := fmt.Sprintf("p/%03d", i)
		want = append(want, k)
		if err := small.Put(ctx, k, []byte{byte(i)}, cold.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	if err := small.List(ctx, "p/", func(info cold.ObjectInfo) error {
		got = append(got, info.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("List over 7-key pages = %q, want %q", got, want)
	}
}

// TestConditionalPut checks the real server honours If-None-Match and
// that the emulated mode (Head then Put) gives the same sequential answers.
func TestConditionalPut(t *testing.T) {
	endpoint, ak, sk := s3test.Start(t)
	ctx := t.Context()
	for _, emulate := range []bool{false, true} {
		cfg := config(endpoint, ak, sk)
		cfg.EmulateIfNoneMatch = emulate
		cfg.Prefix = map[bool]string{false: "native/", true: "emulated/"}[emulate]
		s := open(t, cfg)
		if err := s.Put(ctx, "k", []byte("first"), cold.PutOptions{IfNoneMatch: true}); err != nil {
			t.Fatalf("emulate=%v: first conditional Put: %v", emulate, err)
		}
		err := s.Put(ctx, "k", []byte("second!"), cold.PutOptions{IfNoneMatch: true})
		if !errors.Is(err, cold.ErrExists) {
			t.Fatalf("emulate=%v: second conditional Put: %v, want ErrExists", emulate, err)
		}
		dst := make([]byte, 5)
		if err := s.RangeGet(ctx, "k", 0, dst); err != nil || string(dst) != "first" {
			t.Fatalf("emulate=%v: object = %q, %v; want first", emulate, dst, err)
		}
		// A large body: the server may refuse the second Put before it has
		// read the body and drop the connection (versitygw does), which the
		// client sees as a transport error, not a 412. It must still be
		// ErrExists: a retried write of a content-addressed pack whose
		// first attempt landed would otherwise fail for good.
		big := bytes.Repeat([]byte("kv"), 8<<20)
		if err := s.Put(ctx, "big", big, cold.PutOptions{IfNoneMatch: true}); err != nil {
			t.Fatalf("emulate=%v: first large conditional Put: %v", emulate, err)
		}
		for range 3 {
			if err := s.Put(ctx, "big", big, cold.PutOptions{IfNoneMatch: true}); !errors.Is(err, cold.ErrExists) {
				t.Fatalf("emulate=%v: second large conditional Put: %v, want ErrExists", emulate, err)
			}
		}
	}
}

func TestUnreachableEndpoint(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "http://" + l.Addr().String()
	l.Close() // nothing listens here now: connection refused
	cfg := config(endpoint, "ak", "sk")
	cfg.Timeout = 2 * time.Second
	s := open(t, cfg)
	ctx := t.Context()
	start := time.Now()
	_, headErr := s.Head(ctx, "k")
	errs := map[string]error{
		"Head":     headErr,
		"Put":      s.Put(ctx, "k", []byte("x"), cold.PutOptions{}),
		"RangeGet": s.RangeGet(ctx, "k", 0, make([]byte, 1)),
		"List":     s.List(ctx, "", func(cold.ObjectInfo) error { return nil }),
		"Check":    s.Check(ctx),
	}
	for op, err := range errs {
		if !errors.Is(err, cold.ErrUnavailable) {
			t.Errorf("%s on a closed port: %v, want ErrUnavailable", op, err)
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("five operations on a closed port took %v", d)
	}
}

// TestSlowServerTimesOut: a server that accepts and never answers gives
// ErrUnavailable (wrapping DeadlineExceeded) once Timeout passes.
func TestSlowServerTimesOut(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // hold it open, never answer
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
		for _, c := range conns {
			c.Close()
		}
	})
	cfg := config("http://"+l.Addr().String(), "ak", "sk")
	cfg.Timeout = 200 * time.Millisecond
	s := open(t, cfg)
	_, err = s.Head(t.Context(), "k")
	if !errors.Is(err, cold.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Head on a silent server: %v, want ErrUnavailable and DeadlineExceeded", err)
	}
	// The caller's own cancellation is not "unavailable".
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	err = s.RangeGet(ctx, "k", 0, make([]byte, 1))
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, cold.ErrUnavailable) {
		t.Fatalf("RangeGet with an expiring caller context: %v, want DeadlineExceeded only", err)
	}
}

func TestWrongCredentials(t *testing.T) {
	endpoint, ak, _ := s3test.Start(t)
	ctx := t.Context()
	for name, cfg := range map[string]s3store.Config{
		"wrong secret": config(endpoint, ak, "not-the-secret"),
		"unknown key":  config(endpoint, "nobody", "not-the-secret"),
	} {
		s := open(t, cfg)
		err := s.Put(ctx, "k", []byte("x"), cold.PutOptions{})
		if !errors.Is(err, s3store.ErrAccessDenied) {
			t.Errorf("%s: Put = %v, want ErrAccessDenied", name, err)
		}
		t.Logf("%s: %v", name, err)
		if err := s.RangeGet(ctx, "k", 0, make([]byte, 1)); !errors.Is(err, s3store.ErrAccessDenied) {
			t.Errorf("%s: RangeGet = %v, want ErrAccessDenied", name, err)
		}
		if err := s.Check(ctx); err == nil {
			t.Errorf("%s: Check passed", name)
		}
		_, err = s.Head(ctx, "k")
		switch {
		case errors.Is(err, s3store.ErrAccessDenied):
		case name == "unknown key" && errors.Is(err, cold.ErrNotFound):
			// versitygw answers 404 XAdminUserNotFound, and a HEAD response
			// has no body to carry the code (see the package doc).
		default:
			t.Errorf("%s: Head = %v, want ErrAccessDenied", name, err)
		}
	}
}

func TestCheckAndCreateBucket(t *testing.T) {
	endpoint, ak, sk := s3test.Start(t)
	ctx := t.Context()
	if err := open(t, config(endpoint, ak, sk)).Check(ctx); err != nil {
		t.Fatalf("Check on the test bucket: %v", err)
	}
	cfg := config(endpoint, ak, sk)
	cfg.Bucket = "made-by-new"
	missing := open(t, cfg)
	if err := missing.Check(ctx); !errors.Is(err, cold.ErrUnavailable) || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("Check on a missing bucket: %v", err)
	}
	if err := missing.Put(ctx, "k", nil, cold.PutOptions{}); !errors.Is(err, cold.ErrUnavailable) {
		t.Fatalf("Put into a missing bucket: %v, want ErrUnavailable", err)
	}
	cfg.CreateBucket = true
	for i := range 2 { // the second New finds the bucket already there
		if err := open(t, cfg).Check(ctx); err != nil {
			t.Fatalf("New #%d with CreateBucket, then Check: %v", i+1, err)
		}
	}
}

// TestServerErrors maps canned HTTP answers without a real server.
func TestServerErrors(t *testing.T) {
	var status int
	var body string
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(status)
		if r.Method != http.MethodHead {
			w.Write([]byte(body))
		}
	}))
	t.Cleanup(srv.Close)
	s := open(t, config(srv.URL, "ak", "sk"))
	for _, tc := range []struct {
		status int
		code   string
		want   error
	}{
		{503, "SlowDown", cold.ErrUnavailable},
		{500, "InternalError", cold.ErrUnavailable},
		{429, "TooManyRequests", cold.ErrUnavailable},
		{404, "NoSuchKey", cold.ErrNotFound},
		{404, "NoSuchBucket", cold.ErrUnavailable},
		{412, "PreconditionFailed", cold.ErrExists},
		{416, "InvalidRange", cold.ErrRange},
		{403, "AccessDenied", s3store.ErrAccessDenied},
	} {
		mu.Lock()
		status = tc.status
		body = `<?xml version="1.0" encoding="UTF-8"?><Error><Code>` + tc.code + `</Code><Message>canned</Message></Error>`
		mu.Unlock()
		err := s.RangeGet(t.Context(), "k", 0, make([]byte, 4))
		if !errors.Is(err, tc.want) {
			t.Errorf("GET answered %d %s: %v, want %v", tc.status, tc.code, err, tc.want)
		}
	}
	mu.Lock()
	status, body = 501, `<Error><Code>NotImplemented</Code></Error>`
	mu.Unlock()
	err := s.Put(t.Context(), "k", []byte("x"), cold.PutOptions{IfNoneMatch: true})
	if !errors.Is(err, cold.ErrUnavailable) || !strings.Contains(err.Error(), "EmulateIfNoneMatch") {
		t.Errorf("conditional Put answered 501: %v, want ErrUnavailable naming EmulateIfNoneMatch", err)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	good := config("http://127.0.0.1:7070", "ak", "sk")
	if err := good.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for name, mut := range map[string]func(*s3store.Config){
		"no endpoint":     func(c *s3store.Config) { c.Endpoint = "" },
		"bad scheme":      func(c *s3store.Config) { c.Endpoint = "ftp://x" },
		"no host":         func(c *s3store.Config) { c.Endpoint = "http://" },
		"no bucket":       func(c *s3store.Config) { c.Bucket = "" },
		"prefix no slash": func(c *s3store.Config) { c.Prefix = "gpucache" },
		"prefix dotdot":   func(c *s3store.Config) { c.Prefix = "../" },
		"no credentials":  func(c *s3store.Config) { c.AccessKey, c.SecretKey = "", "" },
		"half creds":      func(c *s3store.Config) { c.SecretKey = "" },
		"bad attempts":    func(c *s3store.Config) { c.MaxAttempts = -1 },
		"big page":        func(c *s3store.Config) { c.ListPageSize = 1001 },
	} {
		cfg := good
		mut(&cfg)
		if err := cfg.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", name, cfg)
		}
		if _, err := s3store.New(t.Context(), cfg); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "env-ak")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "env-sk")
	fromEnv := good
	fromEnv.AccessKey, fromEnv.SecretKey = "", ""
	if err := fromEnv.Validate(); err != nil {
		t.Fatalf("credentials from the environment: %v", err)
	}
}

// TestPrefixKeepsKeysApart: two stores on one bucket with different
// prefixes see only their own keys, and keys come back without the prefix.
func TestPrefixKeepsKeysApart(t *testing.T) {
	endpoint, ak, sk := s3test.Start(t)
	ctx := t.Context()
	a, b := config(endpoint, ak, sk), config(endpoint, ak, sk)
	a.Prefix, b.Prefix = "tenant-a/", "tenant-b/"
	sa, sb := open(t, a), open(t, b)
	if err := sa.Put(ctx, "obj", []byte("a"), cold.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Head(ctx, "obj"); !errors.Is(err, cold.ErrNotFound) {
		t.Fatalf("store b sees store a's key: %v", err)
	}
	var keys []string
	if err := sa.List(ctx, "", func(info cold.ObjectInfo) error {
		keys = append(keys, info.Key)
		return nil
	}); err != nil || len(keys) != 1 || keys[0] != "obj" {
		t.Fatalf("List = %q, %v; want [obj]", keys, err)
	}
	long := strings.Repeat("k", cold.MaxKeyLen-len(a.Prefix)+1)
	if err := sa.Put(ctx, long, nil, cold.PutOptions{}); !errors.Is(err, cold.ErrInvalidKey) {
		t.Fatalf("Put of a key too long with the prefix: %v, want ErrInvalidKey", err)
	}
}

// TestRangeGetLarge reads an 8 MiB object in ranges straight into dst.
func TestRangeGetLarge(t *testing.T) {
	s := s3test.NewStore(t, "")
	ctx := t.Context()
	body := make([]byte, 8<<20)
	rand.Read(body)
	if err := s.Put(ctx, "big", body, cold.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, 1<<20)
	for _, off := range []int64{0, 3 << 20, 7 << 20} {
		if err := s.RangeGet(ctx, "big", off, dst); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(dst, body[off:off+int64(len(dst))]) {
			t.Fatalf("range at %d: wrong bytes", off)
		}
	}
}

// TestLiveEndpoint runs the suite against a real deployment (RustFS, MinIO)
// when GPUCACHE_S3_ENDPOINT and friends are set. It writes under a random
// prefix and deletes what it wrote.
func TestLiveEndpoint(t *testing.T) {
	endpoint := os.Getenv("GPUCACHE_S3_ENDPOINT")
	if endpoint == "" {
		t.Skip("NOT_RUN: no live endpoint (set GPUCACHE_S3_ENDPOINT, GPUCACHE_S3_ACCESS_KEY, GPUCACHE_S3_SECRET_KEY, GPUCACHE_S3_BUCKET)")
	}
	cfg := config(endpoint, os.Getenv("GPUCACHE_S3_ACCESS_KEY"), os.Getenv("GPUCACHE_S3_SECRET_KEY"))
	cfg.Bucket = os.Getenv("GPUCACHE_S3_BUCKET")
	cfg.MaxAttempts = 3
	run := "gpucache-test/" + rand.Text()[:10] + "/"
	coldtest.RunStoreSuite(t, func(t *testing.T) cold.Store {
		c := cfg
		c.Prefix = run + prefixFor(t)
		s := open(t, c)
		t.Cleanup(func() {
			// t.Context is already canceled in Cleanup.
			ctx := context.Background()
			var keys []string
			_ = s.List(ctx, "", func(info cold.ObjectInfo) error {
				keys = append(keys, info.Key)
				return nil
			})
			for _, k := range keys {
				_ = s.Delete(ctx, k)
			}
		})
		return s
	})
}
