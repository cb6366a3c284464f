package doctor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/gpucache/gpucache/internal/config"
)

// TestMain runs the tests without the GPUCACHE_* variables of the shell
// that started them: Run checks them as gpucached does (config.CheckEnv),
// and a stray one would turn the config line into a WARN.
func TestMain(m *testing.M) {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "GPUCACHE_") {
			os.Unsetenv(k)
		}
	}
	goleak.VerifyTestMain(m)
}

// wantNames is the line set of a single-node config: fixed, in order.
var wantNames = []string{"config", "cpu_sha_ni", "cpu_aes_ni", "cpu_avx2", "memory", "hugepages",
	"rlimit_nofile", "rlimit_memlock", "numa", "rdma", "gpu", "nvme", "bluefield", "s3", "etcd", "clock_etcd",
	"tls_cert", "tls_client_ca", "etcd_cert"}

func names(r Report) []string {
	var out []string
	for _, c := range r.Checks {
		out = append(out, c.Name)
	}
	return out
}

func must(t *testing.T, r Report, name, target string) Check {
	t.Helper()
	c, ok := r.Find(name, target)
	if !ok {
		t.Fatalf("no %s %s line in %+v", name, target, r.Checks)
	}
	return c
}

func expect(t *testing.T, r Report, name string, st Status, contains ...string) Check {
	t.Helper()
	c := must(t, r, name, "")
	if c.Status != st {
		t.Errorf("%s: status %s (%s), want %s", name, c.Status, c.Detail, st)
	}
	for _, s := range contains {
		if !strings.Contains(c.Detail, s) {
			t.Errorf("%s: detail %q does not contain %q", name, c.Detail, s)
		}
	}
	return c
}

// TestThisMachine runs every check on this machine with the default
// single-node config and asserts what is deterministic here: the line
// set, the CPU lines against /proc/cpuinfo, the limits against getrlimit,
// the hardware lines against what /sys and /dev hold (ABSENT, or
// NOT_RUN_HARDWARE where present: nothing here runs on it), and the
// unconfigured services ABSENT.
func TestThisMachine(t *testing.T) {
	cfg := config.Default()
	r := Run(context.Background(), cfg, nil, Env{})
	if got := names(r); !slices.Equal(got, wantNames) {
		t.Fatalf("lines %v, want %v", got, wantNames)
	}
	expect(t, r, "config", OK)

	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Fatal(err)
	}
	flags, _ := cpuFlags(b)
	for _, f := range []struct{ name, flag string }{{"cpu_sha_ni", "sha_ni"}, {"cpu_aes_ni", "aes"}, {"cpu_avx2", "avx2"}} {
		want := Absent
		if slices.Contains(flags, f.flag) || (f.flag == "sha_ni" && slices.Contains(flags, "sha2")) {
			want = OK
		}
		expect(t, r, f.name, want)
	}

	var nofile unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &nofile); err != nil {
		t.Fatal(err)
	}
	if cfg.FDsNeeded() > nofile.Max {
		expect(t, r, "rlimit_nofile", Fail)
	} else {
		expect(t, r, "rlimit_nofile", OK, "need 4416 descriptors")
	}
	expect(t, r, "rlimit_memlock", OK, "this build locks no memory")

	for _, hw := range []struct{ name, path string }{
		{"rdma", "/sys/class/infiniband"}, {"nvme", "/sys/class/nvme"}, {"gpu", "/proc/driver/nvidia/gpus"},
	} {
		c := must(t, r, hw.name, "")
		present := len(entries(hw.path, "*")) > 0
		if hw.name == "gpu" {
			present = present || len(entries("/dev", "nvidia[0-9]*")) > 0
		}
		if want := map[bool]Status{true: NotRunHardware, false: Absent}[present]; c.Status != want {
			t.Errorf("%s: %s (%s), want %s", hw.name, c.Status, c.Detail, want)
		}
	}
	if c := must(t, r, "bluefield", ""); c.Status != Absent && c.Status != NotRunHardware {
		t.Errorf("bluefield: %s", c.Status)
	}
	for _, n := range []string{"s3", "etcd", "clock_etcd", "tls_cert", "tls_client_ca", "etcd_cert"} {
		expect(t, r, n, Absent)
	}
	for _, c := range r.Checks {
		if c.Detail == "" {
			t.Errorf("%s: no reason", c.Name)
		}
	}
}

