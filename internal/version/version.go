// Package version is the one version of gpucache and gpucached: both
// binaries print the same line (--version) from it.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/gpucache/gpucache/api/wire"
)

// Number is the release version of both binaries.
const Number = "0.1.0"

// Revision returns the VCS revision the binary was built from (12 hex
// digits, "+dirty" when the tree had changes), or "unknown" for a build
// without VCS information (go run, go test, a tarball).
func Revision() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev == "" {
		return "unknown"
	}
	return rev[:min(12, len(rev))] + dirty
}

// Line is the --version line of program: its name, the version, the
// revision, the wire protocol versions and the Go toolchain.
func Line(program string) string {
	return fmt.Sprintf("%s %s (revision %s, wire protocol v%d..v%d, %s %s/%s)", program, Number, Revision(),
		wire.Version1, wire.VersionMax, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
