package client

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/gpucache/gpucache/api/wire"
)

// FillFunc computes the payloads of the chain blocks at the given indices
// (the KV cache an engine would otherwise recompute) and returns them in
// the same order.
type FillFunc func(ctx context.Context, idx []int) ([][]byte, error)

// FillReport says how GetOrFill obtained each block.
type FillReport struct {
	Hits     int // read from the cache
	Led      int // computed here as the fill's leader and published
	Joined   int // computed by another caller; read after its Finished notice
	Promoted int // this caller took over a failed leader's turn
	Local    int // computed here without coordination (denied, failed, or degraded)
	Rounds   int // ACQUIRE rounds
}

// maxFillRounds bounds the ACQUIRE rounds of one GetOrFill (a round repeats
// only after a fence or a block evicted between notice and read).
const maxFillRounds = 4

// waitSlice is the longest single WAIT; GetOrFill waits in slices until its
// context ends.
const waitSlice = 5 * time.Second

// GetOrFill returns the payload of every block of a chain. Blocks that are
// cached are read. Of the blocks that are not, this caller computes (with
// fill) only those it leads: when several callers of the same tenant miss
// on the same blocks at once, each block is computed once, by its leader,
// and the others wait for a notice and read it. If the leader fails or
// disconnects, a waiter takes over its turn.
//
// keys is a chain from Chain (block i's parent is block i-1); each block's
// valid length is ns.Layout.BlockTokens. Any failure of the cache degrades
// to computing the affected blocks locally: GetOrFill returns an error only
// if fill does, or if ctx ends.
func (c *Client) GetOrFill(ctx context.Context, ns Namespace, keys []BlockKey, fill FillFunc) ([][]byte, FillReport, error) {
	out := make([][]byte, len(keys))
	var rep FillReport
	blob, err := c.nsBlob(ns)
	if err != nil {
		return nil, rep, err
	}
	f := &filler{c: c, ns: ns, blob: blob, keys: keys, fill: fill, out: out, rep: &rep}
	todo := make([]int, len(keys))
	for i := range todo {
		todo[i] = i
	}
	for len(todo) > 0 {
		if err := ctx.Err(); err != nil {
			return nil, rep, ctxError(ctx)
		}
		rep.Rounds++
		if rep.Rounds > maxFillRounds {
			if err := f.local(ctx, todo); err != nil {
				return nil, rep, err
			}
			break
		}
		if todo, err = f.round(ctx, todo); err != nil {
			return nil, rep, err
		}
	}
	return out, rep, nil
}

// filler is the state of one GetOrFill.
type filler struct {
	c    *Client
	ns   Namespace
	blob []byte
	keys []BlockKey
	fill FillFunc
	out  [][]byte
	rep  *FillReport
}

// round runs one ACQUIRE round over todo and returns the blocks to retry.
func (f *filler) round(ctx context.Context, todo []int) (again []int, err error) {
	// One connection for the round: the server ties waiters and leaders to
	// the connection that acquired them.
	cn, err := f.c.pick(ctx)
	if err != nil {
		return nil, f.local(ctx, todo)
	}
	entries, err := f.acquire(ctx, cn, todo)
	if err != nil {
		return nil, f.local(ctx, todo)
	}
	var hits, denied, joined []int
	var leads []lead
	var fills []uint64
	for k, i := range todo {
		e := entries[k]
		switch e.Outcome {
		case wire.AcquireHit:
			hits = append(hits, i)
		case wire.AcquireLead:
			leads = append(leads, lead{i, e.Token})
		case wire.AcquireJoined:
			joined = append(joined, i)
			fills = append(fills, e.Token.Fill)
		default:
			denied = append(denied, i)
		}
	}
	// Lead first: others may be waiting on these blocks.
	if err := f.lead(ctx, cn, leads, &f.rep.Led); err != nil {
		return nil, err
	}
	if err := f.local(ctx, denied); err != nil {
		return nil, err
	}
	again = f.read(ctx, hits, &f.rep.Hits)
	for len(joined) > 0 {
		notices, err := f.wait(ctx, cn, fills)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctxError(ctx)
			}
			// The connection that holds our places failed: compute.
			return again, f.local(ctx, joined)
		}
		var finished, failed, stillJoined []int
		var promoted []lead
		var stillFills []uint64
		for k, i := range joined {
			switch n := notices[k]; n.Kind {
			case wire.NoticeFinished:
				finished = append(finished, i)
			case wire.NoticePromoted:
				promoted = append(promoted, lead{i, n.Token})
			case wire.NoticeFenced:
				again = append(again, i)
			case wire.NoticePending:
				stillJoined, stillFills = append(stillJoined, i), append(stillFills, fills[k])
			default:
				failed = append(failed, i)
			}
		}
		if err := f.lead(ctx, cn, promoted, &f.rep.Promoted); err != nil {
			return nil, err
		}
		if err := f.local(ctx, failed); err != nil {
			return nil, err
		}
		again = append(again, f.read(ctx, finished, &f.rep.Joined)...)
		joined, fills = stillJoined, stillFills
	}
	return again, nil
}

