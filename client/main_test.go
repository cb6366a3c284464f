package client

import (
	"testing"

	"go.uber.org/goleak"
)

// The tests here need no server (fake peers, encodings, fuzzing); those
// against real servers, and the runnable examples, are in the product
// module's internal/clienttest (ADR 0028).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
