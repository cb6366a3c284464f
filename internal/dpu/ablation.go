package dpu

// Ablation holds the hardware ablation knobs (config ablation_p2p and
// ablation_dpa). Neither has a code path in this build: enabling one only
// yields a notice labelled NOT_RUN_HARDWARE, and no stored byte changes.
type Ablation struct {
	// P2P would move KV blocks GPU to NIC (or GPU to NVMe) by PCIe
	// peer-to-peer DMA, skipping host memory.
	P2P bool
	// DPA would run the storage queue's completions on the BlueField's
	// data-path accelerator instead of its Arm cores.
	DPA bool
}

// Notice is one enabled knob's report.
type Notice struct {
	Knob     string // "p2p" or "dpa"
	Hardware string // NotRunHardware
	Effect   string
}

// Line renders the notice as printed and logged.
func (n Notice) Line() string {
	return n.Knob + "=" + n.Hardware + ": " + n.Effect
}

// Notices returns one Notice per enabled knob, in the order p2p, dpa.
func (a Ablation) Notices() []Notice {
	var out []Notice
	if a.P2P {
		out = append(out, Notice{Knob: "p2p", Hardware: NotRunHardware,
			Effect: "no peer-to-peer DMA is linked; blocks move through host memory and are stored byte for byte as with p2p off"})
	}
	if a.DPA {
		out = append(out, Notice{Knob: "dpa", Hardware: NotRunHardware,
			Effect: "no DPA is linked; the storage queue is not offloaded and blocks are stored byte for byte as with dpa off"})
	}
	return out
}
