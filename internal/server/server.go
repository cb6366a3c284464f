package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/directory"
	"github.com/gpucache/gpucache/internal/hot"
	"github.com/gpucache/gpucache/internal/lower"
	"github.com/gpucache/gpucache/internal/reqbuf"
	"github.com/gpucache/gpucache/internal/respserve"
	"github.com/gpucache/gpucache/internal/security"
	"github.com/gpucache/gpucache/internal/security/seal"
)

// Sentinel errors.
var (
	ErrConfig = errors.New("gpucache/server: invalid config")
	ErrClosed = errors.New("gpucache/server: server closed")
)

// Config configures a Server.
type Config struct {
	// Store is the hot tier the server serves from (required). The server
	// does not close it.
	Store *hot.Store
	// Limits are the protocol limits announced in HELLO. Zero fields take
	// wire.DefaultLimits(); MaxPayload is always Store.MaxPayload().
	Limits wire.Limits
	// Name is announced in HELLO. Default "gpucached".
	Name string
	// Logger receives connection-level events. Default slog.Default().
	Logger *slog.Logger
	// ReadTimeout bounds reading one frame, header and body, from the
	// moment its first byte arrives ("a frame started is a frame timed").
	// Default 30s.
	ReadTimeout time.Duration
	// WriteTimeout bounds writing one batch of responses. Default 30s.
	WriteTimeout time.Duration
	// IdleTimeout closes a connection that sends no byte of a new request
	// for this long. Default 5m.
	IdleTimeout time.Duration
	// MaxConns bounds open connections; more are closed on accept. Default 4096.
	MaxConns int
	// HelloTimeout bounds the time from accept (TLS handshake included)
	// until HELLO succeeds; a connection that has not authenticated by then
	// is closed. A session that ends (expired credential) has HelloTimeout
	// again to send HELLO. Default 5s.
	HelloTimeout time.Duration
	// MaxUnauthPerAddr bounds the connections from one source IP address
	// that have not completed HELLO; more are closed on accept, so silent
	// connections from one address cannot take every slot. Default 64.
	MaxUnauthPerAddr int
	// RequestBuffers is the budget, in bytes, of request buffers above the
	// first 16 KiB of each connection (internal/reqbuf): large request bodies,
	// PUT and FILL_COMMIT tables and their decoded form, across all
	// connections. It must hold the largest table a request may carry.
	// Default 128 MiB.
	RequestBuffers int64
	// TenantRequestBuffers is one tenant's share of RequestBuffers: all its
	// sessions together hold at most this much (internal/reqbuf). It must be at
	// least reqbuf.MaxRequestCost and at most RequestBuffers. Default: the open-mode
	// fair share, reqbuf.FairShare(RequestBuffers, Limits, 2); the
	// daemon sets the share for its number of tenants.
	TenantRequestBuffers int64
	// BufferWait bounds how long a request waits for RequestBuffers
	// budget; then it is refused RATE_LIMITED (retry after BufferWait)
	// and its body skipped. Default 1s.
	BufferWait time.Duration
	// Directory coordinates single-flight fills. Default: a directory of its
	// own for shard Shard, closed by Shutdown.
	Directory *directory.Directory
	// Shard is the shard this node owns (a single node is shard 0).
	Shard directory.ShardID
	// FillDeadline bounds one fill leader's turn when the server creates the
	// directory. Default 10s.
	FillDeadline time.Duration
	// Lower is the storage below DRAM (internal/lower): the flash tier,
	// the cold tier, or a chain of them. A GET that misses DRAM refills
	// from it (refillMiss: concurrent misses on one block share one refill
	// through the directory), LOOKUP and RESP EXISTS count its blocks as
	// present, DELETE and RESP DEL hide its copies, each stored block is
	// announced to it (Stored) so it can write the block behind when DRAM
	// evicts it, and STAT appends its entries. The hot store's OnEvict is
	// the daemon's to point at Lower.Evicted. Nil: DRAM only.
	Lower lower.Tier
	// Guard authenticates sessions and authorises every request: ACL,
	// rate limits and replay stamps. Nil is open mode: the tenant is what
	// HELLO names, everything is allowed, nothing is limited (loopback
	// deployments only; the daemon enforces that).
	Guard *security.Guard
	// HotSeal, when set, seals every block as it enters the hot tier (PUT,
	// FILL_COMMIT, cold refill) and verifies the seal on every hot read; a
	// block that fails is dropped, served as a miss and audited. Store must
	// have been created with TagSize >= HotTagSize.
	HotSeal *seal.Keyring
	// Cluster, when set, makes this server a member of a cluster: requests
	// of version-2 sessions for keys it does not own under the current view
	// answer WRONG_EPOCH, MEMBERS answers the view, and the control mode
	// (etcd reachable or not) limits what is served. Nil is a single node:
	// it owns every key. See cluster.go.
	Cluster *Cluster
	// RegionBytes bounds the registered regions mapped at once, every
	// connection together (region.go). Default 256 GiB.
	RegionBytes int64
	// TenantRegionBytes bounds one tenant's registered regions. Default 64
	// GiB, at most RegionBytes.
	TenantRegionBytes int64
	// MaxVersion is the highest protocol version the server negotiates
	// (it speaks every version from 1 up to it). Zero means
	// wire.VersionMax; more than wire.VersionMax is ErrConfig. 1 pins the previous protocol (a rolling
	// upgrade runs new binaries pinned until every node is upgraded).
	MaxVersion uint8
	// Forwarder, when set, serves RESP operations on keys another member
	// owns (respserve.Forwarder). Nil: every key is served locally.
	Forwarder Forwarder
	// ForwardStats, when set, returns the forwarder's STAT entries
	// (forwarded operations, misses by reason, budget refusals, pool
	// size); Stats appends them last. Nil by default.
	ForwardStats func() []wire.StatEntry
	// RESPProfiles are the RESP endpoint's profiles, by tenant (respserve):
	// the namespace and value rules of everything a tenant stores over
	// RESP. In open mode the tenant is security.DefaultTenant. A tenant
	// without a profile can authenticate but not read or write. Nil: no
	// tenant can use RESP data commands.
	RESPProfiles map[string]RESPProfile
	// Hooks are test hooks; nil in production.
	Hooks *Hooks
}

