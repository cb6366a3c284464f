package doctor

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/cold/s3store"
	"github.com/gpucache/gpucache/internal/config"
	"github.com/gpucache/gpucache/internal/security/tlsconf"
)

// CertWarnBefore is how long before its NotAfter a certificate is WARN:
// the same 14 days as the certificate alert in
// deploy/prometheus/gpucache-alerts.yml.
const CertWarnBefore = 14 * 24 * time.Hour

// dateResolution is the resolution of an HTTP Date header.
const dateResolution = time.Second

func ms(d time.Duration) string { return d.Round(time.Microsecond).String() }

// s3Check probes the configured bucket with one HeadBucket (no retry),
// as gpucached does at start, and measures its round trip (the TCP
// connection's setup included).
func s3Check(ctx context.Context, env Env, cfg config.Config) Check {
	c := Check{Name: "s3"}
	if cfg.ColdStore != "s3" {
		c.Status, c.Detail = Absent, fmt.Sprintf("not configured (cold_store %s)", cfg.ColdStore)
		return c
	}
	c.Target = cfg.S3Endpoint
	st, err := s3store.New(ctx, s3store.Config{Endpoint: cfg.S3Endpoint, Region: cfg.S3Region, Bucket: cfg.S3Bucket,
		Prefix: cfg.S3Prefix, PathStyle: cfg.S3PathStyle, AccessKey: cfg.S3AccessKey, SecretKey: cfg.S3SecretKey,
		Timeout: env.Timeout, MaxAttempts: 1})
	if err != nil {
		c.Status, c.Detail = Fail, "gpucached would refuse to start: "+err.Error()
		return c
	}
	defer st.Close()
	start := time.Now()
	err = st.Check(ctx)
	took := time.Since(start)
	switch {
	case err == nil:
		c.Status, c.LatencyNS = OK, took.Nanoseconds()
		c.Detail = fmt.Sprintf("bucket %s answered HeadBucket in %s (measured: one request, connection setup included)", cfg.S3Bucket, ms(took))
	case errors.Is(err, cold.ErrUnavailable):
		c.Status = Warn
		c.Detail = fmt.Sprintf("bucket %s unreachable (probe bounded at %s): %v; gpucached would start degraded (cold reads miss, evicted blocks wait within cold_pending)",
			cfg.S3Bucket, env.Timeout, err)
	default:
		c.Status, c.Detail = Fail, fmt.Sprintf("bucket %s: %v; gpucached would refuse to start", cfg.S3Bucket, err)
	}
	return c
}

// etcdProbe is one GET /version on an etcd client URL.
type etcdProbe struct {
	endpoint         string
	err              error
	took             time.Duration
	server, cluster  string    // etcd's versions
	date             time.Time // the response's Date header; zero if none
	sent, received   time.Time // env.Now around the request
	haveDate, answer bool
}

// probeEtcd asks endpoint's /version, which every etcd serves on its
// client URL over HTTP/1.1 (and, under client-cert-auth, with the client
// certificate). It needs no etcd user: the probe shows the endpoint
// answers, not that etcd_username may log in.
func probeEtcd(ctx context.Context, env Env, hc *http.Client, endpoint string) etcdProbe {
	p := etcdProbe{endpoint: endpoint}
	rctx, cancel := context.WithTimeout(ctx, env.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, strings.TrimSuffix(endpoint, "/")+"/version", nil)
	if err != nil {
		p.err = err
		return p
	}
	p.sent = env.Now()
	start := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		p.err = err
		return p
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	p.took = time.Since(start)
	p.received = env.Now()
	if err != nil {
		p.err = err
		return p
	}
	if d, err := http.ParseTime(resp.Header.Get("Date")); err == nil {
		p.date, p.haveDate = d, true
	}
	if resp.StatusCode != http.StatusOK {
		p.err = fmt.Errorf("GET /version answered HTTP %d: not an etcd client URL?", resp.StatusCode)
		return p
	}
	var v struct {
		Server  string `json:"etcdserver"`
		Cluster string `json:"etcdcluster"`
	}
	if err := json.Unmarshal(body, &v); err != nil || v.Server == "" {
		p.err = fmt.Errorf("GET /version answered %q: not an etcd client URL?", strings.TrimSpace(string(body[:min(len(body), 80)])))
		return p
	}
	p.server, p.cluster, p.answer = v.Server, v.Cluster, true
	return p
}

// etcdChecks probes each etcd endpoint (one line each) and then the clock
// against the first that answered.
func etcdChecks(ctx context.Context, env Env, cfg config.Config) []Check {
	eps := cfg.Endpoints()
	if len(eps) == 0 {
		return []Check{
			{Name: "etcd", Status: Absent, Detail: "not configured (etcd_endpoints empty: a single node)"},
			{Name: "clock_etcd", Status: Absent, Detail: "no etcd to compare the clock with"},
		}
	}
	tr := &http.Transport{Proxy: nil, TLSHandshakeTimeout: env.Timeout, ResponseHeaderTimeout: env.Timeout}
	defer tr.CloseIdleConnections()
	var tlsErr error
	if cfg.EtcdCA != "" {
		var tc *tls.Config
		tc, tlsErr = tlsconf.NewClient(tlsconf.ClientFiles{CAFile: cfg.EtcdCA, CertFile: cfg.EtcdCert, KeyFile: cfg.EtcdKey})
		tr.TLSClientConfig = tc
	}
	hc := &http.Client{Transport: tr, Timeout: env.Timeout}
	probes := make([]etcdProbe, len(eps))
	reachable := 0
	for i, ep := range eps {
		if tlsErr != nil {
			probes[i] = etcdProbe{endpoint: ep, err: fmt.Errorf("etcd TLS: %w", tlsErr)}
			continue
		}
		probes[i] = probeEtcd(ctx, env, hc, ep)
		if probes[i].answer {
			reachable++
		}
	}
	var out []Check
	for _, p := range probes {
		c := Check{Name: "etcd", Target: p.endpoint}
		switch {
		case p.answer:
			c.Status, c.LatencyNS = OK, p.took.Nanoseconds()
			c.Detail = fmt.Sprintf("GET /version answered in %s (measured: one request, connection setup included); etcd server %s, cluster %s",
				ms(p.took), p.server, p.cluster)
		case reachable > 0:
			c.Status = Warn
			c.Detail = fmt.Sprintf("unreachable (probe bounded at %s): %v; the other endpoints answer", env.Timeout, p.err)
		default:
			c.Status = Fail
			c.Detail = fmt.Sprintf("unreachable (probe bounded at %s): %v; no etcd endpoint answers: gpucached cannot join the cluster", env.Timeout, p.err)
		}
		out = append(out, c)
	}
	return append(out, clockCheck(cfg, probes))
}

