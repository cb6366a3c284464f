package policy

// This file holds the intrusive, index-linked doubly linked lists the
// policies are built from. Links live in one slice per policy, indexed by
// ID, so an ID is on at most one list of a policy at a time, a list
// operation is O(1), and nothing is allocated once the slice has grown to
// the cache's largest ID.

// none is the nil link.
const none = NoParent

// link is the list linkage of one ID.
type link struct{ prev, next ID } // prev: towards the head (MRU), next: towards the tail (LRU)

// list is a doubly linked list threaded through a links slice. The head is
// the most recently used end, the tail the least recently used.
type list struct {
	head, tail ID
	n          int
}

func newList() list { return list{head: none, tail: none} }

// links is the per-ID linkage shared by the lists of one policy.
type links []link

// grow makes id addressable, growing the slice geometrically.
func grow[T any](s []T, id ID) []T {
	if int(id) < len(s) {
		return s
	}
	n := max(2*len(s), int(id)+1, 64)
	out := make([]T, n)
	copy(out, s)
	return out
}

// pushHead links id at the head of q.
func (ls links) pushHead(q *list, id ID) {
	ls[id] = link{prev: none, next: q.head}
	if q.head != none {
		ls[q.head].prev = id
	} else {
		q.tail = id
	}
	q.head = id
	q.n++
}

// pushTail links id at the tail of q.
func (ls links) pushTail(q *list, id ID) {
	ls[id] = link{prev: q.tail, next: none}
	if q.tail != none {
		ls[q.tail].next = id
	} else {
		q.head = id
	}
	q.tail = id
	q.n++
}

// insertBefore links id on q just before at (on its head side); at == none
// links id at the tail.
func (ls links) insertBefore(q *list, at, id ID) {
	if at == none {
		ls.pushTail(q, id)
		return
	}
	p := ls[at].prev
	if p == none {
		ls.pushHead(q, id)
		return
	}
	ls[id] = link{prev: p, next: at}
	ls[p].next = id
	ls[at].prev = id
	q.n++
}

// unlink takes id off q.
func (ls links) unlink(q *list, id ID) {
	l := ls[id]
	if l.prev != none {
		ls[l.prev].next = l.next
	} else {
		q.head = l.next
	}
	if l.next != none {
		ls[l.next].prev = l.prev
	} else {
		q.tail = l.prev
	}
	ls[id] = link{none, none}
	q.n--
}

// moveHead makes id, already on q, its head.
func (ls links) moveHead(q *list, id ID) {
	if q.head == id {
		return
	}
	ls.unlink(q, id)
	ls.pushHead(q, id)
}

// walk yields q's IDs from the tail (least recent) towards the head until
// yield returns false; it reports whether the walk ran to the end.
func (ls links) walk(q *list, yield func(ID) bool) bool {
	for id := q.tail; id != none; {
		prev := ls[id].prev
		if !yield(id) {
			return false
		}
		id = prev
	}
	return true
}
