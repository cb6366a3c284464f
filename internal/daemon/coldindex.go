package daemon

import (
	"time"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/cold/tier"
	"github.com/gpucache/gpucache/internal/config"
)

// clusterIndexRescan is cold_index_rescan's default in a cluster: nodes
// share the bucket, so each lists it again this often to see the blocks
// the others wrote (a drained node's spill, above all).
const clusterIndexRescan = time.Minute

// indexConfig sets the presence index's bounds from the config.
func indexConfig(tc *tier.Config, cfg config.Config) {
	tc.IndexMax = cfg.ColdIndexMax
	switch r := cfg.ColdIndexRescan; {
	case r > 0:
		tc.IndexRescan = r
	case r == 0 && cfg.Clustered():
		tc.IndexRescan = clusterIndexRescan
	}
}

// indexStats are the presence index's and the deletes' STAT entries
// (gauges are listed in internal/admin's gauges map).
func indexStats(st tier.Stats) []wire.StatEntry {
	b := uint64(0)
	if st.IndexReady {
		b = 1
	}
	return []wire.StatEntry{
		// Gauges.
		{Name: "cold_index_entries", Value: uint64(max(st.IndexEntries, 0))},
		{Name: "cold_index_max", Value: uint64(max(st.IndexMax, 0))},
		{Name: "cold_index_ready", Value: b},
		{Name: "cold_hidden", Value: uint64(max(st.Hidden, 0))},
		// Counters.
		{Name: "cold_index_full", Value: st.IndexFull},
		{Name: "cold_index_hits", Value: st.IndexHits},
		{Name: "cold_index_listed", Value: st.IndexListed},
		{Name: "cold_index_loads", Value: st.IndexLoads},
		{Name: "cold_index_load_errors", Value: st.IndexLoadErrors},
		{Name: "cold_deletes", Value: st.Deletes},
		{Name: "cold_delete_errors", Value: st.DeleteErrors},
	}
}
