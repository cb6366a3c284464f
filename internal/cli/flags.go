package cli

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gpucache/gpucache/client"
	"github.com/gpucache/gpucache/internal/security/tlsconf"
)

// ConnFlags are the flags every networked command takes.
type ConnFlags struct {
	addr                   string
	cluster                string // comma-separated seeds; "" for one node
	tenant                 string
	timeout                time.Duration
	secretFile             string
	tlsCA, tlsCert, tlsKey string
	tlsServerName          string
}

// Register defines the flags in fs.
func (c *ConnFlags) Register(fs *flag.FlagSet) {
	fs.StringVar(&c.addr, "addr", EnvOr("GPUCACHE_ADDR", client.DefaultAddr), "`host:port` of the server, or unix:PATH for its Unix socket (env GPUCACHE_ADDR)")
	fs.StringVar(&c.cluster, "cluster", os.Getenv("GPUCACHE_CLUSTER"), "comma-separated `host:port` seeds of a cluster, used instead of --addr: data commands route each key to its owner, members asks a seed, stat and ping go to every member (env GPUCACHE_CLUSTER)")
	fs.StringVar(&c.tenant, "tenant", os.Getenv("GPUCACHE_TENANT"), "session tenant (env GPUCACHE_TENANT; default \"default\", or the tenant the server derives from --secret-file or the client certificate)")
	fs.DurationVar(&c.timeout, "timeout", client.DefaultRequestTimeout, "per-request timeout")
	fs.StringVar(&c.secretFile, "secret-file", os.Getenv("GPUCACHE_SECRET_FILE"), "`file` holding the tenant's bearer secret (env GPUCACHE_SECRET_FILE); the tenant comes from the server's answer")
	fs.StringVar(&c.tlsCA, "tls-ca", os.Getenv("GPUCACHE_TLS_CA"), "CA bundle `file` that verifies the server; turns TLS on (env GPUCACHE_TLS_CA)")
	// GPUCACHE_CLIENT_CERT and GPUCACHE_CLIENT_KEY, not GPUCACHE_TLS_CERT and
	// GPUCACHE_TLS_KEY: those are gpucached's settings (its own server
	// certificate), and a shell that exported them for the CLI would start
	// gpucached with the client's certificate.
	fs.StringVar(&c.tlsCert, "tls-cert", os.Getenv("GPUCACHE_CLIENT_CERT"), "client certificate `file` for mTLS (env GPUCACHE_CLIENT_CERT)")
	fs.StringVar(&c.tlsKey, "tls-key", os.Getenv("GPUCACHE_CLIENT_KEY"), "client key `file` for mTLS (env GPUCACHE_CLIENT_KEY)")
	fs.StringVar(&c.tlsServerName, "tls-server-name", "", "name to verify in the server certificate (default: the --addr host)")
}

// Addr is --addr.
func (c *ConnFlags) Addr() string { return c.addr }

// Timeout is --timeout, the per-request timeout.
func (c *ConnFlags) Timeout() time.Duration { return c.timeout }

// Credentials returns the bearer secret and TLS config the flags name.
func (c *ConnFlags) Credentials() ([]byte, *tls.Config, error) {
	var secret []byte
	if c.secretFile != "" {
		b, err := os.ReadFile(c.secretFile)
		if err != nil {
			return nil, nil, UsageErr("--secret-file: %v", err)
		}
		if secret = []byte(strings.TrimSpace(string(b))); len(secret) == 0 {
			return nil, nil, UsageErr("--secret-file %s is empty", c.secretFile)
		}
	}
	if c.tlsCA == "" {
		if c.tlsCert != "" || c.tlsKey != "" {
			return nil, nil, UsageErr("--tls-cert and --tls-key need --tls-ca")
		}
		return secret, nil, nil
	}
	tc, err := tlsconf.NewClient(tlsconf.ClientFiles{CAFile: c.tlsCA, CertFile: c.tlsCert, KeyFile: c.tlsKey, ServerName: c.tlsServerName})
	if err != nil {
		return nil, nil, UsageErr("%v", err)
	}
	return secret, tc, nil
}

