package server

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/hot"
)

// Registered regions (protocol version 5, ADR 0026). A client on a Unix
// socket passes a descriptor of shared memory with REGISTER; the server
// maps it and GET_INTO / PUT_FROM copy once between a slab slot and the
// region. The region belongs to the connection: only its reader goroutine
// touches it, and the teardown unmaps it after the reader has stopped.
//
// A client can always change, truncate or unmap its side of the memory.
// The server's defences:
//   - every (offset, length) is checked against the mapping, without
//     overflow, before a byte is copied;
//   - a memfd must carry F_SEAL_SHRINK, so it can never shrink under the
//     mapping; a /dev/shm file cannot be sealed, so it is GUARDED;
//   - every copy runs with the runtime's panic-on-fault set (guardedCopy):
//     a SIGBUS from a truncated file (or a full tmpfs) becomes a FAULT
//     answer and drops the region, never a crash;
//   - a PUT_FROM block's seal is computed from the server's own slab
//     copy, so bytes changed during the copy cannot make it lie.

// Linux fcntl and statfs constants the syscall package lacks.
const (
	fGetSeals       = 1034 // F_GET_SEALS (F_LINUX_SPECIFIC_BASE + 10)
	fSealShrink     = 0x0002
	tmpfsMagic      = 0x01021994
	hugetlbfsMagic  = 0x958458f6
	regionProtFlags = syscall.PROT_READ | syscall.PROT_WRITE
)

// region is one mapped region of a connection.
type region struct {
	id   uint32
	mem  []byte
	mode wire.RegionMode
}

// regionBudget bounds registered bytes in total and per tenant.
type regionBudget struct {
	sync.Mutex
	total    int64            // guarded by the mutex
	byTenant map[string]int64 // guarded by the mutex
	count    int64            // regions mapped; guarded by the mutex
}

// chargeRegion reserves n registered bytes for tenant.
func (s *Server) chargeRegion(tenant string, n int64) error {
	b := &s.regions
	b.Lock()
	defer b.Unlock()
	if b.total+n > s.cfg.RegionBytes {
		return fmt.Errorf("the server's registered regions would pass region_bytes (%d + %d > %d)", b.total, n, s.cfg.RegionBytes)
	}
	if t := b.byTenant[tenant]; t+n > s.cfg.TenantRegionBytes {
		return fmt.Errorf("tenant %q's registered regions would pass tenant_region_bytes (%d + %d > %d)", tenant, t, n, s.cfg.TenantRegionBytes)
	}
	if b.byTenant == nil {
		b.byTenant = make(map[string]int64)
	}
	b.total += n
	b.byTenant[tenant] += n
	b.count++
	return nil
}

// releaseRegion gives back what chargeRegion took.
func (s *Server) releaseRegion(tenant string, n int64) {
	b := &s.regions
	b.Lock()
	defer b.Unlock()
	b.total -= n
	b.count--
	if b.byTenant[tenant] -= n; b.byTenant[tenant] <= 0 {
		delete(b.byTenant, tenant)
	}
}

// RegionUsage reports the registered bytes and regions mapped now, and
// tenant's registered bytes.
func (s *Server) RegionUsage(tenant string) (total, regions, tenantBytes int64) {
	s.regions.Lock()
	defer s.regions.Unlock()
	return s.regions.total, s.regions.count, s.regions.byTenant[tenant]
}

// regionErr is a REGION error.
func regionErr(format string, args ...any) error {
	return wire.Errorf(wire.CodeRegion, format, args...)
}

// claimFD takes the descriptor that came with a REGISTER frame, or -1 on a
// connection that is not a Unix socket.
func (c *conn) claimFD() (int, error) {
	fc, ok := c.nc.(*fdConn)
	if !ok {
		return -1, regionErr("regions need a Unix-socket connection (unix_listen); this one is %s", c.nc.LocalAddr().Network())
	}
	fd, err := fc.claim()
	if err != nil {
		return -1, regionErr("%v", err)
	}
	return fd, nil
}

