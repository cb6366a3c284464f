package config

import (
	"time"

	"github.com/gpucache/gpucache/api/wire"
)

// connFields are the connection-hardening settings: handshake deadline,
// unauthenticated connections per address, request-buffer budget, and the
// admin listener's cap and idle timeout.
func (c *Config) connFields() []field {
	return []field{
		{"hello_timeout", "close a connection that has not completed HELLO this long after accept", (*durVal)(&c.HelloTimeout)},
		{"max_unauth_per_addr", "most connections from one source address that have not completed HELLO", (*intVal)(&c.MaxUnauthPerAddr)},
		{"request_buffers", "memory budget of request buffers (large bodies and PUT tables) across all connections", &c.RequestBuffers},
		{"admin_max_conns", "most open admin HTTP connections", (*intVal)(&c.AdminMaxConns)},
		{"admin_idle_timeout", "close idle admin HTTP keep-alive connections after this long", (*durVal)(&c.AdminIdleTimeout)},
	}
}

// MinRequestBuffers is the smallest request_buffers that can serve the
// largest request table under maxBatch: a FILL_COMMIT table of maxBatch
// entries and wire.MaxRequestTokens token ids, plus its decoded form
// (half as much again). It mirrors reqbuf.MaxRequestCost.
func MinRequestBuffers(maxBatch int) ByteSize {
	table := int64(4 + wire.MaxNamespaceLen + 4 + maxBatch*wire.FillBlockSize(0) + 4*wire.MaxRequestTokens)
	return ByteSize(table + table/2 + table)
}

func (c Config) validateConn() error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"hello_timeout", c.HelloTimeout}, {"admin_idle_timeout", c.AdminIdleTimeout}} {
		if d.v <= 0 {
			return invalidf("%s must be positive, got %s", d.name, d.v)
		}
	}
	if c.MaxUnauthPerAddr < 1 || c.MaxUnauthPerAddr > 1<<20 {
		return invalidf("max_unauth_per_addr %d not in 1..%d", c.MaxUnauthPerAddr, 1<<20)
	}
	if c.AdminMaxConns < 1 || c.AdminMaxConns > 1<<16 {
		return invalidf("admin_max_conns %d not in 1..%d", c.AdminMaxConns, 1<<16)
	}
	if min := MinRequestBuffers(c.MaxBatch); c.RequestBuffers < min {
		return invalidf("request_buffers %s cannot hold the largest request table with max_batch %d: it needs at least %s (%d bytes)",
			c.RequestBuffers, c.MaxBatch, min.Human(), int64(min))
	}
	return nil
}

// FDReserve is the number of file descriptors kept for everything that is
// not a client connection: the listeners, the cold tier (fs files, S3
// HTTP connections), etcd, log and audit files, the epoll descriptor and
// the standard streams.
const FDReserve = 256

// FDsNeeded is how many file descriptors c may use at most: every data
// connection, every admin connection and FDReserve. gpucached refuses to
// start under a limit that cannot hold it; `gpucache doctor` compares it
// with RLIMIT_NOFILE the same way.
func (c Config) FDsNeeded() uint64 {
	n := uint64(c.MaxConns) + FDReserve
	if c.AdminListen != "off" {
		n += uint64(c.AdminMaxConns)
	}
	return n
}
