package benchcli

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/gpucache/gpucache/internal/cli"
)

// The paired reports: what a paired hardware run would need and
// what is missing. They measure nothing and print no number: every result
// is NOT_RUN_HARDWARE, the cost TCO_UNKNOWN, the gate NOT_EVALUATED.

const reportUsage = `Usage: gpucache-bench report <paired-baseline | v3-paired> [flags]

  paired-baseline  the engine with and without gpucache on the same GPUs:
                   what that run needs, what is missing, the go gate
  v3-paired        the storage-queue offload on a DPU against a NIC-RDMA
                   baseline (--baseline nic-rdma, the only one accepted;
                   TCP is refused as that baseline)
`

// Labels the reports print.
const (
	reportNotRun   = "NOT_RUN_HARDWARE"
	reportTCO      = "TCO_UNKNOWN"
	reportGoGate   = "go_gate=NOT_EVALUATED"
	goGateDef      = "go_gate_definition: go only if a paired run shows a lower cost per million output tokens at the same latency targets (time to first token, time per output token), or meets an isolation goal (one tenant's load does not move another tenant's tail latency) that the baseline misses"
	noGoRule       = "no_go_rule: on a no-go, or while the gate is not evaluated, keep the portable TCP and file backends as the default build and ship nothing that needs the hardware"
	reportMeasured = "measured: nothing (no latency, throughput, goodput or cost figure is printed because none was measured)"
)

func runReport(_ context.Context, args []string, std cli.Stdio) error {
	if len(args) == 0 {
		fmt.Fprint(std.Err, reportUsage)
		return cli.UsageErr("name a report: paired-baseline or v3-paired")
	}
	switch args[0] {
	case "paired-baseline":
		fs := newFlagSet("report paired-baseline", "report paired-baseline", std.Out)
		if err := cli.ParseNoArgs(fs, args[1:]); err != nil {
			return err
		}
		pairedBaseline(std.Out)
		return nil
	case "v3-paired":
		fs := newFlagSet("report v3-paired", "report v3-paired [--baseline nic-rdma]", std.Out)
		baseline := fs.String("baseline", "nic-rdma", "the baseline the DPU is paired against: nic-rdma (tcp is refused)")
		if err := cli.ParseNoArgs(fs, args[1:]); err != nil {
			return err
		}
		switch strings.ToLower(*baseline) {
		case "nic-rdma":
		case "tcp":
			return cli.UsageErr("--baseline tcp refused: v3-paired compares the storage-queue offload with the same RDMA fabric without it; TCP differs in more than the offload, so it cannot be that baseline (use --baseline nic-rdma)")
		default:
			return cli.UsageErr("--baseline %q: the only baseline is nic-rdma", *baseline)
		}
		v3Paired(std.Out)
		return nil
	case "-h", "-help", "--help", "help":
		fmt.Fprint(std.Out, reportUsage)
		return nil
	}
	return cli.UsageErr("unknown report %q: paired-baseline or v3-paired", args[0])
}

// need is one requirement of a paired run and whether this checkout has it.
type need struct{ what, status string }

func printNeeds(w io.Writer, needs []need) {
	fmt.Fprintln(w, "needs:")
	for _, n := range needs {
		fmt.Fprintf(w, "  - %s: %s\n", n.what, n.status)
	}
}

func printGate(w io.Writer) {
	fmt.Fprintln(w, "hardware="+reportNotRun)
	fmt.Fprintln(w, "tco="+reportTCO)
	fmt.Fprintln(w, reportGoGate)
	fmt.Fprintln(w, goGateDef)
	fmt.Fprintln(w, noGoRule)
	fmt.Fprintln(w, reportMeasured)
}

func pairedBaseline(w io.Writer) {
	fmt.Fprintln(w, "report=paired-baseline")
	fmt.Fprintln(w, "run: one inference workload, twice on the same GPU nodes: the engine alone (recompute every prefix), then the engine with gpucache serving its KV blocks; compared request by request")
	printNeeds(w, []need{
		{"GPU nodes running an inference engine with a KV connector (vLLM with LMCache or NIXL)", "MISSING: " + reportNotRun},
		{"GPU KV export into gpucache (a connector moving real KV tensors)", "MISSING: " + reportNotRun},
		{"an RDMA NIC pair for the data path (NIXL)", "MISSING: " + reportNotRun + " (libnixl is not linked; the TCP transport is what runs)"},
		{"a production-like request trace with shared prefixes", "PARTIAL: the Mooncake replay runs on the CPU (gpucache-bench replay), not against an engine"},
		{"prices: GPU hours, node power, network and storage", "MISSING: " + reportTCO},
		{"the same model, engine revision, batch policy and trace for both arms", "MISSING: no arm has run"},
	})
	fmt.Fprintln(w, "would_measure: time to first token, time per output token, goodput, cost per million output tokens")
	printGate(w)
}

func v3Paired(w io.Writer) {
	fmt.Fprintln(w, "report=v3-paired")
	fmt.Fprintln(w, "baseline=nic-rdma: the storage queue (DRAM slab, NVMe submit and complete) on the storage node's host CPU, GPU clients on ordinary NICs over RDMA")
	fmt.Fprintln(w, "candidate=dpu: the same storage queue on a storage-side BlueField, GPU clients still on ordinary NICs; the hypothesis of docs/DPU_TARGETS.md")
	fmt.Fprintln(w, "refused_baseline=tcp: TCP differs from the candidate in more than the offload")
	fmt.Fprintln(w, "not_this_daemon: host GPUNetIO NIC mode")
	printNeeds(w, []need{
		{"a storage node with a BlueField in DPU mode, its BFB, OS, DOCA and firmware pinned", "MISSING: " + reportNotRun + " (every target in docs/DPU_TARGETS.md is unset)"},
		{"DOCA and SPDK linked, an NVMe namespace behind the IOMMU", "MISSING: " + reportNotRun + " (OpenDOCA, OpenSPDK and OpenNVMeDevice refuse in every build)"},
		{"the NIC-RDMA baseline on the same storage node without the offload", "MISSING: " + reportNotRun + " (libnixl is not linked)"},
		{"GPU clients with ordinary NICs and the same trace for both arms", "MISSING: " + reportNotRun},
		{"prices of the DPU, the NIC, power and host cores freed", "MISSING: " + reportTCO},
	})
	fmt.Fprintln(w, "would_measure: storage-node host cores used per served byte, tail latency of refills under load, tenant isolation, cost per million output tokens")
	fmt.Fprintln(w, "offload_active=false")
	printGate(w)
}
