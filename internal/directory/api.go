package directory

// This file fixes the exported API of the directory. The server codes
// against it; keep the signatures stable.

import (
	"errors"
	"time"

	"github.com/gpucache/gpucache/api/identity"
)

// Sentinel errors.
var (
	// ErrStaleEpoch: the token's epoch is older than the shard's; the fill was
	// fenced. Retry under the new epoch.
	ErrStaleEpoch = errors.New("gpucache/directory: stale epoch; fill fenced")
	// ErrNotLeader: the token does not name the current leader of a live fill
	// (already finished, failed over to another leader, or unknown).
	ErrNotLeader = errors.New("gpucache/directory: not the fill's leader")
	// ErrEpochOverflow: the epoch cannot advance past its maximum; nothing
	// changed and in-flight fills are kept.
	ErrEpochOverflow = errors.New("gpucache/directory: epoch overflow")
	// ErrWrongShard: the request names a shard this directory does not own.
	ErrWrongShard = errors.New("gpucache/directory: wrong shard")
	// ErrClosed: the directory is closed.
	ErrClosed = errors.New("gpucache/directory: closed")
	// ErrEpochRegress: AdvanceEpoch was asked for an epoch not above the
	// current one; nothing changed.
	ErrEpochRegress = errors.New("gpucache/directory: epoch does not advance")
	// ErrInvalidConfig: New was given a negative or out-of-range setting.
	ErrInvalidConfig = errors.New("gpucache/directory: invalid config")
)

// ShardID names the part of the key space one node owns. A single-node
// cluster is one shard.
type ShardID uint32

// Epoch orders membership changes. A fill started under an older epoch than
// the shard's current one is fenced.
type Epoch uint64

// FillID names one fill (one flight) within a shard. IDs are never reused.
type FillID uint64

// Token is what a leader holds: it proves which fill, under which epoch, and
// which turn (a failover hands the fill to a new leader with a new Turn).
type Token struct {
	Shard ShardID
	Fill  FillID
	Epoch Epoch
	Turn  uint32
}

// Outcome of Acquire.
type Outcome uint8

const (
	// Hit: the block is present (the present callback said so, checked
	// inside the directory lock). Read it from the hot tier.
	Hit Outcome = iota + 1
	// Lead: the caller fills the block and then calls Finish or Fail with
	// the token.
	Lead
	// Joined: another caller of the same tenant is filling the block; wait
	// on the Waiter for a notice.
	Joined
	// Denied: the tenant's join credits are exhausted, or a new fill would
	// take the tenant past TenantFills or the shard past MaxFills. The
	// caller does not join or lead (it recomputes on its own); the leader
	// is unaffected.
	Denied
)

// NoticeKind is what a waiter learns. Notices carry no payload.
type NoticeKind uint8

const (
	// Finished: the block was published; read it from the hot tier.
	Finished NoticeKind = iota + 1
	// Failed: the fill failed and no turn was handed to this waiter (the
	// handoff budget is spent or the waiter was not next). Recompute.
	Failed
	// Fenced: the epoch changed under the fill; retry Acquire under the new
	// epoch.
	Fenced
	// Promoted: the leader failed or vanished and this waiter is the new
	// leader; Notice.Token is its token.
	Promoted
)

// Notice is delivered once to each waiter.
type Notice struct {
	Kind  NoticeKind
	Token Token // set for Promoted
}

// Request names the block a caller wants and who the caller is.
type Request struct {
	Key       identity.BlockKey
	Namespace identity.NamespaceDigest
	Tenant    string
	// Owner identifies the caller's session (a connection), so LeaveOwner
	// can fail or withdraw everything it holds when it disconnects.
	Owner uint64
}

// Result of Acquire.
type Result struct {
	Outcome Outcome
	Token   Token   // Lead
	Waiter  *Waiter // Joined
}

// Config configures a Directory.
type Config struct {
	// Shard is the shard this directory owns. Default 0.
	Shard ShardID
	// Epoch is the starting epoch. Default 1.
	Epoch Epoch
	// FillDeadline bounds one leader's turn: a leader that neither finishes
	// nor fails within it is treated as failed. Default 10s.
	FillDeadline time.Duration
	// MaxTurns bounds how many leaders one fill may have (the first plus
	// failovers); after that the remaining waiters get Failed. Default 3.
	MaxTurns int
	// JoinCredits is the most waiters one tenant may have across all fills of
	// the shard at once. Default 4096.
	JoinCredits int
	// MaxFills bounds live fills; beyond it Acquire answers Denied. Default 65536.
	MaxFills int
	// TenantFills bounds the live fills of one tenant (the fills it
	// leads, whatever their turn); beyond it Acquire answers Denied to
	// that tenant only, so one tenant can never take the whole fill table.
	// Default max(MaxFills/2, 1); the daemon sets a fair share.
	TenantFills int
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Stripes is how many locks the shard's fills are striped over, by key
	// hash; rounded up to a power of two, at most 4096. Default 64.
	Stripes int
}
