package bench

import (
	"math"
	"math/bits"
	"time"
)

// Histogram records durations in log-linear buckets, HDR style: every power
// of two is split into 2^subBits linear sub-buckets, so a recorded value is
// known to within 1/2^subBits (under 1%) of itself. Recording is a few
// integer operations and never allocates; one histogram belongs to one
// goroutine, and Merge combines them afterwards.
type Histogram struct {
	counts [numBuckets]uint64
	n      uint64
	sum    uint64
	min    uint64
	max    uint64
}

const (
	subBits    = 7
	subCount   = 1 << subBits
	numBuckets = (64 - subBits + 1) * subCount
)

// bucketOf returns the bucket of v. Values below subCount have a bucket
// each; above, the top subBits+1 significant bits pick the bucket.
func bucketOf(v uint64) int {
	if v < subCount {
		return int(v)
	}
	e := bits.Len64(v) - subBits - 1 // shift that leaves subBits+1 bits
	return (e+1)<<subBits + int(v>>e) - subCount
}

// bucketBounds returns the smallest and largest value of bucket i.
func bucketBounds(i int) (lo, hi uint64) {
	if i < subCount {
		return uint64(i), uint64(i)
	}
	e := i>>subBits - 1
	m := uint64(i&(subCount-1) + subCount)
	lo = m << e
	return lo, lo + (1 << e) - 1
}

// Record adds one duration (negative counts as zero).
func (h *Histogram) Record(d time.Duration) {
	v := uint64(max(d, 0))
	h.counts[bucketOf(v)]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.n++
	h.sum += v
}

// Merge adds o's records to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
	h.sum += o.sum
}

// Count returns the number of records.
func (h *Histogram) Count() uint64 { return h.n }

// Max returns the largest record.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Mean returns the mean record.
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / h.n)
}

// Quantile returns the q-quantile (0 ≤ q ≤ 1): the upper bound of the bucket
// holding the ceil(q·n)-th smallest record, clamped to the recorded range.
// It is 0 for an empty histogram.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = min(max(rank, 1), h.n)
	var cum uint64
	for i, c := range h.counts {
		cum += c
		if cum >= rank {
			_, hi := bucketBounds(i)
			return time.Duration(min(max(hi, h.min), h.max))
		}
	}
	return time.Duration(h.max)
}
