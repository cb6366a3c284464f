package directory

import (
	"fmt"
	"slices"
	"testing"
)

// tenantBFills runs a fixed script of tenant b against d and returns what
// b saw (outcomes and notices, not fill ids, which depend on what others
// did): leads, a join, a finish that releases the waiter, a hit, a failed
// turn, and more leads, never more than 3 of b's fills live at once.
func tenantBFills(t *testing.T, d *Directory) []string {
	t.Helper()
	var out []string
	acq := func(key string, owner uint64, present bool) Result {
		res := d.Acquire(req("b", key, owner), func() bool { return present })
		out = append(out, fmt.Sprintf("acquire %s owner %d: %v", key, owner, res.Outcome))
		return res
	}
	l1 := acq("b1", 10, false)
	w := acq("b1", 11, false)
	l2 := acq("b2", 10, false)
	acq("b3", 10, true)
	if l1.Outcome == Lead {
		out = append(out, fmt.Sprintf("finish b1: %s", errName(d.Finish(l1.Token))))
	}
	if w.Waiter != nil {
		out = append(out, fmt.Sprintf("b1 waiter: %v", got(t, w.Waiter).Kind))
	}
	if l2.Outcome == Lead {
		out = append(out, fmt.Sprintf("fail b2: %s", errName(d.Fail(l2.Token))))
	}
	var toks []Token
	for _, k := range []string{"b4", "b5", "b6"} {
		if res := acq(k, 12, false); res.Outcome == Lead {
			toks = append(toks, res.Token)
		}
	}
	for _, tok := range toks {
		out = append(out, fmt.Sprintf("finish: %s", errName(d.Finish(tok))))
	}
	acq("b2", 13, false)
	return out
}

// TestTenantAtItsFillCapDoesNotChangeAnotherTenantsResults: one tenant at
// its fill cap does not change another's results, in the directory: tenant a starts fills until it is denied
// (without a per-tenant cap it took every fill slot, and another tenant's
// ACQUIREs, and its cold-tier refills, were denied). Tenant b's script
// must see exactly what it sees in a directory of its own.
func TestTenantAtItsFillCapDoesNotChangeAnotherTenantsResults(t *testing.T) {
	cfg := Config{MaxFills: 8} // TenantFills defaults to 4
	want := tenantBFills(t, newDir(t, cfg))

	d := newDir(t, cfg)
	led := 0
	for i := range 100 {
		if d.Acquire(req("a", fmt.Sprint("a", i), 1), nil).Outcome != Lead {
			break
		}
		led++
	}
	if led != 4 {
		t.Errorf("tenant a leads %d fills, want its share 4 of 8", led)
	}
	if got := tenantBFills(t, d); !slices.Equal(got, want) {
		t.Errorf("tenant b's results changed while tenant a held its share of the fills:\n have %q\n want %q", got, want)
	}
	st := d.Stats()
	if st.TenantFills["a"] != 4 || st.DeniedTenantFills != 1 || st.DeniedFills != 0 {
		t.Fatalf("stats %+v", st)
	}
	// When a's fills end, a may start new ones.
	d.LeaveOwner(1)
	if res := d.Acquire(req("a", "again", 1), nil); res.Outcome != Lead {
		t.Fatalf("a after its fills ended: %v", res.Outcome)
	}
}

// TestSetTenantFills: a new cap applies to fills started afterwards.
func TestSetTenantFills(t *testing.T) {
	d := newDir(t, Config{MaxFills: 8, TenantFills: 1})
	lead(t, d, req("a", "k1", 1))
	if res := d.Acquire(req("a", "k2", 1), nil); res.Outcome != Denied {
		t.Fatalf("past the cap: %v", res.Outcome)
	}
	wantErr(t, d.SetTenantFills(-1), ErrInvalidConfig)
	wantErr(t, d.SetTenantFills(2), nil)
	lead(t, d, req("a", "k2", 1))
	if res := d.Acquire(req("a", "k3", 1), nil); res.Outcome != Denied {
		t.Fatalf("past the new cap: %v", res.Outcome)
	}
	wantErr(t, d.SetTenantFills(0), nil) // the default: 4
	lead(t, d, req("a", "k3", 1))
}
