package client

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/gpucache/gpucache/api/wire"
)

// readLoop is the connection's reader goroutine. It reads answers until the
// connection fails, then fails every call still pending.
func (c *conn) readLoop() {
	defer close(c.readerDone)
	err := c.readAnswers()
	c.fail(err)
	c.mu.Lock()
	pending, ferr := c.mu.pending, c.mu.err
	c.mu.pending = nil
	c.mu.Unlock()
	ferr = unavailable(ferr)
	for _, cl := range pending {
		cl.stopTimer()
		if cl.state.CompareAndSwap(stWaiting, stFilling) {
			cl.failFill(ferr, 0)
		}
		c.load.Add(-1)
		<-c.sem
	}
}

// readAnswers reads answer frames and hands each to its call. It returns
// the error that ends the connection.
func (c *conn) readAnswers() error {
	for {
		if _, err := io.ReadFull(c.br, c.hb[:]); err != nil {
			return lost(err)
		}
		h, err := c.checkHeader()
		if err != nil {
			return err
		}
		c.mu.Lock()
		cl := c.mu.pending[h.RequestID]
		if cl != nil {
			delete(c.mu.pending, h.RequestID)
		}
		c.mu.Unlock()
		if cl == nil {
			if h.Flags&wire.FlagError != 0 && h.BodyLen <= controlBodyMax {
				body := make([]byte, h.BodyLen)
				if _, err := io.ReadFull(c.br, body); err != nil {
					return lost(err)
				}
				return fmt.Errorf("%w (for no request in flight, id %d)", decodeServerError(body), h.RequestID)
			}
			return fmt.Errorf("%w: answer to unknown request id %d", ErrProtocol, h.RequestID)
		}
		cl.stopTimer()
		err = c.readAnswer(h, cl)
		c.load.Add(-1)
		<-c.sem
		if err != nil {
			return err
		}
	}
}

// lost wraps a read error as a lost connection.
func lost(err error) error {
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	if errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("%w: connection closed", ErrUnavailable)
	}
	return fmt.Errorf("%w: connection lost: %w", ErrUnavailable, err)
}

// readAnswer reads one answer body for cl. It returns an error only when
// the stream can no longer be trusted.
func (c *conn) readAnswer(h wire.Header, cl *call) error {
	if !cl.state.CompareAndSwap(stWaiting, stFilling) {
		// Abandoned by its caller: drain into the discard.
		if _, err := c.br.Discard(int(h.BodyLen)); err != nil {
			return lost(err)
		}
		return nil
	}
	cl.started = true
	if h.Op != cl.op {
		err := fmt.Errorf("%w: %s request answered with %s", ErrProtocol, cl.op, h.Op)
		cl.failFill(err, 0)
		return err
	}
	if cl.op == wire.OpGet && h.Flags&wire.FlagError == 0 {
		return c.readGet(h, cl)
	}
	limit := c.ctrlMax
	if cl.op == wire.OpMembers {
		limit = max(limit, membersBodyMax)
	}
	if h.BodyLen > limit {
		err := fmt.Errorf("%w: %s answer of %d bytes exceeds %d", ErrProtocol, h.Op, h.BodyLen, limit)
		cl.failFill(err, 0)
		return err
	}
	body := make([]byte, h.BodyLen)
	if _, err := io.ReadFull(c.br, body); err != nil {
		err = lost(err)
		cl.failFill(err, 0)
		return err
	}
	cl.flags, cl.body = h.Flags, body
	if h.Flags&wire.FlagError != 0 {
		serr := decodeServerError(body)
		cl.failFill(serr, 0)
		if code := wire.ErrCode(serr); code == wire.CodeUnauthenticated || code == wire.CodeHelloRequired {
			// The server ended the session (a revoked or expired
			// credential): drop the connection so the pool dials and
			// authenticates again.
			return fmt.Errorf("%w: the server ended the session: %w", ErrUnavailable, serr)
		}
		return nil
	}
	cl.finish()
	return nil
}

