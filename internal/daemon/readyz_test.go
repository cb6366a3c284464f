package daemon

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpucache/gpucache/internal/control/etcdmember/etcdtest"
	"github.com/gpucache/gpucache/internal/degrade"
	"github.com/gpucache/gpucache/internal/server"
)

// modeStep is one control-mode transition the health loop reported; the
// loop waits in OnControlMode until the test calls resume, so the mode
// stays what it is while the test looks at /readyz.
type modeStep struct {
	mode   server.ControlMode
	resume chan struct{}
}

// TestReadyzFollowsControlMode: a clustered node whose etcd becomes
// unreachable (the control_plane_loss failpoint) answers /readyz 200
// "ready-read-only: <reason>" while it serves reads, 503 to a writer's
// probe (?write=1); once control_grace has passed (the health loop's next
// transition, unknown) it answers 503 to every probe; when etcd answers
// again it is "ready". The health loop is held at each transition
// (OnControlMode blocks), so no sleep or time budget decides the outcome.
func TestReadyzFollowsControlMode(t *testing.T) {
	etcd := etcdtest.Start(t)
	c := clusterConfig(etcd.Endpoint, "solo", "rack-a")
	c.ControlProbe, c.ControlGrace = 100*time.Millisecond, 500*time.Millisecond
	c.DrainTimeout = 2 * time.Second
	faults := &degrade.Registry{}
	steps := make(chan modeStep)
	stop := make(chan struct{})
	onMode := func(m server.ControlMode) {
		s := modeStep{m, make(chan struct{})}
		select {
		case steps <- s:
		case <-stop:
			return
		}
		select {
		case <-s.resume:
		case <-stop:
		}
	}
	a, _ := startNode(t, c, Options{Faults: faults, OnControlMode: onMode})
	t.Cleanup(func() { close(stop) }) // runs before the node's Close: the loop is never left waiting
	readyz := "http://" + a.Admin + "/readyz"
	if code, body := httpGet(t, readyz); code != http.StatusOK || body != "ready\n" {
		t.Fatalf("live: %d %q", code, body)
	}
	// waitFor returns the first transition to want, letting the health
	// loop go on past every other one (a loaded machine may flip before
	// the failpoint is armed).
	waitFor := func(want server.ControlMode) modeStep {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for {
			select {
			case s := <-steps:
				if s.mode == want {
					return s
				}
				close(s.resume)
			case <-deadline:
				t.Fatalf("mode %s never came", want)
			}
		}
	}

	disarm := faults.Arm(degrade.ControlPlaneLoss, degrade.Fail)
	s := waitFor(server.ControlReadOnly)
	code, body := httpGet(t, readyz)
	if code != http.StatusOK || !strings.HasPrefix(body, "ready-read-only: etcd unreachable since ") || !strings.Contains(body, "injected fault") {
		t.Errorf("read-only: %d %q, want 200 ready-read-only with the reason", code, body)
	}
	code, body = httpGet(t, readyz+"?write=1")
	if code != http.StatusServiceUnavailable || !strings.HasPrefix(body, "not ready for writes: read-only (etcd unreachable since ") {
		t.Errorf("read-only, ?write=1: %d %q, want 503 not ready for writes", code, body)
	}
	close(s.resume)

	s = waitFor(server.ControlUnknown) // past control_grace
	const unknown = "not ready: control plane unreachable for longer than control_grace\n"
	for _, u := range []string{readyz, readyz + "?write=1"} {
		if code, body := httpGet(t, u); code != http.StatusServiceUnavailable || body != unknown {
			t.Errorf("unknown: GET %s = %d %q, want 503 %q", u, code, body, unknown)
		}
	}
	disarm()
	close(s.resume)

	s = waitFor(server.ControlLive)
	for _, u := range []string{readyz, readyz + "?write=1"} {
		if code, body := httpGet(t, u); code != http.StatusOK || body != "ready\n" {
			t.Errorf("live again: GET %s = %d %q", u, code, body)
		}
	}
	close(s.resume)
}
