package client

import (
	"sync/atomic"
	"time"

	"github.com/gpucache/gpucache/api/wire"
)

// Call states. A call moves waiting → filling → done when its answer is
// processed, or waiting → abandoned when its caller gives up first. The
// state machine is what keeps a timed-out GET from writing into memory its
// caller has been handed back:
//
//   - Only the connection's reader goroutine moves a call to filling (with a
//     compare-and-swap from waiting), and only while a call is filling may
//     the reader write into the caller's result slice and destination
//     buffers.
//   - A caller whose context expires first wins waiting → abandoned and
//     returns at once; the reader later finds the call abandoned and drains
//     its answer into the discard.
//   - A caller whose context expires while its call is filling sets
//     stopFill and waits for done; the reader checks stopFill between
//     payload chunks, stops writing, drains the rest, moves the call to
//     abandoned and closes done. If the reader is stuck inside a read (the
//     server stalled mid-payload) the caller waits abandonKick, then forces
//     the read to return by setting a past read deadline, which breaks the
//     connection.
const (
	stWaiting int32 = iota
	stFilling
	stDone
	stAbandoned
)

// abandonKick is how long an abandoning caller waits for the reader to
// leave its buffers before it breaks the connection to make it.
const abandonKick = 20 * time.Millisecond

// call is one request in flight on a connection.
type call struct {
	op    wire.Opcode
	state atomic.Int32
	// stopFill asks the reader to stop filling (the caller gave up).
	stopFill atomic.Bool
	// answered is set once the reader has taken the call out of the pending
	// map (answer or connection failure); it disarms the abandon timer.
	answered atomic.Bool
	// timer closes the connection if an abandoned call stays unanswered.
	timer atomic.Pointer[time.Timer]
	// done is closed by the reader when the call leaves filling.
	done chan struct{}

	// Written by the reader while filling; read by the caller after done.
	started bool // an answer frame for the call arrived (vs. the connection failing first)
	flags   wire.Flags
	body    []byte // answer body of every op but GET (and GET errors)
	err     error  // failure of the whole call

	// GET only: the caller's memory, written by the reader only while the
	// call is filling. dst nil means allocate each payload.
	dst   [][]byte
	res   []GetResult
	alloc func(n int) []byte // dst nil: WithAlloc's allocator, or nil to make
}

func newCall(op wire.Opcode) *call { return &call{op: op, done: make(chan struct{})} }

// finish moves a filling call to done and wakes its caller.
func (cl *call) finish() {
	cl.state.Store(stDone)
	close(cl.done)
}

// failFill fails a filling call: the whole call gets err and every GET
// result not yet delivered becomes a miss with reason err.
func (cl *call) failFill(err error, from int) {
	cl.err = err
	for i := from; i < len(cl.res); i++ {
		cl.res[i] = GetResult{Reason: err}
	}
	cl.finish()
}

// stopTimer disarms the abandon timer, if any.
func (cl *call) stopTimer() {
	cl.answered.Store(true)
	if t := cl.timer.Load(); t != nil {
		t.Stop()
	}
}
