package soak

import (
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// etcdReadyTimeout bounds the wait for etcd to be ready after a start.
const etcdReadyTimeout = 60 * time.Second

// etcdServer is a real, single-member etcd, embedded in the soak process
// so that the soak can stop it and start it again on the same ports and
// data directory (the embedded server of go.etcd.io/etcd/server/v3, as
// internal/etcdtest runs for the tests).
type etcdServer struct {
	dir     string
	clients []url.URL // 127.0.0.1, plus the netns-facing address when there is one
	peer    url.URL

	mu sync.Mutex
	e  *embed.Etcd // guarded by mu; nil while stopped
}

// newEtcd picks free ports: one client port (listened on every host in
// hosts) and one peer port on 127.0.0.1.
func newEtcd(dir string, hosts []string) (*etcdServer, error) {
	cp, err := freePort("127.0.0.1")
	if err != nil {
		return nil, err
	}
	pp, err := freePort("127.0.0.1")
	if err != nil {
		return nil, err
	}
	s := &etcdServer{dir: dir, peer: url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(pp)}}
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
func (s *etcdServer) start() error {
	cfg := embed.NewConfig()
	cfg.Name = "soak"
	cfg.Dir = s.dir
	cfg.ListenClientUrls = s.clients
	cfg.AdvertiseClientUrls = s.clients
	cfg.ListenPeerUrls = []url.URL{s.peer}
	cfg.AdvertisePeerUrls = []url.URL{s.peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	var e *embed.Etcd
	var err error
	for range 5 { // a port may still be held by the previous instance's sockets: retry
		if e, err = embed.StartEtcd(cfg); err == nil {
			break
		}
		time.Sleep(200 * time.Millisecond) // an external resource (the port) offers nothing to wait on
	}
	if err != nil {
		return fmt.Errorf("gpucache/soak: start etcd: %w", err)
	}
	t := time.NewTimer(etcdReadyTimeout)
	defer t.Stop()
	select {
	case <-e.Server.ReadyNotify():
	case <-t.C:
		e.Close()
		return fmt.Errorf("gpucache/soak: etcd not ready after %v", etcdReadyTimeout)
	}
	s.mu.Lock()
	s.e = e
	s.mu.Unlock()
	return nil
}

// stop stops etcd: members see it as unreachable. Idempotent.
func (s *etcdServer) stop() {
	s.mu.Lock()
	e := s.e
	s.e = nil
	s.mu.Unlock()
	if e != nil {
		e.Close()
	}
}
