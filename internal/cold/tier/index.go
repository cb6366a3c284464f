package tier

// The presence index answers "does the cold tier hold block (namespace,
// key)?" from memory, without a store call, so LOOKUP and RESP EXISTS can
// count blocks that only the cold tier holds (docs/OPERATIONS.md, "Cold
// presence index").
//
// What it holds. One 128-bit fingerprint per pointer object
// (index/<ns>/<key>, pack.PointerKey): two maphash sums over the namespace
// digest and the block key, with seeds drawn at start. The namespace digest
// covers the tenant, so one tenant's keys never answer for another's; the
// seeds are secret to the process, so nobody can build a key whose
// fingerprint collides with another tenant's block. A collision between
// honest keys (about n/2^128 per query) is a false positive, which is
// allowed: a GET after a present answer may still miss.
//
// How it is kept. It is built by listing the store's index/ prefix in the
// background (RunIndex), while the tier answers from what is indexed so
// far (Stats.IndexReady says when the listing finished); every pointer the
// tier's sink publishes is added as its PUT succeeds, and Delete removes
// the block's entry. A refill that finds no pointer drops the entry, so a
// pointer removed behind the tier's back (reclaim, another node's delete)
// stops answering present after the first GET. In a cluster whose nodes
// share one bucket, pointers other nodes publish after this node's start
// are found by the periodic rescan (Config.IndexRescan).
//
// Bound. At most Config.IndexMax entries (cold_index_max). Past it nothing
// is added: the add is counted (Stats.IndexFull), the listing stops, and a
// block without an entry answers absent, so LOOKUP falls back to what it
// did before the index (DRAM only) for those blocks; GET still refills
// them.

import (
	"context"
	"errors"
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/cold/pack"
)

// DefaultIndexMax is the default bound of the presence index (entries).
const DefaultIndexMax = 1 << 20

// IndexEntryBytes is the measured heap cost of one index entry, map
// overhead and growth slack included (TestIndexEntryBytes); the memory
// formula in docs/OPERATIONS.md uses it.
const IndexEntryBytes = 64

// indexShards spreads the index over this many locks: LOOKUPs read it
// concurrently with the sink's adds.
const indexShards = 16

// indexRetryFirst and indexRetryMax bound the wait between listings that
// failed (the store is down at start): 1s, doubling, at most 30s.
const (
	indexRetryFirst = time.Second
	indexRetryMax   = 30 * time.Second
)

// errIndexFull stops a listing once the index is full.
var errIndexFull = errors.New("gpucache/cold/tier: presence index full")

// fingerprint is a block's 128-bit presence fingerprint.
type fingerprint [2]uint64

// presenceIndex is a bounded set of fingerprints.
type presenceIndex struct {
	seeds  [2]maphash.Seed
	max    int64
	shards [indexShards]struct {
		sync.RWMutex
		m map[fingerprint]struct{} // guarded by the shard's RWMutex
	}
	entries atomic.Int64  // entries in all shards; at most max
	adds    atomic.Uint64 // entries added, ever (removeStale's generation)
	full    atomic.Uint64 // adds refused because the index was full
	ready   atomic.Bool   // a listing of the whole index/ prefix finished
	hits    atomic.Uint64 // present answers
	listed  atomic.Uint64 // pointer keys seen by listings
	loads   atomic.Uint64 // listings finished
	loadErr atomic.Uint64 // listings failed (retried)
}

func newPresenceIndex(max int) *presenceIndex {
	x := &presenceIndex{seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}, max: int64(max)}
	for i := range x.shards {
		x.shards[i].m = make(map[fingerprint]struct{})
	}
	return x
}

func (x *presenceIndex) fp(d identity.NamespaceDigest, key identity.BlockKey) fingerprint {
	var b [64]byte
	copy(b[:32], d[:])
	copy(b[32:], key[:])
	return fingerprint{maphash.Bytes(x.seeds[0], b[:]), maphash.Bytes(x.seeds[1], b[:])}
}

// add indexes the block and reports false if the index is full.
func (x *presenceIndex) add(f fingerprint) bool {
	s := &x.shards[f[0]%indexShards]
	s.Lock()
	defer s.Unlock()
	if _, ok := s.m[f]; ok {
		return true
	}
	for {
		n := x.entries.Load()
		if n >= x.max {
			x.full.Add(1)
			return false
		}
		if x.entries.CompareAndSwap(n, n+1) {
			break
		}
	}
	s.m[f] = struct{}{}
	x.adds.Add(1)
	return true
}

