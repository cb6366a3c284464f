package config

import (
	"fmt"

	"github.com/gpucache/gpucache/api/identity"
)

// The RESP2 endpoint (docs/RESP.md; ADR 0016).
//
// resp_listen turns on a listener that speaks the Redis protocol subset
// LMCache's remote tiers use. It shares the data listener's TLS settings,
// max_conns, max_unauth_per_addr, hello_timeout (the time to AUTH),
// idle_timeout, read_timeout and write_timeout, and the loopback rule:
// without tenants it must be a loopback address.
//
// RESP carries no identity, so each tenant's profile (tenants[].resp, or
// resp_profile in open mode, whose tenant is "default") names the
// namespace of everything the tenant stores over RESP and the values it
// accepts.

// respFields lists the RESP settings' flags.
func (c *Config) respFields() []field {
	return []field{
		{"resp_listen", `RESP2 (Redis protocol) address for LMCache, e.g. 127.0.0.1:6380 ("off" disables)`, (*strVal)(&c.RESPListen)},
	}
}

// RESPProfileConfig is a tenant's RESP profile (YAML only).
type RESPProfileConfig struct {
	// Model is the model id, as LMCache names it in its keys (e.g.
	// meta-llama/Llama-3.1-8B). Required.
	Model string `yaml:"model"`
	// ConfigRevision and TokenizerRevision identify the model's config
	// and tokenizer. Required.
	ConfigRevision    string `yaml:"config_revision"`
	TokenizerRevision string `yaml:"tokenizer_revision"`
	// DType is the KV element type (e.g. bfloat16). Required.
	DType string `yaml:"dtype"`
	// Quantization of the KV cache. Default "none".
	Quantization string `yaml:"quantization"`
	// TrustDomain of the producers. Default "default".
	TrustDomain string `yaml:"trust_domain"`
	// Adapter is a LoRA/adapter id; "" is the base model.
	Adapter string `yaml:"adapter"`
	// RoPE names the position encoding. Default "default".
	RoPE string `yaml:"rope"`
	// Layout of the chunks. Format defaults to "lmcache"; sizes and counts
	// default to 1, block_tokens to 256 (LMCache's chunk_size).
	LayoutFormat string `yaml:"layout_format"`
	TPRank       uint32 `yaml:"tp_rank"`
	TPSize       uint32 `yaml:"tp_size"`
	PPRank       uint32 `yaml:"pp_rank"`
	PPSize       uint32 `yaml:"pp_size"`
	LayerStart   uint32 `yaml:"layer_start"`
	LayerCount   uint32 `yaml:"layer_count"`
	KVHeads      uint32 `yaml:"kv_heads"`
	HeadDim      uint32 `yaml:"head_dim"`
	BlockTokens  uint32 `yaml:"block_tokens"`
	// ChunkBytes is the length every value must have, unless
	// VariableLength. In-process "...metadata" values are exempt.
	ChunkBytes ByteSize `yaml:"chunk_bytes"`
	// VariableLength accepts values of any length up to hot_max_class
	// (in-process mode stores a partial last chunk). Default false.
	VariableLength bool `yaml:"variable_length"`
	// KeyFormat is "lmcache" (default: keys must parse as LMCache keys
	// and name Model) or "any" (opaque keys, e.g. redis-benchmark's).
	KeyFormat string `yaml:"key_format"`
}

// Namespace returns the profile's namespace for tenant, defaults applied.
func (p RESPProfileConfig) Namespace(tenant string) identity.Namespace {
	or := func(v, d string) string {
		if v == "" {
			return d
		}
		return v
	}
	one := func(v uint32) uint32 { return max(v, 1) }
	bt := p.BlockTokens
	if bt == 0 {
		bt = 256
	}
	return identity.Namespace{
		Tenant: tenant, TrustDomain: or(p.TrustDomain, "default"), ModelID: p.Model,
		ConfigRevision: p.ConfigRevision, TokenizerRevision: p.TokenizerRevision, Adapter: p.Adapter,
		RoPE: or(p.RoPE, "default"), DType: p.DType, Quantization: or(p.Quantization, "none"),
		Layout: identity.Layout{Format: or(p.LayoutFormat, "lmcache"), TPRank: p.TPRank, TPSize: one(p.TPSize),
			PPRank: p.PPRank, PPSize: one(p.PPSize), LayerStart: p.LayerStart, LayerCount: one(p.LayerCount),
			KVHeads: one(p.KVHeads), HeadDim: one(p.HeadDim), BlockTokens: bt},
	}
}

// validate checks the profile of tenant against hot_max_class.
func (p RESPProfileConfig) validate(tenant string, maxClass ByteSize) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: RESP profile of tenant %q: "+format, append([]any{ErrInvalid, tenant}, args...)...)
	}
	if p.Model == "" || p.ConfigRevision == "" || p.TokenizerRevision == "" || p.DType == "" {
		return bad("model, config_revision, tokenizer_revision and dtype are required")
	}
	if err := p.Namespace(tenant).Validate(); err != nil {
		return bad("%v", err)
	}
	switch p.KeyFormat {
	case "", "lmcache", "any":
	default:
		return bad("key_format %q: want lmcache or any", p.KeyFormat)
	}
	if !p.VariableLength && (p.ChunkBytes <= 0 || p.ChunkBytes > maxClass) {
		return bad("chunk_bytes %s must be 1..hot_max_class (%s), or set variable_length: true", p.ChunkBytes, maxClass)
	}
	return nil
}

// RESPEnabled reports whether the RESP endpoint is on.
func (c Config) RESPEnabled() bool { return c.RESPListen != "" && c.RESPListen != "off" }

// RESPProfiles returns every configured profile by tenant: each tenant's
// resp profile, or in open mode resp_profile as the default tenant's.
func (c Config) RESPProfiles() map[string]RESPProfileConfig {
	m := make(map[string]RESPProfileConfig)
	if !c.AuthEnabled() {
		if c.RESPProfile != nil {
			m[OpenModeTenant] = *c.RESPProfile
		}
		return m
	}
	for _, t := range c.Tenants {
		if t.RESP != nil {
			m[t.Name] = *t.RESP
		}
	}
	return m
}

// OpenModeTenant is the tenant of every session in open mode
// (security.DefaultTenant).
const OpenModeTenant = "default"

// validateRESP checks resp_listen and the profiles.
func (c Config) validateRESP() error {
	if !c.RESPEnabled() {
		return nil
	}
	if err := checkAddr("resp_listen", c.RESPListen); err != nil {
		return err
	}
	if !c.AuthEnabled() && !hostIsLoopback(c.RESPListen) {
		return fmt.Errorf("%w: resp_listen %s is not a loopback address and authentication is not configured: "+
			"define tenants with secrets in the config file, or bind to 127.0.0.1", ErrInvalid, c.RESPListen)
	}
	if c.AuthEnabled() && c.RESPProfile != nil {
		return fmt.Errorf("%w: resp_profile is for open mode; with tenants, give each tenant its own resp profile", ErrInvalid)
	}
	ps := c.RESPProfiles()
	if len(ps) == 0 {
		return fmt.Errorf("%w: resp_listen is set but no RESP profile is configured (resp_profile, or tenants[].resp)", ErrInvalid)
	}
	for t, p := range ps {
		if err := p.validate(t, c.HotMaxClass); err != nil {
			return err
		}
	}
	return nil
}
