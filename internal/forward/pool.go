package forward

import (
	"container/list"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/gpucache/gpucache/client"
	"github.com/gpucache/gpucache/internal/security/audit"
)

// errClosed is a pool used after Close.
var errClosed = errors.New("gpucache/forward: forwarder closed")

// pool holds one client per (owner address, tenant, credential): at most
// cfg.MaxClients, least recently used first out, and none idle for longer
// than cfg.IdleClose. A client leaves the pool when it is evicted, idle or
// the pool closes, and is closed once no operation uses it any more.
type pool struct {
	cfg  Config
	stop chan struct{} // closed by close: stops the sweeper
	done chan struct{} // closed when the sweeper has returned

	mu struct {
		sync.Mutex
		byKey  map[poolKey]*list.Element // of *entry
		lru    list.List                 // front: most recently used
		closed bool
	}
}

type poolKey struct{ addr, tenant, secret string }

type entry struct {
	key poolKey
	c   *client.Client
	// Guarded by pool.mu.
	refs     int       // operations using c
	gone     bool      // out of the pool: close c when refs reaches 0
	lastUsed time.Time // when refs last dropped to 0, or was taken
}

func newPool(cfg Config) *pool {
	p := &pool{cfg: cfg, stop: make(chan struct{}), done: make(chan struct{})}
	p.mu.byKey = make(map[poolKey]*list.Element)
	go p.sweep()
	return p
}

// get returns the client for (addr, tenant, secret), dialing it (outside
// the lock) if the pool has none, and a release the caller calls once its
// operation has ended.
func (p *pool) get(ctx context.Context, addr, tenant string, secret audit.Secret) (*client.Client, func(), error) {
	k := poolKey{addr, tenant, string(secret.Bytes())}
	if e, err := p.take(k); e != nil || err != nil {
		return p.hand(e, err)
	}
	cfg := client.Config{Addr: addr, Tenant: tenant, TLS: p.cfg.TLS, Conns: p.cfg.Conns,
		DialTimeout: p.cfg.DialTimeout, RequestTimeout: p.cfg.Timeout, ClientName: "gpucache-forward",
		Logger: p.cfg.Logger}
	if len(secret) > 0 {
		cfg.Secret = secret.Bytes() // sent once, in the client's HELLO
	}
	if cfg.TLS != nil {
		cfg.TLS = cfg.TLS.Clone()
	}
	c, err := client.Dial(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	return p.hand(p.add(k, c))
}

func (p *pool) hand(e *entry, err error) (*client.Client, func(), error) {
	if err != nil {
		return nil, nil, err
	}
	var once sync.Once
	return e.c, func() { once.Do(func() { p.put(e) }) }, nil
}

// take returns the pooled entry for k with a reference taken, or nil.
func (p *pool) take(k poolKey) (*entry, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.closed {
		return nil, errClosed
	}
	el, ok := p.mu.byKey[k]
	if !ok {
		return nil, nil
	}
	e := el.Value.(*entry)
	e.refs++
	e.lastUsed = time.Now()
	p.mu.lru.MoveToFront(el)
	return e, nil
}

// add pools c under k, unless another caller pooled one first (then c is
// closed and that one is used), evicting the least recently used entry
// past MaxClients.
func (p *pool) add(k poolKey, c *client.Client) (*entry, error) {
	p.mu.Lock()
	if p.mu.closed {
		p.mu.Unlock()
		c.Close()
		return nil, errClosed
	}
	if el, ok := p.mu.byKey[k]; ok {
		e := el.Value.(*entry)
		e.refs++
		e.lastUsed = time.Now()
		p.mu.lru.MoveToFront(el)
		p.mu.Unlock()
		c.Close()
		return e, nil
	}
	e := &entry{key: k, c: c, refs: 1, lastUsed: time.Now()}
	p.mu.byKey[k] = p.mu.lru.PushFront(e)
	var out []*client.Client
	for p.mu.lru.Len() > p.cfg.MaxClients {
		if c := p.removeLocked(p.mu.lru.Back()); c != nil {
			out = append(out, c)
		}
	}
	p.mu.Unlock()
	for _, c := range out {
		c.Close()
	}
	return e, nil
}

// removeLocked takes el out of the pool and returns its client if it can
// be closed now (no operation uses it); otherwise the last put closes it.
func (p *pool) removeLocked(el *list.Element) *client.Client {
	e := el.Value.(*entry)
	p.mu.lru.Remove(el)
	delete(p.mu.byKey, e.key)
	e.gone = true
	if e.refs == 0 {
		return e.c
	}
	return nil
}

// put drops a reference to e, closing its client if it left the pool.
func (p *pool) put(e *entry) {
	p.mu.Lock()
	e.refs--
	e.lastUsed = time.Now()
	closeIt := e.gone && e.refs == 0
	p.mu.Unlock()
	if closeIt {
		e.c.Close()
	}
}

func (p *pool) size() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.lru.Len()
}

// sweep closes idle clients every IdleClose/2 until the pool closes.
func (p *pool) sweep() {
	defer close(p.done)
	t := time.NewTicker(max(p.cfg.IdleClose/2, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case now := <-t.C:
			p.closeIdle(now)
		}
	}
}

// closeIdle closes the clients no operation has used since
// now - IdleClose.
func (p *pool) closeIdle(now time.Time) {
	var out []*client.Client
	p.mu.Lock()
	for el := p.mu.lru.Back(); el != nil; {
		prev := el.Prev()
		e := el.Value.(*entry)
		if e.refs == 0 && now.Sub(e.lastUsed) >= p.cfg.IdleClose {
			out = append(out, p.removeLocked(el))
		}
		el = prev
	}
	p.mu.Unlock()
	for _, c := range out {
		c.Close()
	}
}

// close empties the pool and stops the sweeper; clients in use close when
// their operations end.
func (p *pool) close() error {
	p.mu.Lock()
	if p.mu.closed {
		p.mu.Unlock()
		return nil
	}
	p.mu.closed = true
	var out []*client.Client
	for p.mu.lru.Len() > 0 {
		if c := p.removeLocked(p.mu.lru.Back()); c != nil {
			out = append(out, c)
		}
	}
	p.mu.Unlock()
	close(p.stop)
	<-p.done
	for _, c := range out {
		c.Close()
	}
	return nil
}
