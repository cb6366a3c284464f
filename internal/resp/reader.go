package resp

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

// Sentinel errors. Every decoding error wraps ErrProtocol: the stream is
// out of sync and the connection must close after one -ERR reply.
var (
	ErrProtocol = errors.New("gpucache/resp: protocol error")
	// ErrTooLarge wraps ErrProtocol: a declared length or count is beyond
	// the limits.
	ErrTooLarge = fmt.Errorf("%w: too large", ErrProtocol)
)

// maxLine bounds a length line: '*' or '$', a sign, 19 digits, CRLF.
const maxLine = 24

// Limits bound what one request may make the reader hold.
type Limits struct {
	// MaxArgs bounds the arguments of one command (the array length).
	// Default 1024.
	MaxArgs int
	// MaxArg bounds one argument that the reader reads (every argument
	// but a deferred last one, and always the command name). Default 4096.
	MaxArg int
	// MaxArgBytes bounds the bytes of all read arguments of one command
	// together. Default 64 KiB.
	MaxArgBytes int
	// MaxBulk bounds the last argument, which may be left on the stream
	// for the caller (the SET value): the hot tier's largest block.
	// Required.
	MaxBulk int64
}

func (l Limits) withDefaults() Limits {
	if l.MaxArgs <= 0 {
		l.MaxArgs = 1024
	}
	if l.MaxArg <= 0 {
		l.MaxArg = 4096
	}
	if l.MaxArgBytes <= 0 {
		l.MaxArgBytes = 64 << 10
	}
	l.MaxArgBytes = max(l.MaxArgBytes, l.MaxArg)
	return l
}

// Command is one decoded request. Args alias the reader's buffer and are
// valid until the next ReadCommand.
type Command struct {
	// Args are the arguments read, the command name first. A command
	// ReadCommand returns always has its name in Args: only an argument
	// after the name may be deferred, so Args is never empty.
	Args [][]byte
	// Pending is the length of the last argument when it is still on the
	// stream (longer than MaxArg), or -1. The caller must consume it with
	// ReadPending or SkipPending before the next ReadCommand.
	Pending int64
}

// Reader decodes requests from a buffered stream. It is not safe for
// concurrent use.
type Reader struct {
	br  *bufio.Reader
	raw io.Reader // what br reads from: large payloads bypass br
	lim Limits
	buf []byte   // argument bytes; cap at most lim.MaxArgBytes
	off []int    // argument bounds in buf
	arg [][]byte // Command.Args backing array
	// pending is what is left to read of a deferred last argument, or -1.
	pending int64
}

// NewReader returns a reader of br. raw, when not nil, is what br reads
// from: ReadPending reads what br does not hold straight from it (one
// copy, by the kernel, into the caller's memory).
func NewReader(br *bufio.Reader, raw io.Reader, lim Limits) *Reader {
	return &Reader{br: br, raw: raw, lim: lim.withDefaults(), pending: -1}
}

// ReadCommand reads the next request up to (not including) a deferred
// last argument. Empty arrays ("*0", "*-1") are skipped as Redis does.
// An error wrapping ErrProtocol means the stream cannot be resynchronised;
// any other error is the stream's (EOF, deadline).
func (r *Reader) ReadCommand() (Command, error) {
	if r.pending >= 0 {
		return Command{}, fmt.Errorf("%w: the previous command's last argument was not consumed", ErrProtocol)
	}
	var n int64
	for {
		b, err := r.br.ReadByte()
		if err != nil {
			return Command{}, err
		}
		if b != '*' {
			return Command{}, fmt.Errorf("%w: expected '*', got %q (inline commands are not supported)", ErrProtocol, b)
		}
		if n, err = r.readInt(); err != nil {
			return Command{}, err
		}
		if n > 0 {
			break
		}
		if n < -1 {
			return Command{}, fmt.Errorf("%w: invalid multibulk length", ErrProtocol)
		}
	}
	if n > int64(r.lim.MaxArgs) {
		return Command{}, fmt.Errorf("%w: %d arguments (max %d)", ErrTooLarge, n, r.lim.MaxArgs)
	}
	r.buf, r.off = r.buf[:0], r.off[:0]
	cmd := Command{Pending: -1}
	for i := int64(0); i < n; i++ {
		b, err := r.br.ReadByte()
		if err != nil {
			return Command{}, unexpected(err)
		}
		if b != '$' {
			return Command{}, fmt.Errorf("%w: expected '$', got %q", ErrProtocol, b)
		}
		l, err := r.readInt()
		if err != nil {
			return Command{}, err
		}
		if l < 0 {
			return Command{}, fmt.Errorf("%w: invalid bulk length", ErrProtocol)
		}
		// The last argument may be left on the stream, unless it is the
		// command name: a caller must always see the name.
		last := i == n-1 && i > 0
		if last && l > r.lim.MaxBulk {
			return Command{}, fmt.Errorf("%w: bulk of %d bytes (max %d)", ErrTooLarge, l, r.lim.MaxBulk)
		}
		if last && l > int64(r.lim.MaxArg) {
			cmd.Pending, r.pending = l, l
			break
		}
		if l > int64(r.lim.MaxArg) || len(r.buf)+int(l) > r.lim.MaxArgBytes {
			return Command{}, fmt.Errorf("%w: argument of %d bytes (max %d, %d for all arguments but the last)",
				ErrTooLarge, l, r.lim.MaxArg, r.lim.MaxArgBytes)
		}
		start := len(r.buf)
		r.buf = grow(r.buf, int(l)+2, r.lim.MaxArgBytes+2)
		if _, err := io.ReadFull(r.br, r.buf[start:start+int(l)+2]); err != nil {
			return Command{}, unexpected(err)
		}
		if r.buf[start+int(l)] != '\r' || r.buf[start+int(l)+1] != '\n' {
			return Command{}, fmt.Errorf("%w: bulk not terminated by CRLF", ErrProtocol)
		}
		r.buf = r.buf[:start+int(l)]
		r.off = append(r.off, start, start+int(l))
	}
	r.arg = r.arg[:0]
	for j := 0; j < len(r.off); j += 2 {
		r.arg = append(r.arg, r.buf[r.off[j]:r.off[j+1]:r.off[j+1]])
	}
	cmd.Args = r.arg
	return cmd, nil
}

