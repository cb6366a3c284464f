package main

// The large-block cases (32 MiB blocks against iperf3): LARGE_SIZES at LARGE_CONNS, planned in
// plan.txt as large_sizes and large_conns, and their target.

import (
	"fmt"
	"slices"
)

const (
	targetLargeVsIperf = 0.95
	largeCaseSize      = 32 << 20 // an LMCache chunk
	largeCaseConns     = 8
)

// parseLargePlan reads large_sizes, large_conns and large_keys (absent:
// none planned).
func parseLargePlan(kv KV, p *Plan) error {
	var err error
	p.LargeKeys = kv.get("large_keys")
	if p.LargeSizes, err = parseInts(kv.get("large_sizes")); err != nil {
		return fmt.Errorf("large_sizes: %w", err)
	}
	if p.LargeConns, err = parseInts(kv.get("large_conns")); err != nil {
		return fmt.Errorf("large_conns: %w", err)
	}
	return nil
}

// largeKeys lists the planned large-block cases, both systems.
func (r *Run) largeKeys() []Key {
	return pairKeys(r.Plan.LargeSizes, r.Plan.LargeConns)
}

// largeTargets is the 32 MiB GET at 8 conns against iperf3's single stream
// in the same run, when that case was planned or measured; none otherwise.
func (r *Run) largeTargets() []Target {
	k := Key{sysGpucache, "get", largeCaseSize, largeCaseConns, defaultBatch, defaultPipeline}
	g, ok := r.Stat(k)
	planned := slices.Contains(r.Plan.LargeSizes, largeCaseSize) && slices.Contains(r.Plan.LargeConns, largeCaseConns)
	if !ok && !planned {
		return nil
	}
	ip, okip := r.IperfGBps()
	return []Target{ratioTarget("32 MiB GET, 8 conns: gpucache vs iperf3 single stream GB/s", g, ok, "iperf3", ip, okip, targetLargeVsIperf)}
}
