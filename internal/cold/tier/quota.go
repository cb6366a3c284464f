package tier

// Per-tenant cold-tier byte quotas.
//
// Unit. The cold tier writes a tenant's blocks as packs: one pack object,
// one manifest and one pointer per block, all under one namespace, and the
// namespace names its tenant. A published pack is a group; its bytes are
// the pack's size, the manifest's size and PointerLen per block. A
// tenant's cold bytes are the sum over its groups.
//
// Knowing it. RunColdUsage lists manifests/ in the background once at
// start and reads each manifest (at most MaxColdGroups of them), which
// names the namespace (so the tenant), the pack's size and its blocks.
// Every pack the tier publishes is added when its manifest PUT succeeds
// (or finds the object already there). A group is keyed by its manifest
// key, which names its content, so the listing and the publisher never
// count one twice, in whichever order they find it. Reclaim's deletes
// subtract the manifest and pointers (when the manifest goes) and the pack
// (when the pack goes); quota evictions subtract the whole group.
//
// Not counted: objects other nodes write to a shared bucket after this
// node listed it, orphan packs a failed publication left (reclaim deletes
// them), and a pointer a DELETE removed (the pack and manifest stay until
// reclaim; the pointer's 256 bytes stay counted until then). Objects other
// nodes delete stay counted until this node's next reclaim pass, whose
// full listing of the namespace no longer finds them.
//
// Enforcing it. Before a pack of tenant T is queued, the tier checks T's
// committed bytes plus its packs already queued plus this pack against T's
// quota. Over it, the tier evicts T's own oldest groups (by manifest
// modification time): each pointer that still names the group's manifest,
// then the manifest, then the pack; each evicted block is hidden from
// refills and dropped from the presence index, as a DELETE would. It never
// touches another tenant's objects: the candidates are T's groups only.
// If T has nothing left to evict, or the pack alone exceeds the quota, or
// an eviction fails, the pack is not written: its blocks are dropped from
// the write-behind and counted (ColdTenant.Dropped). The cold tier is a
// cache: a dropped write-behind is a later miss, never a wrong answer.

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/cold/pack"
	"github.com/gpucache/gpucache/internal/cold/sink"
)

// MaxColdGroups bounds the packs the quota ledger tracks, at most
// LedgerGroupBytes of heap each: MaxColdGroups × LedgerGroupBytes is the
// ledger's term in the memory bound (OPERATIONS.md). Packs past it are not
// counted (ColdUsage.Untracked). A pack stays tracked until it is deleted:
// by this node's reclaim or eviction, or by another node, which this
// node's next reclaim pass sees in its listing. Reclaim deletes nothing
// younger than ReclaimGrace (24 h by default), so on a node that writes
// behind steadily the ledger levels off at about the packs written in one
// grace and one ReclaimInterval, plus those still referenced.
const MaxColdGroups = 1 << 18

// LedgerGroupBytes is the measured heap cost of one tracked pack (about
// 560 bytes: the group, its manifest and pack key strings, three map
// entries), with the maps' growth slack (TestLedgerGroupBytes).
const LedgerGroupBytes = 640

// manifestPrefix is the prefix of every manifest key (pack doc, "Object keys").
const manifestPrefix = "manifests/"

// ErrColdQuota: a pack was not written behind because its tenant is at its
// cold quota and had nothing of its own left to evict.
var ErrColdQuota = errors.New("gpucache/cold/tier: tenant at its cold quota")

// coldGroup is one published pack of one tenant.
type coldGroup struct {
	tenant        string
	ns            identity.NamespaceDigest
	manifestKey   string
	packKey       string
	manifestBytes int64
	packBytes     int64
	pointerBytes  int64
	modified      time.Time
	seq           uint64 // order of commit or discovery: breaks ties of modified
	committed     bool   // published (or found by the listing); false: queued
}

func (g *coldGroup) bytes() int64 { return g.manifestBytes + g.packBytes + g.pointerBytes }