// dropRegisterFD closes the descriptor of a REGISTER refused before its
// handler ran, so the next REGISTER does not take it.
func (c *conn) dropRegisterFD(h wire.Header) {
	if h.Op != wire.OpRegister {
		return
	}
	if fd, err := c.claimFD(); err == nil {
		syscall.Close(fd)
	}
}

// handleRegister maps the descriptor that came with the frame.
func (c *conn) handleRegister(h wire.Header, body []byte) error {
	fd, err := c.claimFD()
	if err != nil {
		return err
	}
	defer syscall.Close(fd) // the mapping holds the file
	var req wire.RegisterRequest
	if err := req.Decode(body); err != nil {
		return err
	}
	if _, dup := c.regions[req.Region]; dup {
		return regionErr("region %d is already registered on this connection", req.Region)
	}
	if len(c.regions) >= wire.MaxRegions {
		return regionErr("this connection holds %d regions, the most it may", wire.MaxRegions)
	}
	if req.Length > uint64(maxRegionLen) {
		return regionErr("region of %d bytes is larger than this server maps (%d)", req.Length, maxRegionLen)
	}
	mode, err := checkRegionFD(fd, int64(req.Length))
	if err != nil {
		c.s.stats.regionRefused.Add(1)
		return regionErr("region %d: %v", req.Region, err)
	}
	if err := c.s.chargeRegion(c.tenant, int64(req.Length)); err != nil {
		c.s.stats.regionRefused.Add(1)
		return regionErr("region %d: %v", req.Region, err)
	}
	mem, err := syscall.Mmap(fd, 0, int(req.Length), regionProtFlags, syscall.MAP_SHARED)
	if err != nil {
		c.s.releaseRegion(c.tenant, int64(req.Length))
		c.s.stats.regionRefused.Add(1)
		return regionErr("region %d: mmap: %v (the descriptor must be open for reading and writing)", req.Region, err)
	}
	if c.regions == nil {
		c.regions = make(map[uint32]*region)
	}
	c.regions[req.Region] = &region{id: req.Region, mem: mem, mode: mode}
	c.s.stats.regionsRegistered.Add(1)
	c.reply(h, &wire.RegisterResponse{Mode: mode})
	return nil
}

// maxRegionLen bounds one mapping (the address space is large, but a
// length must fit an int).
const maxRegionLen = 1 << 46

// checkRegionFD checks that fd is shareable memory of at least n bytes: a
// regular file on tmpfs or hugetlbfs. A memfd must be sealed against
// shrinking (SEALED); a file that cannot be sealed (a /dev/shm file) is
// GUARDED.
func checkRegionFD(fd int, n int64) (wire.RegionMode, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return 0, fmt.Errorf("fstat: %w", err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return 0, errors.New("the descriptor is not a regular file: pass a memfd or a file under /dev/shm")
	}
	var fs syscall.Statfs_t
	if err := syscall.Fstatfs(fd, &fs); err != nil {
		return 0, fmt.Errorf("fstatfs: %w", err)
	}
	if fs.Type != tmpfsMagic && uint32(fs.Type) != hugetlbfsMagic {
		return 0, fmt.Errorf("the file is not on tmpfs or hugetlbfs (filesystem magic %#x): pass a memfd or a file under /dev/shm", fs.Type)
	}
	if st.Size < n {
		return 0, fmt.Errorf("the file is %d bytes, shorter than the %d registered", st.Size, n)
	}
	seals, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), fGetSeals, 0)
	if errno == 0 && seals&fSealShrink != 0 {
		return wire.RegionSealed, nil
	}
	if isMemfd(fd) {
		return 0, errors.New("a memfd must be sealed against shrinking (memfd_create with MFD_ALLOW_SEALING, then fcntl F_ADD_SEALS F_SEAL_SHRINK)")
	}
	return wire.RegionGuarded, nil
}

// isMemfd reports whether fd is a memfd (its /proc link is "/memfd:...").
func isMemfd(fd int) bool {
	target, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	return err == nil && strings.HasPrefix(target, "/memfd:")
}

