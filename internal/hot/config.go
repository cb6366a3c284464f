package hot

import (
	"bufio"
	"fmt"
	"math/bits"
	"os"
	"strconv"
	"strings"
	"time"
)

// Defaults applied by Config.WithDefaults.
const (
	DefaultCapacityBytes       = 1 << 30
	DefaultMinClass            = 16 << 10
	DefaultMaxClass            = 64 << 20
	DefaultSlabBytes           = 64 << 20
	DefaultPrefault            = PrefaultPopulate
	DefaultLeaseTTL            = 5 * time.Second
	DefaultMaxLeaseTTL         = 30 * time.Second
	DefaultMaxLeases           = 65536
	DefaultEvictScan           = 1024
	minClassFloor              = 64      // smallest MinClass accepted
	maxClassCeil               = 1 << 30 // largest MaxClass accepted
	pageBytes                  = 4096    // SlabBytes must be a multiple of this
	maxEntries           int64 = 1<<32 - 64
)

// WithDefaults returns c with every zero field set to its default.
//
// MaxClass defaults to 64 MiB (an LMCache chunk of 256 tokens is 32 MiB for
// Llama-3-8B in fp16; ADR 0015), or to the largest power of two within
// CapacityBytes when the capacity is smaller. SlabBytes defaults to 64 MiB,
// or to CapacityBytes rounded down to a multiple of 4 KiB when the capacity
// is smaller than that, so a small store (tests, embedded use) needs no
// extra setting. EvictScan defaults to 1024.
// TenantHoldBytes defaults to half the capacity (at least MaxClass) and
// TenantLeases to half of MaxLeases: one tenant always leaves the other
// half to the rest.
func (c Config) WithDefaults() Config {
	c = c.withSizeDefaults()
	if c.Prefault == "" {
		c.Prefault = DefaultPrefault
	}
	if c.DefaultLeaseTTL == 0 {
		c.DefaultLeaseTTL = DefaultLeaseTTL
	}
	if c.MaxLeaseTTL == 0 {
		c.MaxLeaseTTL = DefaultMaxLeaseTTL
		if c.DefaultLeaseTTL > c.MaxLeaseTTL {
			c.MaxLeaseTTL = c.DefaultLeaseTTL
		}
	}
	if c.MaxLeases == 0 {
		c.MaxLeases = DefaultMaxLeases
	}
	if c.EvictScan == 0 {
		c.EvictScan = DefaultEvictScan
	}
	if c.TenantHoldBytes == 0 {
		c.TenantHoldBytes = max(c.CapacityBytes/2, int64(c.MaxClass))
	}
	if c.TenantLeases == 0 {
		c.TenantLeases = max(c.MaxLeases/2, 1)
	}
	return c
}

// withSizeDefaults fills the capacity, the size classes and the slab size.
func (c Config) withSizeDefaults() Config {
	if c.CapacityBytes == 0 {
		c.CapacityBytes = DefaultCapacityBytes
	}
	if c.MinClass == 0 {
		c.MinClass = DefaultMinClass
	}
	if c.MaxClass == 0 {
		c.MaxClass = DefaultMaxClass
		// A store smaller than that takes the largest class it can hold.
		if c.CapacityBytes > 0 && c.CapacityBytes < DefaultMaxClass {
			c.MaxClass = 1 << (bits.Len64(uint64(c.CapacityBytes)) - 1)
		}
	}
	if c.SlabBytes == 0 {
		c.SlabBytes = DefaultSlabBytes
		if c.CapacityBytes > 0 && c.CapacityBytes < DefaultSlabBytes {
			c.SlabBytes = int(c.CapacityBytes / pageBytes * pageBytes)
		}
	}
	return c
}

// Validate reports a config error wrapping ErrConfig. It expects a config
// that already went through WithDefaults.
func (c Config) Validate() error {
	if err := c.validateGeometry(); err != nil {
		return err
	}
	if err := c.validateLimits(); err != nil {
		return err
	}
	if total, ok := memTotal(); ok && c.CapacityBytes > total {
		return configErr("CapacityBytes %d exceeds physical memory %d (MemTotal)", c.CapacityBytes, total)
	}
	return nil
}

// configErr formats a config error wrapping ErrConfig.
func configErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, args...))
}

