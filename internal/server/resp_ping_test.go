package server

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpucache/gpucache/internal/hot"
)

// startPing runs a RESP listener over a hot tier whose largest block (and
// so the last-argument bound) is 1 MiB; secure turns on the test tenants.
func startPing(t *testing.T, secure bool) (*respFixture, int) {
	store, err := hot.New(hot.Config{CapacityBytes: 8 << 20, MinClass: 16 << 10, MaxClass: 1 << 20, SlabBytes: 2 << 20, TagSize: HotTagSize})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	f := startRESP(t, store, secure, func(c *Config) { c.BufferWait = time.Millisecond })
	return f, int(f.srv.Limits().MaxPayload)
}

// pingReply is the bulk reply echoing msg.
func pingReply(msg string) string { return "$" + strconv.Itoa(len(msg)) + "\r\n" + msg + "\r\n" }

// TestRESPPingEchoesLongMessages: PING echoes a message longer than the
// 4096-byte argument limit, up to the last-argument bound, and gives its
// buffer back; one byte over the bound is a protocol error that closes
// that connection only.
func TestRESPPingEchoesLongMessages(t *testing.T) {
	f, bound := startPing(t, false)
	c := dialRESP(t, f.addr)
	for _, n := range []int{4096, 4097, 100 << 10, bound} {
		msg := strings.Repeat(string(rune('a'+n%26)), n)
		if got := c.do("PING", msg); got != pingReply(msg) {
			t.Fatalf("PING of %d bytes: %d bytes back (%.40q...)", n, len(got), got)
		}
		if got := c.do("PING"); got != "+PONG\r\n" {
			t.Fatalf("PING after a %d-byte PING: %q", n, got)
		}
		if held := f.stat(t, "request_buffer_bytes"); held != 0 {
			t.Fatalf("%d request-buffer bytes held after a %d-byte PING", held, n)
		}
	}
	c.write([]byte("*2\r\n$4\r\nPING\r\n$" + strconv.Itoa(bound+1) + "\r\n"))
	if got := c.reply(); got != "-ERR Protocol error: too large: bulk of "+strconv.Itoa(bound+1)+" bytes (max "+strconv.Itoa(bound)+")\r\n" {
		t.Fatalf("PING over the bound: %q", got)
	}
	c.expectClosed()
	d := dialRESP(t, f.addr)
	if got := d.do("PING", "after"); got != pingReply("after") {
		t.Fatalf("another client: %q", got)
	}
}

// TestRESPPingBeforeAuthIsBounded: before AUTH a long PING takes the
// pre-session request buffers: a message they hold is echoed, a larger one
// is refused with -ERR and skipped (the connection stays in sync), and
// after AUTH the tenant's share echoes it.
func TestRESPPingBeforeAuthIsBounded(t *testing.T) {
	f, bound := startPing(t, true)
	c := dialRESP(t, f.addr)
	small := strings.Repeat("s", 8<<10)
	if got := c.do("PING", small); got != pingReply(small) {
		t.Fatalf("an 8 KiB PING before AUTH: %.60q", got)
	}
	big := strings.Repeat("b", bound)
	got := c.do("PING", big)
	if !strings.HasPrefix(got, "-ERR PING message of "+strconv.Itoa(bound)+" bytes: more than connections without AUTH may hold") {
		t.Fatalf("a %d-byte PING before AUTH: %.200q", bound, got)
	}
	if got := c.do("PING"); got != "+PONG\r\n" {
		t.Fatalf("PING after the refused one: %q", got)
	}
	if held := f.stat(t, "request_buffer_presession_bytes"); held != 0 {
		t.Fatalf("%d pre-session bytes held after the refusal", held)
	}
	authAs(t, c, "acme", secretA)
	if got := c.do("PING", big); got != pingReply(big) {
		t.Fatalf("the %d-byte PING after AUTH: %.60q", bound, got)
	}
	if held := f.stat(t, "request_buffer_bytes"); held != 0 {
		t.Fatalf("%d request-buffer bytes held after the PING", held)
	}
}
