package transport

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"syscall"
)

// Registry errors.
var (
	// ErrNoSlots: Checkout found fewer eligible idle slots than asked for;
	// nothing was checked out.
	ErrNoSlots = errors.New("gpucache/transport: not enough idle slots")
	// ErrStaleEpoch: the epoch is older than the registry's fence.
	ErrStaleEpoch = errors.New("gpucache/transport: stale epoch")
	// ErrEpochOverflow: the epoch is at its maximum and cannot advance;
	// nothing changed.
	ErrEpochOverflow = errors.New("gpucache/transport: epoch overflow")
	// ErrBusy: Close found slots checked out or held.
	ErrBusy = errors.New("gpucache/transport: registry has slots in use")
	// ErrLeaseReleased: the lease was already released.
	ErrLeaseReleased = errors.New("gpucache/transport: lease already released")
)

// Epoch orders membership changes. Slots checked out under an epoch older
// than the registry's fence are reclaimed by Fence.
type Epoch uint64

// Binding names what a slot is registered with: a peer or endpoint. An RDMA
// registration is per protection domain and peer, so reusing a slot with
// the binding it already has skips re-registration. "" is unbound.
type Binding string

// SlotID names one registered slot; slot i is bytes [i*SlotSize, (i+1)*SlotSize)
// of the registry's mapping.
type SlotID uint32

// Limits.
const (
	// MaxSlots bounds RegistryConfig.Slots.
	MaxSlots = 4096
	// MaxSlotSize bounds RegistryConfig.SlotSize (a frame length is uint32).
	MaxSlotSize = 1 << 30
	// MaxStageSlots bounds the slots of one Stage (and of one frame).
	MaxStageSlots = 64
)

const pageBytes = 4096

// RegistryConfig configures a Registry. A zero field takes its default.
type RegistryConfig struct {
	// Slots is the number of registered slots. Default 64, at most MaxSlots.
	Slots int
	// SlotSize is the bytes per slot, rounded up to whole 4 KiB pages.
	// Default 1 MiB, at most MaxSlotSize.
	SlotSize int
}

func (c RegistryConfig) withDefaults() (RegistryConfig, error) {
	if c.Slots == 0 {
		c.Slots = 64
	}
	if c.SlotSize == 0 {
		c.SlotSize = 1 << 20
	}
	if c.Slots < 1 || c.Slots > MaxSlots {
		return c, fmt.Errorf("%w: Slots %d, want 1..%d", ErrConfig, c.Slots, MaxSlots)
	}
	if c.SlotSize < 1 || c.SlotSize > MaxSlotSize {
		return c, fmt.Errorf("%w: SlotSize %d, want 1..%d", ErrConfig, c.SlotSize, MaxSlotSize)
	}
	c.SlotSize = (c.SlotSize + pageBytes - 1) / pageBytes * pageBytes
	return c, nil
}

// slotState is where a slot is in its life.
type slotState uint8

const (
	slotIdle        slotState = iota // free to check out (unless held)
	slotOut                          // in a live Stage
	slotQuarantined                  // failed transfer; waits for Reclaim
)

// slot is the registry's record of one registered region. Guarded by
// Registry.mu.
type slot struct {
	state   slotState
	binding Binding
	epoch   Epoch  // epoch of the checkout, while out
	stage   uint64 // id of the owning stage, while out
	gen     uint32 // bumped whenever the slot leaves slotOut
	holds   int32  // lease holds; a held slot is never checked out, fenced or reclaimed
}

// Registry is a fixed set of registered memory slots, reused across
// transfers the way RDMA memory registrations must be: registering is
// expensive, so a slot keeps its Binding when released and Checkout prefers
// idle slots already bound to the caller's binding.
//
// Slot memory is one anonymous mapping outside the Go heap, so the GC never
// scans payload bytes and their addresses never move (as a registration
// requires). A slot is idle, out (in exactly one live Stage) or
// quarantined; independently it may be held by leases. Every state change
// happens under mu, and Checkout is all-or-nothing.
type Registry struct {
	slotSize int
	mapping  []byte   // the whole mapping; nil after Close
	mem      [][]byte // per-slot windows of mapping, cap-limited

	mu struct {
		sync.Mutex
		closed    bool
		epoch     Epoch  // the fence: checkouts under older epochs are refused
		nextStage uint64 // stage ids, never reused
		slots     []slot
		stats     RegistryStats // counters only; gauges are computed in Stats
	}
}

