// Package membershiptest is the behaviour suite every control.Membership
// implementation passes: Static, Memory and etcdmember.
//
// A test calls Run with a constructor that returns a fresh membership
// seeded with the given members. The suite checks what the Membership
// contract promises (Current, Watch's first view, drop-to-latest delivery,
// cancellation, Close) and, where the implementation can change its member
// set, that every change advances the epoch by exactly one and that every
// watcher reaches the committed view. Implementations publish
// asynchronously (etcd) or synchronously (Memory); the suite waits on a
// watch channel for the epoch it expects, so it holds for both.
package membershiptest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gpucache/gpucache/internal/control"
)

// waitTimeout bounds every wait on a watch channel. It is a failure bound
// only (a hung implementation fails instead of hanging the run), never a
// synchronization delay; generous for -race on a loaded machine.
const waitTimeout = 30 * time.Second

// Changer changes the member set of a mutable membership. Each method
// returns once the change is committed (or refused); the suite then waits
// for the observed membership to publish it.
type Changer interface {
	// Join adds m. An existing ID is control.ErrDuplicateMember; an
	// invalid member is control.ErrInvalidMember.
	Join(t *testing.T, m control.Member) error
	// Leave removes a member that Join added.
	Leave(t *testing.T, id control.MemberID) error
	// Drain marks id draining; an unknown id is control.ErrUnknownMember.
	Drain(t *testing.T, id control.MemberID) error
}

// Cluster is one implementation under test.
type Cluster struct {
	// M is the membership whose Current, Watch and Close the suite checks.
	// The suite closes it; the constructor registers any other cleanup.
	M control.Membership
	// Changes is nil for a fixed membership (Static): the suite then skips
	// the change tests.
	Changes Changer
}

// Member returns a valid member named id in fault domain domain.
func Member(id, domain string) control.Member {
	return control.Member{
		ID:            control.MemberID(id),
		Addr:          id + ":7400",
		FaultDomain:   domain,
		ProtoVersion:  1,
		CapacityBytes: 1 << 30,
	}
}

// Run runs the suite. newCluster must return a membership whose view holds
// exactly members (at least one) at some epoch >= 1.
func Run(t *testing.T, newCluster func(t *testing.T, members ...control.Member) Cluster) {
	t.Helper()
	tests := []struct {
		name    string
		mutable bool
		fn      func(t *testing.T, c Cluster, seed []control.Member)
	}{
		{"Current", false, testCurrent},
		{"WatchStartsWithCurrent", false, testWatchStartsWithCurrent},
		{"WatchCancel", false, testWatchCancel},
		{"Close", false, testClose},
		{"Join", true, testJoin},
		{"JoinRejects", true, testJoinRejects},
		{"Drain", true, testDrain},
		{"Leave", true, testLeave},
		{"WatchDropToLatest", true, testWatchDropToLatest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			seed := []control.Member{Member("c", "r2"), Member("a", "r1"), Member("b", "r1")}
			c := newCluster(t, seed...)
			t.Cleanup(func() { c.M.Close() })
			if tc.mutable && c.Changes == nil {
				t.Skip("fixed membership")
			}
			tc.fn(t, c, seed)
		})
	}
}

func ids(v control.View) []control.MemberID {
	var out []control.MemberID
	for _, m := range v.Members() {
		out = append(out, m.ID)
	}
	return out
}

func sameView(t *testing.T, what string, got, want control.View) {
	t.Helper()
	if got.Epoch() != want.Epoch() || fmt.Sprint(got.Members()) != fmt.Sprint(want.Members()) {
		t.Fatalf("%s: epoch %d %v, want epoch %d %v", what, got.Epoch(), got.Members(), want.Epoch(), want.Members())
	}
}

