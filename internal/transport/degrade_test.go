package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/gpucache/gpucache/internal/degrade"
)

const testSubmitBudget = 200 * time.Millisecond

// receiveInto runs r.Receive(into) on a goroutine and sends its outcome: a
// receipt that reports delivery is turned into an error, so a test that
// expects no delivery checks one value.
func receiveInto(r receiver, into *Stage) <-chan error {
	out := make(chan error, 1)
	go func() {
		rc, err := r.Receive(context.Background(), into)
		if err == nil {
			err = fmt.Errorf("delivered: %+v", rc)
		}
		out <- err
	}()
	return out
}

// checkMiss asserts a Submit under fault is a miss that names it, ended the
// stage (quarantined), reports nothing delivered, and answered in el:
// exactly want when exact (synctest), else within testSubmitBudget+50ms.
func checkMiss(t *testing.T, rc Receipt, err error, fault degrade.Fault, el, want time.Duration, exact bool) {
	t.Helper()
	var m *degrade.Miss
	if !errors.Is(err, degrade.ErrMiss) || !errors.As(err, &m) || m.Fault != fault || !errors.Is(err, ErrStageQuarantined) {
		t.Fatalf("submit under %s: %v", fault, err)
	}
	if rc != (Receipt{}) {
		t.Fatalf("submit under %s reported %+v", fault, rc)
	}
	if exact && el != want {
		t.Fatalf("submit under %s: miss after %v, want exactly %v", fault, el, want)
	}
	if !exact && el > testSubmitBudget+50*time.Millisecond {
		t.Fatalf("submit under %s: miss after %v, budget %v", fault, el, testSubmitBudget)
	}
}

// hangTime is the time to a miss of a fault armed in mode.
func hangTime(mode degrade.Mode) time.Duration {
	if mode == degrade.Hang {
		return testSubmitBudget
	}
	return 0
}

// TestDegradeNICFlap: the TCP link drops in the middle of a frame, over a
// real loopback connection. The Submit is a miss within the budget, its
// stage quarantined; the peer reads a cut frame, quarantines its stage and
// delivers nothing; the transport is broken (redial); no slot leaks.
func TestDegradeNICFlap(t *testing.T) {
	for _, mode := range []degrade.Mode{degrade.Fail, degrade.Hang} {
		t.Run(fmt.Sprint(mode), func(t *testing.T) {
			faults := &degrade.Registry{}
			reg := newReg(t, 6, 64<<10)
			c, s := tcpPair(t, false)
			tx := Bounded(newTCP(t, c, TCPConfig{Faults: faults}), testSubmitBudget)
			rx := newTCP(t, s, TCPConfig{})
			st := checkout(t, reg, "peer", 2, 0)
			fill(st, 0, 64<<10, 1)
			fill(st, 1, 64<<10, 2)
			into := checkout(t, reg, "peer", 2, 0)
			got := receiveInto(rx, into)

			disarm := faults.Arm(degrade.NICFlap, mode)
			start := time.Now()
			rc, err := tx.Submit(context.Background(), st)
			checkMiss(t, rc, err, degrade.NICFlap, time.Since(start), hangTime(mode), false)
			if err := <-got; !errors.Is(err, ErrStageQuarantined) || !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("peer of a cut frame: %v", err)
			}
			disarm()
			if faults.Hits(degrade.NICFlap) != 1 {
				t.Fatalf("hits %d", faults.Hits(degrade.NICFlap))
			}
			if stats := checkStats(t, reg); stats.Quarantined != 4 || stats.CheckedOut != 0 || stats.Held != 0 {
				t.Fatalf("after the flap: %+v", stats)
			}
			for _, x := range []*Stage{st, into} {
				if err := reg.Release(x); !errors.Is(err, ErrStageEnded) {
					t.Fatalf("a quarantined stage released: %v", err)
				}
			}
			// The stream lost its framing: the link must be redialled.
			next := checkout(t, reg, "peer", 1, 0)
			next.SetLen(0, 10)
			if _, err := tx.Submit(context.Background(), next); !errors.Is(err, ErrBroken) || !errors.Is(err, degrade.ErrMiss) {
				t.Fatalf("submit after the flap: %v", err)
			}
			if err := reg.Release(next); err != nil {
				t.Fatal(err)
			}
			if n, err := reg.Reclaim(); n != 4 || err != nil {
				t.Fatalf("reclaim %d %v", n, err)
			}
		})
	}
}

// A transfer whose stage is invalidated while it runs reports no delivery,
// on TCP too: the check is after the bytes moved.
func TestInvalidatedStageIsNotDelivered(t *testing.T) {
	reg := newReg(t, 4, 4096)
	c, s := tcpPair(t, false)
	ta, tb := newTCP(t, c, TCPConfig{}), newTCP(t, s, TCPConfig{})
	st := checkout(t, reg, "peer", 1, 0)
	fill(st, 0, 4096, 1)
	into := checkout(t, reg, "peer", 1, 0)
	ta.hooks.beforeWrite = func(net.Buffers) {
		if _, _, err := reg.Invalidate(); err != nil {
			t.Error(err)
		}
	}
	got := receiveInto(tb, into)
	if rc, err := ta.Submit(context.Background(), st); !errors.Is(err, ErrStageQuarantined) || rc.Bytes != 0 {
		t.Fatalf("submit of an invalidated stage: %+v %v", rc, err)
	}
	// The peer's stage ended too: before its Receive took hold of it
	// (ErrStageEnded) or while it held it (ErrStageQuarantined).
	if err := <-got; !errors.Is(err, ErrStageQuarantined) && !errors.Is(err, ErrStageEnded) {
		t.Fatalf("receive into an invalidated stage: %v", err)
	}
	if stats := checkStats(t, reg); stats.Quarantined != 2 || stats.Held != 0 || stats.Epoch != 1 {
		t.Fatalf("%+v", stats)
	}
	if n, err := reg.Reclaim(); n != 2 || err != nil {
		t.Fatalf("reclaim %d %v", n, err)
	}
}

// A nil engine stays nil behind Bounded.
func TestBoundedNil(t *testing.T) {
	if tr := Bounded(nil, time.Second); tr != nil {
		t.Fatalf("Bounded(nil) = %v", tr)
	}
}
