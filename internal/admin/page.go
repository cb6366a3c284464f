package admin

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The status page: GET / on the admin listener renders one HTML page from
// html/template, with no script at all; it reloads itself every
// PageRefresh through a meta refresh. It answers under the same rule as
// pprof and /cluster (protect): only an admin sees it, so the tenants and
// the recent audit events it lists are never shown to a data tenant.
//
// Every figure it takes from STAT is printed twice: once for people (with
// binary units) and once, exact, in the element's data-value attribute,
// whose id is the STAT name (id="stat-hot_bytes_cached"). A test or a
// scraper compares those with STAT without parsing the prose.

// PageRefresh is how often the page reloads itself.
const PageRefresh = 5 * time.Second

// PageSource is what the status page shows beyond STAT. Every func may be
// nil; its section then says it is not available.
type PageSource struct {
	Node    string // the node's id or data address
	Version string // the daemon's version
	Cluster func() ClusterView
	Tenants func() []TenantRow
	Audit   *RecentLines // recent audit events; nil: audit off
	Rates   *HitRates    // hit ratios over the last minutes
	Now     func() time.Time
}

// ClusterView is the cluster section: the members, the epoch and this
// node's state. A single node shows itself as its only member (static).
type ClusterView struct {
	Self    string
	Epoch   uint64
	Mode    string // live, readonly, static
	Members []ClusterMember
}

// ClusterMember is one member of the view.
type ClusterMember struct {
	ID, Addr, FaultDomain string
	CapacityBytes         uint64
	Draining              bool
}

// TenantRow is one configured tenant. It carries no secret.
type TenantRow struct {
	Name      string
	Rights    string
	CertNames int
	OpsPerSec float64
	// Usage is the tenant's DRAM and cold-tier bytes and quotas, from the
	// handler's per-tenant source (SetTenantUsage); nil without one.
	Usage *TenantUsage
}

//go:embed page.html
var pageHTML string

var pageTmpl = template.Must(template.New("page").Funcs(template.FuncMap{
	"iec": iec,
	// quota prints used bytes against a quota: "1.0 MiB of 4.0 MiB", or
	// "1.0 MiB (no quota)".
	"quota": func(used, quota int64) string {
		u := iec(uint64(max(used, 0)))
		if quota <= 0 {
			return u + " (no quota)"
		}
		return u + " of " + iec(uint64(quota))
	},
	"pctOf": func(a, b uint64) float64 {
		if b == 0 {
			return 0
		}
		return min(100, 100*float64(a)/float64(b))
	},
	"pct": func(r Ratio) string {
		if r.Total == 0 {
			return "–"
		}
		return fmt.Sprintf("%.1f%%", 100*r.Value())
	},
}).Option("missingkey=zero").Parse(pageHTML))

type statCell struct {
	Name  string
	Value uint64
	Bytes bool // render with binary units too
}

type pageData struct {
	Src      PageSource
	Now      string
	Refresh  int
	Stats    map[string]uint64
	Hot      []statCell
	Cold     []statCell
	ColdOn   bool
	Flash    []statCell
	FlashOn  bool
	Windows  []RatioWindow
	Cluster  *ClusterView
	Tenants  []TenantRow
	Audit    []auditRow
	AuditOff bool
}

// auditRow is one audit event as the page shows it: the JSON line's
// well-known fields in columns, every other field as key=value details.
// A line that is not a JSON object is shown whole in Details.
type auditRow struct {
	Time, Event, Tenant, Remote, Details string
}

func parseAuditLine(line string) auditRow {
	var m map[string]any
	dec := json.NewDecoder(strings.NewReader(line))
	dec.UseNumber() // sizes and counts print as integers, not 2.68e+08
	if err := dec.Decode(&m); err != nil || m == nil {
		return auditRow{Details: line}
	}
	str := func(k string) string {
		v, ok := m[k]
		if !ok {
			return ""
		}
		delete(m, k)
		if s, ok := v.(string); ok {
			return s
		}
		return fmt.Sprint(v)
	}
	r := auditRow{Time: str("time"), Event: str("event"), Tenant: str("tenant"), Remote: str("remote")}
	if t, err := time.Parse(time.RFC3339Nano, r.Time); err == nil {
		r.Time = t.UTC().Format("15:04:05.000")
	}
	for _, k := range []string{"level", "msg", "audit"} {
		delete(m, k)
	}
	var parts []string
	appendDetails(&parts, "", m)
	r.Details = strings.Join(parts, " ")
	return r
}

// appendDetails appends m's fields to parts as key=value, sorted by key:
// an empty value is left out, an object's fields are flattened ("details",
// the audit event's own group, without a prefix; others as parent.key), and
// a value with a space or quote is quoted.
func appendDetails(parts *[]string, prefix string, m map[string]any) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		switch v := m[k].(type) {
		case nil:
		case map[string]any:
			sub := prefix + k + "."
			if prefix == "" && k == "details" {
				sub = ""
			}
			appendDetails(parts, sub, v)
		default:
			s := fmt.Sprint(v)
			if s == "" {
				continue
			}
			if strings.ContainsAny(s, " \t\n\"=") {
				s = strconv.Quote(s)
			}
			*parts = append(*parts, prefix+k+"="+s)
		}
	}
}

