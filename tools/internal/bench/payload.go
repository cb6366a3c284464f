package bench

import (
	"encoding/binary"

	"github.com/gpucache/gpucache/client"
)

// Payload stamps. A benchmark block is not checksummed end to end (hashing
// every byte would measure the hash, not the cache): instead its first 8
// bytes hold a seed derived from its key, the first 8 bytes of every 4 KiB
// page hold the seed mixed with the page offset, and the last 8 bytes hold
// the seed mixed with the length. A GET reply is corrupt if its length or
// any stamp is wrong: that catches bytes of another block, a shifted or
// truncated stream, and stale buffer contents, at a cost of one word per
// page.

const stampStride = 4096

// seedOf derives a block's stamp seed from its key.
func seedOf(k client.BlockKey) uint64 { return binary.LittleEndian.Uint64(k[:8]) | 1 }

func pageStamp(seed uint64, off int) uint64 { return seed ^ uint64(off)*0x9E3779B97F4A7C15 }

// stamp writes the stamps of seed into b (len(b) ≥ 16).
func stamp(b []byte, seed uint64) {
	for off := 0; off+16 <= len(b); off += stampStride {
		binary.LittleEndian.PutUint64(b[off:], pageStamp(seed, off))
	}
	binary.LittleEndian.PutUint64(b[len(b)-8:], seed^uint64(len(b)))
}

// verify reports whether b is a block of size bytes stamped with seed.
func verify(b []byte, seed uint64, size int) bool {
	if len(b) != size || size < 16 {
		return false
	}
	for off := 0; off+16 <= len(b); off += stampStride {
		if binary.LittleEndian.Uint64(b[off:]) != pageStamp(seed, off) {
			return false
		}
	}
	return binary.LittleEndian.Uint64(b[len(b)-8:]) == seed^uint64(len(b))
}

// fill writes a non-trivial filler pattern (so blocks are not all zeros).
func fill(b []byte, x byte) {
	for i := range b {
		b[i] = byte(i*131) ^ x
	}
}
