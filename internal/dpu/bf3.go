//go:build dpu_bf3

package dpu

import (
	"errors"
	"os"
	"strings"
)

// BuildTag reports whether the build used the dpu_bf3 tag.
const BuildTag = true

// probe reports what is at path: the entries of a directory, or the name
// of a file. It opens no device: a directory is listed, a file is stat'd.
func probe(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if !fi.IsDir() {
		return fi.Name(), nil
	}
	ents, err := os.ReadDir(path)
	if err != nil {
		return "", err
	}
	if len(ents) == 0 {
		return "", errors.New("empty")
	}
	names := make([]string, 0, min(len(ents), 8))
	for _, e := range ents[:min(len(ents), 8)] {
		names = append(names, e.Name())
	}
	return strings.Join(names, ","), nil
}
