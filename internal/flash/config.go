package flash

import (
	"fmt"
	"log/slog"
	"maps"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/degrade"
)

// Reclaim orders.
const (
	// ReclaimOldest reclaims the segment with the lowest sequence number.
	ReclaimOldest = "oldest"
	// ReclaimFewestLive reclaims the sealed segment with the fewest live
	// bytes that may go (see "Reclaim" in the package comment).
	ReclaimFewestLive = "fewest-live"
)

// Direct I/O modes.
const (
	// DirectAuto tries O_DIRECT and falls back to buffered I/O where the
	// file system refuses it.
	DirectAuto = "auto"
	// DirectOn refuses to open without O_DIRECT.
	DirectOn = "on"
	// DirectOff uses buffered I/O.
	DirectOff = "off"
)

// Defaults and bounds.
const (
	DefaultSegmentBytes = 256 << 20
	MinSegmentBytes     = 1 << 20
	DefaultWriteBuffer  = 64 << 20
	DefaultRetryAfter   = 30 * time.Second
	DefaultCheckEvery   = 10 * time.Second
	// maxNamespaces bounds the namespace digest → tenant map the tier
	// learns from Stored, Refill and its records.
	maxNamespaces = 1 << 16
)

// Config configures a Tier.
type Config struct {
	// Dir holds the segment files (required). It is created if missing.
	Dir string
	// Capacity bounds the bytes of all segment files together (required,
	// at least two segments).
	Capacity int64
	// SegmentBytes is the size a segment file grows to before the next one
	// starts. A multiple of 4096, at least 1 MiB. Default 256 MiB.
	SegmentBytes int64
	// WriteBuffer bounds the payload bytes of evicted blocks queued in
	// memory for the writer; when it is full Evicted declines (and counts
	// flash_declined_full). A block larger than it is always declined
	// (flash_declined_large).
	// Default 64 MiB.
	WriteBuffer int64
	// TenantQuotas bounds, per tenant, the payload bytes of the blocks the
	// tier holds. 0 or absent: no quota. A tenant at its quota makes room
	// by dropping its own oldest blocks, never another tenant's.
	TenantQuotas map[string]int64
	// Reclaim is ReclaimOldest (default) or ReclaimFewestLive.
	Reclaim string
	// OnReclaim, if set, is offered each live block of a segment being
	// reclaimed, read back and verified, from the reclaimer goroutine and
	// under no lock of the tier (the daemon hands it to the cold tier when
	// blocks go cold only as flash evicts them). payload is valid only
	// during the call. Its answer is counted (flash_reclaim_taken).
	OnReclaim func(d identity.NamespaceDigest, key, parent identity.BlockKey, tokens uint32, payload []byte) bool
	// Direct is DirectAuto (default), DirectOn or DirectOff.
	Direct string
	// RetryAfter is how long a degraded tier waits before it tries to
	// write again (Retry tries at once). Default 30s.
	RetryAfter time.Duration
	// CheckEvery is how often the tier checks that its segment files are
	// still there (CheckSegments). Default 10s.
	CheckEvery time.Duration
	// Faults injects flash_io_error into reads and writes; nil in
	// production.
	Faults *degrade.Registry
	// Logger; nil discards.
	Logger *slog.Logger
	// Hooks are for tests; nil: none.
	Hooks *Hooks

	// fs opens files; nil: the real ones. Tests inject errors here.
	fs fsys
}

// Hooks let tests follow and hold the tier's goroutines without sleeping.
// Each is called from the goroutine named, under no lock of the tier.
type Hooks struct {
	// BeforeWrite is called by the writer before each write system call
	// of records, with the segment's sequence number, the offset and the
	// length. It may block: the writer waits (Evicted does not).
	BeforeWrite func(seq uint64, off int64, n int)
	// Written is called by the writer after each write of records, with
	// its error.
	Written func(seq uint64, off int64, n int, err error)
	// Reclaimed is called by the reclaimer once a segment file is gone,
	// with how many live blocks went with it.
	Reclaimed func(seq uint64, blocks int)
	// Degraded is called by the writer when the tier degrades and when a
	// retry fails (err is why), and when it recovers (err nil).
	Degraded func(err error)
}

// withDefaults fills the defaults and checks the config.
func (c Config) withDefaults() (Config, error) {
	if c.SegmentBytes == 0 {
		c.SegmentBytes = DefaultSegmentBytes
	}
	if c.WriteBuffer == 0 {
		c.WriteBuffer = DefaultWriteBuffer
	}
	if c.Reclaim == "" {
		c.Reclaim = ReclaimOldest
	}
	if c.Direct == "" {
		c.Direct = DirectAuto
	}
	if c.RetryAfter == 0 {
		c.RetryAfter = DefaultRetryAfter
	}
	if c.CheckEvery == 0 {
		c.CheckEvery = DefaultCheckEvery
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Hooks == nil {
		c.Hooks = &Hooks{}
	}
	if c.fs == nil {
		c.fs = osFS{}
	}
	c.TenantQuotas = maps.Clone(c.TenantQuotas)
	switch {
	case c.Dir == "":
		return c, fmt.Errorf("%w: Dir is required", ErrConfig)
	case c.SegmentBytes < MinSegmentBytes || c.SegmentBytes%align != 0:
		return c, fmt.Errorf("%w: SegmentBytes %d: a multiple of %d, at least %d", ErrConfig, c.SegmentBytes, align, MinSegmentBytes)
	case c.Capacity < 2*c.SegmentBytes:
		return c, fmt.Errorf("%w: Capacity %d holds fewer than two segments of %d bytes", ErrConfig, c.Capacity, c.SegmentBytes)
	case c.WriteBuffer < 0:
		return c, fmt.Errorf("%w: WriteBuffer %d", ErrConfig, c.WriteBuffer)
	case c.Reclaim != ReclaimOldest && c.Reclaim != ReclaimFewestLive:
		return c, fmt.Errorf("%w: Reclaim %q: %q or %q", ErrConfig, c.Reclaim, ReclaimOldest, ReclaimFewestLive)
	case c.Direct != DirectAuto && c.Direct != DirectOn && c.Direct != DirectOff:
		return c, fmt.Errorf("%w: Direct %q: %q, %q or %q", ErrConfig, c.Direct, DirectAuto, DirectOn, DirectOff)
	case c.RetryAfter < 0 || c.CheckEvery < 0:
		return c, fmt.Errorf("%w: RetryAfter and CheckEvery must not be negative", ErrConfig)
	}
	for tenant, q := range c.TenantQuotas {
		if q < 0 {
			return c, fmt.Errorf("%w: tenant %q quota %d", ErrConfig, tenant, q)
		}
	}
	return c, nil
}
