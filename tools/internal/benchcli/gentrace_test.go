package benchcli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpucache/gpucache/tools/internal/replay"
)

func TestGenTrace(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "rag.jsonl")
	r := run(t, "", "gen-trace", "--shape", "rag", "--requests", "300", "--seed", "7", "--out", out)
	if r.code != exitOK || !strings.Contains(r.stdout, "shape=rag seed=7 requests=300 ") {
		t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	reqs, err := replay.ReadTrace(bytes.NewReader(b), 0)
	if err != nil || len(reqs) != 300 {
		t.Fatalf("read %d requests: %v", len(reqs), err)
	}
	// --out - writes the same bytes to stdout, the statistics to stderr.
	r = run(t, "", "gen-trace", "--shape", "rag", "--requests", "300", "--seed", "7", "--out", "-")
	if r.code != exitOK || r.stdout != string(b) || !strings.Contains(r.stderr, "unique_blocks=") {
		t.Fatalf("--out -: exit %d, %d bytes (want %d), stderr %q", r.code, len(r.stdout), len(b), r.stderr)
	}

	// --print-config, edited, comes back through --config; flags override it.
	r = run(t, "", "gen-trace", "--shape", "mix", "--mix", "chat=1,oneshot=1", "--print-config")
	if r.code != exitOK || !strings.Contains(r.stdout, `"shape": "mix"`) {
		t.Fatalf("--print-config: exit %d, %q", r.code, r.stderr)
	}
	cfg := filepath.Join(dir, "mix.json")
	if err := os.WriteFile(cfg, []byte(r.stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	r = run(t, "", "gen-trace", "--config", cfg, "--requests", "50", "--arrival", "bursty", "--out", filepath.Join(dir, "mix.jsonl"))
	if r.code != exitOK || !strings.Contains(r.stdout, "shape=mix seed=1 requests=50 ") {
		t.Fatalf("--config: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}

	for _, bad := range []struct {
		args []string
		says string
	}{
		{[]string{"--shape", "video", "--out", out}, "video"},
		{[]string{"--shape", "chat"}, "--out is required"},
		{[]string{"--requests", "0", "--out", out}, "requests"},
		{[]string{"--arrival", "weekly", "--out", out}, "arrival.pattern"},
		{[]string{"--shape", "mix", "--mix", "chat", "--out", out}, "--mix"},
		{[]string{"--shape", "mix", "--mix", "chat=x", "--out", out}, "--mix"},
		{[]string{"--config", cfg, "--shape", "chat", "--out", out}, "contradicts"},
	} {
		r := run(t, "", append([]string{"gen-trace"}, bad.args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, bad.says) {
			t.Errorf("%v: exit %d, stderr %q; want %d saying %q", bad.args, r.code, r.stderr, exitUsage, bad.says)
		}
	}
}
