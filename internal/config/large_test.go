package config

import (
	"errors"
	"io"
	"strings"
	"testing"
)

// TestDefaultsHoldA64MiBBlock (ADR 0015): the embedded default takes a
// 64 MiB block, and every budget downstream holds one: a PUT or GET frame
// with room for its table, a tenant's hold share, the cold write-behind's
// pending bytes with the block's metadata allowance.
func TestDefaultsHoldA64MiBBlock(t *testing.T) {
	c, err := Load(nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	const block = 64 << 20
	if c.HotMaxClass < block {
		t.Fatalf("hot_max_class %s, want at least 64MiB", c.HotMaxClass)
	}
	if int64(c.MaxFrame) < int64(c.HotMaxClass)+1<<20 {
		t.Fatalf("max_frame %s cannot carry a %s block and a 1MiB table", c.MaxFrame, c.HotMaxClass)
	}
	if c.TenantHoldCap() < int64(c.HotMaxClass) {
		t.Fatalf("tenant hold share %d below one block", c.TenantHoldCap())
	}
	if c.ColdPending < c.HotMaxClass+ColdBlockOverhead {
		t.Fatalf("cold_pending %s cannot hold one %s block with its metadata", c.ColdPending, c.HotMaxClass)
	}
}

// TestColdPendingMustHoldTheLargestBlock: a cold_pending that cannot hold
// one hot_max_class block plus its metadata is refused with a message
// naming both settings and the least value, unless nothing is written
// behind.
func TestColdPendingMustHoldTheLargestBlock(t *testing.T) {
	_, err := Load([]string{"--cold-pending", "64MiB"}, env(nil), io.Discard)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "cold_pending 64MiB cannot hold one hot_max_class block (64MiB)") ||
		!strings.Contains(err.Error(), "at least 65MiB") {
		t.Fatalf("cold_pending below one block: %v", err)
	}
	for _, args := range [][]string{
		{"--cold-pending", "65MiB"},
		{"--cold-pending", "64MiB", "--hot-max-class", "32MiB"},
		{"--cold-pending", "1MiB", "--cold-store", "off"},
		{"--cold-pending", "1MiB", "--cold-write-behind=false", "--cold-spill-on-drain=false"},
	} {
		if _, err := Load(args, env(nil), io.Discard); err != nil {
			t.Errorf("%v: %v", args, err)
		}
	}
	_, err = Load([]string{"--hot-max-class", "128MiB", "--cold-pending", "1GiB"}, env(nil), io.Discard)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "max_frame 65MiB must hold one hot_max_class block (128MiB)") ||
		!strings.Contains(err.Error(), "(129MiB)") {
		t.Fatalf("max_frame below hot_max_class: %v", err)
	}
	if _, err := Load([]string{"--hot-max-class", "128MiB", "--max-frame", "129MiB"}, env(nil), io.Discard); err != nil {
		t.Fatalf("128MiB blocks with max_frame 129MiB and the default cold_pending: %v", err)
	}
}
