package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpucache/gpucache/internal/cold"
)

// DefaultGrace is the minimum age of an object Reclaim deletes when
// Options.Grace is zero. It must exceed the longest publication (pack to
// last pointer), retries included.
const DefaultGrace = 24 * time.Hour

// maxUnverified bounds the keys a report lists; counts stay exact.
const maxUnverified = 64

// Options tune Reclaim and Expire.
type Options struct {
	// Grace is the minimum age (now - ObjectInfo.Modified) of an object
	// before Reclaim may delete it. Zero means DefaultGrace; negative is an
	// error.
	Grace time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

func (o Options) norm() (Options, error) {
	if o.Grace < 0 {
		return o, fmt.Errorf("gpucache/cold/lifecycle: negative grace %v", o.Grace)
	}
	if o.Grace == 0 {
		o.Grace = DefaultGrace
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o, nil
}

// young reports whether an object modified at m is within the grace period.
func (o Options) young(m time.Time) bool {
	return o.Now().Sub(m) < o.Grace
}

// delOutcome is the result of one verified delete.
type delOutcome int

const (
	delVerified   delOutcome = iota // Head after Delete said ErrNotFound
	delUnverified                   // Delete returned nil, the object is still there
	delFailed                       // Delete or the verifying Head failed
)

// verifiedDelete deletes key and checks with Head that it is gone. It never
// retries.
func verifiedDelete(ctx context.Context, st cold.Store, key string) (delOutcome, error) {
	if err := st.Delete(ctx, key); err != nil {
		return delFailed, fmt.Errorf("delete %q: %w", key, err)
	}
	_, err := st.Head(ctx, key)
	switch {
	case errors.Is(err, cold.ErrNotFound):
		return delVerified, nil
	case err == nil:
		return delUnverified, nil
	default:
		return delFailed, fmt.Errorf("verify delete %q: %w", key, err)
	}
}

// listAll returns every object under prefix.
func listAll(ctx context.Context, st cold.Store, prefix string) ([]cold.ObjectInfo, error) {
	var out []cold.ObjectInfo
	err := st.List(ctx, prefix, func(oi cold.ObjectInfo) error {
		out = append(out, oi)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("gpucache/cold/lifecycle: list %q: %w", prefix, err)
	}
	return out, nil
}

// readAll reads a whole object of the listed size.
func readAll(ctx context.Context, st cold.Store, key string, size int64) ([]byte, error) {
	buf := make([]byte, size)
	if err := st.RangeGet(ctx, key, 0, buf); err != nil {
		return nil, err
	}
	return buf, nil
}
