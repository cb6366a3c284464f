package wire_test

import (
	"testing"

	"github.com/gpucache/gpucache/api/wire"
)

// The wire limits are a published contract: the package comment (doc.go,
// doc_status.go; docs/PROTOCOL.md is generated from it), "Limits" (the
// table) and "Connection and frames". Clients in other languages (python/gpucache) hard-code
// them from that page, so a change of a constant here must be a change of
// the protocol document first. The
// other tests read the constants; this one compares them with the
// documented literals.
func TestPinnedProtocolLimits(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want int
		where     string
	}{
		{"FrameVersion", int(wire.FrameVersion), 1, "PROTOCOL.md Connection and frames: frame version (FrameVersion, 1)"},
		{"HeaderSize", wire.HeaderSize, 24, "PROTOCOL.md Connection and frames: 24-byte header"},
		{"KeySize", wire.KeySize, 32, "SHA-256 block keys and namespace digests"},
		{"Version1", int(wire.Version1), 1, "PROTOCOL.md Versioning"},
		{"Version2", int(wire.Version2), 2, "PROTOCOL.md Versioning: cluster mode"},
		{"Version3", int(wire.Version3), 3, "PROTOCOL.md PUT_OPAQUE: Version 3"},
		{"Version4", int(wire.Version4), 4, "PROTOCOL.md Block statuses: version 4 adds READ_ONLY"},
		{"DefaultMaxFrame", wire.DefaultMaxFrame, 65 << 20, "PROTOCOL.md Limits: MaxFrame default 65 MiB"},
		{"DefaultMaxBatch", wire.DefaultMaxBatch, 1024, "PROTOCOL.md Limits: MaxBatch default 1024"},
		{"DefaultMaxInFlight", wire.DefaultMaxInFlight, 64, "PROTOCOL.md Limits: MaxInFlight default 64"},
		{"MaxStringLen", wire.MaxStringLen, 256, "PROTOCOL.md Limits: 256 bytes per str"},
		{"MaxNamespaceLen", wire.MaxNamespaceLen, 4096, "PROTOCOL.md Limits: 4096 bytes per namespace blob"},
		{"MaxPingLen", wire.MaxPingLen, 1024, "PROTOCOL.md Limits: 1024 bytes of PING body"},
		{"MaxStatEntries", wire.MaxStatEntries, 256, "PROTOCOL.md Limits: 256 STAT entries"},
		{"MaxMembers", wire.MaxMembers, 4096, "PROTOCOL.md Limits: 4096 members"},
		{"MaxBlockTokens", wire.MaxBlockTokens, 65536, "PROTOCOL.md Limits: 65536 token ids per entry"},
		{"MaxRequestTokens", wire.MaxRequestTokens, 1 << 20, "PROTOCOL.md Limits: 1 << 20 token ids per table"},
		{"MaxOpaqueName", wire.MaxOpaqueName, 1024, "PROTOCOL.md PUT_OPAQUE: name_len 1..1024"},
	} {
		if c.got != c.want {
			t.Errorf("wire.%s = %d, the protocol document fixes %d (%s)", c.name, c.got, c.want, c.where)
		}
	}
}
