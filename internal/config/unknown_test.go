package config

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestSuggest(t *testing.T) {
	flags := []string{"hot-capacity", "hot-slab", "listen", "admin-listen", "cold-dir"}
	for _, c := range []struct{ in, want string }{
		{"hot-capcity", "hot-capacity"},  // a deletion
		{"hot-capaicty", "hot-capacity"}, // a transposition
		{"hot_capacity", "hot-capacity"}, // the YAML spelling
		{"HOT-CAPACITY", "hot-capacity"},
		{"lisen", "listen"},
		{"colddir", "cold-dir"},
		{"verbose", ""}, // nothing close
		{"hot", ""},
	} {
		if got := Suggest(c.in, flags); got != c.want {
			t.Errorf("Suggest(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestUnknownFlagIsOneLine: a typo'd flag is refused with the flag meant,
// and nothing is written to the usage writer.
func TestUnknownFlagIsOneLine(t *testing.T) {
	var out strings.Builder
	_, err := Load([]string{"--hot-capcity", "2GiB"}, env(nil), &out)
	want := "unknown flag --hot-capcity; did you mean --hot-capacity? (gpucached --help lists every flag)"
	var fe *FlagError
	if !errors.As(err, &fe) || errors.Is(err, ErrInvalid) || err.Error() != want || out.Len() != 0 {
		t.Fatalf("err %v, usage written %d bytes; want a FlagError %q and no usage", err, out.Len(), want)
	}
	_, err = Load([]string{"--frobnicate"}, env(nil), &out)
	if err == nil || strings.Contains(err.Error(), "did you mean") || !strings.Contains(err.Error(), "unknown flag --frobnicate (gpucached --help") {
		t.Fatalf("unknown flag with no near match: %v", err)
	}
	_, err = Load([]string{"--hot-capacity"}, env(nil), &out)
	if err == nil || err.Error() != "flag needs an argument: --hot-capacity (gpucached --help lists every flag)" || out.Len() != 0 {
		t.Fatalf("flag without value: %v, usage %d bytes", err, out.Len())
	}
}

// TestUnknownYAMLKey: an unknown key names the file, the line and the key
// meant, in the section it is in; not a Go type.
func TestUnknownYAMLKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(path, []byte("listen: 127.0.0.1:9400\nhot_capcity: 2GiB\ntenants:\n  - name: acme\n    secrts: [{id: a, env: X}]\nbogus_thing: 1\n"), 0o600)
	_, err := Load([]string{"--config", path}, env(nil), io.Discard)
	if err == nil || !errors.Is(err, ErrInvalid) {
		t.Fatalf("want ErrInvalid, got %v", err)
	}
	for _, want := range []string{
		`unknown setting "hot_capcity" in ` + path + ` line 2; did you mean "hot_capacity"?`,
		`unknown setting "secrts" in ` + path + ` line 5; did you mean "secrets"?`,
		`unknown setting "bogus_thing" in ` + path + ` line 6; docs/CONFIG.md lists every setting`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "config.Config") || strings.Contains(err.Error(), "not found in type") {
		t.Errorf("error names a Go type: %v", err)
	}
}

func TestCheckEnv(t *testing.T) {
	c := Default()
	c.Tenants = []TenantConfig{{Name: "team-a", Secrets: []SecretConfig{{ID: "a1", Env: "GPUCACHE_TEAM_A_SECRET"}}}}
	environ := []string{
		"PATH=/bin", "GPUCACHE_HOT_CAPACITY=2GiB", "GPUCACHE_CONFIG=x.yaml",
		"GPUCACHE_ADDR=127.0.0.1:9400", "GPUCACHE_TLS_CA=ca.crt", // the CLI's
		"GPUCACHE_TEAM_A_SECRET=s3cret", // named by the config
	}
	if w, err := CheckEnv(c, environ); err != nil || len(w) != 0 {
		t.Fatalf("legitimate variables: warnings %q, err %v", w, err)
	}
	w, err := CheckEnv(c, append(environ, "GPUCACHE_SOMETHING_ELSE=1"))
	if err != nil || len(w) != 1 || !strings.Contains(w[0], "GPUCACHE_SOMETHING_ELSE is not a gpucached setting") {
		t.Fatalf("unrelated variable: warnings %q, err %v; want one warning", w, err)
	}
	_, err = CheckEnv(c, append(environ, "GPUCACHE_HOT_CAPCITY=2GiB", "GPUCACHE_TEAM_B_SECRET=x"))
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "GPUCACHE_HOT_CAPCITY is not a gpucached setting; did you mean GPUCACHE_HOT_CAPACITY?") {
		t.Fatalf("typo: %v", err)
	}
	// Every setting's own variable is accepted.
	for _, f := range c.fields() {
		if _, err := CheckEnv(c, []string{EnvName(f.key) + "=x"}); err != nil {
			t.Errorf("%s: %v", EnvName(f.key), err)
		}
	}
	if got := c.SecretEnvs(); !slices.Equal(got, []string{"GPUCACHE_TEAM_A_SECRET"}) {
		t.Errorf("SecretEnvs = %q", got)
	}
}

func TestHumanSize(t *testing.T) {
	for _, c := range []struct {
		b    ByteSize
		want string
	}{
		{24683548 << 10, "23.5 GiB"},
		{1 << 30, "1GiB"},
		{64 << 20, "64MiB"},
		{1536 << 10, "1536KiB"},
		{1572928, "1.5 MiB"},
		{100, "100 bytes"},
	} {
		if got := c.b.Human(); got != c.want {
			t.Errorf("%d: %q, want %q", int64(c.b), got, c.want)
		}
	}
}