// handleUnregister unmaps a region. The requests before it on this
// connection have finished with it: they run in order on this goroutine.
func (c *conn) handleUnregister(h wire.Header, body []byte) error {
	var req wire.UnregisterRequest
	if err := req.Decode(body); err != nil {
		return err
	}
	if _, ok := c.regions[req.Region]; !ok {
		return regionErr("region %d is not registered on this connection", req.Region)
	}
	c.unmapRegion(req.Region)
	c.reply(h, emptyBody{})
	return nil
}

// unmapRegion unmaps region id and gives back its budget.
func (c *conn) unmapRegion(id uint32) {
	r := c.regions[id]
	delete(c.regions, id)
	syscall.Munmap(r.mem)
	c.s.releaseRegion(c.tenant, int64(len(r.mem)))
}

// unmapRegions unmaps every region of the connection; serve calls it once
// the reader has stopped.
func (c *conn) unmapRegions() {
	for id := range c.regions {
		c.unmapRegion(id)
	}
}

// lookupRegion returns region id of this connection.
func (c *conn) lookupRegion(id uint32) (*region, error) {
	r, ok := c.regions[id]
	if !ok {
		if c.peer == nil {
			return nil, regionErr("regions need a Unix-socket connection (unix_listen)")
		}
		return nil, regionErr("region %d is not registered on this connection (never registered, unregistered, or dropped after a fault)", id)
	}
	return r, nil
}

// regionFaulted drops a region whose copy faulted.
func (c *conn) regionFaulted(r *region, err error) {
	c.s.stats.regionFaults.Add(1)
	c.s.log.Warn("registered region faulted (the client truncated or shrank its file); region dropped",
		"tenant", c.tenant, "region", r.id, "mode", r.mode, "err", err, "pid", c.peer.pid)
	c.unmapRegion(r.id)
}

// guardedCopy copies src to dst with the runtime's panic-on-fault set, so
// a fault on a mapping (SIGBUS past the end of a truncated file) returns
// an error instead of crashing the process.
func guardedCopy(dst, src []byte, hook func()) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if v := recover(); v != nil {
			if f, ok := v.(interface{ Addr() uintptr }); ok {
				err = fmt.Errorf("memory fault at %#x", f.Addr())
				return
			}
			panic(v)
		}
	}()
	if hook != nil {
		hook()
	}
	copy(dst, src)
	return nil
}

// inRegion reports whether [off, off+n) lies in a region of size len,
// without overflow.
func inRegion(off uint64, n uint64, size int) bool {
	return off <= uint64(size) && n <= uint64(size)-off
}

// checkSlots checks GET_INTO's slots: inside the region, no two overlapping.
func (c *conn) checkSlots(r *region, slots []wire.Slot) error {
	for i, s := range slots {
		if !inRegion(s.Offset, uint64(s.Len), len(r.mem)) {
			return wire.Errorf(wire.CodeMalformed, "entry %d: [%d, +%d) is outside region %d of %d bytes", i, s.Offset, s.Len, r.id, len(r.mem))
		}
	}
	idx := c.slotOrder[:0]
	for i := range slots {
		idx = append(idx, int32(i))
	}
	slices.SortFunc(idx, func(a, b int32) int {
		oa, ob := slots[a].Offset, slots[b].Offset
		switch {
		case oa < ob:
			return -1
		case oa > ob:
			return 1
		}
		return 0
	})
	c.slotOrder = idx
	for k := 1; k < len(idx); k++ {
		p, q := slots[idx[k-1]], slots[idx[k]]
		if p.Len > 0 && q.Len > 0 && p.Offset+uint64(p.Len) > q.Offset {
			return wire.Errorf(wire.CodeMalformed, "entries %d and %d overlap in region %d", idx[k-1], idx[k], r.id)
		}
	}
	return nil
}

// getIntoBodyMax bounds a GET_INTO body.
func (c *conn) getIntoBodyMax() uint32 {
	return 4 + wire.MaxNamespaceLen + 8 + 4 + 4 + c.s.cfg.Limits.MaxBatch*wire.GetIntoEntrySize
}

