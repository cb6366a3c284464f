package main

import (
	"go/parser"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpucache/gpucache/internal/config"
)

// docs/CONFIG.md is exactly what the generator writes from the config
// source now: a field added, renamed or re-described without regenerating
// it fails here, with the command that fixes it.
func TestConfigDocUpToDate(t *testing.T) {
	generated.TestUpToDate(t)
}

// settingsKeys returns the keys in the first column of the Settings table.
func settingsKeys(doc string) []string {
	_, table, _ := strings.Cut(doc, "## Settings\n")
	table, _, _ = strings.Cut(table, "\n## ")
	var keys []string
	for _, l := range strings.Split(table, "\n") {
		cells := strings.Split(l, " | ")
		if !strings.HasPrefix(l, "| `") || len(cells) < 4 {
			continue
		}
		for _, k := range strings.Split(strings.TrimPrefix(cells[0], "| "), "<br>") {
			k, _, _ = strings.Cut(k, " (YAML only)")
			keys = append(keys, strings.Trim(k, "`"))
		}
	}
	return keys
}

// Every YAML key of config.Config has one row, with the default that
// config.Default() sets, and the YAML-only keys are marked.
func TestEverySettingHasARow(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	out, err := Generate(root)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(out)
	var want []string
	ct := reflect.TypeFor[config.Config]()
	for i := range ct.NumField() {
		if k, _, _ := strings.Cut(ct.Field(i).Tag.Get("yaml"), ","); k != "" && k != "-" {
			want = append(want, k)
		}
	}
	got := settingsKeys(doc)
	if !slices.Equal(got, want) {
		t.Fatalf("settings table keys:\n%q\nconfig.Config's YAML keys:\n%q", got, want)
	}
	for _, s := range []string{
		"| `hot_capacity` | size | `1GiB` |",
		"| `cold_dir` | string | `./gpucache-data` |",
		"| `lease_ttl` | duration | `5s` |",
		"| `cold_retention_interval` | duration | `1h` |",
		"| `tenants` (YAML only) | list of [TenantConfig](#tenantconfig) | — |",
		"\n## TenantConfig\n",
		"| `dram_quota` | size |",
		"Used as `seal_keys[]`, `cold_encryption_keys[]`, `tenants[].secrets[]` (YAML only).",
	} {
		if !strings.Contains(doc, s) {
			t.Errorf("CONFIG.md lacks %q", s)
		}
	}
}

const sample = `package config

import "time"

// Config is a sample.
type Config struct {
	// Addr is the address | port. Default *any*.
	Addr string ` + "`yaml:\"addr\"`" + `
	// CertFile and KeyFile turn on TLS; see Addr and ` + "`Addr`" + `.
	CertFile string ` + "`yaml:\"cert_file\"`" + `
	KeyFile  string ` + "`yaml:\"key_file\"`" + `
	Wait time.Duration ` + "`yaml:\"wait\"`" + ` // how long to wait
	Items []Item ` + "`yaml:\"items\"`" + ` // the items
	hidden int
	Skipped int ` + "`yaml:\"-\"`" + `
}

// Item is one item.
type Item struct {
	// Size is its size.
	Size ByteSize ` + "`yaml:\"size\"`" + `
}
`

func sampleSource(t *testing.T, src string) *source {
	t.Helper()
	s := newSource()
	f, err := parser.ParseFile(s.fset, "sample.go", src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	s.add(f)
	return s
}

// A comment covers the uncommented fields right below it; Go field names
// in comments become YAML keys (not inside code spans); Markdown's
// specials are escaped; nested structs get their own table.
func TestRender(t *testing.T) {
	s := sampleSource(t, sample)
	defs := map[string]string{"addr": "127.0.0.1:1|2", "cert_file": "", "key_file": "", "wait": "5s", "items": ""}
	out, err := s.render(defs, []string{"addr", "cert_file", "key_file", "wait"})
	if err != nil {
		t.Fatal(err)
	}
	doc := string(out)
	for _, want := range []string{
		"| `addr` | string | `127.0.0.1:1\\|2` | The address \\| port. Default \\*any\\*. |",
		"| `cert_file`<br>`key_file` | string | — | `cert_file` and `key_file` turn on TLS; see `addr` and `Addr`. |",
		"| `wait` | duration | `5s` | how long to wait |",
		"| `items` (YAML only) | list of [Item](#item) | — | the items |",
		"## Item\n\nUsed as `items[]` (YAML only). Item is one item.",
		"| `size` | size | Its size. |",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("rendered doc lacks %q:\n%s", want, doc)
		}
	}
	if strings.Contains(doc, "hidden") || strings.Contains(doc, "Skipped") {
		t.Errorf("rendered doc lists a field without a YAML key:\n%s", doc)
	}
}

// A setting with no comment of its own, not directly below a commented
// one, stops the generator and names the field.
func TestUndocumentedFieldIsAnError(t *testing.T) {
	s := sampleSource(t, `package config

// Config is a sample.
type Config struct {
	// A is documented.
	A int `+"`yaml:\"a\"`"+`

	B int `+"`yaml:\"b\"`"+`
}
`)
	_, err := s.render(map[string]string{"a": "0", "b": "0"}, nil)
	if err == nil || !strings.Contains(err.Error(), "Config.B (b) has no doc comment") {
		t.Fatalf("render: %v, want an error naming Config.B", err)
	}
}

// A setting missing from the defaults (a key the generator cannot find in
// config.Default()) is an error, not an empty cell.
func TestMissingDefaultIsAnError(t *testing.T) {
	s := sampleSource(t, sample)
	_, err := s.render(map[string]string{"addr": ""}, nil)
	if err == nil || !strings.Contains(err.Error(), "cert_file has no value") {
		t.Fatalf("render: %v, want an error naming cert_file", err)
	}
}

func TestShortDuration(t *testing.T) {
	for d, want := range map[string]string{"0s": "0", "5s": "5s", "5m": "5m", "24h": "24h", "1h30m": "1h30m", "1500ms": "1.5s"} {
		v, err := time.ParseDuration(d)
		if err != nil {
			t.Fatal(err)
		}
		if got := shortDuration(v); got != want {
			t.Errorf("shortDuration(%s) = %q, want %q", d, got, want)
		}
	}
}
