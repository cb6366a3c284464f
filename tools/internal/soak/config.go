package soak

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"
)

// ErrInvalid marks a Config that cannot run.
var ErrInvalid = errors.New("gpucache/soak: invalid config")

// ErrFailed marks a soak that ran and whose history broke a check (a
// wrong payload, an overrun, a fault not recovered, growth in a phase).
var ErrFailed = errors.New("gpucache/soak: checks failed")

// Bounds of the Config: a soak always stops on its own.
const (
	// MaxDuration is the longest Duration.
	MaxDuration = 72 * time.Hour
	// MaxOps is the largest Ops.
	MaxOps = 10_000_000_000
	// MaxWorkers is the most load goroutines.
	MaxWorkers = 256
	// MaxChains is the most chains of one kind per tenant.
	MaxChains = 1 << 16
)

// Fault names, in the order of a cycle of the default schedule.
const (
	FaultKill9         = "kill9"                 // kill -9 of cluster node n1, then a restart on the same port
	FaultEtcd          = "etcd"                  // etcd stopped, then restarted on the same ports and data
	FaultS3            = "s3"                    // the S3 server killed, then restarted on the same port and data
	FaultFullDisk      = "full_disk"             // the open node's fs cold tier (a tmpfs) filled to the last byte
	FaultPartition     = "partition"             // cluster node n2 (in a network namespace) cut from etcd; clients still reach it
	FaultS3Unavailable = "fp_s3_unavailable"     // failpoint s3_unavailable (fail) on n3
	FaultS3Slow        = "fp_s3_slow"            // failpoint s3_slow (hang) on n3
	FaultControlPlane  = "fp_control_plane_loss" // failpoint control_plane_loss (fail) on n3
	FaultStorageLoss   = "fp_storage_loss"       // failpoint storage_loss (fail) on the open node
	FaultNVMeTimeout   = "fp_nvme_timeout"       // failpoint nvme_timeout (hang) on the open node
)

// AllFaults is the default schedule: every fault, in this order, cycled
// until the load ends.
func AllFaults() []string {
	return []string{FaultKill9, FaultEtcd, FaultS3, FaultFullDisk, FaultPartition,
		FaultS3Unavailable, FaultS3Slow, FaultControlPlane, FaultStorageLoss, FaultNVMeTimeout}
}

// Schedule says when faults happen. Each fault is one phase: it is
// injected, held for Hold, healed, awaited until it has recovered (at most
// Recover), and followed by Settle of plain load before the next fault.
type Schedule struct {
	// Faults are the faults of one cycle, in order; the cycle repeats until
	// the load ends. Default AllFaults().
	Faults []string
	// Warmup is plain load before the first fault. Default 20s.
	Warmup time.Duration
	// Hold is how long each fault lasts. Default 10s (longer than the
	// nodes' control_grace and member lease, so etcd loss and the partition
	// reach the "owner unknown" mode and the member expires).
	Hold time.Duration
	// Recover bounds the wait for a healed fault to have recovered; a fault
	// still not recovered after it is reported as not recovered. Default 60s.
	Recover time.Duration
	// Settle is plain load after a recovery, before the phase's end sample.
	// Default 10s.
	Settle time.Duration
	// Cycles, when positive, ends the load after this many cycles of
	// Faults (Duration still bounds the run). Default 0: until Duration.
	Cycles int
}

