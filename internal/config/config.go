package config

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/policy"
)

// ErrInvalid wraps every validation error.
var ErrInvalid = errors.New("gpucache/config: invalid config")

// Config is the daemon's whole configuration. Sources, lowest precedence
// first: Default(), the YAML file named by --config (or GPUCACHE_CONFIG),
// GPUCACHE_* environment variables, then command-line flags. Every field has
// a YAML key, an environment variable (GPUCACHE_ + the key in upper case) and
// a flag (the key with '-' for '_'). An unknown flag or YAML key is refused
// with the closest real one. Other GPUCACHE_* variables are allowed when
// another gpucache program reads them (OtherEnv: GPUCACHE_ADDR, the CLI's,
// ...) or a secret's env names them; one a typo away from a setting's
// variable refuses to start (exit 2), any other is logged as ignored.
type Config struct {
	// Listen is the data-plane address. Default 127.0.0.1:9400.
	Listen string `yaml:"listen"`
	// AdminListen serves /metrics, /healthz, /readyz and /debug/pprof.
	// "off" disables it. Default 127.0.0.1:9401.
	AdminListen string `yaml:"admin_listen"`
	// RESPListen serves the RESP2 (Redis protocol) endpoint for LMCache
	// (resp.go), e.g. 127.0.0.1:6380, with the same TLS, max_conns,
	// timeouts and loopback rule as listen. Each tenant that uses it needs a
	// resp profile (resp_profile in open mode); see docs/RESP.md. Default
	// "off".
	RESPListen string `yaml:"resp_listen"`
	// UnixListen serves the native protocol on a Unix-domain socket at this
	// path, for engines on the same host; on it they may register shared
	// memory so a GET or PUT is one copy (unix.go, ADR 0026). Default "off".
	UnixListen string `yaml:"unix_listen"`
	// FlashDir turns on the local flash tier between DRAM and the cold
	// tier: blocks evicted from DRAM are appended to segment files in this
	// directory and read back on a DRAM miss (flash.go, ADR 0027). Default
	// "off".
	FlashDir string `yaml:"flash_dir"`
	// FlashCapacity bounds the flash tier's segment files in total. It
	// must hold at least two segments. Required with flash_dir.
	FlashCapacity ByteSize `yaml:"flash_capacity"`
	// FlashSegment is one segment file's size; segments are written
	// sequentially and reclaimed whole. Default 256MiB.
	FlashSegment ByteSize `yaml:"flash_segment"`
	// FlashWriteBuffer bounds the evicted blocks queued in memory for the
	// flash writer; past it evicted blocks skip flash. Default 64MiB.
	FlashWriteBuffer ByteSize `yaml:"flash_write_buffer"`
	// FlashCold says when a block goes to the cold tier: "through" (when
	// DRAM evicts it, as without flash; the default) or "reclaim" (only
	// when flash reclaims its segment). ADR 0027 gives the measurement.
	FlashCold string `yaml:"flash_cold"`
	// FlashReclaim picks the segment reclaimed when flash is full:
	// "oldest" (the default) or "fewest-live".
	FlashReclaim string `yaml:"flash_reclaim"`
	// FlashDirect is O_DIRECT for flash I/O: "auto" (the default: used
	// where the file system supports it), "on" (refuse to start without
	// it) or "off".
	FlashDirect string `yaml:"flash_direct"`
	// UnixListenMode is the socket file's mode, octal. Default "0660".
	UnixListenMode string `yaml:"unix_listen_mode"`
	// RegionBytes bounds the registered shared memory mapped at once, all
	// connections together. Default 256GiB.
	RegionBytes ByteSize `yaml:"region_bytes"`
	// TenantRegionBytes bounds one tenant's registered shared memory.
	// Default 64GiB.
	TenantRegionBytes ByteSize `yaml:"tenant_region_bytes"`
	// RESPProfile is the RESP profile in open mode (YAML only; resp.go).
	RESPProfile *RESPProfileConfig `yaml:"resp_profile"`

	// Tenants turn authentication on (YAML only; see TenantConfig). Without
	// tenants the node runs in open mode, which is allowed on loopback only:
	// a non-loopback Listen or AdminListen is refused.
	Tenants []TenantConfig `yaml:"tenants"`
	// ReplayWindow is how far a mutating request's timestamp may be behind
	// the server's clock. Default 5m.
	ReplayWindow time.Duration `yaml:"replay_window"`
	// ReplayMaxFuture is how far a mutating request's timestamp may be
	// ahead of the server's clock: the clock skew tolerated. Default 5s; at
	// most ReplayWindow.
	ReplayMaxFuture time.Duration `yaml:"replay_max_future"`
	// ReplayMaxNonces bounds the nonces remembered, all tenants together.
	// It must hold ReplayTenantNonces for every tenant. Default 1048576.
	ReplayMaxNonces int `yaml:"replay_max_nonces"`
	// ReplayTenantNonces bounds the nonces remembered for one tenant, so
	// one tenant's stamps never crowd out another's. Default 0: a share,
	// ReplayMaxNonces / max(16, tenants), at most 65536 (TenantNonces).
	ReplayTenantNonces int `yaml:"replay_tenant_nonces"`
	// AuditLog is where audit events go as JSON lines: "stderr", "off" or
	// a file path (appended). Default stderr.
	AuditLog string `yaml:"audit_log"`
	// AuditMaxBytes bounds a file audit_log: an event that would take it
	// past this size rotates it first (audit.log becomes audit.log.1, .1
	// becomes .2, ...). Audit logging then takes at most AuditMaxBytes ×
	// (AuditMaxFiles + 1) on disk. Default 100MiB; 1MiB..1TiB.
	AuditMaxBytes ByteSize `yaml:"audit_max_bytes"`
	// AuditMaxFiles is how many rotated audit files are kept
	// (audit.log.1 .. audit.log.N); rotation deletes the oldest. 0 keeps
	// none: the file starts again empty. Default 5; at most 1000.
	AuditMaxFiles int `yaml:"audit_max_files"`
	// AuditAuthFailuresPerSource is how many auth_failure events from one
	// source address (an IPv6 address counts as its /64) are written per
	// AuditAuthFailureInterval; the rest are counted (STAT
	// audit_auth_failures_suppressed) and reported in one "suppressed"
	// line per source and interval. Default 10; 1..1000000.
	AuditAuthFailuresPerSource int `yaml:"audit_auth_failures_per_source"`
	// AuditAuthFailureInterval is the window AuditAuthFailuresPerSource
	// applies to. Default 10s; 1s..1h.
	AuditAuthFailureInterval time.Duration `yaml:"audit_auth_failure_interval"`
	// AuditAuthFailureSources bounds the source addresses tracked for
	// AuditAuthFailuresPerSource (about 200 bytes each); failures from
	// further sources share one bucket, source "*", with the same
	// allowance. Default 1024; 1..65536.
	AuditAuthFailureSources int `yaml:"audit_auth_failure_sources"`
	// TLSCert and TLSKey turn on TLS on the data and admin listeners.
	TLSCert string `yaml:"tls_cert"`
	TLSKey  string `yaml:"tls_key"`
	// TLSClientCA turns on mTLS: clients must present a certificate from
	// this CA bundle.
	TLSClientCA string `yaml:"tls_client_ca"`
	// AdminTLSClientCA is the CA bundle the admin listener verifies client
	// certificates against. The admin listener never demands one: /healthz
	// and /readyz answer load balancers, and an admin's bearer secret is
	// enough for /admin/*; a certificate, when presented, must verify.
	// Default "": tls_client_ca; "none": the admin listener asks for no
	// client certificate.
	AdminTLSClientCA string `yaml:"admin_tls_client_ca"`
	// SealKeys are the HMAC keys that seal cold-tier manifests (YAML only);
	// the last is current, earlier ones still verify. None: manifests are
	// not sealed.
	SealKeys []SecretConfig `yaml:"seal_keys"`
	// SealGrace is how long the previous seal key still verifies after a
	// reload makes another key current. Default 24h.
	SealGrace time.Duration `yaml:"seal_grace"`
	// SealHotReads seals every block entering the hot tier and verifies the
	// seal on every hot read (one HMAC-SHA256 pass over the payload each
	// way). Needs seal_keys. Default false.
	SealHotReads bool `yaml:"seal_hot_reads"`
	// ColdEncryptionKeys are the master keys that encrypt cold-tier packs
	// at rest with AES-256-GCM, one key per tenant derived by HKDF (YAML
	// only; ADR 0019): the last is current, earlier ones still decrypt.
	// Each is at least 32 bytes (openssl rand -hex 32). None (the default): packs are written
	// unencrypted, and an encrypted pack is a refill miss.
	ColdEncryptionKeys []SecretConfig `yaml:"cold_encryption_keys"`
	// ColdEncryptionGrace is how long the previous cold encryption key
	// still decrypts after a reload makes another key current; after it,
	// that key's packs are misses (recomputed and rewritten under the new
	// key). Default 24h.
	ColdEncryptionGrace time.Duration `yaml:"cold_encryption_grace"`
	// ColdCompression compresses cold-tier blocks (before encryption):
	// off, zstd, or zstd-planes (zstd over each block's byte planes: the
	// variant that pays on bf16 KV). Default off (docs/BENCHMARKS.md,
	// "Cold-tier compression and encryption"). Compressed packs are read
	// whatever the setting.
	ColdCompression string `yaml:"cold_compression"`
	// ColdCompressionMinSaving: a block's compressed form is kept only if
	// it saves at least this percent. Default 10.
	ColdCompressionMinSaving int `yaml:"cold_compression_min_saving"`

	// HotCapacity is the DRAM budget for cached payload; it must fit in the
	// machine's physical memory. Default 1GiB.
	HotCapacity ByteSize `yaml:"hot_capacity"`
	// HotMinClass is the smallest slot size class (a power of two). Default
	// 16KiB.
	HotMinClass ByteSize `yaml:"hot_min_class"`
	// HotMaxClass is the largest slot size class (a power of two) and so
	// the largest block.
	// Default 64MiB: an LMCache chunk of 256 tokens is 32MiB for
	// Llama-3-8B in fp16 (ADR 0015).
	HotMaxClass ByteSize `yaml:"hot_max_class"`
	// HotSlab is the size of one mmap'd slab; at most HotCapacity. Default
	// 64MiB.
	HotSlab ByteSize `yaml:"hot_slab"`
	// HotPrefault is how slab pages are faulted in: populate
	// (MAP_POPULATE), hugepage (MADV_HUGEPAGE, then touched) or none.
	// Default populate.
	HotPrefault string `yaml:"hot_prefault"`
	// HotPolicy is the hot tier's admission and eviction policy: "builtin"
	// (the prefix-aware LRU built into the store) or one of
	// policy.Names() (internal/policy; gpucached --help lists them). A
	// block the policy refuses answers NO_SPACE. Default adaptive: it
	// follows whichever of lru, prefix, chainttl and cost its sampled
	// shadow caches show to save the most prefill compute (priced by
	// hot_cost_model) without losing prefix hits, and LRU until one does;
	// over 58 traces it saved more compute than prefix (close to builtin)
	// on every one and never fell below 0.99× LRU (docs/BENCHMARKS.md,
	// ADR 0021).
	HotPolicy string `yaml:"hot_policy"`
	// HotCostModel is the model (policy.CostModels) by which the cost
	// policy prices a block's prefill FLOPs: 2 × parameters per token plus
	// attention over its context. Only the ratio of the two parts matters,
	// so a model of a similar shape serves. Default llama-3-8b.
	HotCostModel string `yaml:"hot_cost_model"`
	// LeaseTTL is the lease TTL when a client asks for 0: a LOOKUP lease
	// pins its blocks until a GET under it or its expiry. Default 5s.
	LeaseTTL time.Duration `yaml:"lease_ttl"`
	// MaxLeaseTTL caps a requested lease. Default 30s.
	MaxLeaseTTL time.Duration `yaml:"max_lease_ttl"`
	// TenantHoldBytes caps the hot-tier bytes one tenant holds back from
	// eviction at once: its leased blocks and its PUTs in flight (see
	// TenantHoldCap). Past it, PUTs answer NO_SPACE and LOOKUP hits come
	// without a lease; live leases get the same share of the lease table
	// (ADR 0013). Default 0: a fair share, hot_capacity / the number of
	// tenants (half of it in open mode), at least one hot_max_class block.
	TenantHoldBytes ByteSize `yaml:"tenant_hold_bytes"`
	// TenantFills caps the fills one tenant has in flight (ACQUIRE leads
	// and cold refills). Past it, the tenant's ACQUIRE answers DENIED and
	// its refills are misses. Default 0: a fair share of the 65536 fill
	// slots, as for tenant_hold_bytes.
	TenantFills int `yaml:"tenant_fills"`
	// TenantRequestBuffers caps the request-buffer bytes one tenant's
	// sessions hold together (see TenantRequestBufferCap). Past it, the
	// tenant's large requests wait up to 1s, then answer RATE_LIMITED (ADR
	// 0013). Default 0: a fair share, what the pre-session bucket (144KiB by
	// default) leaves of request_buffers divided by the tenants (half of it
	// in open mode), at least the largest request.
	TenantRequestBuffers ByteSize `yaml:"tenant_request_buffers"`

	// MaxConns bounds open client connections. Default 4096.
	MaxConns int `yaml:"max_conns"`
	// MaxInFlight bounds requests in flight per connection. Default 64.
	MaxInFlight int `yaml:"max_in_flight"`
	// MaxBatch bounds keys per request. Default 1024.
	MaxBatch int `yaml:"max_batch"`
	// MaxFrame bounds one frame body. Default 65MiB: one hot_max_class
	// block of 64MiB plus 1MiB for its PUT table or GET response table.
	MaxFrame ByteSize `yaml:"max_frame"`
	// ReadTimeout bounds reading one request. Default 30s.
	ReadTimeout time.Duration `yaml:"read_timeout"`
	// WriteTimeout bounds writing one batch of responses. Default 30s.
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// IdleTimeout closes a silent connection. Default 5m.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// DrainTimeout bounds graceful shutdown. Default 15s.
	DrainTimeout time.Duration `yaml:"drain_timeout"`
	// HelloTimeout closes a connection that has not completed HELLO (TLS
	// handshake included) this long after accept. Default 5s.
	HelloTimeout time.Duration `yaml:"hello_timeout"`
	// MaxUnauthPerAddr bounds the connections from one source IP address
	// that have not completed HELLO; more are closed on accept. Default 64.
	MaxUnauthPerAddr int `yaml:"max_unauth_per_addr"`
	// RequestBuffers bounds the memory of request buffers (large bodies,
	// PUT and FILL_COMMIT tables, large queued GET responses, parked WAITs)
	// across all connections, above 16KiB per
	// connection; see docs/OPERATIONS.md, "Memory bound". Default 128MiB.
	RequestBuffers ByteSize `yaml:"request_buffers"`
	// AdminMaxConns bounds open admin HTTP connections; more are closed on
	// accept. Default 64.
	AdminMaxConns int `yaml:"admin_max_conns"`
	// AdminIdleTimeout closes an idle keep-alive admin HTTP connection.
	// Default 30s.
	AdminIdleTimeout time.Duration `yaml:"admin_idle_timeout"`

	// ColdStore selects the cold tier: fs (a local directory, the embedded
	// default), s3 (any S3-compatible server) or off. Default fs.
	ColdStore string `yaml:"cold_store"`
	// ColdDir is the fs cold tier's directory. Default ./gpucache-data.
	ColdDir string `yaml:"cold_dir"`
	// ColdWriteBehind writes blocks evicted from the hot tier to the cold
	// tier. Default true.
	ColdWriteBehind bool `yaml:"cold_write_behind"`
	// ColdSpillOnDrain writes the blocks still in DRAM to the cold tier on
	// a graceful shutdown (SIGTERM, or a cluster drain) before the node
	// leaves, within half of drain_timeout, so that their new owners (or
	// this node, restarted) refill them instead of recomputing. It needs
	// cold_write_behind. Default true.
	ColdSpillOnDrain bool `yaml:"cold_spill_on_drain"`
	// ColdFlushInterval is how often pending evicted blocks are packed and
	// written. Default 1s.
	ColdFlushInterval time.Duration `yaml:"cold_flush_interval"`
	// ColdPending bounds the bytes the write-behind holds (on the Go heap):
	// evicted blocks waiting to be packed and their packs until written,
	// during a store outage too; more are dropped. It must hold one
	// hot_max_class block plus 1MiB of metadata when the write-behind is
	// on. Default 256MiB (four 64MiB blocks).
	ColdPending ByteSize `yaml:"cold_pending"`
	// ColdIndexMax bounds the cold presence index (entries, about 64 bytes
	// of heap each): LOOKUP and RESP EXISTS count the blocks it holds as
	// present. Past it nothing is added and the rest answer absent (a GET
	// still refills them). Default 1048576 (64 MiB of heap at most).
	ColdIndexMax int `yaml:"cold_index_max"`
	// ColdIndexRescan is how often the presence index lists the cold store
	// again after the listing at start, to find pointers other nodes wrote
	// to a shared bucket. Default 0: 1m in a cluster, never on a single
	// node; negative: never.
	ColdIndexRescan time.Duration `yaml:"cold_index_rescan"`
	// ColdRetention, when positive, makes the node apply retention to the
	// cold tier every cold_retention_interval: pointers last written more
	// than this long ago are deleted and what they alone referenced is
	// reclaimed after the reclaim grace (the same run as `gpucache admin
	// expire`). Default 0: keep forever. At least 1m when set.
	ColdRetention time.Duration `yaml:"cold_retention"`
	// ColdRetentionInterval is how often retention runs when
	// cold_retention is set: 1m..24h. Default 1h.
	ColdRetentionInterval time.Duration `yaml:"cold_retention_interval"`
	// ColdReclaimInterval is how often the node deletes the cold objects
	// of its namespaces that nothing references any more (packs and
	// manifests superseded by newer writes of the same blocks): 1m..24h.
	// Default 1h.
	ColdReclaimInterval time.Duration `yaml:"cold_reclaim_interval"`
	// ColdReclaimGrace is the age an unreferenced cold object must reach
	// before reclaim deletes it. It covers a publication in flight (a pack
	// written before the manifest and pointers that name it), so it must
	// exceed the longest one, retries included: at least 10m. It also
	// sets how long the node's quota ledger keeps a record of each pack it
	// wrote (about LedgerGroupBytes each; OPERATIONS.md). Default 24h.
	ColdReclaimGrace time.Duration `yaml:"cold_reclaim_grace"`
	// S3Endpoint, S3Region, S3Bucket, S3Prefix, S3AccessKey, S3SecretKey
	// and S3PathStyle configure cold_store: s3. The keys default to the
	// AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY environment variables.
	S3Endpoint  string `yaml:"s3_endpoint"`
	S3Region    string `yaml:"s3_region"`
	S3Bucket    string `yaml:"s3_bucket"`
	S3Prefix    string `yaml:"s3_prefix"`
	S3AccessKey string `yaml:"s3_access_key"`
	S3SecretKey string `yaml:"s3_secret_key"`
	S3PathStyle bool   `yaml:"s3_path_style"`

	// Cluster mode (cluster.go, ADR 0008; docs/OPERATIONS.md).
	// EtcdEndpoints is a comma-separated list of etcd client URLs; set, the
	// node joins a cluster. Default "": a single node.
	EtcdEndpoints string `yaml:"etcd_endpoints"`
	// EtcdPrefix is this cluster's key prefix in etcd. Default /gpucache/.
	EtcdPrefix string `yaml:"etcd_prefix"`
	// NodeID is this node's stable member ID, the placement seed: renaming
	// a node moves its keys. Default: the advertise address.
	NodeID string `yaml:"node_id"`
	// FaultDomain is this node's rack, host or zone; isolation removes a
	// whole domain. Default: the host name.
	FaultDomain string `yaml:"fault_domain"`
	// AdvertiseAddr is the data address clients dial. Default: listen,
	// unless it is a wildcard address.
	AdvertiseAddr string `yaml:"advertise_addr"`
	// MemberLeaseTTL is how long a dead node stays a member (its etcd
	// lease). Default 10s.
	MemberLeaseTTL time.Duration `yaml:"member_lease_ttl"`
	// ControlGrace is how long a node cut off from etcd serves reads,
	// read-only, before every key's owner is unknown. Default 10s.
	ControlGrace time.Duration `yaml:"control_grace"`
	// ControlProbe is how often etcd's reachability is checked. Default 1s.
	ControlProbe time.Duration `yaml:"control_probe"`
	// ProtocolMax is the highest wire protocol version negotiated; the
	// previous one (4) pins it during a rolling upgrade. Default 5
	// (wire.VersionMax).
	ProtocolMax int `yaml:"protocol_max"`
	// etcd client security: TLS (etcd_ca, plus etcd_cert/etcd_key for
	// mTLS) and etcd's own user authentication.
	EtcdCA           string `yaml:"etcd_ca"`
	EtcdCert         string `yaml:"etcd_cert"`
	EtcdKey          string `yaml:"etcd_key"`
	EtcdUsername     string `yaml:"etcd_username"`
	EtcdPasswordFile string `yaml:"etcd_password_file"`

	// AblationP2P and AblationDPA are the hardware ablation knobs
	// (ablation.go): enabling one logs NOT_RUN_HARDWARE and changes no
	// byte. Default false.
	AblationP2P bool `yaml:"ablation_p2p"`
	AblationDPA bool `yaml:"ablation_dpa"`
	// HotErasureCoding is refused by Validate (ablation.go, ADR 0018).
	// Default false.
	HotErasureCoding bool `yaml:"hot_erasure_coding"`

	// LogLevel is debug, info, warn or error. Default info.
	LogLevel string `yaml:"log_level"`
	// LogFormat is text or json (for machines); logs are structured
	// (log/slog). Default text.
	LogFormat string `yaml:"log_format"`
}

