// Package nodesec builds a node's security material from its config: the
// tenants' policy (secrets, rights, rate limits), the replay window, the
// seal and cold-encryption keyrings, and the TLS of the data and admin
// listeners. It reads the secret files and environment variables the config
// names and checks them (length, format, expiry syntax) exactly as gpucached
// does at start: gpucached builds its security with Load, and `gpucache
// doctor` runs Load to refuse what gpucached would refuse, without starting
// a server. Nothing here starts a goroutine, opens a listener or writes a
// file.
package nodesec

import (
	"fmt"
	"os"
	"time"

	"github.com/gpucache/gpucache/internal/cold/crypt"
	"github.com/gpucache/gpucache/internal/config"
	"github.com/gpucache/gpucache/internal/security"
	"github.com/gpucache/gpucache/internal/security/acl"
	"github.com/gpucache/gpucache/internal/security/antireplay"
	"github.com/gpucache/gpucache/internal/security/auth"
	"github.com/gpucache/gpucache/internal/security/ratelimit"
	"github.com/gpucache/gpucache/internal/security/seal"
	"github.com/gpucache/gpucache/internal/security/tlsconf"
)

// Material is what Load builds.
type Material struct {
	Policy *security.Policy
	Replay *antireplay.Window
	Seal   *seal.Keyring  // nil: cold manifests are not sealed
	Cold   *crypt.Keyring // nil: cold packs are not encrypted
	TLS    *tlsconf.Server
	// AdminTLS is the admin listener's: the same certificate, client
	// certificates optional. Nil, like TLS, without tls_cert.
	AdminTLS *tlsconf.Server
}

// Load builds the node's security material from cfg, reading the secrets
// it names through getenv (nil: os.LookupEnv) and the files it names. Its
// error is the one gpucached starts with: it names the setting (tenant,
// seal_keys, cold_encryption_keys, tls_*) and says what to do.
func Load(cfg config.Config, getenv func(string) (string, bool)) (Material, error) {
	if getenv == nil {
		getenv = os.LookupEnv
	}
	var m Material
	var err error
	if m.Policy, err = Policy(cfg, getenv, nil); err != nil {
		return Material{}, err
	}
	if m.Replay, err = antireplay.New(antireplay.Config{Window: cfg.ReplayWindow, MaxFuture: cfg.ReplayMaxFuture,
		MaxNonces: cfg.ReplayMaxNonces, TenantNonces: cfg.TenantNonces()}); err != nil {
		return Material{}, err
	}
	if len(cfg.SealKeys) > 0 {
		if m.Seal, err = SealKeyring(cfg, getenv); err != nil {
			return Material{}, err
		}
	}
	if m.Cold, err = ColdKeyring(cfg, getenv); err != nil {
		return Material{}, err
	}
	if cfg.TLSEnabled() {
		if m.TLS, err = tlsconf.NewServer(tlsconf.Files{CertFile: cfg.TLSCert, KeyFile: cfg.TLSKey, ClientCAFile: cfg.TLSClientCA}); err != nil {
			return Material{}, err
		}
		if m.AdminTLS, err = tlsconf.NewServer(AdminTLSFiles(cfg)); err != nil {
			return Material{}, fmt.Errorf("admin listener: %w", err)
		}
	}
	return m, nil
}

