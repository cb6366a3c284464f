package audit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// manualClock is an injected clock the test advances.
type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *manualClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *manualClock) Advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// lockedBuffer is a bytes.Buffer safe for the throttle's timer and the
// test to share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string { b.mu.Lock(); defer b.mu.Unlock(); return b.b.String() }

// parse splits JSON lines, failing on any that does not decode.
func parse(t *testing.T, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("invalid JSON line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// TestAuthFailureFloodIsBounded floods 100,000 failed authentications from
// one address through the Logger and a size-bounded File, fed as the
// daemon feeds them (one writer for the status page, one for the file),
// and checks: the files stay within maxBytes × (maxFiles + 1); the
// flood's lines are Lines per interval, followed by one summary per
// interval with the exact count suppressed; a quiet second address's
// failures during the flood are all written; ACL denials, rate limiting
// and admin actions are never suppressed.
func TestAuthFailureFloodIsBounded(t *testing.T) {
	const (
		flood    = 100_000
		maxBytes = 4 << 10
		maxFiles = 3
		lines    = 10
		interval = 10 * time.Second
	)
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	f, err := OpenFile(path, maxBytes, maxFiles)
	if err != nil {
		t.Fatal(err)
	}
	clock := &manualClock{t: time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)}
	var all bytes.Buffer // every line written, as the status page's writer sees them
	l := NewWithOptions(io.MultiWriter(&all, f), Options{Now: clock.Now, File: f,
		AuthFailures: Throttle{Lines: lines, Interval: interval, Sources: 64}})
	for i := range flood {
		l.AuthFailure("", "unknown_credential", fmt.Sprintf("203.0.113.7:%d", 1024+i%50000)) // one address, many ports
		switch {
		case i%20_000 == 0:
			l.AuthFailure("acme", "unknown_credential", "198.51.100.9:4000")
		case i%10_000 == 5:
			l.Denied("acme", "llama", "write", "PUT")
			l.RateLimited("acme", time.Second)
			l.AdminAction("ops", "reload")
		}
		clock.Advance(time.Millisecond) // 1,000 failures a second: 10 intervals
	}
	clock.Advance(interval)
	l.Flush() // the last interval's summary (the throttle's timer would write it)
	l.Close()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	count := map[string]int{}
	var summed uint64
	for _, m := range parse(t, all.String()) {
		ev, _ := m["event"].(string)
		switch ev {
		case EventAuthFailure:
			count[ev+" "+strings.Split(m["remote"].(string), ":")[0]]++
		case EventSuppressed:
			if m["source"] != "203.0.113.7" || m["count"] != float64(flood/lines-lines) || m["suppressed_event"] != EventAuthFailure ||
				m["msg"] != "suppressed 9990 auth_failure events from 203.0.113.7 in the last 10s" {
				t.Errorf("summary %v", m)
			}
			summed += uint64(m["count"].(float64))
			count[ev]++
		default:
			count[ev]++
		}
	}
	want := map[string]int{
		"auth_failure 203.0.113.7": 10 * lines, "auth_failure 198.51.100.9": 5, EventSuppressed: 10,
		EventDenied: 10, EventRateLimited: 10, EventAdminAction: 10,
	}
	for k, n := range want {
		if count[k] != n {
			t.Errorf("%d %s lines, want %d", count[k], k, n)
		}
	}
	if summed != flood-10*lines {
		t.Errorf("summaries report %d suppressed, want %d", summed, flood-10*lines)
	}
	st := l.Stats()
	if st.AuthFailures != flood+5 || st.Suppressed != flood-10*lines || st.Summaries != 10 || st.WriteErrors != 0 || st.Sources != 0 {
		t.Errorf("stats %+v", st)
	}
	if st.Rotations == 0 {
		t.Errorf("no rotation: %d bytes written into a %d-byte bound", all.Len(), maxBytes)
	}

	// On disk: at most maxFiles rotated files, each within maxBytes, whole
	// lines only, and together the newest lines written.
	var disk []byte
	var total int64
	for i := maxFiles; i >= 0; i-- {
		name := path
		if i > 0 {
			name = fmt.Sprintf("%s.%d", path, i)
		}
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(b) > maxBytes || len(b) == 0 || b[len(b)-1] != '\n' {
			t.Errorf("%s: %d bytes (bound %d), ends %q", name, len(b), maxBytes, b[max(len(b)-1, 0):])
		}
		total += int64(len(b))
		disk = append(disk, b...)
	}
	if _, err := os.Stat(fmt.Sprintf("%s.%d", path, maxFiles+1)); !os.IsNotExist(err) {
		t.Errorf("%s.%d exists (%v): the oldest file was not dropped", path, maxFiles+1, err)
	}
	if bound := int64(maxBytes * (maxFiles + 1)); total > bound {
		t.Errorf("audit files hold %d bytes, bound %d", total, bound)
	}
	parse(t, string(disk))
	if !bytes.HasSuffix(all.Bytes(), disk) {
		t.Error("the files are not the newest lines written")
	}
	t.Logf("%d failures: %d lines, %d bytes written; %d bytes on disk in %d files after %d rotations",
		flood+5, strings.Count(all.String(), "\n"), all.Len(), total, maxFiles+1, st.Rotations)
}

// TestSourceTableBounded: failures from 10,000 addresses never grow the
// table past Sources (plus the aggregate bucket); the addresses that find
// it full share the aggregate's Lines, reported as source "*"; every
// failure is either written or counted in a summary; the table empties
// once the intervals end.
func TestSourceTableBounded(t *testing.T) {
	const sources, lines, addrs = 64, 2, 10_000
	clock := &manualClock{t: time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)}
	var buf bytes.Buffer
	l := NewWithOptions(&buf, Options{Now: clock.Now, AuthFailures: Throttle{Lines: lines, Interval: time.Minute, Sources: sources}})
	defer l.Close()
	for i := range addrs {
		for range 3 {
			l.AuthFailure("", "no_credential", fmt.Sprintf("10.%d.%d.%d:999", i>>16, (i>>8)&255, i&255))
			if n := l.Stats().Sources; n > sources+1 {
				t.Fatalf("%d sources tracked, bound %d + the aggregate", n, sources)
			}
		}
		clock.Advance(time.Millisecond) // 10 s in all: one interval
	}
	clock.Advance(time.Minute)
	l.Flush()
	if n := l.Stats().Sources; n != 0 {
		t.Errorf("%d sources tracked after every interval ended", n)
	}
	var written, summarized, aggregate uint64
	for _, m := range parse(t, buf.String()) {
		switch m["event"] {
		case EventAuthFailure:
			written++
		case EventSuppressed:
			summarized += uint64(m["count"].(float64))
			if m["source"] == AggregateSource {
				aggregate += uint64(m["count"].(float64))
				if !strings.Contains(m["msg"].(string), "from other sources (the table of sources was full)") {
					t.Errorf("aggregate summary %v", m)
				}
			}
		}
	}
	if written+summarized != 3*addrs {
		t.Errorf("%d written + %d summarized, want %d failures", written, summarized, 3*addrs)
	}
	if max := uint64((sources + 1) * lines); written > max {
		t.Errorf("%d auth_failure lines in one interval, bound (sources+1) × lines = %d", written, max)
	}
	if aggregate == 0 {
		t.Error("no aggregate summary though the table was full")
	}
	if st := l.Stats(); st.AuthFailures != 3*addrs || st.Suppressed != summarized {
		t.Errorf("stats %+v", st)
	}
}

