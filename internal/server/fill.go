package server

import (
	"encoding/binary"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/directory"
	"github.com/gpucache/gpucache/internal/reqbuf"
)

// Single-flight fills. ACQUIRE asks the directory, per key, for a hit, the
// lead or a place among the waiters; the directory re-checks the hot tier
// under its own lock, so a fill that finished a moment ago is a hit, not a
// second fill. A leader publishes with FILL_COMMIT: the block goes into the
// hot tier first, and only then does the directory tell the waiters, so a
// Finished notice always finds the block. Waiters long-poll with WAIT,
// which is answered from its own goroutine so the connection keeps reading.

// joined is a fill the session joined (ACQUIRE JOINED) and when, for the
// fill-wait histogram.
type joined struct {
	w  *directory.Waiter
	at time.Time
}

// maxWait caps a WAIT's timeout.
const maxWait = 30 * time.Second

// fillState is a connection's part in fills: the fills it joined, and the
// WAITs parked on them.
type fillState struct {
	mu      sync.Mutex
	waiters map[uint64]joined // guarded by mu; by fill id
	// leads are the turns this session was given (ACQUIRE LEAD, WAIT
	// PROMOTED); FILL_COMMIT and FILL_ABORT accept no other token, so a
	// session cannot end another session's (or tenant's) turn by guessing.
	leads map[wire.FillToken]struct{} // guarded by mu
	// prune is the size of leads at which the next new lead first drops
	// the turns that ended without this session (a PUT published the
	// block, the deadline passed, an epoch fenced them): so leads stays
	// within twice the session's live turns, and at least minPrune.
	prune int            // guarded by mu
	done  chan struct{}  // closed when the reader stops
	wg    sync.WaitGroup // parked WAITs
}

func (c *conn) handleAcquire(h wire.Header, body []byte) error {
	var req wire.AcquireRequest
	if err := req.Decode(body, c.s.cfg.Limits.MaxBatch); err != nil {
		return err
	}
	ns, st, err := c.resolveKeys(h.Op, req.Namespace, req.Keys)
	if err != nil {
		return err
	}
	resp := wire.AcquireResponse{Entries: make([]wire.AcquireEntry, len(req.Keys))}
	one := make([]identity.BlockKey, 1)
	if st.storesNothing() || (st != nil && st.takesNoFill(c.s.cfg.Cluster.Self())) {
		c.refuseAcquire(st, ns, req.Keys, resp.Entries)
		c.reply(h, &resp)
		return nil
	}
	for i, k := range req.Keys {
		key := k
		one[0] = key
		res := c.s.dir.Acquire(directory.Request{Key: key, Namespace: ns, Tenant: c.tenant, Owner: c.id},
			func() bool { hits, _, _ := c.s.store.Lookup(ns, one, 0, false); return hits == 1 })
		e := &resp.Entries[i]
		switch res.Outcome {
		case directory.Hit:
			e.Outcome = wire.AcquireHit
		case directory.Lead:
			e.Outcome, e.Token = wire.AcquireLead, wireToken(res.Token)
			c.fills.mu.Lock()
			c.fills.leads[e.Token] = struct{}{}
			c.pruneLeadsLocked()
			c.fills.mu.Unlock()
			select { // a new deadline: let expireLoop look again
			case c.s.expireKick <- struct{}{}:
			default:
			}
		case directory.Joined:
			e.Outcome, e.Token = wire.AcquireJoined, wire.FillToken{Fill: uint64(res.Waiter.Fill())}
			c.fills.mu.Lock()
			if old := c.fills.waiters[uint64(res.Waiter.Fill())]; old.w != nil {
				old.w.Cancel() // the same session joined the same fill twice: keep one place
			}
			c.fills.waiters[uint64(res.Waiter.Fill())] = joined{w: res.Waiter, at: time.Now()}
			c.fills.mu.Unlock()
			if h := c.s.cfg.Hooks.Joined; h != nil {
				h()
			}
		default:
			e.Outcome = wire.AcquireDenied
		}
	}
	c.reply(h, &resp)
	return nil
}

// ownedCheck accepts a token only if this session was given it and the
// directory still holds it live.
func (c *conn) ownedCheck(t wire.FillToken) error {
	c.fills.mu.Lock()
	_, ok := c.fills.leads[t]
	c.fills.mu.Unlock()
	if !ok {
		return directory.ErrNotLeader
	}
	err := c.s.dir.Check(c.dirToken(t))
	if err != nil {
		c.dropLead(t)
	}
	return err
}

