// Package coldtest is the behaviour suite every cold.Store backend passes.
//
// A backend's test calls RunStoreSuite with a constructor that returns an
// empty store for each subtest (a fresh directory, a fresh Mem, or an S3
// store under a fresh key prefix). The suite checks only what the cold.Store
// contract promises, so mem, fs and any S3-compatible server must agree.
package coldtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpucache/gpucache/internal/cold"
)

// Options tune the suite for slow backends.
type Options struct {
	// ManyKeys is the object count of the list pagination test. Default
	// 1100, which crosses S3's 1000-key ListObjectsV2 page. Negative skips it.
	ManyKeys int
}

// RunStoreSuite runs the shared behaviour suite with default Options.
func RunStoreSuite(t *testing.T, newStore func(t *testing.T) cold.Store) {
	t.Helper()
	RunStoreSuiteWith(t, newStore, Options{})
}

// RunStoreSuiteWith runs the shared behaviour suite. newStore must return an
// empty store; the suite owns it for the subtest's lifetime and the
// constructor should register any cleanup with t.Cleanup.
func RunStoreSuiteWith(t *testing.T, newStore func(t *testing.T) cold.Store, opts Options) {
	t.Helper()
	if opts.ManyKeys == 0 {
		opts.ManyKeys = 1100
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, s cold.Store)
	}{
		{"RoundTrip", testRoundTrip},
		{"PartialRanges", testPartialRanges},
		{"RangeGetTee", testRangeGetTee},
		{"RangePastEnd", testRangePastEnd},
		{"NotFound", testNotFound},
		{"IfNoneMatch", testIfNoneMatch},
		{"Overwrite", testOverwrite},
		{"DeleteIdempotent", testDeleteIdempotent},
		{"ListOrder", testListOrder},
		{"ListStopsOnError", testListStopsOnError},
		{"ListMany", func(t *testing.T, s cold.Store) { testListMany(t, s, opts.ManyKeys) }},
		{"InvalidKeys", testInvalidKeys},
		{"LongKey", testLongKey},
		{"ZeroLength", testZeroLength},
		{"ConcurrentPuts", testConcurrentPuts},
		{"ConcurrentOverwriteAtomic", testConcurrentOverwrite},
		{"ConditionalPutRace", testConditionalRace},
		{"ContextCanceled", testContextCanceled},
		{"ListCanceledMidway", testListCanceledMidway},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, newStore(t))
		})
	}
}

// pattern returns n bytes that differ with position and seed, so a read at
// the wrong offset or of the wrong version shows up.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

func put(t *testing.T, s cold.Store, key string, body []byte) {
	t.Helper()
	if err := s.Put(t.Context(), key, body, cold.PutOptions{}); err != nil {
		t.Fatalf("Put(%q, %d bytes): %v", key, len(body), err)
	}
}

func read(t *testing.T, s cold.Store, key string, off int64, n int) []byte {
	t.Helper()
	dst := make([]byte, n)
	if err := s.RangeGet(t.Context(), key, off, dst); err != nil {
		t.Fatalf("RangeGet(%q, %d, %d): %v", key, off, n, err)
	}
	return dst
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: error %v, want %v", what, err, want)
	}
}

func list(t *testing.T, s cold.Store, prefix string) []cold.ObjectInfo {
	t.Helper()
	var got []cold.ObjectInfo
	err := s.List(t.Context(), prefix, func(info cold.ObjectInfo) error {
		got = append(got, info)
		return nil
	})
	if err != nil {
		t.Fatalf("List(%q): %v", prefix, err)
	}
	return got
}

func keysOf(infos []cold.ObjectInfo) []string {
	keys := make([]string, len(infos))
	for i, info := range infos {
		keys[i] = info.Key
	}
	return keys
}

func testRoundTrip(t *testing.T, s cold.Store) {
	body := pattern(4096+13, 1)
	put(t, s, "ns/objects/round", body)
	info, err := s.Head(t.Context(), "ns/objects/round")
	if err != nil {
		t.Fatalf("Head: %v", err)
	}
	if info.Key != "ns/objects/round" || info.Size != int64(len(body)) || info.Modified.IsZero() {
		t.Fatalf("Head = %+v, want key ns/objects/round, size %d, a modification time", info, len(body))
	}
	if got := read(t, s, "ns/objects/round", 0, len(body)); !bytes.Equal(got, body) {
		t.Fatal("RangeGet of the whole object returned different bytes")
	}
}