// removeStale drops the block unless an entry was added since gen (an
// adds value read before the caller found the block missing in the
// store): a pointer published meanwhile keeps its entry.
func (x *presenceIndex) removeStale(f fingerprint, gen uint64) {
	s := &x.shards[f[0]%indexShards]
	s.Lock()
	defer s.Unlock()
	if _, ok := s.m[f]; ok && x.adds.Load() == gen {
		delete(s.m, f)
		x.entries.Add(-1)
	}
}

// remove drops the block and reports whether it was indexed.
func (x *presenceIndex) remove(f fingerprint) bool {
	s := &x.shards[f[0]%indexShards]
	s.Lock()
	defer s.Unlock()
	if _, ok := s.m[f]; ok {
		delete(s.m, f)
		x.entries.Add(-1)
		return true
	}
	return false
}

func (x *presenceIndex) has(f fingerprint) bool {
	s := &x.shards[f[0]%indexShards]
	s.RLock()
	_, ok := s.m[f]
	s.RUnlock()
	if ok {
		x.hits.Add(1)
	}
	return ok
}

// Present reports whether the cold tier holds block key of namespace
// digest d, from memory: true may be stale (a GET may still miss), false
// is never wrong for a block this tier published or found in its listing,
// unless the index is full (Stats.IndexFull) or the block was deleted.
// It never touches the store.
func (t *Tier) Present(d identity.NamespaceDigest, key identity.BlockKey) bool {
	return t.idx.has(t.idx.fp(d, key))
}

// LoadIndex lists the store's index/ prefix once and adds every pointer
// it finds, stopping early when the index is full (not an error) or ctx
// ends. Pointers deleted by this tier while it runs are not added back.
// Keys under index/ that are not pointer keys are skipped.
func (t *Tier) LoadIndex(ctx context.Context) error {
	err := t.cfg.Store.List(ctx, pointerPrefix, func(o cold.ObjectInfo) error {
		d, key, err := pack.ParsePointerKey(o.Key)
		if err != nil {
			return nil
		}
		t.idx.listed.Add(1)
		f := t.idx.fp(d, key)
		if t.hide.has(f) {
			return nil
		}
		if !t.idx.add(f) {
			return errIndexFull
		}
		return nil
	})
	if err != nil && !errors.Is(err, errIndexFull) {
		t.idx.loadErr.Add(1)
		return err
	}
	t.idx.loads.Add(1)
	t.idx.ready.Store(true)
	return nil
}

// RunIndex builds the presence index in the background: it lists the
// store (LoadIndex) until a listing succeeds, waiting 1s, doubling up to
// 30s, after each failure; then, if Config.IndexRescan is positive, lists
// again every IndexRescan to pick up pointers other nodes published. It
// returns when ctx ends or the tier closes. Until the first listing ends
// the tier answers from the pointers found so far and those it published.
func (t *Tier) RunIndex(ctx context.Context) {
	wait := indexRetryFirst
	var tm *time.Timer
	for {
		err := t.LoadIndex(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			t.log.Warn("cold presence index: listing the store failed; retrying (LOOKUP counts DRAM and the blocks indexed so far)", "err", err, "retry_in", wait)
		default:
			st := t.Stats()
			t.log.Info("cold presence index listed", "entries", st.IndexEntries, "max", st.IndexMax, "full", st.IndexFull > 0)
			if t.cfg.IndexRescan <= 0 {
				return
			}
			wait = t.cfg.IndexRescan
		}
		if tm == nil {
			tm = time.NewTimer(wait)
			defer tm.Stop()
		} else {
			tm.Reset(wait)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.stop:
			return
		case <-tm.C:
		}
		if err != nil {
			wait = min(2*wait, indexRetryMax)
		}
	}
}

// pointerPrefix is the prefix of every pointer key (pack doc, "Object keys").
const pointerPrefix = "index/"

// publishStore is the store the tier's sink writes to: every pointer PUT
// that succeeds adds its block to the presence index and lifts the block's
// hide (a block written again after a delete is present again).
type publishStore struct {
	cold.Store
	t *Tier
}

func (p publishStore) Put(ctx context.Context, key string, body []byte, opts cold.PutOptions) error {
	err := p.Store.Put(ctx, key, body, opts)
	if (err == nil || errors.Is(err, cold.ErrExists)) && strings.HasPrefix(key, manifestPrefix) {
		p.t.ledger.commit(key, time.Now()) // quota.go
	}
	if err == nil && strings.HasPrefix(key, pointerPrefix) {
		if d, k, perr := pack.ParsePointerKey(key); perr == nil {
			f := p.t.idx.fp(d, k)
			p.t.hide.lift(f)
			p.t.idx.add(f)
		}
		p.t.st.blocksWritten.Add(1)
	}
	return err
}
