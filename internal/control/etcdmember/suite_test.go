package etcdmember

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/gpucache/gpucache/internal/control"
	"github.com/gpucache/gpucache/internal/control/membershiptest"
)

// TestMembershipSuite runs the shared membership suite against a real
// embedded etcd: each member is its own node (own client, lease and key),
// the observed membership is a client-only watcher, and each subtest works
// under its own key prefix.
func TestMembershipSuite(t *testing.T) {
	ep := startEtcd(t)
	var n int
	membershiptest.Run(t, func(t *testing.T, members ...control.Member) membershiptest.Cluster {
		n++
		c := &etcdChanger{endpoint: ep, prefix: fmt.Sprintf("/suite-%d/", n), nodes: map[control.MemberID]*Membership{}}
		for _, m := range members {
			if err := c.Join(t, m); err != nil {
				t.Fatal(err)
			}
		}
		c.watcher = join(t, ep, Config{Prefix: c.prefix})
		return membershiptest.Cluster{M: c.watcher, Changes: c}
	})
}

// etcdChanger joins a member by starting a node for it, drains through the
// watcher, and leaves by closing the member's node.
type etcdChanger struct {
	endpoint, prefix string
	watcher          *Membership

	mu    sync.Mutex
	nodes map[control.MemberID]*Membership // guarded by mu
}

func (c *etcdChanger) Join(t *testing.T, m control.Member) error {
	cli := newClient(t, c.endpoint)
	t.Cleanup(func() { cli.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	node, err := New(ctx, Config{Client: cli, Prefix: c.prefix, Self: &m, Logger: quiet})
	if err != nil {
		return err
	}
	t.Cleanup(func() { node.Close() })
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nodes[m.ID] = node
	return nil
}

func (c *etcdChanger) Leave(t *testing.T, id control.MemberID) error {
	c.mu.Lock()
	node, ok := c.nodes[id]
	delete(c.nodes, id)
	c.mu.Unlock()
	if !ok {
		t.Fatalf("leave %q: not joined by this test", id)
	}
	return node.Close()
}

func (c *etcdChanger) Drain(_ *testing.T, id control.MemberID) error {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	_, err := c.watcher.Drain(ctx, id)
	return err
}