// NewRegistry maps cfg.Slots*cfg.SlotSize bytes and registers them as idle,
// unbound slots. The epoch starts at 0.
func NewRegistry(cfg RegistryConfig) (*Registry, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	size := cfg.Slots * cfg.SlotSize
	m, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("gpucache/transport: mmap %d bytes: %w", size, err)
	}
	r := &Registry{slotSize: cfg.SlotSize, mapping: m, mem: make([][]byte, cfg.Slots)}
	for i := range r.mem {
		lo, hi := i*cfg.SlotSize, (i+1)*cfg.SlotSize
		r.mem[i] = m[lo:hi:hi]
	}
	r.mu.slots = make([]slot, cfg.Slots)
	return r, nil
}

// SlotSize is the bytes per slot.
func (r *Registry) SlotSize() int { return r.slotSize }

// Epoch is the current fence: Checkout refuses older epochs.
func (r *Registry) Epoch() Epoch {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.epoch
}

// Close unmaps the slots. It refuses with ErrBusy while any slot is checked
// out or held, because a transport or peer may still touch that memory.
// Quarantined slots do not block Close. Idempotent.
func (r *Registry) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.closed {
		return nil
	}
	for i := range r.mu.slots {
		if s := &r.mu.slots[i]; s.state == slotOut || s.holds > 0 {
			return fmt.Errorf("%w: slot %d", ErrBusy, i)
		}
	}
	r.mu.closed = true
	err := syscall.Munmap(r.mapping)
	r.mapping, r.mem = nil, nil
	if err != nil {
		return fmt.Errorf("gpucache/transport: munmap: %w", err)
	}
	return nil
}

// Checkout atomically checks out n idle slots for binding b under epoch e,
// or none. It picks, in this order, lowest slot first within each tier:
//
//  1. idle slots already bound to b (registration reuse);
//  2. idle unbound slots, which it binds to b;
//  3. idle slots bound to another binding, which it rebinds.
//
// It never picks a slot that is checked out, quarantined or held. e must not
// be older than the registry's epoch (ErrStaleEpoch). The caller owns the
// returned Stage and ends it with Release or Quarantine.
func (r *Registry) Checkout(b Binding, n int, e Epoch) (*Stage, error) {
	if b == "" {
		return nil, fmt.Errorf("gpucache/transport: checkout needs a binding")
	}
	if n < 1 || n > MaxStageSlots {
		return nil, fmt.Errorf("gpucache/transport: checkout of %d slots, want 1..%d", n, MaxStageSlots)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.closed {
		return nil, ErrClosed
	}
	if e < r.mu.epoch {
		return nil, fmt.Errorf("%w: checkout under %d, fence at %d", ErrStaleEpoch, e, r.mu.epoch)
	}
	var pick [MaxStageSlots]SlotID
	got := 0
	eligible := func(s *slot) bool { return s.state == slotIdle && s.holds == 0 }
	for tier := 0; tier < 3 && got < n; tier++ {
		for i := range r.mu.slots {
			if got == n {
				break
			}
			s := &r.mu.slots[i]
			if !eligible(s) {
				continue
			}
			switch tier {
			case 0:
				if s.binding != b {
					continue
				}
			case 1:
				if s.binding != "" {
					continue
				}
			case 2:
				if s.binding == "" || s.binding == b {
					continue
				}
			}
			pick[got] = SlotID(i)
			got++
		}
	}
	if got < n {
		r.mu.stats.CheckoutMisses++
		return nil, fmt.Errorf("%w: want %d, %d eligible", ErrNoSlots, n, got)
	}
	r.mu.nextStage++
	st := &Stage{
		reg:     r,
		id:      r.mu.nextStage,
		binding: b,
		epoch:   e,
		ids:     make([]SlotID, n),
		gens:    make([]uint32, n),
		mem:     make([][]byte, n),
		lens:    make([]int, n),
	}
	for k, id := range pick[:n] {
		s := &r.mu.slots[id]
		switch s.binding {
		case b:
			r.mu.stats.Reused++
		case "":
			r.mu.stats.Bound++
		default:
			r.mu.stats.Rebound++
		}
		s.state, s.binding, s.epoch, s.stage = slotOut, b, e, st.id
		st.ids[k], st.gens[k], st.mem[k] = id, s.gen, r.mem[id]
	}
	r.mu.stats.Checkouts++
	return st, nil
}

// liveLocked reports whether st still owns its slots.
func (r *Registry) liveLocked(st *Stage) bool {
	if r.mu.closed || st.reg != r {
		return false
	}
	for k, id := range st.ids {
		s := &r.mu.slots[id]
		if s.state != slotOut || s.gen != st.gens[k] {
			return false
		}
	}
	return true
}

// endLocked moves a live stage's slots to state and ends the stage.
func (r *Registry) endLocked(st *Stage, state slotState) {
	for _, id := range st.ids {
		s := &r.mu.slots[id]
		s.state, s.stage = state, 0
		s.gen++
	}
}

// Release ends st and returns its slots to idle, still bound to the stage's
// binding, for reuse. A slot that is also held stays out of Checkout until
// the hold is released. Releasing a stage that already ended (released,
// quarantined by a failed transfer, or fenced) returns ErrStageEnded and
// changes nothing.
func (r *Registry) Release(st *Stage) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.liveLocked(st) {
		return ErrStageEnded
	}
	r.endLocked(st, slotIdle)
	r.mu.stats.Released += uint64(len(st.ids))
	return nil
}

