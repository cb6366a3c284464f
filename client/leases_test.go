package client

import (
	"testing"
	"time"
)

// TestClusterLeasesBounded: the table of cluster leases holds at most
// maxLeaseRoutes entries, dropping the oldest when none has expired, and
// hands each out once.
func TestClusterLeasesBounded(t *testing.T) {
	var l clusterLeases
	n := &Client{}
	var first, last LeaseID
	for i := range maxLeaseRoutes + 10 {
		id := l.add(map[*Client]LeaseID{n: LeaseID(i + 1)}, time.Hour)
		if i == 0 {
			first = id
		}
		last = id
	}
	if len(l.m) > maxLeaseRoutes {
		t.Fatalf("%d cluster leases held, bound %d", len(l.m), maxLeaseRoutes)
	}
	if got := l.take(first); got != nil {
		t.Fatalf("the oldest lease survived the bound: %v", got)
	}
	if got := l.take(last); got[n] != maxLeaseRoutes+10 {
		t.Fatalf("newest lease: %v", got)
	}
	if got := l.take(last); got != nil {
		t.Fatalf("a lease handed out twice: %v", got)
	}
	if got := l.take(0); got != nil {
		t.Fatalf("lease 0: %v", got)
	}
	// Expired entries are swept before anything live is dropped.
	var e clusterLeases
	for range maxLeaseRoutes {
		e.add(map[*Client]LeaseID{n: 1}, -time.Second)
	}
	keep := e.add(map[*Client]LeaseID{n: 2}, time.Hour)
	if len(e.m) != 1 || e.take(keep)[n] != 2 {
		t.Fatalf("expired leases not swept: %d held", len(e.m))
	}
}
