//go:build !dpu_bf3

package dpu

import "errors"

// BuildTag reports whether the build used the dpu_bf3 tag.
const BuildTag = false

// probe is never called without the tag: nothing is probed.
func probe(string) (string, error) {
	return "", errors.New("not probed")
}
