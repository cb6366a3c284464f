package bench

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/gpucache/gpucache/client"
)

// dataClient is what the cases, the working-set fill and the hold need: a
// node (*client.Client) or a cluster (*client.Cluster, which routes each
// key to its owner).
type dataClient interface {
	Put(ctx context.Context, ns client.Namespace, blocks []client.PutBlock) ([]client.Status, error)
	getInto(ctx context.Context, ns client.Namespace, keys []client.BlockKey, dst [][]byte, res []client.GetResult)
	Close() error
}

type nodeData struct{ *client.Client }

func (n nodeData) getInto(ctx context.Context, ns client.Namespace, keys []client.BlockKey, dst [][]byte, res []client.GetResult) {
	n.GetInto(ctx, ns, keys, dst, res)
}

type clusterData struct{ *client.Cluster }

func (c clusterData) getInto(ctx context.Context, ns client.Namespace, keys []client.BlockKey, _ [][]byte, res []client.GetResult) {
	copy(res, c.Get(ctx, ns, keys))
}

// NodeResult is one cluster member's share of a case: the blocks whose
// keys it owns under the view the run started with.
type NodeResult struct {
	ID        string  `json:"id"`
	Addr      string  `json:"addr"`
	Blocks    uint64  `json:"blocks"`
	Bytes     uint64  `json:"bytes"`
	OpsPerSec float64 `json:"ops_per_sec"`
	GBPerSec  float64 `json:"gb_per_sec"`
	Errors    uint64  `json:"errors"`
	Misses    uint64  `json:"misses"`
	Corrupt   uint64  `json:"corrupt"`
}

// NodeStat is one member's STAT after the cases.
type NodeStat struct {
	ID      string        `json:"id"`
	Addr    string        `json:"addr"`
	Server  string        `json:"server,omitempty"`
	Summary ServerSummary `json:"summary"`
	Error   string        `json:"error,omitempty"`
}

// ClusterInfo is the view a --cluster run routed by.
type ClusterInfo struct {
	Seeds   []string            `json:"seeds"`
	Epoch   uint64              `json:"epoch"`
	Members []client.Member     `json:"members"`
	Nodes   []NodeStat          `json:"nodes,omitempty"`
	Stats   client.ClusterStats `json:"client_stats"`
}

// nodeCount accumulates one member's share of a worker's requests.
type nodeCount struct{ blocks, bytes, errors, misses, corrupt uint64 }

// dialCluster opens the run's cluster client and records its view; owner
// then maps a key to the index of its member in r.members.
func (r *runner) dialCluster(ctx context.Context) (*client.Cluster, error) {
	node := client.Config{Tenant: r.cfg.Tenant, Secret: r.cfg.Secret, TLS: r.cfg.TLS, Conns: 4, MaxInFlight: 64,
		RequestTimeout: r.cfg.RequestTimeout, ClientName: "gpucache-bench"}
	cl, err := client.DialCluster(ctx, client.ClusterConfig{Seeds: r.cfg.Cluster, Node: node, RefreshInterval: -1})
	if err != nil {
		return nil, err
	}
	v := cl.View()
	r.cluster, r.members = cl, v.Members
	r.index = make(map[string]int, len(v.Members))
	for i, m := range v.Members {
		r.index[m.ID] = i
	}
	return cl, nil
}

// owner is the index in r.members of key's owner, or -1 (not a cluster
// run, a single-node view, or no active member).
func (r *runner) owner(k client.BlockKey) int {
	if len(r.members) == 0 {
		return -1
	}
	m, ok := r.cluster.Owner(k)
	if !ok {
		return -1
	}
	i, ok := r.index[m.ID]
	if !ok {
		return -1 // a member that joined after the run's start
	}
	return i
}

// nodeStats takes every member's STAT after the cases, over a session of
// its own.
func (r *runner) nodeStats(ctx context.Context) []NodeStat {
	out := make([]NodeStat, len(r.members))
	for i, m := range r.members {
		out[i] = NodeStat{ID: m.ID, Addr: m.Addr}
		c, err := client.Dial(ctx, client.Config{Addr: m.Addr, Tenant: r.cfg.Tenant, Secret: r.cfg.Secret, TLS: r.cfg.TLS,
			Conns: 1, RequestTimeout: r.cfg.RequestTimeout, ClientName: "gpucache-bench"})
		if err != nil {
			out[i].Error = err.Error()
			continue
		}
		out[i].Server = c.ServerName()
		st, err := c.Stat(ctx)
		c.Close()
		if err != nil {
			out[i].Error = err.Error()
			continue
		}
		out[i].Summary = summaryOf(st)
	}
	return out
}

func summaryOf(st map[string]uint64) ServerSummary {
	return ServerSummary{GoHeapInUseBytes: st["go_heap_inuse_bytes"], GoGCPauseP99Ns: st["go_gc_pause_p99_ns"], HotBytesCached: st["hot_bytes_cached"]}
}

// writeNodes writes the per-member figures of a cluster run: the view,
// each case split by owner, and each member's STAT.
func (r *Report) writeNodes(w io.Writer) error {
	if r.Cluster == nil {
		return nil
	}
	fmt.Fprintf(w, "\ncluster epoch %d, %d members; per node (blocks by owner):\n", r.Cluster.Epoch, len(r.Cluster.Members))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "op\tsize\tconns\tnode\taddr\tblocks\tops/s\tGB/s\terrors\tmisses\tcorrupt\t")
	for _, c := range r.Cases {
		for _, n := range c.Nodes {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\t%s\t%.3f\t%d\t%d\t%d\t\n", c.Op, c.SizeLabel, c.Conns, n.ID, n.Addr,
				n.Blocks, fmtRate(n.OpsPerSec), n.GBPerSec, n.Errors, n.Misses, n.Corrupt)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range r.Cluster.Nodes {
		if n.Error != "" {
			fmt.Fprintf(w, "node %s (%s): STAT failed: %s\n", n.ID, n.Addr, n.Error)
			continue
		}
		fmt.Fprintf(w, "node %s (%s): go_heap_inuse %s, gc pause p99 %s, hot bytes cached %s\n", n.ID, n.Addr,
			FormatSize(int64(n.Summary.GoHeapInUseBytes)), fmtDur(int64(n.Summary.GoGCPauseP99Ns)), FormatSize(int64(n.Summary.HotBytesCached)))
	}
	s := r.Cluster.Stats
	fmt.Fprintf(w, "cluster client: %d batches routed, %d WRONG_EPOCH, %d retries, %d unreachable\n", s.RoutedBatches, s.WrongEpoch, s.Retries, s.Unreachable)
	return nil
}

func (r *runner) addStats(s client.ClusterStats) {
	r.stats.WrongEpoch += s.WrongEpoch
	r.stats.Retries += s.Retries
	r.stats.Refreshes += s.Refreshes
	r.stats.RoutedBatches += s.RoutedBatches
	r.stats.Unreachable += s.Unreachable
}