// Default returns the embedded single-node default.
func Default() Config {
	return Config{
		Listen:      "127.0.0.1:9400",
		AdminListen: "127.0.0.1:9401",
		RESPListen:  "off",
		UnixListen:  "off",

		UnixListenMode:    "0660",
		FlashDir:          "off",
		FlashSegment:      256 << 20,
		FlashWriteBuffer:  64 << 20,
		FlashCold:         FlashColdThrough,
		FlashReclaim:      FlashReclaimOldest,
		FlashDirect:       "auto",
		RegionBytes:       256 << 30,
		TenantRegionBytes: 64 << 30,
		HotCapacity:       1 << 30,
		HotMinClass:       16 << 10,
		HotMaxClass:       64 << 20,
		HotSlab:           64 << 20,
		HotPrefault:       "populate",
		HotPolicy:         policy.AdaptiveName,
		HotCostModel:      policy.DefaultCostModel.Name,
		LeaseTTL:          5 * time.Second,
		MaxLeaseTTL:       30 * time.Second,
		MaxConns:          4096,
		MaxInFlight:       64,
		MaxBatch:          1024,
		MaxFrame:          65 << 20,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       5 * time.Minute,
		DrainTimeout:      15 * time.Second,
		LogLevel:          "info",
		LogFormat:         "text",

		HelloTimeout:     5 * time.Second,
		MaxUnauthPerAddr: 64,
		RequestBuffers:   128 << 20,
		AdminMaxConns:    64,
		AdminIdleTimeout: 30 * time.Second,

		ReplayWindow:    5 * time.Minute,
		ReplayMaxNonces: 1 << 20,
		AuditLog:        "stderr",
		SealGrace:       24 * time.Hour,

		AuditMaxBytes:              100 << 20,
		AuditMaxFiles:              5,
		AuditAuthFailuresPerSource: 10,
		AuditAuthFailureInterval:   10 * time.Second,
		AuditAuthFailureSources:    1024,

		ReplayMaxFuture: 5 * time.Second,

		ColdStore:         "fs",
		ColdDir:           "./gpucache-data",
		ColdWriteBehind:   true,
		ColdSpillOnDrain:  true,
		ColdFlushInterval: time.Second,
		ColdPending:       256 << 20,
		ColdIndexMax:      1 << 20,
		S3Region:          "us-east-1",
		S3PathStyle:       true,

		ColdRetentionInterval: time.Hour,
		ColdReclaimInterval:   time.Hour,
		ColdReclaimGrace:      24 * time.Hour,

		EtcdPrefix:     "/gpucache/",
		MemberLeaseTTL: 10 * time.Second,
		ControlGrace:   10 * time.Second,
		ControlProbe:   time.Second,
		ProtocolMax:    int(wire.VersionMax),

		ColdEncryptionGrace:      24 * time.Hour,
		ColdCompression:          ColdCompressionOff,
		ColdCompressionMinSaving: 10,
	}
}

