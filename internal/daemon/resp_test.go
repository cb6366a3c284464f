package daemon

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"

	"github.com/gpucache/gpucache/internal/config"
)

// TestRESPListenServesRedisProtocol runs the daemon in open mode with
// resp_listen and a resp_profile, and round-trips a key over RESP.
func TestRESPListenServesRedisProtocol(t *testing.T) {
	cfg := testConfig()
	cfg.RESPListen = "127.0.0.1:0"
	cfg.RESPProfile = &config.RESPProfileConfig{Model: "bench", ConfigRevision: "r1", TokenizerRevision: "t1",
		DType: "bfloat16", VariableLength: true, KeyFormat: "any"}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	n := mustStart(t, cfg, Options{})
	a := n.Addrs()
	if a.RESP == "" {
		t.Fatal("no RESP address")
	}
	nc, err := net.Dial("tcp", a.RESP)
	if err != nil {
		t.Fatal(err)
	}
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	script := "*1\r\n$4\r\nPING\r\n" +
		"*3\r\n$3\r\nSET\r\n$16\r\nkey:000000000042\r\n$5\r\nhello\r\n" +
		"*2\r\n$3\r\nGET\r\n$16\r\nkey:000000000042\r\n" +
		"*2\r\n$6\r\nEXISTS\r\n$16\r\nkey:000000000042\r\n" +
		"*1\r\n$4\r\nQUIT\r\n"
	if _, err := nc.Write([]byte(script)); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(bufio.NewReader(nc))
	if err != nil {
		t.Fatal(err)
	}
	if want := "+PONG\r\n+OK\r\n$5\r\nhello\r\n:1\r\n+OK\r\n"; string(got) != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	nc.Close()
	stopNode(t, n)
}

func TestRESPConfigRefusals(t *testing.T) {
	base := testConfig()
	base.RESPListen = "127.0.0.1:0"
	prof := &config.RESPProfileConfig{Model: "m", ConfigRevision: "r", TokenizerRevision: "t", DType: "half", ChunkBytes: 1 << 20}
	for name, mod := range map[string]func(*config.Config){
		"no profile":       func(c *config.Config) {},
		"remote open mode": func(c *config.Config) { c.RESPListen = "0.0.0.0:6380"; c.RESPProfile = prof },
		"chunk too large":  func(c *config.Config) { p := *prof; p.ChunkBytes = 1 << 30; c.RESPProfile = &p },
		"no chunk bytes":   func(c *config.Config) { p := *prof; p.ChunkBytes = 0; c.RESPProfile = &p },
		"bad key format":   func(c *config.Config) { p := *prof; p.KeyFormat = "redis"; c.RESPProfile = &p },
		"no dtype":         func(c *config.Config) { p := *prof; p.DType = ""; c.RESPProfile = &p },
	} {
		c := base
		mod(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	ok := base
	ok.RESPProfile = prof
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid profile refused: %v", err)
	}
}
