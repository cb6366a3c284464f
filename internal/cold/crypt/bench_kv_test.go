package crypt

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// The KV benchmarks measure the cold tier's compression and encryption on
// real attention KV: the fp16 and bf16 files scripts/kv-dump.py writes
// from the demo model (GPUCACHE_KV_DIR). Without them they skip. Each
// reports MB/s of plaintext on one goroutine (run with -cpu 1 for per-core
// figures); the compression benchmarks also report the whole file's ratio
// (plaintext / compressed) and the share of blocks whose compressed form
// saves at least 10% (what the pack format keeps).
//
//	python3 scripts/kv-dump.py --out /tmp/kv
//	GPUCACHE_KV_DIR=/tmp/kv go test -run '^$' -bench KV -cpu 1 ./internal/cold/crypt

var kvBlockSizes = []int{128 << 10, 2 << 20}

func kvBlocks(b *testing.B, dtype string, size int) [][]byte {
	b.Helper()
	dir := os.Getenv("GPUCACHE_KV_DIR")
	if dir == "" {
		b.Skip("GPUCACHE_KV_DIR not set (python3 scripts/kv-dump.py --out DIR)")
	}
	raw, err := os.ReadFile(filepath.Join(dir, "kv-"+dtype+".bin"))
	if err != nil {
		b.Fatal(err)
	}
	var out [][]byte
	for off := 0; off+size <= len(raw); off += size {
		out = append(out, raw[off:off+size])
	}
	if len(out) == 0 {
		b.Fatalf("%s: %d bytes, less than one %d-byte block", dtype, len(raw), size)
	}
	return out
}

func sizeName(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dKiB", n>>10)
}

var kvLevels = []struct {
	name    string
	l       zstd.EncoderLevel
	shuffle bool // byte planes first (Shuffle2)
}{
	{"fastest", zstd.SpeedFastest, false}, {"default", zstd.SpeedDefault, false},
	{"fastest-planes", zstd.SpeedFastest, true}, {"default-planes", zstd.SpeedDefault, true},
}

// eachKV runs bench as the sub-benchmark "dtype/size" for each dtype and
// block size, on that file's blocks, counting size bytes an op.
func eachKV(b *testing.B, bench func(b *testing.B, size int, blocks [][]byte)) {
	for _, dt := range []string{"fp16", "bf16"} {
		for _, size := range kvBlockSizes {
			b.Run(dt+"/"+sizeName(size), func(b *testing.B) {
				blocks := kvBlocks(b, dt, size)
				b.SetBytes(int64(size))
				bench(b, size, blocks)
			})
		}
	}
}

// eachKVLevel is eachKV with one sub-benchmark per kvLevels entry below
// "dtype/size", given that level's codec and whether it shuffles.
func eachKVLevel(b *testing.B, bench func(b *testing.B, size int, blocks [][]byte, z *Zstd, shuffle bool)) {
	eachKV(b, func(b *testing.B, size int, blocks [][]byte) {
		for _, lv := range kvLevels {
			b.Run(lv.name, func(b *testing.B) {
				z, err := NewZstdLevel(lv.l)
				if err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(size))
				bench(b, size, blocks, z, lv.shuffle)
			})
		}
	})
}

func BenchmarkKVCompress(b *testing.B) {
	eachKVLevel(b, func(b *testing.B, size int, blocks [][]byte, z *Zstd, shuffle bool) {
		prep := func(blk []byte) []byte { return blk }
		if shuffle {
			sbuf := make([]byte, 0, size)
			prep = func(blk []byte) []byte { sbuf = Shuffle2(sbuf[:0], blk); return sbuf }
		}
		var plain, comp, kept int
		for _, blk := range blocks {
			c := z.Compress(nil, prep(blk))
			plain += len(blk)
			comp += len(c)
			if len(c)*100 <= len(blk)*90 {
				kept++
			}
		}
		buf := make([]byte, 0, size+size/8)
		b.ResetTimer()
		for i := 0; b.Loop(); i++ {
			buf = z.Compress(buf[:0], prep(blocks[i%len(blocks)]))
		}
		b.ReportMetric(float64(plain)/float64(comp), "ratio")
		b.ReportMetric(100*float64(kept)/float64(len(blocks)), "kept%")
	})
}

func BenchmarkKVDecompress(b *testing.B) {
	eachKVLevel(b, func(b *testing.B, size int, blocks [][]byte, z *Zstd, shuffle bool) {
		comp := make([][]byte, len(blocks))
		for i, blk := range blocks {
			if shuffle {
				blk = Shuffle2(nil, blk)
			}
			comp[i] = z.Compress(nil, blk)
		}
		dst, plain := make([]byte, size), make([]byte, size)
		b.ResetTimer()
		for i := 0; b.Loop(); i++ {
			if err := z.Decompress(dst, comp[i%len(comp)]); err != nil {
				b.Fatal(err)
			}
			if shuffle {
				Unshuffle2(plain, dst)
			}
		}
	})
}

func kvAEAD(b *testing.B) cipher.AEAD {
	k, err := DeriveKey(make([]byte, 32), "bench")
	if err != nil {
		b.Fatal(err)
	}
	blk, err := aes.NewCipher(k)
	if err != nil {
		b.Fatal(err)
	}
	a, err := cipher.NewGCM(blk)
	if err != nil {
		b.Fatal(err)
	}
	return a
}

// BenchmarkKVEncrypt and BenchmarkKVDecrypt: AES-256-GCM over each block
// (what the pack adds on write and refill); BenchmarkKVSHA256 is the
// checksum every block already pays on both paths, for comparison.
func BenchmarkKVEncrypt(b *testing.B) {
	eachKV(b, func(b *testing.B, size int, blocks [][]byte) {
		a := kvAEAD(b)
		nonce := make([]byte, a.NonceSize())
		out := make([]byte, 0, size+a.Overhead())
		b.ResetTimer()
		for i := 0; b.Loop(); i++ {
			nonce[0] = byte(i)
			out = a.Seal(out[:0], nonce, blocks[i%len(blocks)], nil)
		}
	})
}

func BenchmarkKVDecrypt(b *testing.B) {
	eachKV(b, func(b *testing.B, _ int, blocks [][]byte) {
		a := kvAEAD(b)
		nonce := make([]byte, a.NonceSize())
		ct := a.Seal(nil, nonce, blocks[0], nil)
		work := make([]byte, len(ct))
		b.ResetTimer()
		for b.Loop() {
			copy(work, ct)
			if _, err := a.Open(work[:0], nonce, work, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkKVSHA256(b *testing.B) {
	eachKV(b, func(b *testing.B, _ int, blocks [][]byte) {
		b.ResetTimer()
		for i := 0; b.Loop(); i++ {
			_ = sha256.Sum256(blocks[i%len(blocks)])
		}
	})
}
