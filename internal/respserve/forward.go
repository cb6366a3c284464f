package respserve

import (
	"context"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/security/audit"
)

// ForwardRequest describes one RESP operation on a key that another member
// of the cluster owns. The RESP connection fills it;
// a Forwarder sends the operation to the owner over the native protocol,
// as the caller's tenant.
type ForwardRequest struct {
	// Tenant is the RESP session's tenant.
	Tenant string
	// Secret is the bearer secret the RESP client authenticated with
	// (AUTH); empty in open mode. The forwarder presents it to the owner,
	// so the owner applies the tenant's own rights, limits and audit. An
	// audit.Secret: it prints and logs as [REDACTED].
	Secret audit.Secret
	// Namespace is the tenant's RESP profile namespace.
	Namespace identity.Namespace
	// Name is the RESP key, the block's opaque name. It aliases a
	// connection buffer: valid during the call only.
	Name []byte
	// Key is identity.OpaqueKey(Namespace digest, Name).
	Key identity.BlockKey
}

// Forwarder serves RESP operations on keys this node does not own. Every
// method returns within ctx's deadline and turns every fault (dead or
// silent owner, refusal after one view refresh, deadline) into a miss:
// false, never an error that would make an LMCache client drop its
// connection. Config.Forwarder nil means a single node that owns every key.
type Forwarder interface {
	// Remote reports whether key is owned by another member under this
	// node's current view.
	Remote(key identity.BlockKey) bool
	// Get reads the block from its owner and, on a hit, calls w once with
	// the payload (valid during w only), returning w's error.
	Get(ctx context.Context, r *ForwardRequest, w func(payload []byte) error) (hit bool, err error)
	// Set stores payload at the owner. existed reports that the block was
	// already stored (chunks are immutable: its bytes are left alone).
	// A refusal (no space, quota, rate limit, denied) is err, a clear
	// message for the RESP client.
	Set(ctx context.Context, r *ForwardRequest, payload []byte) (stored, existed bool, err error)
	// Exists reports whether the owner holds the block in DRAM or in the
	// cold tier.
	Exists(ctx context.Context, r *ForwardRequest) bool
	// Del removes the block at the owner (DRAM and cold tier) and reports
	// whether it was there.
	Del(ctx context.Context, r *ForwardRequest) bool
}
