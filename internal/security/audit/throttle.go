package audit

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"
)

// Throttle bounds the auth_failure lines that failed authentications from
// one source can make the audit log write. Every failure is counted
// (Stats.AuthFailures); per source address at most Lines are written in
// each Interval, and the rest are counted and reported in one summary
// line per source and interval (event "suppressed").
//
// A source is the peer's IP address without its port; an IPv6 address
// counts as its /64 prefix, the block one host usually holds. The table of
// sources holds at most Sources entries; a failure from a source not in a
// full table falls in one shared bucket, the aggregate source "*", with
// the same Lines per Interval. An entry leaves the table when its
// interval ends, so each holds its place for at least an Interval: on
// average at most (Sources + 1) × Lines auth_failure lines, plus one
// summary per entry, are written per Interval, however many sources.
//
// The zero value takes the defaults (DefaultThrottle).
type Throttle struct {
	// Lines is how many auth_failure events from one source are written
	// per Interval. Default 10.
	Lines int
	// Interval is the window Lines applies to; a source's window starts
	// with its first failure. Default 10s.
	Interval time.Duration
	// Sources bounds the sources tracked at once. Default 1024.
	Sources int
}

// DefaultThrottle is the Throttle that a zero value takes.
var DefaultThrottle = Throttle{Lines: 10, Interval: 10 * time.Second, Sources: 1024}

func (t Throttle) withDefaults() Throttle {
	if t.Lines <= 0 {
		t.Lines = DefaultThrottle.Lines
	}
	if t.Interval <= 0 {
		t.Interval = DefaultThrottle.Interval
	}
	if t.Sources <= 0 {
		t.Sources = DefaultThrottle.Sources
	}
	return t
}

// AggregateSource is the source a summary names for failures from sources
// that found the table of sources full.
const AggregateSource = "*"

// maxSourceLen bounds a source key that is not an IP address (a Unix
// socket's name, a test's pipe): the table's memory stays bounded.
const maxSourceLen = 64

// SourceOf returns the throttle's source for a peer address ("ip:port",
// or a bare IP): the IP without its port and zone, IPv4-mapped IPv6 as
// IPv4, other IPv6 as its /64 prefix. An address that is not an IP is its
// host part, cut to 64 bytes.
func SourceOf(remote string) string {
	var a netip.Addr
	if ap, err := netip.ParseAddrPort(remote); err == nil {
		a = ap.Addr()
	} else if a, err = netip.ParseAddr(remote); err != nil {
		if host, _, err := net.SplitHostPort(remote); err == nil {
			remote = host
		}
		if len(remote) > maxSourceLen {
			remote = remote[:maxSourceLen]
		}
		return remote
	}
	a = a.Unmap().WithZone("")
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}

// window is one source's current interval.
type window struct {
	start      time.Time
	written    int
	suppressed uint64
}

// summary is one "suppressed" line to write.
type summary struct {
	source string
	count  uint64
	span   time.Duration
}

// throttle is the table of sources. Its timer writes the summaries of
// windows that ended, so a flood that stops is still summarized, and
// empties the table; it is pending exactly while the table is not empty.
type throttle struct {
	cfg   Throttle
	flush func() // the timer's callback: the Logger's Flush

	mu        sync.Mutex
	sources   map[string]*window // guarded by mu
	aggregate *window            // guarded by mu; nil when unused
	timer     *time.Timer        // guarded by mu; nil when not pending
	nextSweep time.Time          // guarded by mu; the earliest end of a window in the table
	closed    bool               // guarded by mu
}

// admit decides whether a failure from src at now is written, and returns
// the summaries of windows that ended.
func (t *throttle) admit(src string, now time.Time) (write bool, sums []summary) {
	t.mu.Lock()
	defer t.mu.Unlock()
	w, ok := t.sources[src]
	if !ok {
		if len(t.sources) >= t.cfg.Sources && !now.Before(t.nextSweep) {
			sums = t.sweep(now, false)
		}
		switch {
		case len(t.sources) < t.cfg.Sources:
			w = &window{start: now}
			t.sources[src] = w
		case t.aggregate != nil:
			w, src = t.aggregate, AggregateSource
		default:
			t.aggregate = &window{start: now}
			w, src = t.aggregate, AggregateSource
		}
		if t.nextSweep.IsZero() || w.start.Add(t.cfg.Interval).Before(t.nextSweep) {
			t.nextSweep = w.start.Add(t.cfg.Interval)
		}
		t.arm(now)
	}
	if now.Sub(w.start) >= t.cfg.Interval {
		if w.suppressed > 0 {
			sums = append(sums, summary{source: src, count: w.suppressed, span: t.cfg.Interval})
		}
		*w = window{start: now}
	}
	if w.written < t.cfg.Lines {
		w.written++
		return true, sums
	}
	w.suppressed++
	return false, sums
}

// arm starts the timer for the earliest window's end, unless it is
// pending or the throttle is closed. t.mu is held.
func (t *throttle) arm(now time.Time) {
	if t.timer != nil || t.closed || (len(t.sources) == 0 && t.aggregate == nil) {
		return
	}
	d := t.nextSweep.Sub(now)
	if d <= 0 {
		d = time.Millisecond // already due; an injected clock may run ahead of the timer's
	}
	t.timer = time.AfterFunc(d, t.fire)
}

// fire is the timer's callback.
func (t *throttle) fire() {
	t.mu.Lock()
	t.timer = nil
	t.mu.Unlock()
	t.flush()
}

// sweep removes the windows that ended by now (every window when all is
// set) and returns the summaries of those that suppressed something.
// t.mu is held.
func (t *throttle) sweep(now time.Time, all bool) []summary {
	var sums []summary
	span := func(w *window) time.Duration {
		if all && now.Sub(w.start) < t.cfg.Interval {
			return now.Sub(w.start)
		}
		return t.cfg.Interval
	}
	next := time.Time{}
	for src, w := range t.sources {
		if !all && now.Sub(w.start) < t.cfg.Interval {
			if end := w.start.Add(t.cfg.Interval); next.IsZero() || end.Before(next) {
				next = end
			}
			continue
		}
		if w.suppressed > 0 {
			sums = append(sums, summary{source: src, count: w.suppressed, span: span(w)})
		}
		delete(t.sources, src)
	}
	if w := t.aggregate; w != nil {
		if all || now.Sub(w.start) >= t.cfg.Interval {
			if w.suppressed > 0 {
				sums = append(sums, summary{source: AggregateSource, count: w.suppressed, span: span(w)})
			}
			t.aggregate = nil
		} else if end := w.start.Add(t.cfg.Interval); next.IsZero() || end.Before(next) {
			next = end
		}
	}
	t.nextSweep = next
	return sums
}

// due sweeps the windows that ended by now and re-arms the timer for the
// rest; with all set (Close) it sweeps every window and stops the timer.
func (t *throttle) due(now time.Time, all bool) []summary {
	t.mu.Lock()
	defer t.mu.Unlock()
	sums := t.sweep(now, all)
	if all {
		t.closed = true
		if t.timer != nil {
			t.timer.Stop()
			t.timer = nil
		}
		return sums
	}
	t.arm(now)
	return sums
}

// len is the number of sources tracked, the aggregate bucket included.
func (t *throttle) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(t.sources)
	if t.aggregate != nil {
		n++
	}
	return n
}

// message is a summary's text.
func (s summary) message() string {
	from := s.source
	if from == AggregateSource {
		from = "other sources (the table of sources was full)"
	}
	return fmt.Sprintf("suppressed %d %s events from %s in the last %s", s.count, EventAuthFailure, from, s.span)
}
