package server

import (
	"encoding/hex"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/testfix"
)

// stampGolden is the part of internal/security/antireplay/testdata/stamp_golden.json
// this test uses.
type stampGolden struct {
	Stamps []struct {
		UnixNano int64  `json:"unix_nanos"`
		Hex      string `json:"hex"`
	} `json:"stamps"`
	Legacy []struct {
		BigEndianUnixNano int64  `json:"big_endian_unix_nanos"`
		Hex               string `json:"hex"`
	} `json:"legacy_big_endian"`
}

// TestReplayStampGoldenOnTheWire sends the golden vector's exact bytes as a
// PUT's stamp, with the server's clock at the vector's time: the server
// parses them as the spec says (little-endian). The same stamp written
// big-endian, as clients before ADR 0012 did, is REPLAY and says why.
func TestReplayStampGoldenOnTheWire(t *testing.T) {
	raw, err := os.ReadFile("../security/antireplay/testdata/stamp_golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g stampGolden
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	var vec []byte
	var at int64
	for _, v := range g.Stamps {
		if v.UnixNano > int64(1e18) && v.UnixNano < int64(4e18) { // a date this century
			vec, at = mustHex(t, v.Hex), v.UnixNano
		}
	}
	if vec == nil || len(g.Legacy) == 0 {
		t.Fatal("golden file lacks a present-day vector or a legacy one")
	}
	f := startSecure(t, nil)
	f.clock.Set(time.Unix(0, at))
	ns := testNamespace("acme")
	blob := mustCanonical(t, ns)
	ids, keys := chainIDs(t, ns, 2, 21)
	c := f.dial(t, secretA)
	put := func(i int, sb []byte) answer {
		id := c.sendStampBytes(wire.OpPut, putBody(blob, []wire.PutBlock{putBlock(keys[i], ids[i], 100)}, [][]byte{testfix.Payload(100, byte(i))}), sb)
		h, b := c.recv()
		if h.RequestID != id {
			t.Fatal("out of order")
		}
		return answer{h, b}
	}
	if e := errOf(t, put(0, vec)); e != nil {
		t.Fatalf("golden stamp at its own time: %v", e)
	}
	wantErr(t, "golden stamp again", put(1, vec), wire.CodeReplay)

	f.clock.Set(time.Unix(0, g.Legacy[0].BigEndianUnixNano))
	e := wantErr(t, "big-endian stamp", put(1, mustHex(t, g.Legacy[0].Hex)), wire.CodeReplay)
	if !strings.Contains(e.Message, "big-endian") {
		t.Fatalf("the refusal does not name the byte order: %q", e.Message)
	}
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
