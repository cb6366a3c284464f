package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// A flood can run in a process of its own, so that the noisy tenant's
// client competes with the victim's for the machine's CPUs the way two
// separate clients would, not inside one Go scheduler. The two processes
// speak a line protocol over the child's stdin and stdout:
//
//	child:  ready              (working set written, connections up)
//	parent: start      child: started | error MSG
//	parent: stop       child: {FloodStats as JSON} | error MSG
//
// The child exits when its stdin closes.

// ServeFlood serves the flood protocol for f on in and out until in ends
// or ctx does.
func ServeFlood(ctx context.Context, in io.Reader, out io.Writer, f Flooder) error {
	if _, err := io.WriteString(out, "ready\n"); err != nil {
		return err
	}
	running := false
	defer func() {
		if running {
			f.Stop()
		}
	}()
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var reply string
		switch cmd := strings.TrimSpace(sc.Text()); cmd {
		case "start":
			if err := f.Start(ctx); err != nil {
				reply = "error " + oneLineErr(err)
			} else {
				running, reply = true, "started"
			}
		case "stop":
			running = false
			st, err := f.Stop()
			if err != nil {
				reply = "error " + oneLineErr(err)
				break
			}
			b, err := json.Marshal(st)
			if err != nil {
				return err
			}
			reply = string(b)
		case "":
			continue
		default:
			reply = fmt.Sprintf("error unknown command %q", cmd)
		}
		if _, err := io.WriteString(out, reply+"\n"); err != nil {
			return err
		}
	}
	return sc.Err()
}

func oneLineErr(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }

// RemoteFlood drives a flood served by ServeFlood in another process.
type RemoteFlood struct {
	w io.Writer
	r *bufio.Reader
}

// NewRemoteFlood talks to a ServeFlood whose input is w and whose output
// is r; it waits for the server's ready line.
func NewRemoteFlood(w io.Writer, r io.Reader) (*RemoteFlood, error) {
	f := &RemoteFlood{w: w, r: bufio.NewReader(r)}
	line, err := f.line()
	if err != nil {
		return nil, fmt.Errorf("flood process: %w", err)
	}
	if line != "ready" {
		return nil, fmt.Errorf("flood process: %s", strings.TrimPrefix(line, "error "))
	}
	return f, nil
}

func (f *RemoteFlood) line() (string, error) {
	s, err := f.r.ReadString('\n')
	if err != nil {
		if errors.Is(err, io.EOF) {
			return "", errors.New("flood process ended")
		}
		return "", err
	}
	return strings.TrimSpace(s), nil
}

func (f *RemoteFlood) call(cmd string) (string, error) {
	if _, err := io.WriteString(f.w, cmd+"\n"); err != nil {
		return "", err
	}
	line, err := f.line()
	if err != nil {
		return "", err
	}
	if msg, ok := strings.CutPrefix(line, "error "); ok {
		return "", errors.New(msg)
	}
	return line, nil
}

// Start begins the flood in the other process.
func (f *RemoteFlood) Start(context.Context) error {
	line, err := f.call("start")
	if err == nil && line != "started" {
		err = fmt.Errorf("unexpected answer %q to start", line)
	}
	return err
}

// Stop ends the flood and returns its record.
func (f *RemoteFlood) Stop() (FloodStats, error) {
	var st FloodStats
	line, err := f.call("stop")
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal([]byte(line), &st); err != nil {
		return st, fmt.Errorf("flood record %q: %w", line, err)
	}
	return st, nil
}
