// Package tier connects the hot tier to the cold tier (G4): blocks
// evicted from DRAM are written behind into packs, and a hot miss is
// refilled from the packs.
//
// Write-behind. The hot tier knows a block's namespace digest, key, parent
// and bytes, but a manifest v3 binds each range to the block's full
// identity, token ids included (ADR 0005). So the server tells the tier each
// block's identity when it stores it (Remember), the tier keeps the identity
// tail in a pointer-free table, and when the hot tier evicts the block
// (Evicted, called under the hot tier's lock) the tier copies its bytes
// into a pending batch. Flush turns batches into packs, queues them on the
// sink (which verifies each pack before any write and publishes pack,
// manifest, then pointers) and drains it. When the budget is full an
// evicted block is dropped and counted: the cold tier is a cache too, and
// eviction must never wait for storage.
//
// Budget. One byte budget, Config.PendingBytes (cold_pending), bounds
// everything the write-behind holds: the copies of evicted blocks waiting in
// batches, and their packs in the sink, pending or failed, until they are
// written or given up. A block takes its payload plus an allowance for its
// share of the pack's metadata (blockCost) when it is copied; its pack takes
// over those bytes when it is queued (sink.EnqueuePaid), so there is no
// moment in which the same bytes could be counted for someone else. Beyond
// the budget, the heap holds at most the pack being built. A pack given up
// (its build or queueing failed, or the sink failed it: a permanent error,
// or three charged attempts) returns its bytes; the loss is counted
// (Stats.PacksGivenUp, BlocksGivenUp) and logged once per flush.
//
// Outages. The sink does not charge attempts that fail while the store is
// down (sink package doc, "Outages"): the packs stay queued, within the
// budget, and the first flush after the store answers again writes them.
// While the store is down, Run's flushes probe it with a doubling backoff
// (Sink.RetryBackoff, default 1s, up to 30s); Flush probes at once. The
// sink logs the change to degraded and the recovery once each; the tier
// logs, once each, when a full budget starts and stops dropping evicted
// blocks.
//
// Refill. Refill asks refill.RefillKey for (namespace, key), both from the
// authenticated request; a corrupt, foreign or legacy object is a miss.
//
// Seals. With Config.Keyring set, every manifest the tier writes carries
// an HMAC-SHA256 seal made with the keyring's current key (pack.BuildWith with Options.Sealer;
// the sink's admission check verifies it), and every refill requires a
// manifest seal that verifies now (refill.Config.Keyring), so a bucket
// rewritten by someone without the secret yields misses, not bytes.
// Config.OnIntegrity receives each refill miss that points at corruption or
// tampering (refill.IntegrityEvent). Without a keyring the tier writes and
// reads unsealed manifests, and a sealed one is a miss.
//
// Degrade. Every store call of the refill and the write-behind goes through
// cold.WithDegrade, the cold tier's degrade boundary: each call is bounded
// (refill reads by RefillBudget, sink writes by the sink's PutTimeout), and
// Config.Faults arms the failpoints the store names (storage_loss and
// nvme_timeout on the local directory, s3_unavailable and s3_slow on S3).
// A fault on the read path is a refill miss (n is 0, no payload byte in
// dst, nothing cached, nothing written) within RefillBudget; on the write
// path it is a transient sink failure: the job stays queued and a later
// flush writes it. docs/FAILURES.md has the table.
package tier

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/cold/crypt"
	"github.com/gpucache/gpucache/internal/cold/lifecycle"
	"github.com/gpucache/gpucache/internal/cold/pack"
	"github.com/gpucache/gpucache/internal/cold/refill"
	"github.com/gpucache/gpucache/internal/cold/sink"
	"github.com/gpucache/gpucache/internal/degrade"
	"github.com/gpucache/gpucache/internal/security/seal"
)

// Config configures a Tier.
// DefaultManifestCacheBytes bounds the heap the refill's cache of verified
// manifests keeps alive, unless Config.Refill.ManifestCacheBytes says
// otherwise. It is a term of the daemon's memory bound (OPERATIONS.md).
const DefaultManifestCacheBytes int64 = 32 << 20

