package server

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"sync"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/hot"
	"github.com/gpucache/gpucache/internal/security/seal"
)

// HotTagSize is the hot-tier tag size a server with Config.HotSeal needs:
// a u16 key index (0: no seal) and the 32-byte MAC.
const HotTagSize = 2 + seal.MACSize

// hotSealer seals blocks as they enter the hot tier and verifies them on
// every hot read. A block's seal is HMAC-SHA256 over (namespace digest ||
// block key) and its payload; the key derives from the full identity, so
// the seal binds that identity too.
type hotSealer struct {
	ring *seal.Keyring
	mu   sync.Mutex
	ids  []seal.KeyID          // guarded by mu; index+1 is stored in the tag
	idx  map[seal.KeyID]uint16 // guarded by mu
}

func newHotSealer(r *seal.Keyring) *hotSealer {
	if r == nil {
		return nil
	}
	return &hotSealer{ring: r, idx: make(map[seal.KeyID]uint16)}
}

func sealInput(ns identity.NamespaceDigest, key identity.BlockKey) []byte {
	b := make([]byte, 0, 64)
	return append(append(b, ns[:]...), key[:]...)
}

// index returns the tag index of id, adding it if new.
func (h *hotSealer) index(id seal.KeyID) (uint16, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if i, ok := h.idx[id]; ok {
		return i, nil
	}
	if len(h.ids) >= 1<<16-1 {
		return 0, fmt.Errorf("more than %d seal keys since start; restart to reset", 1<<16-1)
	}
	h.ids = append(h.ids, id)
	h.idx[id] = uint16(len(h.ids))
	return uint16(len(h.ids)), nil
}

func (h *hotSealer) keyID(i uint16) (seal.KeyID, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if i == 0 || int(i) > len(h.ids) {
		return "", false
	}
	return h.ids[i-1], true
}

// tag seals a reserved block's payload and stores the seal as its tag.
func (h *hotSealer) tag(store *hot.Store, r hot.Reservation, ns identity.NamespaceDigest, key identity.BlockKey) error {
	s, err := h.ring.Seal(sealInput(ns, key), r.Buf)
	if err != nil {
		return err
	}
	i, err := h.index(s.KeyID)
	if err != nil {
		return err
	}
	var t [HotTagSize]byte
	binary.LittleEndian.PutUint16(t[:2], i)
	copy(t[2:], s.MAC[:])
	if !store.SetTag(r, t[:]) {
		return fmt.Errorf("the hot tier keeps no tags (TagSize %d needed)", HotTagSize)
	}
	return nil
}

// verify checks a pinned block against its seal.
func (h *hotSealer) verify(store *hot.Store, v hot.View, ns identity.NamespaceDigest, key identity.BlockKey) (seal.KeyID, error) {
	var buf [HotTagSize]byte
	t := store.Tag(v, buf[:0])
	if len(t) != HotTagSize {
		return "", fmt.Errorf("block has no seal tag")
	}
	id, ok := h.keyID(binary.LittleEndian.Uint16(t[:2]))
	if !ok {
		return "", fmt.Errorf("block was stored without a seal")
	}
	s := seal.Seal{KeyID: id}
	copy(s.MAC[:], t[2:])
	return id, h.ring.Verify(sealInput(ns, key), v.Bytes, s)
}

// sealFailed handles a hot block that failed its seal: it is dropped, so
// the next read misses cleanly and the block can be written again, and the
// failure is counted and audited.
func (c *conn) sealFailed(v hot.View, ns identity.NamespaceDigest, key identity.BlockKey, id seal.KeyID, err error) {
	c.s.store.Release(v)
	c.s.store.Delete(ns, key)
	c.s.stats.hotSealFailures.Add(1)
	c.s.guard.Audit().Integrity("hot_seal_invalid", hex.EncodeToString(ns[:]), hex.EncodeToString(key[:]), string(id), err.Error())
	c.s.log.Warn("hot block failed its seal; dropped and served as a miss", "block", hex.EncodeToString(key[:8]), "key_id", string(id), "err", err)
}