// await reads w until a view reaches epoch want; that view must be at
// exactly want (no change was skipped or doubled) and is returned. Every
// view read on the way must have a strictly greater epoch than the last.
func await(t *testing.T, w <-chan control.View, want uint64) control.View {
	t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for {
		select {
		case v, open := <-w:
			if !open {
				t.Fatalf("watch closed before epoch %d", want)
			}
			if v.Epoch() < want {
				continue
			}
			if v.Epoch() != want {
				t.Fatalf("watch jumped to epoch %d, want %d", v.Epoch(), want)
			}
			return v
		case <-deadline.C:
			t.Fatalf("no view at epoch %d within %v", want, waitTimeout)
		}
	}
}

// awaitClosed reads w until it is closed, failing on a view newer than
// last (a closed or cancelled watch may still hold the last view).
func awaitClosed(t *testing.T, w <-chan control.View, last uint64) {
	t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for {
		select {
		case v, open := <-w:
			if !open {
				return
			}
			if v.Epoch() > last {
				t.Fatalf("closed watch delivered epoch %d after %d", v.Epoch(), last)
			}
		case <-deadline.C:
			t.Fatal("watch not closed")
		}
	}
}

func testCurrent(t *testing.T, c Cluster, seed []control.Member) {
	v := c.M.Current()
	if v.Epoch() < 1 {
		t.Fatalf("epoch %d, want >= 1", v.Epoch())
	}
	want := slices.Clone(seed)
	slices.SortFunc(want, func(a, b control.Member) int {
		if a.ID < b.ID {
			return -1
		}
		if a.ID > b.ID {
			return 1
		}
		return 0
	})
	if got := v.Members(); !slices.Equal(got, want) {
		t.Fatalf("members %v, want %v (sorted by id)", got, want)
	}
	if v.Len() != len(seed) || !slices.Equal(v.Domains(), []string{"r1", "r2"}) {
		t.Fatalf("len %d domains %v", v.Len(), v.Domains())
	}
}

func testWatchStartsWithCurrent(t *testing.T, c Cluster, _ []control.Member) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cur := c.M.Current()
	w := c.M.Watch(ctx)
	sameView(t, "first watched view", await(t, w, cur.Epoch()), cur)
	// A second watcher gets its own first view.
	w2 := c.M.Watch(ctx)
	sameView(t, "second watcher's first view", await(t, w2, cur.Epoch()), cur)
}

func testWatchCancel(t *testing.T, c Cluster, _ []control.Member) {
	ctx, cancel := context.WithCancel(context.Background())
	w := c.M.Watch(ctx)
	e := c.M.Current().Epoch()
	await(t, w, e)
	cancel()
	awaitClosed(t, w, e)
	if _, ok := <-c.M.Watch(ctx); ok {
		t.Fatal("Watch with a done ctx delivered a view")
	}
	// Other watchers are unaffected by one watcher's cancel.
	w2 := c.M.Watch(context.Background())
	await(t, w2, e)
}

func testClose(t *testing.T, c Cluster, _ []control.Member) {
	before := c.M.Current()
	w := c.M.Watch(context.Background())
	await(t, w, before.Epoch())
	unread := c.M.Watch(context.Background()) // holds its first view
	if err := c.M.Close(); err != nil {
		t.Fatal(err)
	}
	awaitClosed(t, w, before.Epoch())
	awaitClosed(t, unread, before.Epoch())
	if _, ok := <-c.M.Watch(context.Background()); ok {
		t.Fatal("Watch after Close delivered a view")
	}
	if err := c.M.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
	sameView(t, "Current after Close", c.M.Current(), before)
}

// watch opens a watch on c.M for the rest of the test and reads its first
// view; it returns the channel and the current epoch.
func watch(t *testing.T, c Cluster) (<-chan control.View, uint64) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	e := c.M.Current().Epoch()
	w := c.M.Watch(ctx)
	await(t, w, e)
	return w, e
}

func testJoin(t *testing.T, c Cluster, seed []control.Member) {
	w, e := watch(t, c)
	d := Member("d", "r3")
	if err := c.Changes.Join(t, d); err != nil {
		t.Fatal(err)
	}
	v := await(t, w, e+1)
	if got, ok := v.Member("d"); !ok || got != d || v.Len() != len(seed)+1 {
		t.Fatalf("after join: members %v", ids(v))
	}
	sameView(t, "Current after join", c.M.Current(), v)
}