// Quarantine ends st and quarantines its slots: they are never handed out
// again until Reclaim clears them. Transports call it (through the same
// path) when a transfer fails after touching slot memory.
func (r *Registry) Quarantine(st *Stage) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.liveLocked(st) {
		return ErrStageEnded
	}
	r.endLocked(st, slotQuarantined)
	r.mu.stats.Quarantines += uint64(len(st.ids))
	return nil
}

// Reclaim clears (zeroes) every quarantined slot that is not held and
// returns it to idle and unbound: the old registration is not trusted
// after a failed transfer. It returns how many slots it reclaimed.
func (r *Registry) Reclaim() (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.closed {
		return 0, ErrClosed
	}
	n := 0
	for i := range r.mu.slots {
		s := &r.mu.slots[i]
		if s.state != slotQuarantined || s.holds > 0 {
			continue
		}
		clear(r.mem[i])
		s.state, s.binding = slotIdle, ""
		n++
	}
	r.mu.stats.Reclaimed += uint64(n)
	return n, nil
}

// Fence raises the registry's epoch to e and reclaims every stage checked
// out under an epoch older than e: its slots become idle (keeping their
// binding) and the stage ends. A stage with any held slot is skipped whole,
// and a later Fence at the same epoch takes it once the hold is released.
// It returns the number of slots reclaimed. e older than the current epoch
// returns ErrStaleEpoch and changes nothing.
func (r *Registry) Fence(e Epoch) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fenceLocked(e)
}

// Advance fences at the next epoch and returns it with the slots reclaimed.
// At math.MaxUint64 the epoch cannot advance: it returns ErrEpochOverflow
// and changes nothing (no slot is reclaimed).
func (r *Registry) Advance() (Epoch, int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.epoch == math.MaxUint64 {
		return r.mu.epoch, 0, ErrEpochOverflow
	}
	n, err := r.fenceLocked(r.mu.epoch + 1)
	return r.mu.epoch, n, err
}

func (r *Registry) fenceLocked(e Epoch) (int, error) {
	if r.mu.closed {
		return 0, ErrClosed
	}
	if e < r.mu.epoch {
		return 0, fmt.Errorf("%w: fence at %d, current %d", ErrStaleEpoch, e, r.mu.epoch)
	}
	r.mu.epoch = e
	// A stage is reclaimed whole or not at all: first find the stages
	// that have a held slot.
	var heldStages map[uint64]bool
	for i := range r.mu.slots {
		s := &r.mu.slots[i]
		if s.state == slotOut && s.epoch < e && s.holds > 0 {
			if heldStages == nil {
				heldStages = make(map[uint64]bool)
			}
			heldStages[s.stage] = true
		}
	}
	n := 0
	for i := range r.mu.slots {
		s := &r.mu.slots[i]
		if s.state != slotOut || s.epoch >= e || heldStages[s.stage] {
			continue
		}
		s.state, s.stage = slotIdle, 0
		s.gen++
		n++
	}
	r.mu.stats.Fenced += uint64(n)
	return n, nil
}

