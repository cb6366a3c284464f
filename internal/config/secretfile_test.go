package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestSecretFilesMustBeRegular: a secret file (a tenant secret, a seal key,
// etcd_password_file) that is a FIFO, a device or a directory is refused
// at once with an error naming the file; opening a FIFO to read it used to
// wait for a writer forever, and startup with it.
func TestSecretFilesMustBeRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "secret.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{fifo, dir, "/dev/zero"} {
		if _, err := os.Stat(path); err != nil {
			t.Logf("%s: %v; skipped", path, err)
			continue
		}
		_, _, err := SecretConfig{ID: "s", File: path}.Read(nil)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("secret file %s: %v, want a refusal naming it", path, err)
		}
		_, err = Config{EtcdPasswordFile: path}.EtcdPassword()
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("etcd_password_file %s: %v, want a refusal naming it", path, err)
		}
	}
}

// TestSecretFilesAreBounded: a secret file larger than MaxSecretFile is
// refused, naming the file, without reading it whole; one of exactly
// MaxSecretFile bytes is read.
func TestSecretFilesAreBounded(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, []byte(strings.Repeat("k", MaxSecretFile+1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := (SecretConfig{ID: "s", File: big}).Read(nil); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), big) {
		t.Errorf("oversized secret file: %v", err)
	}
	if _, err := (Config{EtcdPasswordFile: big}).EtcdPassword(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), big) {
		t.Errorf("oversized etcd_password_file: %v", err)
	}
	fits := filepath.Join(dir, "fits")
	if err := os.WriteFile(fits, []byte(strings.Repeat("k", MaxSecretFile)), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, _, err := (SecretConfig{ID: "s", File: fits}).Read(nil); err != nil || len(b) != MaxSecretFile {
		t.Errorf("secret file of MaxSecretFile bytes: %d bytes, %v", len(b), err)
	}
}