// EnvOr returns the environment variable name, or def when it is unset
// or empty.
func EnvOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// provisionalTenant is the tenant to check the namespace flags with
// before the session tells the real one.
func (c *ConnFlags) provisionalTenant() string {
	if c.tenant != "" {
		return c.tenant
	}
	return client.DefaultTenant
}

// sessionTenant returns the session tenant: --tenant; without it the
// default tenant, or, with credentials, the tenant the server derives from
// them (one HELLO to --addr or the first --cluster seed).
func (c *ConnFlags) SessionTenant(ctx context.Context) (string, error) {
	if c.tenant != "" || (c.secretFile == "" && c.tlsCert == "") {
		return c.provisionalTenant(), nil
	}
	probe := *c
	if seeds := c.Seeds(); len(seeds) > 0 {
		probe.addr, probe.cluster = seeds[0], ""
	}
	cl, err := probe.dial(ctx)
	if err != nil {
		return "", err
	}
	defer cl.Close()
	return cl.Tenant(), nil
}

// nodeConfig is the client config the common flags give (Addr unset).
// With credentials and no --tenant, the tenant is left to the server.
func (c *ConnFlags) nodeConfig() (client.Config, error) {
	if c.timeout <= 0 {
		return client.Config{}, UsageErr("--timeout must be positive")
	}
	secret, tc, err := c.Credentials()
	if err != nil {
		return client.Config{}, err
	}
	return client.Config{Tenant: c.tenant, Secret: secret, TLS: tc, Conns: 1,
		DialTimeout: c.timeout, RequestTimeout: c.timeout, ClientName: "gpucache-cli"}, nil
}

// dial connects one connection to --addr with the common flags.
func (c *ConnFlags) dial(ctx context.Context) (*client.Client, error) {
	cfg, err := c.nodeConfig()
	if err != nil {
		return nil, err
	}
	cfg.Addr = c.addr
	cl, err := client.Dial(ctx, cfg)
	if err != nil {
		return nil, c.explain(ctx, c.addr, err)
	}
	return cl, nil
}

// NSFlags are the namespace (identity) flags. Every field has a default so
// that put and get work with no flags at all.
type NSFlags struct {
	trustDomain, model, revision, tokenizer, adapter, rope, dtype, quant, layout      string
	tpRank, tpSize, ppRank, ppSize, layerStart, layers, kvHeads, headDim, blockTokens uint
}

// Register defines the flags in fs; --model defaults to defaultModel.
func (n *NSFlags) Register(fs *flag.FlagSet, defaultModel string) {
	fs.StringVar(&n.model, "model", defaultModel, "model id")
	fs.StringVar(&n.revision, "revision", "main", "model config revision")
	fs.StringVar(&n.tokenizer, "tokenizer", "main", "tokenizer revision")
	fs.StringVar(&n.trustDomain, "trust-domain", "local", "trust domain of the producer")
	fs.StringVar(&n.adapter, "adapter", "", "LoRA/adapter id (empty: base model)")
	fs.StringVar(&n.rope, "rope", "default", "position encoding scheme")
	fs.StringVar(&n.dtype, "dtype", "bytes", "KV element type")
	fs.StringVar(&n.quant, "quant", "none", "KV quantization")
	fs.StringVar(&n.layout, "layout", "raw", "tensor layout name")
	fs.UintVar(&n.tpRank, "tp-rank", 0, "tensor-parallel rank")
	fs.UintVar(&n.tpSize, "tp-size", 1, "tensor-parallel size")
	fs.UintVar(&n.ppRank, "pp-rank", 0, "pipeline-parallel rank")
	fs.UintVar(&n.ppSize, "pp-size", 1, "pipeline-parallel size")
	fs.UintVar(&n.layerStart, "layer-start", 0, "first layer held")
	fs.UintVar(&n.layers, "layers", 1, "layers held")
	fs.UintVar(&n.kvHeads, "kv-heads", 1, "KV heads held")
	fs.UintVar(&n.headDim, "head-dim", 1, "head dimension")
	fs.UintVar(&n.blockTokens, "block-tokens", 4096, "tokens per block")
}

