package server

import "github.com/gpucache/gpucache/internal/respserve"

// ForwardRequest describes one RESP operation on a key that another member
// of the cluster owns (respserve.ForwardRequest).
type ForwardRequest = respserve.ForwardRequest

// Forwarder serves RESP operations on keys this node does not own
// (respserve.Forwarder). Config.Forwarder nil means a single node that
// owns every key.
type Forwarder = respserve.Forwarder
