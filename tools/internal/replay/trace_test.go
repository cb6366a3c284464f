package replay

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
)

func TestReadTrace(t *testing.T) {
	in := `{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}

{"timestamp": 27, "input_length": 512, "output_length": 0, "hash_ids": [0]}
{"timestamp": 30, "input_length": 10, "output_length": 1, "hash_ids": [7], "extra": true}
`
	reqs, err := ReadTrace(strings.NewReader(in), 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []Request{
		{Timestamp: 0, InputLength: 600, OutputLength: 5, HashIDs: []uint64{0, 1}},
		{Timestamp: 27, InputLength: 512, OutputLength: 0, HashIDs: []uint64{0}},
		{Timestamp: 30, InputLength: 10, OutputLength: 1, HashIDs: []uint64{7}},
	}
	if len(reqs) != len(want) {
		t.Fatalf("%d requests", len(reqs))
	}
	for i := range want {
		if reqs[i].Timestamp != want[i].Timestamp || reqs[i].InputLength != want[i].InputLength ||
			reqs[i].OutputLength != want[i].OutputLength || !slices.Equal(reqs[i].HashIDs, want[i].HashIDs) {
			t.Fatalf("request %d: %+v, want %+v", i, reqs[i], want[i])
		}
	}
	if UniqueBlocks(reqs) != 3 {
		t.Fatalf("UniqueBlocks %d", UniqueBlocks(reqs))
	}
	reqs, err = ReadTrace(strings.NewReader(in), 2)
	if err != nil || len(reqs) != 2 {
		t.Fatalf("limit 2: %d requests, %v", len(reqs), err)
	}
	// No trailing newline.
	reqs, err = ReadTrace(strings.NewReader(strings.TrimSpace(in)), 0)
	if err != nil || len(reqs) != 3 {
		t.Fatalf("no final newline: %d requests, %v", len(reqs), err)
	}
}

func TestReadTraceErrors(t *testing.T) {
	good := `{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}` + "\n"
	for _, c := range []struct{ name, line, want string }{
		{"malformed", `{"timestamp": 0, "input_length": 6`, "line 3"},
		{"not an object", `[1, 2]`, "line 3"},
		{"negative input", `{"input_length": -1, "output_length": 0, "hash_ids": [1]}`, "negative input_length"},
		{"negative output", `{"input_length": 1, "output_length": -5, "hash_ids": [1]}`, "negative output_length"},
		{"no hash ids", `{"input_length": 1, "output_length": 0, "hash_ids": []}`, "no hash_ids"},
		{"misspelt field", `{"input_length": 1, "output_length": 0, "hashids": [1]}`, "no hash_ids"},
		{"negative hash", `{"input_length": 1, "output_length": 0, "hash_ids": [-1]}`, "line 3"},
		{"string length", `{"input_length": "1", "output_length": 0, "hash_ids": [1]}`, "line 3"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ReadTrace(strings.NewReader(good+"\n"+c.line+"\n"+good), 0)
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), "line 3") || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q, want it to name line 3 and say %q", err, c.want)
			}
		})
	}
	// A read error is reported.
	_, err := ReadTrace(iotest.ErrReader(errors.New("disk on fire")), 0)
	if err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("read error: %v", err)
	}
	// A line over the limit is an error, not a silent truncation.
	long := `{"input_length": 1, "output_length": 0, "hash_ids": [` + strings.Repeat("1,", maxLine/2) + `1]}`
	_, err = ReadTrace(strings.NewReader(good+long+"\n"), 0)
	if err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("long line: %v", err)
	}
}

func TestPromptBlocks(t *testing.T) {
	for _, c := range []struct {
		input  int
		n      int
		tokens []uint32
	}{
		{600, 2, []uint32{512, 88}},
		{1024, 2, []uint32{512, 512}},
		{1, 1, []uint32{1}},
		{0, 1, []uint32{1}},             // clamped up
		{5000, 2, []uint32{512, 512}},   // clamped down
		{100, 3, []uint32{512, 512, 1}}, // input shorter than the blocks
		{1500, 3, []uint32{512, 512, 476}},
	} {
		r := Request{InputLength: c.input, HashIDs: make([]uint64, c.n)}
		for i := range r.HashIDs {
			r.HashIDs[i] = uint64(10 + i)
		}
		bs := PromptBlocks(r)
		if len(bs) != c.n {
			t.Fatalf("%d blocks", len(bs))
		}
		for i, b := range bs {
			if b.Hash != uint64(10+i) || b.Position != uint32(i) || b.Tokens != c.tokens[i] || b.Partial != (c.tokens[i] < BlockTokens) {
				t.Fatalf("input %d, block %d: %+v, want %d tokens", c.input, i, b, c.tokens[i])
			}
			pb := b.Block(7, 3)
			if pb.ID != 7 || pb.Parent != 3 || pb.Position != b.Position || pb.Tokens != b.Tokens || pb.Partial != b.Partial {
				t.Fatalf("Block(): %+v", pb)
			}
		}
	}
}

// FuzzReadTrace: ReadTrace never panics; what it accepts is valid and
// survives a round trip through JSON.
func FuzzReadTrace(f *testing.F) {
	f.Add([]byte(`{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, 2]}` + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		reqs, err := ReadTrace(bytes.NewReader(data), 0)
		if err != nil {
			if !strings.Contains(err.Error(), "line ") {
				t.Fatalf("error without a line number: %v", err)
			}
			return
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		for _, r := range reqs {
			if r.InputLength < 0 || r.OutputLength < 0 || len(r.HashIDs) == 0 {
				t.Fatalf("invalid request accepted: %+v", r)
			}
			for _, b := range PromptBlocks(r) {
				if b.Tokens < 1 || b.Tokens > BlockTokens {
					t.Fatalf("block of %d tokens", b.Tokens)
				}
			}
			if err := enc.Encode(r); err != nil {
				t.Fatal(err)
			}
		}
		again, err := ReadTrace(&buf, 0)
		if err != nil {
			t.Fatalf("re-reading what was accepted: %v", err)
		}
		if len(again) != len(reqs) {
			t.Fatalf("%d requests, then %d", len(reqs), len(again))
		}
		for i := range reqs {
			if !slices.Equal(again[i].HashIDs, reqs[i].HashIDs) || again[i].InputLength != reqs[i].InputLength {
				t.Fatalf("request %d changed in a round trip", i)
			}
		}
		if len(reqs) > 0 {
			if _, err := Simulate(reqs, "lru", 0.5, nil); err != nil {
				t.Fatal(err)
			}
		}
	})
}