// Hooks let tests observe the server without sleeping.
type Hooks struct {
	// ConnClosed is called when a connection's goroutines have finished.
	ConnClosed func()
	// BeforeWrite is called by a connection's writer before each write.
	BeforeWrite func()
	// Joined is called each time ACQUIRE makes a session wait on a fill,
	// and each time a GET's refill joins another session's (refillMiss).
	Joined func()
	// Reserved is called after each PUT or FILL_COMMIT block's hot-tier
	// reservation, with the session's tenant and the reservation's error
	// (nil: the payload is read next).
	Reserved func(tenant string, err error)
	// AcceptFailed is called each time accept fails and Serve backs off
	// for backoff before trying again.
	AcceptFailed func(err error, backoff time.Duration)
	// Handling is called by a connection's goroutine before it executes
	// a request, with the operation's name (a native opcode, or a RESP
	// command as sent); a test may panic in it.
	Handling func(op string)
	// RegionCopy is called before each copy to or from a registered
	// region (region.go); a test may truncate the region in it.
	RegionCopy func()
}

// Defaults of the connection limits.
const (
	defaultHelloTimeout     = 5 * time.Second
	defaultMaxUnauthPerAddr = 64
	defaultRequestBuffers   = 128 << 20
	defaultBufferWait       = time.Second
	defaultBufferShares     = 2 // as config.OpenModeShares
	defaultRegionBytes      = 256 << 30
	defaultTenantRegion     = 64 << 30
)

