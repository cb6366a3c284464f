package hot

// This file connects a Config.Policy to the store: the per-entry signals it
// is given, and the eviction scan over its victims. Every hook is behind a
// cfg.Policy nil check, so the built-in order pays nothing else.

import (
	"encoding/binary"

	"github.com/gpucache/gpucache/internal/policy"
)

// policyScanFactor scales cfg.EvictScan into the bound of one policy victim
// scan: the policy orders blocks of every size class, and the scan skips
// those of other classes as well as pinned and leased ones, so it may look
// at up to EvictScan*policyScanFactor candidates before it gives up.
const policyScanFactor = 4

// entryMeta is what a policy is told about an entry beyond what the entry
// holds (tokens): kept in Store.mu.meta, by entry index, only with a policy.
type entryMeta struct {
	position uint32
	partial  bool
}

// victimScan is the state of one policy victim scan (Store.mu.victim).
type victimScan struct {
	class int    // the size class that needs space
	left  int    // candidates the scan may still inspect
	cand  uint32 // the victim found
	found bool
}

// policyParentLocked returns the entry index of parent when it is published
// under ns, else policy.NoParent.
func (s *Store) policyParentLocked(ns Namespace, parent Key) policy.ID {
	if parent.IsZero() {
		return policy.NoParent
	}
	p, ok := s.mu.index[parent]
	if !ok {
		return policy.NoParent
	}
	if pe := &s.mu.entries[p]; pe.state != statePublished || pe.ns != ns {
		return policy.NoParent
	}
	return p
}

// policyBlockLocked describes a block offered to Policy.Admit (its ID is
// not meaningful yet: policy.NoParent).
func (s *Store) policyBlockLocked(ns Namespace, parent Key, meta BlockMeta) policy.Block {
	return policy.Block{
		ID:       policy.NoParent,
		Parent:   s.policyParentLocked(ns, parent),
		Position: meta.Position,
		Tokens:   meta.Tokens,
		Partial:  meta.Partial,
	}
}

// policyInsertLocked tells p that the entry idx was published.
func (s *Store) policyInsertLocked(p policy.Policy, idx uint32) {
	e := &s.mu.entries[idx]
	m := s.mu.meta[idx]
	p.Insert(policy.Block{
		ID:       idx,
		Parent:   s.policyParentLocked(e.ns, e.parent),
		Position: m.position,
		Tokens:   e.tokens,
		Partial:  m.partial,
		Key:      policyKey(e.key),
	})
}

// policyKey is policy.Block.Key of a block: the first 8 bytes of its
// BlockKey, a cryptographic digest of its identity.
func policyKey(k Key) uint64 { return binary.LittleEndian.Uint64(k[:8]) }

// policyCandidateLocked returns the first victim the policy yields that is
// a published block of class k, neither pinned nor leased, inspecting at
// most cfg.EvictScan*policyScanFactor candidates. The prefix-aware rule is
// the policy's business here: the store evicts a parent with cached children
// if the policy names it (its children stay cached and find it again if it
// is published again).
func (s *Store) policyCandidateLocked(k int) (uint32, bool) {
	s.mu.victim = victimScan{class: k, left: s.cfg.EvictScan * policyScanFactor}
	s.cfg.Policy.Victims(s.yieldVictim)
	v := s.mu.victim
	return v.cand, v.found
}

// yieldVictimLocked is the yield function of policyCandidateLocked's scan.
func (s *Store) yieldVictimLocked(id policy.ID) bool {
	v := &s.mu.victim
	if v.found || v.left <= 0 {
		return false
	}
	v.left--
	if int(id) < s.cl.n || int(id) >= len(s.mu.entries) {
		return true // not an entry (a policy bug): skip it
	}
	e := &s.mu.entries[id]
	if e.state != statePublished || int(e.class) != v.class || e.pinned() {
		return true
	}
	v.cand, v.found = id, true
	return false
}
