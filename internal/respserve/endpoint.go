package respserve

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/reqbuf"
	"github.com/gpucache/gpucache/internal/resp"
	"github.com/gpucache/gpucache/internal/security/audit"
)

// Profile binds what a tenant stores over RESP (which carries no
// identity) to a namespace, and says which values it accepts.
type Profile struct {
	// Namespace is the namespace of every block the tenant stores over
	// RESP; its Tenant is set to the tenant's name.
	Namespace identity.Namespace
	// ChunkBytes is the length every value must have (LMCache's chunk of
	// chunk_size tokens), unless VariableLength. In-process "metadata"
	// values are exempt (at most MaxMetadata bytes).
	ChunkBytes int
	// VariableLength accepts values of any length up to the hot tier's
	// largest block.
	VariableLength bool
	// AnyKey accepts keys that are not LMCache keys (key_format: any);
	// false (key_format: lmcache) refuses them.
	AnyKey bool
}

// MaxMetadata bounds the value of an in-process "...metadata" key:
// LMCache's RemoteMetadata is 28 bytes for one KV group.
const MaxMetadata = 4096

// readLimits are the reader's bounds below the last argument; the last
// (the SET value) is bounded by the hot tier's largest block.
var readLimits = resp.Limits{MaxArgs: 1024, MaxArg: 4096, MaxArgBytes: 64 << 10}

// Config is what an Endpoint serves with; the server fills it from its
// own configuration.
type Config struct {
	// Profiles are the RESP profiles, by tenant. A tenant without one
	// can AUTH but not use the data commands.
	Profiles map[string]Profile
	// MaxValue is the largest value: the hot tier's largest block
	// (wire.Limits.MaxPayload).
	MaxValue uint32
	// WriteTimeout bounds writing the queued replies.
	WriteTimeout time.Duration
	// Forwarder, when set, serves the keys another member owns.
	Forwarder Forwarder
	// ForwardTimeout bounds one forwarded operation (and so the time a
	// dead owner can hold a command before it becomes a miss).
	ForwardTimeout time.Duration
	// Buffers is the request-buffer budget a value forwarded to its owner
	// is read into, from the tenant's share, waiting up to BufferWait (or
	// until Done closes).
	Buffers    *reqbuf.Budget
	BufferWait time.Duration
	Done       <-chan struct{}
	// Logger logs.
	Logger *slog.Logger
	// Handling, when set, is called with each command's name before it is
	// executed (a test hook).
	Handling func(cmd string)
}

// Endpoint is a server's RESP endpoint: its configuration and its
// figures. Serve runs one connection; Stats reports the figures.
type Endpoint struct {
	cfg   Config
	stats counters
}

// New returns an endpoint serving with cfg.
func New(cfg Config) *Endpoint { return &Endpoint{cfg: cfg} }

// counters are the RESP endpoint's own figures.
type counters struct {
	conns      atomic.Uint64 // RESP connections accepted
	commands   atomic.Uint64 // commands executed
	setExists  atomic.Uint64 // SETs of a key already stored: +OK, bytes left alone
	setDropped atomic.Uint64 // SETs not stored for a transient fault: +OK, a later GET misses
	errors     atomic.Uint64 // -ERR replies
	protocol   atomic.Uint64 // connections closed for a protocol error
	forwarded  atomic.Uint64 // commands forwarded to the key's owner
	authFailed atomic.Uint64 // failed AUTHs
}

// Stats returns the endpoint's STAT entries.
func (e *Endpoint) Stats() []wire.StatEntry {
	r := &e.stats
	return []wire.StatEntry{
		{Name: "resp_conns_accepted", Value: r.conns.Load()},
		{Name: "resp_commands", Value: r.commands.Load()},
		{Name: "resp_set_exists", Value: r.setExists.Load()},
		{Name: "resp_set_dropped", Value: r.setDropped.Load()},
		{Name: "resp_errors", Value: r.errors.Load()},
		{Name: "resp_protocol_errors", Value: r.protocol.Load()},
		{Name: "resp_forwarded", Value: r.forwarded.Load()},
		{Name: "resp_auth_failures", Value: r.authFailed.Load()},
	}
}

