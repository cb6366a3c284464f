package config

import (
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/gpucache/gpucache/internal/security/acl"
	"github.com/gpucache/gpucache/internal/security/secretfile"
)

// TenantConfig defines one tenant (YAML only, under tenants:). Defining any
// tenant turns authentication on: every session must then present one of
// these credentials.
type TenantConfig struct {
	// Name is the tenant; it is the namespace tenant of everything the
	// tenant's sessions store.
	Name string `yaml:"name"`
	// Secrets are bearer secrets; several during a rotation.
	Secrets []SecretConfig `yaml:"secrets"`
	// CertNames authenticate under mTLS: a client certificate whose subject
	// CN, DNS or URI SAN is one of these is this tenant.
	CertNames []string `yaml:"cert_names"`
	// UnixUIDs authenticate over unix_listen: a process whose user id (as
	// the kernel reports it, SO_PEERCRED) is listed here is this tenant,
	// without a secret. Each uid belongs to one tenant.
	UnixUIDs []uint32 `yaml:"unix_uids"`
	// Rights are "model=rights" entries, rights a combination of r (read:
	// GET, LOOKUP, WAIT), w (write: PUT, fills) and a (admin: server-wide
	// STAT, admin endpoints); model "*" means every model. Default ["*=rw"].
	Rights []string `yaml:"rights"`
	// Rate limits; 0 means unlimited. Bursts default to one second's worth.
	OpsPerSec   float64  `yaml:"ops_per_sec"`
	OpsBurst    int      `yaml:"ops_burst"`
	BytesPerSec ByteSize `yaml:"bytes_per_sec"`
	BytesBurst  ByteSize `yaml:"bytes_burst"`
	// RESP is the tenant's RESP profile (resp.go); nil: the tenant cannot
	// use RESP data commands.
	RESP *RESPProfileConfig `yaml:"resp"`
	// DRAMQuota caps the hot-tier slot bytes of the blocks the tenant has
	// written and cached; 0: none. A tenant at its quota evicts its own
	// least recently used blocks first and never another tenant's.
	DRAMQuota ByteSize `yaml:"dram_quota"`
	// ColdQuota caps the cold-tier bytes of the packs this node has written
	// behind or found for the tenant (pack, manifest and pointers); 0: none.
	// A tenant at its quota deletes its own oldest packs first and never
	// another tenant's; with nothing of its own to delete, the write-behind
	// is dropped and counted. It is 0 or at least hot_max_class.
	ColdQuota ByteSize `yaml:"cold_quota"`
	// FlashQuota caps the flash-tier bytes of the tenant's live records
	// (flash.go). A tenant at its quota loses its own oldest flash blocks,
	// never another tenant's. 0 (the default): none.
	FlashQuota ByteSize `yaml:"flash_quota"`
}

// SecretConfig names where a secret is read from: a file (its content,
// surrounding whitespace trimmed) or an environment variable. Secrets are
// never written in the config itself.
type SecretConfig struct {
	// ID names the secret in audit events and logs; not secret.
	ID string `yaml:"id"`
	// File holds the secret.
	File string `yaml:"file"`
	// Env names an environment variable holding the secret.
	Env string `yaml:"env"`
	// NotAfter, when set (RFC 3339), ends the secret and its sessions.
	NotAfter string `yaml:"not_after"`
}

// MaxSecretFile bounds the size of a secret file (a tenant secret, a seal
// key, etcd_password_file): 64 KiB, far above any real secret.
const MaxSecretFile = 64 << 10

// Read returns the secret's bytes and its expiry. A secret file must be a
// regular file of at most MaxSecretFile bytes (secretfile.Read).
func (s SecretConfig) Read(getenv func(string) (string, bool)) ([]byte, time.Time, error) {
	var exp time.Time
	if s.NotAfter != "" {
		t, err := time.Parse(time.RFC3339, s.NotAfter)
		if err != nil {
			return nil, exp, fmt.Errorf("%w: secret %q: not_after %q is not RFC 3339 (e.g. 2027-01-31T00:00:00Z)", ErrInvalid, s.ID, s.NotAfter)
		}
		exp = t
	}
	switch {
	case s.File != "" && s.Env != "":
		return nil, exp, fmt.Errorf("%w: secret %q names both file and env; choose one", ErrInvalid, s.ID)
	case s.File != "":
		b, err := secretfile.Read(s.File, MaxSecretFile)
		if err != nil {
			return nil, exp, fmt.Errorf("%w: secret %q: %w", ErrInvalid, s.ID, err)
		}
		return []byte(strings.TrimSpace(string(b))), exp, nil
	case s.Env != "":
		if getenv == nil {
			getenv = os.LookupEnv
		}
		v, ok := getenv(s.Env)
		if !ok || strings.TrimSpace(v) == "" {
			return nil, exp, fmt.Errorf("%w: secret %q: environment variable %s is not set", ErrInvalid, s.ID, s.Env)
		}
		return []byte(strings.TrimSpace(v)), exp, nil
	}
	return nil, exp, fmt.Errorf("%w: secret %q names neither file nor env", ErrInvalid, s.ID)
}

// AuthEnabled reports whether sessions must authenticate.
func (c Config) AuthEnabled() bool { return len(c.Tenants) > 0 }

// TLSEnabled reports whether the listeners speak TLS.
func (c Config) TLSEnabled() bool { return c.TLSCert != "" }

