package respserve

import (
	"io"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/security/acl"
	"github.com/gpucache/gpucache/internal/security/auth"
)

// Conn is what the RESP endpoint needs from the server for one
// connection. The server implements it for each connection it hands to
// Endpoint.Serve; only that connection's goroutine calls it.
type Conn interface {
	Transport
	Session
	Blocks
}

// Transport is the connection's reading side: its waits and its request
// buffer. The endpoint writes replies to the net.Conn itself.
type Transport interface {
	// Await waits, idle, for the first byte of the next command (the idle
	// timeout applies, and drain may end the wait), then arms the read
	// timeout for the command. more is false when the connection should
	// end: err nil for drain or an idle timeout, else the read error.
	Await() (more bool, err error)
	// ReadFailed notes that reading a command failed with err (a read
	// past the AUTH deadline is counted as a hello timeout).
	ReadFailed(err error)
	// Panicked handles a panic recovered at the top of the connection's
	// goroutine: it counts and logs it, closes the socket and returns the
	// error that ends the connection.
	Panicked(v any) error
	// ReadBuffered reads n bytes from src into the connection's request
	// buffer, which grows as bytes arrive and is charged to the
	// request-buffer budget: the pre-session bucket before AUTH, the
	// tenant's share after. A *wire.Error means no budget (the rest of
	// src is unread); any other error is the stream's. ReleaseBuffers
	// gives the buffer back.
	ReadBuffered(n int, src io.Reader) ([]byte, error)
	// ReleaseBuffers gives back what ReadBuffered took.
	ReleaseBuffers()
}

// Session is the connection's session under the server's guard.
type Session interface {
	// Open reports open mode: every connection is the default tenant's
	// without AUTH.
	Open() bool
	// Authenticate checks an AUTH credential: secret, which must be the
	// tenant user's when user is not empty, and which must not contradict
	// the connection's client certificate. It does not open a session. A
	// failure is counted and audited; end, when not nil, is the error
	// that closes the connection (too many failures).
	Authenticate(user string, secret []byte) (s auth.Session, err, end error)
	// Login opens the session s on the connection. ns is the namespace
	// of the tenant's RESP profile, nil when the tenant has none.
	Login(s auth.Session, ns *identity.Namespace)
	// Tenant returns the session's tenant; ok is false when the
	// connection has no session (before AUTH, or once it ended).
	Tenant() (tenant string, ok bool)
	// Admit runs the per-command checks of a data command: the session
	// is still valid under the current policy (re-checked after a reload;
	// if not, it ends), and the tenant is within its operation rate.
	Admit() Admission
	// Allowed reports whether the tenant holds need on model under the
	// current policy; a refusal is counted and audited as op.
	Allowed(op, model string, need acl.Right) bool
	// AllowBytes admits n bytes of a value against the tenant's byte
	// rate; a refusal is counted and audited.
	AllowBytes(n int64) bool
}

// Admission is the outcome of Session.Admit.
type Admission int

const (
	// Admitted: go on.
	Admitted Admission = iota
	// SessionEnded: the session is no longer valid; the client must AUTH
	// again.
	SessionEnded
	// RateLimited: the tenant is over its operation rate.
	RateLimited
)

// Block names one block of a RESP key: the tenant's profile namespace,
// its digest, the key (the block's opaque name; it aliases the
// connection's read buffer) and the block key, identity.OpaqueKey(Digest,
// Name).
type Block struct {
	Namespace identity.Namespace
	Digest    identity.NamespaceDigest
	Name      []byte
	Key       identity.BlockKey
}

// Blocks are the blocks this node holds: the hot tier and the tiers below
// it. Keys another member owns never reach them (Config.Forwarder). Each
// applies the cluster's control mode and the hot tier's seals, and counts
// what it moves in the server's and the session's figures.
type Blocks interface {
	// Store reserves a slot of n bytes for b, has fill write the value
	// into it, seals and commits it, and announces the stored block. err
	// is fill's error (nothing stored); otherwise the result says what
	// happened, and why a Dropped block was not stored.
	Store(b Block, n int, fill func(slot []byte) error) (res StoreResult, why string, err error)
	// Load acquires b (refilling it from below DRAM on a miss) with its
	// seal verified and, when found, calls write with its bytes (valid
	// during write only), returning write's error.
	Load(b Block, write func(payload []byte) error) (found bool, err error)
	// Present reports whether b is stored, in DRAM or below it.
	Present(b Block) bool
	// Delete removes b from DRAM and hides it below DRAM, and reports
	// whether it was stored.
	Delete(b Block) bool
	// Hit counts a read of a block of n bytes (from this node or its
	// owner) and, when written, the n bytes sent.
	Hit(n int, written bool)
	// Miss counts a read that found no block.
	Miss()
	// StoredRemote counts n bytes of a value stored at the key's owner.
	StoredRemote(n int64)
	// Begin starts timing a GET or SET command, once its arguments are
	// read (a SET's value streams in during it); End ends it once its
	// reply is written or queued, forwarded when the key's owner served
	// it. The server records the time in its latency histograms, by the
	// tier that served the command (which Load learns).
	Begin(cmd Timed)
	End(forwarded bool)
}

// Timed is a RESP command the server times (Blocks.Begin).
type Timed uint8

const (
	// TimedGet is GET.
	TimedGet Timed = iota
	// TimedSet is SET.
	TimedSet
)

// StoreResult is the outcome of Blocks.Store.
type StoreResult int

const (
	// Stored: the block is committed.
	Stored StoreResult = iota
	// Exists: the block was already stored; its bytes are left alone.
	Exists
	// TooLarge: n is more than the hot tier's largest block.
	TooLarge
	// Dropped: a transient fault kept the block from being stored.
	Dropped
)