func (c Config) withDefaults() (Config, error) {
	if c.Store == nil {
		return c, fmt.Errorf("%w: no store", ErrConfig)
	}
	d := wire.DefaultLimits()
	if c.Limits.MaxFrame == 0 {
		c.Limits.MaxFrame = d.MaxFrame
	}
	if c.Limits.MaxBatch == 0 {
		c.Limits.MaxBatch = d.MaxBatch
	}
	if c.Limits.MaxInFlight == 0 {
		c.Limits.MaxInFlight = d.MaxInFlight
	}
	c.Limits.MaxPayload = uint32(c.Store.MaxPayload())
	if uint64(c.Limits.MaxFrame) < uint64(c.Limits.MaxPayload)+4096 {
		return c, fmt.Errorf("%w: max frame %d cannot carry one %d-byte payload", ErrConfig, c.Limits.MaxFrame, c.Limits.MaxPayload)
	}
	if c.Name == "" {
		c.Name = "gpucached"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.ReadTimeout <= 0 {
		c.ReadTimeout = 30 * time.Second
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 30 * time.Second
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 5 * time.Minute
	}
	if c.MaxConns <= 0 {
		c.MaxConns = 4096
	}
	if c.HelloTimeout <= 0 {
		c.HelloTimeout = defaultHelloTimeout
	}
	if c.MaxUnauthPerAddr <= 0 {
		c.MaxUnauthPerAddr = defaultMaxUnauthPerAddr
	}
	if c.RequestBuffers <= 0 {
		c.RequestBuffers = defaultRequestBuffers
	}
	if c.BufferWait <= 0 {
		c.BufferWait = defaultBufferWait
	}
	if c.Hooks == nil {
		c.Hooks = &Hooks{}
	}
	if c.FillDeadline <= 0 {
		c.FillDeadline = 10 * time.Second
	}
	if c.Guard == nil {
		c.Guard = openGuard
	}
	if c.MaxVersion == 0 {
		c.MaxVersion = wire.VersionMax
	}
	if c.MaxVersion > wire.VersionMax {
		return c, fmt.Errorf("%w: MaxVersion %d: this server speaks versions %d..%d", ErrConfig, c.MaxVersion, wire.Version1, wire.VersionMax)
	}
	if c.HotSeal != nil && c.Store.TagSize() < HotTagSize {
		return c, fmt.Errorf("%w: HotSeal needs a store with TagSize >= %d", ErrConfig, HotTagSize)
	}
	if need := reqbuf.MaxRequestCost(c.Limits); c.RequestBuffers < need {
		return c, fmt.Errorf("%w: RequestBuffers %d cannot hold the largest request table (%d bytes with max_batch %d)",
			ErrConfig, c.RequestBuffers, need, c.Limits.MaxBatch)
	}
	if c.RegionBytes == 0 {
		c.RegionBytes = defaultRegionBytes
	}
	if c.TenantRegionBytes == 0 {
		c.TenantRegionBytes = min(defaultTenantRegion, c.RegionBytes)
	}
	if c.RegionBytes < 0 || c.TenantRegionBytes < 0 || c.TenantRegionBytes > c.RegionBytes {
		return c, fmt.Errorf("%w: region bytes %d, tenant region bytes %d", ErrConfig, c.RegionBytes, c.TenantRegionBytes)
	}
	if c.TenantRequestBuffers == 0 {
		c.TenantRequestBuffers = reqbuf.FairShare(c.RequestBuffers, c.Limits, defaultBufferShares)
	}
	if err := checkTenantRequestBuffers(c.TenantRequestBuffers, c.RequestBuffers, c.Limits); err != nil {
		return c, err
	}
	return c, nil
}

// Server serves the wire protocol from a hot store. Create it with New, run
// it with Serve, stop it with Shutdown.
type Server struct {
	cfg     Config
	store   *hot.Store
	guard   *security.Guard
	tenants tenantTable
	sealer  *hotSealer // nil unless Config.HotSeal
	log     *slog.Logger
	stats   counters
	lat     latencies           // latency histograms (latency.go)
	bufs    *reqbuf.Budget      // request buffers of every connection
	resp    *respserve.Endpoint // the RESP endpoint (resp.go)
	// panicLogged is set once a connection panic's stack was logged.
	panicLogged atomic.Bool

	mu struct {
		sync.Mutex
		listeners map[net.Listener]struct{}
		conns     map[*conn]struct{}
		closing   bool
		// unauth counts, by source address, the connections that have not
		// completed HELLO (conn.unauthAddr); an address at
		// MaxUnauthPerAddr gets no more.
		unauth map[string]int
	}
	leases  leaseRegistry
	regions regionBudget   // registered regions (region.go)
	wg      sync.WaitGroup // one per connection
	done    chan struct{}  // closed when Shutdown begins

	dir        *directory.Directory
	ownDir     bool          // dir was created here and is closed by Shutdown
	connIDs    atomic.Uint64 // directory owner ids
	expireOnce sync.Once
	expireDone chan struct{} // guarded by mu; closed when expireLoop returns
	expireKick chan struct{} // a leader was added: recompute the next deadline
}

// New returns a server; it does not listen yet.
func New(cfg Config) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, store: cfg.Store, guard: cfg.Guard, sealer: newHotSealer(cfg.HotSeal), log: cfg.Logger, done: make(chan struct{}), dir: cfg.Directory,
		expireKick: make(chan struct{}, 1),
		bufs:       reqbuf.New(cfg.RequestBuffers, reqbuf.PreSessionBuffers(cfg.Limits), cfg.TenantRequestBuffers)}
	if s.dir == nil {
		d, err := directory.New(directory.Config{Shard: cfg.Shard, FillDeadline: cfg.FillDeadline})
		if err != nil {
			return nil, err
		}
		s.dir, s.ownDir = d, true
	}
	s.resp = s.newRESPEndpoint()
	s.mu.listeners = make(map[net.Listener]struct{})
	s.mu.conns = make(map[*conn]struct{})
	s.mu.unauth = make(map[string]int)
	return s, nil
}

