package sink

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/gpucache/gpucache/internal/cold"
)

// JobID names a job inside one Sink. Enqueue assigns them in increasing
// order, so a larger ID is a later publication.
type JobID uint64

// ObjectKind says how an object is written. The zero value is invalid, so a
// job built without kinds is rejected rather than written with a guessed mode.
type ObjectKind uint8

const (
	// KindPack is a pack object: content-addressed (its key contains the hex
	// SHA-256 of its body) and written with IfNoneMatch.
	KindPack ObjectKind = iota + 1
	// KindManifest is a manifest: content-addressed and written with
	// IfNoneMatch, after every pack object of its job.
	KindManifest
	// KindPointer is a mutable name (what a reader looks up) whose body
	// names a manifest. Written last, unconditionally, and never backwards:
	// see "Pointer order" in the package doc.
	KindPointer
)

func (k ObjectKind) String() string {
	switch k {
	case KindPack:
		return "pack"
	case KindManifest:
		return "manifest"
	case KindPointer:
		return "pointer"
	}
	return fmt.Sprintf("ObjectKind(%d)", uint8(k))
}

// contentAddressed reports whether the key is derived from the body, so an
// existing object under the key already holds these bytes.
func (k ObjectKind) contentAddressed() bool { return k == KindPack || k == KindManifest }

// Object is one object to write.
type Object struct {
	Kind ObjectKind
	// Key is the store key. For packs and manifests it must contain the
	// lower-case hex SHA-256 of Body.
	Key string
	// Body is the whole object. The sink never modifies it; the caller must
	// not either, once the job is enqueued (a body changed after admission
	// is caught before its write and fails the job with cold.ErrCorrupt).
	Body []byte
	// Digest is the SHA-256 of Body.
	Digest [32]byte
}

// Job publishes one pack: its objects are written in order (pack objects
// first, then manifests, then pointers), so a visible manifest only ever
// references complete objects.
type Job struct {
	// ID is set by Enqueue on the sink's own copy of the job. Its value on
	// the way in is ignored, so a job taken back with TakeFailed may be
	// enqueued again; it is then a new, later publication.
	ID JobID
	// Namespace groups jobs for fairness: a drain takes jobs round-robin
	// across namespaces, FIFO within one.
	Namespace string
	Objects   []Object
	// Bytes is the sum of len(Body) over Objects: the job's byte credit.
	Bytes int64
}

// Verifier is an admission check run before ANY store write. The daemon
// passes pack-aware verification (manifest/object pairing, ranges,
// identities, checksums). It must not modify the job.
type Verifier func(*Job) error

// MaxJobObjects bounds the objects of one job, so a job's metadata is
// bounded even when its bodies are tiny.
const MaxJobObjects = 1024

// MaxNamespaceLen bounds Job.Namespace.
const MaxNamespaceLen = 256

// cloneJob copies the job header and object list (not the bodies), so later
// changes to the caller's Job or Objects slice cannot reach the queue.
func cloneJob(j *Job) *Job {
	c := *j
	c.ID = 0
	c.Objects = slices.Clone(j.Objects)
	return &c
}

// checkJob is the sink's structural admission check. It hashes every body,
// so it runs without the sink's lock.
func checkJob(j *Job, maxBytes int64) error {
	if j == nil {
		return fmt.Errorf("%w: nil job", ErrInvalidJob)
	}
	if len(j.Namespace) > MaxNamespaceLen || !utf8.ValidString(j.Namespace) {
		return fmt.Errorf("%w: namespace is not valid UTF-8 of at most %d bytes", ErrInvalidJob, MaxNamespaceLen)
	}
	n := len(j.Objects)
	if n == 0 {
		return fmt.Errorf("%w: no objects", ErrInvalidJob)
	}
	if n > MaxJobObjects {
		return fmt.Errorf("%w: %d objects, at most %d", ErrInvalidJob, n, MaxJobObjects)
	}
	if j.Bytes < 0 || j.Bytes > maxBytes {
		return fmt.Errorf("%w: Bytes %d outside [0, MaxBytes %d]", ErrInvalidJob, j.Bytes, maxBytes)
	}
	seen := make(map[string]struct{}, n)
	var total int64
	var counts [KindPointer + 1]int
	prev := KindPack
	for i := range j.Objects {
		o := &j.Objects[i]
		if err := checkObject(i, o, prev, seen); err != nil {
			return err
		}
		prev = o.Kind
		counts[o.Kind]++
		total += int64(len(o.Body))
	}
	if counts[KindPack] == 0 || counts[KindManifest] == 0 {
		return fmt.Errorf("%w: a job needs at least one pack and one manifest (has %d, %d)", ErrInvalidJob, counts[KindPack], counts[KindManifest])
	}
	if total != j.Bytes {
		return fmt.Errorf("%w: Bytes %d, bodies sum to %d", ErrInvalidJob, j.Bytes, total)
	}
	return nil
}

// checkObject checks object i of a job: its kind set and in order after
// prev, its key valid and not in seen (which it records), its digest that
// of its body, and a content-addressed key naming that digest.
func checkObject(i int, o *Object, prev ObjectKind, seen map[string]struct{}) error {
	if o.Kind < KindPack || o.Kind > KindPointer {
		return fmt.Errorf("%w: object %d: kind %v not set", ErrInvalidJob, i, o.Kind)
	}
	if o.Kind < prev {
		return fmt.Errorf("%w: object %d: %v after %v; order is pack, manifest, pointer", ErrInvalidJob, i, o.Kind, prev)
	}
	if err := cold.ValidKey(o.Key); err != nil {
		return fmt.Errorf("%w: object %d: %w", ErrInvalidJob, i, err)
	}
	if _, dup := seen[o.Key]; dup {
		return fmt.Errorf("%w: object %d: key %q appears twice", ErrInvalidJob, i, o.Key)
	}
	seen[o.Key] = struct{}{}
	sum := sha256.Sum256(o.Body)
	if sum != o.Digest {
		return fmt.Errorf("%w: object %d (%q): digest does not match body", ErrInvalidJob, i, o.Key)
	}
	if o.Kind.contentAddressed() && !strings.Contains(o.Key, hex.EncodeToString(sum[:])) {
		return fmt.Errorf("%w: object %d (%q): %v key does not contain the body's SHA-256", ErrInvalidJob, i, o.Key, o.Kind)
	}
	return nil
}