// TestSummaryWithoutFurtherEvents: the summary of a flood that stopped is
// written when its interval ends, by the throttle's timer, with no further
// event; Close writes the summary of a window still open.
func TestSummaryWithoutFurtherEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf lockedBuffer
		l := NewWithOptions(&buf, Options{AuthFailures: Throttle{Lines: 1, Interval: 10 * time.Second}})
		for range 5 {
			l.AuthFailure("", "no_credential", "192.0.2.1:1")
		}
		if strings.Contains(buf.String(), EventSuppressed) {
			t.Fatal("summary before the interval ended")
		}
		time.Sleep(10 * time.Second) // the bubble's clock: the interval ends
		synctest.Wait()
		if !strings.Contains(buf.String(), `"msg":"suppressed 4 auth_failure events from 192.0.2.1 in the last 10s"`) {
			t.Fatalf("no summary after the interval:\n%s", buf.String())
		}
		if n := l.Stats().Sources; n != 0 {
			t.Fatalf("%d sources tracked after the interval", n)
		}
		for range 3 {
			l.AuthFailure("", "no_credential", "[2001:db8::1]:1")
			l.AuthFailure("", "no_credential", "[2001:db8::2]:1") // the same /64
		}
		time.Sleep(3 * time.Second)
		l.Close()
		if !strings.Contains(buf.String(), `"msg":"suppressed 5 auth_failure events from 2001:db8::/64 in the last 3s"`) {
			t.Fatalf("Close wrote no summary of the open window:\n%s", buf.String())
		}
	})
}

func TestSourceOf(t *testing.T) {
	long := strings.Repeat("x", 100)
	for in, want := range map[string]string{
		"10.0.0.1:5555":           "10.0.0.1",
		"10.0.0.1":                "10.0.0.1",
		"[::ffff:10.0.0.1]:80":    "10.0.0.1",
		"[2001:db8:1:2:3::9]:443": "2001:db8:1:2::/64",
		"[fe80::1%eth0]:22":       "fe80::/64",
		"pipe":                    "pipe",
		"host.example:80":         "host.example",
		"":                        "",
		long:                      long[:maxSourceLen],
		"[" + long + "]:1":        long[:maxSourceLen],
		"2001:db8::1":             "2001:db8::/64",
		"127.0.0.2:40000":         "127.0.0.2",
		"[::1]:9401":              "::/64",
		"@":                       "@",
	} {
		if got := SourceOf(in); got != want {
			t.Errorf("SourceOf(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzSourceOf: any peer address maps to a key of bounded length, and
// every port of one IP to the same key.
func FuzzSourceOf(f *testing.F) {
	for _, s := range []string{"10.0.0.1:5555", "[2001:db8::1]:1", "pipe", "[fe80::1%eth0]:22", "::ffff:1.2.3.4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, remote string) {
		k := SourceOf(remote)
		if len(k) > maxSourceLen {
			t.Fatalf("SourceOf(%q) = %q: %d bytes", remote, k, len(k))
		}
		if ap, err := netip.ParseAddrPort(remote); err == nil {
			if other := netip.AddrPortFrom(ap.Addr(), ap.Port()+1).String(); SourceOf(other) != k {
				t.Fatalf("SourceOf(%q) = %q but SourceOf(%q) = %q", remote, k, other, SourceOf(other))
			}
		}
	})
}

// TestDiscardCounts: with the sink off nothing is written, but failures
// are still counted.
func TestDiscardCounts(t *testing.T) {
	l := Discard()
	defer l.Close()
	for range 3 {
		l.AuthFailure("", "no_credential", "192.0.2.1:1")
	}
	l.Denied("a", "m", "read", "GET")
	if st := l.Stats(); st.AuthFailures != 3 || st.Suppressed != 0 || st.Sources != 0 {
		t.Fatalf("stats %+v", st)
	}
	var nl *Logger
	nl.Close()
	nl.Flush()
	if nl.Stats() != (Stats{}) {
		t.Fatal("a nil Logger has counters")
	}
}