// Limits returns the limits the server announces.
func (s *Server) Limits() wire.Limits { return s.cfg.Limits }

// Serve accepts connections on ln until Shutdown, or until ln is closed
// by someone else. It returns nil after Shutdown and the accept error
// (net.ErrClosed) when ln was closed under it. Every other accept error
// (EMFILE, ENFILE, ECONNABORTED, ...) is counted and retried after a
// bounded exponential backoff (5ms doubling to 1s): a node out of file
// descriptors keeps serving the connections it has and accepts again when
// some close. Serve closes ln.
func (s *Server) Serve(ln net.Listener) error {
	return s.serve(ln, func(c *conn) { c.serve() })
}

// serve accepts connections on ln, running run on each in a goroutine of
// its own (the native protocol, or RESP).
func (s *Server) serve(ln net.Listener, run func(*conn)) error {
	s.mu.Lock()
	if s.mu.closing {
		s.mu.Unlock()
		ln.Close()
		return ErrClosed
	}
	s.mu.listeners[ln] = struct{}{}
	s.mu.Unlock()
	s.expireOnce.Do(func() {
		s.mu.Lock()
		s.expireDone = make(chan struct{})
		s.mu.Unlock()
		go s.expireLoop()
	})
	defer func() {
		s.mu.Lock()
		delete(s.mu.listeners, ln)
		s.mu.Unlock()
		ln.Close()
	}()
	var backoff time.Duration
	var failing uint64 // accept errors in a row
	for {
		nc, err := ln.Accept()
		if err != nil {
			select {
			case <-s.done:
				return nil
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			s.stats.acceptErrors.Add(1)
			failing++
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			if failing == 1 || backoff == time.Second {
				// Once when the errors start, then at most once a second.
				s.log.Warn("accept failed; backing off and serving open connections", "err", err, "backoff", backoff, "failures", failing)
			}
			if h := s.cfg.Hooks.AcceptFailed; h != nil {
				h(err, backoff)
			}
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-s.done:
				t.Stop()
				return nil
			}
			continue
		}
		if failing > 0 {
			s.log.Info("accept recovered", "failures", failing)
		}
		backoff, failing = 0, 0
		if c := s.accept(nc); c != nil {
			go run(c)
		}
	}
}

// accept registers a new connection, or closes it (server closing, full,
// or too many unauthenticated connections from its address) and returns nil.
func (s *Server) accept(nc net.Conn) *conn {
	addr := sourceAddr(nc.RemoteAddr())
	if fc, ok := nc.(*fdConn); ok {
		// Unix peers have no address: they count by user id.
		addr = fmt.Sprintf("unix:uid=%d", fc.peer.uid)
	}
	s.mu.Lock()
	full := len(s.mu.conns) >= s.cfg.MaxConns
	unauthFull := s.mu.unauth[addr] >= s.cfg.MaxUnauthPerAddr
	if s.mu.closing || full || unauthFull {
		closing := s.mu.closing
		s.mu.Unlock()
		s.stats.connsRejected.Add(1)
		switch {
		case closing:
		case full:
			s.log.Warn("connection limit reached; closing new connection", "remote", nc.RemoteAddr(), "max_conns", s.cfg.MaxConns)
		default:
			s.stats.unauthRejected.Add(1)
			s.log.Debug("too many unauthenticated connections from one address; closing new connection",
				"remote", nc.RemoteAddr(), "max_unauth_per_addr", s.cfg.MaxUnauthPerAddr)
		}
		nc.Close()
		return nil
	}
	c := newConn(s, nc)
	c.unauthAddr = addr
	s.mu.unauth[addr]++
	s.mu.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	s.stats.connsAccepted.Add(1)
	s.stats.connsOpen.Add(1)
	s.stats.connsUnauth.Add(1)
	return c
}

// authenticated frees c's place among its address's unauthenticated
// connections, once: its first successful HELLO. Reader only.
func (s *Server) authenticated(c *conn) {
	if c.unauthAddr == "" {
		return
	}
	s.mu.Lock()
	s.dropUnauthLocked(c)
	s.mu.Unlock()
}

