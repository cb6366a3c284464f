package doctor

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gpucache/gpucache/internal/config"
	"github.com/gpucache/gpucache/internal/transport"
)

// maxProcFile bounds what is read of one /proc or /sys file: /proc/cpuinfo
// of a large machine is a few hundred KiB.
const maxProcFile = 4 << 20

func readSmall(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxProcFile+1))
	if err == nil && len(b) > maxProcFile {
		err = fmt.Errorf("gpucache/doctor: %s is larger than %d bytes", path, maxProcFile)
	}
	return b, err
}

func readTrim(path string) string {
	b, err := readSmall(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// cpuFeature is a CPU flag that matters to gpucache, with the flag names
// /proc/cpuinfo uses for it (x86 "flags", arm64 "Features").
type cpuFeature struct {
	name    string
	label   string
	flags   []string
	uses    string // what uses it when present
	without string // what happens without it
}

var cpuFeatures = []cpuFeature{
	{"cpu_sha_ni", "SHA-NI", []string{"sha_ni", "sha2"},
		"block keys, manifest and payload checksums and HMAC seals hash with SHA-256 in hardware",
		"SHA-256 (block keys, checksums, seals) runs in software, several times slower per byte"},
	{"cpu_aes_ni", "AES-NI", []string{"aes"},
		"TLS and AES-GCM run in hardware",
		"TLS (and AES-GCM) runs in software, several times slower per byte"},
	{"cpu_avx2", "AVX2", []string{"avx2"},
		"vector code paths of the Go runtime and crypto libraries (memmove, SHA-256 without SHA-NI) are available",
		"the Go runtime and crypto libraries use narrower vector code"},
}

// cpuFlags returns the flags of the first processor in cpuinfo.
func cpuFlags(cpuinfo []byte) ([]string, bool) {
	sc := bufio.NewScanner(bytes.NewReader(cpuinfo))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		if k = strings.TrimSpace(k); k == "flags" || k == "Features" {
			return strings.Fields(v), true
		}
	}
	return nil, false
}

func cpuChecks(env Env) []Check {
	path := filepath.Join(env.Proc, "cpuinfo")
	b, err := readSmall(path)
	flags, ok := cpuFlags(b)
	var out []Check
	for _, f := range cpuFeatures {
		switch {
		case err != nil:
			out = append(out, Check{Name: f.name, Status: Warn, Detail: "cannot read " + path + ": " + err.Error()})
		case !ok:
			out = append(out, Check{Name: f.name, Status: Warn, Detail: path + " has no flags or Features line"})
		case slices.ContainsFunc(f.flags, func(s string) bool { return slices.Contains(flags, s) }):
			out = append(out, Check{Name: f.name, Status: OK, Detail: f.label + " present: " + f.uses})
		default:
			out = append(out, Check{Name: f.name, Status: Absent, Detail: f.label + " absent: " + f.without})
		}
	}
	return out
}

// meminfo returns /proc/meminfo's fields, in bytes for "kB" values.
func meminfo(env Env) (map[string]uint64, error) {
	b, err := readSmall(filepath.Join(env.Proc, "meminfo"))
	if err != nil {
		return nil, err
	}
	m := map[string]uint64{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		fs := strings.Fields(v)
		if len(fs) == 0 {
			continue
		}
		n, err := strconv.ParseUint(fs[0], 10, 64)
		if err != nil {
			continue
		}
		if len(fs) > 1 && fs[1] == "kB" {
			n <<= 10
		}
		m[k] = n
	}
	return m, nil
}

func memoryCheck(env Env, cfg config.Config) Check {
	c := Check{Name: "memory"}
	m, err := meminfo(env)
	total, okT := m["MemTotal"]
	avail, okA := m["MemAvailable"]
	switch {
	case err != nil:
		c.Status, c.Detail = Warn, "cannot read meminfo: "+err.Error()
	case !okT || !okA:
		c.Status, c.Detail = Warn, "meminfo has no MemTotal or MemAvailable"
	case uint64(cfg.HotCapacity) > avail:
		c.Status, c.Detail = Warn, fmt.Sprintf("hot_capacity %s is more than MemAvailable %s (MemTotal %s): the slabs would take memory in use now (swap, or the OOM killer); see docs/OPERATIONS.md, Memory bound",
			cfg.HotCapacity, human(avail), human(total))
	default:
		c.Status, c.Detail = OK, fmt.Sprintf("hot_capacity %s fits in MemAvailable %s (MemTotal %s); the whole RSS bound is in docs/OPERATIONS.md, Memory bound",
			cfg.HotCapacity, human(avail), human(total))
	}
	return c
}

// thpMode returns the selected mode of a transparent_hugepage file
// ("always [madvise] never" → "madvise").
func thpMode(s string) string {
	if i := strings.IndexByte(s, '['); i >= 0 {
		if j := strings.IndexByte(s[i:], ']'); j > 0 {
			return s[i+1 : i+j]
		}
	}
	return ""
}

func hugePagesCheck(env Env, cfg config.Config) Check {
	c := Check{Name: "hugepages"}
	path := filepath.Join(env.Sys, "kernel/mm/transparent_hugepage/enabled")
	mode := thpMode(readTrim(path))
	var hp string
	if m, err := meminfo(env); err == nil {
		hp = fmt.Sprintf("; hugetlbfs pages: %d of %s (unused by gpucached)", m["HugePages_Total"], config.ByteSize(m["Hugepagesize"]))
	}
	switch {
	case cfg.HotPrefault == "hugepage" && (mode == "" || mode == "never"):
		c.Status = Warn
		c.Detail = fmt.Sprintf("hot_prefault hugepage, but transparent huge pages are %q (%s): the slabs get 4 KiB pages; set it to madvise or always, or hot_prefault populate", orUnknown(mode), path) + hp
	case mode == "":
		c.Status, c.Detail = OK, fmt.Sprintf("hot_prefault %s; transparent huge pages unknown (%s unreadable)", cfg.HotPrefault, path)+hp
	case cfg.HotPrefault == "hugepage":
		c.Status, c.Detail = OK, fmt.Sprintf("hot_prefault hugepage; transparent huge pages %q: slabs are advised MADV_HUGEPAGE", mode)+hp
	default:
		c.Status, c.Detail = OK, fmt.Sprintf("hot_prefault %s; transparent huge pages %q (hot_prefault hugepage would use them)", cfg.HotPrefault, mode)+hp
	}
	return c
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

func limitString(v uint64) string {
	if v == unix.RLIM_INFINITY {
		return "unlimited"
	}
	return strconv.FormatUint(v, 10)
}

// human prints a byte count read from the machine in binary units, with
// one decimal below 10 of the unit.
func human(b uint64) string {
	const units = "KMGTPE"
	if b < 1024 {
		return fmt.Sprintf("%d B", b)
	}
	v, i := float64(b)/1024, 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if v < 10 {
		return fmt.Sprintf("%.1f %ciB", v, units[i])
	}
	return fmt.Sprintf("%.0f %ciB", v, units[i])
}

func limitBytes(v uint64) string {
	if v == unix.RLIM_INFINITY {
		return "unlimited"
	}
	return human(v)
}

// nofileCheck compares RLIMIT_NOFILE with what the configuration may use,
// as gpucached does at start: it raises the soft limit to the hard one,
// then refuses a configuration the limit cannot hold.
func nofileCheck(env Env, cfg config.Config) Check {
	c := Check{Name: "rlimit_nofile"}
	soft, hard, err := env.Rlimit(unix.RLIMIT_NOFILE)
	need := cfg.FDsNeeded()
	switch {
	case err != nil:
		c.Status, c.Detail = Warn, "cannot read RLIMIT_NOFILE: "+err.Error()
	case need > hard:
		c.Status = Fail
		c.Detail = fmt.Sprintf("max_conns %d, admin and reserve need %d descriptors, but the hard limit is %s (soft %s): gpucached would refuse to start; raise it (ulimit -n, systemd LimitNOFILE=) or lower max_conns",
			cfg.MaxConns, need, limitString(hard), limitString(soft))
	case need > soft:
		c.Status = OK
		c.Detail = fmt.Sprintf("need %d descriptors (max_conns %d, admin and reserve); soft limit %s is lower, gpucached raises it to the hard limit %s",
			need, cfg.MaxConns, limitString(soft), limitString(hard))
	default:
		c.Status = OK
		c.Detail = fmt.Sprintf("need %d descriptors (max_conns %d, admin and reserve); soft limit %s, hard %s", need, cfg.MaxConns, limitString(soft), limitString(hard))
	}
	return c
}

// memlockCheck reports RLIMIT_MEMLOCK against hot_capacity. This build
// locks no memory: the slabs are not mlock'd and no RDMA registration
// pins them (libnixl is not linked, with or without the rdma_nixl tag). A
// build that links it would register the hot tier, which needs the limit.
func memlockCheck(env Env, cfg config.Config) Check {
	c := Check{Name: "rlimit_memlock"}
	soft, hard, err := env.Rlimit(unix.RLIMIT_MEMLOCK)
	if err != nil {
		c.Status, c.Detail = Warn, "cannot read RLIMIT_MEMLOCK: "+err.Error()
		return c
	}
	tag := transport.RDMA().Linked
	if env.RDMALinked != nil {
		tag = *env.RDMALinked
	}
	covers := soft == unix.RLIM_INFINITY || soft >= uint64(cfg.HotCapacity)
	lim := fmt.Sprintf("soft %s, hard %s", limitBytes(soft), limitBytes(hard))
	switch {
	case !tag:
		c.Status = OK
		c.Detail = fmt.Sprintf("%s; this build locks no memory (slabs are not mlock'd; RDMA registration is not linked). Registering hot_capacity %s for RDMA would need at least that: %s",
			lim, cfg.HotCapacity, map[bool]string{true: "covered", false: "not covered"}[covers])
	case covers:
		c.Status, c.Detail = OK, fmt.Sprintf("%s covers hot_capacity %s (an RDMA registration of the hot tier)", lim, cfg.HotCapacity)
	default:
		c.Status = Warn
		c.Detail = fmt.Sprintf("%s is below hot_capacity %s: an RDMA registration of the hot tier would fail; raise it (ulimit -l, systemd LimitMEMLOCK=)", lim, cfg.HotCapacity)
	}
	return c
}

// entries returns the names in dir that match pattern (filepath.Match),
// sorted.
func entries(dir, pattern string) []string {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, de := range des {
		if ok, _ := filepath.Match(pattern, de.Name()); ok {
			out = append(out, de.Name())
		}
	}
	sort.Strings(out)
	return out
}

func numaCheck(env Env) Check {
	c := Check{Name: "numa"}
	dir := filepath.Join(env.Sys, "devices/system/node")
	nodes := entries(dir, "node[0-9]*")
	switch len(nodes) {
	case 0:
		c.Status, c.Detail = Absent, "no NUMA nodes in "+dir
	case 1:
		c.Status, c.Detail = OK, "one NUMA node: memory placement does not matter"
	default:
		c.Status = OK
		c.Detail = fmt.Sprintf("%d NUMA nodes (%s): slab pages land on the node that first touches them; pin gpucached next to its NIC (numactl --cpunodebind=N --membind=N)",
			len(nodes), strings.Join(nodes, ","))
	}
	return c
}

func rdmaCheck(env Env) Check {
	c := Check{Name: "rdma"}
	dir := filepath.Join(env.Sys, "class/infiniband")
	devs := entries(dir, "*")
	st := transport.RDMA()
	if len(devs) == 0 {
		c.Status, c.Detail = Absent, "no RDMA devices in "+dir+"; data moves over TCP"
		return c
	}
	c.Status = NotRunHardware
	c.Detail = fmt.Sprintf("RDMA devices %s present; libnixl is not linked (build tag rdma_nixl: %t): no RDMA path runs, data moves over TCP",
		strings.Join(devs, ","), st.BuildTag)
	return c
}

func gpuCheck(env Env) Check {
	c := Check{Name: "gpu"}
	gpus := entries(filepath.Join(env.Proc, "driver/nvidia/gpus"), "*")
	nodes := entries(env.Dev, "nvidia[0-9]*")
	if len(gpus) == 0 && len(nodes) == 0 {
		c.Status, c.Detail = Absent, "no NVIDIA GPU (no "+filepath.Join(env.Dev, "nvidia*")+" devices, no "+filepath.Join(env.Proc, "driver/nvidia")+")"
		return c
	}
	what := fmt.Sprintf("%d NVIDIA GPU(s)", max(len(gpus), len(nodes)))
	if len(gpus) > 0 {
		what += " (" + strings.Join(gpus, ",") + ")"
	}
	if v := readTrim(filepath.Join(env.Proc, "driver/nvidia/version")); v != "" {
		v, _, _ = strings.Cut(v, "\n")
		what += ", driver: " + v
	}
	c.Status = NotRunHardware
	c.Detail = what + "; GPU KV export (GPUDirect, NIXL) is not linked: the daemon serves host memory, engines copy through LMCache or the Go client"
	return c
}

func nvmeCheck(env Env) Check {
	c := Check{Name: "nvme"}
	dir := filepath.Join(env.Sys, "class/nvme")
	ctrls := entries(dir, "nvme*")
	if len(ctrls) == 0 {
		c.Status, c.Detail = Absent, "no NVMe controllers in "+dir
		return c
	}
	var names []string
	for _, n := range ctrls {
		if m := readTrim(filepath.Join(dir, n, "model")); m != "" {
			n += " (" + m + ")"
		}
		names = append(names, n)
	}
	c.Status = NotRunHardware
	c.Detail = "NVMe " + strings.Join(names, ", ") + "; the fs cold tier can use a filesystem on it, but direct NVMe submit/complete (SPDK, GDS) is not linked"
	return c
}

// Mellanox (NVIDIA networking) PCI vendor id and the device ids of the
// BlueField DPUs' own functions: the integrated ConnectX functions and the
// SoC management interfaces.
const mellanoxVendor = "0x15b3"

var blueFieldDevices = map[string]string{
	"0xa2d2": "BlueField",
	"0xa2d6": "BlueField-2",
	"0xa2dc": "BlueField-3",
	"0xa2dd": "BlueField-4",
	"0xa2de": "BlueField-4",
	"0xa2df": "BlueField-4",
	"0xc2d1": "BlueField SoC management",
	"0xc2d6": "BlueField-4 SoC management",
}

func blueFieldCheck(env Env) Check {
	c := Check{Name: "bluefield"}
	dir := filepath.Join(env.Sys, "bus/pci/devices")
	var found []string
	for _, addr := range entries(dir, "*") {
		if !strings.EqualFold(readTrim(filepath.Join(dir, addr, "vendor")), mellanoxVendor) {
			continue
		}
		dev := strings.ToLower(readTrim(filepath.Join(dir, addr, "device")))
		if model, ok := blueFieldDevices[dev]; ok {
			found = append(found, fmt.Sprintf("%s %s (15b3:%s)", addr, model, strings.TrimPrefix(dev, "0x")))
		}
	}
	mst := filepath.Join(env.Dev, "mst")
	if _, err := os.Stat(mst); err == nil {
		found = append(found, mst+" (Mellanox firmware tools)")
	}
	if len(found) == 0 {
		c.Status, c.Detail = Absent, "no BlueField PCI function (vendor 15b3) in "+dir+" and no "+mst
		return c
	}
	c.Status = NotRunHardware
	c.Detail = "BlueField present: " + strings.Join(found, "; ") + "; the DPU path refuses to open in every build (offload_active=false): nothing is offloaded"
	return c
}