// field binds one config field to its names.
type field struct {
	key   string // YAML key
	usage string
	val   flag.Value
}

func (c *Config) fields() []field {
	return append([]field{
		{"listen", "data-plane address", (*strVal)(&c.Listen)},
		{"admin_listen", `admin HTTP address ("off" disables)`, (*strVal)(&c.AdminListen)},
		{"hot_capacity", "DRAM budget for cached blocks (e.g. 1GiB)", &c.HotCapacity},
		{"hot_min_class", "smallest slot size class", &c.HotMinClass},
		{"hot_max_class", "largest slot size class (largest block)", &c.HotMaxClass},
		{"hot_slab", "size of one mmap'd slab", &c.HotSlab},
		{"hot_prefault", "slab prefault mode: populate, hugepage, none", (*strVal)(&c.HotPrefault)},
		{"hot_policy", "hot tier admission/eviction policy: " + strings.Join(HotPolicies(), ", "), (*strVal)(&c.HotPolicy)},
		{"hot_cost_model", "model the cost policy prices prefill by: " + strings.Join(policy.CostModels(), ", "), (*strVal)(&c.HotCostModel)},
		{"lease_ttl", "default lease TTL", (*durVal)(&c.LeaseTTL)},
		{"max_lease_ttl", "longest lease TTL granted", (*durVal)(&c.MaxLeaseTTL)},
		{"tenant_hold_bytes", "hot-tier bytes one tenant may hold in leases and PUTs in flight (0: fair share)", &c.TenantHoldBytes},
		{"tenant_fills", "fills one tenant may have in flight (0: fair share)", (*intVal)(&c.TenantFills)},
		{"tenant_request_buffers", "request-buffer bytes one tenant may hold (0: fair share)", &c.TenantRequestBuffers},
		{"max_conns", "most open client connections", (*intVal)(&c.MaxConns)},
		{"max_in_flight", "most requests in flight per connection", (*intVal)(&c.MaxInFlight)},
		{"max_batch", "most keys per request", (*intVal)(&c.MaxBatch)},
		{"max_frame", "largest frame body", &c.MaxFrame},
		{"read_timeout", "deadline for reading one request", (*durVal)(&c.ReadTimeout)},
		{"write_timeout", "deadline for writing responses", (*durVal)(&c.WriteTimeout)},
		{"idle_timeout", "close connections idle this long", (*durVal)(&c.IdleTimeout)},
		{"drain_timeout", "graceful shutdown deadline", (*durVal)(&c.DrainTimeout)},
		{"cold_store", "cold tier: fs, s3 or off", (*strVal)(&c.ColdStore)},
		{"cold_dir", "fs cold tier directory", (*strVal)(&c.ColdDir)},
		{"cold_write_behind", "write blocks evicted from DRAM to the cold tier", (*boolVal)(&c.ColdWriteBehind)},
		{"cold_spill_on_drain", "on graceful shutdown, write the blocks still in DRAM to the cold tier", (*boolVal)(&c.ColdSpillOnDrain)},
		{"cold_flush_interval", "how often evicted blocks are packed and written", (*durVal)(&c.ColdFlushInterval)},
		{"cold_pending", "bytes the write-behind may hold: evicted blocks and their packs until written (more are dropped)", &c.ColdPending},
		{"cold_index_max", "most blocks in the cold presence index (about 64 bytes each)", (*intVal)(&c.ColdIndexMax)},
		{"cold_index_rescan", "how often the cold presence index lists the store again (0: 1m clustered, else never; negative: never)", (*durVal)(&c.ColdIndexRescan)},
		{"cold_retention", "delete cold blocks last written longer ago than this (0: keep forever)", (*durVal)(&c.ColdRetention)},
		{"cold_retention_interval", "how often cold_retention is applied (1m..24h)", (*durVal)(&c.ColdRetentionInterval)},
		{"cold_reclaim_interval", "how often unreferenced cold objects are deleted (1m..24h)", (*durVal)(&c.ColdReclaimInterval)},
		{"cold_reclaim_grace", "age an unreferenced cold object reaches before it is deleted (at least 10m)", (*durVal)(&c.ColdReclaimGrace)},
		{"s3_endpoint", "S3 endpoint URL, e.g. http://127.0.0.1:7070", (*strVal)(&c.S3Endpoint)},
		{"s3_region", "S3 region", (*strVal)(&c.S3Region)},
		{"s3_bucket", "S3 bucket", (*strVal)(&c.S3Bucket)},
		{"s3_prefix", "S3 key prefix (ends in /)", (*strVal)(&c.S3Prefix)},
		{"s3_access_key", "S3 access key (default $AWS_ACCESS_KEY_ID)", (*strVal)(&c.S3AccessKey)},
		{"s3_secret_key", "S3 secret key (default $AWS_SECRET_ACCESS_KEY)", (*strVal)(&c.S3SecretKey)},
		{"s3_path_style", "S3 path-style addressing", (*boolVal)(&c.S3PathStyle)},
		{"log_level", "debug, info, warn or error", (*strVal)(&c.LogLevel)},
		{"log_format", "text or json", (*strVal)(&c.LogFormat)},
		{"replay_window", "how far a mutating request's stamp may be behind the clock", (*durVal)(&c.ReplayWindow)},
		{"replay_max_future", "how far a mutating request's stamp may be ahead of the clock", (*durVal)(&c.ReplayMaxFuture)},
		{"replay_max_nonces", "nonces remembered by the replay window, all tenants together", (*intVal)(&c.ReplayMaxNonces)},
		{"replay_tenant_nonces", "nonces remembered by the replay window for one tenant (0: replay_max_nonces / max(16, tenants), at most 65536)", (*intVal)(&c.ReplayTenantNonces)},
		{"audit_log", `audit events: "stderr", "off" or a file path`, (*strVal)(&c.AuditLog)},
		{"audit_max_bytes", "size at which a file audit_log rotates", &c.AuditMaxBytes},
		{"audit_max_files", "rotated audit files kept (0: none)", (*intVal)(&c.AuditMaxFiles)},
		{"audit_auth_failures_per_source", "auth_failure events written per source address and audit_auth_failure_interval (the rest are counted and summarized)", (*intVal)(&c.AuditAuthFailuresPerSource)},
		{"audit_auth_failure_interval", "window of audit_auth_failures_per_source", (*durVal)(&c.AuditAuthFailureInterval)},
		{"audit_auth_failure_sources", "source addresses tracked for audit_auth_failures_per_source (more share one bucket)", (*intVal)(&c.AuditAuthFailureSources)},
		{"tls_cert", "TLS certificate chain (PEM) for the data and admin listeners", (*strVal)(&c.TLSCert)},
		{"tls_key", "TLS private key (PEM)", (*strVal)(&c.TLSKey)},
		{"tls_client_ca", "CA bundle (PEM) that client certificates must chain to (mTLS)", (*strVal)(&c.TLSClientCA)},
		{"admin_tls_client_ca", `CA bundle (PEM) for optional client certificates on the admin listener ("": tls_client_ca, "none": ask for none)`, (*strVal)(&c.AdminTLSClientCA)},
		{"seal_grace", "how long a replaced seal key still verifies", (*durVal)(&c.SealGrace)},
		{"seal_hot_reads", "seal blocks in DRAM too and verify them on every read (needs seal_keys)", (*boolVal)(&c.SealHotReads)},
	}, slices.Concat(c.clusterFields(), c.connFields(), c.respFields(), c.unixFields(), c.flashFields(), c.ablationFields(), c.coldCryptFields())...)
}

