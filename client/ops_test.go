package client

import "testing"

func TestGetBatchEnd(t *testing.T) {
	lim := Limits{MaxBatch: 8, MaxFrame: 1 << 20, MaxPayload: 256 << 10}
	keys := make([]BlockKey, 20)
	// Unknown sizes: every block may be MaxPayload, so 3 fit a frame.
	if end := getBatchEnd(lim, keys, nil, 0); end != 3 {
		t.Fatalf("end %d, want 3", end)
	}
	// Known buffers of 64 KiB: MaxBatch binds first.
	dst := make([][]byte, 20)
	for i := range dst {
		dst[i] = make([]byte, 64<<10)
	}
	if end := getBatchEnd(lim, keys, dst, 4); end != 12 {
		t.Fatalf("end %d, want 12", end)
	}
	if end := getBatchEnd(lim, keys, dst, 16); end != 20 {
		t.Fatalf("end %d, want 20", end)
	}
	// A frame too small for even one block still sends one key.
	lim.MaxFrame = 10
	if end := getBatchEnd(lim, keys, nil, 0); end != 1 {
		t.Fatalf("end %d, want 1", end)
	}
}
