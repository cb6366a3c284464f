//go:build !(invariants || race)

package hot

import (
	"testing"
	"unsafe"
)

// TestReleaseBuildCarriesNoTicket: in a release build View and Reservation
// are a slice and a ref, as before the invariants build existed, and the
// checks are off.
func TestReleaseBuildCarriesNoTicket(t *testing.T) {
	want := unsafe.Sizeof([]byte(nil)) + unsafe.Sizeof(ref{})
	if got := unsafe.Sizeof(View{}); got != want {
		t.Fatalf("View is %d bytes, want %d", got, want)
	}
	if got := unsafe.Sizeof(Reservation{}); got != want {
		t.Fatalf("Reservation is %d bytes, want %d", got, want)
	}
	if got := unsafe.Sizeof(tracker{}); got != 0 {
		t.Fatalf("tracker is %d bytes in a release build", got)
	}
	if invariantsOn {
		t.Fatal("invariantsOn in a release build")
	}
}