// readGet reads a GET answer: u32 table length, the table (u32 count, then
// u8 status and u32 length per key), then the payloads of the hits, each
// read straight into its destination buffer. The whole table is read and
// checked before any result is written, so a malformed answer yields misses
// only.
func (c *conn) readGet(h wire.Header, cl *call) error {
	n := len(cl.res)
	protoErr := func(format string, args ...any) error {
		err := fmt.Errorf("%w: GET answer: %s", ErrProtocol, fmt.Sprintf(format, args...))
		cl.failFill(err, 0)
		return err
	}
	if h.BodyLen < 4 {
		return protoErr("body of %d bytes", h.BodyLen)
	}
	var lb [4]byte
	if _, err := io.ReadFull(c.br, lb[:]); err != nil {
		err = lost(err)
		cl.failFill(err, 0)
		return err
	}
	metaLen, err := wire.MetaLen(lb, h.BodyLen)
	if err != nil {
		return protoErr("%v", err)
	}
	if int(metaLen) != 4+5*n {
		return protoErr("table of %d bytes for %d keys", metaLen, n)
	}
	if cap(c.tbuf) < int(metaLen) {
		c.tbuf = make([]byte, metaLen)
	}
	t := c.tbuf[:metaLen]
	if _, err := io.ReadFull(c.br, t); err != nil {
		err = lost(err)
		cl.failFill(err, 0)
		return err
	}
	total, err := checkGetTable(t, n, c.limits.MaxPayload, h.BodyLen)
	if err != nil {
		return protoErr("%v", err)
	}

	left := int64(total) // payload bytes still on the stream
	for i := range n {
		st, ln := wire.Status(t[4+5*i]), int(binary.LittleEndian.Uint32(t[5+5*i:]))
		if cl.stopFill.Load() {
			return c.abandonFill(cl, left)
		}
		switch st {
		case wire.StatusHit:
		case wire.StatusMiss:
			cl.res[i] = GetResult{Reason: ErrNotCached}
			continue
		default:
			cl.res[i] = GetResult{Reason: fmt.Errorf("%w: GET status %s", ErrProtocol, st)}
			continue
		}
		var buf []byte
		if cl.dst == nil && cl.alloc != nil {
			if buf = cl.alloc(ln); len(buf) != ln {
				if _, err := c.br.Discard(ln); err != nil {
					err = lost(err)
					cl.failFill(err, i)
					return err
				}
				left -= int64(ln)
				cl.res[i] = GetResult{Reason: fmt.Errorf("%w: no buffer for %d bytes", ErrShortBuffer, ln)}
				continue
			}
		} else if cl.dst == nil {
			buf = make([]byte, ln)
		} else if d := cl.dst[i]; ln <= cap(d) {
			buf = d[:ln]
		} else {
			if _, err := c.br.Discard(ln); err != nil {
				err = lost(err)
				cl.failFill(err, i)
				return err
			}
			left -= int64(ln)
			cl.res[i] = GetResult{Reason: fmt.Errorf("%w: %d bytes cached, buffer holds %d", ErrShortBuffer, ln, cap(d))}
			continue
		}
		got, err := c.readPayload(buf, cl)
		left -= int64(got)
		if err != nil {
			if cl.stopFill.Load() {
				cl.state.Store(stAbandoned)
				close(cl.done)
				return lost(err)
			}
			err = lost(err)
			cl.failFill(err, i)
			return err
		}
		if got < ln { // stopFill seen between chunks
			return c.abandonFill(cl, left)
		}
		cl.res[i] = GetResult{Data: buf, Hit: true}
	}
	cl.finish()
	return nil
}

// readPayload reads len(buf) bytes in chunks, stopping early (without error)
// if the caller asks the fill to stop. It returns the bytes read.
func (c *conn) readPayload(buf []byte, cl *call) (int, error) {
	off := 0
	for off < len(buf) {
		if cl.stopFill.Load() {
			return off, nil
		}
		m, err := c.br.Read(buf[off:min(off+readChunk, len(buf))])
		off += m
		if err != nil {
			return off, err
		}
	}
	return off, nil
}

// abandonFill stops filling an abandoned call: it hands the call back to its
// caller first (no more writes to its memory), then drains the left bytes.
func (c *conn) abandonFill(cl *call, left int64) error {
	cl.state.Store(stAbandoned)
	close(cl.done)
	if _, err := c.br.Discard(int(left)); err != nil {
		return lost(err)
	}
	return nil
}

// checkGetTable validates the table of a GET answer for n keys (t excludes
// the u32 table length) in a body of bodyLen bytes, and returns the payload
// total. Only HIT and MISS may appear, only hits carry bytes, no block may
// exceed maxPayload, and the payloads must fill the rest of the body
// exactly. Nothing is delivered from an answer that fails any check.
func checkGetTable(t []byte, n int, maxPayload, bodyLen uint32) (uint64, error) {
	if len(t) != 4+5*n {
		return 0, fmt.Errorf("table of %d bytes for %d keys", len(t), n)
	}
	if got := binary.LittleEndian.Uint32(t); int(got) != n {
		return 0, fmt.Errorf("%d entries for %d keys", got, n)
	}
	var total uint64
	for i := range n {
		st, ln := wire.Status(t[4+5*i]), binary.LittleEndian.Uint32(t[5+5*i:])
		if st != wire.StatusHit && st != wire.StatusMiss {
			// Fail the whole answer closed: a server that sends statuses a
			// GET cannot have is not trusted for any block of it.
			return 0, fmt.Errorf("block %d: status %s in a GET answer", i, st)
		}
		if st != wire.StatusHit && ln != 0 {
			return 0, fmt.Errorf("block %d: status %s carries %d bytes", i, st, ln)
		}
		if ln > maxPayload {
			return 0, fmt.Errorf("block %d: %d bytes exceed MaxPayload %d", i, ln, maxPayload)
		}
		total += uint64(ln)
	}
	if err := wire.CheckPayload(total, bodyLen, uint32(len(t))); err != nil {
		return 0, err
	}
	return total, nil
}