// minPrune is the smallest size of a session's leads that is pruned.
const minPrune = 1024

// pruneLeadsLocked drops the session's turns that are no longer live once
// leads reaches its prune size. Requires c.fills.mu.
func (c *conn) pruneLeadsLocked() {
	if len(c.fills.leads) < max(c.fills.prune, minPrune) {
		return
	}
	for t := range c.fills.leads {
		if c.s.dir.Check(c.dirToken(t)) != nil {
			delete(c.fills.leads, t)
		}
	}
	c.fills.prune = 2 * len(c.fills.leads)
}

func (c *conn) dropLead(t wire.FillToken) {
	c.fills.mu.Lock()
	delete(c.fills.leads, t)
	c.fills.mu.Unlock()
}

func wireToken(t directory.Token) wire.FillToken {
	return wire.FillToken{Fill: uint64(t.Fill), Epoch: uint64(t.Epoch), Turn: t.Turn}
}

func (c *conn) dirToken(t wire.FillToken) directory.Token {
	return directory.Token{Shard: c.s.cfg.Shard, Fill: directory.FillID(t.Fill), Epoch: directory.Epoch(t.Epoch), Turn: t.Turn}
}

// tokenStatus maps a directory error to a block status.
func tokenStatus(err error) wire.Status {
	if errors.Is(err, directory.ErrStaleEpoch) {
		return wire.StatusFenced
	}
	return wire.StatusNotLeader
}

// handleFillCommit reads a FILL_COMMIT: like PUT, each payload goes straight
// into a slab slot, then the directory releases the waiters.
func (c *conn) handleFillCommit(h wire.Header) error {
	table, rest, ok, err := c.readTable(h, c.fillTableMax())
	if !ok {
		return err
	}
	req := &c.fillReq // reused, like putReq
	total, derr := req.Decode(table, c.s.cfg.Limits.MaxBatch)
	if derr == nil {
		derr = wire.CheckPayload(total, h.BodyLen, uint32(len(table)))
	}
	var ns identity.NamespaceDigest
	if derr == nil {
		ns, derr = c.namespace(h.Op, req.Namespace)
	}
	if derr == nil {
		derr = c.allowBytes(total)
	}
	if derr != nil {
		return c.skipThenError(h, rest, derr)
	}
	resp := wire.StatusResponse{Statuses: make([]wire.Status, len(req.Blocks))}
	var stored uint64
	for i := range req.Blocks {
		fb := &req.Blocks[i]
		tok := c.dirToken(fb.Token)
		if err := c.ownedCheck(fb.Token); err != nil {
			resp.Statuses[i] = tokenStatus(err)
			if err := c.skip(int64(fb.Len)); err != nil {
				c.release()
				return err
			}
			continue
		}
		st, err := c.putOne(ns, &wire.PutBlock{Key: fb.Key, Parent: fb.Parent, ValidLength: fb.ValidLength, Len: fb.Len,
			Position: fb.Position, TokenIDs: fb.TokenIDs})
		if err != nil {
			// The stream broke mid-payload: the turn passes on.
			c.dropLead(fb.Token)
			c.s.dir.Fail(tok)
			c.release()
			return err
		}
		switch st {
		case wire.StatusStored, wire.StatusExists:
			c.dropLead(fb.Token)
			if err := c.s.dir.Finish(tok); err != nil {
				st = tokenStatus(err)
			} else if st == wire.StatusStored {
				stored += uint64(fb.Len)
			}
		default: // no space, too large, key mismatch: the next waiter tries
			c.dropLead(fb.Token)
			c.s.dir.Fail(tok)
		}
		resp.Statuses[i] = st
	}
	c.s.stats.bytesIn.Add(stored)
	c.reply(h, &resp)
	return nil
}

// fillTableMax bounds a FILL_COMMIT table (reqbuf.FillTableMax), as
// putTableMax a PUT's.
func (c *conn) fillTableMax() uint32 { return reqbuf.FillTableMax(c.s.cfg.Limits) }

