package version

import (
	"strings"
	"testing"
)

// TestLineSameForBothBinaries: the two programs' lines differ only in the
// program name.
func TestLineSameForBothBinaries(t *testing.T) {
	a, b := Line("gpucache"), Line("gpucached")
	if strings.TrimPrefix(a, "gpucache ") != strings.TrimPrefix(b, "gpucached ") {
		t.Fatalf("%q and %q differ", a, b)
	}
	if !strings.Contains(a, Number) || !strings.Contains(a, "revision ") {
		t.Fatalf("line %q lacks the version or revision", a)
	}
}
