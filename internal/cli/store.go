package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"crypto/tls"

	"github.com/gpucache/gpucache/client"
)

// store is what put, get, lookup and delete need of a node (a
// *client.Client) or of a cluster (a *client.Cluster, which routes each
// key to its owner): the client.Cache both implement, plus the session's
// limits and tenant.
type store interface {
	client.Cache
	Limits() client.Limits
	Tenant() string
}

var _ store = (*client.Client)(nil)
var _ store = (*clusterStore)(nil)

// clusterStore adds to a *client.Cluster the session tenant and the limits
// of the seed that answered first.
type clusterStore struct {
	*client.Cluster
	tenant string
	limits client.Limits
}

func (c *clusterStore) Limits() client.Limits { return c.limits }
func (c *clusterStore) Tenant() string        { return c.tenant }

// A cluster degrades a key whose owner cannot be reached (a node killed
// but still in the view until its lease expires): Get answers a miss with
// the dial error, Put NO_SPACE, Lookup a shorter run. For the one key of a
// command, these methods turn that into an error that names the owner.

func (c *clusterStore) Get(ctx context.Context, ns client.Namespace, keys []client.BlockKey, opts ...client.GetOption) []client.GetResult {
	res := c.Cluster.Get(ctx, ns, keys, opts...)
	for i := range res {
		if !res[i].Hit && errors.Is(res[i].Reason, client.ErrUnavailable) {
			res[i].Reason = c.ownerDown(keys[i], res[i].Reason)
		}
	}
	return res
}

func (c *clusterStore) Put(ctx context.Context, ns client.Namespace, blocks []client.PutBlock) ([]client.Status, error) {
	before := c.Stats().Unreachable
	st, err := c.Cluster.Put(ctx, ns, blocks)
	if err == nil && c.Stats().Unreachable > before {
		for i, s := range st {
			if s == client.StatusNoSpace {
				return st, c.ownerDown(blocks[i].Key, nil)
			}
		}
	}
	return st, err
}

func (c *clusterStore) Delete(ctx context.Context, ns client.Namespace, keys []client.BlockKey) ([]client.Status, error) {
	st, err := c.Cluster.Delete(ctx, ns, keys)
	if errors.Is(err, client.ErrUnavailable) && len(keys) == 1 {
		err = c.ownerDown(keys[0], err)
	}
	return st, err
}

func (c *clusterStore) Lookup(ctx context.Context, ns client.Namespace, keys []client.BlockKey, leaseTTL time.Duration) (int, client.LeaseID, error) {
	before := c.Stats().Unreachable
	n, lease, err := c.Cluster.Lookup(ctx, ns, keys, leaseTTL)
	if err == nil && n < len(keys) && c.Stats().Unreachable > before {
		return n, lease, c.ownerDown(keys[n], nil)
	}
	return n, lease, err
}

// ownerDown is the error for key, whose owner could not be reached (cause,
// when known, says how): it names the owner, member id and address.
func (c *clusterStore) ownerDown(key client.BlockKey, cause error) error {
	epoch := c.View().Epoch
	m, ok := c.Owner(key)
	if !ok {
		if cause == nil {
			return fmt.Errorf("%w: no active member owns the key (view epoch %d; 'gpucache members' lists the view)", errUnavailable, epoch)
		}
		return fmt.Errorf("%w: no active member owns the key (view epoch %d; 'gpucache members' lists the view): %w", errUnavailable, epoch, cause)
	}
	const then = "stopped or killed? Its keys move to the other members when its lease expires and the view drops it ('gpucache members' lists the view)"
	if cause == nil {
		return fmt.Errorf("%w: the key's owner, member %s at %s (view epoch %d), could not be reached: %s", errUnavailable, m.ID, m.Addr, epoch, then)
	}
	return fmt.Errorf("%w: the key's owner, member %s at %s (view epoch %d), could not be reached (%w): %s", errUnavailable, m.ID, m.Addr, epoch, cause, then)
}

