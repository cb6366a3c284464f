package admin

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/cold/pack"
	"github.com/gpucache/gpucache/internal/cold/s3store/s3test"
	"github.com/gpucache/gpucache/internal/testfix"
)

// publishOpaque writes one pack of n opaque-key blocks of ns, as a sink
// would: pack, manifest, pointers.
func publishOpaque(t *testing.T, st cold.Store, ns identity.Namespace, n int, tag string) {
	t.Helper()
	blocks := make([]pack.Block, n)
	for i := range blocks {
		blocks[i] = pack.Block{
			Identity: identity.CacheIdentity{Namespace: ns, Opaque: fmt.Appendf(nil, "%s-%d", tag, i)},
			Payload:  fmt.Appendf(nil, "payload %s %d", tag, i),
		}
	}
	p, err := pack.Build(ns, blocks)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, o := range append([]pack.Object{p.Object, p.Manifest}, p.Pointers...) {
		if err := st.Put(ctx, o.Key, o.Body, cold.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// objectsOf counts the store's objects under ns's prefixes.
func objectsOf(t *testing.T, st cold.Store, ns identity.Namespace) int {
	t.Helper()
	d, err := ns.Digest()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range pack.NamespacePrefixes(d) {
		if err := st.List(context.Background(), p, func(cold.ObjectInfo) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

func countPrefix(t *testing.T, st cold.Store, prefix string) int {
	t.Helper()
	n := 0
	if err := st.List(context.Background(), prefix, func(cold.ObjectInfo) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

// twoTenants publishes tenant a's and tenant b's blocks, two models each,
// and returns the namespaces.
func twoTenants(t *testing.T, st cold.Store) (a, b []identity.Namespace) {
	for _, m := range []string{"m1", "m2"} {
		na, nb := testfix.RawNamespace("a", m), testfix.RawNamespace("b", m)
		publishOpaque(t, st, na, 3, "a"+m)
		publishOpaque(t, st, na, 2, "a2"+m)
		publishOpaque(t, st, nb, 4, "b"+m)
		a, b = append(a, na), append(b, nb)
	}
	return a, b
}

type auditLog struct {
	mu     sync.Mutex
	events []string
}

func (a *auditLog) record(actor, action string, _ ...slog.Attr) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.events = append(a.events, actor+":"+action)
}

func (a *auditLog) has(ev string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, e := range a.events {
		if e == ev {
			return true
		}
	}
	return false
}

func nop(string, ...any) {}

// checkPurged asserts tenant a has no objects left, b has all its own, and
// no journal entry remains.
func checkPurged(t *testing.T, st cold.Store, a, b []identity.Namespace, bBefore []int) {
	t.Helper()
	for _, ns := range a {
		if n := objectsOf(t, st, ns); n != 0 {
			t.Errorf("tenant a, model %s: %d objects left", ns.ModelID, n)
		}
	}
	for i, ns := range b {
		if n := objectsOf(t, st, ns); n != bBefore[i] {
			t.Errorf("tenant b, model %s: %d objects, want %d", ns.ModelID, n, bBefore[i])
		}
	}
	if n := countPrefix(t, st, JournalPrefix); n != 0 {
		t.Errorf("%d purge journal entries left", n)
	}
}

func testPurgeTenant(t *testing.T, st cold.Store) {
	a, b := twoTenants(t, st)
	var bBefore []int
	for _, ns := range b {
		n := objectsOf(t, st, ns)
		if n != 1+1+4 {
			t.Fatalf("tenant b before: %d objects", n)
		}
		bBefore = append(bBefore, n)
	}
	au := &auditLog{}
	l := &Lifecycle{Store: st, Audit: au.record}
	sum, err := l.PurgeTenant(context.Background(), "ops", "a", nop)
	if err != nil {
		t.Fatal(err)
	}
	// Two models, two packs each: 4 packs, 4 manifests, 10 pointers.
	if !sum.Complete || sum.Namespaces != 2 || sum.Packs != 4 || sum.Manifests != 4 || sum.Pointers != 10 {
		t.Fatalf("summary %+v", sum)
	}
	checkPurged(t, st, a, b, bBefore)
	if !au.has("ops:purge_start") || !au.has("ops:purge_done") {
		t.Fatalf("audit %v", au.events)
	}
	// A rerun finds nothing and succeeds.
	if sum, err := l.PurgeTenant(context.Background(), "ops", "a", nop); err != nil || sum.Namespaces != 0 {
		t.Fatalf("rerun: %+v %v", sum, err)
	}
}

func TestPurgeTenantMem(t *testing.T) { testPurgeTenant(t, cold.NewMem()) }

// A purge that dies after a namespace's manifests are gone leaves packs
// that no longer name their tenant; the journal lets the rerun finish.
func TestPurgeInterruptedRerunFinishes(t *testing.T) {
	st := cold.NewMem()
	a, b := twoTenants(t, st)
	bBefore := []int{objectsOf(t, st, b[0]), objectsOf(t, st, b[1])}
	errCrash := errors.New("store went away")
	st.SetFault(func(_ context.Context, op, key string) error {
		if op == cold.OpDelete && strings.HasPrefix(key, "packs/") {
			return errCrash
		}
		return nil
	})
	l := &Lifecycle{Store: st}
	if sum, err := l.PurgeTenant(context.Background(), "ops", "a", nop); err == nil || sum.Complete {
		t.Fatalf("interrupted purge: %+v %v", sum, err)
	}
	if n := countPrefix(t, st, "manifests/"); n != 2 { // b's only
		t.Fatalf("%d manifests after the interrupted purge, want b's 2", n)
	}
	if n := objectsOf(t, st, a[0]); n == 0 {
		t.Fatal("the fault left nothing of tenant a: the test proves nothing")
	}
	st.SetFault(nil)
	sum, err := l.PurgeTenant(context.Background(), "ops", "a", nop)
	if err != nil || !sum.Complete || sum.Namespaces != 2 || sum.Packs != 4 {
		t.Fatalf("rerun: %+v %v", sum, err)
	}
	checkPurged(t, st, a, b, bBefore)
}

// A cancelled purge (the admin client went away) stops, and the rerun
// finishes it.
func TestPurgeCancelledRerunFinishes(t *testing.T) {
	st := cold.NewMem()
	a, b := twoTenants(t, st)
	bBefore := []int{objectsOf(t, st, b[0]), objectsOf(t, st, b[1])}
	ctx, cancel := context.WithCancel(context.Background())
	deletes := 0
	st.SetFault(func(_ context.Context, op, _ string) error {
		if op == cold.OpDelete {
			if deletes++; deletes == 7 {
				cancel()
			}
		}
		return nil
	})
	l := &Lifecycle{Store: st}
	if _, err := l.PurgeTenant(ctx, "ops", "a", nop); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled purge: %v", err)
	}
	st.SetFault(nil)
	if _, err := l.PurgeTenant(context.Background(), "ops", "a", nop); err != nil {
		t.Fatal(err)
	}
	checkPurged(t, st, a, b, bBefore)
}

func TestInventoryByTenant(t *testing.T) {
	st := cold.NewMem()
	twoTenants(t, st)
	l := &Lifecycle{Store: st}
	all, err := l.Inventory(context.Background(), "ops", "", nop)
	if err != nil || len(all) != 4 {
		t.Fatalf("inventory: %d namespaces, %v", len(all), err)
	}
	only, err := l.Inventory(context.Background(), "ops", "b", nop)
	if err != nil || len(only) != 2 {
		t.Fatalf("inventory b: %+v %v", only, err)
	}
	for _, inv := range only {
		if inv.Tenant != "b" || inv.Packs.Objects != 1 || inv.Manifests.Objects != 1 || inv.Pointers.Objects != 4 {
			t.Fatalf("inventory b: %+v", inv)
		}
	}
}

// ndjson reads an NDJSON answer into its lines.
func ndjson(t *testing.T, body string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

func TestLifecycleEndpoints(t *testing.T) {
	st := cold.NewMem()
	a, _ := twoTenants(t, st)
	au := &auditLog{}
	l := &Lifecycle{Store: st, Audit: au.record}
	h := New(func() []wire.StatEntry { return nil })
	h.SetAuthorizer(func(r *http.Request) (string, error) {
		switch r.Header.Get("Authorization") {
		case "Bearer admin":
			return "root", nil
		case "Bearer user":
			return "", ErrForbidden
		}
		return "", errors.New("no credential")
	})
	h.RegisterLifecycle(l)
	do := func(method, path, token string) (int, string) {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(method, path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	if code, _ := do("POST", "/admin/purge?tenant=a", ""); code != http.StatusUnauthorized {
		t.Fatalf("no token: %d", code)
	}
	if code, _ := do("POST", "/admin/purge?tenant=a", "user"); code != http.StatusForbidden {
		t.Fatalf("non-admin: %d", code)
	}
	if code, _ := do("GET", "/admin/purge?tenant=a", "admin"); code != http.StatusMethodNotAllowed {
		t.Fatalf("GET purge: %d", code)
	}
	if code, body := do("POST", "/admin/purge", "admin"); code != http.StatusBadRequest {
		t.Fatalf("purge without tenant: %d %q", code, body)
	}
	// Busy: another operation holds the node's lifecycle lock.
	l.busy.Lock()
	if code, body := do("POST", "/admin/purge?tenant=a", "admin"); code != http.StatusConflict {
		t.Fatalf("busy: %d %q", code, body)
	}
	l.busy.Unlock()
	code, body := do("GET", "/admin/inventory?tenant=a", "admin")
	lines := ndjson(t, body)
	if code != 200 || len(lines) != 3 || lines[2]["result"] == nil {
		t.Fatalf("inventory: %d %q", code, body)
	}
	code, body = do("POST", "/admin/purge?tenant=a", "admin")
	lines = ndjson(t, body)
	if code != 200 || len(lines) < 2 || lines[0]["progress"] == nil {
		t.Fatalf("purge: %d %q", code, body)
	}
	res, _ := lines[len(lines)-1]["result"].(map[string]any)
	if res == nil || res["complete"] != true || res["packs_deleted"] != float64(4) {
		t.Fatalf("purge result: %q", body)
	}
	for _, ns := range a {
		if n := objectsOf(t, st, ns); n != 0 {
			t.Fatalf("%d objects of a left", n)
		}
	}
	if !au.has("root:purge_done") || !au.has("root:inventory") {
		t.Fatalf("audit %v", au.events)
	}
	if code, _ := do("POST", "/admin/backfill?budget=1000", "admin"); code != http.StatusNotImplemented {
		t.Fatalf("backfill without a sink: %d", code)
	}
	if code, _ := do("POST", "/admin/expire?older_than=-1h", "admin"); code != http.StatusBadRequest {
		t.Fatalf("expire with a negative age: %d", code)
	}
}

func TestBackfillDeliversWithinBudget(t *testing.T) {
	st := cold.NewMem()
	twoTenants(t, st)
	var got []string
	l := &Lifecycle{Store: st, Deliver: func(_ context.Context, _ identity.NamespaceDigest, r pack.Range, p []byte) (bool, error) {
		if r.Identity.Tenant != "b" {
			return false, fmt.Errorf("delivered tenant %q's block", r.Identity.Tenant)
		}
		got = append(got, string(p))
		return true, nil
	}}
	sum, err := l.Backfill(context.Background(), "ops", "b", 1<<20, nop)
	if err != nil || sum.Blocks != 8 || len(got) != 8 || sum.Namespaces != 2 || sum.Refused != 0 {
		t.Fatalf("backfill: %+v %v (%d delivered)", sum, err, len(got))
	}
	got = nil
	sum, err = l.Backfill(context.Background(), "ops", "b", 1, nop)
	if err != nil || sum.BytesRead > 1 || len(got) != 0 || !sum.Exhausted {
		t.Fatalf("backfill, 1 byte budget: %+v %v", sum, err)
	}
}

// The same purge on a real S3 server (versitygw): none of tenant a's
// objects remain and every one of b's does, counted by listing the bucket.
func TestPurgeTenantS3(t *testing.T) {
	testPurgeTenant(t, s3test.NewStore(t, "lc/"))
}
