package refill

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/cold/crypt"
	"github.com/gpucache/gpucache/internal/cold/pack"
	"github.com/gpucache/gpucache/internal/security/seal"
)

// Sentinel errors. A refill's error explains a miss; it is never needed to
// decide hit or miss (Result does that).
var (
	// ErrInvalidRequest: the expected identity does not validate, a chain is
	// not a chain, or the destinations do not match the identities. No store
	// call was made.
	ErrInvalidRequest = errors.New("gpucache/cold/refill: invalid refill request")
	// ErrShortBuffer: dst is shorter than the block's payload. No payload
	// was read.
	ErrShortBuffer = errors.New("gpucache/cold/refill: destination shorter than the payload")
	// ErrInvalidConfig: New was given a Config that fails Validate.
	ErrInvalidConfig = errors.New("gpucache/cold/refill: invalid config")
)

// Reason says why a refill missed. The zero value, None, means a hit.
type Reason uint8

const (
	// None: not a miss.
	None Reason = iota
	// NotFound: no pointer for the block, or the pack it names is gone.
	NotFound
	// Legacy: the manifest is v1 or v2. Recompute and repack; the entry is
	// neither rewritten nor deleted.
	Legacy
	// Corrupt: a pointer, manifest or payload failed a format, key,
	// checksum or seal check. The error wraps cold.ErrCorrupt (and, for a
	// seal, pack.ErrSealMissing, pack.ErrSealInvalid or
	// pack.ErrSealUnverifiable).
	Corrupt
	// IdentityMismatch: the manifest's namespace or the block's full
	// canonical identity differs from the expected one.
	IdentityMismatch
	// OverBudget: the manifest exceeds Config.ManifestMax, or the payload
	// exceeds what is left of the call's byte budget. Not downloaded.
	OverBudget
	// Unavailable: the store failed, or the call ran past Config.Timeout or
	// its context. The error wraps the cause.
	Unavailable
	// BreakerOpen: the breaker is open; the store was not called.
	BreakerOpen
	// TenantMismatch: RefillForTenant's session tenant is not the expected
	// identity's tenant. The store was not called.
	TenantMismatch
	// InvalidRequest: see ErrInvalidRequest. The store was not called.
	InvalidRequest
	// ShortBuffer: see ErrShortBuffer.
	ShortBuffer
	// NoDestination: RefillKeyInto's alloc refused the payload's length
	// (no room in the hot tier, say). Nothing was read.
	NoDestination
	// KeyUnavailable: the pack is encrypted under a key id this refiller
	// cannot use now (no Config.Crypt, an unknown key id, a key past its
	// rotation grace, a key not yet valid). No payload was read; the
	// error wraps pack.ErrKeyUnavailable and an integrity event is sent.
	KeyUnavailable
)

var reasonNames = [...]string{
	None: "none", NotFound: "not_found", Legacy: "legacy", Corrupt: "corrupt",
	IdentityMismatch: "identity_mismatch", OverBudget: "over_budget",
	Unavailable: "unavailable", BreakerOpen: "breaker_open",
	TenantMismatch: "tenant_mismatch", InvalidRequest: "invalid_request",
	ShortBuffer: "short_buffer", NoDestination: "no_destination",
	KeyUnavailable: "key_unavailable",
}

// String returns a metric-label-friendly name.
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// Result is Hit, or Missing with a Reason.
type Result struct {
	Hit    bool
	Reason Reason // None on a hit
}

// Hit is the result of a refill that filled dst.
var Hit = Result{Hit: true}

// Missing returns the result of a refill that missed for reason r.
func Missing(r Reason) Result { return Result{Reason: r} }

func (r Result) String() string {
	if r.Hit {
		return "hit"
	}
	return "missing(" + r.Reason.String() + ")"
}

