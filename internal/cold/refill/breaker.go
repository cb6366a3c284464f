package refill

import (
	"sync"
	"time"
)

// BreakerState is the state of a Refiller's circuit breaker.
type BreakerState uint8

const (
	// Closed: refills reach the store.
	Closed BreakerState = iota
	// Open: refills return Missing(BreakerOpen) without calling the store,
	// until the cool-down has passed.
	Open
	// HalfOpen: the cool-down has passed; one probe refill may reach the
	// store, everyone else still gets Missing(BreakerOpen).
	HalfOpen
)

func (s BreakerState) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half-open"
	}
	return "unknown"
}

// outcome is how one admitted refill call went, as far as the store's health
// is concerned.
type outcome uint8

const (
	// succeeded: the store answered (a hit, NotFound, a legacy or corrupt
	// object all count: the store is up).
	succeeded outcome = iota
	// failed: the store was unavailable or too slow (our timeout fired).
	failed
	// neutral: the call says nothing about the store (the caller's own
	// context ended first).
	neutral
)

// breaker opens after threshold consecutive failed calls, stays open for
// cooldown, then lets one probe through (half-open): a probe that succeeds
// closes it, one that fails opens it again for another cool-down.
//
// A call is admitted by admit and must report exactly once by done with the
// ticket admit gave it.
type breaker struct {
	threshold int
	cooldown  time.Duration
	now       func() time.Time

	mu struct {
		sync.Mutex
		state    BreakerState // guarded by mu
		failures int          // consecutive failed calls while closed; guarded by mu
		openedAt time.Time    // when the breaker last opened; guarded by mu
		probing  bool         // a half-open probe is in flight; guarded by mu
		gen      uint64       // bumped on every state change; guarded by mu
	}
}

// ticket identifies an admitted call.
type ticket struct {
	probe bool
	gen   uint64
}

func newBreaker(threshold int, cooldown time.Duration, now func() time.Time) *breaker {
	return &breaker{threshold: threshold, cooldown: cooldown, now: now}
}

// admit reports whether a call may reach the store.
func (b *breaker) admit() (ticket, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.mu.state {
	case Closed:
		return ticket{gen: b.mu.gen}, true
	case Open:
		if b.now().Sub(b.mu.openedAt) < b.cooldown {
			return ticket{}, false
		}
		b.set(HalfOpen)
	}
	// Half-open: one probe at a time.
	if b.mu.probing {
		return ticket{}, false
	}
	b.mu.probing = true
	return ticket{probe: true, gen: b.mu.gen}, true
}

// done records the outcome of an admitted call.
func (b *breaker) done(t ticket, o outcome) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if t.gen != b.mu.gen {
		// The state changed while the call ran (a straggler admitted before
		// the breaker opened): its result no longer says anything new.
		return
	}
	if t.probe {
		b.mu.probing = false
		switch o {
		case succeeded:
			b.set(Closed)
		case failed:
			b.open()
		}
		return
	}
	switch o {
	case succeeded:
		b.mu.failures = 0
	case failed:
		b.mu.failures++
		if b.mu.failures >= b.threshold {
			b.open()
		}
	}
}

func (b *breaker) open() {
	b.set(Open)
	b.mu.openedAt = b.now()
}

// set changes state; the caller holds mu.
func (b *breaker) set(s BreakerState) {
	b.mu.state = s
	b.mu.failures = 0
	b.mu.probing = false
	b.mu.gen++
}

func (b *breaker) state() BreakerState {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.mu.state == Open && b.now().Sub(b.mu.openedAt) >= b.cooldown {
		return HalfOpen
	}
	return b.mu.state
}
