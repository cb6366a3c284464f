package benchcli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/server/servertest"
)

// TestNoisyCommand runs `gpucache-bench noisy` briefly against a server with two
// tenants, the noisy one rate-limited, and checks that the report is sane:
// the flood got RATE_LIMITED answers and every victim GET verified. It
// asserts no latency figure.
func TestNoisyCommand(t *testing.T) {
	victim, noisy := []byte("victim-secret-0123456789abcdef"), []byte("noisy-secret-0123456789abcdef")
	srv := servertest.StartSecure(t, "127.0.0.1:0", wire.Limits{},
		servertest.Tenant{Name: "bee", Secret: victim},
		servertest.Tenant{Name: "ant", Secret: noisy, OpsPerSec: 20, OpsBurst: 1})
	dir := t.TempDir()
	vf, nf, js := filepath.Join(dir, "victim.secret"), filepath.Join(dir, "noisy.secret"), filepath.Join(dir, "noisy.json")
	for f, b := range map[string][]byte{vf: victim, nf: noisy} {
		if err := os.WriteFile(f, append(b, '\n'), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	r := run(t, "", "noisy", "--addr", srv.Addr, "--victim-tenant", "bee", "--victim-secret-file", vf,
		"--noisy-tenant", "ant", "--noisy-secret-file", nf, "--quota", "20", "--victim-rate", "200", "--size", "16KiB",
		"--keys", "16", "--duration", "200ms", "--warmup", "0", "--reps", "2", "--victim-conns", "2", "--noisy-conns", "2", "--json", js)
	if r.code != 0 {
		t.Fatalf("noisy: %+v", r)
	}
	for _, want := range []string{"B p99", "A limited", "p99 ratio", "over 2 reps (target < 20%)"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
	if n := strings.Count(r.stderr, ": B "); n != 4 {
		t.Errorf("%d phase lines, want 4:\n%s", n, r.stderr)
	}
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	type victimStats struct {
		Completed, Wrong, Errors uint64
	}
	var rep struct {
		Reps []struct {
			Alone struct {
				Victim victimStats `json:"victim"`
			} `json:"alone"`
			Flood struct {
				Victim victimStats `json:"victim"`
				Noisy  *struct {
					Offered, Accepted, Limited uint64
				} `json:"noisy"`
			} `json:"flood"`
			P99Ratio float64 `json:"p99_ratio"`
		} `json:"reps"`
		Wrong   uint64 `json:"wrong_payloads"`
		Limited uint64 `json:"noisy_limited"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Reps) != 2 || rep.Wrong != 0 || rep.Limited == 0 {
		t.Fatalf("json: %d reps, %d wrong, %d limited", len(rep.Reps), rep.Wrong, rep.Limited)
	}
	for i, rp := range rep.Reps {
		for _, v := range []victimStats{rp.Alone.Victim, rp.Flood.Victim} {
			if v.Completed == 0 || v.Wrong != 0 || v.Errors != 0 {
				t.Errorf("rep %d: victim %+v", i+1, v)
			}
		}
		if a := rp.Flood.Noisy; a == nil || a.Limited == 0 || a.Offered < a.Accepted+a.Limited {
			t.Errorf("rep %d: flood %+v", i+1, a)
		}
		if rp.P99Ratio <= 0 {
			t.Errorf("rep %d: p99 ratio %v", i+1, rp.P99Ratio)
		}
	}
}

func TestNoisyUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"noisy"}, "--quota must be positive"},
		{[]string{"noisy", "--quota", "10", "--size", "lots"}, "--size"},
		{[]string{"noisy", "--quota", "10", "--noisy-tenant", "victim"}, "must differ"},
		{[]string{"noisy", "--quota", "10", "--victim-secret-file", "/no/such/file"}, "--victim-secret-file"},
		{[]string{"noisy", "--quota", "10", "--role", "spectator"}, "--role"},
		{[]string{"noisy", "--quota", "10", "--flood-pacer", "jittery"}, "--flood-pacer"},
	} {
		r := run(t, "", tc.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.msg) {
			t.Errorf("%v: code %d stderr %q; want 2 and %q", tc.args, r.code, r.stderr, tc.msg)
		}
	}
}
