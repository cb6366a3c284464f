package cold_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/cold/coldtest"
	"github.com/gpucache/gpucache/internal/degrade"
)

// The decorator with no faults armed is a Store like any other: the shared
// suite passes through it, sentinels and all.
func TestDegradedStoreSuite(t *testing.T) {
	t.Run("mem", func(t *testing.T) {
		coldtest.RunStoreSuite(t, func(t *testing.T) cold.Store {
			return cold.WithDegrade(cold.NewMem(), &degrade.Registry{}, time.Minute)
		})
	})
	t.Run("fs", func(t *testing.T) {
		coldtest.RunStoreSuite(t, func(t *testing.T) cold.Store { return cold.WithDegrade(newFS(t), nil, 0) })
	})
}

// An armed fault of the backend never reaches it: Fail fails at once, Hang
// at the budget, both as ErrUnavailable wrapping a miss that names the
// fault. A fault another backend names does nothing here.
func TestWithDegradeChecksTheBackendsFaults(t *testing.T) {
	if got := cold.DegradeFaults(cold.NewMem()); got != nil {
		t.Fatalf("mem names faults %v", got)
	}
	for _, tc := range []struct {
		fault degrade.Fault
		mode  degrade.Mode
		after time.Duration
	}{
		{degrade.StorageLoss, degrade.Fail, 0},
		{degrade.NVMeTimeout, degrade.Hang, 250 * time.Millisecond},
	} {
		t.Run(string(tc.fault), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				fs := newFS(t)
				if err := fs.Put(ctx, "a/b", []byte("payload"), cold.PutOptions{}); err != nil {
					t.Fatal(err)
				}
				reg := &degrade.Registry{}
				s := cold.WithDegrade(fs, reg, 250*time.Millisecond)
				defer reg.Arm(degrade.S3Unavailable, degrade.Fail)() // not this backend's
				dst := make([]byte, 7)
				if err := s.RangeGet(ctx, "a/b", 0, dst); err != nil || string(dst) != "payload" {
					t.Fatalf("unarmed read: %q %v", dst, err)
				}
				disarm := reg.Arm(tc.fault, tc.mode)
				clear(dst)
				start := time.Now()
				err := s.RangeGet(ctx, "a/b", 0, dst)
				var m *degrade.Miss
				if !errors.Is(err, cold.ErrUnavailable) || !errors.As(err, &m) || m.Fault != tc.fault || string(dst) != "\x00\x00\x00\x00\x00\x00\x00" {
					t.Fatalf("read under %s: %q %v", tc.fault, dst, err)
				}
				if el := time.Since(start); el != tc.after {
					t.Fatalf("miss after %v, want %v", el, tc.after)
				}
				if err := s.Put(ctx, "a/c", []byte("x"), cold.PutOptions{}); !errors.Is(err, cold.ErrUnavailable) || !errors.Is(err, degrade.ErrMiss) {
					t.Fatalf("put under %s: %v", tc.fault, err)
				}
				if _, err := fs.Head(ctx, "a/c"); !errors.Is(err, cold.ErrNotFound) {
					t.Fatalf("a put under %s reached the store: %v", tc.fault, err)
				}
				disarm()
				if reg.Hits(tc.fault) != 2 || reg.Hits(degrade.S3Unavailable) != 0 {
					t.Fatalf("hits %d / %d", reg.Hits(tc.fault), reg.Hits(degrade.S3Unavailable))
				}
				// A real failure is a miss too, and keeps its sentinel.
				if _, err := s.Head(ctx, "missing"); !errors.Is(err, cold.ErrNotFound) || !errors.Is(err, degrade.ErrMiss) {
					t.Fatalf("head of a missing key: %v", err)
				}
			})
		})
	}
}