// EnvName returns the environment variable for a YAML key.
func EnvName(key string) string { return "GPUCACHE_" + strings.ToUpper(key) }

// FlagName returns the flag for a YAML key.
func FlagName(key string) string { return strings.ReplaceAll(key, "_", "-") }

// Load builds a Config from defaults, the config file, the environment
// (looked up with getenv) and args, then validates it. A --help request
// returns flag.ErrHelp after printing usage to out (gpucached passes
// stdout); nothing else is written to out.
func Load(args []string, getenv func(string) (string, bool), out io.Writer) (Config, error) {
	c := Default()
	// The config file comes first, so find it before parsing flags.
	path, _ := getenv("GPUCACHE_CONFIG")
	for i, a := range args {
		switch {
		case a == "--config" || a == "-config":
			if i+1 < len(args) {
				path = args[i+1]
			}
		case strings.HasPrefix(a, "--config="), strings.HasPrefix(a, "-config="):
			path = a[strings.Index(a, "=")+1:]
		}
	}
	if path != "" {
		if err := c.loadFile(path); err != nil {
			return c, err
		}
	}
	for _, f := range c.fields() {
		if v, ok := getenv(EnvName(f.key)); ok {
			if err := f.val.Set(v); err != nil {
				return c, fmt.Errorf("%w: %s=%q: %v", ErrInvalid, EnvName(f.key), v, err)
			}
		}
	}
	fs := flag.NewFlagSet("gpucached", flag.ContinueOnError)
	// A parse error is one line (flagError), not the whole usage.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.String("config", path, "YAML config file (env GPUCACHE_CONFIG)")
	names := []string{"config", "help", "version"}
	for _, f := range c.fields() {
		fs.Var(f.val, FlagName(f.key), f.usage+" (env "+EnvName(f.key)+")")
		names = append(names, FlagName(f.key))
	}
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(out, "Usage: gpucached [flags]\n\nRuns one gpucache node. With no flags: data on %s, admin on %s, %s DRAM hot tier.\n\nFlags:\n", Default().Listen, Default().AdminListen, Default().HotCapacity)
		fs.SetOutput(out)
		fs.PrintDefaults()
		return c, err
	} else if err != nil {
		return c, flagError(err, names)
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("%w: unexpected argument %q", ErrInvalid, fs.Arg(0))
	}
	return c, c.Validate()
}