// clockCheck bounds the offset between etcd's clock and this machine's
// from the first answer with a Date header. The header has 1 s resolution,
// so etcd's clock at the moment it answered was in [date, date+1s), and
// that moment was between sent and received: the offset (etcd minus
// local) lies in [date-received, date+1s-sent]. The check compares that
// interval with replay_max_future, the clock skew a mutating request's
// stamp may have: a node whose clock is off by more refuses correctly
// stamped requests (or accepts stale ones), and every node is compared
// with the same reference.
func clockCheck(cfg config.Config, probes []etcdProbe) Check {
	c := Check{Name: "clock_etcd"}
	for _, p := range probes {
		if !p.haveDate {
			continue
		}
		c.Target = p.endpoint
		lo := p.date.Sub(p.received)
		hi := p.date.Add(dateResolution).Sub(p.sent)
		c.SkewMinNS, c.SkewMaxNS = ptr(lo.Nanoseconds()), ptr(hi.Nanoseconds())
		tol := cfg.ReplayMaxFuture
		span := fmt.Sprintf("etcd clock minus local clock in [%s, %s] (measured: HTTP Date, 1s resolution, plus the round trip)", lo, hi)
		switch {
		case lo > tol || hi < -tol:
			c.Status = Fail
			c.Detail = span + fmt.Sprintf(": outside replay_max_future %s; stamped requests from a correct clock would be refused or stale ones accepted: fix NTP (chrony, timesyncd)", tol)
		case lo < -tol || hi > tol:
			c.Status = Warn
			c.Detail = span + fmt.Sprintf(": the measurement cannot show it is within replay_max_future %s", tol)
		default:
			c.Status = OK
			c.Detail = span + fmt.Sprintf(": within replay_max_future %s", tol)
		}
		return c
	}
	c.Status = Warn
	c.Detail = "no etcd endpoint answered with a Date header: the clock was not compared"
	return c
}

func ptr[T any](v T) *T { return &v }

// certCheck reads a PEM file and checks the validity of its certificates:
// the first only (a served chain's leaf) when leaf, else every one (a CA
// bundle).
func certCheck(env Env, name, path string, leaf bool) Check {
	c := Check{Name: name, Target: path}
	if path == "" {
		c.Status, c.Detail = Absent, "not configured"
		return c
	}
	b, err := readSmall(path)
	if err != nil {
		c.Status, c.Detail = Fail, "cannot read: "+err.Error()
		return c
	}
	certs, err := parseCerts(b)
	if err != nil {
		c.Status, c.Detail = Fail, "a certificate does not parse: "+err.Error()
		return c
	}
	if len(certs) == 0 {
		c.Status, c.Detail = Fail, "no PEM CERTIFICATE in the file"
		return c
	}
	if leaf {
		certs = certs[:1]
	}
	now := env.Now()
	var bad []string
	soonest := certs[0]
	for _, crt := range certs {
		switch {
		case now.After(crt.NotAfter):
			bad = append(bad, fmt.Sprintf("%q expired %s", subject(crt), crt.NotAfter.UTC().Format(time.RFC3339)))
		case now.Before(crt.NotBefore):
			bad = append(bad, fmt.Sprintf("%q is not valid before %s", subject(crt), crt.NotBefore.UTC().Format(time.RFC3339)))
		case crt.NotAfter.Before(soonest.NotAfter) || now.After(soonest.NotAfter) || now.Before(soonest.NotBefore):
			soonest = crt
		}
	}
	days := func(crt *x509.Certificate) string {
		return fmt.Sprintf("%q expires %s, in %d days", subject(crt), crt.NotAfter.UTC().Format(time.RFC3339), int(crt.NotAfter.Sub(now)/(24*time.Hour)))
	}
	switch {
	case len(bad) == len(certs):
		c.Status, c.Detail = Fail, strings.Join(bad, "; ")+": TLS handshakes with it fail"
	case len(bad) > 0:
		c.Status, c.Detail = Warn, strings.Join(bad, "; ")+fmt.Sprintf("; %d of %d still valid, the soonest: %s", len(certs)-len(bad), len(certs), days(soonest))
	case soonest.NotAfter.Sub(now) < CertWarnBefore:
		c.Status, c.Detail = Warn, days(soonest)+": renew it (gpucached reloads it on SIGHUP)"
	default:
		c.Status, c.Detail = OK, days(soonest)
	}
	return c
}

// parseCerts parses the PEM CERTIFICATE blocks of b, skipping others.
func parseCerts(b []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return certs, nil
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		crt, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, err
		}
		certs = append(certs, crt)
	}
}

func subject(crt *x509.Certificate) string {
	if crt.Subject.CommonName != "" {
		return crt.Subject.CommonName
	}
	return crt.Subject.String()
}