// Invalidate is what a GPU reset does to the registry: every memory
// registration is void at once. It advances the epoch, so a checkout under
// the old one is refused; it quarantines the slots of every live stage,
// held or not, so each of those stages has ended (a transfer still running
// on one reports no delivery when it finishes: see Submit and Receive); and
// it unbinds every idle slot, so the next checkout registers it again.
// Unlike Fence it does not spare held stages: their registration is gone
// whoever holds them. A held slot still stays out of Reclaim until its holds
// are released, so nothing clears memory a transfer is touching. It returns
// the new epoch and the slots it quarantined. At math.MaxUint64 the epoch
// cannot advance: the slots are quarantined and unbound all the same, and
// it returns ErrEpochOverflow.
func (r *Registry) Invalidate() (Epoch, int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.closed {
		return r.mu.epoch, 0, ErrClosed
	}
	n := 0
	for i := range r.mu.slots {
		s := &r.mu.slots[i]
		switch s.state {
		case slotOut:
			s.state, s.stage = slotQuarantined, 0
			s.gen++
			n++
		case slotIdle:
			s.binding = ""
		}
	}
	r.mu.stats.Quarantines += uint64(n)
	r.mu.stats.Invalidations++
	if r.mu.epoch == math.MaxUint64 {
		return r.mu.epoch, n, ErrEpochOverflow
	}
	r.mu.epoch++
	return r.mu.epoch, n, nil
}

// Lease is a hold on slots: while it lasts, the slots are not checked out,
// fenced or reclaimed (a peer may still be reading or writing them). The
// holder releases it exactly once.
type Lease struct {
	reg      *Registry
	ids      []SlotID
	released bool // guarded by reg.mu
}

// Hold takes a lease on the slots, whatever their state, all or none.
func (r *Registry) Hold(ids ...SlotID) (*Lease, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.closed {
		return nil, ErrClosed
	}
	for _, id := range ids {
		if int(id) >= len(r.mu.slots) {
			return nil, fmt.Errorf("gpucache/transport: hold of slot %d, registry has %d", id, len(r.mu.slots))
		}
	}
	for _, id := range ids {
		r.mu.slots[id].holds++
	}
	return &Lease{reg: r, ids: append([]SlotID(nil), ids...)}, nil
}

// HoldStage takes a lease on st's slots if st is still live (ErrStageEnded
// otherwise). An owner that writes into slot memory outside a transport
// holds the stage for the duration, so a Fence cannot hand the slots to
// another owner underneath it.
func (r *Registry) HoldStage(st *Stage) (*Lease, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.liveLocked(st) {
		return nil, ErrStageEnded
	}
	for _, id := range st.ids {
		r.mu.slots[id].holds++
	}
	return &Lease{reg: r, ids: append([]SlotID(nil), st.ids...)}, nil
}

// Release drops the lease. A second call returns ErrLeaseReleased.
func (l *Lease) Release() error {
	r := l.reg
	r.mu.Lock()
	defer r.mu.Unlock()
	if l.released {
		return ErrLeaseReleased
	}
	l.released = true
	for _, id := range l.ids {
		r.mu.slots[id].holds--
	}
	return nil
}

// holdStage and unholdStage are HoldStage without the Lease allocation, for
// the transports' hot paths.
func (r *Registry) holdStage(st *Stage) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.liveLocked(st) {
		return ErrStageEnded
	}
	for _, id := range st.ids {
		r.mu.slots[id].holds++
	}
	return nil
}

func (r *Registry) unholdStage(st *Stage) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range st.ids {
		r.mu.slots[id].holds--
	}
}

