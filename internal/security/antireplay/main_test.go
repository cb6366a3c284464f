package antireplay

import (
	"testing"

	"go.uber.org/goleak"
)

// TestConcurrentCheck starts goroutines; none may outlive a test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