// ACLRules returns the ACL rules the tenants' rights define.
func (c Config) ACLRules() ([]acl.Rule, error) {
	var rules []acl.Rule
	for _, t := range c.Tenants {
		rights := t.Rights
		if rights == nil {
			rights = []string{"*=rw"}
		}
		for _, r := range rights {
			rule, err := acl.ParseRule(t.Name + ":" + r)
			if err != nil {
				return nil, fmt.Errorf("%w: tenant %q rights %q: %v (want model=rights, e.g. \"*=rw\" or \"llama-3-8b=r\")", ErrInvalid, t.Name, r, err)
			}
			rules = append(rules, rule)
		}
	}
	return rules, nil
}

// validateSecurity checks the security settings that need no file access.
func (c Config) validateSecurity() error {
	remote := !hostIsLoopback(c.Listen) || (c.AdminListen != "off" && !hostIsLoopback(c.AdminListen))
	if remote && !c.AuthEnabled() {
		return invalidf("listen %s / admin_listen %s is not a loopback address and authentication is not configured: "+
			"define tenants (with secrets, or cert_names and tls_client_ca) in the config file, or bind to 127.0.0.1", c.Listen, c.AdminListen)
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return invalidf("tls_cert and tls_key go together; set both or neither")
	}
	if c.AdminTLSClientCA != "" && c.TLSCert == "" {
		return invalidf("admin_tls_client_ca needs tls_cert and tls_key")
	}
	if c.TLSClientCA != "" && c.TLSCert == "" {
		return invalidf("tls_client_ca (mTLS) needs tls_cert and tls_key")
	}
	if err := c.validateTenantAccess(); err != nil {
		return err
	}
	if err := c.validateReplay(); err != nil {
		return err
	}
	return c.validateSeal()
}

// validateTenantAccess checks the tenants' rights, certificate names and
// rate limits.
func (c Config) validateTenantAccess() error {
	if _, err := c.ACLRules(); err != nil {
		return err
	}
	for _, t := range c.Tenants {
		if len(t.CertNames) > 0 && c.TLSClientCA == "" {
			return invalidf("tenant %q has cert_names but tls_client_ca is not set, so no client certificate is verified", t.Name)
		}
		if t.OpsPerSec < 0 || t.BytesPerSec < 0 || t.OpsBurst < 0 || t.BytesBurst < 0 {
			return invalidf("tenant %q has a negative rate limit", t.Name)
		}
	}
	return nil
}

// validateReplay checks the replay window and its nonce budgets.
func (c Config) validateReplay() error {
	if c.ReplayWindow <= 0 || c.ReplayWindow > 24*time.Hour {
		return invalidf("replay_window %s not in (0, 24h]", c.ReplayWindow)
	}
	if c.ReplayMaxNonces < 1024 {
		return invalidf("replay_max_nonces %d is below 1024", c.ReplayMaxNonces)
	}
	return c.validateReplayBudgets()
}

// validateSeal checks the seal keys and their grace period.
func (c Config) validateSeal() error {
	if c.SealGrace < 0 {
		return invalidf("seal_grace must not be negative")
	}
	if c.SealHotReads && len(c.SealKeys) == 0 {
		return invalidf("seal_hot_reads needs seal_keys")
	}
	ids := map[string]bool{}
	for _, k := range c.SealKeys {
		if k.ID == "" || ids[k.ID] {
			return invalidf("seal_keys: every key needs a unique id (got %q)", k.ID)
		}
		ids[k.ID] = true
	}
	return nil
}

func hostIsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && IsLoopback(host)
}

// validateReplayBudgets checks the replay window's future bound and nonce
// budgets: each tenant has its own, and with authentication the total
// must hold every configured tenant's (see internal/security/antireplay).
func (c Config) validateReplayBudgets() error {
	if c.ReplayMaxFuture <= 0 || c.ReplayMaxFuture > c.ReplayWindow {
		return invalidf("replay_max_future %s not in (0, replay_window %s]", c.ReplayMaxFuture, c.ReplayWindow)
	}
	tn := c.TenantNonces()
	if c.ReplayTenantNonces < 0 || tn < 64 || tn > c.ReplayMaxNonces {
		return invalidf("replay_tenant_nonces %d not in [64, replay_max_nonces %d]", tn, c.ReplayMaxNonces)
	}
	if n, fit := len(c.Tenants), c.ReplayMaxNonces/tn; c.AuthEnabled() && n > fit {
		return invalidf("replay_max_nonces %d holds replay_tenant_nonces %d for %d tenants, but %d tenants are configured: "+
			"raise replay_max_nonces to at least %d or lower replay_tenant_nonces to at most %d",
			c.ReplayMaxNonces, tn, fit, n, n*tn, c.ReplayMaxNonces/n)
	}
	return nil
}

// TenantNonces is the replay window's nonce budget for one tenant:
// ReplayTenantNonces when set, otherwise a share of ReplayMaxNonces among
// max(16, configured tenants), at most 65536. The share leaves room for
// tenants a reload adds, up to 16.
func (c Config) TenantNonces() int {
	if c.ReplayTenantNonces > 0 {
		return c.ReplayTenantNonces
	}
	return min(1<<16, c.ReplayMaxNonces/max(16, len(c.Tenants)))
}
