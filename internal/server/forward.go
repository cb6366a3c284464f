package server

import "github.com/gpucache/gpucache/api/identity"

// Remote reports whether key belongs to another member under the current
// view: exactly the keys checkOwnedKeys refuses to a routing session. In live
// and read-only mode a key is remote unless this node owns it (a draining
// node, or one absent from its view, owns none; under a view with no
// active member every key is remote, and forwarding it is a miss). In
// unknown mode no owner is known and no key is remote: the key is served
// locally, where the mode makes it a miss. One atomic load, so the answer
// is the one a request checked at the same moment would get.
//
// A Forwarder (forwarder.go) uses it as its Remote.
func (c *Cluster) Remote(key identity.BlockKey) bool {
	st := c.state.Load()
	return st.mode != ControlUnknown && !st.owns(c.self, key)
}