// HandlePage serves the status page at GET /.
func (h *Handler) HandlePage(src PageSource) {
	if src.Now == nil {
		src.Now = time.Now
	}
	h.mux.Handle("GET /{$}", h.protect(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		var buf bytes.Buffer
		if err := h.renderPage(&buf, src); err != nil {
			http.Error(w, "status page: "+err.Error()+"\n", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
		w.Write(buf.Bytes())
	})))
}

func (h *Handler) renderPage(w io.Writer, src PageSource) error {
	now := src.Now()
	entries := h.statsFn()
	m := make(map[string]uint64, len(entries))
	for _, e := range entries {
		m[e.Name] = e.Value
	}
	pick := func(names ...string) []statCell {
		var out []statCell
		for _, n := range names {
			if v, ok := m[n]; ok {
				out = append(out, statCell{Name: n, Value: v, Bytes: bytesStat(n)})
			}
		}
		return out
	}
	d := pageData{
		Src: src, Now: now.UTC().Format(time.RFC3339), Refresh: int(PageRefresh / time.Second), Stats: m,
		Hot: pick("hot_bytes_cached", "hot_capacity_bytes", "hot_bytes_reserved", "hot_bytes_mapped", "hot_blocks",
			"hot_leases_active", "hot_evictions", "conns_open", "blocks_hit", "blocks_miss"),
		Cold: pick("cold_store_connected", "cold_write_degraded", "cold_packs_pending", "cold_bytes_held",
			"cold_bytes_limit", "cold_bytes_batched", "cold_packs_written", "cold_packs_given_up", "cold_refill_hits", "cold_refill_misses"),
	}
	_, d.ColdOn = m["cold_store_connected"]
	d.Flash = pick("flash_degraded", "flash_direct", "flash_live_bytes", "flash_bytes", "flash_capacity_bytes", "flash_segments",
		"flash_blocks", "flash_write_buffer_bytes", "flash_hits", "flash_misses", "flash_blocks_written", "flash_reclaims",
		"flash_corrupt", "flash_read_errors", "flash_write_errors", "flash_declined_full")
	_, d.FlashOn = m["flash_capacity_bytes"]
	if src.Rates != nil {
		src.Rates.Record(now, entries)
		d.Windows = src.Rates.Windows(now)
	}
	if src.Cluster != nil {
		v := src.Cluster()
		d.Cluster = &v
	}
	if src.Tenants != nil {
		d.Tenants = src.Tenants()
		if fn := h.tenants.Load(); fn != nil {
			use := map[string]*TenantUsage{}
			for _, u := range (*fn)() {
				use[u.Tenant] = &u
			}
			for i := range d.Tenants {
				d.Tenants[i].Usage = use[d.Tenants[i].Name]
			}
		}
	}
	if src.Audit != nil {
		for _, l := range src.Audit.Lines() {
			d.Audit = append(d.Audit, parseAuditLine(l))
		}
	} else {
		d.AuditOff = true
	}
	return pageTmpl.Execute(w, d)
}

func bytesStat(name string) bool {
	return len(name) > 6 && (name[len(name)-6:] == "_bytes" || bytes.Contains([]byte(name), []byte("_bytes_")))
}

// iec prints n bytes in binary units: "1.5 GiB (1610612736 B)".
func iec(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for v := n / unit; v >= unit && exp < 5; v /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// RecentLines keeps the last lines written to it (the audit sink's JSON
// lines), for the status page. It is an io.Writer: tee the audit sink into
// it. Bounds: at most Max lines of at most MaxLineBytes bytes each.
type RecentLines struct {
	max int
	mu  struct {
		sync.Mutex
		lines []string // guarded by mu; oldest first
		next  int      // guarded by mu; ring position once full
	}
}

// MaxLineBytes bounds one kept line; a longer one is cut.
const MaxLineBytes = 1024

// NewRecentLines keeps the last max lines (at least 1).
func NewRecentLines(n int) *RecentLines { return &RecentLines{max: max(n, 1)} }

// Write keeps each line of p; slog's handlers write one record per call.
func (r *RecentLines) Write(p []byte) (int, error) {
	n := len(p)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range bytes.Split(bytes.TrimRight(p, "\n"), []byte("\n")) {
		if len(l) == 0 {
			continue
		}
		if len(l) > MaxLineBytes {
			l = append(l[:MaxLineBytes:MaxLineBytes], "…"...)
		}
		if len(r.mu.lines) < r.max {
			r.mu.lines = append(r.mu.lines, string(l))
			continue
		}
		r.mu.lines[r.mu.next] = string(l)
		r.mu.next = (r.mu.next + 1) % r.max
	}
	return n, nil
}

// Lines returns the kept lines, newest first.
func (r *RecentLines) Lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.mu.lines))
	for i := range r.mu.lines {
		j := (r.mu.next - 1 - i + 2*len(r.mu.lines)) % len(r.mu.lines)
		out = append(out, r.mu.lines[j])
	}
	return out
}

var _ io.Writer = (*RecentLines)(nil)
