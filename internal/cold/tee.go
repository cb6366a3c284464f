package cold

import (
	"context"
	"fmt"
	"io"
)

// TeeChunk bounds how many bytes a Teer lands in dst before it shows them
// to the writer. A reader that checksums as the body streams in hashes at
// most this much at a time while the sender keeps filling the socket, and
// hashes each piece while it is still in the CPU's cache.
const TeeChunk = 64 << 10

// Teer is implemented by a Store that can show a RangeGet's bytes to a
// writer as they arrive, so a caller checksums a payload in the same pass
// that reads it instead of a second pass after the read (refill hashes an
// S3 body as it streams in: refill/doc.go, "Payload checksum").
//
// The caller still owns dst and must not use its bytes until it has checked
// them: RangeGetTee promises only that the bytes w saw are the bytes now in
// dst.
type Teer interface {
	// RangeGetTee is RangeGet that also writes every byte of dst to w,
	// exactly once and in order: each run of bytes as soon as it is in
	// dst, at most TeeChunk bytes per Write. It returns RangeGet's errors,
	// or w's error wrapped. w must not keep the slices it is given. On an
	// error w may have seen a prefix of the range.
	RangeGetTee(ctx context.Context, key string, off int64, dst []byte, w io.Writer) error
}

// RangeGetTee reads len(dst) bytes at off into dst, like s.RangeGet, and
// writes them to w in pieces of at most TeeChunk bytes: through
// s.RangeGetTee as they arrive when s is a Teer, else after the read.
func RangeGetTee(ctx context.Context, s Store, key string, off int64, dst []byte, w io.Writer) error {
	if t, ok := s.(Teer); ok {
		return t.RangeGetTee(ctx, key, off, dst, w)
	}
	if err := s.RangeGet(ctx, key, off, dst); err != nil {
		return err
	}
	for n := 0; n < len(dst); n += TeeChunk {
		if err := teeWrite(w, key, dst[n:min(n+TeeChunk, len(dst))]); err != nil {
			return err
		}
	}
	return nil
}

// teeWrite writes p to w; a Teer reports a writer's failure through it.
func teeWrite(w io.Writer, key string, p []byte) error {
	if len(p) == 0 {
		return nil
	}
	if _, err := w.Write(p); err != nil {
		return fmt.Errorf("gpucache/cold: RangeGetTee %q: writer: %w", key, err)
	}
	return nil
}

// ReadTee fills dst from r, writing each run of bytes to w as soon as it
// is in dst (at most TeeChunk bytes a Write): the loop a streaming backend
// runs over a response body. It returns io.ErrUnexpectedEOF if r ends
// before dst is full, r's error, or w's error wrapped.
func ReadTee(r io.Reader, key string, dst []byte, w io.Writer) error {
	for n := 0; n < len(dst); {
		m, err := r.Read(dst[n:min(n+TeeChunk, len(dst))])
		if werr := teeWrite(w, key, dst[n:n+m]); werr != nil {
			return werr
		}
		n += m
		switch {
		case n == len(dst):
			return nil
		case err == io.EOF:
			return io.ErrUnexpectedEOF
		case err != nil:
			return err
		}
	}
	return nil
}
