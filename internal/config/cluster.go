package config

import (
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/security/secretfile"
)

// Cluster settings (ADR 0008). With etcd_endpoints empty the node is the
// embedded single-node default: it owns every key and talks to no one.
//
//	EtcdEndpoints    comma-separated etcd client URLs; set = cluster mode
//	EtcdPrefix       key prefix of this cluster in etcd
//	NodeID           stable member ID (placement seed): renaming moves keys
//	FaultDomain      rack, host or zone; isolation removes a whole domain
//	AdvertiseAddr    the data address clients dial
//	MemberLeaseTTL   how long a dead node stays a member
//	ControlGrace     how long a node serves read-only without etcd
//	ControlProbe     how often etcd's reachability is checked
//	ProtocolMax      highest wire version negotiated (1 pins the old one
//	                 during a rolling upgrade)
//
// clusterFields lists the cluster settings' flags.
func (c *Config) clusterFields() []field {
	return []field{
		{"etcd_endpoints", "comma-separated etcd URLs; set to join a cluster (e.g. http://10.0.0.5:2379)", (*strVal)(&c.EtcdEndpoints)},
		{"etcd_prefix", "etcd key prefix of this cluster", (*strVal)(&c.EtcdPrefix)},
		{"node_id", "stable member id (default: the advertise address)", (*strVal)(&c.NodeID)},
		{"fault_domain", "rack, host or zone of this node (default: the host name)", (*strVal)(&c.FaultDomain)},
		{"advertise_addr", "data address clients dial (default: listen, unless it is a wildcard)", (*strVal)(&c.AdvertiseAddr)},
		{"member_lease_ttl", "etcd lease TTL of this node's membership", (*durVal)(&c.MemberLeaseTTL)},
		{"control_grace", "how long to serve read-only while etcd is unreachable before every owner is unknown", (*durVal)(&c.ControlGrace)},
		{"control_probe", "how often etcd reachability is checked", (*durVal)(&c.ControlProbe)},
		{"protocol_max", "highest wire protocol version to negotiate (the previous one during a rolling upgrade)", (*intVal)(&c.ProtocolMax)},
		{"etcd_ca", "CA bundle (PEM) that verifies etcd's server certificate (required for https:// endpoints)", (*strVal)(&c.EtcdCA)},
		{"etcd_cert", "client certificate (PEM) for etcd mTLS", (*strVal)(&c.EtcdCert)},
		{"etcd_key", "client private key (PEM) for etcd mTLS", (*strVal)(&c.EtcdKey)},
		{"etcd_username", "etcd user (etcd authentication)", (*strVal)(&c.EtcdUsername)},
		{"etcd_password_file", "file holding the etcd user's password", (*strVal)(&c.EtcdPasswordFile)},
	}
}

// EtcdPassword reads etcd_password_file (surrounding white space trimmed), a
// regular file of at most MaxSecretFile bytes.
func (c Config) EtcdPassword() (string, error) {
	if c.EtcdPasswordFile == "" {
		return "", nil
	}
	b, err := secretfile.Read(c.EtcdPasswordFile, MaxSecretFile)
	if err != nil {
		return "", fmt.Errorf("%w: etcd_password_file: %w", ErrInvalid, err)
	}
	p := strings.TrimSpace(string(b))
	if p == "" {
		return "", fmt.Errorf("%w: etcd_password_file %s is empty", ErrInvalid, c.EtcdPasswordFile)
	}
	return p, nil
}

// Clustered reports whether the node joins a cluster (etcd_endpoints set).
func (c Config) Clustered() bool { return strings.TrimSpace(c.EtcdEndpoints) != "" }

// Endpoints returns the etcd endpoints.
func (c Config) Endpoints() []string {
	var out []string
	for _, e := range strings.Split(c.EtcdEndpoints, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// Member returns this node's member ID, advertised address and fault
// domain, with the defaults applied (listen is the bound data address).
func (c Config) Member(listen string) (id, addr, domain string, err error) {
	addr = c.AdvertiseAddr
	if addr == "" {
		host, _, err := net.SplitHostPort(listen)
		if err != nil {
			return "", "", "", err
		}
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			return "", "", "", fmt.Errorf("%w: listen %s is a wildcard address; set advertise_addr to the address clients dial", ErrInvalid, listen)
		}
		addr = listen
	}
	id = c.NodeID
	if id == "" {
		id = addr
	}
	domain = c.FaultDomain
	if domain == "" {
		if domain, err = os.Hostname(); err != nil || domain == "" {
			domain = "default"
		}
	}
	return id, addr, domain, nil
}

func (c Config) validateCluster() error {
	if c.ProtocolMax < 1 || c.ProtocolMax > int(wire.VersionMax) {
		return invalidf("protocol_max %d is not in 1..%d", c.ProtocolMax, wire.VersionMax)
	}
	if !c.Clustered() {
		return nil
	}
	if err := c.validateEtcdAccess(); err != nil {
		return err
	}
	if c.AdvertiseAddr != "" {
		if err := checkAddr("advertise_addr", c.AdvertiseAddr); err != nil {
			return err
		}
	}
	if strings.ContainsAny(c.NodeID, "/ \t\n") {
		return invalidf("node_id %q must not contain '/' or white space", c.NodeID)
	}
	if c.EtcdPrefix == "" || !strings.HasPrefix(c.EtcdPrefix, "/") {
		return invalidf("etcd_prefix %q must start with /", c.EtcdPrefix)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"member_lease_ttl", c.MemberLeaseTTL}, {"control_grace", c.ControlGrace}, {"control_probe", c.ControlProbe}} {
		if d.v <= 0 {
			return invalidf("%s must be positive, got %s", d.name, d.v)
		}
	}
	if c.MemberLeaseTTL < 2*time.Second {
		return invalidf("member_lease_ttl %s is below etcd's 2s minimum", c.MemberLeaseTTL)
	}
	return nil
}

// validateEtcdAccess checks the etcd endpoints and the credentials that
// reach them.
func (c Config) validateEtcdAccess() error {
	for _, e := range c.Endpoints() {
		if !strings.Contains(e, "://") {
			return invalidf("etcd endpoint %q needs a scheme, e.g. http://%s", e, e)
		}
		if strings.HasPrefix(e, "https://") && c.EtcdCA == "" {
			return invalidf("etcd endpoint %q is https: set etcd_ca to the CA bundle that verifies it", e)
		}
	}
	if (c.EtcdCert == "") != (c.EtcdKey == "") {
		return invalidf("etcd_cert and etcd_key must be set together")
	}
	if c.EtcdCert != "" && c.EtcdCA == "" {
		return invalidf("etcd_cert needs etcd_ca (etcd's server certificate is always verified)")
	}
	if (c.EtcdUsername == "") != (c.EtcdPasswordFile == "") {
		return invalidf("etcd_username and etcd_password_file must be set together")
	}
	return nil
}
