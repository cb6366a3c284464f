package soak

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// startTimeout bounds the start of one child process: from exec to
// "serving" (a node) or to an open port (the S3 server).
const startTimeout = 60 * time.Second

// stopTimeout bounds a graceful stop (SIGTERM) before SIGKILL.
const stopTimeout = 30 * time.Second

// controlTimeout bounds one failpoint command to a node.
const controlTimeout = 10 * time.Second

// proc is one child process the soak started. Every child is killed if the
// soak process dies (Pdeathsig on Linux) and at teardown.
type proc struct {
	name   string
	cmd    *exec.Cmd
	pid    int
	exited chan struct{} // closed once the process has been waited for
	err    error         // the wait's result; read after exited

	stdin   io.WriteCloser // failpoint commands (control nodes); nil otherwise
	replies chan string    // their answers
}

// kill sends SIGKILL and waits for the exit.
func (p *proc) kill() {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// term sends SIGTERM and waits for the exit, killing the process after
// stopTimeout.
func (p *proc) term() error {
	p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(stopTimeout)
	defer t.Stop()
	select {
	case <-p.exited:
		return p.err
	case <-t.C:
		p.kill()
		return fmt.Errorf("gpucache/soak: %s did not stop within %v of SIGTERM; killed", p.name, stopTimeout)
	}
}

func (p *proc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// nodeSpec says how to run one node.
type nodeSpec struct {
	name    string   // n1, n2, n3, open
	argv    []string // the command (gpucached, or the failpoint node command), with any "ip netns exec NS" prefix
	config  string   // its YAML config file
	host    string   // the address it listens on (data and admin)
	control bool     // failpoints are armed over stdin
	logPath string   // stderr goes here, appended across restarts
	cluster bool     // a member of the cluster
}

// node is one running node; restarts replace its process.
type node struct {
	spec nodeSpec

	mu       sync.Mutex
	p        *proc  // guarded by mu
	addr     string // guarded by mu: data address
	admin    string // guarded by mu: admin address
	port     int    // guarded by mu: data port, kept across restarts
	restarts int    // guarded by mu
}

func (n *node) snapshot() (p *proc, addr, admin string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.p, n.addr, n.admin
}

var servingRe = regexp.MustCompile(`msg="gpucached serving" data=(\S+) admin=(\S*)`)

// start runs the node's process and returns once it serves. A restart
// asks for the same data port; if it is taken, for any.
func (n *node) start(ctx context.Context) error {
	n.mu.Lock()
	port := n.port
	n.mu.Unlock()
	err := n.startOn(ctx, port)
	if err != nil && port != 0 {
		err = n.startOn(ctx, 0)
	}
	return err
}

func (n *node) startOn(ctx context.Context, port int) error {
	args := append(append([]string(nil), n.spec.argv[1:]...), "--config", n.spec.config,
		"--listen", net.JoinHostPort(n.spec.host, strconv.Itoa(port)), "--admin-listen", net.JoinHostPort(n.spec.host, "0"))
	cmd := exec.Command(n.spec.argv[0], args...)
	setDeathSignal(cmd)
	logf, err := os.OpenFile(n.spec.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		logf.Close()
		return err
	}
	p := &proc{name: n.spec.name, cmd: cmd, exited: make(chan struct{})}
	var stdout io.ReadCloser
	if n.spec.control {
		if p.stdin, err = cmd.StdinPipe(); err != nil {
			logf.Close()
			return err
		}
		if stdout, err = cmd.StdoutPipe(); err != nil {
			logf.Close()
			return err
		}
		p.replies = make(chan string, 4)
	}
	fmt.Fprintf(logf, "=== soak: start %s at %s: %s %s\n", n.spec.name, time.Now().UTC().Format(time.RFC3339Nano), n.spec.argv[0], strings.Join(args, " "))
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("gpucache/soak: start %s: %w", n.spec.name, err)
	}
	p.pid = cmd.Process.Pid
	serving := make(chan [2]string, 1)
	var readers sync.WaitGroup
	readers.Add(1)
	go func() {
		defer readers.Done()
		logLines(stderr, logf, serving)
	}()
	if stdout != nil {
		readers.Add(1)
		go func() {
			defer readers.Done()
			relayReplies(stdout, p.replies)
		}()
	}
	go func() {
		readers.Wait()
		p.err = cmd.Wait()
		fmt.Fprintf(logf, "=== soak: %s pid %d exited at %s: %v\n", n.spec.name, p.pid, time.Now().UTC().Format(time.RFC3339Nano), p.err)
		logf.Close()
		close(p.exited)
	}()
	t := time.NewTimer(startTimeout)
	defer t.Stop()
	select {
	case a := <-serving:
		_, ps, _ := net.SplitHostPort(a[0])
		pn, _ := strconv.Atoi(ps)
		n.mu.Lock()
		n.p, n.addr, n.admin, n.port = p, a[0], a[1], pn
		n.mu.Unlock()
		return nil
	case <-p.exited:
		return fmt.Errorf("gpucache/soak: %s exited before serving (%v); see %s", n.spec.name, p.err, n.spec.logPath)
	case <-t.C:
		p.kill()
		return fmt.Errorf("gpucache/soak: %s not serving after %v; see %s", n.spec.name, startTimeout, n.spec.logPath)
	case <-ctx.Done():
		p.kill()
		return ctx.Err()
	}
}

// logLines copies a node's stderr to logf, sends the addresses of the
// first serving line to serving (buffered), and drains the rest.
func logLines(stderr io.Reader, logf io.Writer, serving chan<- [2]string) {
	sc := bufio.NewScanner(stderr)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	found := false
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(logf, line)
		if !found {
			if m := servingRe.FindStringSubmatch(line); m != nil {
				found = true
				serving <- [2]string{m[1], m[2]}
			}
		}
	}
	io.Copy(io.Discard, stderr)
}

