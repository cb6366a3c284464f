package reqbuf

import (
	"fmt"

	"github.com/gpucache/gpucache/api/wire"
)

// Keep is the part of a connection's request buffer that needs no
// budget: it holds every usual request (a GET of a few hundred keys, a PUT
// table of a few blocks) without touching the shared budget.
const Keep = 16 << 10

// TableDecodeCost is the budget charged for decoding a table of n bytes
// into PutRequest or FillCommitRequest: the token ids take as many bytes
// as on the wire, the entries a little more (a PutBlock is 104 bytes for
// at least 92 on the wire), plus allocation rounding.
func TableDecodeCost(n uint32) int64 { return int64(n) + int64(n)/2 }

// BufCost is the budget a request buffer of capacity n takes.
func BufCost(n int) int64 {
	if n <= Keep {
		return 0
	}
	return int64(n)
}

// ResponseCost is the heap a GET response of n keys may take until it is
// written: its table (8 + 5n bytes), its write vector (n+2 slices) and its
// pinned views (n), plus the response itself.
func ResponseCost(n int) int64 { return int64(8 + 5*n + 24*(n+2) + 32*n + 256) }

// WaitCost is the heap a parked WAIT of n fills takes until it is
// answered: its goroutine, its waiter list and its answer.
func WaitCost(n int) int64 { return int64(8<<10 + 48*n + 256) }

// ControlBodyMax bounds the body of every request but PUT under l.
func ControlBodyMax(l wire.Limits) uint32 {
	return 4 + wire.MaxNamespaceLen + 8 + 4 + l.MaxBatch*wire.KeySize + 64
}

// FillTableMax bounds a FILL_COMMIT table under l, as the server's
// putTableMax a PUT's.
func FillTableMax(l wire.Limits) uint32 {
	return 4 + wire.MaxNamespaceLen + 4 + l.MaxBatch*uint32(wire.FillBlockSize(0)) + 4*wire.MaxRequestTokens
}

// MaxRequestCost is the request-buffer budget one request may need under
// limits: its largest table (a FILL_COMMIT's) plus its decoded form. A
// budget smaller than this could never serve such a request.
func MaxRequestCost(l wire.Limits) int64 {
	if l.MaxBatch == 0 {
		l.MaxBatch = wire.DefaultMaxBatch
	}
	t := FillTableMax(l)
	return int64(t) + TableDecodeCost(t)
}

// PreSessionBodies is how many of the largest pre-session bodies the
// pre-session bucket holds at once.
const PreSessionBodies = 4

// PreSessionBuffers is the pre-session bucket under limits: room for
// PreSessionBodies bodies of the largest size a request before HELLO may
// send. A HELLO (a few hundred bytes) needs none of it.
func PreSessionBuffers(l wire.Limits) int64 {
	if l.MaxBatch == 0 {
		l.MaxBatch = wire.DefaultMaxBatch
	}
	return PreSessionBodies * int64(ControlBodyMax(l))
}

// FairShare is the default share of one tenant of a request-buffer budget
// of total bytes under limits, with shares tenants (2 in open mode):
// (total - pre-session bucket) / shares, at least MaxRequestCost(limits)
// and at most total.
func FairShare(total int64, limits wire.Limits, shares int) int64 {
	share := (total - PreSessionBuffers(limits)) / int64(max(shares, 1))
	return min(max(share, MaxRequestCost(limits)), total)
}

// CheckShare checks a tenant's share against the total and the largest
// request. Its error names the server's settings (TenantRequestBuffers,
// RequestBuffers); the server wraps it in its configuration error.
func CheckShare(share, total int64, l wire.Limits) error {
	if need := MaxRequestCost(l); share < need || share > total {
		return fmt.Errorf("TenantRequestBuffers %d must be between the largest request's %d bytes (max_batch %d) and RequestBuffers %d",
			share, need, l.MaxBatch, total)
	}
	return nil
}