// respConn is one RESP connection's state; its goroutine owns all of it.
type respConn struct {
	e      *Endpoint
	c      Conn // the server's side: waits, buffers, session, blocks
	nc     net.Conn
	br     *bufio.Reader
	r      *resp.Reader
	out    []byte       // replies not yet written
	bufs   net.Buffers  // writev scratch
	secret audit.Secret // the AUTH password, for forwarded operations
	prof   *Profile
	ns     identity.Namespace
	nsDig  identity.NamespaceDigest
	quit   bool
	// forwarded is set when the command being timed went to the key's
	// owner (Blocks.End).
	forwarded bool
	// open is true in open mode: no AUTH needed.
	open bool
}

// Serve runs one RESP connection, reading commands from br (nc's reader)
// and writing replies to nc, until EOF, QUIT, a protocol error, a
// deadline, drain or a panic; then it closes nc. c is the server's side of
// the connection.
func (e *Endpoint) Serve(nc net.Conn, br *bufio.Reader, c Conn) {
	e.stats.conns.Add(1)
	lim := readLimits
	lim.MaxBulk = int64(e.cfg.MaxValue)
	rc := &respConn{e: e, c: c, nc: nc, br: br, r: resp.NewReader(br, nc, lim)}
	if c.Open() {
		rc.open = true
		rc.login(sessionOpen(), nil)
	}
	err := rc.loopRecovered()
	rc.flush() // the last replies: a protocol error's, -WRONGPASS, QUIT's +OK

	nc.Close()
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		e.cfg.Logger.Debug("RESP connection closed", "remote", nc.RemoteAddr(), "err", err)
	}
}

// loopRecovered is loop, ending the connection on a panic
// (Transport.Panicked).
func (rc *respConn) loopRecovered() (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = rc.c.Panicked(v)
		}
	}()
	return rc.loop()
}

// loop reads and executes commands until EOF, QUIT, a protocol error (its
// -ERR queued), a deadline or drain.
func (rc *respConn) loop() error {
	for !rc.quit {
		if rc.br.Buffered() == 0 {
			if err := rc.flush(); err != nil {
				return err
			}
		}
		if more, err := rc.c.Await(); !more {
			return err
		}
		cmd, err := rc.r.ReadCommand()
		if err != nil {
			if errors.Is(err, resp.ErrProtocol) {
				rc.e.stats.protocol.Add(1)
				rc.errorf("ERR Protocol error: %s", trimProtocol(err))
			}
			rc.c.ReadFailed(err)
			return err
		}
		rc.e.stats.commands.Add(1)
		if err := rc.dispatch(cmd); err != nil {
			return err
		}
		if rc.quit {
			break // QUIT closes at once: its argument, if any, is not awaited
		}
		// A command that left its last argument unread has failed before
		// reading it: skip it to stay in sync.
		if err := rc.r.SkipPending(); err != nil {
			return err
		}
	}
	return nil
}

// trimProtocol is the reader's message without its package prefix.
func trimProtocol(err error) string {
	m := err.Error()
	const p = "gpucache/resp: protocol error: "
	if len(m) > len(p) && m[:len(p)] == p {
		return m[len(p):]
	}
	return m
}

// begin starts timing a GET or SET (Blocks.Begin).
func (rc *respConn) begin(cmd Timed) {
	rc.forwarded = false
	rc.c.Begin(cmd)
}

// flush writes the queued replies.
func (rc *respConn) flush() error {
	if len(rc.out) == 0 {
		return nil
	}
	rc.nc.SetWriteDeadline(time.Now().Add(rc.e.cfg.WriteTimeout))
	_, err := rc.nc.Write(rc.out)
	rc.out = rc.out[:0]
	if cap(rc.out) > 64<<10 {
		rc.out = nil
	}
	return err
}

