// Package policy holds the hot tier's admission and eviction policies.
// One implementation serves both the hot store (internal/hot,
// Config.Policy) and the trace simulator (tools/internal/replay), so that the
// simulator measures the code the daemon runs.
//
// A cache (the store, or the simulator) owns the blocks and names each by a
// dense ID it chooses (the store's entry index). It tells the policy what
// happens — a block is offered (Admit), enters (Insert), is used (Touch),
// leaves (Remove) — and asks it which block to evict (Victims). The policy
// never calls back into the cache.
package policy

// ID names a cached block inside one cache. IDs are reused after Remove.
type ID = uint32

// NoParent is Block.Parent for a block whose parent is not cached (or
// which is the first block of its chain).
const NoParent ID = ^ID(0)

// Block is what a policy may know about a block when it is offered and
// when it enters: signals that both the store and the simulator have.
type Block struct {
	ID       ID
	Parent   ID     // the cached parent's ID, or NoParent
	Position uint32 // index of the block in its token chain (0 = first)
	Tokens   uint32 // valid tokens in the block
	// Partial: the block holds fewer tokens than its namespace's block size
	// (the last block of a prompt; the next turn's prompt extends it, so
	// its key changes and it is almost never reused).
	Partial bool
	// Key is a stable digest of the block's identity: the same block has
	// the same Key whenever it is offered, in this cache or after it was
	// evicted, and different blocks almost never share one. 0 means
	// unknown. Only policies that remember blocks beyond their stay in the
	// cache (Adaptive's shadow caches) use it.
	Key uint64
}

// Policy decides admission and eviction order. Implementations are not
// safe for concurrent use: the cache serialises calls (the store holds its
// lock).
type Policy interface {
	// Name is the policy's configuration name (e.g. "lru").
	Name() string
	// Admit reports whether an offered block (not yet cached) may enter.
	// A refused block is not stored; the cache calls nothing else for it.
	// b.ID is not yet meaningful.
	Admit(b Block) bool
	// Insert records that b entered the cache.
	Insert(b Block)
	// Touch records a use (a hit) of a cached block.
	Touch(id ID)
	// Remove records that a block left the cache (evicted or deleted).
	Remove(id ID)
	// Victims yields eviction candidates, best first, until yield returns
	// false. The cache skips candidates it cannot evict (pinned) and calls
	// Remove for the one it evicts, after Victims returns.
	Victims(yield func(ID) bool)
	// Len is the number of blocks the policy tracks.
	Len() int
}