// ColdTenant is one tenant's cold-tier usage.
type ColdTenant struct {
	Tenant       string
	Bytes        int64  // bytes of its published packs (pack, manifest, pointers)
	Quota        int64  // its cold quota; 0: none
	Evictions    uint64 // packs evicted to keep it under its quota
	EvictedBytes uint64 // their bytes
	Dropped      uint64 // blocks not written behind: at quota, nothing of its own to evict
}

// ColdUsage is the ledger's state.
type ColdUsage struct {
	Groups    int    // packs tracked
	Untracked uint64 // packs not tracked: MaxColdGroups reached
	Ready     bool   // the start listing finished
	Evictions uint64 // packs evicted for quotas, all tenants
	Dropped   uint64 // blocks dropped for quotas, all tenants
}

// coldLedger counts each tenant's cold bytes.
type coldLedger struct {
	mu        sync.Mutex
	quotas    map[string]int64       // guarded by mu
	tenants   map[string]*tenantCold // guarded by mu
	groups    map[string]*coldGroup  // guarded by mu; by manifest key, queued and committed
	byPack    map[string]*coldGroup  // guarded by mu; pack key of committed groups whose pack is still counted
	untracked uint64                 // guarded by mu
	ready     bool                   // guarded by mu
	evictions uint64                 // guarded by mu
	dropped   uint64                 // guarded by mu
	seq       uint64                 // guarded by mu
	max       int
}

type tenantCold struct {
	committed    int64                 // bytes of committed groups
	queued       int64                 // bytes of queued groups
	live         map[string]*coldGroup // committed groups that may be evicted, by manifest key
	evictions    uint64
	evictedBytes uint64
	dropped      uint64
}

func newColdLedger(max int) *coldLedger {
	return &coldLedger{quotas: map[string]int64{}, tenants: map[string]*tenantCold{}, groups: map[string]*coldGroup{},
		byPack: map[string]*coldGroup{}, max: max}
}

func (l *coldLedger) tenantLocked(name string) *tenantCold {
	tc := l.tenants[name]
	if tc == nil {
		tc = &tenantCold{live: map[string]*coldGroup{}}
		l.tenants[name] = tc
	}
	return tc
}

// queueLocked records a pack about to be queued; false when the ledger is full.
func (l *coldLedger) queueLocked(g *coldGroup) bool {
	if _, ok := l.groups[g.manifestKey]; ok {
		return false // the same content again: counted once
	}
	if len(l.groups) >= l.max {
		l.untracked++
		return false
	}
	l.groups[g.manifestKey] = g
	l.tenantLocked(g.tenant).queued += g.bytes()
	return true
}

// unqueue forgets a queued pack that will not be written.
func (l *coldLedger) unqueue(manifestKey string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.groups[manifestKey]
	if g == nil || g.committed {
		return
	}
	delete(l.groups, manifestKey)
	l.tenantLocked(g.tenant).queued -= g.bytes()
}

// commit marks a queued pack published: its manifest is in the store.
func (l *coldLedger) commit(manifestKey string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.groups[manifestKey]
	if g == nil || g.committed {
		return
	}
	tc := l.tenantLocked(g.tenant)
	tc.queued -= g.bytes()
	g.committed, g.modified = true, now
	l.addCommittedLocked(tc, g)
}

func (l *coldLedger) addCommittedLocked(tc *tenantCold, g *coldGroup) {
	l.seq++
	g.seq = l.seq
	tc.committed += g.bytes()
	tc.live[g.manifestKey] = g
	l.byPack[g.packKey] = g
}

// found adds a group the listing found, unless it is known already.
func (l *coldLedger) found(g *coldGroup) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.groups[g.manifestKey]; ok {
		return
	}
	if len(l.groups) >= l.max {
		l.untracked++
		return
	}
	g.committed = true
	l.groups[g.manifestKey] = g
	l.addCommittedLocked(l.tenantLocked(g.tenant), g)
}

