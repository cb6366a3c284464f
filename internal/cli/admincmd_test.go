package cli

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/admin"
	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/cold/pack"
	"github.com/gpucache/gpucache/internal/testfix"
)

func adminTestPublish(t *testing.T, st cold.Store, tenant string, n int) {
	t.Helper()
	ns := testfix.RawNamespace(tenant, "m")
	blocks := make([]pack.Block, n)
	for i := range blocks {
		blocks[i] = pack.Block{Identity: identity.CacheIdentity{Namespace: ns, Opaque: fmt.Appendf(nil, "k%d", i)}, Payload: []byte("v")}
	}
	p, err := pack.Build(ns, blocks)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range append([]pack.Object{p.Object, p.Manifest}, p.Pointers...) {
		if err := st.Put(context.Background(), o.Key, o.Body, cold.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// gpucache admin against an admin handler with the lifecycle endpoints:
// exit codes, progress on stderr, result on stdout, the bearer token sent.
func TestAdminCommand(t *testing.T) {
	st := cold.NewMem()
	adminTestPublish(t, st, "a", 3)
	adminTestPublish(t, st, "b", 2)
	h := admin.New(func() []wire.StatEntry { return nil })
	h.SetAuthorizer(func(r *http.Request) (string, error) {
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			return "", fmt.Errorf("%w: bad token", admin.ErrForbidden)
		}
		return "ops", nil
	})
	h.RegisterLifecycle(&admin.Lifecycle{Store: st})
	srv := httptest.NewServer(h)
	defer srv.Close()
	tok := filepath.Join(t.TempDir(), "ops.secret")
	if err := os.WriteFile(tok, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := Main(context.Background(), append([]string{"admin"}, args...), Stdio{Out: &out, Err: &errb})
		return code, out.String(), errb.String()
	}
	if code, _, e := run("purge", "--admin", srv.URL, "--token-file", tok); code != exitUsage || !strings.Contains(e, "--tenant") {
		t.Fatalf("purge without --tenant: %d %q", code, e)
	}
	if code, _, e := run("frobnicate"); code != exitUsage {
		t.Fatalf("unknown subcommand: %d %q", code, e)
	}
	if code, _, e := run("purge", "--tenant", "a", "--admin", srv.URL); code != exitRefused || !strings.Contains(e, "refused: admin /admin/purge (HTTP 403)") {
		t.Fatalf("no token: %d %q", code, e)
	}
	code, out, e := run("inventory", "--admin", srv.URL, "--token-file", tok)
	if code != exitOK || strings.Count(out, "tenant=") != 2 || !strings.Contains(e, "namespace") {
		t.Fatalf("inventory: %d out %q err %q", code, out, e)
	}
	code, out, e = run("purge", "--tenant", "a", "--admin", srv.URL, "--token-file", tok)
	if code != exitOK || !strings.Contains(out, "complete: true") || !strings.Contains(out, "pointers_deleted: 3") {
		t.Fatalf("purge: %d out %q err %q", code, out, e)
	}
	code, out, _ = run("inventory", "--admin", srv.URL, "--token-file", tok, "--json")
	if code != exitOK || strings.Contains(out, `"tenant":"a"`) || !strings.Contains(out, `"tenant":"b"`) {
		t.Fatalf("inventory after purge: %d %q", code, out)
	}
	if code, _, e := run("backfill", "--budget", "100", "--admin", srv.URL, "--token-file", tok); code != exitFailed || !strings.Contains(e, "501") {
		t.Fatalf("backfill without a sink: %d %q", code, e)
	}
	srv.Close()
	if code, _, e := run("inventory", "--admin", srv.URL, "--token-file", tok); code != exitUnavailable || !strings.Contains(e, "unavailable") {
		t.Fatalf("closed listener: %d %q", code, e)
	}
}
