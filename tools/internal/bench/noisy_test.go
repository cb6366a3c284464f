package bench

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/client"
	"github.com/gpucache/gpucache/internal/server/servertest"
)

var (
	victimSecret = []byte("victim-secret-0123456789abcdef")
	noisySecret  = []byte("noisy-secret-0123456789abcdef")
)

// startNoisyServer runs a server with tenants victim (unlimited) and
// noisy (quota ops/s, burst 1).
func startNoisyServer(t *testing.T, quota float64) string {
	return servertest.StartSecure(t, "127.0.0.1:0", wire.Limits{},
		servertest.Tenant{Name: "victim", Secret: victimSecret},
		servertest.Tenant{Name: "noisy", Secret: noisySecret, OpsPerSec: quota, OpsBurst: 1}).Addr
}

func shortNoisyConfig(addr string) NoisyConfig {
	return NoisyConfig{Addr: addr, Victim: NoisyTenant{"victim", victimSecret}, Noisy: NoisyTenant{"noisy", noisySecret},
		Quota: 20, VictimRate: 200, Size: 16 << 10, Keys: 16, Duration: 200 * time.Millisecond, Reps: 2,
		VictimWorkers: 4, FloodWorkers: 8, VictimConns: 2, FloodConns: 2}
}

// checkNoisyReport checks that rep is structurally sane; it asserts no
// latency figure.
func checkNoisyReport(t *testing.T, rep *NoisyReport, reps, slices int) {
	t.Helper()
	if len(rep.Reps) != reps {
		t.Fatalf("%d reps, want %d", len(rep.Reps), reps)
	}
	for i, r := range rep.Reps {
		if r.Rep != i+1 || r.FloodFirst != (i%2 == 1) {
			t.Errorf("rep %d: number %d flood first %v", i, r.Rep, r.FloodFirst)
		}
		if r.Alone.Name != "alone" || r.Flood.Name != "flood" || r.Alone.Noisy != nil || r.Flood.Noisy == nil ||
			r.Alone.Slices != slices || r.Flood.Slices != slices || r.WrongUnmeasured != 0 {
			t.Fatalf("rep %d: phases %+v / %+v", r.Rep, r.Alone, r.Flood)
		}
		for _, ph := range []NoisyPhase{r.Alone, r.Flood} {
			v := ph.Victim
			if v.Completed == 0 || v.Completed != v.Hits || v.Wrong != 0 || v.Errors != 0 || v.Misses != 0 {
				t.Errorf("rep %d %s: victim %+v", r.Rep, ph.Name, v)
			}
			if v.Completed+v.Dropped != v.Due || v.P50Ns <= 0 || v.P50Ns > v.P99Ns || v.P99Ns > v.P999Ns || v.P999Ns > v.MaxNs {
				t.Errorf("rep %d %s: victim counts or quantiles out of order: %+v", r.Rep, ph.Name, v)
			}
		}
		a := r.Flood.Noisy
		if a.Limited == 0 || a.Errors != 0 || a.Sent != a.Accepted+a.Limited || a.Offered < a.Sent {
			t.Errorf("rep %d: flood %+v", r.Rep, *a)
		}
		if r.P99Ratio <= 0 {
			t.Errorf("rep %d: p99 ratio %v", r.Rep, r.P99Ratio)
		}
	}
	if rep.Wrong != 0 || rep.Limited == 0 || rep.MedianP99Ratio <= 0 {
		t.Errorf("report: wrong %d limited %d median ratio %v", rep.Wrong, rep.Limited, rep.MedianP99Ratio)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"B p99", "A limited", "p99 ratio", "B p99 rise: median "} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
}