// Config configures a soak. Zero fields take the defaults of Default.
type Config struct {
	// Duration is how long the load runs before the soak winds down: the
	// fault in progress then finishes (heal, recovery, settle) and the load
	// stops. Default 5m; at most MaxDuration.
	Duration time.Duration
	// Ops, when positive, also ends the load once this many client calls
	// have been checked (the fault in progress still finishes). At most
	// MaxOps.
	Ops int64
	// Workers is the number of load goroutines. Default 8.
	Workers int
	// Rate caps the load in operations per second across workers (an
	// operation is one to three client calls); 0 is unpaced. Default 0.
	Rate float64
	// OpTimeout is the deadline each client call is given. Default 1s.
	OpTimeout time.Duration
	// OverrunSlack is how far past its deadline a call may return before
	// it counts as an overrun. Default 50ms.
	OverrunSlack time.Duration
	// MinPayload and MaxPayload bound a block's payload size, which the
	// oracle derives from the block's key. Default 4KiB and 16KiB.
	MinPayload, MaxPayload int
	// ChainBlocks is the number of blocks of one chain. Default 4.
	ChainBlocks int
	// HotChains per tenant are read often and fit in DRAM; ScanChains per
	// tenant are read rarely and overflow it, so their blocks go through
	// write-behind to the cold tier and come back by refill. Default 128
	// and 1024.
	HotChains, ScanChains int
	// ScanShare is the share of operations on scan chains. Default 0.2.
	ScanShare float64
	// Schedule is the fault schedule.
	Schedule Schedule
	// SampleEvery is the period of the RSS and goroutine samples of every
	// node. Default 5s.
	SampleEvery time.Duration
	// HeapEvery, when positive, saves every node's heap profile
	// (/debug/pprof/heap) into Dir/heap/ at this period, so that what grows
	// in a long run can be found by diffing the profiles (go tool pprof
	// -diff_base). Default 0: none.
	HeapEvery time.Duration
	// Thresholds bound growth within a phase.
	Thresholds Thresholds
	// DriftAfter, when positive, starts the drift check (each long-lived
	// node from a baseline to the end of the run) at the first phase of
	// cycle 2 or later that begins at least this long after the load
	// started, so that bounded structures which fill slowly at a paced
	// rate (the refill's manifest cache, the quota ledger up to the
	// reclaim grace) are warm-up, not drift. Default 0: the first phase
	// of cycle 2.
	DriftAfter time.Duration
	// ReclaimGrace and ReclaimInterval, when positive, set every node's
	// cold_reclaim_grace and cold_reclaim_interval. Default 0: the
	// node's defaults (24h and 1h), under which nothing a run writes is
	// reclaimed within 24 hours.
	ReclaimGrace, ReclaimInterval time.Duration

	// Gpucached is the gpucached binary (required).
	Gpucached string
	// Helper is the command that runs the soak's helper processes: the
	// soak appends "node" and gpucached's flags for a node whose
	// failpoints it arms (NodeMain), or "etcd" and its flags for etcd
	// (EtcdMain). The CLI passes {its own binary, "soak"}. Required.
	Helper []string
	// Versitygw is the S3 server binary (required).
	Versitygw string
	// Dir is the work directory (configs, logs, data); it must exist.
	// Required.
	Dir string
	// Netns runs node n2 in a network namespace so it can be cut from etcd
	// ("auto": when root and ip(8) are available; "off": never, the
	// partition is NOT_RUN). Default "auto".
	Netns string
	// Tmpfs mounts a tmpfs for the open node's cold tier so it can be
	// filled ("auto": when root; "off": never, full_disk is NOT_RUN).
	// Default "auto".
	Tmpfs string
	// TmpfsSize is the tmpfs's size at mount. Default 64MiB.
	TmpfsSize int64
	// HotCapacity is each node's hot_capacity. Default 32MiB.
	HotCapacity int64

	// Log receives progress. Default: discarded.
	Log *slog.Logger
	// Progress, when set, receives one line per fault and per sample.
	Progress io.Writer
	// Seed varies the workers' random streams. Default 1.
	Seed uint64
}

// Thresholds bound what may grow between the start and the end of a
// phase on one node process (a node restarted within the phase is not
// compared). A sample is the minimum of three scrapes, so requests in
// flight do not count.
type Thresholds struct {
	// GoroutinesAbs and GoroutinesRel: end ≤ start×(1+Rel) + Abs.
	// Default 16 and 0.10.
	GoroutinesAbs int
	GoroutinesRel float64
	// RSSAbs and RSSRel bound the resident memory outside the hot tier's
	// mapped slabs (RSS − hot_bytes_mapped): end ≤ start×(1+Rel) + Abs.
	// Default 32MiB and 0.25.
	RSSAbs int64
	RSSRel float64
}

// Default returns a Config with every default filled in, except the
// required paths.
func Default() Config {
	var c Config
	c.applyDefaults()
	return c
}

