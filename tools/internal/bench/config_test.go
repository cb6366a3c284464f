package bench

import (
	"errors"
	"slices"
	"testing"

	"github.com/gpucache/gpucache/client"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"0": 0, "100": 100, "100B": 100, "64KiB": 64 << 10, "64kib": 64 << 10, "64K": 64 << 10,
		"256KiB": 256 << 10, "1MiB": 1 << 20, "1M": 1 << 20, "4GiB": 4 << 30, "4G": 4 << 30,
		"1.5MiB": 3 << 19, " 2 MiB ": 2 << 20, "1KB": 1000, "1MB": 1e6, "2GB": 2e9, "1TiB": 1 << 40,
	} {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "KiB", "-1", "1.3B", "x", "1QiB", "NaN", "1e30"} {
		if _, err := ParseSize(in); !errors.Is(err, ErrConfig) {
			t.Errorf("ParseSize(%q): %v, want ErrConfig", in, err)
		}
	}
}

func TestParseLists(t *testing.T) {
	sizes, err := ParseSizes("64KiB,256KiB, 1MiB")
	if err != nil || !slices.Equal(sizes, []int{64 << 10, 256 << 10, 1 << 20}) {
		t.Fatalf("sizes %v %v", sizes, err)
	}
	if _, err := ParseSizes("4GiB"); err == nil {
		t.Fatal("4GiB block accepted")
	}
	conns, err := ParseInts("1,8,32")
	if err != nil || !slices.Equal(conns, []int{1, 8, 32}) {
		t.Fatalf("conns %v %v", conns, err)
	}
	for _, bad := range []string{"", "0", "1,x", "-2"} {
		if _, err := ParseInts(bad); err == nil {
			t.Errorf("ParseInts(%q) accepted", bad)
		}
	}
	for in, want := range map[string][]string{"get": {OpGet}, "PUT": {OpPut}, "both": {OpPut, OpGet}} {
		if got, err := ParseOps(in); err != nil || !slices.Equal(got, want) {
			t.Errorf("ParseOps(%q) = %v %v", in, got, err)
		}
	}
	if _, err := ParseOps("scan"); err == nil {
		t.Fatal("op scan accepted")
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0B", 1000: "1000B", 1024: "1KiB", 64 << 10: "64KiB", 1 << 20: "1MiB", 3 << 19: "1.5MiB", 4 << 30: "4GiB",
	} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	var c Config
	c.applyDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Namespace.Tenant != client.DefaultTenant || c.Batch != 1 || len(c.Conns) != 3 {
		t.Fatalf("defaults: %+v", c)
	}
	for _, mod := range []func(*Config){
		func(c *Config) { c.Batch = -1 },
		func(c *Config) { c.Pipeline = -1 },
		func(c *Config) { c.Conns = []int{0} },
		func(c *Config) { c.Sizes = []int{8} },
		func(c *Config) { c.Ops = []string{"scan"} },
		func(c *Config) { c.Namespace.ModelID = "" },
	} {
		c2 := c
		mod(&c2)
		if err := c2.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("invalid config accepted: %v", err)
		}
	}
}

func TestStampVerify(t *testing.T) {
	k := client.BlockKey{1, 2, 3}
	for _, size := range []int{16, 100, 4096, 4104, 8200, 1 << 20} {
		b := make([]byte, size)
		fill(b, 9)
		stamp(b, seedOf(k))
		if !verify(b, seedOf(k), size) {
			t.Fatalf("size %d: stamped block does not verify", size)
		}
		if verify(b, seedOf(client.BlockKey{4}), size) || verify(b[:size-1], seedOf(k), size) {
			t.Fatalf("size %d: wrong key or length verifies", size)
		}
		b[len(b)-1] ^= 1
		if verify(b, seedOf(k), size) {
			t.Fatalf("size %d: damaged tail verifies", size)
		}
	}
}
