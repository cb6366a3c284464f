package transport

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// OpenNIXL refuses in the default build, with or without a device present,
// and says NOT_RUN_HARDWARE. (nixl_rdma_test.go covers the rdma_nixl build.)
func TestNIXLOpenRefuses(t *testing.T) {
	dev := t.TempDir()
	if err := os.WriteFile(filepath.Join(dev, "uverbs0"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []NIXLConfig{{}, {DevicePath: dev}, {DevicePath: filepath.Join(dev, "absent")}} {
		tr, err := OpenNIXL(cfg)
		if tr != nil {
			t.Fatalf("%+v: OpenNIXL returned a transport", cfg)
		}
		if !errors.Is(err, ErrNotLinked) || !strings.Contains(err.Error(), NotRunHardware) {
			t.Fatalf("%+v: want ErrNotLinked naming %s, got %v", cfg, NotRunHardware, err)
		}
	}
	st := RDMA()
	if st.Linked || st.Label != NotRunHardware || st.BuildTag != rdmaNIXLTag {
		t.Fatalf("RDMA() = %+v", st)
	}
}

// refusingRDMA stands for an RDMA transport that opened but refuses each
// Submit with ErrNotLinked before posting.
type refusingRDMA struct{ calls, posted int }

func (r *refusingRDMA) Name() string { return "nixl" }
func (r *refusingRDMA) Submit(context.Context, *Stage) (Receipt, error) {
	r.calls++
	return Receipt{Transport: "nixl"}, ErrNotLinked
}
func (r *refusingRDMA) Close() error { return nil }

// With RDMA refused (nil, or refusing), SubmitPreferringRDMA carries the
// bytes over TCP, posts nothing, and labels the receipt RdmaNotLinked,
// DMAPosted=false, NOT_RUN_HARDWARE.
func TestSubmitPreferringRDMAFallsBackToTCP(t *testing.T) {
	reg := newReg(t, 4, 16<<10)
	c, s := tcpPair(t, false)
	tcp, peer := newTCP(t, c, TCPConfig{}), newTCP(t, s, TCPConfig{})
	rdma, err := OpenNIXL(NIXLConfig{})
	if rdma != nil || !errors.Is(err, ErrNotLinked) {
		t.Fatalf("OpenNIXL: %v, %v", rdma, err)
	}
	st := checkout(t, reg, "peer", 2, 0)
	defer reg.Release(st)
	into := checkout(t, reg, "self", 2, 0)
	defer reg.Release(into)
	fill(st, 0, 16<<10, 1)
	fill(st, 1, 333, 2)

	fake := &refusingRDMA{}
	for _, pref := range []Transport{rdma, fake} {
		var wg sync.WaitGroup
		var rerr error
		wg.Go(func() { _, rerr = peer.Receive(context.Background(), into) })
		rc, err := SubmitPreferringRDMA(context.Background(), pref, tcp, st)
		wg.Wait()
		if err != nil || rerr != nil {
			t.Fatalf("submit %v receive %v", err, rerr)
		}
		samePayloads(t, into, st)
		want := Receipt{Transport: "tcp", Bytes: st.Bytes(), HostCopies: 1, DMAPosted: false,
			Fallback: FallbackRdmaNotLinked, Label: NotRunHardware}
		if rc != want {
			t.Fatalf("receipt %+v, want %+v", rc, want)
		}
		if rc.Fallback.String() != "RdmaNotLinked" {
			t.Fatalf("fallback prints %q", rc.Fallback)
		}
	}
	if fake.calls != 1 || fake.posted != 0 {
		t.Fatalf("rdma tried %d times, posted %d", fake.calls, fake.posted)
	}
	rc, err := SubmitPreferringRDMA(context.Background(), nil, nil, st)
	if !errors.Is(err, ErrNoTransport) || rc.DMAPosted || rc.Label != NotRunHardware {
		t.Fatalf("no tcp: %+v %v", rc, err)
	}
}