func testPartialRanges(t *testing.T, s cold.Store) {
	body := pattern(256, 2)
	put(t, s, "r", body)
	for _, r := range []struct{ off, n int }{{0, 1}, {10, 20}, {255, 1}, {0, 256}, {128, 128}, {100, 0}, {256, 0}} {
		got := read(t, s, "r", int64(r.off), r.n)
		if !bytes.Equal(got, body[r.off:r.off+r.n]) {
			t.Errorf("RangeGet(off %d, len %d) returned wrong bytes", r.off, r.n)
		}
	}
}

// teeRecorder keeps what a RangeGetTee wrote and the largest Write.
type teeRecorder struct {
	got      []byte
	maxWrite int
	writes   int
}

func (r *teeRecorder) Write(p []byte) (int, error) {
	r.got = append(r.got, p...)
	r.maxWrite = max(r.maxWrite, len(p))
	r.writes++
	return len(p), nil
}

// testRangeGetTee checks cold.RangeGetTee (the backend's own when it is a
// cold.Teer): dst and the writer both get exactly the range, in pieces of
// at most cold.TeeChunk, and a failed read is RangeGet's error.
func testRangeGetTee(t *testing.T, s cold.Store) {
	body := pattern(3*cold.TeeChunk+17, 4)
	put(t, s, "tee", body)
	for _, r := range []struct{ off, n int }{{0, len(body)}, {5, 2*cold.TeeChunk + 1}, {len(body) - 3, 3}, {7, 0}} {
		dst := make([]byte, r.n)
		var w teeRecorder
		if err := cold.RangeGetTee(t.Context(), s, "tee", int64(r.off), dst, &w); err != nil {
			t.Fatalf("RangeGetTee(off %d, len %d): %v", r.off, r.n, err)
		}
		want := body[r.off : r.off+r.n]
		if !bytes.Equal(dst, want) || !bytes.Equal(w.got, want) {
			t.Fatalf("RangeGetTee(off %d, len %d): dst or writer differs from the range", r.off, r.n)
		}
		if w.maxWrite > cold.TeeChunk {
			t.Errorf("RangeGetTee(off %d, len %d): a Write of %d bytes, want at most %d", r.off, r.n, w.maxWrite, cold.TeeChunk)
		}
		if r.n == 0 && w.writes != 0 {
			t.Errorf("RangeGetTee of 0 bytes wrote %d times", w.writes)
		}
	}
	err := cold.RangeGetTee(t.Context(), s, "tee", int64(len(body)-2), make([]byte, 3), &teeRecorder{})
	wantErr(t, "RangeGetTee past the end", err, cold.ErrRange)
	err = cold.RangeGetTee(t.Context(), s, "missing", 0, make([]byte, 3), &teeRecorder{})
	wantErr(t, "RangeGetTee of a missing key", err, cold.ErrNotFound)
}

func testRangePastEnd(t *testing.T, s cold.Store) {
	put(t, s, "r", pattern(256, 3))
	for _, r := range []struct {
		off int64
		n   int
	}{{250, 10}, {256, 1}, {1000, 1}, {0, 257}, {257, 0}, {-1, 1}} {
		err := s.RangeGet(t.Context(), "r", r.off, make([]byte, r.n))
		wantErr(t, fmt.Sprintf("RangeGet(off %d, len %d) of 256 bytes", r.off, r.n), err, cold.ErrRange)
	}
}

func testNotFound(t *testing.T, s cold.Store) {
	_, err := s.Head(t.Context(), "missing/key")
	wantErr(t, "Head(missing)", err, cold.ErrNotFound)
	err = s.RangeGet(t.Context(), "missing/key", 0, make([]byte, 4))
	wantErr(t, "RangeGet(missing)", err, cold.ErrNotFound)
	err = s.RangeGet(t.Context(), "missing/key", 0, nil)
	wantErr(t, "RangeGet(missing, empty range)", err, cold.ErrNotFound)
	if got := list(t, s, "missing/"); len(got) != 0 {
		t.Fatalf("List(missing/) = %v, want nothing", keysOf(got))
	}
}