// manifestGone subtracts a deleted manifest and its pointers; its pack
// stays counted until it goes too.
func (l *coldLedger) manifestGone(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.groups[key]
	if g == nil || !g.committed {
		return
	}
	delete(l.groups, key)
	tc := l.tenantLocked(g.tenant)
	delete(tc.live, key)
	tc.committed -= g.manifestBytes + g.pointerBytes
	g.manifestBytes, g.pointerBytes = 0, 0
}

// packGone subtracts a deleted pack.
func (l *coldLedger) packGone(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.byPack[key]
	if g == nil {
		return
	}
	delete(l.byPack, key)
	l.tenantLocked(g.tenant).committed -= g.packBytes
	g.packBytes = 0
}

// oldestLocked returns tenant's oldest committed group, or nil.
func (l *coldLedger) oldestLocked(tc *tenantCold) *coldGroup {
	var old *coldGroup
	for _, g := range tc.live {
		if old == nil || g.modified.Before(old.modified) || (g.modified.Equal(old.modified) && g.seq < old.seq) {
			old = g
		}
	}
	return old
}

// ledgerStore is the store Reclaim deletes through: each delete that
// succeeds is subtracted from its tenant's bytes.
type ledgerStore struct {
	cold.Store
	l   *coldLedger
	idx *presenceIndex // nil: pointer deletes leave the presence index alone
}

func (s ledgerStore) Delete(ctx context.Context, key string) error {
	err := s.Store.Delete(ctx, key)
	if err == nil {
		switch {
		case strings.HasPrefix(key, manifestPrefix):
			s.l.manifestGone(key)
		case strings.HasPrefix(key, "packs/"):
			s.l.packGone(key)
		case s.idx != nil && strings.HasPrefix(key, pointerPrefix):
			// A pointer deleted by purge or expiry stops answering
			// present at once (LOOKUP, RESP EXISTS), not at the next
			// rescan or the first GET that misses.
			if d, k, perr := pack.ParsePointerKey(key); perr == nil {
				s.idx.remove(s.idx.fp(d, k))
			}
		}
	}
	return err
}

// trackedOf returns the keys of namespace d's manifests and packs that the
// ledger counts as stored (committed groups; packs whose manifest already
// went).
func (l *coldLedger) trackedOf(d identity.NamespaceDigest) map[string]struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]struct{}{}
	for k, g := range l.groups {
		if g.committed && g.ns == d {
			out[k] = struct{}{}
		}
	}
	for k, g := range l.byPack {
		if g.ns == d {
			out[k] = struct{}{}
		}
	}
	return out
}

// forgetUnlisted subtracts tracked objects a complete listing did not
// find: another node's reclaim on a shared bucket, or an operator, deleted
// them. Without it their records would stay until the ledger's bound.
func (l *coldLedger) forgetUnlisted(unseen map[string]struct{}) {
	for k := range unseen {
		if strings.HasPrefix(k, manifestPrefix) {
			l.manifestGone(k)
		} else {
			l.packGone(k)
		}
	}
}

// listedStore is the ledger's store that also notes which of a set of keys
// its listings found.
type listedStore struct {
	ledgerStore
	mu     sync.Mutex
	unseen map[string]struct{} // guarded by mu
}

func (s *listedStore) List(ctx context.Context, prefix string, fn func(cold.ObjectInfo) error) error {
	return s.ledgerStore.List(ctx, prefix, func(oi cold.ObjectInfo) error {
		s.mu.Lock()
		delete(s.unseen, oi.Key)
		s.mu.Unlock()
		return fn(oi)
	})
}

// SetColdQuotas replaces the per-tenant cold quotas (bytes of published
// packs; a tenant absent from the map has none). Bytes already stored stay;
// a tenant over a lowered quota evicts its own oldest packs at its next
// write-behind. A negative quota is refused.
func (t *Tier) SetColdQuotas(quotas map[string]int64) error {
	m := make(map[string]int64, len(quotas))
	for name, q := range quotas {
		if q < 0 {
			return fmt.Errorf("gpucache/cold/tier: tenant %q cold quota %d < 0", name, q)
		}
		if q > 0 {
			m[name] = q
		}
	}
	t.ledger.mu.Lock()
	t.ledger.quotas = m
	t.ledger.mu.Unlock()
	return nil
}

