package cold

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// Operation names passed to a Fault and used as keys of (*Mem).Calls.
const (
	OpPut      = "Put"
	OpHead     = "Head"
	OpRangeGet = "RangeGet"
	OpDelete   = "Delete"
	OpList     = "List"
)

// Fault decides whether one Mem operation fails. op is one of the Op*
// constants; key is the object key, or the prefix for OpList. Returning nil
// lets the operation proceed normally. A Fault may block (to model a slow
// store); it should then honour ctx, which is the operation's context.
type Fault func(ctx context.Context, op, key string) error

// Mem is an in-memory Store for tests, with fault injection and call
// counters for other packages' tests:
//
//   - SetFault installs a Fault checked before an operation: an error fails
//     the operation with no effect ("the store refused").
//   - SetFaultAfter installs a Fault checked after an operation took effect:
//     an error is returned although the write committed ("the ack was lost"),
//     the case behind "a PUT error never triggers a speculative DELETE".
//   - Calls counts every invocation per operation, failed ones included, so a
//     test can assert, say, zero RangeGet calls.
//
// Mem copies bodies in Put and out in RangeGet: it never retains or aliases
// a caller's buffer. Faults and List callbacks run without Mem's lock held,
// so they may call back into Mem.
type Mem struct {
	mu struct {
		sync.Mutex
		objects map[string]memObject // guarded by mu
		calls   map[string]int       // guarded by mu
		before  Fault                // guarded by mu
		after   Fault                // guarded by mu
	}
}

type memObject struct {
	data     []byte // never modified after insertion
	modified time.Time
}

var _ Store = (*Mem)(nil)

// NewMem returns an empty in-memory store.
func NewMem() *Mem {
	m := &Mem{}
	m.mu.objects = make(map[string]memObject)
	m.mu.calls = make(map[string]int)
	return m
}

// SetFault installs f to run before every operation; nil removes it.
func (m *Mem) SetFault(f Fault) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mu.before = f
}

// SetFaultAfter installs f to run after every operation took effect; nil
// removes it. Its error replaces the operation's result: a Put that commits
// and then reports an error models an ambiguous (lost-ack) write.
func (m *Mem) SetFaultAfter(f Fault) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mu.after = f
}

// Calls returns a copy of the per-operation call counters.
func (m *Mem) Calls() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.mu.calls)
}

// ResetCalls zeroes the call counters.
func (m *Mem) ResetCalls() {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.mu.calls)
}

// Keys returns every stored key in lexical order.
func (m *Mem) Keys() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Sorted(maps.Keys(m.mu.objects))
}

// begin counts the call, checks ctx and the key, and runs the before-fault.
func (m *Mem) begin(ctx context.Context, op, key string, check func(string) error) error {
	m.mu.Lock()
	m.mu.calls[op]++
	before := m.mu.before
	m.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("mem %s %q: %w", op, key, err)
	}
	if err := check(key); err != nil {
		return fmt.Errorf("mem %s: %w", op, err)
	}
	if before != nil {
		if err := before(ctx, op, key); err != nil {
			return fmt.Errorf("mem %s %q: %w", op, key, err)
		}
	}
	return nil
}

// end runs the after-fault, if any, over the operation's result.
func (m *Mem) end(ctx context.Context, op, key string, err error) error {
	if err != nil {
		return err
	}
	m.mu.Lock()
	after := m.mu.after
	m.mu.Unlock()
	if after != nil {
		if err := after(ctx, op, key); err != nil {
			return fmt.Errorf("mem %s %q (after commit): %w", op, key, err)
		}
	}
	return nil
}

// Put implements Store.
func (m *Mem) Put(ctx context.Context, key string, body []byte, opts PutOptions) error {
	if err := m.begin(ctx, OpPut, key, ValidKey); err != nil {
		return err
	}
	obj := memObject{data: slices.Clone(body), modified: time.Now()}
	if obj.data == nil {
		obj.data = []byte{}
	}
	m.mu.Lock()
	_, exists := m.mu.objects[key]
	if opts.IfNoneMatch && exists {
		m.mu.Unlock()
		return fmt.Errorf("mem Put %q: %w", key, ErrExists)
	}
	m.mu.objects[key] = obj
	m.mu.Unlock()
	return m.end(ctx, OpPut, key, nil)
}

// lookup returns the object or ErrNotFound.
func (m *Mem) lookup(op, key string) (memObject, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	obj, ok := m.mu.objects[key]
	if !ok {
		return memObject{}, fmt.Errorf("mem %s %q: %w", op, key, ErrNotFound)
	}
	return obj, nil
}

// Head implements Store.
func (m *Mem) Head(ctx context.Context, key string) (ObjectInfo, error) {
	if err := m.begin(ctx, OpHead, key, ValidKey); err != nil {
		return ObjectInfo{}, err
	}
	obj, err := m.lookup(OpHead, key)
	if err != nil {
		return ObjectInfo{}, err
	}
	info := ObjectInfo{Key: key, Size: int64(len(obj.data)), Modified: obj.modified}
	return info, m.end(ctx, OpHead, key, nil)
}

// RangeGet implements Store.
func (m *Mem) RangeGet(ctx context.Context, key string, off int64, dst []byte) error {
	if err := m.begin(ctx, OpRangeGet, key, ValidKey); err != nil {
		return err
	}
	obj, err := m.lookup(OpRangeGet, key)
	if err != nil {
		return err
	}
	size := int64(len(obj.data))
	if off < 0 || off > size || int64(len(dst)) > size-off {
		return fmt.Errorf("mem RangeGet %q [%d, +%d) of %d bytes: %w", key, off, len(dst), size, ErrRange)
	}
	copy(dst, obj.data[off:])
	return m.end(ctx, OpRangeGet, key, nil)
}

// Delete implements Store.
func (m *Mem) Delete(ctx context.Context, key string) error {
	if err := m.begin(ctx, OpDelete, key, ValidKey); err != nil {
		return err
	}
	m.mu.Lock()
	delete(m.mu.objects, key)
	m.mu.Unlock()
	return m.end(ctx, OpDelete, key, nil)
}

// List implements Store. It lists a snapshot taken when it starts; fn runs
// without the lock held.
func (m *Mem) List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error {
	if err := m.begin(ctx, OpList, prefix, ValidPrefix); err != nil {
		return err
	}
	m.mu.Lock()
	var infos []ObjectInfo
	for k, obj := range m.mu.objects {
		if strings.HasPrefix(k, prefix) {
			infos = append(infos, ObjectInfo{Key: k, Size: int64(len(obj.data)), Modified: obj.modified})
		}
	}
	m.mu.Unlock()
	slices.SortFunc(infos, func(a, b ObjectInfo) int { return strings.Compare(a.Key, b.Key) })
	for _, info := range infos {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("mem List %q: %w", prefix, err)
		}
		if err := fn(info); err != nil {
			return err
		}
	}
	return m.end(ctx, OpList, prefix, nil)
}