// handleGetInto copies hits into the region, then answers the table.
func (c *conn) handleGetInto(h wire.Header, body []byte) error {
	req := &c.getIntoReq
	if err := req.Decode(body, c.s.cfg.Limits.MaxBatch); err != nil {
		return err
	}
	ns, st, err := c.resolveKeys(h.Op, req.Namespace, req.Keys)
	if err != nil {
		return err
	}
	r, err := c.lookupRegion(req.Region)
	if err != nil {
		return err
	}
	if err := c.checkSlots(r, req.Slots); err != nil {
		return err
	}
	if req.LeaseID != 0 && c.s.takeLease(hot.LeaseID(req.LeaseID), c.tenant) {
		defer c.s.store.ReleaseLease(hot.LeaseID(req.LeaseID))
	}
	unknown := st.unknown()
	if unknown {
		c.s.stats.modeRefused.Add(uint64(len(req.Keys)))
	}
	resp := wire.GetIntoResponse{Blocks: c.getIntoResp[:0]}
	var payload, hits uint64
	var fault error
	for i, key := range req.Keys {
		if unknown || fault != nil {
			resp.Blocks = append(resp.Blocks, c.missOrFault(fault))
			continue
		}
		v, ok := c.acquireVerified(ns, key)
		if !ok {
			resp.Blocks = append(resp.Blocks, wire.BlockMeta{Status: wire.StatusMiss})
			continue
		}
		n := len(v.Bytes)
		if uint64(n) > uint64(req.Slots[i].Len) {
			c.s.store.Release(v)
			resp.Blocks = append(resp.Blocks, wire.BlockMeta{Status: wire.StatusTooLarge, Len: uint32(n)})
			continue
		}
		off := req.Slots[i].Offset
		fault = guardedCopy(r.mem[off:off+uint64(n)], v.Bytes, c.s.cfg.Hooks.RegionCopy)
		c.s.store.Release(v)
		if fault != nil {
			resp.Blocks = append(resp.Blocks, wire.BlockMeta{Status: wire.StatusFault})
			continue
		}
		resp.Blocks = append(resp.Blocks, wire.BlockMeta{Status: wire.StatusHit, Len: uint32(n)})
		payload += uint64(n)
		hits++
	}
	c.getIntoResp = resp.Blocks
	if fault != nil {
		c.regionFaulted(r, fault)
	}
	c.s.stats.blocksHit.Add(hits)
	c.s.stats.blocksMiss.Add(uint64(len(req.Keys)) - hits)
	c.s.stats.bytesOut.Add(payload)
	c.s.stats.regionBytesOut.Add(payload)
	c.sess.counters.blocksHit.Add(hits)
	c.sess.counters.blocksMiss.Add(uint64(len(req.Keys)) - hits)
	c.sess.counters.bytesOut.Add(payload)
	c.chargeBytes(payload)
	c.reply(h, &resp)
	return nil
}

// missOrFault is the answer for an entry not read: MISS, or FAULT after
// the region faulted.
func (c *conn) missOrFault(fault error) wire.BlockMeta {
	if fault != nil {
		return wire.BlockMeta{Status: wire.StatusFault}
	}
	return wire.BlockMeta{Status: wire.StatusMiss}
}

// acquireVerified pins the block (ns, key) from the hot tier, refilling a
// miss from below (acquireOrRefill) and verifying the hot seal, as GET
// does.
func (c *conn) acquireVerified(ns identity.NamespaceDigest, key identity.BlockKey) (hot.View, bool) {
	v, ok := c.acquireOrRefill(ns, key)
	if ok && c.s.sealer != nil {
		if id, err := c.s.sealer.verify(c.s.store, v, ns, key); err != nil {
			c.sealFailed(v, ns, key, id, err)
			ok = false
		}
	}
	return v, ok
}

// putFromBodyMax bounds a PUT_FROM or PUT_OPAQUE_FROM body: the offsets
// and the larger of a PUT and a PUT_OPAQUE table.
func (c *conn) putFromBodyMax() uint32 {
	return 8 + 8*c.s.cfg.Limits.MaxBatch + max(c.putTableMax(), c.putOpaqueTableMax())
}

