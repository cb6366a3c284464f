package client

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/gpucache/gpucache/api/wire"
)

// GetOption adjusts one Get.
type GetOption func(*getOptions)

type getOptions struct {
	lease LeaseID
	alloc func(n int) []byte // WithAlloc; nil: make
}

// WithLease passes a lease taken by Lookup; the server releases it once it
// has answered. When the keys span several requests (more than MaxBatch, or
// more than one answer frame can carry), the lease rides on the last one,
// which the server serves after the others on the same connection, so the
// blocks stay pinned until every request has been served.
func WithLease(id LeaseID) GetOption { return func(o *getOptions) { o.lease = id } }

// Get reads blocks. It never fails as a whole: each result is a hit with
// the whole payload in a freshly allocated slice, or a miss with a Reason.
// Timeouts, a lost connection, a server error or a malformed answer all
// become misses; partially received payloads are never returned.
func (c *Client) Get(ctx context.Context, ns Namespace, keys []BlockKey, opts ...GetOption) []GetResult {
	res := make([]GetResult, len(keys))
	c.get(ctx, ns, keys, nil, res, opts)
	return res
}

// GetInto reads blocks straight from the socket into the caller's buffers:
// block i goes into dst[i][:n], where n is the cached length, and res[i]
// tells what happened (on a hit res[i].Data is dst[i][:n]). A block larger
// than cap(dst[i]) is a miss with ErrShortBuffer. GetInto allocates no
// payload memory. It returns the number of hits.
//
// Ownership: the client writes into dst only until GetInto returns, also
// when the context expires first; after that dst belongs to the caller.
// The contents of dst[i] are unspecified when res[i] is a miss.
//
// len(dst) and len(res) must equal len(keys); GetInto panics otherwise.
func (c *Client) GetInto(ctx context.Context, ns Namespace, keys []BlockKey, dst [][]byte, res []GetResult, opts ...GetOption) int {
	if len(dst) != len(keys) || len(res) != len(keys) {
		panic(fmt.Sprintf("gpucache/client: GetInto with %d keys, %d buffers, %d results", len(keys), len(dst), len(res)))
	}
	c.get(ctx, ns, keys, dst, res, opts)
	hits := 0
	for i := range res {
		if res[i].Hit {
			hits++
		}
	}
	return hits
}

