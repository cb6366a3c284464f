package resp

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func newTestReader(s string, lim Limits) *Reader {
	br := bufio.NewReaderSize(strings.NewReader(s), 16)
	return NewReader(br, nil, lim)
}

func TestReadCommandDefersLargeLastArgument(t *testing.T) {
	payload := strings.Repeat("x", 100)
	in := "*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$100\r\n" + payload + "\r\n*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n"
	r := newTestReader(in, Limits{MaxArg: 16, MaxBulk: 1000})
	cmd, err := r.ReadCommand()
	if err != nil {
		t.Fatal(err)
	}
	if len(cmd.Args) != 2 || string(cmd.Args[0]) != "SET" || string(cmd.Args[1]) != "key" || cmd.Pending != 100 {
		t.Fatalf("got %q pending %d", cmd.Args, cmd.Pending)
	}
	if _, err := r.ReadCommand(); !errors.Is(err, ErrProtocol) {
		t.Fatalf("ReadCommand with a pending argument: %v", err)
	}
	dst := make([]byte, 100)
	if err := r.ReadPending(dst); err != nil || string(dst) != payload {
		t.Fatalf("ReadPending: %v", err)
	}
	cmd, err = r.ReadCommand()
	if err != nil || len(cmd.Args) != 2 || string(cmd.Args[0]) != "GET" || cmd.Pending != -1 {
		t.Fatalf("second command %q %v", cmd.Args, err)
	}
	if _, err := r.ReadCommand(); err != io.EOF {
		t.Fatalf("at the end: %v", err)
	}
}

// TestCommandNameIsNeverDeferred: a command whose only argument (so its
// last) is longer than MaxArg is refused, not returned with an empty Args
// and its name left on the stream.
func TestCommandNameIsNeverDeferred(t *testing.T) {
	for _, in := range []string{"*1\r\n$17\r\n", "*1\r\n$17\r\n" + strings.Repeat("P", 17) + "\r\n"} {
		r := newTestReader(in, Limits{MaxArg: 16, MaxBulk: 1000})
		cmd, err := r.ReadCommand()
		if !errors.Is(err, ErrTooLarge) {
			t.Fatalf("%q: %q pending %d, %v; want ErrTooLarge", in, cmd.Args, cmd.Pending, err)
		}
	}
	// The second argument may still be deferred.
	r := newTestReader("*2\r\n$4\r\nPING\r\n$17\r\n", Limits{MaxArg: 16, MaxBulk: 1000})
	if cmd, err := r.ReadCommand(); err != nil || len(cmd.Args) != 1 || cmd.Pending != 17 {
		t.Fatalf("%q pending %d, %v", cmd.Args, cmd.Pending, err)
	}
}

