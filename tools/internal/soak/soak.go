package soak

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math/bits"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/gpucache/gpucache/client"
)

// soak is one run: the processes, the load, and what was recorded.
type soak struct {
	cfg   Config
	admin *admin
	h     *history

	etcd    *etcdServer
	s3      *s3server
	ns      *netns // nil: no namespace (the partition is NOT_RUN)
	nsWhy   string
	disk    *coldDisk
	diskWhy string
	ballast int64

	cluster []*node // n1, n2, n3
	open    *node
	nodes   []*node // every node, for the samples

	s3Manifests, fsManifests string

	mu      sync.Mutex
	samples []Sample // guarded by mu
	start   time.Time
}

// maxSamples bounds the samples kept; past it the sampler keeps every
// other one (its period doubles).
const maxSamples = 100_000

// Run runs a soak: it starts etcd, an S3 server and the nodes, drives the
// load while injecting the scheduled faults, tears everything down and
// returns the report. The error is ErrFailed (with the report) when a
// check failed, or why the soak could not run.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.applyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &soak{cfg: cfg, h: newHistory(Oracle{Min: cfg.MinPayload, Max: cfg.MaxPayload}, cfg.OpTimeout, cfg.OverrunSlack)}
	defer s.teardown()
	if err := s.setup(ctx); err != nil {
		return nil, err
	}
	rep, err := s.run(ctx)
	if err != nil {
		return nil, err
	}
	if len(rep.Failures) > 0 {
		return rep, fmt.Errorf("%w: %s", ErrFailed, strings.Join(rep.Failures, "; "))
	}
	return rep, nil
}

func (s *soak) progress(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.cfg.Log.Info(msg)
	if s.cfg.Progress != nil {
		el := time.Duration(0)
		if !s.start.IsZero() {
			el = time.Since(s.start).Truncate(time.Second)
		}
		fmt.Fprintf(s.cfg.Progress, "soak %8s  %s\n", el, msg)
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func writeSecret(dir, name string) (path, secret string, err error) {
	secret = randomHex(32)
	path = filepath.Join(dir, name)
	return path, secret, os.WriteFile(path, []byte(secret+"\n"), 0o600)
}

// pow2AtLeast returns the least power of two ≥ n.
func pow2AtLeast(n int) int {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len(uint(n-1))
}

// setup starts etcd, S3 and the nodes, and dials the clients.
func (s *soak) setup(ctx context.Context) error {
	cfg := s.cfg
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return err
	}
	s.admin = &admin{http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2, IdleConnTimeout: 30 * time.Second}}}
	secrets := filepath.Join(dir, "secrets")
	if err := os.MkdirAll(secrets, 0o700); err != nil {
		return err
	}
	s3Host, etcdHosts, err := s.setupIsolation(dir)
	if err != nil {
		return err
	}

	// etcd, in a helper process.
	if s.etcd, err = newEtcd(cfg.Helper, filepath.Join(dir, "etcd"), filepath.Join(dir, "etcd.log"), etcdHosts); err != nil {
		return err
	}
	if err := s.etcd.start(ctx); err != nil {
		return err
	}
	s.progress("etcd serving on %s", s.etcd.endpoint("127.0.0.1"))

	if err := s.startS3(ctx, dir, s3Host); err != nil {
		return err
	}
	if err := s.writeNodeConfigs(dir, secrets); err != nil {
		return err
	}
	for _, n := range s.nodes {
		if err := n.start(ctx); err != nil {
			return err
		}
		_, addr, adm := n.snapshot()
		s.progress("%s serving on %s (admin %s)", n.spec.name, addr, adm)
	}
	return s.awaitView(ctx, startTimeout)
}