func (c *Config) loadFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%w: reading config file: %v", ErrInvalid, err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) {
		return yamlError(path, err)
	}
	return nil
}

// Validate reports the first invalid field with a message a user can act on.
func (c Config) Validate() error {
	for _, check := range []func() error{
		c.validateListen,
		c.validateSecurity,
		c.validateAudit,
		c.validateCluster,
		c.validateColdCrypt,
		c.validateConn,
		c.validateAblation,
		c.validateHot,
		c.validateLimits,
		c.validateTenantShares,
		c.validateRESP,
		c.validateUnix,
		c.validateFlash,
		c.validateCold,
		c.validateLog,
	} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// invalidf returns an error wrapping ErrInvalid.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// validateListen checks the data and admin listen addresses.
func (c Config) validateListen() error {
	if err := checkAddr("listen", c.Listen); err != nil {
		return err
	}
	if c.AdminListen != "off" {
		return checkAddr("admin_listen", c.AdminListen)
	}
	return nil
}

// validateHot checks the hot tier's size classes, capacity, slab size,
// prefault mode and policy.
func (c Config) validateHot() error {
	if !pow2(c.HotMinClass) || !pow2(c.HotMaxClass) {
		return invalidf("hot_min_class (%s) and hot_max_class (%s) must be powers of two", c.HotMinClass, c.HotMaxClass)
	}
	if c.HotMinClass > c.HotMaxClass {
		return invalidf("hot_min_class %s is larger than hot_max_class %s", c.HotMinClass, c.HotMaxClass)
	}
	if c.HotCapacity < c.HotMaxClass {
		return invalidf("hot_capacity %s is smaller than one %s block (hot_max_class)", c.HotCapacity, c.HotMaxClass)
	}
	if mem, ok := MemTotal(); ok && uint64(c.HotCapacity) > mem {
		return invalidf("hot_capacity %s is larger than this machine's memory (%s)", c.HotCapacity, ByteSize(mem).Human())
	}
	if c.HotSlab < c.HotMinClass {
		return invalidf("hot_slab %s is smaller than hot_min_class %s", c.HotSlab, c.HotMinClass)
	}
	if c.HotCapacity < c.HotSlab {
		// The hot tier maps memory one slab at a time: a budget below one
		// slab cannot hold any.
		return invalidf("hot_capacity %s is smaller than one hot_slab (%s); set hot_slab to at most %s, or raise hot_capacity",
			c.HotCapacity, c.HotSlab, c.HotCapacity)
	}
	switch c.HotPrefault {
	case "populate", "hugepage", "none":
	default:
		return invalidf("hot_prefault %q is not populate, hugepage or none", c.HotPrefault)
	}
	if !slices.Contains(HotPolicies(), c.HotPolicy) {
		return invalidf("hot_policy %q is not one of %s", c.HotPolicy, strings.Join(HotPolicies(), ", "))
	}
	if _, err := policy.CostModelByName(c.HotCostModel); err != nil {
		return invalidf("hot_cost_model %q is not one of %s (pick the model of a shape closest to the one served)", c.HotCostModel, strings.Join(policy.CostModels(), ", "))
	}
	return nil
}

// validateLimits checks the frame size, the connection, in-flight and
// batch limits, the timeouts and the lease TTLs.
func (c Config) validateLimits() error {
	if uint64(c.MaxFrame) < uint64(c.HotMaxClass)+4096 || c.MaxFrame > 1<<31 {
		return invalidf("max_frame %s must hold one hot_max_class block (%s) plus 4KiB and be at most 2GiB; hot_max_class + 1MiB (%s) fits any PUT table",
			c.MaxFrame, c.HotMaxClass, c.HotMaxClass+1<<20)
	}
	for _, n := range []struct {
		name string
		v    int
		max  int
	}{{"max_conns", c.MaxConns, 1 << 20}, {"max_in_flight", c.MaxInFlight, 4096}, {"max_batch", c.MaxBatch, 65536}} {
		if n.v < 1 || n.v > n.max {
			return invalidf("%s %d not in 1..%d", n.name, n.v, n.max)
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"lease_ttl", c.LeaseTTL}, {"max_lease_ttl", c.MaxLeaseTTL}, {"read_timeout", c.ReadTimeout},
		{"write_timeout", c.WriteTimeout}, {"idle_timeout", c.IdleTimeout}, {"drain_timeout", c.DrainTimeout}} {
		if d.v <= 0 {
			return invalidf("%s must be positive, got %s", d.name, d.v)
		}
	}
	if c.LeaseTTL > c.MaxLeaseTTL {
		return invalidf("lease_ttl %s exceeds max_lease_ttl %s", c.LeaseTTL, c.MaxLeaseTTL)
	}
	return nil
}

// validateCold checks the cold store, its flush, write-behind buffer,
// retention and index settings.
func (c Config) validateCold() error {
	if err := c.validateColdStore(); err != nil {
		return err
	}
	if c.ColdFlushInterval <= 0 {
		return invalidf("cold_flush_interval must be positive, got %s", c.ColdFlushInterval)
	}
	if c.ColdPending < 0 {
		return invalidf("cold_pending must not be negative")
	}
	if c.ColdRetention != 0 && (c.ColdRetention < time.Minute || c.ColdStore == "off") {
		return invalidf("cold_retention must be 0 (keep forever) or at least 1m with a cold_store, got %s (cold_store %s)", c.ColdRetention, c.ColdStore)
	}
	if c.ColdRetentionInterval < time.Minute || c.ColdRetentionInterval > 24*time.Hour {
		return invalidf("cold_retention_interval must be 1m..24h, got %s", c.ColdRetentionInterval)
	}
	if c.ColdReclaimInterval < time.Minute || c.ColdReclaimInterval > 24*time.Hour {
		return invalidf("cold_reclaim_interval must be 1m..24h, got %s", c.ColdReclaimInterval)
	}
	if c.ColdReclaimGrace < 10*time.Minute {
		return invalidf("cold_reclaim_grace must be at least 10m (it must outlast a publication in flight, retries included), got %s", c.ColdReclaimGrace)
	}
	if c.ColdIndexMax < 1 || c.ColdIndexMax > 1<<30 {
		return invalidf("cold_index_max must be 1..1073741824, got %d", c.ColdIndexMax)
	}
	if need := c.HotMaxClass + ColdBlockOverhead; c.ColdStore != "off" && c.ColdWriteBehind && c.ColdPending < need {
		return invalidf("cold_pending %s cannot hold one hot_max_class block (%s) plus its %s of metadata: every evicted block of that size would be dropped; set cold_pending to at least %s, lower hot_max_class, or set cold_write_behind: false",
			c.ColdPending, c.HotMaxClass, ColdBlockOverhead, need)
	}
	return nil
}

// validateColdStore checks the cold store kind and what it needs.
func (c Config) validateColdStore() error {
	switch c.ColdStore {
	case "off":
	case "fs":
		if c.ColdDir == "" {
			return invalidf("cold_dir is empty; set it or cold_store: off")
		}
	case "s3":
		if c.S3Endpoint == "" || c.S3Bucket == "" {
			return invalidf("cold_store s3 needs s3_endpoint and s3_bucket")
		}
	default:
		return invalidf("cold_store %q is not fs, s3 or off", c.ColdStore)
	}
	return nil
}

// validateLog checks the log level and format.
func (c Config) validateLog() error {
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return invalidf("log_level %q is not debug, info, warn or error", c.LogLevel)
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		return invalidf("log_format %q is not text or json", c.LogFormat)
	}
	return nil
}

