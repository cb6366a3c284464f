package identity

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"unicode/utf8"
)

// Sentinel errors. Callers test them with errors.Is.
var (
	// ErrInvalid reports an identity with an empty required field or an
	// out-of-range value. The wrapped message names the field.
	ErrInvalid = errors.New("gpucache/identity: invalid identity")
	// ErrMalformed reports bytes that are not a canonical encoding.
	ErrMalformed = errors.New("gpucache/identity: malformed canonical encoding")
)

// Limits on the canonical encoding.
const (
	// MaxStringLen bounds every string field, in bytes.
	MaxStringLen = 256
	// MaxCanonicalLen bounds a whole namespace encoding, in bytes.
	MaxCanonicalLen = 4096
	// MaxBlockTokens bounds Layout.BlockTokens and len(Tokens) of one block.
	MaxBlockTokens = 1 << 16
	// MaxOpaqueLen bounds CacheIdentity.Opaque, the name of an opaque-key
	// block, in bytes.
	MaxOpaqueLen = 1024
)

// BlockKey names one block of KV cache. It is a SHA-256 that chains over the
// namespace digest, the parent key and the block's tokens, so equal keys imply
// equal identities (up to SHA-256 collisions).
type BlockKey [32]byte

// NamespaceDigest is SHA-256 over the canonical encoding of a Namespace.
type NamespaceDigest [32]byte

// String returns the key in lower-case hex.
func (k BlockKey) String() string { return hex.EncodeToString(k[:]) }

// String returns the digest in lower-case hex.
func (d NamespaceDigest) String() string { return hex.EncodeToString(d[:]) }

// IsZero reports whether k is the all-zero key, which stands for "no parent".
func (k BlockKey) IsZero() bool { return k == BlockKey{} }

// Layout describes how the KV tensors of one block are laid out and sharded.
// Two engines that differ in any of these fields cannot share bytes.
type Layout struct {
	Format      string // tensor layout name, e.g. "vllm-nhd" (required)
	TPRank      uint32 // tensor-parallel rank, < TPSize
	TPSize      uint32 // tensor-parallel world size, >= 1
	PPRank      uint32 // pipeline-parallel rank, < PPSize
	PPSize      uint32 // pipeline-parallel world size, >= 1
	LayerStart  uint32 // first layer held in the block
	LayerCount  uint32 // number of layers held, >= 1
	KVHeads     uint32 // KV heads held by this shard, >= 1
	HeadDim     uint32 // head dimension, >= 1
	BlockTokens uint32 // tokens per full block, 1..MaxBlockTokens
}

// Namespace is every part of a CacheIdentity that is shared by all blocks of
// one token chain: who owns the bytes and how they were computed.
type Namespace struct {
	Tenant            string // owning tenant (required)
	TrustDomain       string // trust domain of the producer (required)
	ModelID           string // model id (required)
	ConfigRevision    string // model config revision (required)
	TokenizerRevision string // tokenizer revision (required)
	Adapter           string // LoRA/adapter id; "" means the base model
	RoPE              string // position encoding scheme and parameters (required)
	DType             string // KV element type, e.g. "fp16" (required)
	Quantization      string // KV quantization, "none" when unquantized (required)
	Layout            Layout
}

// CacheIdentity is the full identity of one block: its namespace plus the
// prefix it extends (parent chain hash and its own tokens), its position and
// its valid length.
type CacheIdentity struct {
	Namespace
	Parent      BlockKey // key of the previous block; zero for the first block
	Position    uint64   // token offset of the block's first token
	Tokens      []uint32 // the block's token ids, 1..BlockTokens of them
	ValidLength uint32   // tokens whose KV the payload holds, 1..len(Tokens)
	// Opaque, when not empty, makes this an opaque-key block: a block a
	// client names by a key of its own (an LMCache chunk key over RESP)
	// rather than by a token chain. Its identity is the namespace and
	// these bytes (1..MaxOpaqueLen); Parent, Position, Tokens and
	// ValidLength must then be zero. Its key is OpaqueKey, whose domain
	// separation keeps it apart from every token-chain key.
	Opaque []byte
}

