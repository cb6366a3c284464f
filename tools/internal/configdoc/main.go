// Command configdoc writes docs/CONFIG.md, the table of gpucached's
// settings, from the source of internal/config: each field of Config (and
// of the structs its fields hold: tenants, secrets, RESP profiles) with its
// YAML key, its type, its default from config.Default and its doc comment.
//
//	go run ./tools/internal/configdoc          # rewrite docs/CONFIG.md
//	go run ./tools/internal/configdoc -check   # exit 1 if it is out of date
//
// A field is described by its own comment, or, when it has none, by the
// comment of the field declared right above it (a group such as tls_cert
// and tls_key). A field with neither is an error, so a new setting cannot
// reach the table undocumented. TestConfigDocUpToDate runs the -check
// comparison.
package main

import (
	"path/filepath"

	"github.com/gpucache/gpucache/tools/internal/gendoc"
)

// FileName is the generated file, relative to the module root.
var FileName = filepath.Join("docs", "CONFIG.md")

// Command is what regenerates FileName.
const Command = "go run ./tools/internal/configdoc"

// doc is the generated file, for main and the tests.
var generated = gendoc.Doc{Name: "configdoc", File: FileName, Command: Command, Source: "internal/config", Generate: Generate}

func main() { generated.Main() }

// moduleRoot is the repository root (gendoc.ModuleRoot: the product
// module's go.mod, above the tools' own).
func moduleRoot() (string, error) { return gendoc.ModuleRoot() }