func (c *Client) get(ctx context.Context, ns Namespace, keys []BlockKey, dst [][]byte, res []GetResult, opts []GetOption) {
	if len(keys) == 0 {
		return
	}
	var o getOptions
	for _, opt := range opts {
		opt(&o)
	}
	blob, err := c.nsBlob(ns)
	if err != nil {
		missAll(res, err)
		return
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	if dst != nil {
		// Buffers inside a registered region: the server copies into them.
		offs := make([]uint64, len(dst))
		if reg := c.regionOf(dst, true, offs); reg != nil && c.getIntoRegion(ctx, blob, keys, dst, res, o.lease, reg, offs) {
			return
		}
	}
	lim := c.Limits()
	var reqs []*request
	for off := 0; off < len(keys); {
		end := getBatchEnd(lim, keys, dst, off)
		ks := keys[off:end]
		var lease uint64
		if end == len(keys) {
			lease = uint64(o.lease)
		}
		r := &request{res: res[off:end]}
		r.op = wire.OpGet
		r.enc = func(b []byte) []byte {
			return (&wire.GetRequest{Namespace: blob, LeaseID: lease, Keys: ks}).AppendTo(b)
		}
		if dst != nil {
			r.dst = dst[off:end]
		} else {
			r.alloc = o.alloc
		}
		reqs = append(reqs, r)
		off = end
	}
	var pin *conn
	if o.lease != 0 {
		pin = c.takeLease(o.lease)
	}
	c.exec(ctx, reqs, pin)
}

// getBatchEnd returns the end of the GET request that starts at keys[off]:
// at most MaxBatch keys, and few enough that their answer fits MaxFrame
// even if every block is as large as it may be (a server answers the hits
// past MaxFrame with MISS). A block may be MaxPayload bytes, or for GetInto
// at most its buffer's capacity (a larger one is a miss anyway).
func getBatchEnd(lim Limits, keys []BlockKey, dst [][]byte, off int) int {
	body := uint64(8) // table length and count
	end := off
	for end < len(keys) && end-off < int(lim.MaxBatch) {
		most := uint64(lim.MaxPayload)
		if dst != nil {
			most = min(most, uint64(cap(dst[end])))
		}
		if end > off && body+5+most > uint64(lim.MaxFrame) {
			break
		}
		body += 5 + most
		end++
	}
	return end
}

// Put stores blocks and returns one status per block: StatusStored,
// StatusExists (an equal key is cached; the payload was discarded),
// StatusTooLarge, StatusNoSpace, StatusReadOnly (the node is read-only: its
// control plane is unreachable) or StatusKeyMismatch (the key does not
// derive from the block's identity: ns, Parent, Position, TokenIDs and the
// valid length; nothing stored). Blocks beyond the server's MaxBatch or
// MaxFrame, or beyond wire.MaxRequestTokens token ids, are split over
// several pipelined requests. Build blocks from identities with BlocksOf.
//
// On error (a timeout, a lost connection, an error answer) the blocks whose
// request got no answer report StatusMiss, meaning "not known to be
// stored"; the others keep their status.
//
// Ownership: the payloads are written from the caller's slices without a
// copy; Put does not keep them after it returns.
func (c *Client) Put(ctx context.Context, ns Namespace, blocks []PutBlock) ([]Status, error) {
	return c.put(ctx, ns, blocks, nil)
}

// put is Put; a non-nil errs (len(blocks)) receives, for each block whose
// request failed, that request's error (Cluster re-routes the blocks a node
// refused with WRONG_EPOCH).
func (c *Client) put(ctx context.Context, ns Namespace, blocks []PutBlock, errs []error) ([]Status, error) {
	statuses := make([]Status, len(blocks))
	if len(blocks) == 0 {
		return statuses, nil
	}
	blob, err := c.nsBlob(ns)
	if err != nil {
		return nil, err
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	if errs == nil && c.cfg.Network == "unix" {
		// Payloads inside a registered region: the server copies from them.
		data, offs := make([][]byte, len(blocks)), make([]uint64, len(blocks))
		for i := range blocks {
			data[i] = blocks[i].Data
		}
		if reg := c.regionOf(data, false, offs); reg != nil {
			if ok, err := c.putFromRegion(ctx, blob, blocks, statuses, reg, offs); ok {
				return statuses, err
			}
		}
	}
	lim := c.Limits()
	head := 4 + len(blob) + 4 // table: namespace blob, block count

	type chunk struct {
		idx   []int
		table int // table bytes
	}
	var chunks []chunk
	var cur chunk
	var curBytes, curTokens int
	for i := range blocks {
		n := len(blocks[i].Data)
		ids := len(blocks[i].TokenIDs)
		entry := wire.PutBlockSize(ids)
		if ids == 0 || ids > wire.MaxBlockTokens || int(blocks[i].validLength()) > ids {
			// The server could not even decode it: its identity is not one.
			statuses[i] = wire.StatusKeyMismatch
			continue
		}
		if uint64(n) > uint64(lim.MaxPayload) || uint64(4+head+entry+n) > uint64(lim.MaxFrame) {
			statuses[i] = wire.StatusTooLarge
			continue
		}
		k := len(cur.idx)
		if k > 0 && (k == int(lim.MaxBatch) || curTokens+ids > wire.MaxRequestTokens ||
			uint64(4+head+cur.table+entry+curBytes+n) > uint64(lim.MaxFrame)) {
			chunks = append(chunks, cur)
			cur, curBytes, curTokens = chunk{}, 0, 0
		}
		cur.idx = append(cur.idx, i)
		cur.table += entry
		curBytes += n
		curTokens += ids
	}
	if len(cur.idx) > 0 {
		chunks = append(chunks, cur)
	}

	reqs := make([]*request, len(chunks))
	for j, ch := range chunks {
		r := &request{}
		r.op = wire.OpPut
		for _, i := range ch.idx {
			r.payload = append(r.payload, blocks[i].Data)
			r.payloadLen += len(blocks[i].Data)
		}
		// The table is encoded from blocks entry by entry when the frame is
		// written: no PutRequest is built per request.
		idx := ch.idx
		r.enc = func(b []byte) []byte {
			at := len(b)
			b = wire.AppendPutHead(append(b, 0, 0, 0, 0), blob, len(idx))
			for _, i := range idx {
				pb := &blocks[i]
				b = wire.AppendPutBlock(b, &wire.PutBlock{Key: pb.Key, Parent: pb.Parent, ValidLength: pb.validLength(),
					Len: uint32(len(pb.Data)), Position: pb.Position, TokenIDs: pb.TokenIDs})
			}
			binary.LittleEndian.PutUint32(b[at:], uint32(len(b)-at-4)) // table length
			return b
		}
		reqs[j] = r
	}
	c.exec(ctx, reqs, nil)
	return statuses, collectStatuses(reqs, func(j int) []int { return chunks[j].idx }, statuses, errs)
}

// Delete removes blocks and returns one status per key: StatusDeleted,
// StatusBusy (leased or being read; not removed) or StatusMiss. On error the
// keys whose request got no answer report StatusMiss.
func (c *Client) Delete(ctx context.Context, ns Namespace, keys []BlockKey) ([]Status, error) {
	return c.delete(ctx, ns, keys, nil)
}

// delete is Delete; errs is as for put.
func (c *Client) delete(ctx context.Context, ns Namespace, keys []BlockKey, errs []error) ([]Status, error) {
	statuses := make([]Status, len(keys))
	if len(keys) == 0 {
		return statuses, nil
	}
	blob, err := c.nsBlob(ns)
	if err != nil {
		return nil, err
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	batch := int(c.Limits().MaxBatch)
	var reqs []*request
	var spans [][]int
	for off := 0; off < len(keys); off += batch {
		end := min(off+batch, len(keys))
		ks := keys[off:end]
		r := &request{}
		r.op = wire.OpDelete
		r.enc = func(b []byte) []byte { return (&wire.DeleteRequest{Namespace: blob, Keys: ks}).AppendTo(b) }
		reqs = append(reqs, r)
		idx := make([]int, 0, end-off)
		for i := off; i < end; i++ {
			idx = append(idx, i)
		}
		spans = append(spans, idx)
	}
	c.exec(ctx, reqs, nil)
	return statuses, collectStatuses(reqs, func(j int) []int { return spans[j] }, statuses, errs)
}

// collectStatuses decodes the status answers of reqs into statuses at the
// indices each request covered, and returns the first error. A non-nil
// errs receives each failed request's error at the indices it covered.
func collectStatuses(reqs []*request, idx func(j int) []int, statuses []Status, errs []error) error {
	var first error
	for j, r := range reqs {
		ix := idx(j)
		err := r.err
		var resp wire.StatusResponse
		if err == nil {
			// A status newer than the session's version is a protocol
			// error: the server must not send it.
			v := wire.VersionMax
			if r.cn != nil {
				v = r.cn.version
			}
			if derr := resp.DecodeVersion(r.cl.body, uint32(len(ix)), v); derr != nil || len(resp.Statuses) != len(ix) {
				err = fmt.Errorf("%w: %s answer with %d statuses for %d keys: %v", ErrProtocol, r.op, len(resp.Statuses), len(ix), derr)
			}
		}
		if err != nil {
			for _, i := range ix {
				statuses[i] = wire.StatusMiss
				if errs != nil {
					errs[i] = err
				}
			}
			if first == nil {
				first = err
			}
			continue
		}
		for k, i := range ix {
			statuses[i] = resp.Statuses[k]
		}
	}
	return first
}

// Lookup asks for the leading run of cached keys and returns its length.
// With leaseTTL > 0 the server pins the run for that long (it may cap the
// TTL) and returns a lease to pass to Get with WithLease, which releases
// it; an unused lease expires. A lease belongs to the connection that took
// it; the client remembers which, and sends the leased Get there. With
// more keys than the server's MaxBatch the keys are looked up in chunks,
// one after the other while the run continues; only the first chunk is
// leased.
func (c *Client) Lookup(ctx context.Context, ns Namespace, keys []BlockKey, leaseTTL time.Duration) (int, LeaseID, error) {
	if len(keys) == 0 {
		return 0, 0, nil
	}
	blob, err := c.nsBlob(ns)
	if err != nil {
		return 0, 0, err
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	ttl := uint32(0)
	if leaseTTL > 0 {
		ttl = uint32(max(1, min(leaseTTL.Milliseconds(), 1<<31)))
	}
	// The lease belongs to the connection that takes it: remember which.
	cn, err := c.pick(ctx)
	if err != nil {
		return 0, 0, err
	}
	batch := int(cn.limits.MaxBatch)
	hits, lease := 0, LeaseID(0)
	for off := 0; off < len(keys); off += batch {
		ks := keys[off:min(off+batch, len(keys))]
		r := &request{}
		r.op = wire.OpLookup
		r.enc = func(b []byte) []byte {
			return (&wire.LookupRequest{Namespace: blob, LeaseTTLMillis: ttl, Keys: ks}).AppendTo(b)
		}
		c.exec(ctx, []*request{r}, cn)
		if r.err != nil {
			return hits, lease, r.err
		}
		var resp wire.LookupResponse
		if err := resp.Decode(r.cl.body); err != nil || int(resp.Hits) > len(ks) {
			return hits, lease, fmt.Errorf("%w: LOOKUP answer: %d hits of %d keys, %v", ErrProtocol, resp.Hits, len(ks), err)
		}
		if off == 0 && resp.LeaseID != 0 {
			lease = LeaseID(resp.LeaseID)
			c.addLease(lease, r.cn, time.Duration(resp.LeaseTTLMillis)*time.Millisecond)
		}
		hits += int(resp.Hits)
		if int(resp.Hits) < len(ks) {
			break
		}
		ttl = 0
	}
	return hits, lease, nil
}

// Stat returns the server's named counters.
func (c *Client) Stat(ctx context.Context) (map[string]uint64, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	body, err := c.roundTrip(ctx, wire.OpStat, func(b []byte) []byte { return b })
	if err != nil {
		return nil, err
	}
	var resp wire.StatResponse
	if err := resp.Decode(body); err != nil {
		return nil, fmt.Errorf("%w: STAT answer: %w", ErrProtocol, err)
	}
	m := make(map[string]uint64, len(resp.Entries))
	for _, e := range resp.Entries {
		m[e.Name] = e.Value
	}
	return m, nil
}

// Ping sends a PING on one connection and returns the round-trip time.
func (c *Client) Ping(ctx context.Context) (time.Duration, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	start := time.Now()
	var token [8]byte
	binary.LittleEndian.PutUint64(token[:], uint64(start.UnixNano()))
	body, err := c.roundTrip(ctx, wire.OpPing, func(b []byte) []byte { return append(b, token[:]...) })
	if err != nil {
		return 0, err
	}
	if !bytes.Equal(body, token[:]) {
		return 0, fmt.Errorf("%w: PING echoed %d bytes that differ", ErrProtocol, len(body))
	}
	return time.Since(start), nil
}

// roundTrip sends one request without payload and returns its answer body.
func (c *Client) roundTrip(ctx context.Context, op wire.Opcode, enc func([]byte) []byte) ([]byte, error) {
	r := &request{}
	r.op, r.enc = op, enc
	c.exec(ctx, []*request{r}, nil)
	if r.err != nil {
		return nil, r.err
	}
	return r.cl.body, nil
}
