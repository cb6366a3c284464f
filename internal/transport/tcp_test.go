package transport

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"
	"unsafe"
)

// Bytes arrive intact over a real loopback TCP connection, the receipt
// claims one host copy and no DMA, and the bytes handed to writev are the
// slot memory itself: no user-space copy, no per-byte allocation.
func TestTCPOneHostCopy(t *testing.T) {
	regA, regB := newReg(t, 4, 64<<10), newReg(t, 4, 64<<10)
	c, s := tcpPair(t, false)
	ta, tb := newTCP(t, c, TCPConfig{}), newTCP(t, s, TCPConfig{})

	var written net.Buffers
	ta.hooks.beforeWrite = func(b net.Buffers) { written = append(net.Buffers(nil), b...) }
	if _, err := regA.Fence(7); err != nil {
		t.Fatal(err)
	}
	st := checkout(t, regA, "node-b", 3, 7)
	lens := []int{64 << 10, 1000, 12345}
	for i, n := range lens {
		fill(st, i, n, 1)
	}
	into := checkout(t, regB, "node-a", 4, 0)

	var wg sync.WaitGroup
	var rrc Receipt
	var rerr error
	wg.Go(func() { rrc, rerr = tb.Receive(context.Background(), into) })
	rc, err := ta.Submit(context.Background(), st)
	wg.Wait()
	if err != nil || rerr != nil {
		t.Fatalf("submit %v, receive %v", err, rerr)
	}
	samePayloads(t, into, st)
	if into.Payload(3) == nil || len(into.Payload(3)) != 0 {
		t.Fatal("a slot beyond the frame should have length 0")
	}
	want := Receipt{Transport: "tcp", Bytes: st.Bytes(), HostCopies: 1, Epoch: 7}
	if rc != want || rrc != want {
		t.Fatalf("receipts:\n submit  %+v\n receive %+v\n want    %+v", rc, rrc, want)
	}

	// writev got the header, then each slot's own memory.
	if len(written) != 1+len(lens) || len(written[0]) != frameFixed+4*len(lens) {
		t.Fatalf("wrote %d buffers (header %d bytes)", len(written), len(written[0]))
	}
	for i := range lens {
		if unsafe.SliceData(written[i+1]) != unsafe.SliceData(st.Slot(i)) || len(written[i+1]) != lens[i] {
			t.Fatalf("buffer %d is not slot %d's memory", i+1, i)
		}
	}
	ta.hooks.beforeWrite = nil

	// Allocation per Submit does not grow with the payload: a 64 KiB
	// stage costs (nearly) no allocations and far fewer bytes than it
	// carries, so nothing copied it through the heap.
	st.SetLen(1, 64<<10)
	st.SetLen(2, 64<<10)
	done := make(chan error, 1)
	go func() {
		for {
			if _, err := tb.Receive(context.Background(), into); err != nil {
				done <- err
				return
			}
		}
	}()
	submit := func() {
		if _, err := ta.Submit(context.Background(), st); err != nil {
			t.Fatal(err)
		}
	}
	allocs := testing.AllocsPerRun(50, submit)
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	const rounds = 50
	for range rounds {
		submit()
	}
	runtime.ReadMemStats(&m1)
	perSubmit := (m1.TotalAlloc - m0.TotalAlloc) / rounds
	t.Logf("per Submit of %d bytes: %.1f allocs, %d heap bytes", st.Bytes(), allocs, perSubmit)
	if allocs > 2 {
		t.Errorf("Submit allocates %.1f times", allocs)
	}
	if perSubmit > 4<<10 {
		t.Errorf("Submit of %d bytes allocated %d heap bytes", st.Bytes(), perSubmit)
	}
	if err := ta.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil {
		t.Fatal("receive loop ended without an error")
	}
	for _, x := range []struct {
		r  *Registry
		st *Stage
	}{{regA, st}, {regB, into}} {
		if err := x.r.Release(x.st); err != nil {
			t.Fatal(err)
		}
	}
}

