package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"syscall"
	"unsafe"

	"github.com/gpucache/gpucache/api/wire"
)

// Registered regions (protocol version 5, ADR 0026). On a Unix-socket
// connection (Config.Network "unix") the client can hand the server a
// descriptor of shared memory; a GetInto whose buffers lie in it, or a Put
// whose payloads do, then moves no payload over the socket: the server
// copies once between its slab and the region.

// Region is shared memory registered with a Client: a memfd or a file
// under /dev/shm, and the caller's mapping of it. Create one with
// Client.NewRegion (a sealed memfd the client allocates and maps) or
// Client.RegisterRegion (memory the caller already has). The client
// registers it with each pooled connection the first time that connection
// needs it.
type Region struct {
	id    uint32
	fd    int    // the client's own descriptor (a dup when registered)
	mem   []byte // the caller's view of the whole region
	owned bool   // mem was mapped by NewRegion: Close unmaps it
}

// Bytes returns the region's memory. Buffers sliced from it travel through
// the region.
func (r *Region) Bytes() []byte { return r.mem }

// Linux constants the syscall package lacks.
const (
	mfdCloexec      = 0x1
	mfdAllowSealing = 0x2
	fAddSeals       = 1033
	fSealShrink     = 0x2
	fSealGrow       = 0x4
)

// NewRegion allocates n bytes of shared memory (a memfd sealed against
// shrinking and growing), maps it, and registers it with c. Buffers
// sliced from Bytes() are read into and written from by the server
// directly. Close it with CloseRegion.
func (c *Client) NewRegion(n int) (*Region, error) {
	if n <= 0 {
		return nil, fmt.Errorf("%w: region of %d bytes", ErrInvalid, n)
	}
	if sysMemfdCreate == 0 {
		return nil, fmt.Errorf("%w: memfd_create is not known on this architecture; use RegisterRegion", ErrUnsupported)
	}
	name := []byte("gpucache-region\x00")
	fd, _, errno := syscall.Syscall(uintptr(sysMemfdCreate), uintptr(unsafe.Pointer(&name[0])), mfdCloexec|mfdAllowSealing, 0)
	if errno != 0 {
		return nil, fmt.Errorf("gpucache/client: memfd_create: %w", errno)
	}
	ok := false
	defer func() {
		if !ok {
			syscall.Close(int(fd))
		}
	}()
	if err := syscall.Ftruncate(int(fd), int64(n)); err != nil {
		return nil, fmt.Errorf("gpucache/client: ftruncate memfd: %w", err)
	}
	if _, _, errno := syscall.Syscall(syscall.SYS_FCNTL, fd, fAddSeals, fSealShrink|fSealGrow); errno != 0 {
		return nil, fmt.Errorf("gpucache/client: seal memfd: %w", errno)
	}
	mem, err := syscall.Mmap(int(fd), 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("gpucache/client: mmap memfd: %w", err)
	}
	ok = true
	r := &Region{fd: int(fd), mem: mem, owned: true}
	c.addRegion(r)
	return r, nil
}

// RegisterRegion registers memory the caller already shares: fd is a
// memfd sealed with F_SEAL_SHRINK, or a file under /dev/shm, and mem is
// the caller's MAP_SHARED mapping of its first len(mem) bytes. The client
// keeps a duplicate of fd (the caller may close its own) and never unmaps
// mem. The server checks the descriptor when a connection first uses the
// region; a refusal makes those calls use the socket instead.
func (c *Client) RegisterRegion(fd int, mem []byte) (*Region, error) {
	if len(mem) == 0 {
		return nil, fmt.Errorf("%w: empty region", ErrInvalid)
	}
	dup, err := syscall.Dup(fd)
	if err != nil {
		return nil, fmt.Errorf("gpucache/client: dup region descriptor: %w", err)
	}
	syscall.CloseOnExec(dup)
	r := &Region{fd: dup, mem: mem}
	c.addRegion(r)
	return r, nil
}