// Field tags of the canonical encoding, in encoding order.
const (
	tagTenant byte = 1 + iota
	tagTrustDomain
	tagModelID
	tagConfigRevision
	tagTokenizerRevision
	tagAdapter
	tagRoPE
	tagDType
	tagQuantization
	tagLayoutFormat
	tagTP
	tagPP
	tagLayers
	tagHeads
	tagBlockTokens
	tagParent
	tagPosition
	tagValidLength
	tagTokens
	// tagOpaque is the one block field of an opaque-key identity.
	tagOpaque
	numNamespaceTags = int(tagBlockTokens)
)

var (
	nsMagic   = [4]byte{'G', 'C', 'N', 'S'}
	idMagic   = [4]byte{'G', 'C', 'I', 'D'}
	keyDomain = []byte("gpucache/blockkey/v1\x00")
	// opaqueDomain separates opaque-key blocks from token-chain blocks.
	opaqueDomain = []byte("gpucache/opaquekey/v1\x00")
	encVersion   = byte(1)
)

// strField describes one string field of a Namespace, in encoding order;
// Namespace.strFields gives the fields' addresses in the same order.
type strField struct {
	tag      byte
	name     string
	optional bool
}

// numStrFields is the number of string fields of a Namespace.
const numStrFields = 10

var strFieldInfo = [numStrFields]strField{
	{tagTenant, "tenant", false},
	{tagTrustDomain, "trust_domain", false},
	{tagModelID, "model_id", false},
	{tagConfigRevision, "config_revision", false},
	{tagTokenizerRevision, "tokenizer_revision", false},
	{tagAdapter, "adapter", true},
	{tagRoPE, "rope", false},
	{tagDType, "dtype", false},
	{tagQuantization, "quantization", false},
	{tagLayoutFormat, "layout.format", false},
}

// strFields returns the addresses of n's string fields in the order of
// strFieldInfo. It returns an array, not a slice, and holds no names, so a
// caller's Namespace does not escape to the heap (Validate runs for every
// block a server stores).
func (n *Namespace) strFields() [numStrFields]*string {
	return [numStrFields]*string{&n.Tenant, &n.TrustDomain, &n.ModelID, &n.ConfigRevision, &n.TokenizerRevision,
		&n.Adapter, &n.RoPE, &n.DType, &n.Quantization, &n.Layout.Format}
}

// Validate reports the first empty required field or out-of-range value.
func (n Namespace) Validate() error {
	for i, p := range n.strFields() {
		v, f := *p, &strFieldInfo[i]
		if v == "" && !f.optional {
			return fmt.Errorf("%w: field %s is empty", ErrInvalid, f.name)
		}
		if len(v) > MaxStringLen {
			return fmt.Errorf("%w: field %s is %d bytes, limit %d", ErrInvalid, f.name, len(v), MaxStringLen)
		}
		if !utf8.ValidString(v) {
			return fmt.Errorf("%w: field %s is not valid UTF-8", ErrInvalid, f.name)
		}
	}
	l := n.Layout
	switch {
	case l.TPSize == 0:
		return fmt.Errorf("%w: field layout.tp_size is 0", ErrInvalid)
	case l.TPRank >= l.TPSize:
		return fmt.Errorf("%w: layout.tp_rank %d >= tp_size %d", ErrInvalid, l.TPRank, l.TPSize)
	case l.PPSize == 0:
		return fmt.Errorf("%w: field layout.pp_size is 0", ErrInvalid)
	case l.PPRank >= l.PPSize:
		return fmt.Errorf("%w: layout.pp_rank %d >= pp_size %d", ErrInvalid, l.PPRank, l.PPSize)
	case l.LayerCount == 0:
		return fmt.Errorf("%w: field layout.layer_count is 0", ErrInvalid)
	case uint64(l.LayerStart)+uint64(l.LayerCount) > math.MaxUint32:
		return fmt.Errorf("%w: layout.layer_start %d + layer_count %d overflows u32", ErrInvalid, l.LayerStart, l.LayerCount)
	case l.KVHeads == 0:
		return fmt.Errorf("%w: field layout.kv_heads is 0", ErrInvalid)
	case l.HeadDim == 0:
		return fmt.Errorf("%w: field layout.head_dim is 0", ErrInvalid)
	case l.BlockTokens == 0 || l.BlockTokens > MaxBlockTokens:
		return fmt.Errorf("%w: layout.block_tokens %d not in 1..%d", ErrInvalid, l.BlockTokens, MaxBlockTokens)
	}
	return nil
}

