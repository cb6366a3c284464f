package config

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// hot_erasure_coding is refused from every source, with a message naming
// the ADR; turning it off again is valid.
func TestHotErasureCodingIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpucached.yaml")
	if err := os.WriteFile(path, []byte("hot_erasure_coding: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, load := range map[string]func() (Config, error){
		"flag": func() (Config, error) { return Load([]string{"--hot-erasure-coding"}, env(nil), io.Discard) },
		"env": func() (Config, error) {
			return Load(nil, env(map[string]string{"GPUCACHE_HOT_ERASURE_CODING": "true"}), io.Discard)
		},
		"file": func() (Config, error) { return Load([]string{"--config", path}, env(nil), io.Discard) },
	} {
		_, err := load()
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "hot_erasure_coding cannot be enabled") ||
			!strings.Contains(err.Error(), HotErasureCodingADR) || !strings.Contains(err.Error(), "no replicas") {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if _, err := Load([]string{"--hot-erasure-coding=false"}, env(nil), io.Discard); err != nil {
		t.Fatalf("off: %v", err)
	}
}

// The ablation knobs are off by default and can be turned on from every
// source: they are valid settings (the daemon only logs NOT_RUN_HARDWARE).
func TestAblationKnobs(t *testing.T) {
	if d := Default(); d.AblationP2P || d.AblationDPA || d.HotErasureCoding {
		t.Fatalf("defaults: %+v", d)
	}
	c, err := Load([]string{"--ablation-p2p"}, env(map[string]string{"GPUCACHE_ABLATION_DPA": "true"}), io.Discard)
	if err != nil || !c.AblationP2P || !c.AblationDPA {
		t.Fatalf("%v p2p=%t dpa=%t", err, c.AblationP2P, c.AblationDPA)
	}
}