// With MaxInFlight Submits admitted and a peer that does not read, the next
// Submit blocks (it never gets a turn) until its ctx deadline, and its
// stage is left untouched. Once the peer reads, the queue drains.
func TestTCPBackpressure(t *testing.T) {
	const n = 3
	const size = 1 << 20 // far beyond the shrunken socket buffers
	reg := newReg(t, n+1, size)
	c, s := tcpPair(t, true)
	ta := newTCP(t, c, TCPConfig{MaxInFlight: n, IOTimeout: time.Minute})
	admitted := make(chan struct{}, 2*n)
	waiting := make(chan struct{}, 2*n)
	ta.hooks.admitted = func() { admitted <- struct{}{} }
	ta.hooks.waiting = func() { waiting <- struct{}{} }

	stages := make([]*Stage, n+1)
	for i := range stages {
		stages[i] = checkout(t, reg, "peer", 1, 0)
		fill(stages[i], 0, size, uint64(i))
	}
	results := make(chan error, n)
	for i := range n {
		go func() {
			_, err := ta.Submit(context.Background(), stages[i])
			results <- err
		}()
	}
	for range n {
		<-admitted
	}
	// n admitted: one is inside writev on a full socket, the rest wait for
	// the connection.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := ta.Submit(ctx, stages[n])
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("submit %d: want the ctx deadline, got %v", n+1, err)
	}
	select {
	case <-waiting:
	default:
		t.Fatal("submit did not block for a turn")
	}
	select {
	case <-admitted:
		t.Fatal("the blocked submit was admitted")
	case err := <-results:
		t.Fatalf("an in-flight submit finished while the peer did not read: %v", err)
	default:
	}
	if st := checkStats(t, reg); st.Quarantined != 0 || st.CheckedOut != n+1 {
		t.Fatalf("%+v", st)
	}

	// The peer reads: every queued Submit completes, and the refused
	// stage goes through on retry.
	drained := make(chan int64, 1)
	go func() {
		m, _ := io.Copy(io.Discard, s)
		drained <- m
	}()
	for range n {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ta.Submit(context.Background(), stages[n]); err != nil {
		t.Fatal(err)
	}
	if err := ta.Close(); err != nil {
		t.Fatal(err)
	}
	frame := int64(frameFixed + 4 + size)
	if m := <-drained; m != (n+1)*frame {
		t.Fatalf("peer read %d bytes, want %d", m, (n+1)*frame)
	}
	for _, st := range stages {
		if err := reg.Release(st); err != nil {
			t.Fatal(err)
		}
	}
}