// setupIsolation makes the network namespace for n2 and the tmpfs for the
// open node, or records why not; it returns the hosts S3 and etcd serve on.
func (s *soak) setupIsolation(dir string) (s3Host string, etcdHosts []string, err error) {
	cfg := s.cfg
	s3Host = "127.0.0.1"
	etcdHosts = []string{"127.0.0.1"}
	if cfg.Netns == "off" {
		s.nsWhy = "the network namespace is off (--netns off)"
	} else if s.nsWhy = netnsUnavailable(); s.nsWhy == "" {
		if s.ns, err = newNetns(os.Getpid()); err != nil {
			s.nsWhy, s.ns = err.Error(), nil
		} else {
			s3Host = s.ns.hostIP
			etcdHosts = append(etcdHosts, s.ns.etcdIP)
		}
	}
	mount := false
	if cfg.Tmpfs == "off" {
		s.diskWhy = "the tmpfs is off (--tmpfs off)"
	} else if s.diskWhy = tmpfsUnavailable(); s.diskWhy == "" {
		mount = true
	}
	if s.disk, err = newColdDisk(filepath.Join(dir, "open-disk"), cfg.TmpfsSize, mount); err != nil && mount {
		s.diskWhy = err.Error()
		s.disk, err = newColdDisk(filepath.Join(dir, "open-disk"), cfg.TmpfsSize, false)
	}
	if err != nil {
		return "", nil, err
	}
	s.fsManifests = filepath.Join(s.disk.coldDir, "objects", "manifests")
	return s3Host, etcdHosts, nil
}

// startS3 starts the S3 server on host.
func (s *soak) startS3(ctx context.Context, dir, host string) error {
	s.s3 = &s3server{bin: s.cfg.Versitygw, data: filepath.Join(dir, "s3"),
		logPath: filepath.Join(dir, "versitygw.log"), access: "soak-" + randomHex(6), secret: randomHex(20)}
	for try := 0; ; try++ { // the free port may be taken before versitygw binds it: retry on another
		port, err := freePort(host)
		if err != nil {
			return err
		}
		s.s3.addr = fmt.Sprintf("%s:%d", host, port)
		if err = s.s3.start(ctx); err == nil {
			break
		} else if try == 2 || ctx.Err() != nil {
			return err
		}
	}
	s.s3Manifests = filepath.Join(s.s3.data, Bucket, "cluster", "manifests")
	s.progress("versitygw serving on %s", s.s3.addr)
	return nil
}

// writeTenants writes the tenants' secrets and the seal key under
// secrets, and returns the tenants' config YAML and the seal key's path.
func (s *soak) writeTenants(secrets string) (tenantYAML, sealPath string, err error) {
	tenants := map[string]string{}
	var y strings.Builder
	y.WriteString("tenants:\n")
	for _, t := range []struct{ name, rights string }{{"alpha", "*=rw"}, {"beta", "*=rw"}, {"ops", "*=a"}} {
		path, secret, err := writeSecret(secrets, t.name)
		if err != nil {
			return "", "", err
		}
		tenants[t.name] = secret
		fmt.Fprintf(&y, "  - name: %s\n    secrets: [{id: %s-1, file: %s}]\n    rights: [\"%s\"]\n", t.name, t.name, path, t.rights)
	}
	s.admin.token = tenants["ops"]
	sealPath, _, err = writeSecret(secrets, "seal")
	if err != nil {
		return "", "", err
	}
	return y.String(), sealPath, nil
}

// nodeCmd is the command line of a node: the helper's node (control) or
// gpucached.
func (s *soak) nodeCmd(control bool) []string {
	if control {
		return append(append([]string(nil), s.cfg.Helper...), "node")
	}
	return []string{s.cfg.Gpucached}
}

// writeNodeConfigs writes the secrets and the configs of the cluster
// nodes and the open node, and records the nodes (not yet started).
func (s *soak) writeNodeConfigs(dir, secrets string) error {
	cfg := s.cfg
	tenantYAML, sealPath, err := s.writeTenants(secrets)
	if err != nil {
		return err
	}
	minClass := max(4<<10, pow2AtLeast(cfg.MinPayload)/2)
	maxClass := max(minClass, pow2AtLeast(cfg.MaxPayload))
	slab := max(4<<20, maxClass)
	common := fmt.Sprintf("hot_capacity: %d\nhot_min_class: %d\nhot_max_class: %d\nhot_slab: %d\n"+
		"cold_flush_interval: 1s\ncold_pending: 8MiB\nlog_level: info\ndrain_timeout: 10s\nmax_conns: 512\n",
		cfg.HotCapacity, minClass, maxClass, slab)
	if cfg.ReclaimGrace > 0 {
		common += fmt.Sprintf("cold_reclaim_grace: %s\n", cfg.ReclaimGrace)
	}
	if cfg.ReclaimInterval > 0 {
		common += fmt.Sprintf("cold_reclaim_interval: %s\n", cfg.ReclaimInterval)
	}
	for i, name := range []string{"n1", "n2", "n3"} {
		n, err := s.clusterNode(dir, i, name, common, tenantYAML, sealPath)
		if err != nil {
			return err
		}
		s.cluster = append(s.cluster, n)
	}
	odir := filepath.Join(dir, "open")
	if err := os.MkdirAll(odir, 0o700); err != nil {
		return err
	}
	oconf := common + fmt.Sprintf("cold_store: fs\ncold_dir: %s\naudit_log: %s\n", s.disk.coldDir, filepath.Join(odir, "audit.log"))
	if err := os.WriteFile(filepath.Join(odir, "config.yaml"), []byte(oconf), 0o600); err != nil {
		return err
	}
	s.open = &node{spec: nodeSpec{name: "open", argv: s.nodeCmd(true), config: filepath.Join(odir, "config.yaml"), host: "127.0.0.1",
		control: true, logPath: filepath.Join(odir, "gpucached.log")}}
	s.nodes = append(append([]*node(nil), s.cluster...), s.open)
	return nil
}

