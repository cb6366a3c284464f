package refill

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/cold/pack"
	"github.com/gpucache/gpucache/internal/cold/s3store/s3test"
)

// teeStore is a cold.Mem that is a cold.Teer: RangeGetTee hands the range
// to the writer in small pieces, as a network body arrives, and can fail
// part-way. It counts how each pack object was read.
type teeStore struct {
	*cold.Mem
	piece int // bytes per Read of the simulated body

	mu        sync.Mutex
	teeReads  int   // RangeGetTee calls on packs/, guarded by mu
	plainRead int   // RangeGet calls on packs/, guarded by mu
	failAfter int   // > 0: the body ends with failErr after this many bytes; guarded by mu
	failErr   error // guarded by mu
}

var _ cold.Teer = (*teeStore)(nil)

func (s *teeStore) RangeGet(ctx context.Context, key string, off int64, dst []byte) error {
	if strings.HasPrefix(key, "packs/") {
		s.mu.Lock()
		s.plainRead++
		s.mu.Unlock()
	}
	return s.Mem.RangeGet(ctx, key, off, dst)
}

func (s *teeStore) RangeGetTee(ctx context.Context, key string, off int64, dst []byte, w io.Writer) error {
	s.mu.Lock()
	if strings.HasPrefix(key, "packs/") {
		s.teeReads++
	}
	failAfter, failErr := s.failAfter, s.failErr
	s.mu.Unlock()
	body := make([]byte, len(dst))
	if err := s.Mem.RangeGet(ctx, key, off, body); err != nil {
		return err
	}
	var r io.Reader = &pieceReader{b: body, piece: s.piece}
	if failAfter > 0 {
		r = io.MultiReader(&pieceReader{b: body[:failAfter], piece: s.piece}, errReader{failErr})
	}
	return cold.ReadTee(r, key, dst, w)
}

func (s *teeStore) counts() (tee, plain int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.teeReads, s.plainRead
}

// pieceReader returns at most piece bytes per Read.
type pieceReader struct {
	b     []byte
	piece int
}