// Namespace builds and validates the namespace for tenant.
func (n *NSFlags) Namespace(tenant string) (client.Namespace, error) {
	u32 := func(v uint) uint32 { return uint32(min(v, 1<<32-1)) }
	ns := client.Namespace{
		Tenant: tenant, TrustDomain: n.trustDomain, ModelID: n.model, ConfigRevision: n.revision,
		TokenizerRevision: n.tokenizer, Adapter: n.adapter, RoPE: n.rope, DType: n.dtype, Quantization: n.quant,
		Layout: client.Layout{Format: n.layout, TPRank: u32(n.tpRank), TPSize: u32(n.tpSize), PPRank: u32(n.ppRank),
			PPSize: u32(n.ppSize), LayerStart: u32(n.layerStart), LayerCount: u32(n.layers), KVHeads: u32(n.kvHeads),
			HeadDim: u32(n.headDim), BlockTokens: u32(n.blockTokens)},
	}
	if err := ns.Validate(); err != nil {
		return ns, UsageErr("namespace: %v", err)
	}
	return ns, nil
}

// keyFlags select a block's tokens.
type keyFlags struct {
	text   string
	tokens string
}

func (k *keyFlags) Register(fs *flag.FlagSet) {
	fs.StringVar(&k.text, "key-text", "", "block tokens: one per byte of this `text`")
	fs.StringVar(&k.tokens, "tokens", "", "block tokens: comma-separated token `ids`")
}

// parseTokens returns the tokens the flags select.
func (k *keyFlags) parseTokens() ([]uint32, error) {
	switch {
	case k.text != "" && k.tokens != "":
		return nil, UsageErr("give --key-text or --tokens, not both")
	case k.text != "":
		toks := make([]uint32, len(k.text))
		for i := 0; i < len(k.text); i++ {
			toks[i] = uint32(k.text[i])
		}
		return toks, nil
	case k.tokens != "":
		var toks []uint32
		for _, f := range strings.Split(k.tokens, ",") {
			v, err := strconv.ParseUint(strings.TrimSpace(f), 10, 32)
			if err != nil {
				return nil, UsageErr("--tokens: %q is not a token id", f)
			}
			toks = append(toks, uint32(v))
		}
		return toks, nil
	}
	return nil, UsageErr("give the block's tokens with --key-text TEXT or --tokens 1,2,3")
}

// block returns the key and the token ids of the single block the flags
// select: the first block of its chain (position 0, no parent), holding all
// the tokens.
func (k *keyFlags) block(ns client.Namespace) (client.BlockKey, []uint32, error) {
	toks, err := k.parseTokens()
	if err != nil {
		return client.BlockKey{}, nil, err
	}
	if len(toks) > int(ns.Layout.BlockTokens) {
		return client.BlockKey{}, nil, UsageErr("%d tokens do not fit one block of %d (raise --block-tokens)", len(toks), ns.Layout.BlockTokens)
	}
	keys, err := client.Chain(ns, toks)
	if err != nil {
		return client.BlockKey{}, nil, UsageErr("%v", err)
	}
	return keys[0], toks, nil
}

// blockCmd holds what put, get and delete share.
type blockCmd struct {
	common ConnFlags
	ns     NSFlags
	key    keyFlags
}

func (b *blockCmd) Register(fs *flag.FlagSet) {
	b.common.Register(fs)
	b.ns.Register(fs, "cli")
	b.key.Register(fs)
}

// resolve returns the namespace of tenant, the block key and the block's
// token ids. Called before connecting (with provisionalTenant) it reports
// usage errors early; after, with the session tenant, it gives the key.
func (b *blockCmd) resolve(tenant string) (client.Namespace, client.BlockKey, []uint32, error) {
	ns, err := b.ns.Namespace(tenant)
	if err != nil {
		return ns, client.BlockKey{}, nil, err
	}
	key, n, err := b.key.block(ns)
	return ns, key, n, err
}

// noArgs rejects positional arguments.
func noArgs(pos []string) error {
	if len(pos) > 0 {
		return UsageErr("unexpected argument %q", pos[0])
	}
	return nil
}

func fmtBytes(n int) string { return fmt.Sprintf("%d bytes", n) }

// ParseNoArgs parses flags for a command that takes no positional
// arguments.
func ParseNoArgs(fs *flag.FlagSet, args []string) error {
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	return noArgs(pos)
}
