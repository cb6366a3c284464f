package flash

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"sync"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/lower"
)

// Tier is the local flash tier: a lower.Tier over segment files in one
// directory. Every method is safe for concurrent use.
type Tier struct {
	cfg        Config
	log        *slog.Logger
	hooks      *Hooks
	direct     bool
	maxPayload int64 // the largest payload a segment holds
	batchBytes int64 // the bytes one write gathers, at most

	wake       chan struct{}   // cap 1: the writer has work
	stop       chan struct{}   // closed by Close
	reclaimReq chan chan error // writer → reclaimer: make room for a segment
	degradedCh chan struct{}   // cap 1: writer → reclaimer: start the retry timer
	wg         sync.WaitGroup
	closeOnce  sync.Once
	closeErr   error

	st counters

	// w is the writer goroutine's own state.
	w struct {
		dirty *segment // written since its last sync
		fails int      // write errors in a row
	}

	mu struct {
		sync.Mutex
		index     map[blockID]*entry
		tenants   map[identity.NamespaceDigest]string // learned owners, bounded
		tenantUse map[string]*tenantUse
		quotas    map[string]int64
		segs      map[uint64]*segment // every segment the tier accounts
		open      *segment            // the segment appended to; nil until the first write
		nextSeq   uint64
		bytes     int64 // the segments' sizes
		live      int64 // payload bytes of the blocks held
		staged    int64 // payload bytes queued in memory (bounded by WriteBuffer)
		queue     []*item
		ticket    uint64 // the last ticket given
		written   uint64 // every item up to this ticket is written or skipped
		durable   uint64 // ... and synced
		flushWant uint64 // the ticket a Flush waits for
		writeErrs uint64 // write and sync errors so far
		progress  chan struct{}
		degraded  bool
		why       error // why it degraded
		retry     bool  // a retry is asked for
		closing   bool  // Close began: Evicted declines
		closed    bool  // the files are closed
	}
}

var _ lower.Tier = (*Tier)(nil)

// Direct reports whether the tier uses O_DIRECT (else buffered I/O).
func (t *Tier) Direct() bool { return t.direct }

// Degraded reports whether the tier is degraded, and why.
func (t *Tier) Degraded() (bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.mu.degraded, t.mu.why
}

// kick wakes the writer.
func (t *Tier) kick() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// progressLocked wakes everyone waiting on the writer (Flush).
func (t *Tier) progressLocked() {
	close(t.mu.progress)
	t.mu.progress = make(chan struct{})
}

// Present implements lower.Tier: whether the index holds the block.
func (t *Tier) Present(d identity.NamespaceDigest, key identity.BlockKey) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return !t.mu.closed && t.mu.index[blockID{d, key}] != nil
}

// Stored implements lower.Tier: it learns the tenant of id's namespace.
// An opaque-key block the tier holds is dropped (with a tombstone): its
// new value may differ. A token-chain key names its bytes, so a copy on
// flash stays good and the next eviction of it costs no write.
func (t *Tier) Stored(id identity.CacheIdentity, d identity.NamespaceDigest, key identity.BlockKey) {
	t.mu.Lock()
	t.learnLocked(d, id.Tenant)
	tomb := false
	if len(id.Opaque) > 0 {
		if e := t.mu.index[blockID{d, key}]; e != nil {
			tomb = t.dropLocked(e, dropOverwrite)
			t.st.overwrites.Add(1)
		}
	}
	t.mu.Unlock()
	if tomb {
		t.kick()
	}
}

// Evicted implements lower.Tier: it copies the block into the write
// buffer and returns true, or declines. It takes the block at once (true,
// no copy) when the tier already holds it. It never waits for I/O; the
// copy is made outside the tier's lock.
func (t *Tier) Evicted(d identity.NamespaceDigest, key, parent identity.BlockKey, tokens uint32, payload []byte) bool {
	return t.offer(d, key, parent, tokens, payload) == Taken
}

// Offer is what an offered block became (Spill).
type Offer int

// Offers.
const (
	Taken    Offer = iota // queued for writing, or already on the tier
	Full                  // the write buffer is full: offer it again after Flush
	Declined              // not taken for another reason (degraded, unknown tenant, too large, over its tenant's quota, closing)
)

// Spill offers a block as Evicted does, for the drain spill: it tells a
// full write buffer (Flush, then offer the block again) from a refusal.
func (t *Tier) Spill(d identity.NamespaceDigest, key, parent identity.BlockKey, tokens uint32, payload []byte) Offer {
	return t.offer(d, key, parent, tokens, payload)
}

func (t *Tier) offer(d identity.NamespaceDigest, key, parent identity.BlockKey, tokens uint32, payload []byte) Offer {
	id := blockID{d, key}
	n := int64(len(payload))
	t.mu.Lock()
	if t.mu.closing {
		t.mu.Unlock()
		return Declined
	}
	if t.mu.index[id] != nil {
		t.mu.Unlock()
		t.st.alreadyHeld.Add(1)
		return Taken
	}
	tenant, known := t.mu.tenants[d]
	q := t.mu.quotas[tenant]
	var declined *counter
	res := Declined
	switch {
	case t.mu.degraded:
		declined = &t.st.declinedDegraded
	case !known:
		declined = &t.st.declinedUnknown
	case n > t.maxPayload || n > t.cfg.WriteBuffer:
		declined = &t.st.declinedLarge // never fits: not Full, which Spill would retry after a Flush
	case q > 0 && n > q:
		declined = &t.st.declinedQuota
	case t.mu.staged+n > t.cfg.WriteBuffer:
		declined, res = &t.st.declinedFull, Full
	}
	if declined != nil {
		t.mu.Unlock()
		declined.Add(1)
		return res
	}
	t.mu.staged += n // reserved while the copy is made
	t.mu.Unlock()

	buf := alignedBuf(int(recHeaderSize + roundUp(n)))
	copy(buf[recHeaderSize:], payload)

	t.mu.Lock()
	if t.mu.closing || t.mu.degraded || t.mu.index[id] != nil {
		held := t.mu.index[id] != nil
		t.mu.staged -= n
		t.mu.Unlock()
		if held {
			return Taken
		}
		return Declined
	}
	t.fitQuotaLocked(tenant, n)
	e := &entry{id: id, parent: parent, tokens: tokens, tenant: tenant, n: n, state: stQueued, buf: buf}
	t.insertLocked(e)
	t.enqueueLocked(&item{rec: e})
	t.mu.Unlock()
	t.kick()
	return Taken
}

