package transport

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"testing"
)

// FuzzTCPReceive feeds arbitrary bytes to Receive: it never panics, never
// writes past a slot, and either fills the stage consistently with the
// frame or fails.
func FuzzTCPReceive(f *testing.F) {
	valid := make([]byte, frameFixed+8+5)
	valid[0], valid[1] = frameStage, frameVersion
	binary.BigEndian.PutUint16(valid[2:], 2)
	binary.BigEndian.PutUint32(valid[frameFixed:], 2)
	binary.BigEndian.PutUint32(valid[frameFixed+4:], 3)
	copy(valid[frameFixed+8:], "hello")
	f.Add(valid)
	f.Add(valid[:10])
	f.Add([]byte{'X', 1, 0, 1})
	f.Add(append([]byte{frameStage, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 0xff, 0xff, 0xff, 0xff))
	reg := newReg(f, 3, 4096)
	f.Fuzz(func(t *testing.T, data []byte) {
		a, b := net.Pipe()
		tr, err := NewTCP(b, TCPConfig{})
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		go func() {
			a.Write(data)
			a.Close()
		}()
		into := checkout(t, reg, "f", 3, 0)
		rc, err := tr.Receive(context.Background(), into)
		if err == nil {
			if rc.Bytes != into.Bytes() || rc.Bytes > int64(len(data)) {
				t.Fatalf("receipt %+v for %d input bytes", rc, len(data))
			}
		}
		if errors.Is(err, ErrStageQuarantined) {
			if _, err := reg.Reclaim(); err != nil {
				t.Fatal(err)
			}
			return
		}
		if err := reg.Release(into); err != nil {
			t.Fatal(err)
		}
	})
}
