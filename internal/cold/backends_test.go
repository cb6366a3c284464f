package cold_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/cold/coldtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestMemStoreSuite(t *testing.T) {
	coldtest.RunStoreSuite(t, func(t *testing.T) cold.Store { return cold.NewMem() })
}

func TestFSStoreSuite(t *testing.T) {
	coldtest.RunStoreSuite(t, func(t *testing.T) cold.Store { return newFS(t) })
}

func newFS(t *testing.T) *cold.FS {
	t.Helper()
	s, err := cold.NewFS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s
}
