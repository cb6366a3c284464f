package config

import (
	"io"
	"strings"
	"testing"
)

// TestFlashSettings: the flash tier is off by default; on, its settings
// are checked and every refusal names the setting at fault.
func TestFlashSettings(t *testing.T) {
	c, err := Load(nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.FlashEnabled() || c.FlashCold != FlashColdThrough || c.FlashReclaim != FlashReclaimOldest || c.FlashSegment != 256<<20 {
		t.Fatalf("flash defaults: dir %q cold %q reclaim %q segment %s", c.FlashDir, c.FlashCold, c.FlashReclaim, c.FlashSegment)
	}
	dir := t.TempDir()
	on := []string{"--flash-dir", dir, "--flash-capacity", "1GiB"}
	c, err = Load(on, env(nil), io.Discard)
	if err != nil || !c.FlashEnabled() || c.FlashCapacity != 1<<30 {
		t.Fatalf("flash on: %v (%+v)", err, c.FlashCapacity)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--flash-dir", dir}, "flash_capacity"},
		{append(on, "--flash-segment", "512KiB"), "flash_segment"},
		{append(on, "--flash-segment", "64MiB"), "flash_segment 64MiB cannot hold two hot_max_class"},
		{append(on, "--flash-capacity", "300MiB"), "at least two flash_segment"},
		{append(on, "--flash-write-buffer", "1MiB"), "flash_write_buffer"},
		{append(on, "--flash-cold", "later"), "flash_cold"},
		{append(on, "--flash-reclaim", "random"), "flash_reclaim"},
		{append(on, "--flash-direct", "maybe"), "flash_direct"},
		{append(on, "--flash-cold", "reclaim", "--cold-store", "off"), "flash_cold: reclaim"},
	} {
		if _, err := Load(tc.args, env(nil), io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error mentioning %q", tc.args, err, tc.want)
		}
	}
}