// DefaultPendingBytes is Config.PendingBytes unless set: four 64 MiB
// blocks (the hot tier's default largest class, ADR 0015) with their
// metadata, so a burst of evicted LMCache chunks is written behind rather
// than dropped while the previous pack is still being written.
const DefaultPendingBytes int64 = 256 << 20

// MaxBlockOverhead bounds the metadata allowance one block takes from
// PendingBytes on top of its payload (costLocked): its token ids (at most
// identity.MaxBlockTokens of 4 bytes), its namespace's canonical encoding
// twice (at most identity.MaxCanonicalLen each), an opaque name (at most
// identity.MaxOpaqueLen) and blockSlack, rounded up to 1 MiB. A budget
// below the largest payload plus this drops every block of that size.
const MaxBlockOverhead int64 = 1 << 20

type Config struct {
	// Store is the cold object store (required).
	Store cold.Store
	// PackBlocks is the most blocks in one pack. Default 64; at most 1000,
	// so a pack's objects (pack, manifest, one pointer per block) fit one
	// sink job.
	PackBlocks int
	// PackBytes is the payload size at which a batch becomes a pack.
	// Default 64 MiB.
	PackBytes int64
	// PendingBytes bounds the bytes the write-behind holds: evicted blocks
	// copied into batches (payload plus a metadata allowance each) and the
	// packs queued on the sink, pending or failed, until they are written
	// or given up. Evicted blocks beyond it are dropped. These bytes live
	// on the Go heap, so this is also the write-behind's heap budget (plus
	// the one pack being built). Default DefaultPendingBytes (256 MiB);
	// it must hold one largest block plus MaxBlockOverhead, or that
	// block is always dropped.
	PendingBytes int64
	// RememberBlocks bounds the identities kept for blocks in the hot tier.
	// Default 1<<20.
	RememberBlocks int
	// Sink configures the write queue. The tier sets its Verify and its
	// Budget (PendingBytes; Sink.MaxBytes is ignored), its Logger when
	// unset (to Logger), and its RetryBackoff when unset (to 1s).
	Sink sink.Config
	// Refill configures reads. Unset, it caches up to 4096 verified
	// manifests and keeps pointers for 5s.
	Refill refill.Config
	// ReclaimInterval is how often Run reclaims unreferenced objects of the
	// namespaces this tier wrote (lifecycle.Reclaim: reference-safe,
	// verified deletes, after ReclaimGrace). Default 1h; negative disables.
	ReclaimInterval time.Duration
	// ReclaimGrace is the minimum age of an object before reclaim may
	// delete it. Default 24h.
	ReclaimGrace time.Duration
	// Logger receives write-behind events. Default slog.Default().
	Logger *slog.Logger
	// Keyring, when set, seals every manifest the tier writes with the
	// keyring's current key and is the refill's Keyring: a refill then
	// requires a kind-1 seal that verifies now (rotation grace and expiry
	// included). Nil (the default) writes unsealed manifests, as before,
	// unless Refill.Keyring is set, which then serves for both.
	Keyring *seal.Keyring
	// OnIntegrity, when set, receives every refill miss that points at
	// corruption or tampering (refill.Config.OnIntegrity: called
	// synchronously on the refilling goroutine, possibly concurrently; it
	// must not block). Nil falls back to Refill.OnIntegrity. Such misses
	// are counted in Stats.RefillIntegrity either way.
	OnIntegrity func(refill.IntegrityEvent)
	// Crypt, when set, encrypts every pack the tier writes with AES-256-GCM
	// under the tenant's key for the keyring's current key id (manifest
	// v4, pack/doc.go "Encoded blocks") and opens encrypted packs on refill
	// while their key id is usable (rotation grace included); see
	// refill.Config.Crypt. Nil (the default) writes unencrypted packs, and
	// an encrypted pack is a refill miss. Unencrypted packs always read.
	Crypt *crypt.Keyring
	// Compress, when set, compresses each block before encryption and
	// keeps the compressed form only where it saves at least
	// CompressMinSavingPct percent (pack.Options). Nil (the default): no
	// compression. Compressed packs always read.
	Compress pack.Compressor
	// CompressBytePlanes compresses each block's byte planes instead of
	// its bytes (pack.Options.BytePlanes).
	CompressBytePlanes bool
	// CompressMinSavingPct: see pack.Options.MinSavingPct. Default
	// pack.DefaultMinSavingPct.
	CompressMinSavingPct int
	// RefillBudget bounds the time from Refill's call to its answer, hit or
	// miss: it is the refiller's per-call Timeout (it overrides
	// Refill.Timeout) and the deadline of each store read, so a store that
	// hangs or crawls becomes a miss and a recompute after at most this
	// long. Default: Refill.Timeout if set, else 2s. 2s because it is the
	// server's wait for a cold refill (a session that joins another's
	// refill gives up after 2s, so a longer refill would answer nobody), it
	// leaves most of a client's 5s request timeout for the recompute, and
	// it is an order of magnitude above an S3 first byte plus a 64 MiB
	// payload on a healthy store, so only a sick store misses it.
	RefillBudget time.Duration
	// Faults arms the cold store's failpoints, for tests: it is checked
	// before every store call of the refill and the write-behind, for the
	// faults the store names (cold.DegradeFaults). Nil (production) injects
	// nothing; the calls are still bounded.
	Faults *degrade.Registry
	// IndexMax bounds the presence index (index.go): at most this many
	// blocks are indexed, about IndexEntryBytes of heap each. Default
	// DefaultIndexMax (1<<20).
	IndexMax int
	// IndexRescan, when positive, makes RunIndex list the store again this
	// often after its first listing, to find pointers other nodes
	// published to a shared bucket. Default 0: list once.
	IndexRescan time.Duration
}

