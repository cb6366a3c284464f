package sink

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/gpucache/gpucache/internal/cold"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fault is what the fake store does to one call.
type fault struct {
	err    error
	commit bool // apply the write, then return err (an ambiguous PUT)
}

// putRec is one Put the fake store received.
type putRec struct {
	key       string
	body      []byte
	opts      cold.PutOptions
	committed bool // the write took effect
	err       error
}

// fakeStore is an in-memory cold.Store with fault injection and call
// counters. hook, if set, runs outside the lock on every call and may inject
// a fault, block, or call back into the sink.
type fakeStore struct {
	hook func(ctx context.Context, op, key string) *fault

	mu    sync.Mutex
	objs  map[string][]byte
	calls map[string]int
	puts  []putRec
	// onCommit, if set, runs under mu after a Put takes effect; model
	// checks use it to look at the store at that instant.
	onCommit func(key string, body []byte)
}

var _ cold.Store = (*fakeStore)(nil)

func newFakeStore() *fakeStore {
	return &fakeStore{objs: make(map[string][]byte), calls: make(map[string]int)}
}

func (f *fakeStore) enter(ctx context.Context, op, key string) *fault {
	f.mu.Lock()
	f.calls[op]++
	f.mu.Unlock()
	if f.hook != nil {
		if ft := f.hook(ctx, op, key); ft != nil {
			return ft
		}
	}
	if err := ctx.Err(); err != nil {
		return &fault{err: err}
	}
	return nil
}

func (f *fakeStore) Put(ctx context.Context, key string, body []byte, opts cold.PutOptions) error {
	ft := f.enter(ctx, "put", key)
	f.mu.Lock()
	defer f.mu.Unlock()
	rec := putRec{key: key, body: slices.Clone(body), opts: opts}
	defer func() { f.puts = append(f.puts, rec) }()
	if ft != nil && !ft.commit {
		rec.err = ft.err
		return ft.err
	}
	if _, ok := f.objs[key]; ok && opts.IfNoneMatch {
		rec.err = fmt.Errorf("put %q: %w", key, cold.ErrExists)
		return rec.err
	}
	f.objs[key] = slices.Clone(body)
	rec.committed = true
	if f.onCommit != nil {
		f.onCommit(key, body)
	}
	if ft != nil {
		rec.err = ft.err
		return ft.err
	}
	return nil
}

