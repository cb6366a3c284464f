package bench

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// cpuTimes are the machine's CPU times in clock ticks, all CPUs together.
type cpuTimes struct{ busy, steal, total uint64 }

// readCPU reads the "cpu" line of /proc/stat; zero if it cannot.
func readCPU() cpuTimes {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return cpuTimes{}
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadString('\n')
	fields := strings.Fields(line)
	if err != nil || len(fields) < 9 || fields[0] != "cpu" {
		return cpuTimes{}
	}
	// user nice system idle iowait irq softirq steal [guest guest_nice]:
	// guest time is included in user and nice.
	var v [8]uint64
	for i := range v {
		if v[i], err = strconv.ParseUint(fields[i+1], 10, 64); err != nil {
			return cpuTimes{}
		}
	}
	var t cpuTimes
	for _, x := range v {
		t.total += x
	}
	t.steal = v[7]
	t.busy = t.total - v[3] - v[4] - v[7] // not idle, iowait or stolen
	return t
}
