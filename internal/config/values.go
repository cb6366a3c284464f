package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// ByteSize is a size in bytes that parses "64KiB", "1GiB", "4MB" or "1024".
type ByteSize int64

var units = []struct {
	suffix string
	mult   int64
}{
	{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
	{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"kB", 1e3},
	{"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}, {"k", 1 << 10},
	{"B", 1},
}

// ParseByteSize parses a size. Binary suffixes (KiB, MiB, GiB, TiB, and the
// short K, M, G, T) are powers of 1024; KB, MB, GB, TB are powers of 1000.
func ParseByteSize(s string) (ByteSize, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || f < 0 || math.IsNaN(f) {
		return 0, fmt.Errorf("bad size %q (want e.g. 64KiB, 1GiB, 4096)", s)
	}
	v := f * float64(mult)
	if v > math.MaxInt64/2 {
		return 0, fmt.Errorf("size %q too large", s)
	}
	return ByteSize(v), nil
}

// String formats the size with the largest exact binary unit.
func (b ByteSize) String() string {
	for _, u := range units[:4] {
		if b >= ByteSize(u.mult) && int64(b)%u.mult == 0 {
			return strconv.FormatInt(int64(b)/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(int64(b), 10) + "B"
}

// Set implements flag.Value.
func (b *ByteSize) Set(s string) error {
	v, err := ParseByteSize(s)
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// UnmarshalYAML accepts "1GiB" or a plain integer.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error { return b.Set(n.Value) }

// MarshalYAML writes the String form.
func (b ByteSize) MarshalYAML() (any, error) { return b.String(), nil }

type strVal string

func (v *strVal) Set(s string) error { *v = strVal(s); return nil }
func (v *strVal) String() string     { return string(*v) }

type boolVal bool

func (v *boolVal) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("bad boolean %q", s)
	}
	*v = boolVal(b)
	return nil
}
func (v *boolVal) String() string   { return strconv.FormatBool(bool(*v)) }
func (v *boolVal) IsBoolFlag() bool { return true }

type intVal int

func (v *intVal) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return fmt.Errorf("bad integer %q", s)
	}
	*v = intVal(n)
	return nil
}
func (v *intVal) String() string { return strconv.Itoa(int(*v)) }

type durVal time.Duration

func (v *durVal) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("bad duration %q (want e.g. 500ms, 30s, 5m)", s)
	}
	*v = durVal(d)
	return nil
}
func (v *durVal) String() string { return time.Duration(*v).String() }
