package benchcli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/gpucache/gpucache/internal/cli"
	"github.com/gpucache/gpucache/internal/dpu"
)

// runDPUDemo runs the DPU path as far as this build can: it tries to open
// DOCA, SPDK and an NVMe device (each refuses with NOT_RUN_HARDWARE),
// starts the Arm agent, which runs the storage queue in simulation with
// offload_active false, and round-trips a pattern through the simulated
// queue's submit and complete rings, comparing the bytes. It prints
// offload_active=false, hardware=NOT_RUN_HARDWARE and DPU_DEMO_OK, or
// DPU_DEMO_FAIL with the reason. It prints no timing: nothing here ran on
// a DPU.
func runDPUDemo(ctx context.Context, args []string, std cli.Stdio) error {
	fs := newFlagSet("dpu-demo", "dpu-demo [--nvme PATH]", std.Out)
	nvme := fs.String("nvme", "/dev/nvme0n1", "NVMe block device OpenNVMeDevice is asked for (never opened)")
	if err := cli.ParseNoArgs(fs, args); err != nil {
		return err
	}
	if err := dpuDemo(ctx, std.Out, *nvme); err != nil {
		fmt.Fprintf(std.Out, "DPU_DEMO_FAIL: %v\n", err)
		return cli.ErrReported
	}
	fmt.Fprintln(std.Out, "DPU_DEMO_OK")
	return nil
}

func dpuDemo(ctx context.Context, w io.Writer, nvme string) error {
	fmt.Fprintf(w, "build_tag_dpu_bf3=%t\n", dpu.BuildTag)
	opens := []struct {
		name string
		open func() (dpu.Handle, error)
	}{
		{"doca", func() (dpu.Handle, error) { return dpu.OpenDOCA(dpu.OpenConfig{}) }},
		{"spdk", func() (dpu.Handle, error) { return dpu.OpenSPDK(dpu.OpenConfig{}) }},
		{"nvme", func() (dpu.Handle, error) { return dpu.OpenNVMeDevice(nvme) }},
	}
	for _, o := range opens {
		h, err := o.open()
		if h != nil || !errors.Is(err, dpu.ErrNotRunHardware) {
			return fmt.Errorf("open %s did not refuse: %v", o.name, err)
		}
		fmt.Fprintf(w, "%s=refused (%v)\n", o.name, err)
	}

	agent, err := dpu.NewArmAgent(dpu.AgentConfig{Queue: dpu.QueueConfig{Slots: 2, SlotSize: 64 << 10, Depth: 2, Blocks: 1}})
	if err != nil {
		return err
	}
	defer agent.Close()
	if err := agent.Start(ctx); err != nil {
		return fmt.Errorf("agent start: %w", err)
	}
	st := agent.Status()
	fmt.Fprintf(w, "offload_active=%t\n", st.OffloadActive)
	fmt.Fprintf(w, "hardware=%s\n", st.Hardware)
	if st.OffloadActive || st.Hardware != dpu.NotRunHardware {
		return fmt.Errorf("agent status %+v", st)
	}

	return dpuRoundTrip(ctx, w, agent.Queue())
}

// dpuRoundTrip writes a slot to the simulated block and reads it back
// into another slot through the submit and complete rings.
func dpuRoundTrip(ctx context.Context, w io.Writer, q *dpu.SimQueue) error {
	size := q.Config().SlotSize
	want := make([]byte, size)
	for i := range want {
		want[i] = byte(i*31 + 7)
	}
	copy(q.Slot(0), want)
	clear(q.Slot(1))
	for _, c := range []dpu.Command{
		{ID: 1, Op: dpu.OpWrite, Slot: 0, Block: 0, Len: size},
		{ID: 2, Op: dpu.OpRead, Slot: 1, Block: 0},
	} {
		if err := q.Submit(c); err != nil {
			return fmt.Errorf("submit %s: %w", c.Op, err)
		}
		done, err := q.WaitReap(ctx)
		if err != nil {
			return fmt.Errorf("complete %s: %w", c.Op, err)
		}
		if done.Err != nil || done.ID != c.ID || done.Label != dpu.NotRunHardware || !done.Simulated {
			return fmt.Errorf("completion of %s: %+v", c.Op, done)
		}
		fmt.Fprintf(w, "sim_%s=completed label=%s simulated=%t\n", c.Op, done.Label, done.Simulated)
	}
	if !bytes.Equal(q.Slot(1), want) {
		fmt.Fprintln(w, "sim_roundtrip=bytes_differ")
		return errors.New("the bytes read back differ from the bytes written")
	}
	fmt.Fprintln(w, "sim_roundtrip=bytes_equal (slab slot -> submit ring -> simulated block -> complete ring -> another slab slot)")
	fmt.Fprintln(w, "host GPUNetIO NIC mode is not this daemon; the offload candidate is the storage queue on a storage-side BlueField (docs/DPU_TARGETS.md)")
	return nil
}