// CloseRegion forgets r: later calls do not use it, its descriptor is
// closed and, for a NewRegion, its memory unmapped. The server unmaps its
// side when each connection that registered it sends UNREGISTER or
// closes; the client sends UNREGISTER on its live connections.
func (c *Client) CloseRegion(ctx context.Context, r *Region) error {
	c.regions.Lock()
	for i, x := range c.regions.list {
		if x == r {
			c.regions.list = append(c.regions.list[:i], c.regions.list[i+1:]...)
			break
		}
	}
	c.regions.Unlock()
	for _, s := range c.slots {
		if cn := s.conn.Load(); cn != nil && cn.registered(r) {
			cn.forgetRegion(r)
			c.roundTripOn(ctx, cn, wire.OpUnregister, func(b []byte) []byte {
				return (&wire.UnregisterRequest{Region: r.id}).AppendTo(b)
			})
		}
	}
	syscall.Close(r.fd)
	if r.owned {
		return syscall.Munmap(r.mem)
	}
	return nil
}

// regionSet is a client's registered regions.
type regionSet struct {
	sync.RWMutex
	list   []*Region       // guarded by the mutex
	next   uint32          // last id given; guarded by the mutex
	logged map[string]bool // fallback causes already logged; guarded by the mutex
}

func (c *Client) addRegion(r *Region) {
	c.regions.Lock()
	c.regions.next++
	r.id = c.regions.next
	c.regions.list = append(c.regions.list, r)
	c.regions.Unlock()
}

// addrOf is the address of b's first byte.
func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// regionOf returns the region that holds every buffer in bufs (each
// [0, cap) for reads, [0, len) for writes), with each buffer's offset in
// it; nil when the connection is not a Unix socket or no region holds
// them all.
func (c *Client) regionOf(bufs [][]byte, useCap bool, offs []uint64) *Region {
	if c.cfg.Network != "unix" || len(bufs) == 0 {
		return nil
	}
	c.regions.RLock()
	defer c.regions.RUnlock()
	for _, r := range c.regions.list {
		lo, hi := addrOf(r.mem), addrOf(r.mem)+uintptr(len(r.mem))
		all := true
		for i, b := range bufs {
			n := len(b)
			if useCap {
				n = cap(b)
			}
			p := addrOf(b)
			if n == 0 || p < lo || p+uintptr(n) > hi {
				all = false
				break
			}
			offs[i] = uint64(p - lo)
		}
		if all {
			return r
		}
	}
	return nil
}

// registered reports whether cn has registered r.
func (cn *conn) registered(r *Region) bool {
	cn.regs.Lock()
	defer cn.regs.Unlock()
	return cn.regs.m[r.id]
}

// forgetRegion marks r as not registered on cn (the server dropped it
// after a fault, or it is being closed).
func (cn *conn) forgetRegion(r *Region) {
	cn.regs.Lock()
	delete(cn.regs.m, r.id)
	cn.regs.Unlock()
}

// errNoRegions: the session cannot use regions.
var errNoRegions = errors.New("gpucache/client: this connection cannot use registered regions")

// ensureRegistered registers r on cn, once: a REGISTER frame carrying r's
// descriptor (SCM_RIGHTS) and its answer.
func (c *Client) ensureRegistered(ctx context.Context, cn *conn, r *Region) error {
	if cn.version < wire.Version5 {
		return fmt.Errorf("%w: the session speaks protocol version %d, regions need 5", errNoRegions, cn.version)
	}
	if _, ok := cn.nc.(*net.UnixConn); !ok {
		return fmt.Errorf("%w: not a Unix-socket connection", errNoRegions)
	}
	cn.regs.Lock()
	defer cn.regs.Unlock()
	if cn.regs.m[r.id] {
		return nil
	}
	r2 := &request{}
	r2.op = wire.OpRegister
	r2.enc = func(b []byte) []byte {
		return (&wire.RegisterRequest{Region: r.id, Length: uint64(len(r.mem))}).AppendTo(b)
	}
	r2.oob = syscall.UnixRights(r.fd)
	r2.ok, r2.cn = false, cn
	r2.cl = newCall(r2.op)
	inFlight, err := cn.start(ctx, r2.cl, &r2.frame)
	if !inFlight {
		return err
	}
	if !cn.wait(ctx, r2.cl) {
		return fmt.Errorf("%w: REGISTER abandoned", ErrUnavailable)
	}
	if r2.cl.err != nil {
		return r2.cl.err
	}
	var resp wire.RegisterResponse
	if err := resp.Decode(r2.cl.body); err != nil {
		return fmt.Errorf("%w: REGISTER answer: %w", ErrProtocol, err)
	}
	if cn.regs.m == nil {
		cn.regs.m = make(map[uint32]bool)
	}
	cn.regs.m[r.id] = true
	return nil
}

