// Package doctor tells an operator what this machine and this node's
// configuration can do: CPU features, huge pages, file and memory-lock
// limits, NUMA, the hardware the portable build does not use (RDMA, GPUs,
// NVMe, BlueField), the configured S3 and etcd (reachability, latency, the
// clock), and certificate expiry. `gpucache doctor` prints its Report.
//
// Each Check has one Status:
//
//	OK                the check passed; Detail says what was read or measured
//	WARN              gpucached would run, degraded or at risk; Detail says why
//	FAIL              gpucached would refuse to start with this configuration,
//	                  or would start and fail what it asks (every etcd endpoint
//	                  unreachable, an expired certificate, a clock outside the
//	                  replay tolerance)
//	ABSENT            the hardware, or the configured service, is not there
//	NOT_RUN_HARDWARE  the hardware is there, but no path of this build runs on it
//
// Numbers in a Detail are read from the machine (/proc, /sys, getrlimit,
// the certificate) or measured by this run (a round trip's latency, a
// clock offset's bounds); nothing is estimated.
package doctor

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/gpucache/gpucache/internal/config"
	"github.com/gpucache/gpucache/internal/security/nodesec"
)

// Status is a check's verdict.
type Status string

// The statuses, from best to worst for the exit code (see Report.Failed).
const (
	OK             Status = "OK"
	Warn           Status = "WARN"
	Fail           Status = "FAIL"
	Absent         Status = "ABSENT"
	NotRunHardware Status = "NOT_RUN_HARDWARE"
)

// Check is one line of the report.
type Check struct {
	// Name is stable (cpu_sha_ni, rlimit_nofile, etcd, ...); a check that
	// probes one of several endpoints carries it in Target.
	Name   string `json:"name"`
	Status Status `json:"status"`
	// Detail is the reason, in one line.
	Detail string `json:"detail"`
	// Target is the endpoint, file or device the check probed, if any.
	Target string `json:"target,omitempty"`
	// LatencyNS is a measured round trip, in nanoseconds (0: none measured).
	LatencyNS int64 `json:"latency_ns,omitempty"`
	// SkewMinNS and SkewMaxNS bound a measured clock offset (the remote
	// clock minus this machine's), in nanoseconds; present only on the
	// clock check when it measured.
	SkewMinNS *int64 `json:"skew_min_ns,omitempty"`
	SkewMaxNS *int64 `json:"skew_max_ns,omitempty"`
}

// Report is every check, in a fixed order.
type Report struct {
	Checks []Check `json:"checks"`
}

// Failed reports whether any check is FAIL: `gpucache doctor` then exits 1.
// WARN, ABSENT and NOT_RUN_HARDWARE do not fail.
func (r Report) Failed() bool {
	for _, c := range r.Checks {
		if c.Status == Fail {
			return true
		}
	}
	return false
}

// Find returns the first check named name (and, if target is not "", with
// that target).
func (r Report) Find(name, target string) (Check, bool) {
	for _, c := range r.Checks {
		if c.Name == name && (target == "" || c.Target == target) {
			return c, true
		}
	}
	return Check{}, false
}