// TestReadPendingPart: the deferred argument read in parts, then the
// next command; a part of a truncated argument is an unexpected EOF; what
// is left after a part can be skipped.
func TestReadPendingPart(t *testing.T) {
	val := strings.Repeat("0123456789", 5)
	in := "*2\r\n$4\r\nPING\r\n$50\r\n" + val + "\r\n*1\r\n$4\r\nPING\r\n"
	for _, raw := range []bool{false, true} {
		src := strings.NewReader(in)
		br := bufio.NewReaderSize(src, 16)
		var rr io.Reader
		if raw {
			rr = src
		}
		r := NewReader(br, rr, Limits{MaxArg: 16, MaxBulk: 1000})
		if cmd, err := r.ReadCommand(); err != nil || cmd.Pending != 50 {
			t.Fatal(cmd, err)
		}
		var got []byte
		for len(got) < 50 {
			p := make([]byte, 7)
			n, err := r.ReadPendingPart(p)
			if err != nil {
				t.Fatalf("raw %v: after %d bytes: %v", raw, len(got), err)
			}
			got = append(got, p[:n]...)
		}
		if string(got) != val {
			t.Fatalf("raw %v: %q", raw, got)
		}
		if _, err := r.ReadPendingPart(make([]byte, 1)); !errors.Is(err, ErrProtocol) {
			t.Fatalf("a part after the end: %v", err)
		}
		if cmd, err := r.ReadCommand(); err != nil || string(cmd.Args[0]) != "PING" || len(cmd.Args) != 1 {
			t.Fatalf("raw %v: the next command: %q %v", raw, cmd.Args, err)
		}
	}
	r := newTestReader("*2\r\n$4\r\nPING\r\n$50\r\n0123456789"+strings.Repeat("x", 40)+"\r\n*1\r\n$4\r\nQUIT\r\n", Limits{MaxArg: 16, MaxBulk: 1000})
	r.ReadCommand()
	if n, err := r.ReadPendingPart(make([]byte, 10)); n != 10 || err != nil {
		t.Fatal(n, err)
	}
	if err := r.SkipPending(); err != nil {
		t.Fatal(err)
	}
	if cmd, err := r.ReadCommand(); err != nil || string(cmd.Args[0]) != "QUIT" {
		t.Fatalf("after a part and a skip: %q %v", cmd.Args, err)
	}
	r = newTestReader("*2\r\n$4\r\nPING\r\n$50\r\n0123", Limits{MaxArg: 16, MaxBulk: 1000})
	r.ReadCommand()
	r.ReadPendingPart(make([]byte, 10))
	if _, err := r.ReadPendingPart(make([]byte, 10)); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated: %v", err)
	}
}

func TestReadCommandSmallValueIsRead(t *testing.T) {
	r := newTestReader("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\nab\r\n", Limits{MaxArg: 16, MaxBulk: 1000})
	cmd, err := r.ReadCommand()
	if err != nil || len(cmd.Args) != 3 || string(cmd.Args[2]) != "ab" || cmd.Pending != -1 {
		t.Fatalf("%q %d %v", cmd.Args, cmd.Pending, err)
	}
}

func TestSkipPendingKeepsSync(t *testing.T) {
	r := newTestReader("*2\r\n$4\r\nECHO\r\n$40\r\n"+strings.Repeat("y", 40)+"\r\n*1\r\n$4\r\nPING\r\n", Limits{MaxArg: 8, MaxBulk: 100})
	cmd, err := r.ReadCommand()
	if err != nil || cmd.Pending != 40 {
		t.Fatal(cmd, err)
	}
	if err := r.SkipPending(); err != nil {
		t.Fatal(err)
	}
	cmd, err = r.ReadCommand()
	if err != nil || string(cmd.Args[0]) != "PING" {
		t.Fatal(cmd, err)
	}
}

func TestReadCommandRefusesBadInput(t *testing.T) {
	lim := Limits{MaxArgs: 4, MaxArg: 8, MaxArgBytes: 12, MaxBulk: 64}
	for name, in := range map[string]string{
		"inline":              "PING\r\n",
		"negative bulk":       "*1\r\n$-5\r\n",
		"garbage array len":   "*x\r\n",
		"garbage bulk len":    "*1\r\n$1z\r\nP\r\n",
		"huge array":          "*99999999999999999999\r\n",
		"too many args":       "*5\r\n",
		"oversized bulk":      "*2\r\n$3\r\nSET\r\n$65\r\n",
		"oversized small arg": "*2\r\n$9\r\n123456789\r\n$1\r\nx\r\n",
		"args over total":     "*3\r\n$8\r\n12345678\r\n$8\r\n12345678\r\n$1\r\nx\r\n",
		"missing crlf":        "*1\r\n$4\r\nPINGxx",
		"bad multibulk":       "*-2\r\n",
		"empty length":        "*\r\n",
		"not bulk":            "*1\r\n+PING\r\n",
		"long line":           "*1" + strings.Repeat("0", 30) + "\r\n",
		"lf only":             "*1\n",
	} {
		t.Run(name, func(t *testing.T) {
			r := newTestReader(in, lim)
			if _, err := r.ReadCommand(); !errors.Is(err, ErrProtocol) {
				t.Fatalf("%q: %v, want ErrProtocol", in, err)
			}
		})
	}
}