// A conn cut mid-write quarantines the stage's slots: they are not handed
// out again until Reclaim clears them, the stage has ended, and the
// transport refuses further Submits. A payload read cut short quarantines
// the receiving stage the same way.
func TestFailedTCPStageQuarantines(t *testing.T) {
	t.Run("submit", func(t *testing.T) {
		const size = 4 << 20
		reg := newReg(t, 4, size)
		c, s := tcpPair(t, true)
		ta := newTCP(t, c, TCPConfig{})
		st := checkout(t, reg, "peer", 2, 0)
		fill(st, 0, size, 1)
		fill(st, 1, size, 2)
		errc := make(chan error, 1)
		go func() {
			_, err := ta.Submit(context.Background(), st)
			errc <- err
		}()
		// The header and the first slot bytes are on the wire: the write
		// is under way. Then the peer resets the connection.
		buf := make([]byte, frameFixed+8+4096)
		if _, err := io.ReadFull(s, buf); err != nil {
			t.Fatal(err)
		}
		if got := binary.BigEndian.Uint32(buf[frameFixed:]); got != size {
			t.Fatalf("frame length %d", got)
		}
		if err := s.SetLinger(0); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		err := <-errc
		if !errors.Is(err, ErrStageQuarantined) {
			t.Fatalf("want ErrStageQuarantined, got %v", err)
		}
		stats := checkStats(t, reg)
		if stats.Quarantined != 2 || stats.CheckedOut != 0 || stats.Held != 0 {
			t.Fatalf("%+v", stats)
		}
		if err := reg.Release(st); !errors.Is(err, ErrStageEnded) {
			t.Fatalf("release after quarantine: %v", err)
		}
		// Quarantined slots are never handed out: only the 2 others are.
		if _, err := reg.Checkout("peer", 3, 0); !errors.Is(err, ErrNoSlots) {
			t.Fatalf("checkout reached quarantined slots: %v", err)
		}
		other := checkout(t, reg, "peer", 2, 0)
		for k := range 2 {
			if id := other.SlotID(k); id == st.SlotID(0) || id == st.SlotID(1) {
				t.Fatalf("quarantined slot %d handed out", id)
			}
		}
		other.SetLen(0, 10)
		if _, err := ta.Submit(context.Background(), other); !errors.Is(err, ErrBroken) {
			t.Fatalf("submit on a broken transport: %v", err)
		}
		if err := reg.Release(other); err != nil {
			t.Fatalf("a refused submit must leave the stage live: %v", err)
		}
		if n, err := reg.Reclaim(); n != 2 || err != nil {
			t.Fatalf("reclaim %d %v", n, err)
		}
		if stats := checkStats(t, reg); stats.Reclaimed != 2 || stats.Idle != 4 || stats.IdleBound != 2 {
			t.Fatalf("reclaimed slots should come back idle and unbound: %+v", stats)
		}
		all := checkout(t, reg, "peer", 4, 0)
		for k := range all.Len() {
			for _, b := range all.Slot(k) {
				if b != 0 {
					t.Fatalf("slot %d not cleared by reclaim", all.SlotID(k))
				}
			}
		}
		if err := reg.Release(all); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("receive", func(t *testing.T) {
		reg := newReg(t, 2, 64<<10)
		c, s := tcpPair(t, false)
		tb := newTCP(t, s, TCPConfig{})
		into := checkout(t, reg, "peer", 2, 0)
		var hdr [frameFixed + 4]byte
		hdr[0], hdr[1] = frameStage, frameVersion
		binary.BigEndian.PutUint16(hdr[2:], 1)
		binary.BigEndian.PutUint32(hdr[frameFixed:], 50000)
		if _, err := c.Write(append(hdr[:], make([]byte, 100)...)); err != nil {
			t.Fatal(err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		_, err := tb.Receive(context.Background(), into)
		if !errors.Is(err, ErrStageQuarantined) || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("want a quarantined short read, got %v", err)
		}
		if st := checkStats(t, reg); st.Quarantined != 2 {
			t.Fatalf("%+v", st)
		}
		if _, err := tb.Receive(context.Background(), endedStage(t, reg)); err == nil {
			t.Fatal("receive on a broken transport succeeded")
		}
	})
}

// endedStage returns a stage that already ended, for calls that must
// refuse before touching it.
func endedStage(t *testing.T, r *Registry) *Stage {
	t.Helper()
	if _, err := r.Reclaim(); err != nil {
		t.Fatal(err)
	}
	st := checkout(t, r, "x", 1, 0)
	if err := r.Release(st); err != nil {
		t.Fatal(err)
	}
	return st
}

// A Receive whose ctx ends before any byte of a frame arrived leaves the
// transport usable; malformed and oversized frames break it.
func TestTCPReceiveFraming(t *testing.T) {
	reg := newReg(t, 4, 4096)
	t.Run("timeout keeps the stream", func(t *testing.T) {
		c, s := tcpPair(t, false)
		ta, tb := newTCP(t, c, TCPConfig{}), newTCP(t, s, TCPConfig{})
		into := checkout(t, reg, "a", 1, 0)
		defer reg.Release(into)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		if _, err := tb.Receive(ctx, into); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("want deadline, got %v", err)
		}
		st := checkout(t, reg, "b", 1, 0)
		defer reg.Release(st)
		fill(st, 0, 4096, 3)
		var wg sync.WaitGroup
		var rerr error
		wg.Go(func() { _, rerr = tb.Receive(context.Background(), into) })
		if _, err := ta.Submit(context.Background(), st); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if rerr != nil {
			t.Fatal(rerr)
		}
		samePayloads(t, into, st)
	})
	for _, tc := range []struct {
		name  string
		frame []byte
		want  error
	}{
		{"bad type", []byte{'X', 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, ErrMalformed},
		{"bad version", []byte{frameStage, 9, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, ErrMalformed},
		{"reserved set", []byte{frameStage, 1, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0}, ErrMalformed},
		{"zero slots", []byte{frameStage, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, ErrMalformed},
		{"too many slots", []byte{frameStage, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1}, ErrTooLarge},
		{"slot too long", []byte{frameStage, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 1}, ErrTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, s := tcpPair(t, false)
			tb := newTCP(t, s, TCPConfig{})
			into := checkout(t, reg, "a", 1, 0)
			defer reg.Release(into)
			if _, err := c.Write(tc.frame); err != nil {
				t.Fatal(err)
			}
			if _, err := tb.Receive(context.Background(), into); !errors.Is(err, tc.want) {
				t.Fatalf("want %v, got %v", tc.want, err)
			}
			if _, err := tb.Receive(context.Background(), into); !errors.Is(err, ErrBroken) {
				t.Fatalf("next receive: want ErrBroken, got %v", err)
			}
			if st := checkStats(t, reg); st.Quarantined != 0 {
				t.Fatalf("a rejected header must not quarantine: %+v", st)
			}
		})
	}
}

func TestTCPConfig(t *testing.T) {
	c, _ := tcpPair(t, false)
	for _, cfg := range []TCPConfig{{MaxInFlight: -1}, {MaxInFlight: 1025}, {IOTimeout: -time.Second}} {
		if _, err := NewTCP(c, cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v", cfg, err)
		}
	}
	p1, p2 := net.Pipe()
	defer p2.Close()
	tr := newTCP(t, p1, TCPConfig{})
	if tr.hostCopies != HostCopiesUnknown {
		t.Fatal("a non-TCP conn must not claim one host copy")
	}
}