// Config configures a Refiller. A zero field takes its default.
type Config struct {
	// Budget bounds the payload bytes one RefillBlock, RefillForTenant or
	// RefillMatching call may download; a block that does not fit is
	// Missing(OverBudget) and is not downloaded. Default 64 MiB.
	Budget int64
	// DegradedBudget is RefillDegraded's budget, for when the hot tier is
	// under pressure. Default Budget/4.
	DegradedBudget int64
	// ManifestMax bounds the bytes of one manifest download; a bigger
	// manifest is Missing(OverBudget) and is not downloaded. Default 4 MiB;
	// at most pack.MaxManifestLen.
	ManifestMax int64
	// Timeout bounds one refill call, every store operation included. A
	// call that runs out is Missing(Unavailable) and counts as a breaker
	// failure. Default 2s.
	Timeout time.Duration
	// BreakerFailures is the number of consecutive failed calls that opens
	// the breaker. Default 5.
	BreakerFailures int
	// BreakerCooldown is how long the breaker stays open before it lets
	// one probe through. Default 10s.
	BreakerCooldown time.Duration
	// ManifestCache keeps up to this many verified manifests across calls
	// (they are content-addressed, so they never change; their seals are
	// still verified again on every refill). 0 disables it.
	ManifestCache int
	// ManifestCacheBytes bounds the heap the cached manifests keep alive
	// (pack.Manifest.MemCost): a manifest of a large pack of small blocks
	// holds thousands of identities, so a count alone does not bound
	// memory. 0 means no byte bound beyond ManifestCache.
	ManifestCacheBytes int64
	// PointerTTL keeps pointers across calls for this long. A stale pointer
	// can only cause a miss. 0 disables it.
	PointerTTL time.Duration
	// Now is the breaker's and the pointer cache's clock. Default
	// time.Now; tests inject one. (The keyring has its own clock.)
	Now func() time.Time
	// Keyring, when set, verifies manifest seals (pack/doc.go, "Manifest
	// seal"): every manifest must carry a kind-1 seal that verifies now,
	// on every refill, cached manifests included; an unsealed manifest or
	// a seal that does not verify (unknown, expired or not-yet-valid key,
	// MAC mismatch) is Missing(Corrupt) before any payload read. When nil,
	// unsealed manifests are read as before and a sealed manifest is
	// Missing(Corrupt): it cannot be checked, so it is never read.
	Keyring *seal.Keyring
	// Crypt, when set, opens encrypted packs (manifest v4 with
	// AES-256-GCM; pack/doc.go, "Encoded blocks"): the manifest's key id
	// must be usable now (rotation grace included), checked on every
	// refill before any payload read, else Missing(KeyUnavailable) and an
	// integrity event. A block that fails authentication is
	// Missing(Corrupt). When nil, an encrypted pack is
	// Missing(KeyUnavailable). Unencrypted packs read as before.
	Crypt *crypt.Keyring
	// Codec decompresses zstd blocks. Default: a crypt.NewZstd of the
	// Refiller's own, so compressed packs a peer wrote always read.
	Codec pack.Compressor
	// OnIntegrity, when set, is called once for each refill miss that
	// points at corruption or tampering (see IntegrityEvent), never for
	// ordinary absence, legacy entries, budgets or store outages. It runs
	// synchronously on the refilling goroutine, possibly concurrently with
	// itself: it must be quick and must not block or call back into the
	// Refiller.
	OnIntegrity func(IntegrityEvent)
}

// Integrity event kinds (IntegrityEvent.Kind).
const (
	// IntegritySealMissing: a Keyring is configured and the manifest is
	// not sealed.
	IntegritySealMissing = "seal_missing"
	// IntegritySealInvalid: the manifest's seal does not verify: unknown,
	// expired or not-yet-valid key, or MAC mismatch; also a sealed manifest
	// read without a Keyring (it cannot be checked).
	IntegritySealInvalid = "seal_invalid"
	// IntegrityPayloadChecksum: the payload read from the pack does not
	// match the manifest's SHA-256 (or the pack object is too short for
	// the range).
	IntegrityPayloadChecksum = "payload_checksum"
	// IntegrityManifestCorrupt: the manifest does not match its key's
	// digest, does not decode as v3, is shorter or longer than its pointer
	// says, or lacks the block its pointer names.
	IntegrityManifestCorrupt = "manifest_corrupt"
	// IntegrityPointerCorrupt: the pointer object does not decode or names
	// another block or namespace than its key.
	IntegrityPointerCorrupt = "pointer_corrupt"
	// IntegrityIdentityMismatch: the manifest binds the block key to
	// another full identity than the expected one (or another namespace).
	IntegrityIdentityMismatch = "identity_mismatch"
	// IntegrityKeyUnavailable: the pack is encrypted under a key id that
	// cannot be used now: unknown (a wrong or missing key file), past its
	// rotation grace, not yet valid, or no cipher keyring at all.
	IntegrityKeyUnavailable = "cipher_key_unavailable"
	// IntegrityDecrypt: an encrypted block failed AES-GCM authentication:
	// its ciphertext, nonce or tag was altered, it was moved from another
	// range, or it was made under another secret with the same key id.
	IntegrityDecrypt = "decrypt_failed"
)