// TenantColdUsage reports tenant's cold bytes and quota.
func (t *Tier) TenantColdUsage(tenant string) ColdTenant {
	l := t.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	ct := ColdTenant{Tenant: tenant, Quota: l.quotas[tenant]}
	if tc := l.tenants[tenant]; tc != nil {
		ct.Bytes, ct.Evictions, ct.EvictedBytes, ct.Dropped = tc.committed, tc.evictions, tc.evictedBytes, tc.dropped
	}
	return ct
}

// TenantsCold reports every tenant with cold bytes, counters or a quota,
// sorted by name.
func (t *Tier) TenantsCold() []ColdTenant {
	l := t.ledger
	l.mu.Lock()
	names := make([]string, 0, len(l.tenants)+len(l.quotas))
	for n := range l.tenants {
		names = append(names, n)
	}
	for n := range l.quotas {
		if l.tenants[n] == nil {
			names = append(names, n)
		}
	}
	l.mu.Unlock()
	sort.Strings(names)
	out := make([]ColdTenant, 0, len(names))
	for _, n := range names {
		out = append(out, t.TenantColdUsage(n))
	}
	return out
}

// ColdUsage reports the ledger's state.
func (t *Tier) ColdUsage() ColdUsage {
	l := t.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	return ColdUsage{Groups: len(l.groups), Untracked: l.untracked, Ready: l.ready, Evictions: l.evictions, Dropped: l.dropped}
}

// LoadColdUsage lists the store's manifests once and counts each one's
// group (up to MaxColdGroups): see the top of this file. Legacy, corrupt
// and unreadable manifests are skipped.
func (t *Tier) LoadColdUsage(ctx context.Context) error {
	var infos []cold.ObjectInfo
	err := t.cfg.Store.List(ctx, manifestPrefix, func(oi cold.ObjectInfo) error {
		if _, _, err := pack.ParseManifestKey(oi.Key); err != nil {
			return nil
		}
		if len(infos) >= t.ledger.max {
			return errIndexFull
		}
		infos = append(infos, oi)
		return nil
	})
	if err != nil && !errors.Is(err, errIndexFull) {
		return err
	}
	for _, oi := range infos {
		if oi.Size <= 0 || oi.Size > pack.MaxManifestLen {
			continue
		}
		t.ledger.mu.Lock()
		_, known := t.ledger.groups[oi.Key]
		t.ledger.mu.Unlock()
		if known {
			continue
		}
		body := make([]byte, oi.Size)
		if err := t.cfg.Store.RangeGet(ctx, oi.Key, 0, body); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			continue
		}
		m, err := pack.OpenManifest(oi.Key, body)
		if err != nil {
			continue
		}
		ns, _ := m.NamespaceDigest()
		t.ledger.found(&coldGroup{tenant: m.Namespace.Tenant, ns: ns, manifestKey: oi.Key, packKey: m.PackKey,
			manifestBytes: oi.Size, packBytes: int64(m.PackSize), pointerBytes: int64(len(m.Ranges) * pack.PointerLen),
			modified: oi.Modified})
	}
	t.ledger.mu.Lock()
	t.ledger.ready = true
	t.ledger.mu.Unlock()
	return nil
}

// RunColdUsage runs LoadColdUsage until it succeeds, waiting 1s, doubling
// up to 30s, after each failure, or until ctx ends or the tier closes.
func (t *Tier) RunColdUsage(ctx context.Context) {
	wait := indexRetryFirst
	for {
		err := t.LoadColdUsage(ctx)
		if err == nil || ctx.Err() != nil {
			return
		}
		t.log.Warn("cold quota: listing the store's manifests failed; retrying (tenant cold bytes count this node's writes so far)", "err", err, "retry_in", wait)
		tm := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			tm.Stop()
			return
		case <-t.stop:
			tm.Stop()
			return
		case <-tm.C:
		}
		wait = min(2*wait, indexRetryMax)
	}
}

