package identity

import "testing"

// Validate runs for every block a server stores (the PUT path checks each
// block's identity): a valid identity is checked without allocating.
func TestValidateDoesNotAllocate(t *testing.T) {
	id := CacheIdentity{Namespace: testNamespace(), Tokens: []uint32{1, 2, 3}, ValidLength: 3}
	if err := id.Validate(); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { _ = id.Namespace.Validate() }); n != 0 {
		t.Errorf("Namespace.Validate: %v allocations, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() { _ = id.Validate() }); n != 0 {
		t.Errorf("CacheIdentity.Validate: %v allocations, want 0", n)
	}
}