func testJoinRejects(t *testing.T, c Cluster, _ []control.Member) {
	w, e := watch(t, c)
	if err := c.Changes.Join(t, Member("a", "r9")); !errors.Is(err, control.ErrDuplicateMember) {
		t.Fatalf("duplicate join: %v", err)
	}
	if err := c.Changes.Join(t, control.Member{ID: "bad"}); !errors.Is(err, control.ErrInvalidMember) {
		t.Fatalf("invalid join: %v", err)
	}
	if err := c.Changes.Drain(t, "nobody"); !errors.Is(err, control.ErrUnknownMember) {
		t.Fatalf("unknown drain: %v", err)
	}
	// Refused changes advanced nothing: the next change lands at e+1.
	if err := c.Changes.Join(t, Member("d", "r3")); err != nil {
		t.Fatal(err)
	}
	if v := await(t, w, e+1); v.Len() != 4 {
		t.Fatalf("members %v", ids(v))
	}
}

func testDrain(t *testing.T, c Cluster, seed []control.Member) {
	w, e := watch(t, c)
	if err := c.Changes.Drain(t, "a"); err != nil {
		t.Fatal(err)
	}
	v := await(t, w, e+1)
	if a, ok := v.Member("a"); !ok || !a.Draining || v.Len() != len(seed) {
		t.Fatalf("after drain: %v", v.Members())
	}
	// Draining a draining member changes nothing: the next change is e+2.
	if err := c.Changes.Drain(t, "a"); err != nil {
		t.Fatal(err)
	}
	if err := c.Changes.Drain(t, "b"); err != nil {
		t.Fatal(err)
	}
	v = await(t, w, e+2)
	if b, _ := v.Member("b"); !b.Draining {
		t.Fatalf("b not draining: %v", v.Members())
	}
}

func testLeave(t *testing.T, c Cluster, seed []control.Member) {
	w, e := watch(t, c)
	if err := c.Changes.Join(t, Member("d", "r3")); err != nil {
		t.Fatal(err)
	}
	await(t, w, e+1)
	if err := c.Changes.Leave(t, "d"); err != nil {
		t.Fatal(err)
	}
	v := await(t, w, e+2)
	if _, ok := v.Member("d"); ok || v.Len() != len(seed) {
		t.Fatalf("after leave: members %v", ids(v))
	}
	sameView(t, "Current after leave", c.M.Current(), v)
}

// A watcher that does not read never blocks the publisher; when it reads,
// it sees strictly increasing epochs ending at the latest, and nothing
// older after it.
func testWatchDropToLatest(t *testing.T, c Cluster, seed []control.Member) {
	const joins = 8
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e := c.M.Current().Epoch()
	slow := c.M.Watch(ctx) // not read until every change is committed
	for i := range joins {
		if err := c.Changes.Join(t, Member(fmt.Sprintf("n%02d", i), "r3")); err != nil {
			t.Fatal(err)
		}
	}
	last := e + joins
	var seen []uint64
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for len(seen) == 0 || seen[len(seen)-1] < last {
		select {
		case v, open := <-slow:
			if !open {
				t.Fatalf("watch closed after epochs %v", seen)
			}
			if n := len(seen); n > 0 && v.Epoch() <= seen[n-1] {
				t.Fatalf("epochs not strictly increasing: %v then %d", seen, v.Epoch())
			}
			seen = append(seen, v.Epoch())
			if v.Epoch() == last && v.Len() != len(seed)+joins {
				t.Fatalf("latest view: members %v", ids(v))
			}
		case <-deadline.C:
			t.Fatalf("no view at epoch %d; saw %v", last, seen)
		}
	}
	if seen[len(seen)-1] != last {
		t.Fatalf("epochs %v overshoot %d", seen, last)
	}
	select {
	case v := <-slow:
		t.Fatalf("extra view at epoch %d after the latest", v.Epoch())
	default:
	}
}
