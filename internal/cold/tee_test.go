package cold_test

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/gpucache/gpucache/internal/cold"
)

// failWriter fails every Write.
type failWriter struct{}

var errWriter = errors.New("writer failed")

func (failWriter) Write([]byte) (int, error) { return 0, errWriter }

// trickle returns one byte per Read, then the given error.
type trickle struct {
	b   []byte
	end error
}

func (r *trickle) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, r.end
	}
	p[0], r.b = r.b[0], r.b[1:]
	return 1, nil
}

func TestReadTee(t *testing.T) {
	body := bytes.Repeat([]byte("abcdefg"), 3*cold.TeeChunk/7+5)
	t.Run("whole body in pieces", func(t *testing.T) {
		dst := make([]byte, len(body))
		var w bytes.Buffer
		if err := cold.ReadTee(bytes.NewReader(body), "k", dst, &w); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(dst, body) || !bytes.Equal(w.Bytes(), body) {
			t.Fatal("dst or writer differs from the body")
		}
	})
	t.Run("body longer than dst stops at dst", func(t *testing.T) {
		dst := make([]byte, 10)
		var w bytes.Buffer
		if err := cold.ReadTee(bytes.NewReader(body), "k", dst, &w); err != nil || !bytes.Equal(w.Bytes(), body[:10]) {
			t.Fatalf("err %v, wrote %q", err, w.Bytes())
		}
	})
	t.Run("short body", func(t *testing.T) {
		dst := make([]byte, 10)
		var w bytes.Buffer
		err := cold.ReadTee(&trickle{b: body[:4], end: io.EOF}, "k", dst, &w)
		if !errors.Is(err, io.ErrUnexpectedEOF) || !bytes.Equal(w.Bytes(), body[:4]) {
			t.Fatalf("err %v, wrote %q; want ErrUnexpectedEOF after 4 bytes", err, w.Bytes())
		}
	})
	t.Run("reader error", func(t *testing.T) {
		boom := errors.New("boom")
		err := cold.ReadTee(&trickle{b: body[:3], end: boom}, "k", make([]byte, 10), io.Discard)
		if !errors.Is(err, boom) {
			t.Fatalf("err %v, want the reader's", err)
		}
	})
	t.Run("writer error", func(t *testing.T) {
		err := cold.ReadTee(bytes.NewReader(body), "k", make([]byte, 10), failWriter{})
		if !errors.Is(err, errWriter) {
			t.Fatalf("err %v, want the writer's", err)
		}
	})
	t.Run("RangeGetTee on a plain store reports the writer's error", func(t *testing.T) {
		m := cold.NewMem()
		if err := m.Put(t.Context(), "k", body, cold.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := cold.RangeGetTee(t.Context(), m, "k", 0, make([]byte, 10), failWriter{}); !errors.Is(err, errWriter) {
			t.Fatalf("err %v, want the writer's", err)
		}
	})
}
