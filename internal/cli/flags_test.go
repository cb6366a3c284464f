package cli

import (
	"flag"
	"io"
	"testing"

	"github.com/gpucache/gpucache/internal/config"
)

// The CLI's client certificate comes from GPUCACHE_CLIENT_CERT and
// GPUCACHE_CLIENT_KEY, never from GPUCACHE_TLS_CERT and GPUCACHE_TLS_KEY:
// those are gpucached's own settings (its server certificate), so a shell
// that exported them for the CLI would hand gpucached the client's
// certificate.
func TestClientCertEnvIsNotTheDaemons(t *testing.T) {
	t.Setenv("GPUCACHE_TLS_CERT", "server.crt")
	t.Setenv("GPUCACHE_TLS_KEY", "server.key")
	t.Setenv("GPUCACHE_CLIENT_CERT", "client.crt")
	t.Setenv("GPUCACHE_CLIENT_KEY", "client.key")
	var c ConnFlags
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.Register(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if c.tlsCert != "client.crt" || c.tlsKey != "client.key" {
		t.Fatalf("--tls-cert %q, --tls-key %q from the environment, want client.crt and client.key", c.tlsCert, c.tlsKey)
	}
	for _, name := range []string{"GPUCACHE_CLIENT_CERT", "GPUCACHE_CLIENT_KEY"} {
		found := false
		for _, o := range config.OtherEnv {
			found = found || o == name
		}
		if !found {
			t.Errorf("%s is not in config.OtherEnv: gpucached would warn about the CLI's variable", name)
		}
	}
}