func testIfNoneMatch(t *testing.T, s cold.Store) {
	ctx := t.Context()
	v1 := pattern(100, 4)
	if err := s.Put(ctx, "cond", v1, cold.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatalf("conditional Put of a new key: %v", err)
	}
	err := s.Put(ctx, "cond", pattern(200, 5), cold.PutOptions{IfNoneMatch: true})
	wantErr(t, "conditional Put over an existing key", err, cold.ErrExists)
	info, err := s.Head(ctx, "cond")
	if err != nil || info.Size != int64(len(v1)) {
		t.Fatalf("Head after refused Put = %+v, %v; want size %d", info, err, len(v1))
	}
	if got := read(t, s, "cond", 0, len(v1)); !bytes.Equal(got, v1) {
		t.Fatal("refused conditional Put changed the object")
	}
}

func testOverwrite(t *testing.T, s cold.Store) {
	put(t, s, "ow", pattern(10, 6))
	v2 := pattern(20, 7)
	put(t, s, "ow", v2)
	info, err := s.Head(t.Context(), "ow")
	if err != nil || info.Size != 20 {
		t.Fatalf("Head after overwrite = %+v, %v; want size 20", info, err)
	}
	if got := read(t, s, "ow", 0, 20); !bytes.Equal(got, v2) {
		t.Fatal("overwrite: RangeGet returned the old bytes")
	}
}

func testDeleteIdempotent(t *testing.T, s cold.Store) {
	ctx := t.Context()
	put(t, s, "d/x", pattern(8, 8))
	for i := range 2 {
		if err := s.Delete(ctx, "d/x"); err != nil {
			t.Fatalf("Delete #%d: %v", i+1, err)
		}
	}
	if err := s.Delete(ctx, "d/never"); err != nil {
		t.Fatalf("Delete of a key never written: %v", err)
	}
	_, err := s.Head(ctx, "d/x")
	wantErr(t, "Head after Delete", err, cold.ErrNotFound)
	if got := list(t, s, ""); len(got) != 0 {
		t.Fatalf("List after Delete = %v, want nothing", keysOf(got))
	}
	// The name is free again, also for a conditional Put.
	if err := s.Put(ctx, "d/x", []byte("again"), cold.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatalf("conditional Put after Delete: %v", err)
	}
}

func testListOrder(t *testing.T, s cold.Store) {
	// "a-c" < "a.b" < "a/b" < "a0" < "ab" in byte order: a store that walks
	// directories naively lists "a/..." too early or too late.
	keys := []string{"p/ab", "p/a/c", "q/x", "p/a-c", "p0", "p/a/b", "p/a.b", "p/b", "p/a0", "o"}
	for i, k := range keys {
		put(t, s, k, pattern(i+1, byte(i)))
	}
	for _, prefix := range []string{"", "p", "p/", "p/a", "p/a/", "p/b", "q/", "zz", "p/a/c"} {
		var want []string
		for _, k := range keys {
			if strings.HasPrefix(k, prefix) {
				want = append(want, k)
			}
		}
		slices.Sort(want)
		got := list(t, s, prefix)
		if !slices.Equal(keysOf(got), want) {
			t.Errorf("List(%q) = %q, want %q", prefix, keysOf(got), want)
		}
		for _, info := range got {
			i := slices.Index(keys, info.Key)
			if info.Size != int64(i+1) || info.Modified.IsZero() {
				t.Errorf("List(%q): %+v, want size %d and a modification time", prefix, info, i+1)
			}
		}
	}
}

func testListStopsOnError(t *testing.T, s cold.Store) {
	for _, k := range []string{"s/1", "s/2", "s/3"} {
		put(t, s, k, nil)
	}
	stop := errors.New("stop here")
	calls := 0
	err := s.List(t.Context(), "s/", func(cold.ObjectInfo) error {
		calls++
		if calls == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || calls != 2 {
		t.Fatalf("List with fn failing on call 2: err %v after %d calls, want %v after 2", err, calls, stop)
	}
}

func testListMany(t *testing.T, s cold.Store, n int) {
	if n < 0 {
		t.Skip("ManyKeys < 0")
	}
	want := make([]string, n)
	for i := range want {
		want[i] = fmt.Sprintf("many/%05d", i)
	}
	forEach(t, want, 8, func(ctx context.Context, k string) error {
		return s.Put(ctx, k, []byte{1}, cold.PutOptions{})
	})
	put(t, s, "many0", nil) // sorts after every "many/" key; not in the prefix
	if got := keysOf(list(t, s, "many/")); !slices.Equal(got, want) {
		t.Fatalf("List(many/) returned %d keys (first %q), want %d in order", len(got), got[:min(3, len(got))], n)
	}
	if n >= 60 {
		got := keysOf(list(t, s, "many/0005"))
		if !slices.Equal(got, want[50:60]) {
			t.Fatalf("List(many/0005) = %q, want %q", got, want[50:60])
		}
	}
}

// forEach runs fn for every key on workers goroutines and fails t on the
// first error.
func forEach(t *testing.T, keys []string, workers int, fn func(ctx context.Context, key string) error) {
	t.Helper()
	ctx, cancel := context.WithCancelCause(t.Context())
	defer cancel(nil)
	next := make(chan string)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for k := range next {
				if err := fn(ctx, k); err != nil {
					cancel(fmt.Errorf("%q: %w", k, err))
				}
			}
		})
	}
