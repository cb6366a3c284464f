package policy

// idHeap is an indexed 4-ary min-heap of IDs by a float64 key, with ties
// broken by insertion order (older first). pos is indexed by ID.
type idHeap struct {
	items    []heapItem
	pos      []int32 // by ID: index in items, -1 when absent
	seq      uint64
	frontier []int32 // walk's scratch
}

type heapItem struct {
	key float64
	seq uint64
	id  ID
}

func newIDHeap() idHeap { return idHeap{} }

// grow makes id addressable.
func (h *idHeap) grow(id ID) {
	if int(id) < len(h.pos) {
		return
	}
	old := len(h.pos)
	h.pos = grow(h.pos, id)
	for i := old; i < len(h.pos); i++ {
		h.pos[i] = -1
	}
}

func (h *idHeap) has(id ID) bool { return int(id) < len(h.pos) && h.pos[id] >= 0 }

func (h *idHeap) less(i, j int) bool {
	a, b := &h.items[i], &h.items[j]
	if a.key != b.key {
		return a.key < b.key
	}
	return a.seq < b.seq
}

func (h *idHeap) swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.pos[h.items[i].id] = int32(i)
	h.pos[h.items[j].id] = int32(j)
}

// push adds id (not present) with key.
func (h *idHeap) push(id ID, key float64) {
	h.grow(id)
	h.seq++
	h.pos[id] = int32(len(h.items))
	h.items = append(h.items, heapItem{key: key, seq: h.seq, id: id})
	h.up(len(h.items) - 1)
}

// update sets the key of id, if present, and makes it the newest among
// equal keys.
func (h *idHeap) update(id ID, key float64) {
	if !h.has(id) {
		return
	}
	i := int(h.pos[id])
	h.seq++
	h.items[i].key, h.items[i].seq = key, h.seq
	if !h.down(i) {
		h.up(i)
	}
}

// remove drops id and reports whether it was present.
func (h *idHeap) remove(id ID) bool {
	if !h.has(id) {
		return false
	}
	i, last := int(h.pos[id]), len(h.items)-1
	if i != last {
		h.swap(i, last)
	}
	h.items = h.items[:last]
	h.pos[id] = -1
	if i != last && !h.down(i) {
		h.up(i)
	}
	return true
}

func (h *idHeap) up(i int) {
	for i > 0 {
		q := (i - 1) / 4
		if !h.less(i, q) {
			return
		}
		h.swap(i, q)
		i = q
	}
}

// down sifts i down and reports whether it moved.
func (h *idHeap) down(i int) bool {
	i0, n := i, len(h.items)
	for {
		c := 4*i + 1
		if c >= n {
			break
		}
		m := c
		for k := c + 1; k < c+4 && k < n; k++ {
			if h.less(k, m) {
				m = k
			}
		}
		if !h.less(m, i) {
			break
		}
		h.swap(i, m)
		i = m
	}
	return i != i0
}

// walk yields the IDs in key order, smallest first, until yield returns
// false: a best-first walk of the heap with a frontier of indices.
func (h *idHeap) walk(yield func(ID) bool) {
	if len(h.items) == 0 || !yield(h.items[0].id) {
		return
	}
	f := h.pushKids(h.frontier[:0], 0)
	for len(f) > 0 {
		top := f[0]
		last := len(f) - 1
		f[0] = f[last]
		f = f[:last]
		for j := 0; ; {
			m, l := j, 2*j+1
			if l < len(f) && h.less(int(f[l]), int(f[m])) {
				m = l
			}
			if r := l + 1; r < len(f) && h.less(int(f[r]), int(f[m])) {
				m = r
			}
			if m == j {
				break
			}
			f[j], f[m] = f[m], f[j]
			j = m
		}
		if !yield(h.items[top].id) {
			break
		}
		f = h.pushKids(f, int(top))
	}
	h.frontier = f[:0]
}

// pushKids adds the heap children of index i to the frontier f.
func (h *idHeap) pushKids(f []int32, i int) []int32 {
	for c := 4*i + 1; c <= 4*i+4 && c < len(h.items); c++ {
		f = append(f, int32(c))
		for j := len(f) - 1; j > 0; {
			q := (j - 1) / 2
			if !h.less(int(f[j]), int(f[q])) {
				break
			}
			f[j], f[q] = f[q], f[j]
			j = q
		}
	}
	return f
}
