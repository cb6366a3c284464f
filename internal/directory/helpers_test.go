package directory

import (
	"crypto/sha256"
	"errors"
	"testing"

	"go.uber.org/goleak"

	"github.com/gpucache/gpucache/api/identity"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func blockKey(name string) identity.BlockKey {
	return identity.BlockKey(sha256.Sum256([]byte("key/" + name)))
}

func nsDigest(name string) identity.NamespaceDigest {
	return identity.NamespaceDigest(sha256.Sum256([]byte("ns/" + name)))
}

func req(tenant, key string, owner uint64) Request {
	return Request{Key: blockKey(key), Namespace: nsDigest("ns0"), Tenant: tenant, Owner: owner}
}

func newDir(t testing.TB, cfg Config) *Directory {
	t.Helper()
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

func lead(t testing.TB, d *Directory, r Request) Token {
	t.Helper()
	res := d.Acquire(r, nil)
	if res.Outcome != Lead {
		t.Fatalf("Acquire(%s): outcome %v, want Lead", r.Tenant, res.Outcome)
	}
	return res.Token
}

func join(t testing.TB, d *Directory, r Request) *Waiter {
	t.Helper()
	res := d.Acquire(r, nil)
	if res.Outcome != Joined || res.Waiter == nil {
		t.Fatalf("Acquire(%s): outcome %v, want Joined", r.Tenant, res.Outcome)
	}
	return res.Waiter
}

// got returns the waiter's pending notice, failing if there is none.
func got(t testing.TB, w *Waiter) Notice {
	t.Helper()
	select {
	case n := <-w.C():
		return n
	default:
		t.Fatalf("waiter of fill %d has no notice", w.Fill())
		return Notice{}
	}
}

func wantNotice(t testing.TB, w *Waiter, kind NoticeKind) Notice {
	t.Helper()
	n := got(t, w)
	if n.Kind != kind {
		t.Fatalf("waiter of fill %d: notice %v, want %v", w.Fill(), n.Kind, kind)
	}
	if kind != Promoted && n.Token != (Token{}) {
		t.Fatalf("%v notice carries a token %+v", kind, n.Token)
	}
	return n
}

func wantNoNotice(t testing.TB, w *Waiter) {
	t.Helper()
	select {
	case n := <-w.C():
		t.Fatalf("waiter of fill %d: unexpected notice %+v", w.Fill(), n)
	default:
	}
}

func wantErr(t testing.TB, err, want error) {
	t.Helper()
	if !errors.Is(err, want) || (want == nil && err != nil) {
		t.Fatalf("error %v, want %v", err, want)
	}
}

// wantCredits checks the credits in use per tenant and that they equal the
// live waiters.
func wantCredits(t testing.TB, d *Directory, want map[string]int) {
	t.Helper()
	st := d.Stats()
	total := 0
	for tenant, n := range want {
		if n != 0 {
			total += n
		}
		if st.Credits[tenant] != n {
			t.Fatalf("credits of %q: %d, want %d (all: %v)", tenant, st.Credits[tenant], n, st.Credits)
		}
	}
	if st.CreditsInUse != total || len(st.Credits) > len(want) {
		t.Fatalf("credits in use %d %v, want %d %v", st.CreditsInUse, st.Credits, total, want)
	}
	if st.Waiters != st.CreditsInUse {
		t.Fatalf("live waiters %d != credits in use %d", st.Waiters, st.CreditsInUse)
	}
}

var sentinels = []struct {
	err  error
	name string
}{
	{ErrStaleEpoch, "ErrStaleEpoch"},
	{ErrNotLeader, "ErrNotLeader"},
	{ErrEpochOverflow, "ErrEpochOverflow"},
	{ErrWrongShard, "ErrWrongShard"},
	{ErrClosed, "ErrClosed"},
	{ErrEpochRegress, "ErrEpochRegress"},
	{ErrInvalidConfig, "ErrInvalidConfig"},
}

func errName(err error) string {
	if err == nil {
		return "ok"
	}
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			return "error: " + s.name
		}
	}
	return "error: " + err.Error()
}