func (s *Server) dropUnauthLocked(c *conn) {
	if c.unauthAddr == "" {
		return
	}
	if n := s.mu.unauth[c.unauthAddr] - 1; n > 0 {
		s.mu.unauth[c.unauthAddr] = n
	} else {
		delete(s.mu.unauth, c.unauthAddr)
	}
	c.unauthAddr = ""
	s.stats.connsUnauth.Add(-1)
}

// sourceAddr is the key connections from one source share: the remote IP
// address (the port differs per connection), or the whole address for
// non-IP transports.
func sourceAddr(a net.Addr) string {
	if a == nil {
		return ""
	}
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	if host, _, err := net.SplitHostPort(a.String()); err == nil {
		return host
	}
	return a.String()
}

func (s *Server) forget(c *conn) {
	s.mu.Lock()
	delete(s.mu.conns, c)
	s.dropUnauthLocked(c)
	s.mu.Unlock()
	s.stats.connsOpen.Add(-1)
	if h := s.cfg.Hooks.ConnClosed; h != nil {
		h()
	}
	s.wg.Done()
}

// Shutdown stops accepting, lets every connection finish the requests it has
// already read, releases their leases and closes them. If ctx ends first the
// remaining connections are closed hard; Shutdown still waits for their
// goroutines and returns ctx.Err().
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if !s.mu.closing {
		s.mu.closing = true
		close(s.done)
	}
	for ln := range s.mu.listeners {
		ln.Close()
	}
	for c := range s.mu.conns {
		c.drain()
	}
	s.mu.Unlock()

	finished := make(chan struct{})
	go func() { s.wg.Wait(); close(finished) }()
	var err error
	select {
	case <-finished:
	case <-ctx.Done():
		s.mu.Lock()
		for c := range s.mu.conns {
			c.nc.Close()
		}
		s.mu.Unlock()
		<-finished
		err = ctx.Err()
	}
	s.mu.Lock()
	expireDone := s.expireDone
	s.mu.Unlock()
	if expireDone != nil {
		<-expireDone
	}
	if s.ownDir {
		s.dir.Close()
	}
	if n := s.releaseAllLeases(); n > 0 {
		s.log.Info("released leases on shutdown", "leases", n)
	}
	return err
}

// counters are the server's own statistics; all atomic.
type counters struct {
	connsAccepted   atomic.Uint64
	connsRejected   atomic.Uint64
	connsOpen       atomic.Int64
	requests        [wire.OpMax + 1]atomic.Uint64
	errors          [wire.CodeMax + 1]atomic.Uint64
	bytesIn         atomic.Uint64 // payload bytes stored by PUT
	bytesOut        atomic.Uint64 // payload bytes served by GET
	blocksHit       atomic.Uint64
	blocksMiss      atomic.Uint64
	coldHits        atomic.Uint64 // hot misses refilled from the cold tier
	coldMisses      atomic.Uint64 // hot misses the cold tier did not have
	promoted        atomic.Uint64 // blocks a leasing LOOKUP read into DRAM from a local tier below
	keyMismatch     atomic.Uint64 // PUT and FILL_COMMIT blocks refused KEY_MISMATCH
	authFailures    atomic.Uint64 // failed HELLOs
	denied          atomic.Uint64 // requests the ACL refused
	rateLimited     atomic.Uint64 // requests refused RATE_LIMITED
	replays         atomic.Uint64 // stamps refused by the replay window
	hotSealFailures atomic.Uint64 // hot blocks that failed their seal
	wrongEpoch      atomic.Uint64 // requests refused WRONG_EPOCH
	modeRefused     atomic.Uint64 // blocks refused because of the control mode (read-only, unknown)
	acceptErrors    atomic.Uint64 // failed accepts (each backed off)
	connsUnauth     atomic.Int64  // open connections that have not completed HELLO
	unauthRejected  atomic.Uint64 // connections closed on accept: their address had MaxUnauthPerAddr unauthenticated
	helloTimeouts   atomic.Uint64 // connections closed by HelloTimeout
	connPanics      atomic.Uint64 // connections ended by a panic in their goroutine (connpanic.go)
	// Registered regions (region.go).
	regionsRegistered atomic.Uint64 // REGISTERs that mapped a region
	regionRefused     atomic.Uint64 // REGISTERs refused: not shareable memory, unsealed memfd, over a bound
	regionFaults      atomic.Uint64 // copies that faulted; each dropped its region
	regionBytesIn     atomic.Uint64 // PUT_FROM bytes stored
	regionBytesOut    atomic.Uint64 // GET_INTO bytes delivered
}