// grow extends b by n bytes, never beyond limit bytes of capacity (the
// caller checked that len(b)+n fits).
func grow(b []byte, n, limit int) []byte {
	if len(b)+n <= cap(b) {
		return b[:len(b)+n]
	}
	c := min(max(2*cap(b), len(b)+n, 256), limit)
	nb := make([]byte, len(b)+n, c)
	copy(nb, b)
	return nb
}

// ReadPending reads the deferred last argument into dst, whose length
// must be Command.Pending, then its CRLF: first what the buffer holds,
// then straight from the raw stream.
func (r *Reader) ReadPending(dst []byte) error {
	if int64(len(dst)) != r.pending {
		return fmt.Errorf("%w: ReadPending of %d bytes, %d pending", ErrProtocol, len(dst), r.pending)
	}
	r.pending = -1
	n := min(r.br.Buffered(), len(dst))
	if n > 0 {
		r.br.Read(dst[:n]) // served from the buffer: cannot fail
	}
	if n < len(dst) {
		src := r.raw
		if src == nil {
			src = r.br
		}
		if _, err := io.ReadFull(src, dst[n:]); err != nil {
			return unexpected(err)
		}
	}
	return r.crlf()
}

// ReadPendingPart reads up to len(p) bytes of the deferred last argument,
// never past its end: what the buffer holds, else from the raw stream.
// After the argument's last byte it reads its CRLF, and the argument is
// consumed. What is left of it can still be skipped with SkipPending. It
// lets a caller hold the argument in memory it grows as bytes arrive.
func (r *Reader) ReadPendingPart(p []byte) (int, error) {
	if r.pending <= 0 {
		return 0, fmt.Errorf("%w: ReadPendingPart with nothing pending", ErrProtocol)
	}
	p = p[:min(int64(len(p)), r.pending)]
	var n int
	var err error
	if r.br.Buffered() > 0 || r.raw == nil {
		n, err = r.br.Read(p)
	} else {
		n, err = r.raw.Read(p)
	}
	r.pending -= int64(n)
	if r.pending == 0 {
		r.pending = -1
		return n, r.crlf()
	}
	if err != nil {
		return n, unexpected(err)
	}
	return n, nil
}

// SkipPending discards the deferred last argument (what is left of it)
// and its CRLF.
func (r *Reader) SkipPending() error {
	if r.pending < 0 {
		return nil
	}
	n := r.pending
	r.pending = -1
	if _, err := r.br.Discard(int(n)); err != nil {
		return unexpected(err)
	}
	return r.crlf()
}

func (r *Reader) crlf() error {
	var b [2]byte
	if _, err := io.ReadFull(r.br, b[:]); err != nil {
		return unexpected(err)
	}
	if b != [2]byte{'\r', '\n'} {
		return fmt.Errorf("%w: bulk not terminated by CRLF", ErrProtocol)
	}
	return nil
}

// readInt reads a decimal integer terminated by CRLF: an optional '-',
// then 1..19 digits.
func (r *Reader) readInt() (int64, error) {
	var (
		v    int64
		neg  bool
		nd   int
		seen int
	)
	for {
		b, err := r.br.ReadByte()
		if err != nil {
			return 0, unexpected(err)
		}
		seen++
		if seen > maxLine {
			return 0, fmt.Errorf("%w: length line too long", ErrProtocol)
		}
		switch {
		case b == '-' && seen == 1:
			neg = true
		case b >= '0' && b <= '9':
			if nd == 18 {
				return 0, fmt.Errorf("%w: invalid length", ErrProtocol)
			}
			nd++
			v = v*10 + int64(b-'0')
		case b == '\r':
			if nb, err := r.br.ReadByte(); err != nil {
				return 0, unexpected(err)
			} else if nb != '\n' || nd == 0 {
				return 0, fmt.Errorf("%w: invalid length", ErrProtocol)
			}
			if neg {
				v = -v
			}
			return v, nil
		default:
			return 0, fmt.Errorf("%w: invalid length", ErrProtocol)
		}
	}
}

// unexpected turns an EOF inside a request into io.ErrUnexpectedEOF.
func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
