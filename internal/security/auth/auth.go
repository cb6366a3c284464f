package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Errors. Every authentication failure matches ErrUnauthenticated; its
// reasons (ErrUnknown, ErrExpired, ErrNoCredential) wrap it.
var (
	ErrUnauthenticated = errors.New("gpucache/auth: unauthenticated")
	ErrUnknown         = fmt.Errorf("%w: unknown credential", ErrUnauthenticated)
	ErrExpired         = fmt.Errorf("%w: credential expired", ErrUnauthenticated)
	ErrNoCredential    = fmt.Errorf("%w: no credential presented", ErrUnauthenticated)
	ErrConfig          = errors.New("gpucache/auth: invalid tenant config")
)

// MinSecretLen is the shortest bearer secret accepted, in bytes.
const MinSecretLen = 16

// Method says how a session authenticated.
type Method string

// Methods.
const (
	MethodNone   Method = "none" // open mode (loopback only)
	MethodBearer Method = "bearer"
	MethodMTLS   Method = "mtls"
	MethodUnix   Method = "unix_uid" // a Unix-socket peer's kernel-reported uid
)

// Credential is one bearer secret of a tenant.
type Credential struct {
	// ID names the secret in audit events and logs; it is not secret.
	ID string
	// Secret is the bearer secret itself, at least MinSecretLen bytes.
	Secret []byte
	// NotAfter, when set, is when the secret stops authenticating (and
	// sessions opened with it end).
	NotAfter time.Time
}

// Tenant is one tenant's credentials.
type Tenant struct {
	Name    string
	Secrets []Credential
	// CertNames are client-certificate names (subject CN, DNS or URI SAN)
	// that authenticate as this tenant under mTLS.
	CertNames []string
	// UnixUIDs are the user ids whose processes, connecting over the
	// Unix-domain listener, authenticate as this tenant without a secret:
	// the kernel reports the peer's uid (SO_PEERCRED), the client cannot
	// choose it.
	UnixUIDs []uint32
}

// Session is what authentication established.
type Session struct {
	Tenant   string
	Method   Method
	CredID   string    // the secret's id, or the certificate name that matched
	NotAfter time.Time // zero: no expiry
}

type secretEntry struct {
	digest   [sha256.Size]byte
	tenant   string
	id       string
	notAfter time.Time
}

// Table is an immutable set of tenants and their credentials.
type Table struct {
	secrets map[[sha256.Size]byte]secretEntry
	certs   map[string]string // certificate name -> tenant
	uids    map[uint32]string // Unix peer uid -> tenant
}

// NewTable validates tenants and builds a Table. Tenant names must be
// unique, non-empty, at most 256 bytes and free of ':', '=' and whitespace
// (they appear in ACL rules); secret ids must be unique per tenant; a secret
// or certificate name may belong to one tenant only.
func NewTable(tenants []Tenant) (*Table, error) {
	t := &Table{secrets: make(map[[sha256.Size]byte]secretEntry), certs: make(map[string]string), uids: make(map[uint32]string)}
	seen := make(map[string]bool)
	for i, tn := range tenants {
		switch {
		case tn.Name == "":
			return nil, fmt.Errorf("%w: tenant %d has no name", ErrConfig, i)
		case len(tn.Name) > 256:
			return nil, fmt.Errorf("%w: tenant name %.32q… longer than 256 bytes", ErrConfig, tn.Name)
		case strings.ContainsAny(tn.Name, ":= \t\r\n"):
			return nil, fmt.Errorf("%w: tenant name %q contains ':', '=' or whitespace", ErrConfig, tn.Name)
		case seen[tn.Name]:
			return nil, fmt.Errorf("%w: tenant %q defined twice", ErrConfig, tn.Name)
		case len(tn.Secrets) == 0 && len(tn.CertNames) == 0 && len(tn.UnixUIDs) == 0:
			return nil, fmt.Errorf("%w: tenant %q has no secrets, cert_names or unix_uids, so nothing can authenticate as it", ErrConfig, tn.Name)
		}
		seen[tn.Name] = true
		if err := t.addSecrets(tn); err != nil {
			return nil, err
		}
		if err := t.addCerts(tn); err != nil {
			return nil, err
		}
		for _, uid := range tn.UnixUIDs {
			if o, dup := t.uids[uid]; dup {
				return nil, fmt.Errorf("%w: unix uid %d belongs to tenants %q and %q", ErrConfig, uid, o, tn.Name)
			}
			t.uids[uid] = tn.Name
		}
	}
	return t, nil
}

// UnixPeer authenticates a Unix-socket peer by the uid the kernel reported
// for it (SO_PEERCRED): the tenant whose unix_uids list it.
func (t *Table) UnixPeer(uid uint32) (Session, error) {
	tn, ok := t.uids[uid]
	if !ok {
		return Session{}, fmt.Errorf("%w (unix uid %d is in no tenant's unix_uids)", ErrNoCredential, uid)
	}
	return Session{Tenant: tn, Method: MethodUnix, CredID: fmt.Sprintf("uid:%d", uid)}, nil
}

