package flash

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpucache/gpucache/internal/lower/lowertest"
)

// TestConformance runs the lower.Tier suite on the tier, with O_DIRECT
// and with buffered I/O.
func TestConformance(t *testing.T) {
	t.Logf("t.TempDir is on %s", fsType(t.TempDir()))
	for _, mode := range []string{DirectOn, DirectOff} {
		t.Run(mode, func(t *testing.T) {
			if mode == DirectOn {
				if _, err := probeDir(osFS{}, t.TempDir(), DirectOn); err != nil {
					t.Skipf("no O_DIRECT here: %v", err)
				}
			}
			lowertest.Run(t, func(t *testing.T) lowertest.Harness {
				cfg := testConfig(t)
				cfg.Direct = mode
				tr := openTier(t, cfg)
				if tr.Direct() != (mode == DirectOn) {
					t.Fatalf("Direct %q: Direct() = %v", mode, tr.Direct())
				}
				return lowertest.Harness{Tier: tr, Settle: func(t *testing.T) { flush(t, tr) }}
			})
		})
	}
}

// TestDirectAutoFallsBack: a file system that refuses O_DIRECT gives a
// buffered tier in auto mode (flash_direct 0) and an error naming the
// directory in on mode.
func TestDirectAutoFallsBack(t *testing.T) {
	cfg := testConfig(t)
	cfg.fs = &testFS{refuseDirect: true}
	tr := openTier(t, cfg)
	if tr.Direct() || stat(t, tr, "flash_direct") != 0 {
		t.Fatal("auto on a file system refusing O_DIRECT reports direct I/O")
	}
	bs := blocks(t, "acme", "m1", 3, 8192, 5000)
	put(t, tr, bs...)
	flush(t, tr)
	mustRead(t, tr, bs...)

	cfg = testConfig(t)
	cfg.fs = &testFS{refuseDirect: true}
	cfg.Direct = DirectOn
	if _, err := Open(cfg); !errors.Is(err, ErrDir) || !strings.Contains(err.Error(), cfg.Dir) {
		t.Fatalf("Direct on without O_DIRECT: %v", err)
	}

	cfg = testConfig(t)
	if oDirect != 0 {
		tr := openTier(t, cfg)
		if !tr.Direct() || stat(t, tr, "flash_direct") != 1 {
			t.Skipf("auto gave buffered I/O on %s", fsType(cfg.Dir))
		}
	}
}

func TestOpenRefusesABadDir(t *testing.T) {
	dir := t.TempDir()
	notDir := filepath.Join(dir, "file")
	if err := os.WriteFile(notDir, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Dir: notDir, Capacity: 4 * mib, SegmentBytes: mib}
	if _, err := Open(cfg); !errors.Is(err, ErrDir) || !strings.Contains(err.Error(), notDir) {
		t.Fatalf("a file as Dir: %v", err)
	}
	missing := filepath.Join(dir, "a", "b")
	cfg.Dir = missing
	tr, err := Open(cfg)
	if err != nil {
		t.Fatalf("a missing Dir is created: %v", err)
	}
	closeTier(t, tr)

	if os.Geteuid() != 0 {
		ro := filepath.Join(dir, "ro")
		if err := os.Mkdir(ro, 0o500); err != nil {
			t.Fatal(err)
		}
		cfg.Dir = ro
		if _, err := Open(cfg); !errors.Is(err, ErrDir) || !strings.Contains(err.Error(), ro) {
			t.Fatalf("a read-only Dir: %v", err)
		}
	} else {
		t.Log("running as root: a read-only directory is writable, not checked")
	}

	for _, bad := range []Config{
		{Capacity: 4 * mib},
		{Dir: dir, Capacity: mib, SegmentBytes: mib},
		{Dir: dir, Capacity: 8 * mib, SegmentBytes: mib + 1},
		{Dir: dir, Capacity: 8 * mib, SegmentBytes: 512 * kib},
		{Dir: dir, Capacity: 8 * mib, SegmentBytes: mib, Reclaim: "newest"},
		{Dir: dir, Capacity: 8 * mib, SegmentBytes: mib, Direct: "maybe"},
		{Dir: dir, Capacity: 8 * mib, SegmentBytes: mib, TenantQuotas: map[string]int64{"a": -1}},
	} {
		if _, err := Open(bad); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}

// TestUnknownFilesAndVersionsAreLeftAlone: files that are not segments
// and a segment of a newer format are logged, counted and left on disk;
// the tier's new segments number past them.
func TestUnknownFilesAndVersionsAreLeftAlone(t *testing.T) {
	cfg := testConfig(t)
	newer := filepath.Join(cfg.Dir, segName(7))
	hb := make([]byte, segHeaderSize)
	encodeSegHeader(hb, 7, mib)
	hb[shVersion] = 2
	refreshSegCRC(hb)
	if err := os.WriteFile(newer, hb, 0o600); err != nil {
		t.Fatal(err)
	}
	others := []string{"notes.txt", "seg-0000000000000001.flash.tmp", "seg-zz.flash"}
	for _, n := range others {
		if err := os.WriteFile(filepath.Join(cfg.Dir, n), []byte("keep"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	logs := &logCounter{}
	cfg.Logger = slogNew(logs)
	tr := openTier(t, cfg)
	if got := stat(t, tr, "flash_segments_skipped"); got != 1 {
		t.Fatalf("flash_segments_skipped = %d", got)
	}
	if logs.count("not segments") != 1 || logs.count("unknown format version") != 1 {
		t.Fatalf("logs: %q", logs.msgs)
	}
	bs := blocks(t, "acme", "m1", 2)
	put(t, tr, bs...)
	flush(t, tr)
	if s, _ := location(t, tr, bs[0]); s.seq != 8 {
		t.Fatalf("first new segment is %d, want 8 (past the skipped 7)", s.seq)
	}
	closeTier(t, tr)
	for _, n := range append(others, segName(7)) {
		if _, err := os.Stat(filepath.Join(cfg.Dir, n)); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
}
