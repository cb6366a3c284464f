package cold_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpucache/gpucache/internal/cold"
)

func TestValidKey(t *testing.T) {
	good := []string{
		"a", "ns/objects/0123abcd", "a.b", ".hidden", "a/..b", "a/b..", "with space",
		"ünïcode/键", `back\slash`, strings.Repeat("k", cold.MaxKeyLen),
	}
	for _, k := range good {
		if err := cold.ValidKey(k); err != nil {
			t.Errorf("ValidKey(%q) = %v, want nil", k, err)
		}
	}
	bad := []string{
		"", "/a", "a/", "a//b", ".", "..", "../a", "a/..", "a/./b", "tab\there", "\x00",
		"del\x7f", "\xff\xfe", strings.Repeat("k", cold.MaxKeyLen+1),
	}
	for _, k := range bad {
		if err := cold.ValidKey(k); !errors.Is(err, cold.ErrInvalidKey) {
			t.Errorf("ValidKey(%q) = %v, want ErrInvalidKey", k, err)
		}
	}
}

func TestValidPrefix(t *testing.T) {
	for _, p := range []string{"", "a", "a/", "ns/objects/01", "a/.", "a/..b", strings.Repeat("k", cold.MaxKeyLen)} {
		if err := cold.ValidPrefix(p); err != nil {
			t.Errorf("ValidPrefix(%q) = %v, want nil", p, err)
		}
	}
	for _, p := range []string{"/", "/a", "a//", "../", "a/../", "x\n", strings.Repeat("k", cold.MaxKeyLen+1)} {
		if err := cold.ValidPrefix(p); !errors.Is(err, cold.ErrInvalidKey) {
			t.Errorf("ValidPrefix(%q) = %v, want ErrInvalidKey", p, err)
		}
	}
}