// Stats counts the tier's work.
type Stats struct {
	Remembered      uint64 // identities recorded
	Forgotten       uint64 // identities dropped (table full)
	Offered         uint64 // evicted blocks copied for write-behind
	DroppedFull     uint64 // evicted blocks dropped: budget (PendingBytes) full
	DroppedUnknown  uint64 // evicted blocks dropped: identity not remembered
	PacksBuilt      uint64
	PacksQueued     uint64
	PackErrors      uint64
	RefillHits      uint64
	RefillMisses    uint64
	RefillIntegrity uint64 // refill misses reported as integrity events
	Spilled         uint64 // blocks still cached copied for write-behind by Spill
	PendingBytes    int64  // budget bytes of the blocks in batches, not yet packed
	SinkCompleted   uint64 // packs written
	BlocksWritten   uint64 // blocks published: their pointers written
	BatchedBlocks   int    // blocks copied into batches, not yet packed
	SinkBlocks      int    // blocks of the packs queued on the sink, not yet written
	SinkFailed      uint64 // packs the sink failed (permanent error, or three charged attempts)
	RememberedBytes int64

	HeldBytes     int64  // budget bytes in use: batches plus queued and failed packs
	LimitBytes    int64  // the budget: PendingBytes
	SinkPending   int    // packs queued, not yet written
	SinkBytes     int64  // budget bytes of those packs
	PacksGivenUp  uint64 // packs dropped after they were taken: build or queue failed, or the sink failed them
	BlocksGivenUp uint64 // blocks in those packs
	BytesGivenUp  uint64 // budget bytes those packs returned
	SinkRetries   uint64 // pack writes that failed transiently and were kept
	WriteDegraded bool   // the sink found the store down and has not been answered since
	WriteOutages  uint64 // times the sink found the store down

	IndexEntries    int64  // blocks in the presence index
	IndexMax        int64  // its bound: Config.IndexMax
	IndexFull       uint64 // adds refused because the index was full
	IndexReady      bool   // a listing of the whole store finished
	IndexHits       uint64 // Present answers true
	IndexListed     uint64 // pointer keys seen by listings
	IndexLoads      uint64 // listings finished
	IndexLoadErrors uint64 // listings failed (retried)
	Deletes         uint64 // Delete calls
	DeleteErrors    uint64 // Delete calls that returned an error
	Hidden          int    // blocks hidden from refills by recent deletes
}

