package tier

import (
	"context"
	"testing"

	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/lower"
	"github.com/gpucache/gpucache/internal/lower/lowertest"
)

// TestBelowConforms: the cold tier passes the suite every tier below DRAM
// passes, alone and under an upper tier, on the in-memory store and on
// the fs store (the S3 store is the same cold.Store contract, run against
// versitygw in cold/s3store's shared suite).
func TestBelowConforms(t *testing.T) {
	stores := map[string]func(t *testing.T) cold.Store{
		"mem": func(*testing.T) cold.Store { return cold.NewMem() },
		"fs": func(t *testing.T) cold.Store {
			fs, err := cold.NewFS(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return fs
		},
	}
	for name, store := range stores {
		t.Run(name, func(t *testing.T) {
			newBelow := func(t *testing.T) (Below, func(*testing.T)) {
				tr := newTier(t, store(t), nil)
				return Below{Tier: tr}, func(t *testing.T) {
					if rep := tr.Flush(context.Background(), true); rep.Failed > 0 {
						t.Fatalf("flush: %+v", rep)
					}
				}
			}
			lowertest.Run(t, func(t *testing.T) lowertest.Harness {
				b, settle := newBelow(t)
				return lowertest.Harness{Tier: b, Settle: settle}
			})
			t.Run("UnderMem", func(t *testing.T) {
				lowertest.Run(t, func(t *testing.T) lowertest.Harness {
					b, settle := newBelow(t)
					return lowertest.Harness{Tier: lower.NewChain(true, &lowertest.Mem{Name: "upper", Limit: 64 << 10}, b), Settle: settle}
				})
			})
		})
	}
}
