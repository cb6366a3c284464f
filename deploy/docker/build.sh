#!/bin/sh
# deploy/docker/build.sh OUT: builds gpucached as the container image
# carries it, into OUT/gpucached (default /out). The Dockerfile's build
# stage runs this script, and deploy/check TestImageBuildScript runs the
# same script on this machine (no container runtime here) and checks its
# result: a static binary (CGO_ENABLED=0, no ELF interpreter, no shared
# libraries), built with -trimpath, that runs as the image's non-root uid.
#
# gpucached needs no cgo: golang.org/x/sys and the rest are pure Go.
# -s -w drops the symbol table and DWARF (profiles still symbolize from
# the pclntab); the build information (go version -m) stays.
set -eu
out="${1:-/out}"
cd "$(dirname "$0")/../.."
mkdir -p "$out"
CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$out/gpucached" ./cmd/gpucached