// Seeds splits the --cluster list.
func (c *ConnFlags) Seeds() []string {
	var out []string
	for _, s := range strings.Split(c.cluster, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// connect dials the node of --addr, or with --cluster the cluster of its
// seeds. The session tenant is the store's Tenant: --tenant, or the one
// the server derived from the credentials.
func (c *ConnFlags) connect(ctx context.Context) (store, error) {
	seeds := c.Seeds()
	if len(seeds) == 0 {
		return c.dial(ctx)
	}
	cfg, err := c.nodeConfig()
	if err != nil {
		return nil, err
	}
	// One seed's session tells the tenant the credentials name and the
	// limits, before the cluster dials its members with that tenant.
	var first *client.Client
	var errs []error
	for _, s := range seeds {
		one := cfg
		one.Addr = s
		if first, err = client.Dial(ctx, one); err == nil {
			break
		}
		errs = append(errs, c.explain(ctx, s, err))
	}
	if first == nil {
		return nil, errors.Join(errs...)
	}
	cs := &clusterStore{tenant: first.Tenant(), limits: first.Limits()}
	first.Close()
	cfg.Tenant = cs.tenant
	cl, err := client.DialCluster(ctx, client.ClusterConfig{Seeds: seeds, Node: cfg, RefreshInterval: -1})
	if err != nil {
		return nil, err
	}
	cs.Cluster = cl
	return cs, nil
}

// explain adds what the user can do to a dial error: a plaintext client
// against a TLS listener is told that the server expects TLS, a client
// that cannot verify the server's certificate which flag names the CA, and
// a client pointed at an HTTP port that it is not the data port.
func (c *ConnFlags) explain(ctx context.Context, addr string, err error) error {
	if errors.Is(err, client.ErrNotDataPort) {
		return fmt.Errorf("%w (for the admin listener use 'gpucache admin --admin URL')", err)
	}
	if untrustedCert(err) {
		return fmt.Errorf("%s's certificate is not trusted by --tls-ca %s: pass the CA that signed the server's certificate, and an address that its certificate names (%w)", addr, c.tlsCA, err)
	}
	if c.tlsCA != "" && isTLSAlert(err) {
		// The server ended the handshake: it refused the client's
		// certificate, or the lack of one (mTLS). A refusal, not an outage.
		if strings.Contains(err.Error(), "certificate required") {
			return fmt.Errorf("%w: %s requires a client certificate (mTLS): pass --tls-cert FILE --tls-key FILE (env GPUCACHE_CLIENT_CERT, GPUCACHE_CLIENT_KEY) (%v)", errRefused, addr, err)
		}
		return fmt.Errorf("%w: %s did not accept the TLS handshake (a client certificate it does not trust, or expired?) (%v)", errRefused, addr, err)
	}
	if c.tlsCA != "" || (!errors.Is(err, client.ErrProtocol) && !errors.Is(err, client.ErrUnavailable)) {
		return err
	}
	if speaksTLS(ctx, addr, c.timeout) {
		return fmt.Errorf("%w: %s expects TLS: pass --tls-ca FILE (the CA that signed its certificate; env GPUCACHE_TLS_CA), and --tls-cert/--tls-key if it requires client certificates (%v)", errUnavailable, addr, err)
	}
	return err
}

// speaksTLS reports whether addr completes (or starts) a TLS handshake: a
// TLS server answers a ClientHello with a ServerHello, where a gpucache
// listener answers with a frame of its own or closes.
func speaksTLS(ctx context.Context, addr string, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, min(timeout, 5*time.Second))
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	defer nc.Close()
	tc := tls.Client(nc, &tls.Config{InsecureSkipVerify: true}) // a probe only: nothing is sent over it
	err = tc.HandshakeContext(ctx)
	var rec tls.RecordHeaderError
	return err == nil || (!errors.As(err, &rec) && !errors.Is(err, context.DeadlineExceeded) && isTLSAlert(err))
}

// isTLSAlert reports whether err is an alert a TLS peer sent (it spoke
// TLS but refused the handshake, e.g. for a missing client certificate).
func isTLSAlert(err error) bool {
	return strings.Contains(err.Error(), "remote error: tls:")
}

// wrongEpochHint explains a WRONG_EPOCH answer to a command sent to one
// node of a cluster without --cluster.
func wrongEpochHint(err error) error {
	if _, ok := client.WrongEpoch(err); !ok {
		return err
	}
	return fmt.Errorf("%w (this node is one member of a cluster: pass --cluster with the members' addresses, or set GPUCACHE_CLUSTER, to route each key to its owner)", err)
}