type lead struct {
	i   int
	tok wire.FillToken
}

func (f *filler) acquire(ctx context.Context, cn *conn, todo []int) ([]wire.AcquireEntry, error) {
	var entries []wire.AcquireEntry
	batch := int(cn.limits.MaxBatch)
	for off := 0; off < len(todo); off += batch {
		idx := todo[off:min(off+batch, len(todo))]
		r := &request{}
		r.op = wire.OpAcquire
		r.enc = func(b []byte) []byte {
			b = appendBlob(b, f.blob)
			b = binary.LittleEndian.AppendUint32(b, uint32(len(idx)))
			for _, i := range idx {
				b = append(b, f.keys[i][:]...)
			}
			return b
		}
		f.c.exec(ctx, []*request{r}, cn)
		if r.err != nil {
			return nil, r.err
		}
		var resp wire.AcquireResponse
		if err := resp.Decode(r.cl.body, uint32(len(idx))); err != nil || len(resp.Entries) != len(idx) {
			return nil, fmt.Errorf("%w: ACQUIRE answer: %d entries for %d keys, %v", ErrProtocol, len(resp.Entries), len(idx), err)
		}
		entries = append(entries, resp.Entries...)
	}
	return entries, nil
}

// lead computes the led blocks and publishes them with FILL_COMMIT. If fill
// fails, the turns are handed on with FILL_ABORT.
func (f *filler) lead(ctx context.Context, cn *conn, leads []lead, count *int) error {
	if len(leads) == 0 {
		return nil
	}
	idx := make([]int, len(leads))
	for k, l := range leads {
		idx[k] = l.i
	}
	data, err := f.compute(ctx, idx)
	if err != nil {
		f.abort(ctx, cn, leads)
		return err
	}
	*count += len(leads)
	// Publish. The payloads are ours already; a failed commit only means
	// the others will compute too, so its errors are not returned.
	lim := cn.limits
	for off := 0; off < len(leads); {
		end, bytes := off, 0
		for end < len(leads) && end-off < int(lim.MaxBatch) &&
			uint64(bytes+len(data[end])+4096+(end-off+1)*(20+2*wire.KeySize+8)) <= uint64(lim.MaxFrame) {
			bytes += len(data[end])
			end++
		}
		if end == off { // a block too large for any frame: leave it to others
			f.abort(ctx, cn, leads[off:off+1])
			off++
			continue
		}
		f.commit(ctx, cn, leads[off:end], data[off:end])
		off = end
	}
	return nil
}

