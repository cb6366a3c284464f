package transport

import (
	"bytes"
	"math/rand/v2"
	"net"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// newReg returns a registry closed at cleanup (Close must succeed: no
// slot left checked out or held).
func newReg(t testing.TB, slots, slotSize int) *Registry {
	t.Helper()
	r, err := NewRegistry(RegistryConfig{Slots: slots, SlotSize: slotSize})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("registry close: %v", err)
		}
	})
	return r
}

// tcpPair returns both ends of a real 127.0.0.1 TCP connection. With
// small, the socket buffers are shrunk so that a few MiB unread by the
// peer block the writer.
func tcpPair(t testing.TB, small bool) (client, server *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type res struct {
		c   net.Conn
		err error
	}
	acc := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		acc <- res{c, err}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	r := <-acc
	if r.err != nil {
		t.Fatal(r.err)
	}
	client, server = c.(*net.TCPConn), r.c.(*net.TCPConn)
	if small {
		for _, err := range []error{client.SetWriteBuffer(32 << 10), server.SetReadBuffer(32 << 10)} {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

func newTCP(t testing.TB, c net.Conn, cfg TCPConfig) *TCP {
	t.Helper()
	tr, err := NewTCP(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// fill writes a seeded pattern of n bytes into slot i and sets its length.
func fill(st *Stage, i, n int, seed uint64) {
	b := st.Slot(i)[:n]
	rnd := rand.New(rand.NewPCG(seed, uint64(i)))
	for j := range b {
		b[j] = byte(rnd.Uint32())
	}
	st.SetLen(i, n)
}

func checkout(t testing.TB, r *Registry, b Binding, n int, e Epoch) *Stage {
	t.Helper()
	st, err := r.Checkout(b, n, e)
	if err != nil {
		t.Fatalf("checkout %s %d @%d: %v", b, n, e, err)
	}
	return st
}

func samePayloads(t testing.TB, got, want *Stage) {
	t.Helper()
	if got.Len() < want.Len() {
		t.Fatalf("received %d slots, sent %d", got.Len(), want.Len())
	}
	for i := range want.Len() {
		if !bytes.Equal(got.Payload(i), want.Payload(i)) {
			t.Fatalf("slot %d: %d bytes received differ from %d sent", i, len(got.Payload(i)), len(want.Payload(i)))
		}
	}
}

// checkStats asserts the gauges add up.
func checkStats(t testing.TB, r *Registry) RegistryStats {
	t.Helper()
	s := r.Stats()
	if s.Idle+s.CheckedOut+s.Quarantined != s.Slots {
		t.Fatalf("stats do not add up: %+v", s)
	}
	return s
}