// readTable reads the u32 table length and the table of a body that
// carries payload (PUT, FILL_COMMIT). When ok is false the request has been
// answered (or the stream broke, err != nil) and the caller stops; rest is
// the body left after the table.
//
// The table's first field, the namespace, is read and checked (tenant,
// ACL: the rights op needs) before the rest of the table: a session that
// may not write never makes the server read, or size a buffer for, a
// table it declares. The rest then grows the connection's buffer as it
// arrives, within the request-buffer budget (connbuf.go, internal/reqbuf); a table that
// cannot get budget is answered RATE_LIMITED and skipped.
func (c *conn) readTable(h wire.Header, max uint32) (table []byte, rest int64, ok bool, err error) {
	if h.BodyLen < 4 {
		err := c.skipThenError(h, int64(h.BodyLen), wire.Errorf(wire.CodeMalformed, "%s body of %d bytes has no table", h.Op, h.BodyLen))
		return nil, 0, false, err
	}
	var lb [4]byte
	if _, err := io.ReadFull(c.br, lb[:]); err != nil {
		c.release()
		return nil, 0, false, err
	}
	rest = int64(h.BodyLen) - 4
	metaLen, err := wire.MetaLen(lb, h.BodyLen)
	if err == nil && metaLen > max {
		err = wire.Errorf(wire.CodeBatchTooLarge, "%s table of %d bytes exceeds %d", h.Op, metaLen, max)
	}
	if err != nil {
		return nil, 0, false, c.skipThenError(h, rest, err)
	}
	refuse := func(read int, err error) (bool, error) {
		if errors.As(err, new(*wire.Error)) {
			return false, c.skipThenError(h, rest-int64(read), err)
		}
		c.release()
		return false, err
	}
	// The namespace: u32 length, then the blob.
	nsEnd := min(int(metaLen), 4)
	table, err = c.readGrow(0, nsEnd)
	if err != nil {
		ok, err = refuse(len(table), err)
		return nil, 0, ok, err
	}
	if nsEnd == 4 {
		n := binary.LittleEndian.Uint32(table)
		if n > wire.MaxNamespaceLen || uint64(n) > uint64(metaLen)-4 {
			return nil, 0, false, c.skipThenError(h, rest-4,
				wire.Errorf(wire.CodeMalformed, "%s namespace of %d bytes does not fit the %d-byte table (at most %d)", h.Op, n, metaLen, wire.MaxNamespaceLen))
		}
		nsEnd += int(n)
		if table, err = c.readGrow(4, int(n)); err != nil {
			ok, err = refuse(len(table), err)
			return nil, 0, ok, err
		}
		if _, err := c.namespace(h.Op, table[4:nsEnd]); err != nil {
			return nil, 0, false, c.skipThenError(h, rest-int64(nsEnd), err)
		}
	}
	if table, err = c.readGrow(nsEnd, int(metaLen)-nsEnd); err != nil {
		ok, err = refuse(len(table), err)
		return nil, 0, ok, err
	}
	// Decoding allocates about as much again (token ids, entries).
	if err := c.chargeTable(metaLen); err != nil {
		return nil, 0, false, c.skipThenError(h, rest-int64(metaLen), err)
	}
	return table, rest - int64(metaLen), true, nil
}

func (c *conn) handleFillAbort(h wire.Header, body []byte) error {
	var req wire.FillAbortRequest
	if err := req.Decode(body, c.s.cfg.Limits.MaxBatch); err != nil {
		return err
	}
	if _, err := c.namespace(h.Op, req.Namespace); err != nil {
		return err
	}
	resp := wire.StatusResponse{Statuses: make([]wire.Status, len(req.Tokens))}
	for i, t := range req.Tokens {
		resp.Statuses[i] = wire.StatusAborted
		if err := c.ownedCheck(t); err != nil {
			resp.Statuses[i] = tokenStatus(err)
			continue
		}
		c.dropLead(t)
		if err := c.s.dir.Fail(c.dirToken(t)); err != nil {
			resp.Statuses[i] = tokenStatus(err)
		}
	}
	c.reply(h, &resp)
	return nil
}

