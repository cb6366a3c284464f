package server

import (
	"errors"
	"fmt"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/directory"
	"github.com/gpucache/gpucache/internal/hot"
)

// Backfill errors (Server.Backfill).
var (
	// ErrBackfillIdentity: the block's identity does not hash to its
	// namespace digest and key, or names no tenant; it is not published.
	ErrBackfillIdentity = errors.New("gpucache/server: backfilled block fails its identity check")
	// ErrBackfillBusy: another fill of the block (a refill or a PUT) holds
	// it; the backfill leaves it to that fill.
	ErrBackfillBusy = errors.New("gpucache/server: block is being filled by another request")
)

// Backfill publishes one block read from the cold tier into the hot tier
// by the path a cold refill takes (coldread.go): the directory's
// single-flight, a slot reserved for and charged to the block's tenant
// (its fair share and DRAM quota, the tier's bounds and admission rules),
// the hot seal when hot reads are sealed, then Commit. It returns
// published false with a nil error when the hot tier already holds the
// block. The payload is copied; the caller keeps it.
//
// It is the admin backfill's sink (internal/admin Lifecycle.Deliver):
// payload has already been checked against the manifest's checksum, and
// Backfill checks the identity itself (ErrBackfillIdentity).
func (s *Server) Backfill(id identity.CacheIdentity, d identity.NamespaceDigest, key identity.BlockKey, payload []byte) (published bool, err error) {
	if nd, err := id.Namespace.Digest(); err != nil || nd != d || id.KeyIn(d) != key || id.Namespace.Tenant == "" {
		return false, ErrBackfillIdentity
	}
	tenant := id.Namespace.Tenant
	one := []identity.BlockKey{key}
	res := s.dir.Acquire(directory.Request{Key: key, Namespace: d, Tenant: tenant, Owner: s.connIDs.Add(1)},
		func() bool { hits, _, _ := s.store.Lookup(d, one, 0, false); return hits == 1 })
	switch res.Outcome {
	case directory.Hit:
		return false, nil
	case directory.Joined:
		res.Waiter.Cancel()
		return false, ErrBackfillBusy
	case directory.Lead:
	default:
		return false, fmt.Errorf("gpucache/server: backfill: fill directory refused the block (%v)", res.Outcome)
	}
	tok := res.Token
	r, err := s.store.ReserveBlock(d, key, id.Parent, hot.BlockMeta{Tokens: id.ValidLength, Position: uint32(id.Position), Tenant: tenant}, len(payload))
	if err != nil {
		s.dir.Fail(tok)
		if errors.Is(err, hot.ErrExists) {
			return false, nil
		}
		return false, err
	}
	copy(r.Buf, payload)
	if s.sealer != nil {
		if err := s.sealer.tag(s.store, r, d, key); err != nil {
			s.store.Abort(r)
			s.dir.Fail(tok)
			return false, err
		}
	}
	s.store.Commit(r)
	s.dir.Finish(tok)
	return true, nil
}