func (f *fakeStore) Head(ctx context.Context, key string) (cold.ObjectInfo, error) {
	if ft := f.enter(ctx, "head", key); ft != nil {
		return cold.ObjectInfo{}, ft.err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.objs[key]
	if !ok {
		return cold.ObjectInfo{}, fmt.Errorf("head %q: %w", key, cold.ErrNotFound)
	}
	return cold.ObjectInfo{Key: key, Size: int64(len(b))}, nil
}

func (f *fakeStore) RangeGet(ctx context.Context, key string, off int64, dst []byte) error {
	if ft := f.enter(ctx, "rangeget", key); ft != nil {
		return ft.err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.objs[key]
	if !ok {
		return cold.ErrNotFound
	}
	if off < 0 || off+int64(len(dst)) > int64(len(b)) {
		return cold.ErrRange
	}
	copy(dst, b[off:])
	return nil
}

func (f *fakeStore) Delete(ctx context.Context, key string) error {
	if ft := f.enter(ctx, "delete", key); ft != nil {
		return ft.err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.objs, key)
	return nil
}

func (f *fakeStore) List(ctx context.Context, prefix string, fn func(cold.ObjectInfo) error) error {
	if ft := f.enter(ctx, "list", prefix); ft != nil {
		return ft.err
	}
	f.mu.Lock()
	var infos []cold.ObjectInfo
	for k, b := range f.objs {
		if strings.HasPrefix(k, prefix) {
			infos = append(infos, cold.ObjectInfo{Key: k, Size: int64(len(b))})
		}
	}
	f.mu.Unlock()
	slices.SortFunc(infos, func(a, b cold.ObjectInfo) int { return strings.Compare(a.Key, b.Key) })
	for _, in := range infos {
		if err := fn(in); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeStore) count(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

// putsOf counts Put calls for key.
func (f *fakeStore) putsOf(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, p := range f.puts {
		if p.key == key {
			n++
		}
	}
	return n
}

func (f *fakeStore) get(key string) ([]byte, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.objs[key]
	return b, ok
}

func (f *fakeStore) putLog() []putRec {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.puts)
}

// failKey returns a hook failing Puts of key with ft for the first n calls
// (n < 0: always).
func failKey(key string, n int, ft fault) func(context.Context, string, string) *fault {
	var mu sync.Mutex
	return func(_ context.Context, op, k string) *fault {
		mu.Lock()
		defer mu.Unlock()
		if op != "put" || k != key || n == 0 {
			return nil
		}
		n--
		return &ft
	}
}

var errDenied = errors.New("fake: access denied")

// obj builds a content-addressed object under prefix.
func obj(kind ObjectKind, prefix string, body []byte) Object {
	d := sha256.Sum256(body)
	return Object{Kind: kind, Key: prefix + hex.EncodeToString(d[:]), Body: body, Digest: d}
}

// pointer builds a pointer object naming a manifest key.
func pointer(key, manifestKey string) Object {
	b := []byte(manifestKey)
	return Object{Kind: KindPointer, Key: key, Body: b, Digest: sha256.Sum256(b)}
}

// mkJob builds a valid job: one pack, one manifest naming it, and one
// pointer per name in ptrs (each naming the manifest).
func mkJob(ns, name string, ptrs ...string) *Job {
	pack := obj(KindPack, "packs/"+ns+"/", []byte("pack "+ns+"/"+name))
	man := obj(KindManifest, "manifests/"+ns+"/", []byte("manifest -> "+pack.Key))
	j := &Job{Namespace: ns, Objects: []Object{pack, man}}
	for _, p := range ptrs {
		j.Objects = append(j.Objects, pointer(p, man.Key))
	}
	for _, o := range j.Objects {
		j.Bytes += int64(len(o.Body))
	}
	return j
}

func packKey(j *Job) string     { return j.Objects[0].Key }
func manifestKey(j *Job) string { return j.Objects[1].Key }

// newTestSink returns a sink over a fresh fake store. Cleanup closes it and
// checks the rule every test shares: the sink never calls Delete.
func newTestSink(t *testing.T, cfg Config) (*Sink, *fakeStore) {
	t.Helper()
	st := newFakeStore()
	s, err := New(st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if n := st.count("delete"); n != 0 {
			t.Errorf("store saw %d Delete calls; the sink must never delete", n)
		}
	})
	return s, st
}

func enqueue(t *testing.T, s *Sink, j *Job) JobID {
	t.Helper()
	id, err := s.Enqueue(j)
	if err != nil {
		t.Fatalf("Enqueue(%s): %v", packKey(j), err)
	}
	return id
}

// requirePublished checks that every object of j is in the store with its
// body (pointers only if want).
func requirePublished(t *testing.T, st *fakeStore, j *Job, pointers bool) {
	t.Helper()
	for _, o := range j.Objects {
		if o.Kind == KindPointer && !pointers {
			continue
		}
		b, ok := st.get(o.Key)
		if !ok {
			t.Fatalf("%v %q not in store", o.Kind, o.Key)
		}
		if string(b) != string(o.Body) {
			t.Fatalf("%v %q holds %q, want %q", o.Kind, o.Key, b, o.Body)
		}
	}
}

func requireNotWritten(t *testing.T, st *fakeStore, j *Job) {
	t.Helper()
	for _, o := range j.Objects {
		if n := st.putsOf(o.Key); n != 0 && o.Kind != KindPointer {
			t.Fatalf("%v %q: %d puts, want none", o.Kind, o.Key, n)
		}
	}
}

func wantReport(t *testing.T, got, want Report) {
	t.Helper()
	gotErr, wantErr := got.Err, want.Err
	got.Err, want.Err = nil, nil
	if got != want {
		t.Fatalf("report %+v, want %+v", got, want)
	}
	if (gotErr == nil) != (wantErr == nil) || (wantErr != nil && !errors.Is(gotErr, wantErr)) {
		t.Fatalf("report Err %v, want %v", gotErr, wantErr)
	}
}