// admitQuota decides whether pack p of ns's tenant (queued next)
// may be written: it evicts the tenant's own oldest packs while the pack
// would take the tenant past its quota. On true the pack is recorded as
// queued (call unqueue if it is not queued after all); on false it is
// dropped and counted.
func (t *Tier) admitQuota(ctx context.Context, ns identity.Namespace, p *pack.Pack, blocks int) bool {
	d, _ := ns.Digest()
	g := &coldGroup{tenant: ns.Tenant, ns: d, manifestKey: p.Manifest.Key, packKey: p.Object.Key,
		manifestBytes: int64(len(p.Manifest.Body)), packBytes: int64(len(p.Object.Body)),
		pointerBytes: int64(len(p.Pointers) * pack.PointerLen)}
	l := t.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	q := l.quotas[g.tenant]
	tc := l.tenantLocked(g.tenant)
	for q > 0 && tc.committed+tc.queued+g.bytes() > q {
		old := l.oldestLocked(tc)
		if old == nil || g.bytes() > q {
			tc.dropped += uint64(blocks)
			l.dropped += uint64(blocks)
			return false
		}
		delete(tc.live, old.manifestKey) // no longer a candidate
		l.mu.Unlock()
		err := t.evictGroup(ctx, old)
		l.mu.Lock()
		if err != nil {
			tc.live[old.manifestKey] = old
			t.log.Warn("cold quota: evicting the tenant's oldest pack failed; its new pack is dropped", "tenant", g.tenant, "manifest", old.manifestKey, "err", err)
			tc.dropped += uint64(blocks)
			l.dropped += uint64(blocks)
			return false
		}
		n := old.bytes()
		delete(l.groups, old.manifestKey)
		delete(l.byPack, old.packKey)
		tc.committed -= n
		tc.evictions++
		tc.evictedBytes += uint64(n)
		l.evictions++
	}
	l.queueLocked(g)
	return true
}

// evictGroup deletes one of a tenant's packs: each pointer that still names
// its manifest (the block hidden from refills and dropped from the
// presence index, as Delete does), then the manifest, then the pack.
func (t *Tier) evictGroup(ctx context.Context, g *coldGroup) error {
	st := t.wstore
	body := make([]byte, g.manifestBytes)
	err := st.RangeGet(ctx, g.manifestKey, 0, body)
	if err == nil {
		m, merr := pack.OpenManifest(g.manifestKey, body)
		if merr != nil {
			return merr
		}
		ptr := make([]byte, pack.PointerLen)
		for _, r := range m.Ranges {
			pk := pack.PointerKey(g.ns, r.Key)
			switch err := st.RangeGet(ctx, pk, 0, ptr); {
			case errors.Is(err, cold.ErrNotFound):
				continue
			case err != nil:
				return err
			}
			if p, err := pack.DecodePointer(ptr); err != nil || p.ManifestKey != g.manifestKey {
				continue // rewritten to a newer pack of the block: keep it
			}
			f := t.idx.fp(g.ns, r.Key)
			t.idx.remove(f)
			t.hide.put(f)
			if err := st.Delete(ctx, pk); err != nil {
				return err
			}
		}
		if err := st.Delete(ctx, g.manifestKey); err != nil {
			return err
		}
	} else if !errors.Is(err, cold.ErrNotFound) {
		return err
	}
	return st.Delete(ctx, g.packKey)
}

// unqueueJob forgets the pack of a job the sink gave up.
func (t *Tier) unqueueJob(j *sink.Job) {
	for _, o := range j.Objects {
		if o.Kind == sink.KindManifest {
			t.ledger.unqueue(o.Key)
		}
	}
}

// AccountedStore returns the tier's store with every successful Delete of
// a manifest or pack subtracted from its tenant's cold bytes, and every
// deleted pointer dropped from the presence index: give it to anything
// else that deletes cold objects (the admin lifecycle's purge and expiry),
// so the quota ledger and LOOKUP stay current.
func (t *Tier) AccountedStore() cold.Store {
	return ledgerStore{Store: t.cfg.Store, l: t.ledger, idx: t.idx}
}
