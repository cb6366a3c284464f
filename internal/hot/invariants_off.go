//go:build !(invariants || race)

package hot

// The release build: the no-op stubs of invariants.go. Each is inlined
// away, and ticket and tracker are empty, so View, Reservation and Store
// are as they would be without the checks.

// invariantsOn reports whether this is the invariants build.
const invariantsOn = false

// ticket is empty in a release build: Views and Reservations carry nothing.
type ticket struct{}

// tracker is empty in a release build.
type tracker struct{}

func (s *Store) viewTicketLocked(ref) ticket                 { return ticket{} }
func (s *Store) resvTicketLocked(ref) ticket                 { return ticket{} }
func (s *Store) releaseTicketLocked(ticket, ref) bool        { return true }
func (s *Store) settleTicketLocked(ticket, ref, string) bool { return true }

// checkInvariants is checked only in the invariants build.
func (s *Store) checkInvariants() error { return nil }
