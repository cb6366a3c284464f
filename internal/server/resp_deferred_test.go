package server

import (
	"errors"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"
)

// longName is a request whose only argument, the command name, is longer
// than the reader's argument limit, sent without its body: the 13 bytes
// that once stopped the whole node before any AUTH.
const longName = "*1\r\n$4097\r\n"

// TestRESPLongCommandNameCloses: a command name over the argument limit
// (the request's only argument, so also its last) is a protocol error
// that closes that connection, before and after AUTH, in authenticated and
// open mode; the server goes on serving other clients.
func TestRESPLongCommandNameCloses(t *testing.T) {
	for _, mode := range []string{"authenticated", "open"} {
		t.Run(mode, func(t *testing.T) {
			store := bigStore(t, 64<<20)
			secure := mode == "authenticated"
			f := startRESP(t, store, secure, func(c *Config) {
				c.RESPProfiles = map[string]RESPProfile{"acme": respProfile(0), "default": respProfile(0)}
			})
			for _, in := range []string{longName, longName + strings.Repeat("P", 4097) + "\r\n"} {
				for _, authed := range []bool{false, true} {
					c := dialRESP(t, f.addr)
					if authed && secure {
						authAs(t, c, "acme", secretA)
					}
					c.write([]byte(in))
					if got := c.reply(); !strings.HasPrefix(got, "-ERR Protocol error: ") || !strings.Contains(got, "4097") {
						t.Fatalf("%q: %q", in, got)
					}
					c.expectEnded()
					d := dialRESP(t, f.addr)
					if got := d.do("PING"); got != "+PONG\r\n" {
						t.Fatalf("another client's PING: %q", got)
					}
				}
			}
			if n := f.stat(t, "resp_protocol_errors"); n != 4 {
				t.Fatalf("resp_protocol_errors %d, want 4", n)
			}
		})
	}
}

// TestRESPDeferredArgumentCounts: a long last argument counts as an
// argument for every command, and a command that refuses it skips it, so
// the connection stays in sync.
func TestRESPDeferredArgumentCounts(t *testing.T) {
	f := startBad(t)
	c := dialRESP(t, f.addr)
	authAs(t, c, "acme", secretA)
	long := strings.Repeat("v", 5000)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"SET", mpKey(1), "v", long}, "-ERR SET options are not supported\r\n"},
		{[]string{"SET", long}, "-ERR wrong number of arguments for 'set' command\r\n"},
		{[]string{"CONFIG", "GET", "save", long}, "-ERR only CONFIG GET is supported\r\n"},
		{[]string{"GET", long}, "-ERR wrong number of arguments for 'get' command\r\n"},
		{[]string{"AUTH", "acme", long}, "-ERR wrong number of arguments for 'auth' command\r\n"},
		{[]string{"SELECT", long}, "-ERR wrong number of arguments for 'select' command\r\n"},
		{[]string{"EXISTS", long}, "-ERR wrong number of arguments for 'exists' command\r\n"},
		{[]string{"DEL", long}, "-ERR wrong number of arguments for 'del' command\r\n"},
		{[]string{"HELLO", long}, "-ERR unknown command 'HELLO'\r\n"},
		{[]string{"CLIENT", "SETNAME", long}, "+OK\r\n"},
	} {
		if got := c.do(tc.args...); got != tc.want {
			t.Fatalf("%s with a %d-byte last argument: %q, want %q", tc.args[0], len(long), got, tc.want)
		}
		if got := c.do("GET", mpKey(1)); got != "$-1\r\n" {
			t.Fatalf("after %s: GET %q (the SET must not have stored)", tc.args[0], got)
		}
	}
}

// TestRESPQuitDoesNotWaitForItsArgument: QUIT answers +OK and closes at
// once, even with a long last argument the client has not sent. The
// server's timeouts are far beyond the client's deadline, so a server
// that waited for the argument would fail the read.
func TestRESPQuitDoesNotWaitForItsArgument(t *testing.T) {
	f := startRESP(t, bigStore(t, 64<<20), false, func(c *Config) {
		c.HelloTimeout, c.ReadTimeout, c.IdleTimeout = time.Hour, time.Hour, time.Hour
	})
	c := dialRESP(t, f.addr)
	c.write([]byte("*2\r\n$4\r\nQUIT\r\n$100000\r\n"))
	if got := c.reply(); got != "+OK\r\n" {
		t.Fatalf("QUIT: %q", got)
	}
	c.expectClosed()
}

// expectEnded reads until the server ends the connection: a close, or a
// reset when the server closed with the client's bytes unread.
func (c *respClient) expectEnded() {
	c.t.Helper()
	b, err := io.ReadAll(c.br)
	if err != nil && !errors.Is(err, syscall.ECONNRESET) {
		c.t.Fatalf("want the connection ended, got %v after %q", err, b)
	}
	if len(b) != 0 {
		c.t.Fatalf("want the connection ended, got %q", b)
	}
}