feed:
	for _, k := range keys {
		select {
		case next <- k:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		t.Fatal(err)
	}
}

func testInvalidKeys(t *testing.T, s cold.Store) {
	ctx := t.Context()
	bad := []string{
		"", "/abs", "trailing/", "a//b", "..", "../up", "a/../b", ".", "a/./b",
		"nul\x00byte", "new\nline", "del\x7f", "bad\xffutf8", strings.Repeat("k", cold.MaxKeyLen+1),
	}
	for _, k := range bad {
		wantErr(t, fmt.Sprintf("Put(%q)", k), s.Put(ctx, k, []byte("x"), cold.PutOptions{}), cold.ErrInvalidKey)
		wantErr(t, fmt.Sprintf("Put(%q, IfNoneMatch)", k), s.Put(ctx, k, []byte("x"), cold.PutOptions{IfNoneMatch: true}), cold.ErrInvalidKey)
		_, err := s.Head(ctx, k)
		wantErr(t, fmt.Sprintf("Head(%q)", k), err, cold.ErrInvalidKey)
		wantErr(t, fmt.Sprintf("RangeGet(%q)", k), s.RangeGet(ctx, k, 0, make([]byte, 1)), cold.ErrInvalidKey)
		wantErr(t, fmt.Sprintf("Delete(%q)", k), s.Delete(ctx, k), cold.ErrInvalidKey)
	}
	for _, p := range []string{"/abs", "a//", "../", "nul\x00"} {
		err := s.List(ctx, p, func(cold.ObjectInfo) error { return nil })
		wantErr(t, fmt.Sprintf("List(%q)", p), err, cold.ErrInvalidKey)
	}
	if got := list(t, s, ""); len(got) != 0 {
		t.Fatalf("invalid keys left objects behind: %q", keysOf(got))
	}
}

func testLongKey(t *testing.T, s cold.Store) {
	// 9 segments of 99 bytes: 899 bytes, under MaxKeyLen with room for an
	// S3 store's own key prefix, and under every file system's name limit.
	seg := strings.Repeat("s", 99)
	key := strings.Repeat(seg+"/", 8) + seg
	body := pattern(33, 9)
	put(t, s, key, body)
	if got := read(t, s, key, 0, len(body)); !bytes.Equal(got, body) {
		t.Fatal("long key: wrong bytes")
	}
	if got := keysOf(list(t, s, seg)); !slices.Equal(got, []string{key}) {
		t.Fatalf("List(long prefix) = %q", got)
	}
}

func testZeroLength(t *testing.T, s cold.Store) {
	ctx := t.Context()
	put(t, s, "z/nil", nil)
	if err := s.Put(ctx, "z/empty", []byte{}, cold.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatalf("conditional Put of an empty body: %v", err)
	}
	wantErr(t, "conditional Put over an empty object",
		s.Put(ctx, "z/empty", []byte("x"), cold.PutOptions{IfNoneMatch: true}), cold.ErrExists)
	for _, k := range []string{"z/nil", "z/empty"} {
		info, err := s.Head(ctx, k)
		if err != nil || info.Size != 0 {
			t.Fatalf("Head(%q) = %+v, %v; want size 0", k, info, err)
		}
		if err := s.RangeGet(ctx, k, 0, nil); err != nil {
			t.Fatalf("RangeGet(%q, 0, empty): %v", k, err)
		}
		wantErr(t, fmt.Sprintf("RangeGet(%q, 0, 1 byte)", k), s.RangeGet(ctx, k, 0, make([]byte, 1)), cold.ErrRange)
	}
	got := list(t, s, "z/")
	if len(got) != 2 || got[0].Size != 0 || got[1].Size != 0 {
		t.Fatalf("List(z/) = %+v, want two empty objects", got)
	}
}