// writeVec writes the queued replies and a bulk reply of b with one
// vectored write, b straight from its memory (a slab view).
func (rc *respConn) writeVec(b []byte) error {
	rc.out = resp.AppendBulkHeader(rc.out, len(b))
	rc.bufs = append(rc.bufs[:0], rc.out, b, crlf)
	rc.nc.SetWriteDeadline(time.Now().Add(rc.e.cfg.WriteTimeout))
	bufs := rc.bufs
	_, err := bufs.WriteTo(rc.nc)
	clear(rc.bufs[:3])
	rc.out = rc.out[:0]
	return err
}

var crlf = []byte("\r\n")

// pingLong echoes a PING message longer than the reader's argument limit
// (up to the last-argument bound, the hot tier's largest block), as
// Redis does. The message is read whole before the reply is written (a
// client that sends all of it before reading must not deadlock against
// the echo), into the connection's request buffer, which grows as bytes
// arrive and is charged to the request-buffer budget: the pre-session
// bucket before AUTH, the tenant's share after. A message the budget
// cannot hold answers -ERR and is skipped, so the connection stays in
// sync; the buffer is given back once the reply is written.
func (rc *respConn) pingLong(n int64) error {
	defer rc.c.ReleaseBuffers()
	msg, err := rc.c.ReadBuffered(int(n), pendingPart{rc.r})
	if err != nil {
		if errors.As(err, new(*wire.Error)) {
			if _, ok := rc.c.Tenant(); !ok {
				rc.errorf("ERR PING message of %d bytes: more than connections without AUTH may hold now (the pre-session request buffers); AUTH first", n)
			} else {
				rc.errorf("ERR PING message of %d bytes: the request buffers (tenant_request_buffers, request_buffers) cannot hold it now; retry later", n)
			}
			return nil // the loop skips what is left of it
		}
		return err
	}
	return rc.writeVec(msg)
}

// pendingPart reads the command's deferred last argument.
type pendingPart struct{ r *resp.Reader }

func (p pendingPart) Read(b []byte) (int, error) { return p.r.ReadPendingPart(b) }

func (rc *respConn) reply(b []byte) { rc.out = append(rc.out, b...) }

func (rc *respConn) int(n int64) { rc.out = resp.AppendInt(rc.out, n) }

// errorf queues an error reply; format starts with the error kind.
func (rc *respConn) errorf(format string, args ...any) {
	rc.e.stats.errors.Add(1)
	rc.out = resp.AppendError(rc.out, fmt.Sprintf(format, args...))
}

// upper returns the ASCII upper case of a command name (at most 32 bytes
// looked at; longer names are unknown anyway).
func upper(dst *[32]byte, b []byte) []byte {
	if len(b) > len(dst) {
		return nil
	}
	out := dst[:len(b)]
	for i, ch := range b {
		if 'a' <= ch && ch <= 'z' {
			ch -= 'a' - 'A'
		}
		out[i] = ch
	}
	return out
}

// printable renders a client-sent name for an error reply: at most 64
// bytes, control characters and non-ASCII escaped.
func printable(b []byte) string {
	if len(b) > 64 {
		b = b[:64]
	}
	var sb bytes.Buffer
	for _, ch := range b {
		if ch < 0x20 || ch >= 0x7f || ch == '\'' {
			fmt.Fprintf(&sb, "\\x%02x", ch)
			continue
		}
		sb.WriteByte(ch)
	}
	return sb.String()
}

