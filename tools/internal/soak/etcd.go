package soak

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// etcdReadyLine is what EtcdMain prints on stdout once etcd serves.
const etcdReadyLine = "etcd ready"

// etcdServer is a real, single-member etcd (the embedded server of
// go.etcd.io/etcd/server/v3, as internal/control/etcdmember/etcdtest runs for the tests) in
// a child process of its own (EtcdMain), so that the soak can kill it
// and start it again on the same ports and data directory.
type etcdServer struct {
	argv    []string // the helper command; "etcd" and the flags are appended
	dir     string
	logPath string
	clients []url.URL // 127.0.0.1, plus the netns-facing address when there is one
	peer    url.URL

	mu sync.Mutex
	p  *proc // guarded by mu; nil while stopped
}

// newEtcd picks free ports: one client port (listened on every host in
// hosts) and one peer port on 127.0.0.1.
func newEtcd(argv []string, dir, logPath string, hosts []string) (*etcdServer, error) {
	cp, err := freePort("127.0.0.1")
	if err != nil {
		return nil, err
	}
	pp, err := freePort("127.0.0.1")
	if err != nil {
		return nil, err
	}
	s := &etcdServer{argv: argv, dir: dir, logPath: logPath, peer: url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(pp)}}
	for _, h := range hosts {
		s.clients = append(s.clients, url.URL{Scheme: "http", Host: h + ":" + strconv.Itoa(cp)})
	}
	return s, nil
}

// endpoint returns the client URL on host.
func (s *etcdServer) endpoint(host string) string {
	for _, u := range s.clients {
		if u.Hostname() == host {
			return u.String()
		}
	}
	return s.clients[0].String()
}

// start starts etcd (again) and waits until it is ready.
func (s *etcdServer) start(ctx context.Context) error {
	var urls []string
	for _, u := range s.clients {
		urls = append(urls, u.String())
	}
	var err error
	for range 5 { // a port may still be held by the previous instance: retry
		if err = s.startOnce(ctx, strings.Join(urls, ",")); err == nil {
			return nil
		}
		if !sleepCtx(ctx, 500*time.Millisecond) {
			return ctx.Err()
		}
	}
	return err
}

func (s *etcdServer) startOnce(ctx context.Context, urls string) error {
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	args := append(append([]string(nil), s.argv[1:]...), "etcd", "--dir", s.dir, "--client-urls", urls, "--peer-url", s.peer.String())
	cmd := exec.Command(s.argv[0], args...)
	cmd.Stderr = logf
	setDeathSignal(cmd)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return err
	}
	stdin, err := cmd.StdinPipe() // closed when the soak dies: etcd stops
	if err != nil {
		logf.Close()
		return err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("gpucache/soak: start etcd: %w", err)
	}
	p := &proc{name: "etcd", cmd: cmd, pid: cmd.Process.Pid, exited: make(chan struct{}), stdin: stdin}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		once := sync.Once{}
		for sc.Scan() {
			if sc.Text() == etcdReadyLine {
				once.Do(func() { close(ready) })
			}
		}
		io.Copy(io.Discard, stdout)
		p.err = cmd.Wait()
		logf.Close()
		close(p.exited)
	}()
	t := time.NewTimer(startTimeout)
	defer t.Stop()
	select {
	case <-ready:
		s.mu.Lock()
		s.p = p
		s.mu.Unlock()
		return nil
	case <-p.exited:
		return fmt.Errorf("gpucache/soak: etcd exited before it was ready (%v); see %s", p.err, s.logPath)
	case <-t.C:
		p.kill()
		return fmt.Errorf("gpucache/soak: etcd not ready after %v; see %s", startTimeout, s.logPath)
	case <-ctx.Done():
		p.kill()
		return ctx.Err()
	}
}

// kill stops etcd abruptly (SIGKILL): members see it vanish. Idempotent.
func (s *etcdServer) kill() {
	s.mu.Lock()
	p := s.p
	s.p = nil
	s.mu.Unlock()
	if p != nil {
		p.kill()
	}
}

// EtcdMain runs a single-member etcd until SIGINT, SIGTERM or the end of
// stdin, printing etcdReadyLine on stdout once it serves. args:
// --dir DIR --client-urls URL[,URL] --peer-url URL. It returns the exit
// code.
func EtcdMain(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("soak etcd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "data directory")
	clients := fs.String("client-urls", "", "comma-separated client URLs")
	peer := fs.String("peer-url", "", "peer URL")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg := embed.NewConfig()
	cfg.Name = "soak"
	cfg.Dir = *dir
	var cus []url.URL
	for _, c := range strings.Split(*clients, ",") {
		u, err := url.Parse(c)
		if err != nil {
			fmt.Fprintln(stderr, "soak etcd: --client-urls:", err)
			return 2
		}
		cus = append(cus, *u)
	}
	pu, err := url.Parse(*peer)
	if err != nil || *dir == "" || len(cus) == 0 {
		fmt.Fprintln(stderr, "soak etcd: want --dir, --client-urls and --peer-url")
		return 2
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = cus, cus
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintln(stderr, "soak etcd:", err)
		return 1
	}
	defer e.Close()
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		io.Copy(io.Discard, stdin)
		stop()
	}()
	select {
	case <-e.Server.ReadyNotify():
		fmt.Fprintln(stdout, etcdReadyLine)
	case <-ctx.Done():
		return 1
	}
	select {
	case <-ctx.Done():
	case err := <-e.Err():
		fmt.Fprintln(stderr, "soak etcd:", err)
		return 1
	}
	return 0
}