// handlePutFrom stores blocks copied from a region: PUT_FROM and
// PUT_OPAQUE_FROM.
func (c *conn) handlePutFrom(h wire.Header) error {
	if h.BodyLen > c.putFromBodyMax() {
		return c.skipThenError(h, int64(h.BodyLen), wire.Errorf(wire.CodeBatchTooLarge, "%s body of %d bytes exceeds %d", h.Op, h.BodyLen, c.putFromBodyMax()))
	}
	body, err := c.readBody(h.BodyLen)
	if err == nil {
		err = c.chargeTable(h.BodyLen)
		if err != nil {
			return c.skipThenError(h, 0, err)
		}
	}
	if err != nil {
		if errors.As(err, new(*wire.Error)) {
			return c.skipThenError(h, int64(h.BodyLen)-int64(len(body)), err)
		}
		c.release()
		return err
	}
	if err := c.putFrom(h, body); err != nil {
		c.sendError(h, err)
	}
	return nil
}

// fromTable is what the region path needs of a PUT_FROM or
// PUT_OPAQUE_FROM request: the region, the offsets, the table's namespace
// and, per entry, its key, its length and how to store it from src.
type fromTable struct {
	region  uint32
	offsets []uint64
	ns      []byte
	n       int
	key     func(i int) wire.Key
	length  func(i int) uint32
	store   func(ns identity.NamespaceDigest, i int, src []byte) (wire.Status, error)
}

// decodeFrom decodes a PUT_FROM or PUT_OPAQUE_FROM body.
func (c *conn) decodeFrom(op wire.Opcode, body []byte) (fromTable, error) {
	maxBatch := c.s.cfg.Limits.MaxBatch
	if op == wire.OpPutOpaqueFrom {
		req := &c.putOpaqueFromReq
		if err := req.Decode(body, maxBatch); err != nil {
			return fromTable{}, err
		}
		blocks := req.Put.Blocks
		return fromTable{region: req.Region, offsets: req.Offsets, ns: req.Put.Namespace, n: len(blocks),
			key:    func(i int) wire.Key { return blocks[i].Key },
			length: func(i int) uint32 { return blocks[i].Len },
			store: func(ns identity.NamespaceDigest, i int, src []byte) (wire.Status, error) {
				return c.putOpaqueFromOne(ns, &blocks[i], src)
			}}, nil
	}
	req := &c.putFromReq
	if err := req.Decode(body, maxBatch); err != nil {
		return fromTable{}, err
	}
	blocks := req.Put.Blocks
	return fromTable{region: req.Region, offsets: req.Offsets, ns: req.Put.Namespace, n: len(blocks),
		key:    func(i int) wire.Key { return blocks[i].Key },
		length: func(i int) uint32 { return blocks[i].Len },
		store: func(ns identity.NamespaceDigest, i int, src []byte) (wire.Status, error) {
			s, fault := c.putFromOne(ns, &blocks[i], src)
			if s == wire.StatusStored || s == wire.StatusExists {
				c.s.dir.Publish(c.tenant, ns, blocks[i].Key) // as PUT (ADR 0024)
			}
			return s, fault
		}}, nil
}

// putFrom executes a PUT_FROM or PUT_OPAQUE_FROM whose body has been read.
func (c *conn) putFrom(h wire.Header, body []byte) error {
	t, err := c.decodeFrom(h.Op, body)
	if err != nil {
		return err
	}
	ns, st, err := c.resolve(h.Op, t.ns, t.n, t.key)
	if err != nil {
		return err
	}
	r, err := c.lookupRegion(t.region)
	if err != nil {
		return err
	}
	var total uint64
	for i := range t.n {
		if !inRegion(t.offsets[i], uint64(t.length(i)), len(r.mem)) {
			return wire.Errorf(wire.CodeMalformed, "entry %d: [%d, +%d) is outside region %d of %d bytes", i, t.offsets[i], t.length(i), r.id, len(r.mem))
		}
		total += uint64(t.length(i))
	}
	if err := c.allowBytes(total); err != nil {
		return err
	}
	if st.storesNothing() {
		return c.refusePut(h, 0, t.n)
	}
	var fault error
	var stored uint64
	resp, _ := c.putEach(t.n, func(i int) (wire.Status, uint32, error) {
		n := t.length(i)
		if fault != nil {
			return wire.StatusFault, n, nil
		}
		var s wire.Status
		s, fault = t.store(ns, i, r.mem[t.offsets[i]:t.offsets[i]+uint64(n)])
		if s == wire.StatusStored {
			stored += uint64(n)
		}
		return s, n, nil
	})
	if fault != nil {
		c.regionFaulted(r, fault)
	}
	c.s.stats.regionBytesIn.Add(stored)
	c.reply(h, &resp)
	return nil
}