// fakeTree writes files (path → content) under a temp dir and returns it.
func fakeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, content := range files {
		full := filepath.Join(root, p)
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func fakeEnv(root string, nofile, memlock [2]uint64, rdmaLinked bool) Env {
	return Env{
		Proc: filepath.Join(root, "proc"), Sys: filepath.Join(root, "sys"), Dev: filepath.Join(root, "dev"),
		Rlimit: func(res int) (uint64, uint64, error) {
			switch res {
			case unix.RLIMIT_NOFILE:
				return nofile[0], nofile[1], nil
			case unix.RLIMIT_MEMLOCK:
				return memlock[0], memlock[1], nil
			}
			return 0, 0, errors.New("unexpected resource")
		},
		RDMALinked: &rdmaLinked,
	}
}

// TestFakeHardwareTree feeds a machine with every piece of hardware the
// build does not use: each is NOT_RUN_HARDWARE, never OK. The CPU lacks
// SHA-NI and AVX2, transparent huge pages are off under hot_prefault
// hugepage, the hot tier is larger than the memory available, the file
// limit cannot hold max_conns and a build that linked RDMA could not register
// the hot tier.
func TestFakeHardwareTree(t *testing.T) {
	root := fakeTree(t, map[string]string{
		"proc/cpuinfo":                               "processor\t: 0\nflags\t\t: fpu sse2 aes pclmulqdq\n\nprocessor\t: 1\nflags\t\t: fpu sse2 aes avx2 sha_ni\n",
		"proc/meminfo":                               "MemTotal:       4194304 kB\nMemAvailable:   1048576 kB\nHugePages_Total:       8\nHugepagesize:       2048 kB\n",
		"proc/driver/nvidia/version":                 "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15\n",
		"proc/driver/nvidia/gpus/0000:17:00.0/":      "",
		"dev/nvidia0":                                "",
		"dev/nvidiactl":                              "",
		"sys/kernel/mm/transparent_hugepage/enabled": "always madvise [never]\n",
		"sys/devices/system/node/node0/":             "",
		"sys/devices/system/node/node1/":             "",
		"sys/devices/system/node/possible":           "0-1\n",
		"sys/class/infiniband/mlx5_0/":               "",
		"sys/class/infiniband/mlx5_1/":               "",
		"sys/class/nvme/nvme0/model":                 "SAMSUNG MZQL23T8HCLS\n",
		"sys/bus/pci/devices/0000:82:00.0/vendor":    "0x15b3\n",
		"sys/bus/pci/devices/0000:82:00.0/device":    "0xa2dc\n",
		"sys/bus/pci/devices/0000:03:00.0/vendor":    "0x15b3\n",
		"sys/bus/pci/devices/0000:03:00.0/device":    "0x101d\n", // a ConnectX-6 Dx: not a BlueField
		"sys/bus/pci/devices/0000:00:02.0/vendor":    "0x8086\n",
		"sys/bus/pci/devices/0000:00:02.0/device":    "0xa2dc\n", // another vendor's id
	})
	cfg := config.Default()
	cfg.HotPrefault = "hugepage"
	cfg.HotCapacity = 2 << 30
	env := fakeEnv(root, [2]uint64{1024, 4096}, [2]uint64{64 << 10, 64 << 10}, true)
	r := Run(context.Background(), cfg, nil, env)
	if got := names(r); !slices.Equal(got, wantNames) {
		t.Fatalf("lines %v, want %v", got, wantNames)
	}
	// The first processor's flags count.
	expect(t, r, "cpu_sha_ni", Absent, "SHA-256", "software")
	expect(t, r, "cpu_aes_ni", OK, "AES-NI present")
	expect(t, r, "cpu_avx2", Absent, "AVX2 absent")
	expect(t, r, "memory", Warn, "hot_capacity 2GiB is more than MemAvailable 1.0 GiB (MemTotal 4.0 GiB)")
	expect(t, r, "hugepages", Warn, `transparent huge pages are "never"`, "hugetlbfs pages: 8 of 2MiB")
	expect(t, r, "rlimit_nofile", Fail, "need 4416 descriptors", "hard limit is 4096", "refuse to start")
	expect(t, r, "rlimit_memlock", Warn, "soft 64 KiB", "below hot_capacity 2GiB")
	expect(t, r, "numa", OK, "2 NUMA nodes (node0,node1)", "numactl")
	expect(t, r, "rdma", NotRunHardware, "mlx5_0,mlx5_1 present", "not linked")
	expect(t, r, "gpu", NotRunHardware, "1 NVIDIA GPU(s) (0000:17:00.0)", "550.54.15", "not linked")
	expect(t, r, "nvme", NotRunHardware, "nvme0 (SAMSUNG MZQL23T8HCLS)", "not linked")
	bf := expect(t, r, "bluefield", NotRunHardware, "0000:82:00.0 BlueField-3 (15b3:a2dc)", "offload_active=false")
	if strings.Contains(bf.Detail, "0000:03:00.0") || strings.Contains(bf.Detail, "0000:00:02.0") {
		t.Errorf("bluefield lists a device that is not one: %s", bf.Detail)
	}
	if !r.Failed() {
		t.Error("a FAIL line, but Failed() is false")
	}

	// The same tree with a file limit the daemon raises to: OK, and the
	// memlock line of a build without RDMA linked is OK whatever the limit.
	env = fakeEnv(root, [2]uint64{1024, 1 << 20}, [2]uint64{64 << 10, 64 << 10}, false)
	r = Run(context.Background(), cfg, nil, env)
	expect(t, r, "rlimit_nofile", OK, "soft limit 1024 is lower, gpucached raises it to the hard limit 1048576")
	expect(t, r, "rlimit_memlock", OK, "this build locks no memory", "not covered")
	env = fakeEnv(root, [2]uint64{1024, 1 << 20}, [2]uint64{unix.RLIM_INFINITY, unix.RLIM_INFINITY}, true)
	r = Run(context.Background(), cfg, nil, env)
	expect(t, r, "rlimit_memlock", OK, "soft unlimited", "covers hot_capacity")
	if r.Failed() {
		t.Errorf("no FAIL line, but Failed() is true: %+v", r.Checks)
	}
}

// TestEmptyTree: a machine whose /proc and /sys show nothing. The CPU
// lines say they could not read, every device is ABSENT, and BlueField
// found through /dev/mst alone is NOT_RUN_HARDWARE.
func TestEmptyTree(t *testing.T) {
	root := fakeTree(t, map[string]string{"proc/": "", "sys/": "", "dev/": ""})
	env := fakeEnv(root, [2]uint64{1 << 20, 1 << 20}, [2]uint64{8 << 20, 8 << 20}, false)
	r := Run(context.Background(), config.Default(), nil, env)
	for _, n := range []string{"cpu_sha_ni", "cpu_aes_ni", "cpu_avx2"} {
		expect(t, r, n, Warn, "cannot read")
	}
	expect(t, r, "memory", Warn, "cannot read meminfo")
	expect(t, r, "hugepages", OK, "transparent huge pages unknown")
	for _, n := range []string{"numa", "rdma", "gpu", "nvme", "bluefield"} {
		expect(t, r, n, Absent)
	}
	if err := os.Mkdir(filepath.Join(root, "dev", "mst"), 0o755); err != nil {
		t.Fatal(err)
	}
	r = Run(context.Background(), config.Default(), nil, env)
	expect(t, r, "bluefield", NotRunHardware, "mst (Mellanox firmware tools)")
}

// TestInvalidConfig: a config gpucached would refuse is a FAIL line, and
// the other checks still run.
func TestInvalidConfig(t *testing.T) {
	cfg := config.Default()
	cfg.MaxConns = 0
	r := Run(context.Background(), cfg, cfg.Validate(), Env{})
	expect(t, r, "config", Fail, "max_conns 0 not in 1..")
	if got := names(r); !slices.Equal(got, wantNames) {
		t.Fatalf("lines %v, want %v", got, wantNames)
	}
	if !r.Failed() {
		t.Error("Failed() false with a FAIL config line")
	}
}

// TestJSONShape: --json is {"checks":[{"name","status","detail",...}]},
// the shape the regression runner's capabilities.json records.
func TestJSONShape(t *testing.T) {
	r := Run(context.Background(), config.Default(), nil, Env{})
	var buf bytes.Buffer
	if err := r.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var doc map[string][]map[string]any
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc) != 1 || len(doc["checks"]) != len(wantNames) {
		t.Fatalf("JSON %s", buf.String())
	}
	for i, c := range doc["checks"] {
		if c["name"] != wantNames[i] || c["status"] == "" || c["detail"] == "" {
			t.Errorf("check %d: %v", i, c)
		}
	}
	buf.Reset()
	if err := r.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != len(wantNames)+2 || !strings.HasSuffix(lines[len(lines)-1], "NOT_RUN_HARDWARE") {
		t.Fatalf("text:\n%s", buf.String())
	}
}