// IntegrityEvent describes one refill miss caused by corruption or
// tampering. It carries only non-secret facts, safe to log and audit.
type IntegrityEvent struct {
	// Kind is one of the Integrity* constants.
	Kind string
	// Namespace is the lower-case hex namespace digest of the expected
	// block.
	Namespace string
	// Key is the lower-case hex block key of the expected block.
	Key string
	// KeyID is the seal key id the manifest names ("" when the manifest is
	// unsealed or was not decoded); for the cipher kinds
	// (IntegrityKeyUnavailable, IntegrityDecrypt) the cipher key id. Key
	// ids are not secret.
	KeyID string
	// Err explains the miss: the error the refill returned, or for an
	// IdentityMismatch (a clean miss, returned with a nil error) a
	// description. It holds no secret.
	Err error
}

// Default returns the default configuration.
func Default() Config {
	return Config{
		Budget:          64 << 20,
		DegradedBudget:  16 << 20,
		ManifestMax:     4 << 20,
		Timeout:         2 * time.Second,
		BreakerFailures: 5,
		BreakerCooldown: 10 * time.Second,
		Now:             time.Now,
	}
}

// withDefaults fills zero fields.
func (c Config) withDefaults() Config {
	d := Default()
	if c.Budget == 0 {
		c.Budget = d.Budget
	}
	if c.DegradedBudget == 0 {
		c.DegradedBudget = c.Budget / 4
	}
	if c.ManifestMax == 0 {
		c.ManifestMax = d.ManifestMax
	}
	if c.Timeout == 0 {
		c.Timeout = d.Timeout
	}
	if c.BreakerFailures == 0 {
		c.BreakerFailures = d.BreakerFailures
	}
	if c.BreakerCooldown == 0 {
		c.BreakerCooldown = d.BreakerCooldown
	}
	if c.Now == nil {
		c.Now = d.Now
	}
	return c
}

// Validate names the first field out of range.
func (c Config) Validate() error {
	switch {
	case c.Budget < 0:
		return fmt.Errorf("%w: budget %d < 0", ErrInvalidConfig, c.Budget)
	case c.DegradedBudget < 0:
		return fmt.Errorf("%w: degraded_budget %d < 0", ErrInvalidConfig, c.DegradedBudget)
	case c.ManifestMax < 0 || c.ManifestMax > pack.MaxManifestLen:
		return fmt.Errorf("%w: manifest_max %d not in 0..%d", ErrInvalidConfig, c.ManifestMax, pack.MaxManifestLen)
	case c.Timeout < 0:
		return fmt.Errorf("%w: timeout %v < 0", ErrInvalidConfig, c.Timeout)
	case c.BreakerFailures < 0:
		return fmt.Errorf("%w: breaker_failures %d < 0", ErrInvalidConfig, c.BreakerFailures)
	case c.BreakerCooldown < 0:
		return fmt.Errorf("%w: breaker_cooldown %v < 0", ErrInvalidConfig, c.BreakerCooldown)
	}
	return nil
}

// Refiller reads blocks back from the cold tier. It is safe for concurrent
// use; it holds no payload memory of its own.
type Refiller struct {
	store    cold.Store
	cfg      Config // with defaults filled; read-only
	br       *breaker
	cache    *caches           // nil unless ManifestCache or PointerTTL is set
	verifier pack.SealVerifier // cfg.Keyring, or nil (an untyped nil)
	dec      pack.Decrypter    // cfg.Crypt, or nil (an untyped nil)
}

