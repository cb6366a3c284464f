package server

import (
	"context"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/lower"
)

// tierFuncs is a lower.Tier made of the functions a test sets; an unset
// one answers as an empty tier would.
type tierFuncs struct {
	refill      func(ctx context.Context, ns identity.Namespace, key identity.BlockKey, alloc lower.Alloc) (int, bool)
	present     func(d identity.NamespaceDigest, key identity.BlockKey) bool
	del         func(ctx context.Context, ns identity.Namespace, d identity.NamespaceDigest, key identity.BlockKey) error
	stored      func(id identity.CacheIdentity, d identity.NamespaceDigest, key identity.BlockKey)
	tenantStats func(tenant string) []wire.StatEntry
	local       bool // lower.Local: a tier on this host (flash)
}

var _ lower.Tier = (*tierFuncs)(nil)

func (f *tierFuncs) Refill(ctx context.Context, ns identity.Namespace, _ identity.NamespaceDigest, key identity.BlockKey, alloc lower.Alloc) (int, bool) {
	if f.refill == nil {
		return 0, false
	}
	return f.refill(ctx, ns, key, alloc)
}

func (f *tierFuncs) Present(d identity.NamespaceDigest, key identity.BlockKey) bool {
	return f.present != nil && f.present(d, key)
}

func (f *tierFuncs) Delete(ctx context.Context, ns identity.Namespace, d identity.NamespaceDigest, key identity.BlockKey) (bool, error) {
	if f.del == nil {
		return false, nil
	}
	return false, f.del(ctx, ns, d, key)
}

func (f *tierFuncs) Stored(id identity.CacheIdentity, d identity.NamespaceDigest, key identity.BlockKey) {
	if f.stored != nil {
		f.stored(id, d, key)
	}
}

func (f *tierFuncs) Evicted(identity.NamespaceDigest, identity.BlockKey, identity.BlockKey, uint32, []byte) bool {
	return false
}

func (f *tierFuncs) TenantStats(tenant string) []wire.StatEntry {
	if f.tenantStats == nil {
		return nil
	}
	return f.tenantStats(tenant)
}

func (f *tierFuncs) Stats() []wire.StatEntry { return nil }

func (f *tierFuncs) Local() bool { return f.local }