// appendField appends tag, u32 length and value.
func appendField(b []byte, tag byte, val []byte) []byte {
	b = append(b, tag)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(val)))
	return append(b, val...)
}

func appendU32s(b []byte, tag byte, vals ...uint32) []byte {
	b = append(b, tag)
	b = binary.LittleEndian.AppendUint32(b, uint32(4*len(vals)))
	for _, v := range vals {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	return b
}

func (n *Namespace) appendFields(b []byte) []byte {
	for i, p := range n.strFields() {
		b = appendField(b, strFieldInfo[i].tag, []byte(*p))
	}
	l := n.Layout
	b = appendU32s(b, tagTP, l.TPRank, l.TPSize)
	b = appendU32s(b, tagPP, l.PPRank, l.PPSize)
	b = appendU32s(b, tagLayers, l.LayerStart, l.LayerCount)
	b = appendU32s(b, tagHeads, l.KVHeads, l.HeadDim)
	b = appendU32s(b, tagBlockTokens, l.BlockTokens)
	return b
}

// AppendCanonical appends the canonical encoding of a valid namespace to b.
func (n Namespace) AppendCanonical(b []byte) ([]byte, error) {
	if err := n.Validate(); err != nil {
		return b, err
	}
	b = append(b, nsMagic[:]...)
	b = append(b, encVersion, byte(numNamespaceTags))
	return n.appendFields(b), nil
}

// Canonical returns the canonical encoding of a valid namespace.
func (n Namespace) Canonical() ([]byte, error) { return n.AppendCanonical(make([]byte, 0, 256)) }

// Digest returns SHA-256 over the canonical encoding.
func (n Namespace) Digest() (NamespaceDigest, error) {
	c, err := n.Canonical()
	if err != nil {
		return NamespaceDigest{}, err
	}
	return NamespaceDigest(sha256.Sum256(c)), nil
}

// DecodeNamespace parses a canonical namespace encoding. It accepts only the
// exact bytes AppendCanonical produces: fields in order, no unknown tags, no
// trailing bytes, and a valid namespace.
func DecodeNamespace(b []byte) (Namespace, error) {
	var n Namespace
	if len(b) > MaxCanonicalLen {
		return n, fmt.Errorf("%w: %d bytes, limit %d", ErrMalformed, len(b), MaxCanonicalLen)
	}
	if len(b) < 6 || [4]byte(b[:4]) != nsMagic {
		return n, fmt.Errorf("%w: bad magic", ErrMalformed)
	}
	if b[4] != encVersion {
		return n, fmt.Errorf("%w: unknown encoding version %d", ErrMalformed, b[4])
	}
	if int(b[5]) != numNamespaceTags {
		return n, fmt.Errorf("%w: field count %d, want %d", ErrMalformed, b[5], numNamespaceTags)
	}
	d := decoder{b: b[6:]}
	for i, p := range n.strFields() {
		f := &strFieldInfo[i]
		v, err := d.field(f.tag, -1)
		if err != nil {
			return n, err
		}
		if len(v) > MaxStringLen {
			return n, fmt.Errorf("%w: field %s too long", ErrMalformed, f.name)
		}
		*p = string(v)
	}
	l := &n.Layout
	pairs := []struct {
		tag  byte
		a, b *uint32
	}{
		{tagTP, &l.TPRank, &l.TPSize},
		{tagPP, &l.PPRank, &l.PPSize},
		{tagLayers, &l.LayerStart, &l.LayerCount},
		{tagHeads, &l.KVHeads, &l.HeadDim},
	}
	for _, p := range pairs {
		v, err := d.field(p.tag, 8)
		if err != nil {
			return n, err
		}
		*p.a = binary.LittleEndian.Uint32(v)
		*p.b = binary.LittleEndian.Uint32(v[4:])
	}
	v, err := d.field(tagBlockTokens, 4)
	if err != nil {
		return n, err
	}
	l.BlockTokens = binary.LittleEndian.Uint32(v)
	if len(d.b) != 0 {
		return n, fmt.Errorf("%w: %d trailing bytes", ErrMalformed, len(d.b))
	}
	if err := n.Validate(); err != nil {
		return n, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return n, nil
}

type decoder struct{ b []byte }

// field reads one tag-length-value field. want is the exact value length, or
// -1 for any length.
func (d *decoder) field(tag byte, want int) ([]byte, error) {
	if len(d.b) < 5 {
		return nil, fmt.Errorf("%w: truncated at tag %d", ErrMalformed, tag)
	}
	if d.b[0] != tag {
		return nil, fmt.Errorf("%w: tag %d, want %d", ErrMalformed, d.b[0], tag)
	}
	n := binary.LittleEndian.Uint32(d.b[1:5])
	if uint64(n) > uint64(len(d.b)-5) {
		return nil, fmt.Errorf("%w: field %d length %d past end", ErrMalformed, tag, n)
	}
	if want >= 0 && int(n) != want {
		return nil, fmt.Errorf("%w: field %d length %d, want %d", ErrMalformed, tag, n, want)
	}
	v := d.b[5 : 5+n]
	d.b = d.b[5+n:]
	return v, nil
}

// Validate checks the namespace and the block fields.
func (c CacheIdentity) Validate() error {
	if err := c.Namespace.Validate(); err != nil {
		return err
	}
	if len(c.Opaque) > 0 {
		switch {
		case len(c.Opaque) > MaxOpaqueLen:
			return fmt.Errorf("%w: opaque name is %d bytes, limit %d", ErrInvalid, len(c.Opaque), MaxOpaqueLen)
		case len(c.Tokens) != 0 || c.ValidLength != 0 || c.Position != 0 || !c.Parent.IsZero():
			return fmt.Errorf("%w: an opaque-key identity has no parent, position, tokens or valid_length", ErrInvalid)
		}
		return nil
	}
	if len(c.Tokens) == 0 {
		return fmt.Errorf("%w: field tokens is empty", ErrInvalid)
	}
	if len(c.Tokens) > int(c.Layout.BlockTokens) {
		return fmt.Errorf("%w: %d tokens exceed block_tokens %d", ErrInvalid, len(c.Tokens), c.Layout.BlockTokens)
	}
	if c.ValidLength == 0 || int(c.ValidLength) > len(c.Tokens) {
		return fmt.Errorf("%w: valid_length %d not in 1..%d", ErrInvalid, c.ValidLength, len(c.Tokens))
	}
	if c.Position%uint64(c.Layout.BlockTokens) != 0 {
		return fmt.Errorf("%w: position %d is not a multiple of block_tokens %d", ErrInvalid, c.Position, c.Layout.BlockTokens)
	}
	if c.Parent.IsZero() != (c.Position == 0) {
		return fmt.Errorf("%w: parent must be zero exactly when position is 0", ErrInvalid)
	}
	return nil
}

// Canonical returns the canonical encoding of the full block identity: the
// namespace fields followed by parent, position, valid length and tokens.
func (c CacheIdentity) Canonical() ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if len(c.Opaque) > 0 {
		b := make([]byte, 0, 256+len(c.Opaque))
		b = append(b, idMagic[:]...)
		b = append(b, encVersion, byte(numNamespaceTags+1))
		b = c.Namespace.appendFields(b)
		return appendField(b, tagOpaque, c.Opaque), nil
	}
	b := make([]byte, 0, 256+4*len(c.Tokens))
	b = append(b, idMagic[:]...)
	b = append(b, encVersion, byte(tagTokens))
	b = c.Namespace.appendFields(b)
	b = appendField(b, tagParent, c.Parent[:])
	b = append(b, tagPosition)
	b = binary.LittleEndian.AppendUint32(b, 8)
	b = binary.LittleEndian.AppendUint64(b, c.Position)
	b = appendU32s(b, tagValidLength, c.ValidLength)
	b = appendU32s(b, tagTokens, c.Tokens...)
	return b, nil
}

// Key returns the block key of a valid identity.
func (c CacheIdentity) Key() (BlockKey, error) {
	if err := c.Validate(); err != nil {
		return BlockKey{}, err
	}
	d, err := c.Namespace.Digest()
	if err != nil {
		return BlockKey{}, err
	}
	return c.KeyIn(d), nil
}

// KeyIn returns the block key of the identity given its namespace digest d
// (the caller computed and trusts it): OpaqueKey for an opaque-key
// identity, KeyFor for a token-chain one. Like KeyFor, it never fails.
func (c CacheIdentity) KeyIn(d NamespaceDigest) BlockKey {
	if len(c.Opaque) > 0 {
		return OpaqueKey(d, c.Opaque)
	}
	return KeyFor(d, c.Parent, c.Tokens, c.ValidLength)
}

// OpaqueKey computes the key of an opaque-key block:
//
//	SHA-256("gpucache/opaquekey/v1\x00" || ns digest || u32le(len(name)) || name)
//
// The domain string differs from KeyFor's from its tenth byte on, so no
// opaque-key block can share a key with a token-chain block (up to SHA-256
// collisions). The caller bounds name (MaxOpaqueLen); OpaqueKey never fails.
func OpaqueKey(ns NamespaceDigest, name []byte) BlockKey {
	h := sha256.New()
	h.Write(opaqueDomain)
	h.Write(ns[:])
	var n [4]byte
	binary.LittleEndian.PutUint32(n[:], uint32(len(name)))
	h.Write(n[:])
	h.Write(name)
	var k BlockKey
	h.Sum(k[:0])
	return k
}

// KeyFor computes a block key:
//
//	SHA-256("gpucache/blockkey/v1\x00" || ns digest || parent key ||
//	        u32le(valid length) || u32le(len(tokens)) || u32le(token)...)
//
// The caller validates its inputs; KeyFor never fails.
func KeyFor(ns NamespaceDigest, parent BlockKey, tokens []uint32, validLength uint32) BlockKey {
	h := sha256.New()
	h.Write(keyDomain)
	h.Write(ns[:])
	h.Write(parent[:])
	var buf [256]byte
	b := binary.LittleEndian.AppendUint32(buf[:0], validLength)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(tokens)))
	for _, t := range tokens {
		if len(b)+4 > len(buf) {
			h.Write(b)
			b = buf[:0]
		}
		b = binary.LittleEndian.AppendUint32(b, t)
	}
	h.Write(b)
	var k BlockKey
	h.Sum(k[:0])
	return k
}