// roundTripOn sends one request on cn and returns its answer body.
func (c *Client) roundTripOn(ctx context.Context, cn *conn, op wire.Opcode, enc func([]byte) []byte) ([]byte, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	r := &request{}
	r.op, r.enc = op, enc
	c.exec(ctx, []*request{r}, cn)
	if r.err != nil {
		return nil, r.err
	}
	return r.cl.body, nil
}

// regionFailed reports whether err means the region path cannot serve
// this call (refused, dropped, faulted, or not available on the
// connection), so the caller goes over the socket instead.
func regionFailed(err error) bool {
	return errors.Is(err, errNoRegions) || wire.ErrCode(err) == wire.CodeRegion
}

// getInto reads keys into dst through region reg, on one connection.
// It reports false when the region path could not serve the call (the
// caller then uses the socket); res is then untouched.
func (c *Client) getIntoRegion(ctx context.Context, blob []byte, keys []BlockKey, dst [][]byte, res []GetResult, lease LeaseID, reg *Region, offs []uint64) bool {
	var pin *conn
	if lease != 0 {
		pin = c.takeLease(lease)
	}
	cn := pin
	if cn == nil || cn.dead() {
		var err error
		if cn, err = c.pick(ctx); err != nil {
			return false
		}
	}
	if err := c.ensureRegistered(ctx, cn, reg); err != nil {
		c.regionFallback(err)
		return false
	}
	lim := cn.limits
	caps, ok := slotCaps(dst, offs, int(lim.MaxPayload))
	if !ok {
		return false // buffers that overlap: the socket path fills them in order
	}
	var reqs []*request
	type span struct{ off, end int }
	var spans []span
	for off := 0; off < len(keys); {
		end := min(len(keys), off+int(lim.MaxBatch))
		ks, slots := keys[off:end], make([]wire.Slot, end-off)
		for i := range slots {
			slots[i] = wire.Slot{Offset: offs[off+i], Len: caps[off+i]}
		}
		var l uint64
		if end == len(keys) {
			l = uint64(lease)
		}
		r := &request{}
		r.op = wire.OpGetInto
		r.enc = func(b []byte) []byte {
			return (&wire.GetIntoRequest{Namespace: blob, LeaseID: l, Region: reg.id, Keys: ks, Slots: slots}).AppendTo(b)
		}
		reqs = append(reqs, r)
		spans = append(spans, span{off, end})
		off = end
	}
	c.execOn(ctx, reqs, cn)
	for j, r := range reqs {
		sp := spans[j]
		if r.err != nil {
			if regionFailed(r.err) {
				cn.forgetRegion(reg)
				c.regionFallback(r.err)
				if j == 0 {
					return false
				}
			}
			missAll(res[sp.off:sp.end], r.err)
			continue
		}
		var resp wire.GetIntoResponse
		if err := resp.Decode(r.cl.body, uint32(sp.end-sp.off)); err != nil || len(resp.Blocks) != sp.end-sp.off {
			missAll(res[sp.off:sp.end], fmt.Errorf("%w: GET_INTO answer: %v", ErrProtocol, err))
			continue
		}
		for k, bm := range resp.Blocks {
			i := sp.off + k
			switch bm.Status {
			case wire.StatusHit:
				res[i] = GetResult{Hit: true, Data: dst[i][:bm.Len]}
			case wire.StatusTooLarge:
				res[i] = GetResult{Reason: ErrShortBuffer}
			case wire.StatusFault:
				cn.forgetRegion(reg)
				res[i] = GetResult{Reason: fmt.Errorf("%w: the region faulted on the server (was its file truncated?)", ErrServer)}
			default:
				res[i] = GetResult{Reason: ErrNotCached}
			}
		}
	}
	return true
}

