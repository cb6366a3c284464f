package bench

import (
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/gpucache/gpucache/client"
)

// ErrConfig reports an invalid benchmark configuration.
var ErrConfig = errors.New("gpucache/bench: invalid config")

// Ops the benchmark runs.
const (
	OpGet = "get"
	OpPut = "put"
)

// Config describes one benchmark run: the cross product of Ops, Sizes and
// Conns, each case measured for Duration (or Requests requests).
type Config struct {
	// Addr and Tenant select the server and session. Defaults are the
	// client's (127.0.0.1:9400, "default"); "unix:/path" is the server's
	// Unix socket.
	Addr string
	// Region puts each worker's GET buffers and PUT payloads in a
	// registered region (client.NewRegion), so over a Unix socket they
	// travel by GET_INTO and PUT_FROM: one copy, no payload on the socket.
	Region bool
	Tenant string
	// Cluster, if set, are seed addresses of a cluster: every request goes
	// through client.DialCluster to the owner of each key, and the report
	// splits each case per member (CaseResult.Nodes). Addr is then ignored.
	Cluster []string
	// Secret and TLS are the session's credentials (client.Config).
	Secret []byte
	TLS    *tls.Config
	// Namespace is the identity of the benchmark blocks; its Tenant is set
	// to Tenant. Default: model "bench".
	Namespace client.Namespace
	// Ops is a subset of {get, put}. Default both.
	Ops []string
	// Sizes are payload sizes in bytes. Default 64KiB, 256KiB, 1MiB.
	Sizes []int
	// Conns are the worker counts; each worker has its own connection.
	// Default 1, 8, 32.
	Conns []int
	// Batch is the number of keys per request. Default 1.
	Batch int
	// Pipeline is the number of requests in flight per worker. Default 1.
	Pipeline int
	// Duration is the measured time per case. Default 5s. Ignored when
	// Requests is set.
	Duration time.Duration
	// Requests, if positive, ends each case after this many requests
	// instead of after Duration.
	Requests int
	// Keys is the working set per size, written before the GET cases.
	// Default 256.
	Keys int
	// Warmup runs each case unmeasured for this long first. Default 0.
	Warmup time.Duration
	// HoldBytes, if positive, is filled with cached blocks of HoldBlock
	// bytes before the cases, so that the server's GC figures are taken
	// while it holds them.
	HoldBytes int64
	// HoldBlock is the block size used for HoldBytes. Default 1MiB, capped
	// at the server's MaxPayload.
	HoldBlock int
	// RequestTimeout bounds each request. Default 5s.
	RequestTimeout time.Duration
}

// DefaultNamespace is the identity the benchmark writes under.
func DefaultNamespace() client.Namespace {
	return client.Namespace{
		Tenant: client.DefaultTenant, TrustDomain: "bench", ModelID: "bench", ConfigRevision: "1",
		TokenizerRevision: "1", RoPE: "none", DType: "bytes", Quantization: "none",
		Layout: client.Layout{Format: "raw", TPSize: 1, PPSize: 1, LayerCount: 1, KVHeads: 1, HeadDim: 1, BlockTokens: 16},
	}
}

func (c *Config) applyDefaults() {
	if c.Addr == "" {
		c.Addr = client.DefaultAddr
	}
	if c.Tenant == "" {
		c.Tenant = client.DefaultTenant
	}
	if c.Namespace.ModelID == "" {
		c.Namespace = DefaultNamespace()
	}
	c.Namespace.Tenant = c.Tenant
	if len(c.Ops) == 0 {
		c.Ops = []string{OpPut, OpGet}
	}
	if len(c.Sizes) == 0 {
		c.Sizes = []int{64 << 10, 256 << 10, 1 << 20}
	}
	if len(c.Conns) == 0 {
		c.Conns = []int{1, 8, 32}
	}
	if c.Batch == 0 {
		c.Batch = 1
	}
	if c.Pipeline == 0 {
		c.Pipeline = 1
	}
	if c.Duration == 0 {
		c.Duration = 5 * time.Second
	}
	if c.Keys == 0 {
		c.Keys = 256
	}
	if c.HoldBlock == 0 {
		c.HoldBlock = 1 << 20
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 5 * time.Second
	}
}

