package tier

// The write-behind: blocks the hot tier evicts are batched per namespace,
// packed, verified and handed to the sink.

import (
	"context"
	"encoding/hex"
	"fmt"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/cold/pack"
	"github.com/gpucache/gpucache/internal/cold/sink"
)

// tail is a remembered block identity, pointer-free: its tokens live in
// the tokens arena.
type tail struct {
	ns       uint32 // index into namespaces
	parent   identity.BlockKey
	position uint64
	valid    uint32
	tokOff   uint32
	tokLen   uint32
	opaque   string // the name of an opaque-key block (tokLen is then 0)
}

type batch struct {
	ns     identity.Namespace
	blocks []pack.Block
	costs  []int64 // budget bytes each block took (blockCost)
	bytes  int64   // payload bytes
}

// Remember records the identity of a block just stored in the hot tier, so
// that its eviction can be written behind. id must be valid; tokens are
// copied.
func (t *Tier) Remember(id identity.CacheIdentity) {
	d, err := id.Namespace.Digest()
	if err != nil {
		return
	}
	t.RememberKeyed(id, d, id.KeyIn(d))
}

// RememberKeyed is Remember for a caller that already holds the block's
// namespace digest and key (the server verified them on PUT), so the
// store path hashes nothing twice.
func (t *Tier) RememberKeyed(id identity.CacheIdentity, d identity.NamespaceDigest, key identity.BlockKey) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if old, ok := t.mu.tails[key]; ok {
		t.mu.dead += int(old.tokLen)
	} else if len(t.mu.tails) >= t.cfg.RememberBlocks {
		t.st.forgotten.Add(1)
		return
	}
	ni, ok := t.mu.nsIndex[d]
	if !ok {
		ni = uint32(len(t.mu.namespaces))
		t.mu.namespaces = append(t.mu.namespaces, id.Namespace)
		c, _ := id.Namespace.Canonical()
		t.mu.nsCanon = append(t.mu.nsCanon, len(c))
		t.mu.nsIndex[d] = ni
	}
	t.compactLocked()
	off := uint32(len(t.mu.tokens))
	t.mu.tokens = append(t.mu.tokens, id.Tokens...)
	t.mu.tails[key] = tail{ns: ni, parent: id.Parent, position: id.Position, valid: id.ValidLength, tokOff: off, tokLen: uint32(len(id.Tokens)),
		opaque: string(id.Opaque)}
	t.st.remembered.Add(1)
}

// compactLocked rebuilds the token arena when most of it is dead.
func (t *Tier) compactLocked() {
	if t.mu.dead < 1<<16 || t.mu.dead < len(t.mu.tokens)/2 {
		return
	}
	fresh := make([]uint32, 0, len(t.mu.tokens)-t.mu.dead)
	for k, tl := range t.mu.tails {
		off := uint32(len(fresh))
		fresh = append(fresh, t.mu.tokens[tl.tokOff:tl.tokOff+tl.tokLen]...)
		tl.tokOff = off
		t.mu.tails[k] = tl
	}
	t.mu.tokens, t.mu.dead = fresh, 0
}

// forgetLocked drops a remembered identity (the block was deleted or
// purged) and reports whether there was one. t.mu must be held.
func (t *Tier) forgetLocked(key identity.BlockKey) bool {
	tl, ok := t.mu.tails[key]
	if ok {
		t.mu.dead += int(tl.tokLen)
		delete(t.mu.tails, key)
	}
	return ok
}

// Evicted is the hot tier's OnEvict hook (through lower.Tier): it copies
// the block into a pending batch if its identity is known and the budget
// has room for it (blockCost), else drops it, and reports whether it took
// the block. It runs under the hot tier's lock: it never blocks on
// storage.
func (t *Tier) Evicted(ns identity.NamespaceDigest, key, parent identity.BlockKey, _ uint32, payload []byte) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	tl, ok := t.mu.tails[key]
	if !ok || t.mu.namespaces[tl.ns].Tenant == "" {
		t.st.droppedUnknown.Add(1)
		return false
	}
	t.mu.dead += int(tl.tokLen)
	delete(t.mu.tails, key)
	if tl.parent != parent {
		t.st.droppedUnknown.Add(1)
		return false
	}
	cost := t.costLocked(tl, len(payload))
	if len(payload) == 0 || !t.budget.TryTake(cost) {
		t.st.droppedFull.Add(1)
		return false
	}
	t.batchLocked(ns, tl, payload, cost)
	t.st.offered.Add(1)
	return true
}

