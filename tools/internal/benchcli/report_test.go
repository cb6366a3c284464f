package benchcli

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/gpucache/gpucache/internal/cli"
)

// versionToken is a version string ("v3" in v3-paired); digits anywhere
// else in a report would be a number nothing measured.
var versionToken = regexp.MustCompile(`\bv\d+(\.\d+)*\b`)

func runReportCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(context.Background(), append([]string{"report"}, args...), cli.Stdio{Out: &out, Err: &errb})
	return code, out.String(), errb.String()
}

// Both reports print their labels, the go-gate definition and the no-go
// rule, and no digit outside a version string.
func TestPairedReports(t *testing.T) {
	common := []string{"hardware=NOT_RUN_HARDWARE", "tco=TCO_UNKNOWN", "go_gate=NOT_EVALUATED",
		"go_gate_definition: ", "cost per million output tokens", "isolation goal",
		"no_go_rule: ", "keep the portable TCP and file backends", "measured: nothing"}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"paired-baseline"}, []string{"report=paired-baseline", "needs:", "MISSING: NOT_RUN_HARDWARE", "MISSING: TCO_UNKNOWN"}},
		{[]string{"v3-paired"}, []string{"report=v3-paired", "baseline=nic-rdma", "candidate=dpu", "refused_baseline=tcp",
			"not_this_daemon: host GPUNetIO NIC mode", "offload_active=false", "MISSING: NOT_RUN_HARDWARE"}},
		{[]string{"v3-paired", "--baseline", "nic-rdma"}, []string{"report=v3-paired", "baseline=nic-rdma"}},
	} {
		code, out, errs := runReportCmd(t, tc.args...)
		if code != 0 {
			t.Fatalf("%v: exit %d\n%s%s", tc.args, code, out, errs)
		}
		for _, want := range append(tc.want, common...) {
			if !strings.Contains(out, want) {
				t.Fatalf("%v lacks %q:\n%s", tc.args, want, out)
			}
		}
		if d := regexp.MustCompile(`\d`).FindString(versionToken.ReplaceAllString(out, "")); d != "" {
			t.Fatalf("%v prints a digit outside a version string:\n%s", tc.args, out)
		}
	}
}

// TCP is refused as the v3-paired baseline, with a clear error and a
// non-zero exit, and nothing is reported.
func TestV3PairedRefusesTCPBaseline(t *testing.T) {
	for _, b := range []string{"tcp", "TCP"} {
		code, out, errs := runReportCmd(t, "v3-paired", "--baseline", b)
		if code != exitUsage || out != "" || !strings.Contains(errs, "--baseline tcp refused") || !strings.Contains(errs, "nic-rdma") {
			t.Fatalf("--baseline %s: exit %d, out %q, err %q", b, code, out, errs)
		}
	}
	for _, args := range [][]string{{}, {"nope"}, {"v3-paired", "--baseline", "roce"}, {"paired-baseline", "x"}} {
		if code, _, _ := runReportCmd(t, args...); code != exitUsage {
			t.Fatalf("%v: exit %d", args, code)
		}
	}
}