// putFromOne stores one token-chain block whose bytes are src, in the
// region, once its key is verified against its identity.
func (c *conn) putFromOne(ns identity.NamespaceDigest, pb *wire.PutBlock, src []byte) (wire.Status, error) {
	id, ok := c.identityOf(ns, pb)
	if !ok {
		c.s.stats.keyMismatch.Add(1)
		return wire.StatusKeyMismatch, nil
	}
	return c.copyIn(ns, pb.Key, pb.Parent, c.blockMeta(pb), src, id)
}

// putOpaqueFromOne stores one opaque-key block whose bytes are src, in
// the region, once its key is verified against its name.
func (c *conn) putOpaqueFromOne(ns identity.NamespaceDigest, ob *wire.OpaqueBlock, src []byte) (wire.Status, error) {
	if identity.OpaqueKey(ns, ob.Name) != ob.Key {
		c.s.stats.keyMismatch.Add(1)
		return wire.StatusKeyMismatch, nil
	}
	// An opaque block has no chain: no parent, position 0, no tokens.
	return c.copyIn(ns, ob.Key, identity.BlockKey{}, hot.BlockMeta{Tenant: c.tenant}, src,
		identity.CacheIdentity{Namespace: c.ns, Opaque: ob.Name})
}

// copyIn stores a verified block from src: a slot reserved, src copied
// into it (fault-guarded), the seal computed from the slot, then
// committed and announced to Config.Lower with identity id. A fault answers
// FAULT and returns it.
func (c *conn) copyIn(ns identity.NamespaceDigest, key, parent identity.BlockKey, meta hot.BlockMeta, src []byte, id identity.CacheIdentity) (wire.Status, error) {
	if uint64(len(src)) > uint64(c.s.cfg.Limits.MaxPayload) {
		return wire.StatusTooLarge, nil
	}
	res, err := c.s.store.ReserveBlock(ns, key, parent, meta, len(src))
	if h := c.s.cfg.Hooks.Reserved; h != nil {
		h(c.tenant, err)
	}
	if err != nil {
		return reserveStatus(err), nil
	}
	if err := guardedCopy(res.Buf, src, c.s.cfg.Hooks.RegionCopy); err != nil {
		c.s.store.Abort(res)
		return wire.StatusFault, err
	}
	if st := c.sealReserved(res, ns, key); st != wire.StatusStored {
		return st, nil
	}
	c.s.store.Commit(res)
	c.s.stored(id, ns, key)
	return wire.StatusStored, nil
}

// regionStats are the region counters Stats reports.
func (s *Server) regionStats() []wire.StatEntry {
	total, count, _ := s.RegionUsage("")
	return []wire.StatEntry{
		{Name: "regions_registered", Value: s.stats.regionsRegistered.Load()},
		{Name: "regions_mapped", Value: uint64(max(count, 0))},
		{Name: "region_bytes_mapped", Value: uint64(max(total, 0))},
		{Name: "region_refused", Value: s.stats.regionRefused.Load()},
		{Name: "region_faults", Value: s.stats.regionFaults.Load()},
		{Name: "region_bytes_in", Value: s.stats.regionBytesIn.Load()},
		{Name: "region_bytes_out", Value: s.stats.regionBytesOut.Load()},
	}
}

// emptyBody is a response without a body.
type emptyBody struct{}

func (emptyBody) AppendTo(b []byte) []byte { return b }