// Policy turns the config's tenants into a policy, reading each tenant's
// secrets. reuse, when set, is the running limiter, kept (with the tenants'
// bucket state) because no limit changed.
func Policy(cfg config.Config, getenv func(string) (string, bool), reuse *ratelimit.Limiter) (*security.Policy, error) {
	if !cfg.AuthEnabled() {
		return &security.Policy{}, nil
	}
	tenants := make([]auth.Tenant, 0, len(cfg.Tenants))
	for _, t := range cfg.Tenants {
		at := auth.Tenant{Name: t.Name, CertNames: t.CertNames, UnixUIDs: t.UnixUIDs}
		for _, sc := range t.Secrets {
			b, exp, err := sc.Read(getenv)
			if err != nil {
				return nil, fmt.Errorf("tenant %q: %w", t.Name, err)
			}
			at.Secrets = append(at.Secrets, auth.Credential{ID: sc.ID, Secret: b, NotAfter: exp})
		}
		tenants = append(tenants, at)
	}
	tab, err := auth.NewTable(tenants)
	if err != nil {
		return nil, err
	}
	rules, err := cfg.ACLRules()
	if err != nil {
		return nil, err
	}
	pol, err := acl.NewPolicy(rules...)
	if err != nil {
		return nil, err
	}
	p := &security.Policy{Auth: tab, ACL: pol}
	if limits := Limits(cfg); len(limits) > 0 {
		if reuse != nil {
			p.Limiter = reuse
		} else if p.Limiter, err = ratelimit.New(ratelimit.Config{Tenants: limits}); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Limits returns the rate limits the config's tenants define.
func Limits(cfg config.Config) map[string]ratelimit.Limit {
	limits := make(map[string]ratelimit.Limit)
	for _, t := range cfg.Tenants {
		if t.OpsPerSec > 0 || t.BytesPerSec > 0 {
			limits[t.Name] = ratelimit.Limit{OpsPerSec: t.OpsPerSec, OpsBurst: t.OpsBurst,
				BytesPerSec: float64(t.BytesPerSec), BytesBurst: int64(t.BytesBurst)}
		}
	}
	return limits
}

// SealKeyring builds the seal keyring of seal_keys: the current key is the
// last one listed; the others still verify (a peer or an older manifest may
// use them).
func SealKeyring(cfg config.Config, getenv func(string) (string, bool)) (*seal.Keyring, error) {
	r := seal.New(nil)
	n := len(cfg.SealKeys)
	order := append([]config.SecretConfig{cfg.SealKeys[n-1]}, cfg.SealKeys[:n-1]...) // the first Add is current
	for _, k := range order {
		b, _, err := k.Read(getenv)
		if err != nil {
			return nil, fmt.Errorf("seal_keys: %w", err)
		}
		if err := r.Add(seal.KeyID(k.ID), b, time.Time{}); err != nil {
			return nil, fmt.Errorf("seal_keys: key %q: %w (use at least %d random bytes, e.g. openssl rand -hex 32)", k.ID, err, seal.MinSecretLen)
		}
	}
	return r, nil
}

// ColdKeyring builds the cold tier's encryption keyring (ADR 0019) from
// cold_encryption_keys: the last key is current, the others still decrypt
// (a peer or an older pack may use them). Nil when no key is configured.
func ColdKeyring(cfg config.Config, getenv func(string) (string, bool)) (*crypt.Keyring, error) {
	n := len(cfg.ColdEncryptionKeys)
	if n == 0 {
		return nil, nil
	}
	r := crypt.New(nil)
	order := append([]config.SecretConfig{cfg.ColdEncryptionKeys[n-1]}, cfg.ColdEncryptionKeys[:n-1]...) // the first Add is current
	for _, k := range order {
		b, _, err := k.Read(getenv)
		if err != nil {
			return nil, fmt.Errorf("cold_encryption_keys: %w", err)
		}
		if err := r.Add(k.ID, b, time.Time{}); err != nil {
			return nil, fmt.Errorf("%w: cold_encryption_keys: key %q: %w (use at least %d random bytes, e.g. openssl rand -hex 32)", config.ErrInvalid, k.ID, err, crypt.MinSecretLen)
		}
	}
	return r, nil
}

// AdminTLSFiles is the admin listener's TLS: the data listener's
// certificate; client certificates from admin_tls_client_ca ("" is
// tls_client_ca, "none" asks for none), optional.
func AdminTLSFiles(cfg config.Config) tlsconf.Files {
	ca := cfg.AdminTLSClientCA
	switch ca {
	case "":
		ca = cfg.TLSClientCA
	case "none":
		ca = ""
	}
	return tlsconf.Files{CertFile: cfg.TLSCert, KeyFile: cfg.TLSKey, ClientCAFile: ca, ClientCertOptional: true}
}