func testConcurrentPuts(t *testing.T, s cold.Store) {
	var keys []string
	for g := range 16 {
		for i := range 4 {
			keys = append(keys, fmt.Sprintf("c/%02d/%d", g, i))
		}
	}
	forEach(t, keys, 16, func(ctx context.Context, k string) error {
		return s.Put(ctx, k, []byte(k), cold.PutOptions{IfNoneMatch: true})
	})
	for _, k := range keys {
		if got := read(t, s, k, 0, len(k)); string(got) != k {
			t.Fatalf("%q holds %q", k, got)
		}
	}
	if got := list(t, s, "c/"); len(got) != len(keys) {
		t.Fatalf("List(c/) = %d keys, want %d", len(got), len(keys))
	}
}

// testConcurrentOverwrite checks "a reader never sees a partial object":
// writers replace one key with same-size bodies, each a single repeated
// byte, while readers check every read is one whole version.
func testConcurrentOverwrite(t *testing.T, s cold.Store) {
	const size, writes = 64 << 10, 12
	put(t, s, "atomic", bytes.Repeat([]byte{0xA0}, size))
	done := make(chan struct{})
	var writers, readers sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 2 {
		writers.Go(func() {
			for i := range writes {
				body := bytes.Repeat([]byte{byte(w*writes + i)}, size)
				if err := s.Put(t.Context(), "atomic", body, cold.PutOptions{}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for range 2 {
		readers.Go(func() {
			dst := make([]byte, size)
			for {
				select {
				case <-done:
					return
				default:
				}
				if err := s.RangeGet(t.Context(), "atomic", 0, dst); err != nil {
					errs <- err
					return
				}
				if n := bytes.Count(dst, dst[:1]); n != size {
					errs <- fmt.Errorf("read a mixed object: %d of %d bytes are %#x", n, size, dst[0])
					return
				}
			}
		})
	}
	writers.Wait()
	close(done)
	readers.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func testConditionalRace(t *testing.T, s cold.Store) {
	const racers = 8
	results := make([]error, racers)
	var wg sync.WaitGroup
	for i := range racers {
		wg.Go(func() {
			results[i] = s.Put(t.Context(), "race", bytes.Repeat([]byte{byte(i)}, 32), cold.PutOptions{IfNoneMatch: true})
		})
	}
	wg.Wait()
	winner := -1
	for i, err := range results {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("racers %d and %d both won the conditional Put", winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, cold.ErrExists):
			t.Fatalf("racer %d: %v, want nil or ErrExists", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no racer won the conditional Put")
	}
	if got := read(t, s, "race", 0, 32); !bytes.Equal(got, bytes.Repeat([]byte{byte(winner)}, 32)) {
		t.Fatalf("object holds %v, want the winner's (%d) bytes", got[:4], winner)
	}
}

func testContextCanceled(t *testing.T, s cold.Store) {
	put(t, s, "cx", pattern(16, 10))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	start := time.Now()
	ops := map[string]error{
		"Put":      s.Put(ctx, "cx/new", []byte("x"), cold.PutOptions{}),
		"RangeGet": s.RangeGet(ctx, "cx", 0, make([]byte, 4)),
		"Delete":   s.Delete(ctx, "cx"),
		"List":     s.List(ctx, "", func(cold.ObjectInfo) error { return nil }),
	}
	_, ops["Head"] = s.Head(ctx, "cx")
	for op, err := range ops {
		wantErr(t, op+" with a canceled context", err, context.Canceled)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("five operations on a canceled context took %v", d)
	}
	// Whether a canceled Put or Delete took effect is unspecified; the store
	// must still work with a live context.
	if _, err := s.Head(t.Context(), "cx/new"); err != nil && !errors.Is(err, cold.ErrNotFound) {
		t.Fatalf("Head after canceled Put: %v", err)
	}
}

func testListCanceledMidway(t *testing.T, s cold.Store) {
	for _, k := range []string{"m/1", "m/2", "m/3"} {
		put(t, s, k, nil)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	calls := 0
	err := s.List(ctx, "m/", func(cold.ObjectInfo) error {
		calls++
		cancel()
		return nil
	})
	if !errors.Is(err, context.Canceled) || calls != 1 {
		t.Fatalf("List canceled in fn: err %v after %d calls, want context.Canceled after 1", err, calls)
	}
}
