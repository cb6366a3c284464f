package refill

import (
	"sync"
	"time"

	"github.com/gpucache/gpucache/internal/cold/pack"
)

// caches hold what refill may safely reuse across calls. A manifest is
// content-addressed: once its key's digest and its decoding have been
// checked it can never change, so it is kept until evicted. A pointer can
// be rewritten (a later pack of the same block), so it is kept only for
// PointerTTL; a stale pointer leads at worst to a reclaimed manifest or
// pack, which is a miss and drops the entries, never to other bytes,
// because every range and payload is still checked against the expected
// identity and its checksum.
type caches struct {
	mu        sync.Mutex
	manifests map[string]*pack.Manifest // guarded by mu
	pointers  map[string]ptrEntry       // guarded by mu
	maxM      int
	maxBytes  int64 // 0: no byte bound
	bytes     int64 // MemCost of the cached manifests; guarded by mu
	ttl       time.Duration
	now       func() time.Time
}

type ptrEntry struct {
	ptr     pack.Pointer
	expires time.Time
}

// maxPointers bounds the pointer cache: when it is full it is emptied.
// Entries are dropped only when looked up after their TTL, so on a node
// that refills many distinct blocks the cache fills to this bound.
const maxPointers = 1 << 16

// PointerCacheEntryBytes is the measured heap cost of one cached pointer
// (about 480 bytes: its key string, the pointer with its manifest key
// string, the map slot), with the map's growth slack
// (TestPointerCacheBounded). The cache holds at most maxPointers ×
// PointerCacheEntryBytes, its term in the memory bound (OPERATIONS.md).
const PointerCacheEntryBytes = 512

func newCaches(cfg Config) *caches {
	if cfg.ManifestCache <= 0 && cfg.PointerTTL <= 0 {
		return nil
	}
	return &caches{manifests: make(map[string]*pack.Manifest), pointers: make(map[string]ptrEntry),
		maxM: cfg.ManifestCache, maxBytes: cfg.ManifestCacheBytes, ttl: cfg.PointerTTL, now: cfg.Now}
}

func (c *caches) manifest(key string) (*pack.Manifest, bool) {
	if c == nil || c.maxM <= 0 {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.manifests[key]
	return m, ok
}

func (c *caches) putManifest(key string, m *pack.Manifest) {
	if c == nil || c.maxM <= 0 {
		return
	}
	cost := m.MemCost()
	if c.maxBytes > 0 && cost > c.maxBytes {
		return // larger than the whole cache: used for this call only
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.manifests[key]; ok {
		c.bytes -= old.MemCost()
		delete(c.manifests, key)
	}
	for k, old := range c.manifests { // drop arbitrary entries until it fits
		if len(c.manifests) < c.maxM && (c.maxBytes <= 0 || c.bytes+cost <= c.maxBytes) {
			break
		}
		c.bytes -= old.MemCost()
		delete(c.manifests, k)
	}
	c.manifests[key] = m
	c.bytes += cost
}

func (c *caches) pointer(key string) (pack.Pointer, bool) {
	if c == nil || c.ttl <= 0 {
		return pack.Pointer{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.pointers[key]
	if !ok || !c.now().Before(e.expires) {
		delete(c.pointers, key)
		return pack.Pointer{}, false
	}
	return e.ptr, true
}

func (c *caches) putPointer(key string, p pack.Pointer) {
	if c == nil || c.ttl <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pointers) >= maxPointers {
		clear(c.pointers)
	}
	c.pointers[key] = ptrEntry{ptr: p, expires: c.now().Add(c.ttl)}
}

// forget drops a pointer and the manifest it named after a miss that may
// come from stale entries.
func (c *caches) forget(ptrKey, manifestKey string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pointers, ptrKey)
	if m, ok := c.manifests[manifestKey]; ok {
		c.bytes -= m.MemCost()
		delete(c.manifests, manifestKey)
	}
}