// Tier is the write-behind and refill path to one cold store.
type Tier struct {
	cfg         Config
	log         *slog.Logger
	sk          *sink.Sink
	rf          *refill.Refiller
	stop        chan struct{}
	keyring     *seal.Keyring   // seals written manifests; nil: unsealed
	codec       pack.Compressor // decodes zstd blocks (admission and refill)
	onIntegrity func(refill.IntegrityEvent)
	idx         *presenceIndex // index.go
	hide        *hideSet       // index_delete.go
	ledger      *coldLedger    // per-tenant cold bytes and quotas (quota.go)
	wstore      cold.Store     // the store behind the degrade boundary, for writes and quota evictions
	// queueMu is held while flush takes batches and queues their packs,
	// and by Delete, so a block Delete takes out of the batches cannot be
	// in a pack that reaches the sink after its Retract.
	queueMu sync.Mutex

	mu struct {
		sync.Mutex
		nsIndex    map[identity.NamespaceDigest]uint32 // guarded by mu
		namespaces []identity.Namespace                // guarded by mu
		tails      map[identity.BlockKey]tail          // guarded by mu; pointer-free
		tokens     []uint32                            // guarded by mu; arena for tails
		dead       int                                 // guarded by mu; arena words no tail uses
		nsCanon    []int                               // guarded by mu; canonical length of namespaces[i]
		batches    map[identity.NamespaceDigest]*batch // guarded by mu
		pending    int64                               // guarded by mu; budget bytes of the blocks in batches
	}
	budget  *sink.Budget // PendingBytes: batches and the sink's jobs
	flushMu sync.Mutex   // serialises Flush
	// Budget-full state, for logging its changes once; guarded by flushMu.
	full struct {
		on          bool
		lastDropped uint64 // droppedFull at the last flush
		since       uint64 // droppedFull when it turned on
	}
	st struct {
		remembered, forgotten, offered, droppedFull, droppedUnknown   atomic.Uint64
		packsBuilt, packsQueued, packErrors, refillHits, refillMisses atomic.Uint64
		refillIntegrity, spilled                                      atomic.Uint64
		packsGivenUp, blocksGivenUp, bytesGivenUp                     atomic.Uint64
		deletes, deleteErrors                                         atomic.Uint64
		blocksWritten                                                 atomic.Uint64
	}
}

// New returns a Tier; call Close when done.
func New(cfg Config) (*Tier, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	t := &Tier{cfg: cfg, log: cfg.Logger, stop: make(chan struct{}), keyring: cfg.Keyring, onIntegrity: cfg.OnIntegrity,
		idx: newPresenceIndex(cfg.IndexMax), ledger: newColdLedger(MaxColdGroups)}
	budget, err := sink.NewBudget(cfg.PendingBytes)
	if err != nil {
		return nil, err
	}
	t.budget = budget
	sk, err := t.newSink(budget)
	if err != nil {
		return nil, err
	}
	rc, err := t.refillConfig()
	if err != nil {
		sk.Close()
		return nil, err
	}
	rf, err := refill.New(cold.WithDegrade(cfg.Store, cfg.Faults, cfg.RefillBudget), rc)
	if err != nil {
		sk.Close()
		return nil, err
	}
	t.sk, t.rf = sk, rf
	t.mu.nsIndex = make(map[identity.NamespaceDigest]uint32)
	t.mu.tails = make(map[identity.BlockKey]tail)
	t.mu.batches = make(map[identity.NamespaceDigest]*batch)
	return t, nil
}

