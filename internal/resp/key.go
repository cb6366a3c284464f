package resp

import (
	"bytes"
	"errors"
	"fmt"
)

// ErrKey wraps every key parse error.
var ErrKey = errors.New("gpucache/resp: not an LMCache key")

// KeyKind says which LMCache key form a key has.
type KeyKind uint8

const (
	// KeyMP is a multi-process (MP mode) key:
	// model@kv_rank(8 hex)@group(hex)@chunk_hash_hex[@cache_salt], or the
	// older model@kv_rank@chunk_hash_hex[@cache_salt].
	KeyMP KeyKind = 1 + iota
	// KeyInProcess is an in-process key (CacheEngineKey.to_string, or
	// LayerCacheEngineKey's with a layer id) with the suffix the redis
	// connector appends: model@world_size@worker_id@chunk_hash_hex@dtype
	// [@layer_id][@tag%value...] then "kv_bytes" or "metadata".
	KeyInProcess
)

// Suffixes the in-process redis connector appends to its keys.
const (
	SuffixKVBytes  = "kv_bytes"
	SuffixMetadata = "metadata"
)

// Key is a parsed LMCache key. Its byte slices alias the parsed key.
type Key struct {
	Kind  KeyKind
	Model []byte
	// MP fields.
	KVRank   uint32
	Group    uint64 // 0 in the older 3-field form
	HasGroup bool
	Salt     []byte // cache_salt; empty when absent
	// In-process fields.
	WorldSize uint32
	WorkerID  uint32
	DType     []byte
	Layer     int64 // -1 when absent
	Tags      []byte
	// Suffix is SuffixKVBytes or SuffixMetadata for in-process keys.
	Suffix string
	// ChunkHash is the chunk hash's hex digits (a leading '-' allowed in
	// in-process keys, whose hash is a Python int).
	ChunkHash []byte
}

// MaxKeyFields bounds the '@'-separated fields of a key (tags included).
const MaxKeyFields = 64

// ParseKey parses an LMCache key. A key with the "kv_bytes" or "metadata"
// suffix must be an in-process key; any other must be an MP key.
func ParseKey(k []byte) (Key, error) {
	switch {
	case bytes.HasSuffix(k, []byte(SuffixKVBytes)):
		return parseInProcess(k[:len(k)-len(SuffixKVBytes)], SuffixKVBytes)
	case bytes.HasSuffix(k, []byte(SuffixMetadata)):
		return parseInProcess(k[:len(k)-len(SuffixMetadata)], SuffixMetadata)
	}
	return parseMP(k)
}

func split(k []byte) ([][]byte, error) {
	if bytes.Count(k, []byte{'@'}) >= MaxKeyFields {
		return nil, fmt.Errorf("%w: more than %d fields", ErrKey, MaxKeyFields)
	}
	return bytes.Split(k, []byte{'@'}), nil
}

func parseMP(k []byte) (Key, error) {
	f, err := split(k)
	if err != nil {
		return Key{}, err
	}
	if len(f) < 3 || len(f) > 5 {
		return Key{}, fmt.Errorf("%w: an MP key has 3 to 5 '@'-separated fields, this has %d", ErrKey, len(f))
	}
	key := Key{Kind: KeyMP, Model: f[0], Layer: -1}
	if len(key.Model) == 0 {
		return Key{}, fmt.Errorf("%w: empty model", ErrKey)
	}
	if len(f[1]) != 8 || !isHex(f[1]) {
		return Key{}, fmt.Errorf("%w: kv_rank %q is not 8 hex digits", ErrKey, f[1])
	}
	r, _ := hexVal(f[1])
	key.KVRank = uint32(r)
	rest := f[2:]
	// model@rank@group@hash[@salt] or, older, model@rank@hash[@salt]: a
	// 4-field key is the newer form when both its fields are hex.
	if len(rest) == 3 || (len(rest) == 2 && isHex(rest[1])) {
		if len(rest[0]) > 16 || !isHex(rest[0]) {
			return Key{}, fmt.Errorf("%w: group %q is not hex", ErrKey, rest[0])
		}
		key.Group, _ = hexVal(rest[0])
		key.HasGroup = true
		rest = rest[1:]
	}
	if !isHex(rest[0]) {
		return Key{}, fmt.Errorf("%w: chunk hash %q is not hex", ErrKey, rest[0])
	}
	key.ChunkHash = rest[0]
	if len(rest) == 2 {
		if len(rest[1]) == 0 {
			return Key{}, fmt.Errorf("%w: empty cache_salt", ErrKey)
		}
		key.Salt = rest[1]
	}
	return key, nil
}

func parseInProcess(k []byte, suffix string) (Key, error) {
	f, err := split(k)
	if err != nil {
		return Key{}, err
	}
	if len(f) < 5 {
		return Key{}, fmt.Errorf("%w: an in-process key has at least 5 '@'-separated fields, this has %d", ErrKey, len(f))
	}
	key := Key{Kind: KeyInProcess, Model: f[0], Suffix: suffix, Layer: -1}
	if len(key.Model) == 0 {
		return Key{}, fmt.Errorf("%w: empty model", ErrKey)
	}
	ws, ok := Decimal(f[1])
	if !ok || ws == 0 {
		return Key{}, fmt.Errorf("%w: world_size %q is not a positive decimal", ErrKey, f[1])
	}
	w, ok := Decimal(f[2])
	if !ok || w >= ws {
		return Key{}, fmt.Errorf("%w: worker_id %q is not a decimal below world_size", ErrKey, f[2])
	}
	key.WorldSize, key.WorkerID = uint32(ws), uint32(w)
	h := f[3]
	if len(h) > 0 && h[0] == '-' {
		h = h[1:]
	}
	if !isHex(h) {
		return Key{}, fmt.Errorf("%w: chunk hash %q is not hex", ErrKey, f[3])
	}
	key.ChunkHash = f[3]
	if len(f[4]) == 0 {
		return Key{}, fmt.Errorf("%w: empty dtype", ErrKey)
	}
	key.DType = f[4]
	tags := f[5:]
	if len(tags) > 0 {
		if l, ok := Decimal(tags[0]); ok {
			key.Layer = int64(l)
			tags = tags[1:]
		}
	}
	for _, t := range tags {
		if i := bytes.IndexByte(t, '%'); i <= 0 {
			return Key{}, fmt.Errorf("%w: tag %q is not name%%value", ErrKey, t)
		}
	}
	if len(tags) > 0 {
		key.Tags = k[len(k)-len(bytes.Join(tags, []byte{'@'})):]
	}
	return key, nil
}

func isHex(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// hexVal parses at most 16 hex digits.
func hexVal(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 16 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		v = v<<4 | uint64(c)
	}
	return v, true
}

// Decimal parses 1..9 decimal digits (a SELECT index, a key's rank).
func Decimal(b []byte) (uint32, bool) {
	if len(b) == 0 || len(b) > 9 {
		return 0, false
	}
	var v uint32
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + uint32(c-'0')
	}
	return v, true
}
