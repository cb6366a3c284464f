package benchcli

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/gpucache/gpucache/internal/cli"
)

// dpu-demo: every open refuses, the agent leaves offload_active false, and
// the simulated queue's round trip compares equal, labelled.
func TestDPUDemo(t *testing.T) {
	var out, errb bytes.Buffer
	code := Main(context.Background(), []string{"dpu-demo"}, cli.Stdio{Out: &out, Err: &errb})
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errb.String())
	}
	lines := strings.Split(out.String(), "\n")
	has := func(prefix string) bool {
		for _, l := range lines {
			if strings.HasPrefix(l, prefix) {
				return true
			}
		}
		return false
	}
	for _, want := range []string{"offload_active=false", "hardware=NOT_RUN_HARDWARE", "doca=refused (", "spdk=refused (", "nvme=refused (",
		"sim_write=completed label=NOT_RUN_HARDWARE simulated=true", "sim_read=completed label=NOT_RUN_HARDWARE simulated=true",
		"sim_roundtrip=bytes_equal", "host GPUNetIO NIC mode is not this daemon", "DPU_DEMO_OK"} {
		if !has(want) {
			t.Fatalf("output lacks a line starting %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "offload_active=true") {
		t.Fatalf("offload active:\n%s", out.String())
	}
	for _, l := range lines {
		if strings.HasSuffix(l, ")") && strings.Contains(l, "=refused (") && !strings.HasSuffix(l, "NOT_RUN_HARDWARE)") {
			t.Fatalf("a refusal without its label: %q", l)
		}
	}
	// No timing: nothing here ran on a DPU.
	if regexp.MustCompile(`\d+(\.\d+)?\s*(ns|µs|us|ms|s|GB/s|MB/s|GiB/s|ops)\b`).MatchString(out.String()) {
		t.Fatalf("a measurement printed:\n%s", out.String())
	}
	if code := Main(context.Background(), []string{"dpu-demo", "extra"}, cli.Stdio{Out: &out, Err: &errb}); code != exitUsage {
		t.Fatalf("extra argument: exit %d", code)
	}
}