// dispatch executes one command. A returned error closes the connection.
func (rc *respConn) dispatch(cmd resp.Command) error {
	if h := rc.e.cfg.Handling; h != nil {
		h(string(cmd.Args[0]))
	}
	var nb [32]byte
	name := upper(&nb, cmd.Args[0])
	args := cmd.Args[1:]
	nargs := len(args)
	if cmd.Pending >= 0 {
		nargs++
	}
	switch string(name) {
	case "AUTH":
		return rc.auth(args, cmd.Pending)
	case "PING":
		switch {
		case nargs == 0:
			rc.reply(resp.Pong)
		case nargs == 1 && cmd.Pending < 0:
			rc.out = resp.AppendBulk(rc.out, args[0])
		case nargs == 1:
			return rc.pingLong(cmd.Pending)
		default:
			rc.errorf("ERR wrong number of arguments for 'ping' command")
		}
		return nil
	case "QUIT":
		rc.reply(resp.OK)
		rc.quit = true
		return nil
	case "HELLO":
		// Unknown, before and after AUTH: a client that tries RESP3 stays
		// on RESP2.
		rc.errorf("ERR unknown command '%s'", printable(cmd.Args[0]))
		return nil
	}
	if _, ok := rc.c.Tenant(); !ok {
		rc.errorf("NOAUTH Authentication required.")
		return nil
	}
	switch string(name) {
	case "SELECT":
		if nargs != 1 || cmd.Pending >= 0 {
			rc.errorf("ERR wrong number of arguments for 'select' command")
		} else if _, ok := resp.Decimal(args[0]); !ok {
			rc.errorf("ERR value is not an integer or out of range")
		} else {
			rc.reply(resp.OK) // one keyspace per tenant: every index is it
		}
	case "CLIENT":
		rc.reply(resp.OK)
	case "CONFIG":
		rc.config(args, cmd.Pending)
	case "SET":
		rc.begin(TimedSet)
		err := rc.set(args, cmd.Pending)
		rc.c.End(rc.forwarded)
		return err
	case "GET":
		if nargs != 1 || cmd.Pending >= 0 {
			rc.errorf("ERR wrong number of arguments for 'get' command")
			return nil
		}
		rc.begin(TimedGet)
		err := rc.get(args[0])
		rc.c.End(rc.forwarded)
		return err
	case "EXISTS":
		if nargs < 1 || cmd.Pending >= 0 {
			rc.errorf("ERR wrong number of arguments for 'exists' command")
			return nil
		}
		rc.exists(args)
	case "DEL":
		if nargs < 1 || cmd.Pending >= 0 {
			rc.errorf("ERR wrong number of arguments for 'del' command")
			return nil
		}
		rc.del(args)
	case "MULTI", "EXEC", "DISCARD", "WATCH", "UNWATCH":
		// redis-py's pipeline() wraps its commands in MULTI/EXEC by
		// default: say what to use instead (docs/RESP.md, Known limits).
		rc.errorf("ERR %s is not supported: gpucache's RESP endpoint has no transactions, so commands sent between MULTI and EXEC run one by one; "+
			"send them without MULTI/EXEC (redis-py: pipeline(transaction=False))", name)
	default:
		rc.errorf("ERR unknown command '%s'", printable(cmd.Args[0]))
	}
	return nil
}

// config answers CONFIG GET for the two settings redis-benchmark reads at
// start (save, appendonly), as a server without persistence would, and
// an empty array for anything else; other CONFIG subcommands, and a
// parameter list other than one name, are refused.
func (rc *respConn) config(args [][]byte, pending int64) {
	var nb [32]byte
	if len(args) != 2 || pending >= 0 || string(upper(&nb, args[0])) != "GET" {
		rc.errorf("ERR only CONFIG GET is supported")
		return
	}
	var val string
	switch string(upper(&nb, args[1])) {
	case "SAVE":
	case "APPENDONLY":
		val = "no"
	default:
		rc.out = resp.AppendArrayHeader(rc.out, 0)
		return
	}
	rc.out = resp.AppendArrayHeader(rc.out, 2)
	rc.out = resp.AppendBulk(rc.out, args[1])
	rc.out = resp.AppendBulk(rc.out, []byte(val))
}