// ColdBlockOverhead is the metadata allowance the write-behind charges one
// evicted block on top of its payload, at most (tier.MaxBlockOverhead):
// cold_pending must hold hot_max_class plus this.
const ColdBlockOverhead ByteSize = 1 << 20

// BuiltinHotPolicy names the hot store's built-in order (hot.Config.Policy
// nil): prefix-aware LRU.
const BuiltinHotPolicy = "builtin"

// HotPolicies lists the accepted hot_policy values: BuiltinHotPolicy, then
// the registered online policies (policy.Names).
func HotPolicies() []string {
	return append([]string{BuiltinHotPolicy}, policy.Names()...)
}

func pow2(b ByteSize) bool { return b > 0 && b&(b-1) == 0 }

func checkAddr(name, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%w: %s %q: %v", ErrInvalid, name, addr, err)
	}
	if port == "" {
		return fmt.Errorf("%w: %s %q has no port", ErrInvalid, name, addr)
	}
	_ = host
	return nil
}

// IsLoopback reports whether host names only loopback interfaces.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// MemTotal returns the machine's physical memory from /proc/meminfo.
func MemTotal() (uint64, bool) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			var kb uint64
			if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%d kB", &kb); err == nil {
				return kb << 10, true
			}
		}
	}
	return 0, false
}
