package sink

import (
	"context"
	"errors"

	"github.com/gpucache/gpucache/internal/cold"
)

// Sentinel errors. Returned errors wrap them with %w and detail; test with
// errors.Is.
var (
	// ErrFull: admitting the job would take pending plus failed jobs over
	// Config.MaxJobs or Config.MaxBytes. It is backpressure: retry after a
	// Drain completes jobs, or after TakeFailed or Cancel releases credit.
	ErrFull = errors.New("gpucache/sink: queue full")
	// ErrInvalidJob: the job failed admission (structural checks or the
	// Verifier). Nothing was written; retrying the same job cannot succeed.
	ErrInvalidJob = errors.New("gpucache/sink: invalid job")
	// ErrRetriesExhausted: a job failed transiently MaxWriteAttempts times
	// and moved to the failed queue. The last store error is wrapped too.
	ErrRetriesExhausted = errors.New("gpucache/sink: write attempts exhausted")
	// ErrClosed: the sink was closed.
	ErrClosed = errors.New("gpucache/sink: closed")
)

// IsPermanent reports whether a write error is terminal, so the job goes
// straight to the failed queue instead of being retried.
//
// The Store contract names exactly one retryable condition, cold.ErrUnavailable
// ("the operation may be retried"); backends map throttling, server errors and
// connection failures to it. Context deadlines and cancellations, and errors
// whose Timeout() method reports true, are transient as well. A job the sink
// itself found bad (ErrInvalidJob, cold.ErrInvalidKey, cold.ErrCorrupt) is
// permanent even if the error also wraps a transient one. Every other error,
// for example an access-denied answer, is not marked retryable by the store
// and is permanent: retrying it would only spend attempts. IsPermanent(nil)
// is false.
func IsPermanent(err error) bool {
	if err == nil {
		return false
	}
	switch {
	case errors.Is(err, ErrInvalidJob), errors.Is(err, cold.ErrInvalidKey), errors.Is(err, cold.ErrCorrupt):
		return true
	case errors.Is(err, cold.ErrUnavailable),
		errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, context.Canceled):
		return false
	}
	var t interface{ Timeout() bool }
	if errors.As(err, &t) && t.Timeout() {
		return false
	}
	return true
}