func (f *filler) commit(ctx context.Context, cn *conn, leads []lead, data [][]byte) {
	r := &request{}
	r.op = wire.OpFillCommit
	r.payload = data
	for _, d := range data {
		r.payloadLen += len(d)
	}
	bt := f.ns.Layout.BlockTokens
	r.enc = func(b []byte) []byte {
		var req wire.FillCommitRequest
		req.Namespace = f.blob
		req.Blocks = make([]wire.FillBlock, len(leads))
		for k, l := range leads {
			fb := &req.Blocks[k]
			fb.Token, fb.Key, fb.Tokens, fb.Len = l.tok, wire.Key(f.keys[l.i]), bt, uint32(len(data[k]))
			if l.i > 0 {
				fb.Parent = wire.Key(f.keys[l.i-1])
			}
		}
		return wire.AppendMeta(b, req.AppendTo(nil))
	}
	f.c.exec(ctx, []*request{r}, cn)
}

func (f *filler) abort(ctx context.Context, cn *conn, leads []lead) {
	r := &request{}
	r.op = wire.OpFillAbort
	r.enc = func(b []byte) []byte {
		req := wire.FillAbortRequest{Namespace: f.blob, Tokens: make([]wire.FillToken, len(leads))}
		for k, l := range leads {
			req.Tokens[k] = l.tok
		}
		return req.AppendTo(b)
	}
	f.c.exec(ctx, []*request{r}, cn)
}

// wait long-polls for notices on fills joined through cn.
func (f *filler) wait(ctx context.Context, cn *conn, fills []uint64) ([]wire.WaitEntry, error) {
	timeout := waitSlice
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	r := &request{}
	r.op = wire.OpWait
	r.enc = func(b []byte) []byte {
		req := wire.WaitRequest{Namespace: f.blob, TimeoutMillis: uint32(max(timeout.Milliseconds(), 1)), Fills: fills}
		return req.AppendTo(b)
	}
	wctx, cancel := context.WithTimeout(ctx, timeout+time.Second)
	defer cancel()
	f.c.exec(wctx, []*request{r}, cn)
	if r.err != nil {
		return nil, r.err
	}
	if r.cn != cn {
		return nil, fmt.Errorf("%w: WAIT went to another connection", ErrUnavailable)
	}
	var resp wire.WaitResponse
	if err := resp.Decode(r.cl.body, uint32(len(fills))); err != nil || len(resp.Entries) != len(fills) {
		return nil, fmt.Errorf("%w: WAIT answer: %d entries for %d fills, %v", ErrProtocol, len(resp.Entries), len(fills), err)
	}
	return resp.Entries, nil
}

// read GETs blocks into out and returns those that missed.
func (f *filler) read(ctx context.Context, idx []int, count *int) (missed []int) {
	if len(idx) == 0 {
		return nil
	}
	keys := make([]BlockKey, len(idx))
	for k, i := range idx {
		keys[k] = f.keys[i]
	}
	for k, r := range f.c.Get(ctx, f.ns, keys) {
		if r.Hit {
			f.out[idx[k]] = r.Data
			*count++
		} else {
			missed = append(missed, idx[k])
		}
	}
	return missed
}

// local computes blocks without coordination and offers them to the cache.
func (f *filler) local(ctx context.Context, idx []int) error {
	if len(idx) == 0 {
		return nil
	}
	data, err := f.compute(ctx, idx)
	if err != nil {
		return err
	}
	f.rep.Local += len(idx)
	blocks := make([]PutBlock, len(idx))
	for k, i := range idx {
		blocks[k] = PutBlock{Key: f.keys[i], Tokens: f.ns.Layout.BlockTokens, Data: data[k]}
		if i > 0 {
			blocks[k].Parent = f.keys[i-1]
		}
	}
	f.c.Put(ctx, f.ns, blocks) // best effort
	return nil
}

func (f *filler) compute(ctx context.Context, idx []int) ([][]byte, error) {
	data, err := f.fill(ctx, idx)
	if err != nil {
		return nil, err
	}
	if len(data) != len(idx) {
		return nil, fmt.Errorf("%w: fill returned %d payloads for %d blocks", ErrInvalid, len(data), len(idx))
	}
	for k, i := range idx {
		f.out[i] = data[k]
	}
	return data, nil
}
