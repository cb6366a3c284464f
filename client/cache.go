package client

import (
	"context"
	"sync"
	"time"
)

// Cache is what a Client (one node) and a Cluster (every node, each key
// sent to its owner) have in common: the data calls an inference engine
// makes. Code that does not care whether it talks to one node or to a
// cluster takes a Cache.
//
// The calls mean the same on both; where they differ is only in how they
// degrade when a node fails (see Cluster): a Client reports the failure,
// a Cluster turns it into misses, StatusNoSpace, a shorter Lookup run or
// locally computed fills.
//
// Leases are used in one way on both: Lookup with leaseTTL > 0 returns a
// LeaseID that pins the run it found, and a Get with WithLease(id) reads
// under it and releases it. An unused lease expires on its own. A LeaseID
// belongs to the Client or Cluster that returned it.
type Cache interface {
	// Get reads blocks; it never fails as a whole (see Client.Get).
	Get(ctx context.Context, ns Namespace, keys []BlockKey, opts ...GetOption) []GetResult
	// Put stores blocks and returns one status per block (see Client.Put).
	Put(ctx context.Context, ns Namespace, blocks []PutBlock) ([]Status, error)
	// PutOpaque stores one opaque-key block (see Client.PutOpaque).
	PutOpaque(ctx context.Context, ns Namespace, name, payload []byte) (Status, error)
	// Delete removes blocks and returns one status per key (see
	// Client.Delete).
	Delete(ctx context.Context, ns Namespace, keys []BlockKey) ([]Status, error)
	// Lookup returns the length of the leading run of cached keys and,
	// with leaseTTL > 0, a lease that pins it (0 when none was granted).
	Lookup(ctx context.Context, ns Namespace, keys []BlockKey, leaseTTL time.Duration) (int, LeaseID, error)
	// GetOrFill returns every block of a token chain, computing the
	// missing ones once across callers (see Client.GetOrFill).
	GetOrFill(ctx context.Context, ns Namespace, tokens []uint32, fill FillFunc) ([][]byte, FillReport, error)
	// Close closes the connections; later calls fail with ErrClosed.
	Close() error
}

var (
	_ Cache = (*Client)(nil)
	_ Cache = (*Cluster)(nil)
)

// clusterLeases maps the leases a Cluster hands out to the node leases
// behind them: a cluster Lookup asks every owner for its part of the run,
// and each owner that pins its part answers with a lease of its own, which
// only that node's Client can spend. Cluster.Get spends each node lease on
// the node that granted it.
type clusterLeases struct {
	mu   sync.Mutex
	next LeaseID                       // guarded by mu; the last id handed out
	m    map[LeaseID]clusterLeaseEntry // guarded by mu
}

type clusterLeaseEntry struct {
	nodes   map[*Client]LeaseID // the node leases, by the node Client that took each
	expires time.Time
}

// add remembers the node leases of one Lookup and returns the cluster
// lease that stands for them. Past maxLeaseRoutes entries, expired ones
// are swept; the map never holds more than maxLeaseRoutes live ones plus
// what a sweep cannot free (a caller that never spends its leases within
// their TTL finds the oldest dropped).
func (l *clusterLeases) add(nodes map[*Client]LeaseID, ttl time.Duration) LeaseID {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = make(map[LeaseID]clusterLeaseEntry)
	}
	if len(l.m) >= maxLeaseRoutes {
		var oldest LeaseID
		for id, e := range l.m {
			if now.After(e.expires) {
				delete(l.m, id)
			} else if oldest == 0 || id < oldest {
				oldest = id
			}
		}
		if len(l.m) >= maxLeaseRoutes {
			delete(l.m, oldest) // its node leases expire on their own
		}
	}
	l.next++
	l.m[l.next] = clusterLeaseEntry{nodes: nodes, expires: now.Add(ttl)}
	return l.next
}

// take returns (and forgets) the node leases behind cluster lease id; nil
// for an unknown or already spent id.
func (l *clusterLeases) take(id LeaseID) map[*Client]LeaseID {
	if id == 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.m[id]
	if !ok {
		return nil
	}
	delete(l.m, id)
	return e.nodes
}

// leaseSpend holds the node leases of one cluster lease while a Get
// spends them: each is handed out once, to the node that granted it,
// however many batches (retries after WRONG_EPOCH included) reach that
// node.
type leaseSpend struct {
	mu    sync.Mutex
	nodes map[*Client]LeaseID // guarded by mu
}

func (s *leaseSpend) take(n *Client) LeaseID {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.nodes[n]
	delete(s.nodes, n)
	return id
}
