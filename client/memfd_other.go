//go:build !amd64 && !arm64

package client

// sysMemfdCreate is unknown here: NewRegion fails (RegisterRegion works).
const sysMemfdCreate = 0
