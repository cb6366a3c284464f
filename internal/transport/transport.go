package transport

import (
	"context"
	"errors"
	"fmt"
)

// Transport moves the bytes of a Stage to one peer. Implementations: TCP
// (real), Mem (in-process, for tests), and NIXL/RDMA, which refuses to open
// in this build (OpenNIXL).
//
// Submit is synchronous: when it returns, the transport no longer reads the
// stage's slot memory, whatever the outcome. The caller keeps ownership of
// the stage, except when the error wraps ErrStageQuarantined: the transport
// failed after it began moving slot memory and quarantined the stage, which
// has then ended (a later Release returns ErrStageEnded).
type Transport interface {
	// Name names the transport in receipts and logs: "tcp", "mem", "nixl".
	Name() string
	// Submit sends the staged slots' bytes to the peer and returns a
	// receipt. It blocks while the transport's in-flight bound is reached
	// (backpressure) until a turn frees or ctx ends.
	Submit(ctx context.Context, s *Stage) (Receipt, error)
	// Close ends the transport; blocked Submits return. Idempotent.
	Close() error
}

// Fallback says why a receipt came from another transport than the one
// preferred.
type Fallback uint8

const (
	// FallbackNone: the preferred transport carried the bytes.
	FallbackNone Fallback = iota
	// FallbackRdmaNotLinked: RDMA was preferred but is not linked in this
	// build (or did not open); TCP carried the bytes and nothing was posted
	// to any RDMA queue.
	FallbackRdmaNotLinked
)

// String returns the name used in reports: "none", "RdmaNotLinked".
func (f Fallback) String() string {
	switch f {
	case FallbackNone:
		return "none"
	case FallbackRdmaNotLinked:
		return "RdmaNotLinked"
	default:
		return fmt.Sprintf("Fallback(%d)", uint8(f))
	}
}

// NotRunHardware labels every result that would need hardware nothing here
// has exercised (RDMA, NIXL). Such a result carries no measured number.
const NotRunHardware = "NOT_RUN_HARDWARE"

// HostCopiesUnknown is reported by a TCP transport over a conn that is not a
// *net.TCPConn (TLS, a wrapper): the copy count then depends on that conn and
// is not claimed.
const HostCopiesUnknown = -1

// Receipt is what a transport promises about one Submit or Receive that
// succeeded. It states facts of this build's code path, never a measurement:
// it holds no timings and no bandwidth.
type Receipt struct {
	// Transport names the transport that carried the bytes: "tcp", "mem".
	Transport string
	// Bytes is the payload carried: the sum of the slots' valid lengths,
	// frame header excluded.
	Bytes int64
	// HostCopies counts copies of the payload in host memory on this side.
	// TCP: 1, the kernel's copy between slot memory and the socket buffer;
	// there is never a user-space staging copy. Mem: 1, the copy into the
	// receiver's slots. HostCopiesUnknown where not claimed.
	HostCopies int
	// DMAPosted reports whether anything was posted to a DMA/RDMA queue.
	// Always false in this build.
	DMAPosted bool
	// Fallback says why another transport than the preferred one carried
	// the bytes.
	Fallback Fallback
	// Label is NotRunHardware when an RDMA path was involved (preferred and
	// refused); empty otherwise.
	Label string
	// Epoch is the stage epoch the frame carried.
	Epoch Epoch
}

// Sentinel errors. Test with errors.Is.
var (
	// ErrClosed: the transport or registry is closed.
	ErrClosed = errors.New("gpucache/transport: closed")
	// ErrBroken: an earlier I/O failed part-way and the stream can no
	// longer be framed; the transport must be closed and redialled.
	ErrBroken = errors.New("gpucache/transport: connection broken by an earlier failure")
	// ErrStageQuarantined: the operation failed after it began moving slot
	// memory; the stage's slots were quarantined and the stage has ended.
	ErrStageQuarantined = errors.New("gpucache/transport: stage quarantined after a failed transfer")
	// ErrStageEnded: the stage was already released, quarantined or fenced.
	ErrStageEnded = errors.New("gpucache/transport: stage already ended")
	// ErrMalformed: a received frame is corrupt (bad type, version or
	// reserved bits). The transport is broken afterwards.
	ErrMalformed = errors.New("gpucache/transport: malformed frame")
	// ErrTooLarge: a received frame does not fit the stage offered to
	// Receive (more slots, or a slot longer than SlotSize).
	ErrTooLarge = errors.New("gpucache/transport: frame does not fit the stage")
	// ErrNoTransport: SubmitPreferringRDMA was given no TCP transport to
	// fall back to.
	ErrNoTransport = errors.New("gpucache/transport: no fallback transport")
	// ErrConfig: a config field is out of range.
	ErrConfig = errors.New("gpucache/transport: invalid config")
)

// SubmitPreferringRDMA submits s over rdma when one opened (never in this
// build: OpenNIXL refuses), otherwise over tcp. rdma may be nil, and a nil
// rdma is the normal case here.
//
// The fallback posts nothing to any RDMA queue. Its receipt says so:
// Fallback is FallbackRdmaNotLinked, DMAPosted is false and Label is
// NotRunHardware, because the RDMA leg was not run on hardware. An rdma
// transport whose Submit refuses with ErrNotLinked also falls back; any
// other rdma error is returned as is (the stage may be quarantined and must
// not be resent blindly).
func SubmitPreferringRDMA(ctx context.Context, rdma, tcp Transport, s *Stage) (Receipt, error) {
	if rdma != nil {
		rc, err := rdma.Submit(ctx, s)
		if err == nil || !errors.Is(err, ErrNotLinked) {
			return rc, err
		}
	}
	if tcp == nil {
		return Receipt{Fallback: FallbackRdmaNotLinked, Label: NotRunHardware}, ErrNoTransport
	}
	rc, err := tcp.Submit(ctx, s)
	rc.Fallback = FallbackRdmaNotLinked
	rc.DMAPosted = false
	rc.Label = NotRunHardware
	return rc, err
}