// New returns a Refiller reading from store.
func New(store cold.Store, cfg Config) (*Refiller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if store == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalidConfig)
	}
	cfg = cfg.withDefaults()
	r := &Refiller{store: store, cfg: cfg, br: newBreaker(cfg.BreakerFailures, cfg.BreakerCooldown, cfg.Now), cache: newCaches(cfg)}
	if cfg.Keyring != nil {
		r.verifier = cfg.Keyring
	}
	if cfg.Crypt != nil {
		r.dec = cfg.Crypt
	}
	if r.cfg.Codec == nil {
		z, err := crypt.NewZstd()
		if err != nil {
			return nil, fmt.Errorf("%w: zstd: %w", ErrInvalidConfig, err)
		}
		r.cfg.Codec = z
	}
	return r, nil
}

// Config returns the configuration in use, defaults filled.
func (r *Refiller) Config() Config { return r.cfg }

// Breaker returns the breaker's state.
func (r *Refiller) Breaker() BreakerState { return r.br.state() }

// RefillBlock reads the block whose full identity is expected into
// dst[:n]. expected comes from the authenticated request; the block is
// returned only if its manifest binds exactly that canonical identity, byte
// for byte. dst must be at least the payload's length.
//
// On a hit it returns the payload length and Hit. On a miss it returns 0 and
// Missing(reason), and dst holds no payload byte: if a payload read started
// and failed (or failed its checksum), dst[:length] is zeroed. The caller
// owns dst throughout; bytes past the payload's length are never touched.
func (r *Refiller) RefillBlock(ctx context.Context, expected identity.CacheIdentity, dst []byte) (int, Result, error) {
	return r.one(ctx, r.cfg.Budget, expected, dst)
}

// RefillDegraded is RefillBlock with Config.DegradedBudget, for when the hot
// tier is under pressure.
func (r *Refiller) RefillDegraded(ctx context.Context, expected identity.CacheIdentity, dst []byte) (int, Result, error) {
	return r.one(ctx, r.cfg.DegradedBudget, expected, dst)
}

// RefillForTenant is RefillBlock for a session authenticated as tenant:
// unless tenant equals expected.Tenant (and is not empty) it returns
// Missing(TenantMismatch) without calling the store.
func (r *Refiller) RefillForTenant(ctx context.Context, tenant string, expected identity.CacheIdentity, dst []byte) (int, Result, error) {
	if tenant == "" || tenant != expected.Tenant {
		return 0, Missing(TenantMismatch), nil
	}
	return r.one(ctx, r.cfg.Budget, expected, dst)
}

// RefillKey reads the block of namespace ns with the given key into dst:
// the entry point for a server, which knows the session's namespace and the
// requested block key but not the block's token ids (a GET carries keys
// only). The expected identity is (ns, key), both from the authenticated
// request. It is as strong as the full identity: the key is SHA-256 over
// the namespace digest, the parent key, the valid length and the token ids,
// and the manifest decoder checks every range's key against its full
// identity, so a range with this key and this namespace (compared byte for
// byte) binds the same tokens and chain. Position is implied by the chain
// (a chain starts at position 0 with a zero parent); RefillKey does not
// compare it separately. A zero key is refused without a store call.
func (r *Refiller) RefillKey(ctx context.Context, ns identity.Namespace, key identity.BlockKey, dst []byte) (int, Result, error) {
	return r.refillKey(ctx, ns, key, dest{buf: dst})
}

// RefillKeyInto is RefillKey for a caller that has no buffer until it
// knows the payload's length: a server refilling straight into a hot-tier
// slot, with no payload-sized buffer on the Go heap. Once the pointer, the
// manifest, the seal, the identity and the budget have passed, and before
// the payload read, it calls alloc(n) once with the payload's length n;
// alloc returns a buffer of at least n bytes that the payload is read into
// (buf[:n]), or false to end the refill as Missing(NoDestination). alloc
// runs on the calling goroutine and is called at most once.
//
// When alloc was called and the refill still misses (the payload read
// fails, or the bytes fail their checksum) buf[:n] is zeroed and the caller
// must discard it: the buffer, whether or not alloc was called, is the
// caller's before, during and after the call. On a hit it returns n and
// Hit, and buf[:n] holds the payload.
func (r *Refiller) RefillKeyInto(ctx context.Context, ns identity.Namespace, key identity.BlockKey, alloc func(n int) ([]byte, bool)) (int, Result, error) {
	if alloc == nil {
		return 0, Missing(InvalidRequest), fmt.Errorf("%w: nil alloc", ErrInvalidRequest)
	}
	return r.refillKey(ctx, ns, key, dest{alloc: alloc})
}

