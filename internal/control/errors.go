package control

import (
	"errors"

	"github.com/gpucache/gpucache/api/placement"
)

// Sentinel errors. Callers test them with errors.Is; the wrapped message
// says which member, domain or epoch was at fault.
var (
	// ErrInvalidMember: a member has an empty ID, address or fault domain,
	// or no capacity (placement.ErrInvalidMember).
	ErrInvalidMember = placement.ErrInvalidMember
	// ErrDuplicateMember: two members share an ID, or Join names an ID that
	// is already a member (placement.ErrDuplicateMember).
	ErrDuplicateMember = placement.ErrDuplicateMember
	// ErrUnknownMember: Leave or Drain names an ID that is not a member.
	ErrUnknownMember = errors.New("gpucache/control: unknown member")
	// ErrUnknownDomain: PlanIsolate names a fault domain with no members.
	ErrUnknownDomain = errors.New("gpucache/control: unknown fault domain")
	// ErrEpochMismatch: a compare-and-swap expected an epoch that is no
	// longer current; nothing changed. Re-read and retry.
	ErrEpochMismatch = errors.New("gpucache/control: epoch mismatch")
	// ErrEpochOverflow: the change needs more epoch increments than remain
	// before the epoch overflows (or than the caller's budget allows);
	// nothing changed.
	ErrEpochOverflow = errors.New("gpucache/control: epoch budget exhausted")
	// ErrNoMembers: a static membership was given no member.
	ErrNoMembers = errors.New("gpucache/control: no members")
	// ErrClosed: the membership is closed.
	ErrClosed = errors.New("gpucache/control: closed")
)