// batchLocked copies a remembered block into its namespace's pending
// batch. t.mu must be held, and cost taken from the budget.
func (t *Tier) batchLocked(ns identity.NamespaceDigest, tl tail, payload []byte, cost int64) {
	nsv := t.mu.namespaces[tl.ns]
	id := identity.CacheIdentity{Namespace: nsv, Parent: tl.parent, Position: tl.position,
		Tokens: append([]uint32(nil), t.mu.tokens[tl.tokOff:tl.tokOff+tl.tokLen]...), ValidLength: tl.valid}
	if tl.opaque != "" {
		id.Tokens, id.Opaque = nil, []byte(tl.opaque)
	}
	b := t.mu.batches[ns]
	if b == nil {
		b = &batch{ns: nsv}
		t.mu.batches[ns] = b
	}
	b.blocks = append(b.blocks, pack.Block{Identity: id, Payload: append([]byte(nil), payload...)})
	b.costs = append(b.costs, cost)
	b.bytes += int64(len(payload))
	t.mu.pending += cost
}

// verify is the sink's admission check: the job must be a pack that
// verifies under a namespace this tier batched (never one read from the
// job itself), sealed by the keyring when the tier has one.
func (t *Tier) verify(j *sink.Job) error {
	var d identity.NamespaceDigest
	b, err := hex.DecodeString(j.Namespace)
	if err != nil || len(b) != len(d) {
		return fmt.Errorf("job namespace %q is not a namespace digest", j.Namespace)
	}
	copy(d[:], b)
	t.mu.Lock()
	ni, ok := t.mu.nsIndex[d]
	var ns identity.Namespace
	if ok {
		ns = t.mu.namespaces[ni]
	}
	t.mu.Unlock()
	if !ok {
		return fmt.Errorf("job for a namespace this tier never saw")
	}
	p := &pack.Pack{Namespace: ns, SumsChecked: true}
	for _, o := range j.Objects {
		// The sink checked o.Digest against o.Body just before calling
		// this verifier (SumsChecked): Verify need not hash it again.
		po := pack.Object{Key: o.Key, Body: o.Body, Sum: o.Digest}
		switch o.Kind {
		case sink.KindPack:
			p.Object = po
		case sink.KindManifest:
			p.Manifest = po
		default:
			p.Pointers = append(p.Pointers, po)
		}
	}
	var v pack.SealVerifier
	if t.keyring != nil {
		v = t.keyring
	}
	var dec pack.Decrypter
	if t.cfg.Crypt != nil {
		dec = t.cfg.Crypt
	}
	return pack.VerifyWith(p, v, dec, t.codec)
}

// Flush turns every pending batch (all of them when force, else only full
// ones) into packs, queues them and drains the sink once, probing the
// store at once even if the sink found it down (sink.DrainNow). Packs the
// sink failed are then given up. It returns the sink's drain report. With
// ctx already ended it builds no pack: the batches stay as they are.
func (t *Tier) Flush(ctx context.Context, force bool) sink.Report {
	return t.flush(ctx, force, true)
}

// flush is Flush; now false (Run's periodic flush) lets the sink defer
// the drain while the store is down and its next probe is not due.
func (t *Tier) flush(ctx context.Context, force, now bool) sink.Report {
	t.flushMu.Lock()
	defer t.flushMu.Unlock()
	var lost lossReport
	if ctx.Err() == nil { // past the deadline the blocks stay batched, counted in Stats
		t.queueReady(ctx, force, &lost)
	}
	var rep sink.Report
	if now {
		rep = t.sk.DrainNow(ctx)
	} else {
		rep = t.sk.DrainReport(ctx)
	}
	for _, f := range t.sk.TakeFailed() {
		t.unqueueJob(f.Job)
		lost.add(int(f.Job.Bytes), pointersOf(f.Job), "the store refused the pack", f.Err)
	}
	t.settleLosses(&lost)
	t.logBudgetState()
	return rep
}