// HasUnixPeer reports whether uid authenticates as some tenant.
func (t *Table) HasUnixPeer(uid uint32) bool {
	_, ok := t.uids[uid]
	return ok
}

// addSecrets adds the secrets of tenant tn: each with a unique id, long
// enough, and no other credential's secret.
func (t *Table) addSecrets(tn Tenant) error {
	ids := make(map[string]bool)
	for j, c := range tn.Secrets {
		switch {
		case c.ID == "":
			return fmt.Errorf("%w: tenant %q secret %d has no id", ErrConfig, tn.Name, j)
		case ids[c.ID]:
			return fmt.Errorf("%w: tenant %q has two secrets with id %q", ErrConfig, tn.Name, c.ID)
		case len(c.Secret) < MinSecretLen:
			return fmt.Errorf("%w: tenant %q secret %q is %d bytes; use at least %d random bytes (e.g. openssl rand -hex 32)",
				ErrConfig, tn.Name, c.ID, len(c.Secret), MinSecretLen)
		}
		ids[c.ID] = true
		d := sha256.Sum256(c.Secret)
		if _, dup := t.secrets[d]; dup {
			return fmt.Errorf("%w: tenant %q secret %q is also another credential's secret", ErrConfig, tn.Name, c.ID)
		}
		t.secrets[d] = secretEntry{digest: d, tenant: tn.Name, id: c.ID, notAfter: c.NotAfter}
	}
	return nil
}

// addCerts adds the certificate names of tenant tn, each of one tenant.
func (t *Table) addCerts(tn Tenant) error {
	for _, n := range tn.CertNames {
		if n == "" {
			return fmt.Errorf("%w: tenant %q has an empty cert name", ErrConfig, tn.Name)
		}
		if o, dup := t.certs[n]; dup {
			return fmt.Errorf("%w: cert name %q belongs to tenants %q and %q", ErrConfig, n, o, tn.Name)
		}
		t.certs[n] = tn.Name
	}
	return nil
}

// Bearer authenticates a bearer secret at now.
func (t *Table) Bearer(secret []byte, now time.Time) (Session, error) {
	if len(secret) == 0 {
		return Session{}, ErrNoCredential
	}
	d := sha256.Sum256(secret)
	e, ok := t.secrets[d]
	// The map is keyed by a digest the caller cannot steer; compare the
	// stored digest in constant time all the same.
	if !ok || subtle.ConstantTimeCompare(e.digest[:], d[:]) != 1 {
		return Session{}, ErrUnknown
	}
	if !e.notAfter.IsZero() && !now.Before(e.notAfter) {
		return Session{}, fmt.Errorf("%w (secret %q of tenant %q)", ErrExpired, e.id, e.tenant)
	}
	return Session{Tenant: e.tenant, Method: MethodBearer, CredID: e.id, NotAfter: e.notAfter}, nil
}

// Cert authenticates the names of a verified client certificate: the first
// name that belongs to a tenant decides.
func (t *Table) Cert(names []string) (Session, error) {
	if len(names) == 0 {
		return Session{}, ErrNoCredential
	}
	for _, n := range names {
		if tn, ok := t.certs[n]; ok {
			return Session{Tenant: tn, Method: MethodMTLS, CredID: n}, nil
		}
	}
	return Session{}, fmt.Errorf("%w (certificate names match no tenant)", ErrUnknown)
}

// Still reports whether s remains valid under t at now: its credential is
// still configured for the same tenant and has not expired. Sessions are
// re-checked this way after every reload, so revoking a secret ends the
// sessions opened with it. It returns the credential's current expiry,
// which a reload may have set or moved.
func (t *Table) Still(s Session, now time.Time) (notAfter time.Time, err error) {
	switch s.Method {
	case MethodBearer:
		for _, e := range t.secrets {
			if e.tenant == s.Tenant && e.id == s.CredID {
				if !e.notAfter.IsZero() && !now.Before(e.notAfter) {
					return e.notAfter, fmt.Errorf("%w (secret %q of tenant %q)", ErrExpired, e.id, e.tenant)
				}
				return e.notAfter, nil
			}
		}
	case MethodMTLS:
		if t.certs[s.CredID] == s.Tenant {
			return time.Time{}, nil
		}
	case MethodUnix:
		var uid uint32
		if _, err := fmt.Sscanf(s.CredID, "uid:%d", &uid); err == nil && t.uids[uid] == s.Tenant {
			return time.Time{}, nil
		}
	}
	return time.Time{}, fmt.Errorf("%w: credential %q of tenant %q was revoked", ErrUnauthenticated, s.CredID, s.Tenant)
}

// Reason returns a short audit code for an authentication error.
func Reason(err error) string {
	switch {
	case errors.Is(err, ErrExpired):
		return "expired_credential"
	case errors.Is(err, ErrNoCredential):
		return "no_credential"
	case errors.Is(err, ErrUnknown):
		return "unknown_credential"
	}
	return "revoked_credential"
}