// Chain splits tokens into blocks of ns.Layout.BlockTokens (the last block may
// be shorter) and returns the key of each block, each chained to the one
// before it.
func Chain(ns Namespace, tokens []uint32) ([]BlockKey, error) {
	d, err := ns.Digest()
	if err != nil {
		return nil, err
	}
	if len(tokens) == 0 {
		return nil, fmt.Errorf("%w: no tokens", ErrInvalid)
	}
	bt := int(ns.Layout.BlockTokens)
	keys := make([]BlockKey, 0, (len(tokens)+bt-1)/bt)
	var parent BlockKey
	for off := 0; off < len(tokens); off += bt {
		blk := tokens[off:min(off+bt, len(tokens))]
		k := KeyFor(d, parent, blk, uint32(len(blk)))
		keys = append(keys, k)
		parent = k
	}
	return keys, nil
}

// Identities splits tokens into blocks like Chain and returns each block's
// full identity (namespace, parent, position, tokens, valid length); the
// key of identity i is Chain's key i.
func Identities(ns Namespace, tokens []uint32) ([]CacheIdentity, error) {
	keys, err := Chain(ns, tokens)
	if err != nil {
		return nil, err
	}
	bt := int(ns.Layout.BlockTokens)
	ids := make([]CacheIdentity, len(keys))
	var parent BlockKey
	for i := range ids {
		off := i * bt
		blk := tokens[off:min(off+bt, len(tokens))]
		ids[i] = CacheIdentity{Namespace: ns, Parent: parent, Position: uint64(off), Tokens: blk, ValidLength: uint32(len(blk))}
		parent = keys[i]
	}
	return ids, nil
}
