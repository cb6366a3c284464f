package lowertest

import (
	"context"
	"sync"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/lower"
)

// Mem is an in-memory lower.Tier for unit tests: it takes every evicted
// block while it holds fewer than Limit bytes (0: no limit) and counts
// what it was asked.
type Mem struct {
	// Name prefixes its STAT entries (default "mem").
	Name  string
	Limit int64

	mu      sync.Mutex
	blocks  map[memKey][]byte
	tenants map[identity.NamespaceDigest]string
	bytes   int64
	refills int
	hits    int
}

type memKey struct {
	d   identity.NamespaceDigest
	key identity.BlockKey
}

var _ lower.Tier = (*Mem)(nil)

func (m *Mem) init() {
	if m.blocks == nil {
		m.blocks = map[memKey][]byte{}
		m.tenants = map[identity.NamespaceDigest]string{}
	}
}

func (m *Mem) name() string {
	if m.Name == "" {
		return "mem"
	}
	return m.Name
}

// Refill implements lower.Tier.
func (m *Mem) Refill(_ context.Context, _ identity.Namespace, d identity.NamespaceDigest, key identity.BlockKey, alloc lower.Alloc) (int, bool) {
	m.mu.Lock()
	m.init()
	m.refills++
	p, ok := m.blocks[memKey{d, key}]
	m.mu.Unlock()
	if !ok {
		return 0, false
	}
	buf, ok := alloc(len(p))
	if !ok || len(buf) != len(p) {
		return 0, false
	}
	copy(buf, p)
	m.mu.Lock()
	m.hits++
	m.mu.Unlock()
	return len(p), true
}

// Present implements lower.Tier.
func (m *Mem) Present(d identity.NamespaceDigest, key identity.BlockKey) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.blocks[memKey{d, key}]
	return ok
}

// Delete implements lower.Tier.
func (m *Mem) Delete(_ context.Context, _ identity.Namespace, d identity.NamespaceDigest, key identity.BlockKey) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.blocks[memKey{d, key}]
	if ok {
		m.bytes -= int64(len(p))
		delete(m.blocks, memKey{d, key})
	}
	return ok, nil
}

// Stored implements lower.Tier.
func (m *Mem) Stored(id identity.CacheIdentity, d identity.NamespaceDigest, _ identity.BlockKey) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.init()
	m.tenants[d] = id.Tenant
}

// Evicted implements lower.Tier.
func (m *Mem) Evicted(d identity.NamespaceDigest, key, _ identity.BlockKey, _ uint32, payload []byte) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.init()
	if _, ok := m.blocks[memKey{d, key}]; ok {
		return true
	}
	if m.Limit > 0 && m.bytes+int64(len(payload)) > m.Limit {
		return false
	}
	m.blocks[memKey{d, key}] = append([]byte(nil), payload...)
	m.bytes += int64(len(payload))
	return true
}

// TenantStats implements lower.Tier: the tenant's bytes.
func (m *Mem) TenantStats(tenant string) []wire.StatEntry {
	m.mu.Lock()
	defer m.mu.Unlock()
	var n int64
	for k, p := range m.blocks {
		if m.tenants[k.d] == tenant {
			n += int64(len(p))
		}
	}
	return []wire.StatEntry{{Name: "tenant_" + m.name() + "_bytes", Value: uint64(n)}}
}

// Stats implements lower.Tier.
func (m *Mem) Stats() []wire.StatEntry {
	m.mu.Lock()
	defer m.mu.Unlock()
	return []wire.StatEntry{
		{Name: m.name() + "_bytes", Value: uint64(m.bytes)},
		{Name: m.name() + "_refills", Value: uint64(m.refills)},
		{Name: m.name() + "_hits", Value: uint64(m.hits)},
	}
}
