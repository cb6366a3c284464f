package main

import (
	"bufio"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// respLongName is 13 bytes that once stopped the whole daemon before any
// AUTH: a command whose only argument, its name, is declared longer than
// the RESP reader's 4096-byte argument limit, with no body.
const respLongName = "*1\r\n$4097\r\n"

// TestRESPLongCommandNameDoesNotStopDaemon: a real gpucached, in open mode
// and with tenants, answers the 13 bytes with a protocol error and closes
// that connection (before AUTH, and after it with tenants), and still
// serves a second client.
func TestRESPLongCommandNameDoesNotStopDaemon(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := buildDaemon(t)
	for _, mode := range []string{"open", "tenants"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			profile := "{model: " + exampleModel + ", config_revision: main, tokenizer_revision: main, dtype: bfloat16, variable_length: true}"
			cfg := "cold_store: \"off\"\n"
			var secret string
			if mode == "tenants" {
				secret = string(randomSecret(t, filepath.Join(dir, "acme.secret")))
				cfg += "tenants:\n  - name: acme\n    secrets: [{id: acme-1, file: " + dir + "/acme.secret}]\n    resp: " + profile + "\n"
			} else {
				cfg += "resp_profile: " + profile + "\n"
			}
			cfgPath := filepath.Join(dir, "gpucached.yaml")
			if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
				t.Fatal(err)
			}
			addr := "127.0.0.1:" + freeLoopbackPort(t)
			d := startDaemon(t, bin, "--config", cfgPath, "--resp-listen", addr, "--audit-log", "off")

			logins := []string{""}
			if secret != "" {
				logins = append(logins, "*3\r\n$4\r\nAUTH\r\n$4\r\nacme\r\n$64\r\n"+secret+"\r\n")
			}
			for _, login := range logins {
				c := dialHangGuarded(t, addr)
				if login != "" {
					c.Write([]byte(login))
					if got := readLine(t, c); got != "+OK\r\n" {
						t.Fatalf("AUTH: %q", got)
					}
				}
				c.Write([]byte(respLongName))
				got, err := io.ReadAll(c)
				if err != nil || !strings.HasPrefix(string(got), "-ERR Protocol error: ") {
					t.Fatalf("the 13 bytes (after AUTH: %v): %q, %v; want a protocol error and a close", login != "", got, err)
				}
				select {
				case err := <-d.exited:
					t.Fatalf("the daemon exited: %v", err)
				default:
				}
				second := dialHangGuarded(t, addr)
				second.Write([]byte("*1\r\n$4\r\nPING\r\n"))
				if got := readLine(t, second); got != "+PONG\r\n" {
					t.Fatalf("a second client's PING: %q", got)
				}
			}
		})
	}
}

// dialHangGuarded connects to addr with a deadline that only turns a hang
// into a failure.
func dialHangGuarded(t *testing.T, addr string) *bufConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, rcHangGuard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(rcHangGuard))
	return &bufConn{Conn: nc, br: bufio.NewReader(nc)}
}

// bufConn reads through a buffer.
type bufConn struct {
	net.Conn
	br *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.br.Read(p) }

// readLine reads one reply line.
func readLine(t *testing.T, c *bufConn) string {
	t.Helper()
	line, err := c.br.ReadString('\n')
	if err != nil {
		t.Fatalf("read: %v after %q", err, line)
	}
	return line
}
