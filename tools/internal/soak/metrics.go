package soak

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// scrapeTimeout bounds one admin request.
const scrapeTimeout = 2 * time.Second

// metrics is one scrape of a node's /metrics: the value of each unlabelled
// series, by name.
type metrics map[string]float64

// parseMetrics reads the Prometheus text format, keeping series without
// labels (every gpucache_* and go_* figure the soak reads has none).
func parseMetrics(r io.Reader) (metrics, error) {
	m := metrics{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' || strings.ContainsRune(line, '{') {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		val, _, _ = strings.Cut(strings.TrimSpace(val), " ") // drop a timestamp
		f, err := strconv.ParseFloat(val, 64)
		if err != nil {
			continue
		}
		m[name] = f
	}
	return m, sc.Err()
}

// get returns a series by name, trying the gauge name and the counter
// name (a STAT entry the admin exports as a counter gets "_total").
func (m metrics) get(name string) float64 {
	if v, ok := m[name]; ok {
		return v
	}
	return m[name+"_total"]
}

// admin reads a node's admin endpoints.
type admin struct {
	http  *http.Client
	token string // the ops tenant's secret (Bearer), for /cluster
}

func (a *admin) do(ctx context.Context, addr, path string, auth bool) (*http.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, scrapeTimeout)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		cancel()
		return nil, err
	}
	if auth && a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	resp, err := a.http.Do(req)
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = cancelBody{resp.Body, cancel}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s%s: %s: %s", addr, path, resp.Status, strings.TrimSpace(string(b)))
	}
	return resp, nil
}

type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

func (a *admin) metrics(ctx context.Context, addr string) (metrics, error) {
	resp, err := a.do(ctx, addr, "/metrics", false)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return parseMetrics(io.LimitReader(resp.Body, 8<<20))
}

// clusterView is what GET /cluster answers (the fields the soak reads).
type clusterView struct {
	Epoch   uint64 `json:"epoch"`
	Members []struct {
		ID string `json:"id"`
	} `json:"members"`
}

func (v clusterView) ids() string {
	var ids []string
	for _, m := range v.Members {
		ids = append(ids, m.ID)
	}
	sort.Strings(ids)
	return strings.Join(ids, ",")
}

func (a *admin) view(ctx context.Context, addr string) (clusterView, error) {
	var v clusterView
	resp, err := a.do(ctx, addr, "/cluster", true)
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	err = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&v)
	return v, err
}

// rssOf reads a process's resident set size from /proc/PID/status.
func rssOf(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) < 1 {
				break
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("gpucache/soak: no VmRSS for pid %d", pid)
}

// Sample is one measurement of one node process.
type Sample struct {
	At         time.Time `json:"at"`
	Node       string    `json:"node"`
	PID        int       `json:"pid"`
	RSS        int64     `json:"rss_bytes"`
	Mapped     int64     `json:"hot_mapped_bytes"` // hot tier slabs mapped: RSS − Mapped is the rest of the process
	Goroutines int       `json:"goroutines"`
	HeapInuse  int64     `json:"heap_inuse_bytes"`
	// LiveHeap is the heap live after the last GC: the GC's next goal
	// divided by (1 + GOGC/100). Unlike RSS it does not keep a peak.
	LiveHeap int64  `json:"live_heap_bytes"`
	Err      string `json:"error,omitempty"`
}

// Rest is the resident memory outside the hot tier's slabs.
func (s Sample) Rest() int64 { return s.RSS - s.Mapped }

// sample measures n: the minimum of three scrapes (50 ms apart) of
// goroutines and RSS, so that requests in flight do not count as growth.
func (a *admin) sample(ctx context.Context, n *node, tries int) Sample {
	p, _, adm := n.snapshot()
	s := Sample{At: time.Now().UTC(), Node: n.spec.name}
	if p == nil || !p.alive() {
		s.Err = "not running"
		return s
	}
	s.PID = p.pid
	for i := range tries {
		if i > 0 {
			t := time.NewTimer(50 * time.Millisecond)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return s
			}
		}
		m, err := a.metrics(ctx, adm)
		if err != nil {
			s.Err = err.Error()
			continue
		}
		rss, err := rssOf(p.pid)
		if err != nil {
			rss = int64(m.get("process_resident_memory_bytes"))
		}
		s.lowest(m, rss)
		s.Err = ""
	}
	return s
}

// lowest lowers each of s's figures to the one in m (and rss) where that
// is lower, or not yet set.
func (s *Sample) lowest(m metrics, rss int64) {
	g := int(m.get("go_goroutines"))
	if s.Goroutines == 0 || g < s.Goroutines {
		s.Goroutines = g
	}
	if s.RSS == 0 || rss < s.RSS {
		s.RSS, s.Mapped = rss, int64(m.get("gpucache_hot_bytes_mapped"))
	}
	if h := int64(m.get("go_memstats_heap_inuse_bytes")); s.HeapInuse == 0 || h < s.HeapInuse {
		s.HeapInuse = h
	}
	gogc := m.get("go_gc_gogc_percent")
	if gogc <= 0 {
		gogc = 100
	}
	if l := int64(m.get("go_memstats_next_gc_bytes") / (1 + gogc/100)); s.LiveHeap == 0 || l < s.LiveHeap {
		s.LiveHeap = l
	}
}

// heapProfile saves n's heap profile (/debug/pprof/heap, which needs the
// ops tenant's token on an authenticated node) to path.
func (a *admin) heapProfile(ctx context.Context, n *node, path string) error {
	_, _, adm := n.snapshot()
	resp, err := a.do(ctx, adm, "/debug/pprof/heap", true)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