func (r *Refiller) refillKey(ctx context.Context, ns identity.Namespace, key identity.BlockKey, dst dest) (int, Result, error) {
	d, err := ns.Digest()
	if err != nil {
		return 0, Missing(InvalidRequest), fmt.Errorf("%w: expected namespace: %w", ErrInvalidRequest, err)
	}
	if key.IsZero() {
		return 0, Missing(InvalidRequest), fmt.Errorf("%w: zero block key", ErrInvalidRequest)
	}
	c, res, err := r.begin(ctx, r.cfg.Budget)
	if c == nil {
		return 0, res, err
	}
	defer c.end()
	return c.block(want{id: identity.CacheIdentity{Namespace: ns}, nsd: d, key: key}, dst)
}

// RefillMatching reads the longest leading run of a chain of blocks:
// expected[i] into dst[i], in order, stopping at the first miss. expected
// must be a chain of one namespace (each block's parent is the key of the
// one before it). The budget covers the whole call.
//
// It returns the payload length of each block read (len(n) is the number of
// leading hits) and Hit if every block was read, else the first miss's
// Result and error. The blocks before the miss are good; the missed block's
// dst holds no payload byte, and later dsts are untouched.
func (r *Refiller) RefillMatching(ctx context.Context, expected []identity.CacheIdentity, dst [][]byte) ([]int, Result, error) {
	if len(expected) == 0 || len(dst) != len(expected) {
		return nil, Missing(InvalidRequest), fmt.Errorf("%w: %d identities, %d destinations", ErrInvalidRequest, len(expected), len(dst))
	}
	wants := make([]want, len(expected))
	for i, id := range expected {
		w, err := prepare(id)
		if err != nil {
			return nil, Missing(InvalidRequest), fmt.Errorf("block %d: %w", i, err)
		}
		if i > 0 && (id.Namespace != expected[0].Namespace || id.Parent != wants[i-1].key) {
			return nil, Missing(InvalidRequest), fmt.Errorf("%w: block %d does not extend block %d", ErrInvalidRequest, i, i-1)
		}
		wants[i] = w
	}
	c, res, err := r.begin(ctx, r.cfg.Budget)
	if c == nil {
		return nil, res, err
	}
	defer c.end()
	ns := make([]int, 0, len(wants))
	for i, w := range wants {
		n, res, err := c.block(w, dest{buf: dst[i]})
		if !res.Hit {
			return ns, res, err
		}
		ns = append(ns, n)
	}
	return ns, Hit, nil
}

// one runs a single-block refill with the given budget.
func (r *Refiller) one(ctx context.Context, budget int64, expected identity.CacheIdentity, dst []byte) (int, Result, error) {
	w, err := prepare(expected)
	if err != nil {
		return 0, Missing(InvalidRequest), err
	}
	c, res, err := r.begin(ctx, budget)
	if c == nil {
		return 0, res, err
	}
	defer c.end()
	return c.block(w, dest{buf: dst})
}

// want is an expected identity with everything derived from it.
type want struct {
	id    identity.CacheIdentity
	canon []byte                   // id.Canonical(); nil for RefillKey (namespace and key only)
	nsd   identity.NamespaceDigest // id.Namespace.Digest()
	key   identity.BlockKey        // KeyFor of id
}

func prepare(id identity.CacheIdentity) (want, error) {
	c, err := id.Canonical()
	if err != nil {
		return want{}, fmt.Errorf("%w: expected identity: %w", ErrInvalidRequest, err)
	}
	d, err := id.Namespace.Digest()
	if err != nil {
		return want{}, fmt.Errorf("%w: expected identity: %w", ErrInvalidRequest, err)
	}
	return want{id: id, canon: c, nsd: d, key: id.KeyIn(d)}, nil
}