// withDefaults checks cfg and fills its defaults.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Store == nil {
		return cfg, errors.New("gpucache/cold/tier: no store")
	}
	cfg = cfg.withWriteDefaults()
	if cfg.RefillBudget < 0 {
		return cfg, fmt.Errorf("gpucache/cold/tier: refill budget %v < 0", cfg.RefillBudget)
	}
	if cfg.RefillBudget == 0 {
		cfg.RefillBudget = cfg.Refill.Timeout
	}
	if cfg.RefillBudget <= 0 {
		cfg.RefillBudget = 2 * time.Second
	}
	if cfg.IndexMax < 0 {
		return cfg, fmt.Errorf("gpucache/cold/tier: index max %d < 0", cfg.IndexMax)
	}
	if cfg.IndexMax == 0 {
		cfg.IndexMax = DefaultIndexMax
	}
	return cfg, nil
}

// withWriteDefaults fills the defaults of the write-behind, the reclaim,
// the logger and the seal policy.
func (cfg Config) withWriteDefaults() Config {
	if cfg.PackBlocks <= 0 {
		cfg.PackBlocks = 64
	}
	cfg.PackBlocks = min(cfg.PackBlocks, 1000)
	if cfg.PackBytes <= 0 {
		cfg.PackBytes = 64 << 20
	}
	if cfg.PendingBytes <= 0 {
		cfg.PendingBytes = DefaultPendingBytes
	}
	if cfg.RememberBlocks <= 0 {
		cfg.RememberBlocks = 1 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ReclaimInterval == 0 {
		cfg.ReclaimInterval = time.Hour
	}
	if cfg.ReclaimGrace <= 0 {
		cfg.ReclaimGrace = 24 * time.Hour
	}
	if cfg.Keyring == nil {
		cfg.Keyring = cfg.Refill.Keyring
	}
	if cfg.OnIntegrity == nil {
		cfg.OnIntegrity = cfg.Refill.OnIntegrity
	}
	return cfg
}

// newSink makes the write-behind's sink, charging budget.
func (t *Tier) newSink(budget *sink.Budget) (*sink.Sink, error) {
	cfg := t.cfg
	sc := cfg.Sink
	sc.Verify = t.verify
	sc.Budget = budget
	if sc.Logger == nil {
		sc.Logger = cfg.Logger
	}
	if sc.RetryBackoff == 0 {
		sc.RetryBackoff = time.Second
	}
	// The write-behind and the refill each see the store through the
	// degrade boundary, with their own deadline: a sink PUT of a whole pack
	// may take the sink's PutTimeout, a refill read only RefillBudget.
	// Reclaim keeps the bare store: it runs in the background, deletes only
	// verified unreferenced objects, and a failed run deletes nothing.
	writeBudget := sc.PutTimeout
	if writeBudget == 0 {
		writeBudget = sink.DefaultPutTimeout
	}
	t.wstore = cold.WithDegrade(cfg.Store, cfg.Faults, writeBudget)
	return sink.New(publishStore{Store: t.wstore, t: t}, sc)
}

// refillConfig returns the refill's config (and sets the tier's hide set
// and codec from it).
func (t *Tier) refillConfig() (refill.Config, error) {
	cfg := t.cfg
	rc := cfg.Refill
	if rc.ManifestCache == 0 {
		rc.ManifestCache = 4096 // verified manifests never change
	}
	if rc.ManifestCacheBytes == 0 {
		rc.ManifestCacheBytes = DefaultManifestCacheBytes
	}
	if rc.PointerTTL == 0 {
		rc.PointerTTL = 5 * time.Second
	}
	rc.Timeout = cfg.RefillBudget
	t.hide = &hideSet{m: make(map[fingerprint]time.Time), ttl: rc.PointerTTL + cfg.RefillBudget}
	rc.Keyring = cfg.Keyring
	rc.OnIntegrity = t.integrity
	if cfg.Crypt != nil {
		rc.Crypt = cfg.Crypt
	}
	if rc.Codec == nil {
		var err error
		if cfg.Compress != nil {
			rc.Codec = cfg.Compress
		} else if rc.Codec, err = crypt.NewZstd(); err != nil {
			return rc, err
		}
	}
	t.codec = rc.Codec
	return rc, nil
}

// integrity counts a refill integrity event and passes it on.
func (t *Tier) integrity(ev refill.IntegrityEvent) {
	t.st.refillIntegrity.Add(1)
	if t.onIntegrity != nil {
		t.onIntegrity(ev)
	}
}

// Reclaim runs lifecycle.Reclaim over every namespace this tier has seen
// and returns the summed report.
func (t *Tier) Reclaim(ctx context.Context) lifecycle.Report {
	t.mu.Lock()
	nss := make([]identity.NamespaceDigest, 0, len(t.mu.nsIndex))
	for d := range t.mu.nsIndex {
		nss = append(nss, d)
	}
	t.mu.Unlock()
	var sum lifecycle.Report
	for _, d := range nss {
		// The pass lists the namespace's packs and manifests in full
		// before it deletes anything; what the ledger tracks and that
		// listing did not find was deleted elsewhere (another node's
		// reclaim of a shared bucket) and leaves the ledger.
		ls := &listedStore{ledgerStore: ledgerStore{Store: t.cfg.Store, l: t.ledger}, unseen: t.ledger.trackedOf(d)}
		rep, err := lifecycle.Reclaim(ctx, ls, d, lifecycle.Options{Grace: t.cfg.ReclaimGrace})
		if err != nil {
			t.log.Warn("cold reclaim failed; nothing deleted for this namespace", "namespace", d.String(), "err", err)
			continue
		}
		t.ledger.forgetUnlisted(ls.unseen)
		sum.Scanned += rep.Scanned
		sum.Deleted += rep.Deleted
		sum.DeleteUnverified += rep.DeleteUnverified
		sum.Errors += rep.Errors
	}
	if sum.DeleteUnverified > 0 {
		t.log.Warn("cold reclaim: deletes not verified", "objects", sum.DeleteUnverified)
	}
	return sum
}

// Run flushes batches every interval, reclaims every ReclaimInterval, and
// flushes everything on the way out, until ctx ends or Close. A Run
// stopped by Close (even one whose ctx has ended too) returns without that
// final flush: a caller with a deadline flushes with Flush(ctx, true)
// first, then closes, then ends ctx.
func (t *Tier) Run(ctx context.Context, interval time.Duration) {
	tk := time.NewTicker(interval)
	defer tk.Stop()
	var reclaim <-chan time.Time
	if t.cfg.ReclaimInterval > 0 {
		rt := time.NewTicker(t.cfg.ReclaimInterval)
		defer rt.Stop()
		reclaim = rt.C
	}
	for {
		select {
		case <-reclaim:
			t.Reclaim(ctx)
		case <-tk.C:
			t.flush(ctx, true, false)
		case <-ctx.Done():
			select {
			case <-t.stop: // Close came first: its caller flushed, within its own deadline
				return
			default:
			}
			t.Flush(context.Background(), true)
			return
		case <-t.stop:
			return
		}
	}
}

// Refill reads the block (ns, key) from the cold tier into dst. It answers
// within RefillBudget. On a miss n is 0 and dst holds no payload byte; a
// miss caused by the store (an outage, a timeout, an armed fault) has
// Result Missing(Unavailable) and an error wrapping degrade.ErrMiss (or
// Missing(BreakerOpen) and no error once the refiller's breaker has opened).
func (t *Tier) Refill(ctx context.Context, ns identity.Namespace, key identity.BlockKey, dst []byte) (int, refill.Result, error) {
	return t.refillChecked(ns, key, func() ([]byte, int, refill.Result, error) {
		n, res, err := t.rf.RefillKey(ctx, ns, key, dst)
		return dst, n, res, err
	})
}

// RefillInto is Refill for a caller that allocates the destination once
// the payload's length is known (refill.RefillKeyInto): a server reserves a
// hot-tier slot in alloc and the payload is read straight into it. On a
// miss after alloc, the buffer it returned is zeroed and must be discarded.
func (t *Tier) RefillInto(ctx context.Context, ns identity.Namespace, key identity.BlockKey, alloc func(n int) ([]byte, bool)) (int, refill.Result, error) {
	return t.refillChecked(ns, key, func() ([]byte, int, refill.Result, error) {
		var dst []byte
		n, res, err := t.rf.RefillKeyInto(ctx, ns, key, func(n int) ([]byte, bool) {
			b, ok := alloc(n)
			dst = b
			return b, ok
		})
		return dst, n, res, err
	})
}

// refillChecked runs one refill (read, which returns the buffer it read
// into) between the checks every refill path shares: a block hidden by a
// recent Delete misses without a store call, or with its bytes zeroed when
// it was deleted while the read ran (index_delete.go); a miss for want of
// a pointer drops a stale presence entry; hits and misses are counted.
func (t *Tier) refillChecked(ns identity.Namespace, key identity.BlockKey, read func() ([]byte, int, refill.Result, error)) (int, refill.Result, error) {
	d, derr := ns.Digest()
	if derr == nil && t.refillHidden(d, key) {
		t.st.refillMisses.Add(1)
		return 0, refill.Missing(refill.NotFound), nil // deleted (index_delete.go)
	}
	gen := t.idx.adds.Load()
	dst, n, res, err := read()
	if res.Hit && t.refillHidden(d, key) {
		n, res, err = missHidden(dst, n) // deleted while it ran
	}
	if res.Hit {
		t.st.refillHits.Add(1)
	} else {
		t.st.refillMisses.Add(1)
		if res.Reason == refill.NotFound && derr == nil {
			t.idx.removeStale(t.idx.fp(d, key), gen) // no pointer: not present
		}
	}
	return n, res, err
}

// Stats returns the tier's counters.
func (t *Tier) Stats() Stats {
	t.mu.Lock()
	pending, remembered := t.mu.pending, int64(len(t.mu.tokens)*4)
	batched := 0
	for _, b := range t.mu.batches {
		batched += len(b.blocks)
	}
	t.mu.Unlock()
	ss := t.sk.Stats()
	return Stats{
		HeldBytes: t.budget.Used(), LimitBytes: t.budget.Max(), SinkPending: ss.Pending, SinkBytes: ss.Bytes,
		PacksGivenUp: t.st.packsGivenUp.Load(), BlocksGivenUp: t.st.blocksGivenUp.Load(), BytesGivenUp: t.st.bytesGivenUp.Load(),
		SinkRetries: ss.Retries, WriteDegraded: ss.Degraded, WriteOutages: ss.Outages,

		Remembered: t.st.remembered.Load(), Forgotten: t.st.forgotten.Load(), Offered: t.st.offered.Load(),
		DroppedFull: t.st.droppedFull.Load(), DroppedUnknown: t.st.droppedUnknown.Load(),
		PacksBuilt: t.st.packsBuilt.Load(), PacksQueued: t.st.packsQueued.Load(), PackErrors: t.st.packErrors.Load(),
		RefillHits: t.st.refillHits.Load(), RefillMisses: t.st.refillMisses.Load(), RefillIntegrity: t.st.refillIntegrity.Load(),
		Spilled: t.st.spilled.Load(), PendingBytes: pending, SinkCompleted: ss.Completed, SinkFailed: ss.FailedTotal, RememberedBytes: remembered,
		BlocksWritten: t.st.blocksWritten.Load(), BatchedBlocks: batched, SinkBlocks: ss.PendingPointers,

		IndexEntries: t.idx.entries.Load(), IndexMax: t.idx.max, IndexFull: t.idx.full.Load(), IndexReady: t.idx.ready.Load(),
		IndexHits: t.idx.hits.Load(), IndexListed: t.idx.listed.Load(), IndexLoads: t.idx.loads.Load(), IndexLoadErrors: t.idx.loadErr.Load(),
		Deletes: t.st.deletes.Load(), DeleteErrors: t.st.deleteErrors.Load(), Hidden: t.hide.len(),
	}
}

// Close stops Run and closes the sink. Pending batches are not flushed;
// call Flush(ctx, true) first to keep them.
func (t *Tier) Close() error {
	select {
	case <-t.stop:
	default:
		close(t.stop)
	}
	return t.sk.Close()
}