// validateGeometry checks the size classes, the slabs and the capacity.
func (c Config) validateGeometry() error {
	switch {
	case !isPow2(c.MinClass):
		return configErr("MinClass %d is not a power of two", c.MinClass)
	case !isPow2(c.MaxClass):
		return configErr("MaxClass %d is not a power of two", c.MaxClass)
	case c.MinClass < minClassFloor:
		return configErr("MinClass %d is below %d", c.MinClass, minClassFloor)
	case c.MaxClass > maxClassCeil:
		return configErr("MaxClass %d is above %d", c.MaxClass, maxClassCeil)
	case c.MinClass > c.MaxClass:
		return configErr("MinClass %d > MaxClass %d", c.MinClass, c.MaxClass)
	case c.SlabBytes <= 0 || c.SlabBytes%pageBytes != 0:
		return configErr("SlabBytes %d is not a positive multiple of %d", c.SlabBytes, pageBytes)
	case c.SlabBytes < c.MinClass:
		return configErr("SlabBytes %d < MinClass %d", c.SlabBytes, c.MinClass)
	case c.CapacityBytes < int64(c.MaxClass):
		return configErr("CapacityBytes %d < MaxClass %d", c.CapacityBytes, c.MaxClass)
	case c.CapacityBytes < int64(c.SlabBytes):
		return configErr("CapacityBytes %d < SlabBytes %d", c.CapacityBytes, c.SlabBytes)
	case c.CapacityBytes/int64(c.MinClass) > maxEntries:
		return configErr("CapacityBytes %d / MinClass %d exceeds %d slots", c.CapacityBytes, c.MinClass, maxEntries)
	case c.Prefault != PrefaultPopulate && c.Prefault != PrefaultHugePage && c.Prefault != PrefaultNone:
		return configErr("unknown Prefault %q", c.Prefault)
	}
	return nil
}

// validateLimits checks the leases, tags, eviction scan, tenant shares and
// the clock.
func (c Config) validateLimits() error {
	switch {
	case c.DefaultLeaseTTL < 0 || c.MaxLeaseTTL < 0:
		return configErr("negative lease TTL")
	case c.DefaultLeaseTTL > c.MaxLeaseTTL:
		return configErr("DefaultLeaseTTL %v > MaxLeaseTTL %v", c.DefaultLeaseTTL, c.MaxLeaseTTL)
	case c.MaxLeases < 0:
		return configErr("negative MaxLeases %d", c.MaxLeases)
	case c.TagSize < 0 || c.TagSize > 64:
		return configErr("TagSize %d not in 0..64", c.TagSize)
	case c.EvictScan < 0:
		return configErr("negative EvictScan %d", c.EvictScan)
	case c.TenantHoldBytes < int64(c.MaxClass):
		return configErr("TenantHoldBytes %d < MaxClass %d: a tenant could not store its largest block", c.TenantHoldBytes, c.MaxClass)
	case c.TenantLeases < 0:
		return configErr("negative TenantLeases %d", c.TenantLeases)
	}
	return nil
}

func isPow2(n int) bool { return n > 0 && n&(n-1) == 0 }

// memTotal reads MemTotal from /proc/meminfo, in bytes. ok is false when it
// cannot be read, in which case the physical-memory check is skipped.
func memTotal() (total int64, ok bool) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		rest, found := strings.CutPrefix(line, "MemTotal:")
		if !found {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return 0, false
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil || kb <= 0 {
			return 0, false
		}
		return kb << 10, true
	}
	return 0, false
}

// classes describes the size classes of a validated config.
type classes struct {
	minShift int // log2(MinClass)
	n        int // number of classes
	slab     int // Config.SlabBytes
}

func newClasses(c Config) classes {
	lo := bits.TrailingZeros(uint(c.MinClass))
	hi := bits.TrailingZeros(uint(c.MaxClass))
	return classes{minShift: lo, n: hi - lo + 1, slab: c.SlabBytes}
}

// classOf returns the class index of a payload of size bytes (0 <= size <=
// MaxClass). A zero-size payload takes a MinClass slot.
func (cl classes) classOf(size int) int {
	if size <= 1<<cl.minShift {
		return 0
	}
	return bits.Len(uint(size-1)) - cl.minShift
}

// size returns the slot size of class k.
func (cl classes) size(k int) int { return 1 << (cl.minShift + k) }

// slabSize returns the mapping size of one slab of class k: as many slots as
// fit in SlabBytes, at least one.
func (cl classes) slabSize(k int) int {
	sz := cl.size(k)
	if sz >= cl.slab {
		return sz
	}
	return cl.slab / sz * sz
}
