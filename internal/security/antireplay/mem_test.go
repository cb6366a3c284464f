package antireplay

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// nonceBytes is what the memory bound (OPERATIONS.md, replay_max_nonces ×
// 128 B) charges per remembered nonce.
const nonceBytes = 128

// TestNonceBytes checks the memory bound's charge per nonce against the heap
// a tenant's nonce memory holds in steady state: a stream of stamps that
// has run for many windows, so that expired nonces have been deleted from
// the map and the age heap many times over, below and at the tenant's
// budget.
func TestNonceBytes(t *testing.T) {
	for _, perWindow := range []int{40_000, 1 << 16, 2 << 16} {
		t.Run(fmt.Sprintf("stamps_per_window=%d", perWindow), func(t *testing.T) {
			c := newClock()
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			w, err := New(Config{Window: 5 * time.Minute, MaxNonces: 1 << 20, TenantNonces: 1 << 16, Now: c.Now})
			if err != nil {
				t.Fatal(err)
			}
			step := 5 * time.Minute / time.Duration(perWindow)
			var refused int
			for i := range 4 * perWindow {
				if err := w.check("alpha", c.Now().UnixNano(), nonce(uint64(i))); err != nil {
					refused++
				}
				c.Advance(step)
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			n := w.Len()
			per := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
			t.Logf("%d nonces remembered after 4 windows (%d refused): %.0f heap bytes each", n, refused, per)
			if n == 0 || n > 1<<16 {
				t.Fatalf("%d nonces remembered, want 1..%d", n, 1<<16)
			}
			if per > nonceBytes {
				t.Fatalf("%.0f heap bytes per remembered nonce, the memory bound charges %d", per, nonceBytes)
			}
			runtime.KeepAlive(w)
		})
	}
}