func TestRunNoisy(t *testing.T) {
	addr := startNoisyServer(t, 20)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var progress bytes.Buffer
	cfg := shortNoisyConfig(addr)
	cfg.Progress = &progress
	rep, err := RunNoisy(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkNoisyReport(t, rep, 2, 1)
	if !rep.Params.FloodInProc || rep.Params.FloodRate != 200 {
		t.Errorf("params %+v", rep.Params)
	}
	if n, m := strings.Count(progress.String(), ": B "), strings.Count(progress.String(), " phase starts"); n != 4 || m != 4 {
		t.Errorf("%d phase lines and %d start lines, want 4 and 4:\n%s", n, m, progress.String())
	}
}

// TestRunNoisyRemoteFlood runs the flood behind the process protocol, over
// pipes instead of a child's stdin and stdout.
func TestRunNoisyRemoteFlood(t *testing.T) {
	addr := startNoisyServer(t, 20)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := shortNoisyConfig(addr)
	cfg.Reps = 1
	lf, err := NewLocalFlood(ctx, FloodConfig{Addr: addr, Tenant: cfg.Noisy, Namespace: NoisyNamespace(), Rate: 200, Size: 16 << 10, Keys: 16, Conns: 1, Workers: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	served := make(chan error, 1)
	go func() {
		err := ServeFlood(ctx, inR, outW, lf)
		outW.Close()
		served <- err
	}()
	rf, err := NewRemoteFlood(inW, outR)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rf.Stop(); err == nil || !strings.Contains(err.Error(), "not running") {
		t.Fatalf("stop before start: %v", err)
	}
	cfg.Flood = rf
	rep, err := RunNoisy(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkNoisyReport(t, rep, 1, 1)
	if rep.Params.FloodInProc {
		t.Error("report says the flood ran in process")
	}
	inW.Close()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
}

// TestRunNoisySlices measures each phase in four interleaved windows.
func TestRunNoisySlices(t *testing.T) {
	addr := startNoisyServer(t, 20)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := shortNoisyConfig(addr)
	cfg.Reps, cfg.Slice, cfg.Settle = 1, 50*time.Millisecond, 10*time.Millisecond
	rep, err := RunNoisy(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkNoisyReport(t, rep, 1, 4)
	if s := rep.Reps[0].Alone.Victim.Seconds; s < 0.2 {
		t.Errorf("alone phase measured for %vs, want at least 4 windows of 50ms", s)
	}
}

func TestNoisyConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		mod  func(*NoisyConfig)
		want string
	}{
		{func(c *NoisyConfig) { c.Noisy.Name = "victim" }, "must differ"},
		{func(c *NoisyConfig) { c.Quota = 0 }, "quota"},
		{func(c *NoisyConfig) { c.Size = 8 }, "sizes"},
		{func(c *NoisyConfig) { c.Reps = -1 }, "reps"},
		{func(c *NoisyConfig) { c.Duration = -time.Second }, "duration"},
		{func(c *NoisyConfig) { c.Slice = time.Nanosecond }, "slice"},
		{func(c *NoisyConfig) { c.FloodPacer = "jittery" }, "pacer"},
	} {
		cfg := shortNoisyConfig("127.0.0.1:1")
		tc.mod(&cfg)
		_, err := RunNoisy(context.Background(), cfg)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("want %q, got %v", tc.want, err)
		}
	}
}

// TestPace: requests already due are emitted at once, exactly 1/rate apart
// and never at or past end. The window lies in the past, so nothing waits.
func TestPace(t *testing.T) {
	start := time.Now().Add(-time.Hour)
	var got []time.Time
	pace(context.Background(), start, start.Add(50*time.Millisecond), 1000, PacerTimer, func(due time.Time) { got = append(got, due) })
	if len(got) != 50 {
		t.Fatalf("%d requests, want 50", len(got))
	}
	for i, d := range got {
		if want := start.Add(time.Duration(i) * time.Millisecond); !d.Equal(want) {
			t.Fatalf("request %d due %v, want %v", i, d.Sub(start), want.Sub(start))
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	n := 0
	pace(ctx, time.Now().Add(time.Hour), time.Time{}, 1000, PacerFine, func(time.Time) { n++ })
	if n != 0 {
		t.Fatalf("a cancelled pace emitted %d", n)
	}
}

func TestMedianRatio(t *testing.T) {
	reps := func(rs ...float64) []NoisyRep {
		var out []NoisyRep
		for _, r := range rs {
			out = append(out, NoisyRep{P99Ratio: r})
		}
		return out
	}
	for _, tc := range []struct {
		in   []NoisyRep
		want float64
	}{
		{reps(), 0}, {reps(1.5), 1.5}, {reps(1.3, 0.9, 1.1), 1.1}, {reps(1.0, 1.4, 1.2, 0.8), 1.1}, {reps(0, 1.2), 1.2},
	} {
		if got := medianRatio(tc.in); got < tc.want-1e-9 || got > tc.want+1e-9 {
			t.Errorf("median %v = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// TestVictimCountsWrongPayloads: a GET whose bytes differ from what was
// written, in any byte, counts as wrong, not as a hit.
func TestVictimCountsWrongPayloads(t *testing.T) {
	addr := startNoisyServer(t, 20)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := shortNoisyConfig(addr)
	cfg.Duration, cfg.Settle = 50*time.Millisecond, time.Millisecond
	cfg.applyDefaults()
	ns := cfg.Namespace
	ns.Tenant = cfg.Victim.Name
	dig, err := ns.Digest()
	if err != nil {
		t.Fatal(err)
	}
	vc, err := client.Dial(ctx, client.Config{Addr: addr, Tenant: cfg.Victim.Name, Secret: cfg.Victim.Secret})
	if err != nil {
		t.Fatal(err)
	}
	defer vc.Close()
	keys, contents, err := writeWorkingSet(ctx, vc, ns, dig, cfg.Size, cfg.Keys, time.Second, true)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range contents {
		c[len(c)/2+100+i] ^= 1 // a byte no stamp covers
	}
	lf, err := NewLocalFlood(ctx, cfg.floodConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	v := &victim{cfg: &cfg, c: vc, ns: ns, keys: keys, contents: contents}
	alone, fl, _, err := v.rep(ctx, false, lf, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, ph := range []NoisyPhase{alone, fl} {
		if s := ph.Victim; s.Completed == 0 || s.Wrong != s.Completed || s.Hits != 0 {
			t.Errorf("%s: completed %d wrong %d hits %d", ph.Name, s.Completed, s.Wrong, s.Hits)
		}
	}
}