// clusterNode writes the config of cluster node i (name): the settings
// common to every node, its own, then the tenants; it returns the node.
func (s *soak) clusterNode(dir string, i int, name, common, tenantYAML, sealPath string) (*node, error) {
	ndir := filepath.Join(dir, name)
	if err := os.MkdirAll(ndir, 0o700); err != nil {
		return nil, err
	}
	host, etcdHost := "127.0.0.1", "127.0.0.1"
	argv := s.nodeCmd(name == "n3")
	if name == "n2" && s.ns != nil {
		host, etcdHost = s.ns.nodeIP, s.ns.etcdIP
		argv = append(s.ns.prefix(), argv...)
	}
	own := fmt.Sprintf("cold_store: s3\ns3_endpoint: http://%s\ns3_bucket: %s\ns3_prefix: cluster/\n"+
		"s3_access_key: %s\ns3_secret_key: %s\naudit_log: %s\n"+
		"etcd_endpoints: %s\netcd_prefix: /gpucache-soak/\nnode_id: %s\nfault_domain: d%d\n"+
		"member_lease_ttl: 3s\ncontrol_probe: 200ms\ncontrol_grace: 3s\n"+
		"seal_keys: [{id: soak-seal-1, file: %s}]\n",
		s.s3.addr, Bucket, s.s3.access, s.s3.secret, filepath.Join(ndir, "audit.log"),
		s.etcd.endpoint(etcdHost), name, i+1, sealPath)
	confPath := filepath.Join(ndir, "config.yaml")
	if err := os.WriteFile(confPath, []byte(common+own+tenantYAML), 0o600); err != nil {
		return nil, err
	}
	return &node{spec: nodeSpec{name: name, argv: argv, config: confPath, host: host, control: name == "n3",
		logPath: filepath.Join(ndir, "gpucached.log"), cluster: true}}, nil
}

// awaitView waits until every cluster node's view holds every member.
func (s *soak) awaitView(ctx context.Context, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	for {
		missing := s.fullView().fn(ctx)
		if missing == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("gpucache/soak: the cluster did not form within %v: %s", bound, missing)
		}
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// dial builds the tenants: alpha and beta authenticate to the cluster
// (DialCluster, with their secrets); "open" uses the open node without
// credentials (Dial).
func (s *soak) dial(ctx context.Context) ([]*tenant, func(), error) {
	var closers []func()
	closeAll := func() {
		for _, c := range closers {
			c()
		}
	}
	var seeds []string
	for _, n := range s.cluster {
		_, addr, _ := n.snapshot()
		seeds = append(seeds, addr)
	}
	node := client.Config{Conns: 2, DialTimeout: min(s.cfg.OpTimeout/2, 500*time.Millisecond), RequestTimeout: s.cfg.OpTimeout}
	secrets := map[string]string{}
	for _, name := range []string{"alpha", "beta"} {
		b, err := os.ReadFile(filepath.Join(s.cfg.Dir, "secrets", name))
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		secrets[name] = strings.TrimSpace(string(b))
	}
	var out []*tenant
	for _, t := range []struct {
		name   string
		weight float64
	}{{"alpha", 0.35}, {"beta", 0.30}} {
		nc := node
		nc.Secret = []byte(secrets[t.name])
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		cl, err := client.DialCluster(dctx, client.ClusterConfig{Seeds: seeds, Node: nc})
		cancel()
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("gpucache/soak: dial the cluster as %s: %w", t.name, err)
		}
		closers = append(closers, func() { cl.Close() })
		ks, err := newKeyspace(namespace(t.name, "soak-"+t.name), s.cfg.HotChains, s.cfg.ScanChains, s.cfg.ChainBlocks)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		out = append(out, &tenant{name: t.name, auth: true, ks: ks, st: cl, weight: t.weight})
	}
	_, oaddr, _ := s.open.snapshot()
	oc := node
	oc.Addr, oc.Tenant = oaddr, "open"
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	c, err := client.Dial(dctx, oc)
	cancel()
	if err != nil {
		closeAll()
		return nil, nil, fmt.Errorf("gpucache/soak: dial the open node: %w", err)
	}
	closers = append(closers, func() { c.Close() })
	ks, err := newKeyspace(namespace("open", "soak-open"), s.cfg.HotChains, s.cfg.ScanChains, s.cfg.ChainBlocks)
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	out = append(out, &tenant{name: "open", ks: ks, st: c, weight: 0.35})
	return out, closeAll, nil
}

