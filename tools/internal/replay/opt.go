package replay

import (
	"math"

	"github.com/gpucache/gpucache/internal/policy"
)

// never is the next-use key of a block that is not accessed again.
const never = math.MaxUint64

// nextUses returns, for every block access of reqs in order (request by
// request, block by block), the index of the next access to the same hash
// id, or never.
func nextUses(reqs []Request) []uint64 {
	n := 0
	for i := range reqs {
		n += len(reqs[i].HashIDs)
	}
	next := make([]uint64, n)
	last := make(map[uint64]uint64, n/2)
	k := n
	for i := len(reqs) - 1; i >= 0; i-- {
		hs := reqs[i].HashIDs
		for j := len(hs) - 1; j >= 0; j-- {
			k--
			if at, ok := last[hs[j]]; ok {
				next[k] = at
			} else {
				next[k] = never
			}
			last[hs[j]] = uint64(k)
		}
	}
	return next
}

// optPolicy is Belady's MIN as a policy.Policy: an indexed max-heap of the
// cached blocks by the index of their next access. The simulator calls
// setNext before each Insert or Touch with the next access of that block.
// Its Victims yields only the best candidate (the simulator never skips
// one).
type optPolicy struct {
	key     []uint64    // by ID: the next access
	pos     []int32     // by ID: index in heap, -1 when absent
	heap    []policy.ID // max-heap by key
	pending uint64
}

func newOpt() *optPolicy { return &optPolicy{} }

func (o *optPolicy) setNext(k uint64) { o.pending = k }

func (*optPolicy) Name() string            { return OptName }
func (*optPolicy) Admit(policy.Block) bool { return true }
func (o *optPolicy) Len() int              { return len(o.heap) }
func (o *optPolicy) has(id policy.ID) bool { return int(id) < len(o.pos) && o.pos[id] >= 0 }
func (o *optPolicy) less(i, j int) bool    { return o.key[o.heap[i]] > o.key[o.heap[j]] }

func (o *optPolicy) Insert(b policy.Block) {
	for int(b.ID) >= len(o.pos) {
		o.pos = append(o.pos, -1)
		o.key = append(o.key, 0)
	}
	if o.has(b.ID) {
		o.Touch(b.ID)
		return
	}
	o.key[b.ID] = o.pending
	o.pos[b.ID] = int32(len(o.heap))
	o.heap = append(o.heap, b.ID)
	o.up(len(o.heap) - 1)
}

func (o *optPolicy) Touch(id policy.ID) {
	if !o.has(id) {
		return
	}
	o.key[id] = o.pending
	i := int(o.pos[id])
	if !o.down(i) {
		o.up(i)
	}
}

func (o *optPolicy) Remove(id policy.ID) {
	if !o.has(id) {
		return
	}
	i, last := int(o.pos[id]), len(o.heap)-1
	if i != last {
		o.swap(i, last)
	}
	o.heap = o.heap[:last]
	o.pos[id] = -1
	if i != last {
		if !o.down(i) {
			o.up(i)
		}
	}
}

func (o *optPolicy) Victims(yield func(policy.ID) bool) {
	if len(o.heap) > 0 {
		yield(o.heap[0])
	}
}

func (o *optPolicy) swap(i, j int) {
	h := o.heap
	h[i], h[j] = h[j], h[i]
	o.pos[h[i]] = int32(i)
	o.pos[h[j]] = int32(j)
}

func (o *optPolicy) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !o.less(i, p) {
			return
		}
		o.swap(i, p)
		i = p
	}
}

// down sifts i down and reports whether it moved.
func (o *optPolicy) down(i int) bool {
	i0, n := i, len(o.heap)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		c := l
		if r := l + 1; r < n && o.less(r, l) {
			c = r
		}
		if !o.less(c, i) {
			break
		}
		o.swap(i, c)
		i = c
	}
	return i != i0
}
