package directory

import (
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the expected output of testdata/*.txt scripts")

// Scripts in testdata/*.txt drive one Directory with a fake clock. A case is
// a line "> command" followed by its expected output, up to a blank line;
// other lines (comments starting with #, blank lines) are kept as they are.
// Run with -update to rewrite the expected output.
//
// Commands (key=value arguments; defaults in brackets):
//
//	new [shard=0] [epoch=1|max|N] [max-turns=3] [credits=4096] [max-fills=65536] [tenant-fills=max-fills/2]
//	    [deadline=10s] [stripes=64]
//	acquire key=K [tenant=a] [ns=ns0] [owner=0] [present]
//	                        → hit | lead fill=F turn=T epoch=E | joined wN fill=F | denied
//	finish|fail|check fill=F [turn=] [epoch=] [shard=]
//	                        → ok | error: ErrX; the token defaults to the last one
//	                          the script saw for fill F (a lead or a promotion)
//	cancel wN               → ok
//	notices                 → one line per waiter with a pending notice, which
//	                          is consumed, then "waiting: wN..." (or none)
//	advance-epoch E|max     → fenced=N | error: ErrX
//	epoch | stats | expire | next-deadline | close
//	tick DURATION           → now=+D (since the start of the script)
//	leave owner=N           → ok
//
// After every command the runner checks the credit invariant: credits in
// use, per tenant, equal the waiters still waiting, and a waiting waiter has
// no notice.
func TestScripts(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			runScript(t, file)
		})
	}
}

func runScript(t *testing.T, file string) {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	e := newScriptEnv(t)
	defer func() { e.d.Close() }()
	var out strings.Builder
	for i := 0; i < len(lines); {
		line := lines[i]
		if !strings.HasPrefix(line, "> ") {
			out.WriteString(line + "\n")
			i++
			continue
		}
		cmdLine := i + 1
		cmd := strings.TrimPrefix(line, "> ")
		i++
		var want []string
		for ; i < len(lines) && lines[i] != ""; i++ {
			want = append(want, lines[i])
		}
		have := e.run(cmd)
		e.checkInvariants(fmt.Sprintf("%s:%d: %s", file, cmdLine, cmd))
		out.WriteString(line + "\n")
		for _, h := range have {
			out.WriteString(h + "\n")
		}
		if !*update && !slices.Equal(have, want) {
			t.Errorf("%s:%d: > %s\nhave:\n%s\nwant:\n%s", file, cmdLine, cmd,
				strings.Join(have, "\n"), strings.Join(want, "\n"))
		}
	}
	if *update {
		if err := os.WriteFile(file, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

type scriptWaiter struct {
	name   string
	tenant string
	w      *Waiter
	seen   int // notices the script consumed
}

type scriptEnv struct {
	t       *testing.T
	d       *Directory
	start   time.Time
	now     time.Time
	waiters []*scriptWaiter
	tokens  map[FillID]Token // the last token seen per fill
}

func newScriptEnv(t *testing.T) *scriptEnv {
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	e := &scriptEnv{t: t, start: start, now: start, tokens: map[FillID]Token{}}
	e.d = e.mustNew(Config{})
	return e
}

func (e *scriptEnv) mustNew(cfg Config) *Directory {
	cfg.Now = func() time.Time { return e.now }
	d, err := New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	return d
}

type scriptArgs struct {
	t     *testing.T
	cmd   string
	pos   []string
	kv    map[string]string
	flags map[string]bool
}

func parseArgs(t *testing.T, cmd string) (string, *scriptArgs) {
	fields := strings.Fields(cmd)
	a := &scriptArgs{t: t, cmd: cmd, kv: map[string]string{}, flags: map[string]bool{}}
	for _, f := range fields[1:] {
		if k, v, ok := strings.Cut(f, "="); ok {
			a.kv[k] = v
		} else if f == "present" {
			a.flags[f] = true
		} else {
			a.pos = append(a.pos, f)
		}
	}
	return fields[0], a
}

func (a *scriptArgs) str(k, def string) string {
	if v, ok := a.kv[k]; ok {
		return v
	}
	return def
}

func (a *scriptArgs) uint(k string, def uint64) uint64 {
	v, ok := a.kv[k]
	if !ok {
		return def
	}
	if v == "max" {
		return math.MaxUint64
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		a.t.Fatalf("%s: %s=%q: %v", a.cmd, k, v, err)
	}
	return n
}

func (a *scriptArgs) has(k string) bool { _, ok := a.kv[k]; return ok }

func (e *scriptEnv) run(cmd string) []string {
	name, a := parseArgs(e.t, cmd)
	d := e.d
	switch name {
	case "new":
		d.Close()
		deadline, err := time.ParseDuration(a.str("deadline", "0s"))
		if err != nil {
			e.t.Fatal(err)
		}
		e.d = e.mustNew(Config{
			Shard:        ShardID(a.uint("shard", 0)),
			Epoch:        Epoch(a.uint("epoch", 0)),
			MaxTurns:     int(a.uint("max-turns", 0)),
			JoinCredits:  int(a.uint("credits", 0)),
			MaxFills:     int(a.uint("max-fills", 0)),
			TenantFills:  int(a.uint("tenant-fills", 0)),
			FillDeadline: deadline,
			Stripes:      int(a.uint("stripes", 0)),
		})
		e.waiters, e.tokens = nil, map[FillID]Token{}
		return []string{"ok"}
	case "acquire":
		r := Request{
			Key:       blockKey(a.str("key", "k")),
			Namespace: nsDigest(a.str("ns", "ns0")),
			Tenant:    a.str("tenant", "a"),
			Owner:     a.uint("owner", 0),
		}
		called := false
		res := d.Acquire(r, func() bool { called = true; return a.flags["present"] })
		switch res.Outcome {
		case Lead:
			e.tokens[res.Token.Fill] = res.Token
			return []string{fmt.Sprintf("lead %s", fmtToken(res.Token, d.cfg.Shard))}
		case Joined:
			sw := &scriptWaiter{name: fmt.Sprintf("w%d", len(e.waiters)+1), tenant: r.Tenant, w: res.Waiter}
			e.waiters = append(e.waiters, sw)
			return []string{fmt.Sprintf("joined %s fill=%d", sw.name, res.Waiter.Fill())}
		case Hit:
			if !called {
				e.t.Fatalf("%s: Hit without calling present", cmd)
			}
		}
		return []string{res.Outcome.String()}
	case "finish", "fail", "check":
		tok := e.token(a)
		var err error
		switch name {
		case "finish":
			err = d.Finish(tok)
		case "fail":
			err = d.Fail(tok)
		default:
			err = d.Check(tok)
		}
		return []string{errName(err)}
	case "cancel":
		e.waiter(a).w.Cancel()
		return []string{"ok"}
	case "notices":
		return e.notices()
	case "advance-epoch":
		to := a.pos[0]
		var n uint64 = math.MaxUint64
		if to != "max" {
			var err error
			if n, err = strconv.ParseUint(to, 10, 64); err != nil {
				e.t.Fatal(err)
			}
		}
		fenced, err := d.AdvanceEpoch(Epoch(n))
		if err != nil {
			return []string{errName(err)}
		}
		return []string{fmt.Sprintf("fenced=%d", fenced)}
	case "epoch":
		return []string{fmtEpoch(d.Epoch())}
	case "tick":
		dur, err := time.ParseDuration(a.pos[0])
		if err != nil {
			e.t.Fatal(err)
		}
		e.now = e.now.Add(dur)
		return []string{fmt.Sprintf("now=+%s", e.now.Sub(e.start))}
	case "expire":
		return []string{fmt.Sprintf("expired=%d", d.Expire())}
	case "next-deadline":
		if dl, ok := d.NextDeadline(); ok {
			return []string{fmt.Sprintf("+%s", dl.Sub(e.start))}
		}
		return []string{"none"}
	case "leave":
		d.LeaveOwner(a.uint("owner", 0))
		return []string{"ok"}
	case "close":
		d.Close()
		return []string{"ok"}
	case "stats":
		return fmtStats(d.Stats())
	}
	e.t.Fatalf("unknown command %q", cmd)
	return nil
}

func fmtEpoch(ep Epoch) string {
	if ep == math.MaxUint64 {
		return "epoch=max"
	}
	return fmt.Sprintf("epoch=%d", ep)
}

func fmtToken(t Token, shard ShardID) string {
	s := fmt.Sprintf("fill=%d turn=%d %s", t.Fill, t.Turn, fmtEpoch(t.Epoch))
	if t.Shard != shard {
		s += fmt.Sprintf(" shard=%d", t.Shard)
	}
	return s
}

func fmtStats(st Stats) []string {
	tenants := make([]string, 0, len(st.Credits))
	for tenant, n := range st.Credits {
		tenants = append(tenants, fmt.Sprintf("%s:%d", tenant, n))
	}
	slices.Sort(tenants)
	credits := strings.Join(tenants, ",")
	if credits == "" {
		credits = "-"
	}
	leading := make([]string, 0, len(st.TenantFills))
	for tenant, n := range st.TenantFills {
		leading = append(leading, fmt.Sprintf("%s:%d", tenant, n))
	}
	slices.Sort(leading)
	fills := fmt.Sprint(st.Fills)
	if len(leading) > 0 {
		fills += " (" + strings.Join(leading, ",") + ")"
	}
	return []string{
		fmt.Sprintf("%s fills=%s waiters=%d credits=%s", fmtEpoch(st.Epoch), fills, st.Waiters, credits),
		fmt.Sprintf("leads=%d joins=%d hits=%d denied=%d (credits=%d fills=%d tenant-fills=%d)",
			st.Leads, st.Joins, st.Hits, st.Denied, st.DeniedCredits, st.DeniedFills, st.DeniedTenantFills),
		fmt.Sprintf("finished=%d failed=%d fenced=%d promotions=%d expired=%d withdrawn=%d",
			st.Finished, st.Failed, st.Fenced, st.Promotions, st.Expired, st.Withdrawn),
	}
}

// token builds a token from fill= and overrides, starting from the last
// token the script saw for that fill.
func (e *scriptEnv) token(a *scriptArgs) Token {
	id := FillID(a.uint("fill", 0))
	tok, ok := e.tokens[id]
	if !ok {
		tok = Token{Shard: e.d.cfg.Shard, Fill: id, Epoch: e.d.Epoch(), Turn: 1}
	}
	if a.has("turn") {
		tok.Turn = uint32(a.uint("turn", 0))
	}
	if a.has("epoch") {
		tok.Epoch = Epoch(a.uint("epoch", 0))
	}
	if a.has("shard") {
		tok.Shard = ShardID(a.uint("shard", 0))
	}
	return tok
}

func (e *scriptEnv) waiter(a *scriptArgs) *scriptWaiter {
	for _, sw := range e.waiters {
		if len(a.pos) > 0 && sw.name == a.pos[0] {
			return sw
		}
	}
	e.t.Fatalf("%s: no such waiter", a.cmd)
	return nil
}

func (e *scriptEnv) notices() []string {
	var out, waiting []string
	for _, sw := range e.waiters {
		select {
		case n := <-sw.w.C():
			sw.seen++
			line := fmt.Sprintf("%s: %s", sw.name, n.Kind)
			if n.Kind == Promoted {
				e.tokens[n.Token.Fill] = n.Token
				line += " " + fmtToken(n.Token, e.d.cfg.Shard)
			} else if n.Token != (Token{}) {
				e.t.Errorf("%s: %s notice carries a token", sw.name, n.Kind)
			}
			if sw.seen > 1 {
				e.t.Errorf("%s: second notice %+v", sw.name, n)
			}
			out = append(out, line)
		default:
			if sw.seen == 0 {
				waiting = append(waiting, sw.name)
			}
		}
	}
	if len(waiting) == 0 {
		waiting = []string{"none"}
	}
	return append(out, "waiting: "+strings.Join(waiting, " "))
}

// checkInvariants: per tenant, credits in use == waiters in the waiting
// state, and a waiting waiter has no notice.
func (e *scriptEnv) checkInvariants(where string) {
	waiting := map[string]int{}
	for _, sw := range e.waiters {
		w := sw.w
		if w.d != e.d {
			continue // of a directory the script replaced
		}
		w.f.s.mu.Lock()
		st := w.state
		w.f.s.mu.Unlock()
		if st == waiterWaiting {
			waiting[sw.tenant]++
			if len(w.ch) != 0 || sw.seen != 0 {
				e.t.Errorf("%s: %s is waiting but has a notice", where, sw.name)
			}
		} else if len(w.ch)+sw.seen != 1 {
			e.t.Errorf("%s: %s left waiting with %d notices", where, sw.name, len(w.ch)+sw.seen)
		}
	}
	st := e.d.Stats()
	total := 0
	for _, n := range waiting {
		total += n
	}
	if !mapsEqual(st.Credits, waiting) || st.CreditsInUse != total || st.Waiters != total {
		e.t.Errorf("%s: credits %v (in use %d, waiters %d), want %v", where, st.Credits, st.CreditsInUse, st.Waiters, waiting)
	}
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