// sampler samples every node each period until ctx ends.
func (s *soak) sampler(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	every := s.cfg.SampleEvery
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := s.disk.maintain(); err != nil {
			s.progress("cold disk: %v", err)
		}
		var line []string
		for _, n := range s.nodes {
			sm := s.admin.sample(ctx, n, 1)
			s.mu.Lock()
			s.samples = append(s.samples, sm)
			if len(s.samples) >= maxSamples { // keep every other sample and halve the rate
				kept := s.samples[:0]
				for i, x := range s.samples {
					if i%2 == 0 {
						kept = append(kept, x)
					}
				}
				s.samples = kept
				every *= 2
				t.Reset(every)
			}
			s.mu.Unlock()
			line = append(line, fmt.Sprintf("%s rss=%dMiB live=%dMiB g=%d", sm.Node, sm.RSS>>20, sm.LiveHeap>>20, sm.Goroutines))
		}
		s.progress("%s | %s", s.h.line(), strings.Join(line, " "))
	}
}

// run drives the load through the fault schedule and builds the report.
func (s *soak) run(ctx context.Context) (*Report, error) {
	tenants, closeClients, err := s.dial(ctx)
	if err != nil {
		return nil, err
	}
	defer closeClients()
	s.start = time.Now()
	sctx, stopSampler := context.WithCancel(ctx)
	samplerDone := make(chan struct{})
	go s.sampler(sctx, samplerDone)
	defer func() { stopSampler(); <-samplerDone }()
	if s.cfg.HeapEvery > 0 {
		heapDone := make(chan struct{})
		go s.heapProfiles(sctx, heapDone)
		defer func() { stopSampler(); <-heapDone }()
	}

	l := newLoad(s.cfg, s.h, tenants)
	s.progress("priming: every chain of every tenant PUT once")
	l.prime(ctx)
	s.progress("primed: %s", s.h.line())
	l.start(ctx)
	defer l.stop()
	end := s.start.Add(s.cfg.Duration)
	over := func() bool {
		return ctx.Err() != nil || !time.Now().Before(end) || (s.cfg.Ops > 0 && s.h.totalCalls() >= s.cfg.Ops)
	}
	s.progress("load started: %d workers, tenants alpha+beta (cluster, authenticated) and open (open node); warm-up %v", s.cfg.Workers, s.cfg.Schedule.Warmup)
	warm := time.Now().Add(s.cfg.Schedule.Warmup)
	for !over() && time.Now().Before(warm) {
		sleepCtx(ctx, min(time.Until(warm), 200*time.Millisecond))
	}

	rep := &Report{}
	s.cycleFaults(ctx, rep, over, end)
	l.stop()
	stopSampler()
	<-samplerDone
	rep.Counters = s.counters(ctx)
	s.fill(rep)
	if err := ctx.Err(); err != nil {
		rep.Failures = append(rep.Failures, "interrupted before the end: "+err.Error())
	}
	return rep, nil
}

