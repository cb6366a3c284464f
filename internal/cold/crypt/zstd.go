package crypt

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/klauspost/compress/zstd"
)

// ErrDecompress: compressed bytes that do not decode to exactly the
// expected size. Callers treat it as corruption.
var ErrDecompress = errors.New("gpucache/cold/crypt: zstd block does not decode to its size")

// Zstd compresses and decompresses whole blocks. It is safe for
// concurrent use and starts no goroutine; Close releases nothing but may
// be called for symmetry.
type Zstd struct {
	enc *zstd.Encoder
	dec *zstd.Decoder
}

// NewZstd returns a codec at the fastest zstd level (SpeedFastest): the
// cold tier compresses on the eviction path's flush, where throughput
// matters more than the last percent of ratio (docs/BENCHMARKS.md).
func NewZstd() (*Zstd, error) {
	return NewZstdLevel(zstd.SpeedFastest)
}

// NewZstdLevel is NewZstd at another level (benchmarks).
func NewZstdLevel(l zstd.EncoderLevel) (*Zstd, error) {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(l), zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)),
		zstd.WithEncoderCRC(false)) // the manifest's SHA-256 checks the plaintext
	if err != nil {
		return nil, err
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecodeAllCapLimit(true))
	if err != nil {
		return nil, err
	}
	return &Zstd{enc: enc, dec: dec}, nil
}

// Compress appends the zstd frame of src to dst and returns it.
func (z *Zstd) Compress(dst, src []byte) []byte { return z.enc.EncodeAll(src, dst) }

// Decompress decodes src into dst, which must come out exactly full: the
// decoder writes at most len(dst) bytes into dst's memory and never
// allocates a bigger buffer. Anything else is ErrDecompress.
func (z *Zstd) Decompress(dst, src []byte) error {
	out, err := z.dec.DecodeAll(src, dst[:0:len(dst)])
	if err != nil {
		return fmt.Errorf("%w: %w", ErrDecompress, err)
	}
	if len(out) != len(dst) || (len(out) > 0 && &out[0] != &dst[0]) {
		return fmt.Errorf("%w: %d bytes, want %d", ErrDecompress, len(out), len(dst))
	}
	return nil
}
