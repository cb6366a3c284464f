// Package lint holds checks over the module's own source, run by go test:
// conventions that vet and staticcheck do not know. It has no code.
//
// sentinel_test.go: every package-level sentinel error (errors.New or
// fmt.Errorf in a var declaration) starts with "gpucache/<pkg>: ", where
// <pkg> is the package name or a path ending in it, or wraps such a
// sentinel of its own package with a leading %w.
//
// benchdocs_test.go: the benchmark record holds together. Every relative
// link in docs/BENCHMARKS.md and docs/benchmarks/*.md, and every link from
// another markdown file into them, names an existing file and heading;
// every file under docs/benchmarks/<date>/ (raw outputs, transcribed
// tables) is linked from docs/benchmarks/<date>.md, and every dated record
// from docs/BENCHMARKS.md.
//
// root_test.go: the repository root holds only an allow-listed set of
// entries (README, licences, module files, the source tree), on disk
// outside .gitignore and in git's index, so working notes such as
// STATUS-*.md cannot be committed there again.
//
// testscript_test.go: scripts/test's arguments. --help prints the usage,
// an unknown argument exits 2, --list and --fast --list name the stages
// (the full run has the end-to-end and engine stages, --fast names them as
// skipped), and .ci/run runs the whole suite, not --fast.
package lint