func (r *pieceReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), r.piece)], r.b)
	r.b = r.b[n:]
	return n, nil
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// publishTo writes a pack's objects to s.
func publishTo(t testing.TB, s cold.Store, p *pack.Pack) {
	t.Helper()
	for _, o := range append([]pack.Object{p.Object, p.Manifest}, p.Pointers...) {
		if err := s.Put(context.Background(), o.Key, o.Body, cold.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPayloadChecksumStreams: on a store that can show a read's bytes as
// they arrive (cold.Teer), the payload is read once, through RangeGetTee,
// and checksummed from those pieces; RangeGet is never called on the pack.
func TestPayloadChecksumStreams(t *testing.T) {
	const size = 3*cold.TeeChunk + 123
	store := &teeStore{Mem: cold.NewMem(), piece: 4000}
	ids := chain(t, testNamespace("acme"), 3, 7)
	p, payloads := buildPack(t, ids, size)
	publishTo(t, store, p)
	r, err := New(store, Config{})
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		dst := filled(size + 5)
		n, res, err := r.RefillBlock(t.Context(), id, dst)
		if !res.Hit || n != size || !bytes.Equal(dst[:n], payloads[i]) || !allAA(dst[n:]) {
			t.Fatalf("block %d: n=%d %v %v", i, n, res, err)
		}
	}
	if tee, plain := store.counts(); tee != len(ids) || plain != 0 {
		t.Fatalf("pack reads: %d through RangeGetTee, %d through RangeGet; want %d and 0", tee, plain, len(ids))
	}
}

// TestStreamedPayloadFailuresAreCleanMisses: a flipped payload byte, and a
// body that ends early, are misses with dst zeroed, although the bytes
// landed in dst (and were hashed) before the check.
func TestStreamedPayloadFailuresAreCleanMisses(t *testing.T) {
	const size = 2*cold.TeeChunk + 77
	store := &teeStore{Mem: cold.NewMem(), piece: 1 << 20}
	ids := chain(t, testNamespace("acme"), 2, 9)
	p, _ := buildPack(t, ids, size)
	publishTo(t, store, p)
	m, err := pack.DecodeManifest(p.Manifest.Body)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	r, err := New(store, Config{OnIntegrity: rec.on})
	if err != nil {
		t.Fatal(err)
	}

	// A body that ends early: Unavailable, nothing left in dst.
	store.mu.Lock()
	store.failAfter, store.failErr = cold.TeeChunk+10, cold.ErrUnavailable
	store.mu.Unlock()
	dst := filled(size)
	n, res, err := r.RefillBlock(t.Context(), ids[0], dst)
	expectMiss(t, n, res, Unavailable, dst)
	if !allZero(dst) || !errors.Is(err, cold.ErrUnavailable) {
		t.Fatalf("short body: dst zeroed %v, err %v", allZero(dst), err)
	}
	expectNoEvent(t, rec)
	store.mu.Lock()
	store.failAfter = 0
	store.mu.Unlock()

	// One flipped byte in the last piece of block 1's range.
	rg, _ := m.Find(mustKey(t, ids[1]))
	obj := append([]byte(nil), p.Object.Body...)
	obj[int(rg.Offset)+size-1] ^= 0x40
	if err := store.Put(t.Context(), p.Object.Key, obj, cold.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	dst = filled(size)
	n, res, err = r.RefillBlock(t.Context(), ids[1], dst)
	expectMiss(t, n, res, Corrupt, dst)
	if !allZero(dst) || !errors.Is(err, cold.ErrCorrupt) {
		t.Fatalf("flipped byte: dst zeroed %v, err %v", allZero(dst), err)
	}
	expectEvent(t, rec, IntegrityPayloadChecksum, ids[1])
}

// TestStreamedRefillOverS3: a 1 MiB block through a real S3 server (the
// body arrives in many reads), then the same block with one flipped byte:
// a hit, then a clean miss.
func TestStreamedRefillOverS3(t *testing.T) {
	store := s3test.NewStore(t, "stream/")
	if _, ok := cold.Store(store).(cold.Teer); !ok {
		t.Fatal("s3store.Store is not a cold.Teer")
	}
	const size = 1 << 20
	ids := chain(t, testNamespace("acme"), 2, 11)
	p, payloads := buildPack(t, ids, size)
	publishTo(t, store, p)
	rec := &recorder{}
	r, err := New(store, Config{OnIntegrity: rec.on})
	if err != nil {
		t.Fatal(err)
	}
	dst := filled(size)
	if n, res, err := r.RefillBlock(t.Context(), ids[1], dst); !res.Hit || n != size || !bytes.Equal(dst, payloads[1]) {
		t.Fatalf("refill over S3: n=%d %v %v", n, res, err)
	}
	m, err := pack.DecodeManifest(p.Manifest.Body)
	if err != nil {
		t.Fatal(err)
	}
	rg, _ := m.Find(mustKey(t, ids[1]))
	obj := append([]byte(nil), p.Object.Body...)
	obj[int(rg.Offset)+size/2] ^= 0x01
	if err := store.Put(t.Context(), p.Object.Key, obj, cold.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	dst = filled(size)
	n, res, err := r.RefillBlock(t.Context(), ids[1], dst)
	expectMiss(t, n, res, Corrupt, dst)
	if !allZero(dst) || !errors.Is(err, cold.ErrCorrupt) {
		t.Fatalf("flipped byte over S3: dst zeroed %v, err %v", allZero(dst), err)
	}
	expectEvent(t, rec, IntegrityPayloadChecksum, ids[1])
}

func mustKey(t testing.TB, id identity.CacheIdentity) identity.BlockKey {
	t.Helper()
	k, err := id.Key()
	if err != nil {
		t.Fatal(err)
	}
	return k
}