// Validate reports the first invalid field.
func (c *Config) Validate() error {
	if err := c.validateLists(); err != nil {
		return err
	}
	switch {
	case c.Batch < 1 || c.Batch > 1<<16:
		return fmt.Errorf("%w: batch %d not in 1..65536", ErrConfig, c.Batch)
	case c.Pipeline < 1 || c.Pipeline > 1024:
		return fmt.Errorf("%w: pipeline %d not in 1..1024", ErrConfig, c.Pipeline)
	case c.Duration < 0 || c.Warmup < 0 || c.RequestTimeout < 0:
		return fmt.Errorf("%w: negative duration", ErrConfig)
	case c.Requests < 0:
		return fmt.Errorf("%w: requests %d is negative", ErrConfig, c.Requests)
	case c.Keys < 1:
		return fmt.Errorf("%w: keys %d is below 1", ErrConfig, c.Keys)
	case c.HoldBytes < 0:
		return fmt.Errorf("%w: hold bytes %d is negative", ErrConfig, c.HoldBytes)
	case c.HoldBlock < 16:
		return fmt.Errorf("%w: hold block %d is below 16 bytes", ErrConfig, c.HoldBlock)
	}
	if err := c.Namespace.Validate(); err != nil {
		return fmt.Errorf("%w: namespace: %w", ErrConfig, err)
	}
	return nil
}

// validateLists checks the ops, sizes and connection counts to run.
func (c *Config) validateLists() error {
	for _, op := range c.Ops {
		if op != OpGet && op != OpPut {
			return fmt.Errorf("%w: op %q (want get, put or both)", ErrConfig, op)
		}
	}
	for _, s := range c.Sizes {
		if s < 16 {
			return fmt.Errorf("%w: size %d is below 16 bytes", ErrConfig, s)
		}
	}
	for _, n := range c.Conns {
		if n < 1 || n > 4096 {
			return fmt.Errorf("%w: conns %d not in 1..4096", ErrConfig, n)
		}
	}
	return nil
}

// ParseOps parses "get", "put" or "both".
func ParseOps(s string) ([]string, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "get":
		return []string{OpGet}, nil
	case "put":
		return []string{OpPut}, nil
	case "both", "":
		return []string{OpPut, OpGet}, nil
	}
	return nil, fmt.Errorf("%w: op %q (want get, put or both)", ErrConfig, s)
}

var sizeUnits = []struct {
	suffix string
	mult   float64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"t", 1 << 40},
	{"b", 1},
}

// ParseSize parses a byte size: a number with an optional unit. KiB, MiB,
// GiB, TiB and the bare K, M, G, T are powers of 1024; KB, MB, GB, TB are
// powers of 1000; B or no unit is bytes. Units are case-insensitive and a
// fraction is allowed ("1.5MiB").
func ParseSize(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := 1.0
	for _, u := range sizeUnits {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%w: size %q", ErrConfig, s)
	}
	n := v * mult
	if n >= 1<<62 || n != math.Trunc(n) {
		return 0, fmt.Errorf("%w: size %q is not a whole number of bytes below 4 EiB", ErrConfig, s)
	}
	return int64(n), nil
}

// ParseSizes parses a comma-separated list of sizes.
func ParseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if strings.TrimSpace(f) == "" {
			continue
		}
		n, err := ParseSize(f)
		if err != nil {
			return nil, err
		}
		if n > 1<<31 {
			return nil, fmt.Errorf("%w: size %q exceeds 2GiB", ErrConfig, f)
		}
		out = append(out, int(n))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: empty size list %q", ErrConfig, s)
	}
	return out, nil
}

// ParseInts parses a comma-separated list of positive integers.
func ParseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%w: %q is not a positive integer", ErrConfig, f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: empty list %q", ErrConfig, s)
	}
	return out, nil
}

// FormatSize formats a byte count in the largest binary unit it reaches:
// whole ("64KiB", "1MiB") when exact, else with one decimal ("1.5MiB").
func FormatSize(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	u := 0
	for u < len(units)-1 && n >= 1<<(10*(u+1)) {
		u++
	}
	if n%(1<<(10*u)) == 0 {
		return strconv.FormatInt(n>>(10*u), 10) + units[u]
	}
	return strconv.FormatFloat(float64(n)/float64(int64(1)<<(10*u)), 'f', 1, 64) + units[u]
}
