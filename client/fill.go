package client

import (
	"context"
	"errors"
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
// tokens is the token chain: it is split into blocks of
// ns.Layout.BlockTokens (the last may be shorter) as Identities does, and
// block i of the result (and index i passed to fill) is that chain's block
// i. Blocks are published with their full identity, so the server can
// verify each key. Any failure of the cache degrades to computing the
// affected blocks locally: GetOrFill returns an error only if fill does, if
// ctx ends, or if ns or tokens are invalid (ErrInvalid).
func (c *Client) GetOrFill(ctx context.Context, ns Namespace, tokens []uint32, fill FillFunc) ([][]byte, FillReport, error) {
	if _, err := c.nsBlob(ns); err != nil {
		return nil, FillReport{}, err
	}
	ids, err := Identities(ns, tokens)
	if err != nil {
		return nil, FillReport{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return c.GetOrFillIdentities(ctx, ns, ids, fill)
}

// GetOrFillIdentities is GetOrFill over a list of block identities of ns
// that need not form one chain (the blocks of a chain that one shard owns,
// say): block i of the result, and index i passed to fill, is ids[i]. Every
// identity must be valid and have namespace ns (ErrInvalid otherwise).
func (c *Client) GetOrFillIdentities(ctx context.Context, ns Namespace, ids []CacheIdentity, fill FillFunc) ([][]byte, FillReport, error) {
	keys, err := identityKeys(ns, ids)
	if err != nil {
		return nil, FillReport{}, err
	}
	out, rep, _, _, err := c.getOrFill(ctx, ns, ids, keys, fill, false)
	return out, rep, err
}

// identityKeys validates ids as identities of ns and returns their keys.
func identityKeys(ns Namespace, ids []CacheIdentity) ([]BlockKey, error) {
	dig, err := ns.Digest()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	keys := make([]BlockKey, len(ids))
	for i := range ids {
		if ids[i].Namespace != ns {
			return nil, fmt.Errorf("%w: identity %d is of another namespace", ErrInvalid, i)
		}
		if err := ids[i].Validate(); err != nil {
			return nil, fmt.Errorf("%w: identity %d: %w", ErrInvalid, i, err)
		}
		keys[i] = KeyFor(dig, ids[i].Parent, ids[i].Tokens, ids[i].ValidLength)
	}
	return keys, nil
}

// getOrFill is GetOrFillIdentities over validated ids and their keys.
//
// With reroute (Cluster), an ACQUIRE that the node refuses with
// WRONG_EPOCH does not turn the blocks into local computes: getOrFill
// returns at once, with the blocks not yet obtained in foreign (indices
// into ids; their out entries are nil) and the node's epoch, so that the
// caller can send them to their owner under a newer view. The blocks
// obtained before stay in out and rep.
func (c *Client) getOrFill(ctx context.Context, ns Namespace, ids []CacheIdentity, keys []BlockKey, fill FillFunc, reroute bool) (out [][]byte, rep FillReport, foreign []int, epoch uint64, err error) {
	blob, err := c.nsBlob(ns)
	if err != nil {
		return nil, rep, nil, 0, err
	}
	out = make([][]byte, len(keys))
	f := &filler{c: c, ns: ns, blob: blob, ids: ids, keys: keys, fill: fill, out: out, rep: &rep, reroute: reroute}
	todo := make([]int, len(keys))
	for i := range todo {
		todo[i] = i
	}
	for len(todo) > 0 {
		if err := ctx.Err(); err != nil {
			return nil, rep, nil, 0, ctxError(ctx)
		}
		rep.Rounds++
		if rep.Rounds > maxFillRounds {
			if err := f.local(ctx, todo); err != nil {
				return nil, rep, nil, 0, err
			}
			break
		}
		if todo, err = f.round(ctx, todo); err != nil {
			var moved *movedError
			if errors.As(err, &moved) {
				return out, rep, moved.idx, moved.epoch, nil
			}
			return nil, rep, nil, 0, err
		}
	}
	return out, rep, nil, 0, nil
}

// movedError ends a rerouting getOrFill: the node refused the ACQUIRE of
// blocks idx with WRONG_EPOCH (epoch).
type movedError struct {
	idx   []int
	epoch uint64
}

func (e *movedError) Error() string {
	return fmt.Sprintf("gpucache/client: %d blocks are owned by another node under epoch %d", len(e.idx), e.epoch)
}

// filler is the state of one GetOrFill.
type filler struct {
	c    *Client
	ns   Namespace
	blob []byte
	ids  []CacheIdentity
	keys []BlockKey // keys[i] is ids[i]'s key
	fill FillFunc
	out  [][]byte
	rep  *FillReport
	// reroute: a WRONG_EPOCH answer to ACQUIRE ends the fill with a
	// movedError instead of computing the blocks here.
	reroute bool
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
		if epoch, ok := WrongEpoch(err); ok && f.reroute {
			return nil, &movedError{idx: todo, epoch: epoch}
		}
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
		keys := make([]wire.Key, len(idx))
		for k, i := range idx {
			keys[k] = f.keys[i]
		}
		r.enc = func(b []byte) []byte {
			return (&wire.AcquireRequest{Namespace: f.blob, Keys: keys}).AppendTo(b)
		}
		f.c.exec(ctx, []*request{r}, cn)
		if r.err != nil {
			f.abortAcquired(ctx, cn, todo[:off], entries)
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

// abortAcquired hands on the turns that the earlier chunks of a failed
// ACQUIRE granted (entries answer todo): the round is abandoned, and
// without this the other callers would wait for those leaders until their
// fill deadline. (A view change between chunks is one way to get there.)
func (f *filler) abortAcquired(ctx context.Context, cn *conn, todo []int, entries []wire.AcquireEntry) {
	var leads []lead
	for k, e := range entries {
		if e.Outcome == wire.AcquireLead {
			leads = append(leads, lead{todo[k], e.Token})
		}
	}
	if len(leads) > 0 {
		f.abort(ctx, cn, leads)
	}
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
		end, bytes, tokens := off, 0, 0
		for end < len(leads) && end-off < int(lim.MaxBatch) {
			ids := len(f.ids[leads[end].i].Tokens)
			entry := wire.FillBlockSize(ids)
			if tokens+ids > wire.MaxRequestTokens ||
				uint64(bytes+entry+len(data[end])+4096+len(f.blob)) > uint64(lim.MaxFrame) {
				break
			}
			bytes += entry + len(data[end])
			tokens += ids
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
	r.enc = func(b []byte) []byte {
		var req wire.FillCommitRequest
		req.Namespace = f.blob
		req.Blocks = make([]wire.FillBlock, len(leads))
		for k, l := range leads {
			id := &f.ids[l.i]
			req.Blocks[k] = wire.FillBlock{Token: l.tok, Key: f.keys[l.i], Parent: id.Parent,
				ValidLength: id.ValidLength, Len: uint32(len(data[k])), Position: id.Position, TokenIDs: id.Tokens}
		}
		return wire.AppendTable(b, &req)
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
		id := &f.ids[i]
		blocks[k] = PutBlock{Key: f.keys[i], Parent: id.Parent, ValidLength: id.ValidLength, Position: id.Position,
			TokenIDs: id.Tokens, Data: data[k]}
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
