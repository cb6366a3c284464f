package antireplay

import (
	"time"

	"github.com/gpucache/gpucache/api/stamp"
)

// The stamp's encoding lives in the public package api/stamp, shared with
// the client module (ADR 0028); these are its names here.

// ErrMalformed reports a stamp that does not parse (stamp.ErrMalformed).
var ErrMalformed = stamp.ErrMalformed

// StampSize is the wire size of a Stamp (stamp.Size).
const StampSize = stamp.Size

// Stamp is the replay-protection header of one mutating request
// (stamp.Stamp).
type Stamp = stamp.Stamp

// NewStamp returns a stamp for t with the given nonce (stamp.New).
func NewStamp(t time.Time, nonce [16]byte) Stamp { return stamp.New(t, nonce) }

// ParseStamp parses exactly StampSize bytes (stamp.Parse).
func ParseStamp(b []byte) (Stamp, error) { return stamp.Parse(b) }