func (c *Config) applyDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.Duration, 5*time.Minute)
	def(&c.OpTimeout, time.Second)
	def(&c.OverrunSlack, 50*time.Millisecond)
	def(&c.SampleEvery, 5*time.Second)
	def(&c.Schedule.Warmup, 20*time.Second)
	def(&c.Schedule.Hold, 10*time.Second)
	def(&c.Schedule.Recover, 60*time.Second)
	def(&c.Schedule.Settle, 10*time.Second)
	if c.Schedule.Faults == nil {
		c.Schedule.Faults = AllFaults()
	}
	if c.Workers == 0 {
		c.Workers = 8
	}
	if c.MinPayload == 0 {
		c.MinPayload = 4 << 10
	}
	if c.MaxPayload == 0 {
		c.MaxPayload = 16 << 10
	}
	if c.ChainBlocks == 0 {
		c.ChainBlocks = 4
	}
	if c.HotChains == 0 {
		c.HotChains = 128
	}
	if c.ScanChains == 0 {
		c.ScanChains = 1024
	}
	if c.ScanShare == 0 {
		c.ScanShare = 0.2
	}
	c.applyEnvDefaults()
}

// applyEnvDefaults fills the environment, thresholds, seed and logger.
func (c *Config) applyEnvDefaults() {
	if c.Netns == "" {
		c.Netns = "auto"
	}
	if c.Tmpfs == "" {
		c.Tmpfs = "auto"
	}
	if c.TmpfsSize == 0 {
		c.TmpfsSize = 64 << 20
	}
	if c.HotCapacity == 0 {
		c.HotCapacity = 32 << 20
	}
	t := &c.Thresholds
	if t.GoroutinesAbs == 0 {
		t.GoroutinesAbs = 16
	}
	if t.GoroutinesRel == 0 {
		t.GoroutinesRel = 0.10
	}
	if t.RSSAbs == 0 {
		t.RSSAbs = 32 << 20
	}
	if t.RSSRel == 0 {
		t.RSSRel = 0.25
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
}

// Validate reports the first field out of range.
func (c Config) Validate() error {
	for _, check := range []func() error{
		c.validateLoad, c.validateShape, c.validateSchedule, c.validateEnv, c.validateRequired, c.validateFaults,
	} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// invalidf returns an error wrapping ErrInvalid.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// validateLoad checks the duration, the operation count, the workers,
// the rate and the timeouts.
func (c Config) validateLoad() error {
	switch {
	case c.Duration <= 0 || c.Duration > MaxDuration:
		return invalidf("duration %v not in (0, %v]", c.Duration, MaxDuration)
	case c.Ops < 0 || c.Ops > MaxOps:
		return invalidf("ops %d not in 0..%d", c.Ops, int64(MaxOps))
	case c.Workers < 1 || c.Workers > MaxWorkers:
		return invalidf("workers %d not in 1..%d", c.Workers, MaxWorkers)
	case c.Rate < 0:
		return invalidf("rate %v is negative", c.Rate)
	case c.OpTimeout < 10*time.Millisecond || c.OpTimeout > time.Minute:
		return invalidf("op timeout %v not in [10ms, 1m]", c.OpTimeout)
	case c.OverrunSlack < 0:
		return invalidf("overrun slack %v is negative", c.OverrunSlack)
	}
	return nil
}

// validateShape checks the payload sizes, the chains and the sample period.
func (c Config) validateShape() error {
	switch {
	case c.MinPayload < 1 || c.MaxPayload < c.MinPayload || c.MaxPayload > 4<<20:
		return invalidf("payload sizes %d..%d not within 1..4MiB", c.MinPayload, c.MaxPayload)
	case c.ChainBlocks < 1 || c.ChainBlocks > 64:
		return invalidf("chain blocks %d not in 1..64", c.ChainBlocks)
	case c.HotChains < 1 || c.HotChains > MaxChains || c.ScanChains < 1 || c.ScanChains > MaxChains:
		return invalidf("hot chains %d and scan chains %d must be in 1..%d", c.HotChains, c.ScanChains, MaxChains)
	case c.ScanShare < 0 || c.ScanShare > 1:
		return invalidf("scan share %v not in [0, 1]", c.ScanShare)
	case c.SampleEvery < 100*time.Millisecond:
		return invalidf("sample period %v is below 100ms", c.SampleEvery)
	}
	return nil
}

// validateSchedule checks the fault schedule's cycles and phase lengths.
func (c Config) validateSchedule() error {
	switch {
	case c.Schedule.Cycles < 0:
		return invalidf("schedule: cycles %d is negative", c.Schedule.Cycles)
	case c.Schedule.Warmup < 0 || c.Schedule.Hold <= 0 || c.Schedule.Recover <= 0 || c.Schedule.Settle < 0:
		return invalidf("schedule: warmup and settle must not be negative, hold and recover must be positive")
	case c.Schedule.Hold > time.Hour || c.Schedule.Recover > time.Hour || c.Schedule.Settle > time.Hour || c.Schedule.Warmup > time.Hour:
		return invalidf("schedule: warmup, hold, recover and settle are at most 1h each")
	case c.DriftAfter < 0 || c.DriftAfter > MaxDuration:
		return invalidf("drift-after %v not in 0..%v", c.DriftAfter, MaxDuration)
	case c.ReclaimGrace != 0 && c.ReclaimGrace < 10*time.Minute:
		return invalidf("reclaim grace %v: 0 (the node's default) or at least 10m", c.ReclaimGrace)
	case c.ReclaimInterval != 0 && (c.ReclaimInterval < time.Minute || c.ReclaimInterval > 24*time.Hour):
		return invalidf("reclaim interval %v: 0 (the node's default) or 1m..24h", c.ReclaimInterval)
	}
	return nil
}

// validateEnv checks the netns and tmpfs modes and the sizes.
func (c Config) validateEnv() error {
	switch {
	case c.Netns != "auto" && c.Netns != "off":
		return invalidf("netns %q is not auto or off", c.Netns)
	case c.Tmpfs != "auto" && c.Tmpfs != "off":
		return invalidf("tmpfs %q is not auto or off", c.Tmpfs)
	case c.TmpfsSize < 4<<20 || c.TmpfsSize > 4<<30:
		return invalidf("tmpfs size %d not in 4MiB..4GiB", c.TmpfsSize)
	case c.HotCapacity < 4<<20 || c.HotCapacity > 64<<30:
		return invalidf("hot capacity %d not in 4MiB..64GiB", c.HotCapacity)
	}
	return nil
}

// validateRequired checks the thresholds and the binaries and directory a
// run needs.
func (c Config) validateRequired() error {
	switch {
	case c.Thresholds.GoroutinesAbs < 0 || c.Thresholds.GoroutinesRel < 0 || c.Thresholds.RSSAbs < 0 || c.Thresholds.RSSRel < 0:
		return invalidf("thresholds must not be negative")
	case c.Gpucached == "" || len(c.Helper) == 0 || c.Versitygw == "" || c.Dir == "":
		return invalidf("the gpucached binary, the helper command, the versitygw binary and the work directory are required")
	}
	return nil
}

// validateFaults checks that the schedule names known faults, each once.
func (c Config) validateFaults() error {
	known := AllFaults()
	seen := map[string]bool{}
	for _, f := range c.Schedule.Faults {
		if !slices.Contains(known, f) {
			return invalidf("unknown fault %q (known: %s)", f, strings.Join(known, ", "))
		}
		if seen[f] {
			return invalidf("fault %q named twice in one cycle", f)
		}
		seen[f] = true
	}
	return nil
}

// ParseFaults parses a comma-separated fault list; "all" or "" is AllFaults
// and "none" is no fault.
func ParseFaults(s string) ([]string, error) {
	switch strings.TrimSpace(s) {
	case "", "all":
		return AllFaults(), nil
	case "none":
		return []string{}, nil
	}
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if !slices.Contains(AllFaults(), f) {
			return nil, fmt.Errorf("%w: unknown fault %q (known: %s)", ErrInvalid, f, strings.Join(AllFaults(), ", "))
		}
		out = append(out, f)
	}
	return out, nil
}
