package main

import (
	"os"

	"github.com/gpucache/gpucache/internal/daemon"
)

func main() { os.Exit(daemon.Main(os.Args[1:], os.Stdout, os.Stderr)) }