// WriteJSON writes {"checks":[...]}.
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText writes one line per check (status, name, target, detail) and a
// count of each status.
func (r Report) WriteText(w io.Writer) error {
	counts := map[Status]int{}
	for _, c := range r.Checks {
		counts[c.Status]++
		name := c.Name
		if c.Target != "" {
			name += " " + c.Target
		}
		if _, err := fmt.Fprintf(w, "%-16s %-22s %s\n", c.Status, name, c.Detail); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(w, "\n%d OK, %d WARN, %d FAIL, %d ABSENT, %d NOT_RUN_HARDWARE\n",
		counts[OK], counts[Warn], counts[Fail], counts[Absent], counts[NotRunHardware])
	return err
}

// Env is where the checks look and how long they wait. The zero Env is
// this machine, with the defaults below.
type Env struct {
	// Proc, Sys and Dev are the roots of /proc, /sys and /dev; tests point
	// them at a fake tree. Default "/proc", "/sys", "/dev".
	Proc, Sys, Dev string
	// Rlimit reads a resource limit (soft, hard). Default getrlimit(2).
	Rlimit func(resource int) (soft, hard uint64, err error)
	// Now is the clock that certificate expiry and the etcd clock check
	// read. Default time.Now.
	Now func() time.Time
	// Timeout bounds each network probe (one S3 HeadBucket, one etcd
	// endpoint). Default 3s.
	Timeout time.Duration
	// RDMALinked reports whether this build registers memory for RDMA
	// (the memlock check then matters). Default transport.RDMA().Linked,
	// false in every build, rdma_nixl included.
	RDMALinked *bool
	// Getenv reads the secrets the config names by env (secret_env,
	// seal and cold keys), as gpucached does. Default os.LookupEnv.
	Getenv func(string) (string, bool)
	// Environ lists the environment (os.Environ's form; os.Environ when
	// nil) for gpucached's check of GPUCACHE_* variables (config.CheckEnv).
	Environ func() []string
}

// DefaultTimeout is Env.Timeout's default.
const DefaultTimeout = 3 * time.Second

func (e Env) withDefaults() Env {
	if e.Proc == "" {
		e.Proc = "/proc"
	}
	if e.Sys == "" {
		e.Sys = "/sys"
	}
	if e.Dev == "" {
		e.Dev = "/dev"
	}
	if e.Rlimit == nil {
		e.Rlimit = getrlimit
	}
	if e.Now == nil {
		e.Now = time.Now
	}
	if e.Getenv == nil {
		e.Getenv = os.LookupEnv
	}
	if e.Environ == nil {
		e.Environ = os.Environ
	}
	if e.Timeout <= 0 {
		e.Timeout = DefaultTimeout
	}
	return e
}

func getrlimit(resource int) (uint64, uint64, error) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(resource, &r); err != nil {
		return 0, 0, err
	}
	return uint64(r.Cur), uint64(r.Max), nil
}

// Run runs every check against cfg. cfgErr is the error loading cfg
// returned (config.Load), or nil: a configuration that does not validate
// is a FAIL line, and the other checks still run on what was loaded. A
// configuration that validates is then checked as gpucached checks it at
// start (nodesec.Load): every tenant secret, seal key and cold encryption
// key is read from its file or environment variable (env.Getenv) and
// checked, and the TLS files are loaded; a refusal is the config FAIL line,
// with gpucached's own message, as is a GPUCACHE_* variable a typo away
// from a setting (config.CheckEnv; one it would only log is a WARN). The
// network checks are bounded by env.Timeout each and by ctx.
func Run(ctx context.Context, cfg config.Config, cfgErr error, env Env) Report {
	env = env.withDefaults()
	var r Report
	add := func(cs ...Check) { r.Checks = append(r.Checks, cs...) }
	if cfgErr == nil {
		_, cfgErr = nodesec.Load(cfg, env.Getenv)
	}
	var envWarnings []string
	if cfgErr == nil {
		envWarnings, cfgErr = config.CheckEnv(cfg, env.Environ())
	}
	switch {
	case cfgErr != nil:
		add(Check{Name: "config", Status: Fail, Detail: "gpucached would refuse it: " + cfgErr.Error()})
	case len(envWarnings) > 0:
		add(Check{Name: "config", Status: Warn, Detail: "valid; gpucached would log: " + strings.Join(envWarnings, "; ")})
	default:
		add(Check{Name: "config", Status: OK, Detail: "valid"})
	}
	add(cpuChecks(env)...)
	add(memoryCheck(env, cfg), hugePagesCheck(env, cfg), nofileCheck(env, cfg), memlockCheck(env, cfg), numaCheck(env))
	add(rdmaCheck(env), gpuCheck(env), nvmeCheck(env), blueFieldCheck(env))
	add(s3Check(ctx, env, cfg))
	add(etcdChecks(ctx, env, cfg)...)
	add(certCheck(env, "tls_cert", cfg.TLSCert, true), certCheck(env, "tls_client_ca", cfg.TLSClientCA, false),
		certCheck(env, "etcd_cert", cfg.EtcdCert, true))
	return r
}