// queueReady takes the batches ready to go (all of them when force) and
// queues their packs on the sink, under queueMu (see Delete).
func (t *Tier) queueReady(ctx context.Context, force bool, lost *lossReport) {
	t.queueMu.Lock()
	defer t.queueMu.Unlock()
	var ready []*batch
	t.mu.Lock()
	for d, b := range t.mu.batches {
		if force || len(b.blocks) >= t.cfg.PackBlocks || b.bytes >= t.cfg.PackBytes {
			ready = append(ready, b)
			delete(t.mu.batches, d)
		}
	}
	t.mu.Unlock()
	for _, b := range ready {
		// A pack takes at most PackBlocks blocks, and closes once its
		// payload reaches PackBytes: with 64 MiB blocks (ADR 0015) a pack
		// in the making is at most PackBytes plus one block, not a whole
		// budget's worth.
		for off := 0; off < len(b.blocks); {
			end, reserved, bytes := off, int64(0), int64(0)
			for end < len(b.blocks) && end-off < t.cfg.PackBlocks && bytes < t.cfg.PackBytes {
				reserved += b.costs[end]
				bytes += int64(len(b.blocks[end].Payload))
				end++
			}
			t.queue(ctx, b.ns, b.blocks[off:end], reserved, lost)
			// The pack holds its own copy now: drop the blocks', so the
			// heap never holds both for the rest of this flush.
			clear(b.blocks[off:end])
			off = end
		}
	}
}

// queue builds one pack from blocks and queues it on the sink, moving the
// reserved budget bytes the blocks took onto the pack. A pack that cannot
// be built or queued is given up: its bytes go back to the budget and lost
// counts it.
func (t *Tier) queue(ctx context.Context, ns identity.Namespace, blocks []pack.Block, reserved int64, lost *lossReport) {
	var sealer pack.Sealer
	if t.keyring != nil {
		sealer = t.keyring
	}
	opts := pack.Options{Sealer: sealer, Compressor: t.cfg.Compress, BytePlanes: t.cfg.CompressBytePlanes, MinSavingPct: t.cfg.CompressMinSavingPct}
	if t.cfg.Crypt != nil {
		opts.Encrypter = t.cfg.Crypt
	}
	p, err := pack.BuildWith(ns, blocks, opts)
	t.mu.Lock()
	t.mu.pending -= reserved // from here the reservation is this pack's
	t.mu.Unlock()
	if err != nil {
		t.st.packErrors.Add(1)
		t.budget.Give(reserved)
		lost.add(int(reserved), len(blocks), "pack not built", err)
		return
	}
	t.st.packsBuilt.Add(1)
	d, _ := ns.Digest()
	j := &sink.Job{Namespace: d.String()}
	add := func(k sink.ObjectKind, o pack.Object) {
		sum := o.Sum // Build hashed every object it made
		if sum == (pack.Digest{}) {
			sum = pack.Sum(o.Body)
		}
		j.Objects = append(j.Objects, sink.Object{Kind: k, Key: o.Key, Body: o.Body, Digest: sum})
		j.Bytes += int64(len(o.Body))
	}
	add(sink.KindPack, p.Object)
	add(sink.KindManifest, p.Manifest)
	for _, o := range p.Pointers {
		add(sink.KindPointer, o)
	}
	if !t.admitQuota(ctx, ns, p, len(blocks)) {
		t.budget.Give(reserved) // dropped and counted for the tenant's cold quota (quota.go)
		return
	}
	// The pack's bytes replace the blocks' reservation: any difference is
	// settled with the budget first, so the sink takes over exactly j.Bytes.
	switch extra := j.Bytes - reserved; {
	case extra > 0 && !t.budget.TryTake(extra):
		t.ledger.unqueue(p.Manifest.Key)
		t.st.packErrors.Add(1)
		t.budget.Give(reserved)
		lost.add(int(reserved), len(blocks), "pack larger than its blocks' reservation and the budget is full", sink.ErrFull)
		return
	case extra < 0:
		t.budget.Give(-extra)
	}
	if _, err := t.sk.EnqueuePaid(j); err != nil {
		t.ledger.unqueue(p.Manifest.Key)
		t.st.packErrors.Add(1)
		t.budget.Give(j.Bytes)
		lost.add(int(j.Bytes), len(blocks), "pack not queued", err)
		return
	}
	t.st.packsQueued.Add(1)
}
