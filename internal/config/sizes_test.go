package config

import (
	"log/slog"
	"testing"
)

// TestSizeAttrs: every size setting is described in bytes and binary
// units; "1GB" is shown as 10^9 bytes, not 1 GiB.
func TestSizeAttrs(t *testing.T) {
	cfg := Default()
	var err error
	if cfg.HotCapacity, err = ParseByteSize("1GB"); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, a := range SizeAttrs(cfg) {
		at := a.(slog.Attr)
		got[at.Key] = at.Value.String()
	}
	if got["hot_capacity"] != "1000000000 bytes (953.67 MiB)" {
		t.Fatalf("hot_capacity logged as %q", got["hot_capacity"])
	}
	for _, name := range []string{"hot_slab", "hot_max_class", "max_frame", "request_buffers", "cold_pending"} {
		if got[name] == "" {
			t.Errorf("size setting %s is not logged (have %v)", name, got)
		}
	}
}