// relayReplies passes a control node's stdout lines to replies, dropping
// those nobody waits for, and drains the rest.
func relayReplies(stdout io.Reader, replies chan<- string) {
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		select {
		case replies <- sc.Text():
		default: // nobody asked: drop
		}
	}
	io.Copy(io.Discard, stdout)
}

// restart starts the node again after its process ended.
func (n *node) restart(ctx context.Context) error {
	n.mu.Lock()
	n.restarts++
	n.mu.Unlock()
	return n.start(ctx)
}

// command sends one failpoint command to a control node and returns its
// answer ("ok ..."); an answer that is not ok is an error.
func (n *node) command(line string) (string, error) {
	p, _, _ := n.snapshot()
	if p == nil || p.stdin == nil {
		return "", fmt.Errorf("gpucache/soak: %s takes no failpoint commands", n.spec.name)
	}
	if _, err := io.WriteString(p.stdin, line+"\n"); err != nil {
		return "", fmt.Errorf("gpucache/soak: %s: %w", n.spec.name, err)
	}
	t := time.NewTimer(controlTimeout)
	defer t.Stop()
	select {
	case r := <-p.replies:
		if !strings.HasPrefix(r, "ok") {
			return r, fmt.Errorf("gpucache/soak: %s answered %q to %q", n.spec.name, r, line)
		}
		return r, nil
	case <-p.exited:
		return "", fmt.Errorf("gpucache/soak: %s exited", n.spec.name)
	case <-t.C:
		return "", fmt.Errorf("gpucache/soak: %s did not answer %q within %v", n.spec.name, line, controlTimeout)
	}
}

// s3server is the versitygw process: the S3 cold tier of the cluster.
type s3server struct {
	bin, addr, data, logPath string
	access, secret           string

	mu sync.Mutex
	p  *proc // guarded by mu
}

// Bucket is the bucket the soak's S3 server serves.
const Bucket = "soak"

func (s *s3server) start(ctx context.Context) error {
	if err := os.MkdirAll(s.data+"/"+Bucket, 0o755); err != nil { // a directory under the posix root is a bucket
		return err
	}
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(s.bin, "--access", s.access, "--secret", s.secret, "--port", s.addr, "--quiet", "posix", s.data)
	cmd.Stdout, cmd.Stderr = logf, logf
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("gpucache/soak: start versitygw: %w", err)
	}
	p := &proc{name: "versitygw", cmd: cmd, pid: cmd.Process.Pid, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.exited)
	}()
	if err := awaitPort(ctx, s.addr, p.exited); err != nil {
		p.kill()
		return fmt.Errorf("gpucache/soak: versitygw on %s: %w; see %s", s.addr, err, s.logPath)
	}
	s.mu.Lock()
	s.p = p
	s.mu.Unlock()
	return nil
}

// kill stops the server abruptly: an outage.
func (s *s3server) kill() {
	s.mu.Lock()
	p := s.p
	s.p = nil
	s.mu.Unlock()
	if p != nil {
		p.kill()
	}
}

// awaitPort polls addr until it accepts a connection. An external process
// offers nothing else to wait on; the poll is bounded by startTimeout.
func awaitPort(ctx context.Context, addr string, exited <-chan struct{}) error {
	deadline := time.Now().Add(startTimeout)
	backoff := 10 * time.Millisecond
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not accepting after %v: %w", startTimeout, err)
		}
		t := time.NewTimer(backoff)
		select {
		case <-exited:
			t.Stop()
			return errors.New("exited during startup")
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

// freePort returns a port on host that was free a moment ago.
func freePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
