package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeRun writes a results directory of the given files (path: content).
func writeRun(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func largeTarget(t *testing.T, r *Run) (Target, bool) {
	t.Helper()
	for _, tg := range r.Targets() {
		if strings.HasPrefix(tg.Name, "32 MiB GET") {
			return tg, true
		}
	}
	return Target{}, false
}

func TestLargeBlockTarget(t *testing.T) {
	const plan = "duration\t5s\nreps\t1\nsizes\t65536\nconns\t8\nlarge_sizes\t33554432\nlarge_conns\t1,8\nlarge_keys\t8\n"
	iperf := `{"end":{"sum_received":{"bits_per_second":40000000000}}}` // 5 GB/s
	get := func(gbps string) string {
		return `{"cases":[{"op":"get","size":33554432,"conns":8,"batch":1,"pipeline":1,"ops_per_sec":150,"gb_per_sec":` + gbps + `,"p50_ns":1,"p99_ns":2}]}`
	}
	redis := "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"\n\"GET\",\"40\",\"1\",\"1\",\"100\",\"1\",\"300\",\"1\"\n"

	t.Run("met", func(t *testing.T) {
		r, err := Load(writeRun(t, map[string]string{
			"plan.txt": plan, "iperf3/rep1.json": iperf, "gpucache/large_get_r1.json": get("4.9"),
			"redis/get_33554432_c8_P1_r1.csv": redis,
		}))
		if err != nil {
			t.Fatal(err)
		}
		tg, ok := largeTarget(t, r)
		if !ok || tg.Ratio != "0.98×" || tg.Verdict != Pass {
			t.Fatalf("target %+v (found %v), want 0.98× PASS", tg, ok)
		}
		out := render(r)
		for _, want := range []string{"| 32MiB | 8 | plain | gpucache |", "| 32MiB | 8 | plain | redis |", "large blocks: sizes 32MiB; conns/clients 1,8; working set `large_keys` 8 blocks"} {
			if !strings.Contains(out, want) {
				t.Errorf("report lacks %q:\n%s", want, out)
			}
		}
	})
	t.Run("missed", func(t *testing.T) {
		r, err := Load(writeRun(t, map[string]string{"plan.txt": plan, "iperf3/rep1.json": iperf, "gpucache/large_get_r1.json": get("4.5")}))
		if err != nil {
			t.Fatal(err)
		}
		if tg, _ := largeTarget(t, r); tg.Ratio != "0.90×" || tg.Verdict != Miss {
			t.Fatalf("target %+v, want 0.90× MISS", tg)
		}
	})
	t.Run("planned, not run", func(t *testing.T) {
		r, err := Load(writeRun(t, map[string]string{"plan.txt": plan, "iperf3/rep1.json": iperf}))
		if err != nil {
			t.Fatal(err)
		}
		if tg, ok := largeTarget(t, r); !ok || tg.Verdict != NotRun {
			t.Fatalf("target %+v (found %v), want NOT_RUN", tg, ok)
		}
	})
	t.Run("not planned", func(t *testing.T) {
		r, err := Load(writeRun(t, map[string]string{"plan.txt": "sizes\t65536\nconns\t8\n", "iperf3/rep1.json": iperf}))
		if err != nil {
			t.Fatal(err)
		}
		if tg, ok := largeTarget(t, r); ok {
			t.Fatalf("unplanned large target %+v", tg)
		}
	})
}