// Delete implements lower.Tier: the block leaves the index at once, and a
// tombstone is queued when its record is (being) written, so a restart
// does not bring it back. A block still queued is dropped from the queue.
// While the tier is degraded (or closed) the tombstone cannot be written:
// Delete then reports the block known, with ErrDegraded (ErrClosed).
func (t *Tier) Delete(_ context.Context, _ identity.Namespace, d identity.NamespaceDigest, key identity.BlockKey) (bool, error) {
	t.mu.Lock()
	e := t.mu.index[blockID{d, key}]
	if e == nil {
		t.mu.Unlock()
		return false, nil
	}
	tomb := t.dropLocked(e, dropDelete)
	var err error
	switch {
	case !tomb:
	case t.mu.closing:
		err = fmt.Errorf("%w: the tombstone of %s/%s may not be written", ErrClosed, d, key)
	case t.mu.degraded:
		err = fmt.Errorf("%w: the tombstone of %s/%s waits for the tier to write again", ErrDegraded, d, key)
	}
	t.mu.Unlock()
	t.st.deletes.Add(1)
	if tomb {
		t.kick()
	}
	return true, err
}

// SetTenantQuotas replaces the per-tenant quotas (a config reload); a
// tenant over its new quota loses its own oldest blocks at once.
func (t *Tier) SetTenantQuotas(q map[string]int64) {
	t.mu.Lock()
	t.mu.quotas = maps.Clone(q)
	if t.mu.quotas == nil {
		t.mu.quotas = map[string]int64{}
	}
	dropped := 0
	for tenant := range t.mu.quotas {
		dropped += t.fitQuotaLocked(tenant, 0)
	}
	t.mu.Unlock()
	if dropped > 0 {
		t.kick()
	}
}

// Retry asks a degraded tier to try writing again now (the tier also
// retries by itself every RetryAfter). It is a no-op on a healthy tier.
func (t *Tier) Retry() {
	t.mu.Lock()
	asked := t.mu.degraded && !t.mu.closing
	t.mu.retry = asked
	t.mu.Unlock()
	if asked {
		t.kick()
	}
}

// Flush waits until everything queued when it was called is written and
// synced, the tier degrades (ErrDegraded), or ctx ends. It returns
// ErrWrite when a write or sync failed meanwhile.
func (t *Tier) Flush(ctx context.Context) error {
	t.mu.Lock()
	target, errs := t.mu.ticket, t.mu.writeErrs
	t.mu.flushWant = max(t.mu.flushWant, target)
	t.mu.Unlock()
	t.kick()
	for {
		t.mu.Lock()
		var err error
		done := true
		switch {
		case t.mu.closed:
			err = ErrClosed
		case t.mu.durable >= target:
			if t.mu.writeErrs > errs {
				err = fmt.Errorf("%w: %d write errors while flushing", ErrWrite, t.mu.writeErrs-errs)
			}
		case t.mu.degraded:
			err = fmt.Errorf("%w: %v", ErrDegraded, t.mu.why)
		default:
			done = false
		}
		ch := t.mu.progress
		t.mu.Unlock()
		if done {
			return err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Close flushes what is queued (unless the tier is degraded), stops the
// writer and the reclaimer and closes the files. A caller that needs a
// bound on the flush uses CloseContext.
func (t *Tier) Close() error { return t.CloseContext(context.Background()) }

// CloseContext is Close with its flush bounded by ctx: once ctx ends, the
// records still queued are not written (logged as such), and the writer
// stops after the write it is in.
func (t *Tier) CloseContext(ctx context.Context) error {
	t.closeOnce.Do(func() {
		t.mu.Lock()
		t.mu.closing = true
		degraded := t.mu.degraded
		t.mu.Unlock()
		var err error
		if !degraded {
			err = t.Flush(ctx)
		}
		close(t.stop)
		t.wg.Wait()
		t.mu.Lock()
		t.mu.closed = true
		lost := len(t.mu.queue)
		for _, s := range t.mu.segs {
			if cerr := s.closeFiles(); cerr != nil && err == nil {
				err = cerr
			}
		}
		if o := t.mu.open; o != nil && o.gone {
			o.closeFiles() // lost while open: not in segs
		}
		t.progressLocked()
		t.mu.Unlock()
		if lost > 0 {
			t.log.Warn("flash: closed with records not written", "dir", t.cfg.Dir, "records", lost)
		}
		t.closeErr = err
	})
	return t.closeErr
}

// Local implements lower.Local: the flash tier is on this host, so a
// LOOKUP with a lease reads its blocks into DRAM and leases them.
func (t *Tier) Local() bool { return true }