// cycleFaults runs the schedule's faults in cycles until over, recording
// each fault and the phase around it in rep.
func (s *soak) cycleFaults(ctx context.Context, rep *Report, over func() bool, end time.Time) {
	faults := s.faults()
	cycle := 0
	for i := 0; !over(); i++ {
		if len(s.cfg.Schedule.Faults) == 0 {
			sleepCtx(ctx, min(time.Until(end), time.Second))
			continue
		}
		k := i % len(s.cfg.Schedule.Faults)
		if k == 0 {
			if s.cfg.Schedule.Cycles > 0 && cycle == s.cfg.Schedule.Cycles {
				break
			}
			cycle++
		}
		f := faults[s.cfg.Schedule.Faults[k]]
		if f.notRun != "" {
			if cycle == 1 {
				rep.Faults = append(rep.Faults, FaultRecord{Fault: f.name, Target: f.target, Cycle: cycle, Means: f.means, NotRun: f.notRun})
				s.progress("fault %s: %s", f.name, f.notRun)
			}
			continue
		}
		startSamples := s.sampleAll(ctx)
		ph := PhaseRecord{Fault: f.name, Cycle: cycle, Start: time.Now().UTC()}
		rec := s.runFault(ctx, f, cycle)
		rep.Faults = append(rep.Faults, rec)
		sleepCtx(ctx, s.cfg.Schedule.Settle)
		s.reviveCrashed(ctx, rep)
		ph.End = time.Now().UTC()
		ph.Nodes = s.compare(startSamples, s.sampleAll(ctx))
		rep.Phases = append(rep.Phases, ph)
	}
}

// counters returns each node's non-zero gpucache_ counters.
func (s *soak) counters(ctx context.Context) map[string]map[string]float64 {
	out := map[string]map[string]float64{}
	for _, n := range s.nodes {
		_, _, adm := n.snapshot()
		m, err := s.admin.metrics(ctx, adm)
		if err != nil {
			continue
		}
		c := map[string]float64{}
		for k, v := range m {
			if strings.HasPrefix(k, "gpucache_") && v != 0 {
				c[k] = v
			}
		}
		out[n.spec.name] = c
	}
	return out
}

// sampleAll samples every node (minimum of three scrapes).
func (s *soak) sampleAll(ctx context.Context) map[string]Sample {
	out := map[string]Sample{}
	for _, n := range s.nodes {
		sm := s.admin.sample(ctx, n, 3)
		out[n.spec.name] = sm
		s.mu.Lock()
		s.samples = append(s.samples, sm)
		s.mu.Unlock()
	}
	return out
}

// reviveCrashed restarts a node whose process ended without the soak
// killing it (a crash) and records the crash as a failure.
func (s *soak) reviveCrashed(ctx context.Context, rep *Report) {
	for _, n := range s.nodes {
		p, _, _ := n.snapshot()
		if p != nil && p.alive() {
			continue
		}
		msg := fmt.Sprintf("%s crashed (pid %d: %v); see %s", n.spec.name, p.pid, p.err, n.spec.logPath)
		rep.Crashes = append(rep.Crashes, msg)
		s.progress("%s; restarting it", msg)
		if err := n.restart(ctx); err != nil {
			rep.Crashes = append(rep.Crashes, n.spec.name+" restart: "+err.Error())
		}
	}
}

// teardown stops everything the soak started; safe on a partial setup.
func (s *soak) teardown() {
	var wg sync.WaitGroup
	for _, n := range s.nodes {
		p, _, _ := n.snapshot()
		if p == nil || !p.alive() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.term(); err != nil {
				s.cfg.Log.Warn("node stop", "node", n.spec.name, "err", err)
			}
		}()
	}
	wg.Wait()
	if s.s3 != nil {
		s.s3.kill()
	}
	if s.etcd != nil {
		s.etcd.kill()
	}
	if s.ns != nil {
		s.ns.teardown()
	}
	if s.disk != nil {
		s.disk.unmount()
	}
	if s.admin != nil {
		s.admin.http.CloseIdleConnections()
	}
}

// heapProfiles saves every running node's heap profile into Dir/heap/ each
// HeapEvery until ctx ends, named <node>-<seconds since the start>s.pb.gz.
func (s *soak) heapProfiles(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	dir := filepath.Join(s.cfg.Dir, "heap")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		s.progress("heap profiles: %v", err)
		return
	}
	t := time.NewTicker(s.cfg.HeapEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		at := int(time.Since(s.start).Seconds())
		for _, n := range s.nodes {
			p, _, _ := n.snapshot()
			if p == nil || !p.alive() {
				continue
			}
			path := filepath.Join(dir, fmt.Sprintf("%s-%06ds.pb.gz", n.spec.name, at))
			if err := s.admin.heapProfile(ctx, n, path); err != nil {
				s.progress("heap profile of %s: %v", n.spec.name, err)
			}
		}
	}
}
