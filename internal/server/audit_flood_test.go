package server

import (
	"testing"

	"github.com/gpucache/gpucache/internal/security/audit"
)

// TestRESPAuthFloodAuditBounded: AUTH guessing over many RESP connections
// from one address is counted in full (STAT resp_auth_failures and
// audit_auth_failures) but writes only the audit throttle's lines for
// that address, and one summary with the exact count not written.
func TestRESPAuthFloodAuditBounded(t *testing.T) {
	const conns = 40
	f := startBad(t)
	wrong := "not-the-secret-0123456789"
	for range conns {
		c := dialRESP(t, f.addr)
		for range maxRESPAuthFailures {
			c.do("AUTH", "acme", wrong)
		}
		c.expectClosed()
	}
	total := uint64(conns * maxRESPAuthFailures)
	lines := uint64(audit.DefaultThrottle.Lines)
	if n := f.stat(t, "resp_auth_failures"); n != total {
		t.Errorf("resp_auth_failures %d, want %d", n, total)
	}
	if n := f.stat(t, "audit_auth_failures"); n != total {
		t.Errorf("audit_auth_failures %d, want %d", n, total)
	}
	if n := f.stat(t, "audit_auth_failures_suppressed"); n != total-lines {
		t.Errorf("audit_auth_failures_suppressed %d, want %d", n, total-lines)
	}
	if n := uint64(len(f.audit.events(t, audit.EventAuthFailure))); n != lines {
		t.Errorf("%d auth_failure lines, want %d", n, lines)
	}
	f.srv.guard.Audit().Close() // as the daemon does at shutdown: the open interval's summary
	sums := f.audit.events(t, audit.EventSuppressed)
	if len(sums) != 1 || sums[0]["source"] != "127.0.0.1" || uint64(sums[0]["count"].(float64)) != total-lines {
		t.Fatalf("summaries %v, want one for 127.0.0.1 with %d", sums, total-lines)
	}
	f.healthy(t)
}
