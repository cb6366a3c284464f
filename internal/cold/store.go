package cold

// This file fixes the Store interface every backend implements and every
// other cold-tier package codes against. Keep the signatures stable.

import (
	"context"
	"errors"
	"time"
)

// Sentinel errors. Backends wrap them with %w and context.
var (
	// ErrNotFound: the object does not exist.
	ErrNotFound = errors.New("gpucache/cold: object not found")
	// ErrExists: a conditional Put (IfNoneMatch) found the key taken.
	ErrExists = errors.New("gpucache/cold: object exists")
	// ErrUnavailable: the store could not be reached or answered with a
	// server error; the operation may be retried.
	ErrUnavailable = errors.New("gpucache/cold: store unavailable")
	// ErrRange: a RangeGet asked for bytes outside the object.
	ErrRange = errors.New("gpucache/cold: range outside object")
	// ErrInvalidKey: the key is empty, too long, or has characters a
	// backend cannot store safely ("..", a leading "/", control bytes).
	ErrInvalidKey = errors.New("gpucache/cold: invalid object key")
	// ErrCorrupt: stored bytes failed a checksum or format check. A distinct
	// kind, so callers can count and alert on it.
	ErrCorrupt = errors.New("gpucache/cold: corrupt object")
)

// MaxKeyLen bounds object keys.
const MaxKeyLen = 1024

// ObjectInfo describes a stored object.
type ObjectInfo struct {
	Key      string
	Size     int64
	Modified time.Time
}

// PutOptions modify a Put.
type PutOptions struct {
	// IfNoneMatch makes the Put conditional: it fails with ErrExists if the
	// key already exists. Backends that cannot do this atomically emulate it
	// with Head, and say so in their doc.
	IfNoneMatch bool
}

// Store is an object store: the cold tier's only dependency on storage.
// Implementations: mem (tests), fs (a local directory, the embedded
// default), s3 (any S3-compatible server). All methods are safe for
// concurrent use and honour ctx.
type Store interface {
	// Put writes body as the whole object key. A reader never sees a
	// partial object.
	Put(ctx context.Context, key string, body []byte, opts PutOptions) error
	// Head returns the object's size, or ErrNotFound.
	Head(ctx context.Context, key string) (ObjectInfo, error)
	// RangeGet reads exactly len(dst) bytes at offset off into dst. A range
	// past the end is ErrRange; a missing object ErrNotFound.
	RangeGet(ctx context.Context, key string, off int64, dst []byte) error
	// Delete removes key. Deleting a missing key is not an error.
	Delete(ctx context.Context, key string) error
	// List calls fn for every object whose key starts with prefix, in
	// lexical key order, until fn returns an error (which List returns).
	List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error
}