// handleWait parks a WAIT on its own goroutine. The in-flight slot stays
// taken until the answer is written, so parked WAITs count against
// MaxInFlight.
func (c *conn) handleWait(h wire.Header, body []byte) error {
	var req wire.WaitRequest
	if err := req.Decode(body, c.s.cfg.Limits.MaxBatch); err != nil {
		return err
	}
	if _, err := c.namespace(h.Op, req.Namespace); err != nil {
		return err
	}
	charged, err := c.chargeQueued(reqbuf.WaitCost(len(req.Fills)))
	if err != nil {
		return err
	}
	timeout := min(time.Duration(req.TimeoutMillis)*time.Millisecond, maxWait)
	ws := make([]joined, len(req.Fills))
	c.fills.mu.Lock()
	for i, f := range req.Fills {
		ws[i] = c.fills.waiters[f]
	}
	c.fills.mu.Unlock()
	c.fills.wg.Add(1)
	go func() {
		defer c.fills.wg.Done()
		resp := wire.WaitResponse{Entries: make([]wire.WaitEntry, len(ws))}
		timer := time.NewTimer(timeout)
		defer timer.Stop()
		expired := false
		for i, j := range ws {
			w := j.w
			e := &resp.Entries[i]
			if w == nil {
				e.Kind = wire.NoticeFailed // not a fill this session waits on: compute it
				continue
			}
			if expired {
				e.Kind = wire.NoticePending
				continue
			}
			took := func(n directory.Notice) {
				*e = waitEntry(n)
				c.s.lat.fillWait(fillAcquire, noticeOutcome(n.Kind), time.Since(j.at))
				c.fills.mu.Lock()
				if c.fills.waiters[uint64(w.Fill())].w == w {
					delete(c.fills.waiters, uint64(w.Fill()))
				}
				if e.Kind == wire.NoticePromoted {
					c.fills.leads[e.Token] = struct{}{}
				}
				c.fills.mu.Unlock()
			}
			// A notice already there wins over an expired timer (select
			// picks at random among ready cases, and a zero timeout is a
			// poll).
			select {
			case n := <-w.C():
				took(n)
				continue
			default:
			}
			select {
			case n := <-w.C():
				took(n)
			case <-timer.C:
				expired = true
				e.Kind = wire.NoticePending
			case <-c.fills.done:
				expired = true
				e.Kind = wire.NoticePending
			}
		}
		r := newResponse(h.Op)
		r.charged = charged // the writer gives it back
		r.meta = resp.AppendTo(r.meta)
		r.finish(h, 0, 0)
		c.sendAsync(r)
	}()
	return nil
}

// noticeOutcome is how a fill wait that took a notice of kind k ended.
func noticeOutcome(k directory.NoticeKind) fillOutcome {
	switch k {
	case directory.Finished:
		return fillFinished
	case directory.Promoted:
		return fillPromoted
	}
	return fillFailed
}

func waitEntry(n directory.Notice) wire.WaitEntry {
	switch n.Kind {
	case directory.Finished:
		return wire.WaitEntry{Kind: wire.NoticeFinished}
	case directory.Fenced:
		return wire.WaitEntry{Kind: wire.NoticeFenced}
	case directory.Promoted:
		return wire.WaitEntry{Kind: wire.NoticePromoted, Token: wireToken(n.Token)}
	}
	return wire.WaitEntry{Kind: wire.NoticeFailed}
}

// sendAsync queues a response from a goroutine other than the reader. It is
// never written inline, and the reader waits for every such goroutine before
// it closes the queue.
func (c *conn) sendAsync(r *response) {
	c.w.pending.Add(1)
	c.out <- r
}

// leaveFills ends the connection's part in fills: parked WAITs answer what
// they have, its waiters withdraw and the fills it leads pass to their next
// waiters.
func (c *conn) leaveFills() {
	close(c.fills.done)
	c.fills.wg.Wait()
	c.fills.mu.Lock()
	for _, j := range c.fills.waiters {
		j.w.Cancel()
	}
	clear(c.fills.waiters)
	clear(c.fills.leads)
	c.fills.mu.Unlock()
	c.s.dir.LeaveOwner(c.id)
}

// expireLoop fails over leaders that passed their fill deadline.
func (s *Server) expireLoop() {
	defer close(s.expireDone)
	for {
		wait := time.Second
		if d, ok := s.dir.NextDeadline(); ok {
			wait = min(max(time.Until(d), time.Millisecond), time.Second)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
			if n := s.dir.Expire(); n > 0 {
				s.log.Warn("fill leaders missed their deadline; turns passed on", "fills", n)
			}
		case <-s.expireKick:
			t.Stop()
		case <-s.done:
			t.Stop()
			return
		}
	}
}