func TestReadCommandTruncated(t *testing.T) {
	full := "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\nab\r\n"
	for i := 1; i < len(full); i++ {
		r := newTestReader(full[:i], Limits{MaxBulk: 64})
		if _, err := r.ReadCommand(); err == nil {
			t.Fatalf("truncated at %d: no error", i)
		} else if errors.Is(err, io.EOF) {
			t.Fatalf("truncated at %d: plain EOF, want unexpected EOF: %v", i, err)
		}
	}
}

func TestEmptyArraysAreSkipped(t *testing.T) {
	r := newTestReader("*0\r\n*-1\r\n*1\r\n$4\r\nPING\r\n", Limits{MaxBulk: 64})
	cmd, err := r.ReadCommand()
	if err != nil || string(cmd.Args[0]) != "PING" {
		t.Fatal(cmd, err)
	}
}

// The reader never holds more than the argument limits, whatever is
// declared.
func TestReaderAllocationBounded(t *testing.T) {
	lim := Limits{MaxArgs: 1024, MaxArg: 4096, MaxArgBytes: 64 << 10, MaxBulk: 64 << 20}
	var b bytes.Buffer
	b.WriteString("*1024\r\n")
	for range 1023 {
		b.WriteString("$4096\r\n" + strings.Repeat("k", 4096) + "\r\n")
	}
	r := newTestReader(b.String(), lim)
	if _, err := r.ReadCommand(); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("%v", err)
	}
	if cap(r.buf) > lim.MaxArgBytes+2 {
		t.Fatalf("buffer grew to %d, max %d", cap(r.buf), lim.MaxArgBytes+2)
	}
}

func TestReplies(t *testing.T) {
	var b []byte
	b = append(b, OK...)
	b = AppendError(b, "ERR bad\r\nthing")
	b = AppendInt(b, -3)
	b = AppendBulk(b, []byte("hi"))
	b = AppendBulkHeader(b, 5)
	b = AppendArrayHeader(b, 0)
	want := "+OK\r\n-ERR bad  thing\r\n:-3\r\n$2\r\nhi\r\n$5\r\n*0\r\n"
	if string(b) != want {
		t.Fatalf("%q, want %q", b, want)
	}
}

func FuzzReader(f *testing.F) {
	for _, s := range []string{
		"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$20\r\n01234567890123456789\r\n",
		"*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n",
		"*1\r\n$4\r\nPING\r\n*0\r\n",
		"*2\r\n$6\r\nEXISTS\r\n$-1\r\n",
		"*1\r\n$99999999999999999\r\n",
		"*1\r\n$9\r\n",
		"PING\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		lim := Limits{MaxArgs: 8, MaxArg: 8, MaxArgBytes: 32, MaxBulk: 64}
		r := NewReader(bufio.NewReaderSize(bytes.NewReader(in), 16), nil, lim)
		for range 16 {
			cmd, err := r.ReadCommand()
			if err != nil {
				return
			}
			if len(cmd.Args) == 0 {
				t.Fatalf("a command without a name (pending %d)", cmd.Pending)
			}
			if len(cmd.Args) > lim.MaxArgs || cap(r.buf) > lim.MaxArgBytes+2 {
				t.Fatalf("limits exceeded: %d args, buffer %d", len(cmd.Args), cap(r.buf))
			}
			for _, a := range cmd.Args {
				if len(a) > lim.MaxArg {
					t.Fatalf("argument of %d bytes", len(a))
				}
			}
			if cmd.Pending > lim.MaxBulk {
				t.Fatalf("pending %d", cmd.Pending)
			}
			if cmd.Pending >= 0 {
				if err := r.SkipPending(); err != nil {
					return
				}
			}
		}
	})
}
