package lifecycle

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/cold/pack"
)

// fakeStore wraps cold.Mem with a fake clock for Modified, deletes that can
// be made to "succeed" without effect, and logs of deletes and read bytes.
type fakeStore struct {
	*cold.Mem
	mu        sync.Mutex
	now       time.Time
	mod       map[string]time.Time
	sticky    map[string]bool // Delete returns nil and leaves the object
	deletes   []string
	readBytes int64
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newFake() *fakeStore {
	return &fakeStore{Mem: cold.NewMem(), now: t0, mod: map[string]time.Time{}, sticky: map[string]bool{}}
}

func (f *fakeStore) clock() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeStore) setNow(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = t
}

func (f *fakeStore) opts() Options { return Options{Grace: time.Hour, Now: f.clock} }

func (f *fakeStore) Put(ctx context.Context, key string, body []byte, o cold.PutOptions) error {
	if err := f.Mem.Put(ctx, key, body, o); err != nil {
		return err
	}
	f.mu.Lock()
	f.mod[key] = f.now
	f.mu.Unlock()
	return nil
}

func (f *fakeStore) modified(key string) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mod[key]
}

func (f *fakeStore) Head(ctx context.Context, key string) (cold.ObjectInfo, error) {
	oi, err := f.Mem.Head(ctx, key)
	oi.Modified = f.modified(key)
	return oi, err
}

func (f *fakeStore) List(ctx context.Context, prefix string, fn func(cold.ObjectInfo) error) error {
	return f.Mem.List(ctx, prefix, func(oi cold.ObjectInfo) error {
		oi.Modified = f.modified(oi.Key)
		return fn(oi)
	})
}

func (f *fakeStore) RangeGet(ctx context.Context, key string, off int64, dst []byte) error {
	f.mu.Lock()
	f.readBytes += int64(len(dst))
	f.mu.Unlock()
	return f.Mem.RangeGet(ctx, key, off, dst)
}

func (f *fakeStore) Delete(ctx context.Context, key string) error {
	f.mu.Lock()
	f.deletes = append(f.deletes, key)
	sticky := f.sticky[key]
	f.mu.Unlock()
	if sticky {
		return nil
	}
	return f.Mem.Delete(ctx, key)
}

func (f *fakeStore) has(key string) bool {
	_, err := f.Mem.Head(context.Background(), key)
	return err == nil
}

func (f *fakeStore) put(t *testing.T, key string, body []byte) {
	t.Helper()
	if err := f.Put(context.Background(), key, body, cold.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

// publish writes a pack in publication order: object, manifest, pointers.
func (f *fakeStore) publish(t *testing.T, p *pack.Pack) {
	t.Helper()
	f.put(t, p.Object.Key, p.Object.Body)
	f.put(t, p.Manifest.Key, p.Manifest.Body)
	for _, o := range p.Pointers {
		f.put(t, o.Key, o.Body)
	}
}

func testNamespace(tenant string) identity.Namespace {
	return identity.Namespace{
		Tenant: tenant, TrustDomain: "prod",
		ModelID: "meta-llama/Llama-3.1-8B-Instruct", ConfigRevision: "0e9e39f",
		TokenizerRevision: "5f0b02c", RoPE: "llama3 theta=500000", DType: "bf16",
		Quantization: "none",
		Layout: identity.Layout{
			Format: "vllm-nhd", TPSize: 1, PPSize: 1, LayerCount: 32,
			KVHeads: 8, HeadDim: 128, BlockTokens: 4,
		},
	}
}

func digest(t testing.TB, ns identity.Namespace) identity.NamespaceDigest {
	t.Helper()
	d, err := ns.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// buildPack builds a pack of n chained blocks starting at token seed, with
// payload sizes size, size+1, ...
func buildPack(t testing.TB, ns identity.Namespace, n int, seed uint32, size int) *pack.Pack {
	t.Helper()
	d := digest(t, ns)
	bt := int(ns.Layout.BlockTokens)
	var parent identity.BlockKey
	blocks := make([]pack.Block, n)
	for i := range blocks {
		toks := make([]uint32, bt)
		for j := range toks {
			toks[j] = seed + uint32(i*bt+j)
		}
		id := identity.CacheIdentity{Namespace: ns, Parent: parent, Position: uint64(i * bt), Tokens: toks, ValidLength: uint32(bt)}
		pl := make([]byte, size+i)
		for j := range pl {
			pl[j] = byte(int(seed)*31 + i*17 + j*7)
		}
		blocks[i] = pack.Block{Identity: id, Payload: pl}
		parent = identity.KeyFor(d, parent, toks, uint32(bt))
	}
	p, err := pack.Build(ns, blocks)
	if err != nil {
		t.Fatal(err)
	}
	if err := pack.Verify(p); err != nil {
		t.Fatal(err)
	}
	return p
}

func kindOf(key string) string {
	switch {
	case strings.HasPrefix(key, "index/"):
		return "pointer"
	case strings.HasPrefix(key, "manifests/"):
		return "manifest"
	case strings.HasPrefix(key, "packs/"):
		return "pack"
	}
	return "other"
}
