package replay

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// traceName is the Mooncake conversation trace: the public production
// trace of Moonshot AI's Kimi service released with the Mooncake paper
// (FAST'25), conversation_trace.jsonl under FAST25-release/traces in
// github.com/kvcache-ai/Mooncake, one request a line (timestamp,
// input_length, output_length, hash_ids of 512-token blocks). It is not
// committed here; put it at shared/traces/traceName in a directory above
// the working directory (../shared/traces from the repository root). The
// tests that need it skip without it.
const traceName = "mooncake-conversation-trace.jsonl"

// tracePath finds shared/traces/traceName in the working directory or any
// directory above it (the repository is a sibling of shared/), or "".
func tracePath() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		p := filepath.Join(dir, "shared", "traces", traceName)
		if _, err := os.Stat(p); err == nil {
			return p
		}
		up := filepath.Dir(dir)
		if up == dir {
			return ""
		}
		dir = up
	}
}

var (
	traceOnce sync.Once
	traceReqs []Request
	traceErr  error
)

// conversationTrace returns the parsed trace, read once; it skips the test
// when the trace is not there.
func conversationTrace(tb testing.TB) []Request {
	tb.Helper()
	p := tracePath()
	if p == "" {
		tb.Skipf("%s not found in shared/traces above %s", traceName, mustWd())
	}
	traceOnce.Do(func() {
		f, err := os.Open(p)
		if err != nil {
			traceErr = err
			return
		}
		defer f.Close()
		traceReqs, traceErr = ReadTrace(f, 0)
	})
	if traceErr != nil {
		tb.Fatal(traceErr)
	}
	return traceReqs
}

func mustWd() string {
	d, _ := os.Getwd()
	return d
}

// conversationPrefix returns the first n requests of the trace, parsing
// only those; it skips the test when the trace is not there.
func conversationPrefix(tb testing.TB, n int) []Request {
	tb.Helper()
	p := tracePath()
	if p == "" {
		tb.Skipf("%s not found in shared/traces above %s", traceName, mustWd())
	}
	f, err := os.Open(p)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	reqs, err := ReadTrace(f, n)
	if err != nil {
		tb.Fatal(err)
	}
	return reqs
}
