package client

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/gpucache/gpucache/api/wire"
)

// Defaults of Config.
const (
	DefaultAddr           = "127.0.0.1:9400"
	DefaultTenant         = "default"
	DefaultConns          = 4
	DefaultDialTimeout    = 2 * time.Second
	DefaultRequestTimeout = 5 * time.Second
	DefaultClientName     = "gpucache-go"
)

// Config configures a Client. The zero value is usable: every field has a
// default, applied by Dial.
type Config struct {
	// Addr is the server's host:port. Default DefaultAddr (127.0.0.1:9400).
	// With Network "unix" it is the path of the server's unix_listen
	// socket; "unix:/path" sets both.
	Addr string
	// Network is "tcp" (the default) or "unix". On "unix" the client can
	// use registered regions (NewRegion, RegisterRegion): a GetInto into,
	// or a Put from, a region's memory moves no payload over the socket.
	Network string
	// Tenant is the session tenant; every namespace used on this client
	// must carry the same tenant. Without credentials (Secret, TLS) it is
	// sent in HELLO and defaults to "default". With credentials the server
	// derives the tenant from them: leave Tenant empty to accept it, or set
	// it to have HELLO refused when the credential belongs to another
	// tenant. Client.Tenant reports the session tenant.
	Tenant string
	// Secret is the tenant's bearer secret, sent in HELLO. It is never
	// logged. Nil: none.
	Secret []byte
	// TLS, when set, wraps every connection in TLS with this config (add a
	// client certificate for mTLS). ServerName defaults to Addr's host.
	TLS *tls.Config
	// Conns is the number of pooled connections. Default 4.
	Conns int
	// DialTimeout bounds connecting plus the HELLO exchange. Default 2s.
	DialTimeout time.Duration
	// RequestTimeout bounds a call whose context has no deadline. Default 5s.
	RequestTimeout time.Duration
	// MaxInFlight bounds requests in flight per connection; the effective
	// bound is the smaller of this and the server's HELLO limit. Default
	// wire.DefaultMaxInFlight (64).
	MaxInFlight int
	// ClientName is sent in HELLO for the server's logs. Default
	// "gpucache-go".
	ClientName string
	// AbandonGrace is how long a connection may keep a timed-out request
	// unanswered before the client closes it (its in-flight slot is held
	// until the answer comes). Default 1s.
	AbandonGrace time.Duration
	// Logger receives connection-level events at debug level. Default: none.
	Logger *slog.Logger

	// hooks are test hooks; nil in production.
	hooks *hooks
}

// hooks let tests observe internal events without sleeping.
type hooks struct {
	// connFailed is called once when a pooled connection fails.
	connFailed func(err error)
	// dialed is called after each successful dial and HELLO.
	dialed func()
	// dial, when set, replaces the TCP dial (tests use in-memory pipes).
	dial func(ctx context.Context, addr string) (net.Conn, error)
}

// Default returns a Config with every default filled in.
func Default() Config {
	var c Config
	c.applyDefaults()
	return c
}

func (c *Config) applyDefaults() {
	if path, ok := strings.CutPrefix(c.Addr, "unix:"); ok && (c.Network == "" || c.Network == "unix") {
		c.Network, c.Addr = "unix", path
	}
	if c.Addr == "" {
		c.Addr = DefaultAddr
	}
	if c.Tenant == "" && c.Secret == nil && c.TLS == nil {
		c.Tenant = DefaultTenant
	}
	if c.Conns == 0 {
		c.Conns = DefaultConns
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = wire.DefaultMaxInFlight
	}
	if c.ClientName == "" {
		c.ClientName = DefaultClientName
	}
	if c.AbandonGrace == 0 {
		c.AbandonGrace = time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate reports the first field out of range. Dial calls it after
// applying defaults.
func (c Config) Validate() error {
	switch {
	case c.Network != "" && c.Network != "tcp" && c.Network != "unix":
		return fmt.Errorf("%w: Network %q is not tcp or unix", ErrInvalid, c.Network)
	case c.Network == "unix" && c.TLS != nil:
		return fmt.Errorf("%w: TLS is not used on a Unix socket", ErrInvalid)
	case c.Conns < 1 || c.Conns > 1024:
		return fmt.Errorf("%w: Conns %d not in 1..1024", ErrInvalid, c.Conns)
	case c.DialTimeout < 0:
		return fmt.Errorf("%w: DialTimeout %v is negative", ErrInvalid, c.DialTimeout)
	case c.RequestTimeout < 0:
		return fmt.Errorf("%w: RequestTimeout %v is negative", ErrInvalid, c.RequestTimeout)
	case c.MaxInFlight < 1 || c.MaxInFlight > 1<<16:
		return fmt.Errorf("%w: MaxInFlight %d not in 1..65536", ErrInvalid, c.MaxInFlight)
	case c.Secret != nil && (len(c.Secret) == 0 || len(c.Secret) > wire.MaxCredentialLen):
		return fmt.Errorf("%w: Secret is %d bytes, want 1..%d", ErrInvalid, len(c.Secret), wire.MaxCredentialLen)
	case len(c.Tenant) > wire.MaxStringLen:
		return fmt.Errorf("%w: Tenant is %d bytes, limit %d", ErrInvalid, len(c.Tenant), wire.MaxStringLen)
	case len(c.ClientName) > wire.MaxStringLen:
		return fmt.Errorf("%w: ClientName is %d bytes, limit %d", ErrInvalid, len(c.ClientName), wire.MaxStringLen)
	case c.AbandonGrace < 0:
		return fmt.Errorf("%w: AbandonGrace %v is negative", ErrInvalid, c.AbandonGrace)
	}
	return nil
}
