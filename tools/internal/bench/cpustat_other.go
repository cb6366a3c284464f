//go:build !linux

package bench

// cpuTimes are the machine's CPU times in clock ticks, all CPUs together.
type cpuTimes struct{ busy, steal, total uint64 }

// readCPU is not implemented here: it reports zeros.
func readCPU() cpuTimes { return cpuTimes{} }
