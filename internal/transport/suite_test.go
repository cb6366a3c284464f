package transport

import (
	"context"
	"errors"
	"sync"
	"testing"
)

// receiver is the receive half the shared suite drives; TCP and Mem have it.
type receiver interface {
	Receive(ctx context.Context, into *Stage) (Receipt, error)
}

// pairFunc makes a connected sender and receiver, closed at cleanup.
type pairFunc func(t *testing.T) (Transport, receiver)

// TestTransportSuite runs the behaviour every Transport shares.
func TestTransportSuite(t *testing.T) {
	t.Run("tcp", func(t *testing.T) {
		testTransportBehavior(t, "tcp", func(t *testing.T) (Transport, receiver) {
			c, s := tcpPair(t, false)
			return newTCP(t, c, TCPConfig{}), newTCP(t, s, TCPConfig{})
		})
	})
	t.Run("mem", func(t *testing.T) {
		testTransportBehavior(t, "mem", func(t *testing.T) (Transport, receiver) {
			a, b, err := NewMemPair(0)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { a.Close() })
			return a, b
		})
	})
}

func testTransportBehavior(t *testing.T, name string, mk pairFunc) {
	reg := newReg(t, 8, 16<<10)

	t.Run("round trip", func(t *testing.T) {
		tx, rx := mk(t)
		if tx.Name() != name {
			t.Fatalf("name %q", tx.Name())
		}
		st := checkout(t, reg, "rx", 3, 0)
		defer reg.Release(st)
		into := checkout(t, reg, "tx", 3, 0)
		defer reg.Release(into)
		for round, lens := range [][]int{{16 << 10, 1, 0}, {0, 0, 0}, {5, 16 << 10, 7}} {
			for i, n := range lens {
				fill(st, i, n, uint64(round))
			}
			var wg sync.WaitGroup
			var rrc Receipt
			var rerr error
			wg.Go(func() { rrc, rerr = rx.Receive(context.Background(), into) })
			rc, err := tx.Submit(context.Background(), st)
			wg.Wait()
			if err != nil || rerr != nil {
				t.Fatalf("round %d: submit %v receive %v", round, err, rerr)
			}
			samePayloads(t, into, st)
			want := Receipt{Transport: name, Bytes: st.Bytes(), HostCopies: 1}
			if rc != want || rrc != want {
				t.Fatalf("round %d receipts %+v / %+v, want %+v", round, rc, rrc, want)
			}
		}
	})

	t.Run("ended stage is refused", func(t *testing.T) {
		tx, _ := mk(t)
		st := checkout(t, reg, "rx", 1, 0)
		if err := reg.Release(st); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Submit(context.Background(), st); !errors.Is(err, ErrStageEnded) {
			t.Fatalf("want ErrStageEnded, got %v", err)
		}
	})

	t.Run("cancelled ctx leaves the stage", func(t *testing.T) {
		tx, _ := mk(t)
		st := checkout(t, reg, "rx", 1, 0)
		st.SetLen(0, 100)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := tx.Submit(ctx, st); !errors.Is(err, context.Canceled) {
			t.Fatalf("want Canceled, got %v", err)
		}
		if err := reg.Release(st); err != nil {
			t.Fatalf("stage should still be live: %v", err)
		}
	})

	t.Run("closed", func(t *testing.T) {
		tx, _ := mk(t)
		if err := tx.Close(); err != nil {
			t.Fatal(err)
		}
		if err := tx.Close(); err != nil {
			t.Fatalf("second close: %v", err)
		}
		st := checkout(t, reg, "rx", 1, 0)
		if _, err := tx.Submit(context.Background(), st); !errors.Is(err, ErrClosed) {
			t.Fatalf("want ErrClosed, got %v", err)
		}
		if err := reg.Release(st); err != nil {
			t.Fatalf("stage should still be live: %v", err)
		}
	})

	t.Run("frame larger than the stage", func(t *testing.T) {
		tx, rx := mk(t)
		st := checkout(t, reg, "rx", 2, 0)
		defer reg.Release(st)
		into := checkout(t, reg, "tx", 1, 0)
		defer reg.Release(into)
		fill(st, 0, 10, 1)
		fill(st, 1, 10, 2)
		done := make(chan error, 1)
		go func() {
			_, err := tx.Submit(context.Background(), st)
			done <- err
		}()
		if _, err := rx.Receive(context.Background(), into); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("want ErrTooLarge, got %v", err)
		}
		tx.Close() // unblocks a TCP sender whose peer stopped reading
		<-done
		if st := checkStats(t, reg); st.Quarantined != 0 {
			t.Fatalf("%+v", st)
		}
	})
}