// live reports whether st still owns its slots: a transfer asks once it is
// done, since an Invalidate may have ended the stage under its hold.
func (r *Registry) live(st *Stage) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.liveLocked(st)
}

// quarantineHeld quarantines a stage the caller holds (a failed transfer).
func (r *Registry) quarantineHeld(st *Stage) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.liveLocked(st) {
		r.endLocked(st, slotQuarantined)
		r.mu.stats.Quarantines += uint64(len(st.ids))
	}
}

// RegistryStats is a snapshot. Gauges count slots now; counters count
// slots (or calls, where said) since NewRegistry.
type RegistryStats struct {
	Epoch       Epoch
	Slots       int
	Idle        int // idle, including held ones; Idle+CheckedOut+Quarantined == Slots
	IdleBound   int // idle slots with a binding
	CheckedOut  int
	Quarantined int
	Held        int // slots with at least one hold, in any state

	Checkouts      uint64 // successful Checkout calls
	CheckoutMisses uint64 // Checkout calls refused for want of slots
	Reused         uint64 // slots handed out already bound to the caller's binding
	Bound          uint64 // unbound slots bound at checkout (a registration)
	Rebound        uint64 // slots moved from another binding (a re-registration)
	Released       uint64
	Quarantines    uint64
	Reclaimed      uint64 // quarantined slots cleared by Reclaim
	Fenced         uint64 // out slots reclaimed by Fence or Advance
	Invalidations  uint64 // Invalidate calls (GPU resets); their slots count in Quarantines
}

// Stats returns a snapshot.
func (r *Registry) Stats() RegistryStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.mu.stats
	st.Epoch = r.mu.epoch
	st.Slots = len(r.mu.slots)
	for i := range r.mu.slots {
		s := &r.mu.slots[i]
		switch s.state {
		case slotIdle:
			st.Idle++
			if s.binding != "" {
				st.IdleBound++
			}
		case slotOut:
			st.CheckedOut++
		case slotQuarantined:
			st.Quarantined++
		}
		if s.holds > 0 {
			st.Held++
		}
	}
	return st
}

// Stage is a set of checked-out slots: the unit a transport moves. It is
// owned by one goroutine, the one that checked it out, until it ends by
// Release, Quarantine, a failed transfer (ErrStageQuarantined) or a Fence.
// Slot memory is valid only while the stage is live; writing into it after
// the stage ended races with the slot's next owner.
type Stage struct {
	reg     *Registry
	id      uint64
	binding Binding
	epoch   Epoch
	ids     []SlotID
	gens    []uint32 // slot generations at checkout
	mem     [][]byte // full slot windows
	lens    []int    // valid bytes per slot
}

// Len is the number of slots.
func (s *Stage) Len() int { return len(s.ids) }

// Binding is the binding the stage was checked out for.
func (s *Stage) Binding() Binding { return s.binding }

// Registry is the registry the stage was checked out of: the one whose
// Quarantine and Invalidate end it (the DPU path's failpoints use it).
func (s *Stage) Registry() *Registry { return s.reg }

// Epoch is the epoch the stage was checked out under.
func (s *Stage) Epoch() Epoch { return s.epoch }

// SlotID returns the id of slot i.
func (s *Stage) SlotID(i int) SlotID { return s.ids[i] }

// Slot returns slot i's memory, SlotSize bytes. Write a payload into it and
// set its length with SetLen. The slice aliases registered memory: no copy.
func (s *Stage) Slot(i int) []byte { return s.mem[i] }

// SetLen sets the valid length of slot i. It panics if n is outside
// 0..SlotSize, a programming error.
func (s *Stage) SetLen(i, n int) {
	if n < 0 || n > len(s.mem[i]) {
		panic(fmt.Sprintf("gpucache/transport: SetLen(%d, %d) outside 0..%d", i, n, len(s.mem[i])))
	}
	s.lens[i] = n
}

// Payload returns slot i's valid bytes, Slot(i)[:len].
func (s *Stage) Payload(i int) []byte { return s.mem[i][:s.lens[i]] }

// Bytes is the total valid length.
func (s *Stage) Bytes() int64 {
	var n int64
	for _, l := range s.lens {
		n += int64(l)
	}
	return n
}