// slotCaps returns each buffer's capacity for GET_INTO: cap(dst[i]), at
// most maxPayload, clipped so that no slot reaches into the next buffer
// (the server refuses overlapping slots). It reports false when buffers
// overlap within their lengths.
func slotCaps(dst [][]byte, offs []uint64, maxPayload int) ([]uint32, bool) {
	caps := make([]uint32, len(dst))
	order := make([]int, len(dst))
	for i := range dst {
		caps[i] = uint32(min(cap(dst[i]), maxPayload))
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(offs[a], offs[b]) })
	for k := 0; k+1 < len(order); k++ {
		i, next := order[k], order[k+1]
		if room := offs[next] - offs[i]; uint64(caps[i]) > room {
			if room < uint64(len(dst[i])) {
				return nil, false
			}
			caps[i] = uint32(room)
		}
	}
	return caps, true
}

// execOn sends reqs on cn only (no redial): a region is registered per
// connection.
func (c *Client) execOn(ctx context.Context, reqs []*request, cn *conn) {
	c.execOnce(ctx, reqs, cn)
}

// putFromRegion stores blocks whose payloads lie in reg. It reports false
// when the region path could not serve the call.
func (c *Client) putFromRegion(ctx context.Context, blob []byte, blocks []PutBlock, statuses []Status, reg *Region, offs []uint64) (bool, error) {
	cn, err := c.pick(ctx)
	if err != nil {
		return false, nil
	}
	if err := c.ensureRegistered(ctx, cn, reg); err != nil {
		c.regionFallback(err)
		return false, nil
	}
	lim := cn.limits
	var reqs []*request
	var chunks [][]int
	var cur []int
	tokens := 0
	for i := range blocks {
		ids := len(blocks[i].TokenIDs)
		if ids == 0 || ids > wire.MaxBlockTokens || int(blocks[i].validLength()) > ids {
			statuses[i] = wire.StatusKeyMismatch
			continue
		}
		if len(blocks[i].Data) > int(lim.MaxPayload) {
			statuses[i] = wire.StatusTooLarge
			continue
		}
		if len(cur) == int(lim.MaxBatch) || tokens+ids > wire.MaxRequestTokens {
			chunks, cur, tokens = append(chunks, cur), nil, 0
		}
		cur = append(cur, i)
		tokens += ids
	}
	if len(cur) > 0 {
		chunks = append(chunks, cur)
	}
	for _, idx := range chunks {
		r := &request{}
		r.op = wire.OpPutFrom
		r.enc = func(b []byte) []byte {
			o := make([]uint64, len(idx))
			for k, i := range idx {
				o[k] = offs[i]
			}
			b = wire.AppendPutFromHead(b, reg.id, o)
			b = wire.AppendPutHead(b, blob, len(idx))
			for _, i := range idx {
				pb := &blocks[i]
				b = wire.AppendPutBlock(b, &wire.PutBlock{Key: pb.Key, Parent: pb.Parent, ValidLength: pb.validLength(),
					Len: uint32(len(pb.Data)), Position: pb.Position, TokenIDs: pb.TokenIDs})
			}
			return b
		}
		reqs = append(reqs, r)
	}
	c.execOn(ctx, reqs, cn)
	if len(reqs) > 0 && reqs[0].err != nil && regionFailed(reqs[0].err) {
		cn.forgetRegion(reg)
		c.regionFallback(reqs[0].err)
		return false, nil
	}
	err = collectStatuses(reqs, func(j int) []int { return chunks[j] }, statuses, nil)
	for _, s := range statuses {
		if s == wire.StatusFault {
			cn.forgetRegion(reg)
			break
		}
	}
	return true, err
}

// regionFallback logs, once per cause, why a call went over the socket.
func (c *Client) regionFallback(err error) {
	msg := err.Error()
	c.regions.Lock()
	seen := c.regions.logged[msg]
	if !seen {
		if c.regions.logged == nil {
			c.regions.logged = make(map[string]bool)
		}
		if len(c.regions.logged) < 64 {
			c.regions.logged[msg] = true
		}
	}
	c.regions.Unlock()
	if !seen {
		c.cfg.Logger.Warn("gpucache client: registered region not used; going over the socket", "err", err)
	}
}
