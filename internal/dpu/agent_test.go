package dpu

import (
	"bytes"
	"context"
	"errors"
	"testing"
)

// Start runs the agent, in simulation, and never sets offload_active: both
// opens were refused with NOT_RUN_HARDWARE and the queue it runs still
// round-trips bytes, every completion labelled.
func TestArmAgentStartLeavesOffloadInactive(t *testing.T) {
	a, err := NewArmAgent(AgentConfig{Queue: QueueConfig{Slots: 2, SlotSize: 512, Depth: 2, Blocks: 2}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if st := a.Status(); st.OffloadActive || st.Simulated || a.Queue() != nil {
		t.Fatalf("before start: %+v", st)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := a.Status()
	if st.OffloadActive || st.Hardware != NotRunHardware || !st.Simulated || len(st.Refusals) != 2 {
		t.Fatalf("after start: %+v", st)
	}
	for _, err := range st.Refusals {
		if !errors.Is(err, ErrNotRunHardware) {
			t.Fatalf("refusal %v", err)
		}
	}
	if err := a.Start(context.Background()); err == nil {
		t.Fatal("second start")
	}
	q := a.Queue()
	copy(q.Slot(0), "kv")
	if err := q.Submit(Command{Op: OpWrite, Slot: 0, Len: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.WaitReap(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := q.Submit(Command{Op: OpRead, Slot: 1}); err != nil {
		t.Fatal(err)
	}
	c, err := q.WaitReap(context.Background())
	if err != nil || c.Label != NotRunHardware || !bytes.Equal(q.Slot(1)[:c.Len], []byte("kv")) {
		t.Fatalf("%+v %v", c, err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if a.Status().OffloadActive {
		t.Fatal("offload active after close")
	}
	if err := a.Start(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("start after close: %v", err)
	}
	if _, err := NewArmAgent(AgentConfig{Queue: QueueConfig{Depth: -1}}); !errors.Is(err, ErrConfig) {
		t.Fatalf("bad config: %v", err)
	}
}

// The ablation knobs only announce NOT_RUN_HARDWARE.
func TestAblationNotices(t *testing.T) {
	if n := (Ablation{}).Notices(); len(n) != 0 {
		t.Fatalf("off: %v", n)
	}
	n := Ablation{P2P: true, DPA: true}.Notices()
	if len(n) != 2 || n[0].Knob != "p2p" || n[1].Knob != "dpa" {
		t.Fatalf("%+v", n)
	}
	for _, x := range n {
		if x.Hardware != NotRunHardware || !bytes.Contains([]byte(x.Line()), []byte("="+NotRunHardware+": ")) {
			t.Fatalf("%+v", x)
		}
	}
}
