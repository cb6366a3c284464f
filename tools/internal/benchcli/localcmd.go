package benchcli

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/gpucache/gpucache/internal/cli"
	"github.com/gpucache/gpucache/tools/internal/bench"
)

// The limits of a co-located GET (bench/local-compare.sh, ADR 0026): how
// fast one memcpy moves a block out of a working set (memcpy), and how
// fast the kernel copies it out of another process (process_vm_readv,
// cma). Both print one tab-separated row per case:
//
//	op size threads seconds copies GB/s p50_us p99_us

// runMemcpy copies size-byte blocks, chosen at random from a working set,
// into one destination buffer per thread, for a duration.
func runMemcpy(ctx context.Context, args []string, std cli.Stdio) error {
	szs, ws, ths, duration, err := localFlags("memcpy", "source bytes the blocks are drawn from (per size)", args, std)
	if err != nil {
		return err
	}
	fmt.Fprintln(std.Out, "op\tsize\tthreads\tseconds\tcopies\tGB/s\tp50_us\tp99_us")
	for _, size := range szs {
		n := max(int(ws/int64(size)), 1)
		src := make([]byte, n*size)
		for i := range src {
			src[i] = byte(i * 131)
		}
		for _, th := range ths {
			r := timeCopies(ctx, th, duration, size, func(dst []byte, k int) error {
				copy(dst, src[(k%n)*size:(k%n+1)*size])
				return nil
			})
			r.print(std, "memcpy", size, th)
		}
	}
	return nil
}

// runCMA reads size-byte blocks out of a peer process's working set with
// process_vm_readv (cross-memory attach: one kernel copy, no descriptor).
// The peer is this binary re-run as "cma-peer", a child, so Yama's
// ptrace_scope 1 allows the read.
func runCMA(ctx context.Context, args []string, std cli.Stdio) error {
	szs, ws, ths, duration, err := localFlags("cma", "the peer's bytes the blocks are drawn from", args, std)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	peer := exec.CommandContext(ctx, self, "cma-peer", strconv.FormatInt(ws, 10))
	out, err := peer.StdoutPipe()
	if err != nil {
		return err
	}
	peer.Stdin, peer.Stderr = nil, std.Err
	if err := peer.Start(); err != nil {
		return err
	}
	defer func() { peer.Process.Kill(); peer.Wait() }()
	var base uintptr
	if _, err := fmt.Fscan(out, &base); err != nil {
		return fmt.Errorf("cma-peer did not report its buffer: %w", err)
	}
	pid := peer.Process.Pid
	fmt.Fprintln(std.Out, "op\tsize\tthreads\tseconds\tcopies\tGB/s\tp50_us\tp99_us")
	for _, size := range szs {
		n := max(int(ws/int64(size)), 1)
		for _, th := range ths {
			r := timeCopies(ctx, th, duration, size, func(dst []byte, k int) error {
				local := syscall.Iovec{Base: &dst[0], Len: uint64(size)}
				// The remote address is the peer's, never dereferenced here.
				remote := rawIovec{base: base + uintptr((k%n)*size), len: uint64(size)}
				got, _, errno := syscall.Syscall6(sysProcessVMReadv, uintptr(pid), uintptr(unsafe.Pointer(&local)), 1, uintptr(unsafe.Pointer(&remote)), 1, 0)
				if errno != 0 {
					return fmt.Errorf("process_vm_readv: %w", errno)
				}
				if int(got) != size {
					return fmt.Errorf("process_vm_readv read %d of %d bytes", got, size)
				}
				return nil
			})
			if r.err != nil {
				return r.err
			}
			r.print(std, "process_vm_readv", size, th)
		}
	}
	return nil
}

// runCMAPeer holds a working set and prints its address, until killed.
func runCMAPeer(args []string, std cli.Stdio) error {
	if len(args) != 1 {
		return cli.UsageErr("cma-peer BYTES")
	}
	n, err := strconv.ParseInt(args[0], 10, 64)
	if err != nil || n <= 0 {
		return cli.UsageErr("cma-peer BYTES: %q", args[0])
	}
	buf := make([]byte, n)
	for i := range buf {
		buf[i] = byte(i * 131)
	}
	fmt.Fprintln(std.Out, uintptr(unsafe.Pointer(&buf[0])))
	select {} // until the parent kills it; buf stays live
}

type copyResult struct {
	seconds float64
	copies  int64
	hist    bench.Histogram
	err     error
}

// timeCopies runs one(dst, k) on th threads for d and times each call.
func timeCopies(ctx context.Context, th int, d time.Duration, size int, one func(dst []byte, k int) error) copyResult {
	var mu sync.Mutex
	var res copyResult
	var wg sync.WaitGroup
	start := time.Now()
	until := start.Add(d)
	for t := range th {
		wg.Go(func() {
			runtime.LockOSThread()
			dst := make([]byte, size)
			var h bench.Histogram
			var n int64
			var err error
			for k := t * 7919; ctx.Err() == nil && err == nil; k += 104729 {
				t0 := time.Now()
				if t0.After(until) {
					break
				}
				err = one(dst, k)
				h.Record(time.Since(t0))
				n++
			}
			mu.Lock()
			res.copies += n
			res.hist.Merge(&h)
			if res.err == nil {
				res.err = err
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	res.seconds = time.Since(start).Seconds()
	return res
}

func (r copyResult) print(std cli.Stdio, op string, size, th int) {
	gbs := float64(r.copies) * float64(size) / r.seconds / 1e9
	fmt.Fprintf(std.Out, "%s\t%d\t%d\t%.3f\t%d\t%.3f\t%.1f\t%.1f\n", op, size, th, r.seconds, r.copies, gbs,
		float64(r.hist.Quantile(0.5).Nanoseconds())/1e3, float64(r.hist.Quantile(0.99).Nanoseconds())/1e3)
}

// localFlags parses the flags memcpy and cma share: the block sizes, the
// thread counts, the working set and the time per case.
func localFlags(name, workingUsage string, args []string, std cli.Stdio) ([]int, int64, []int, time.Duration, error) {
	fs := newFlagSet(name, name+" [flags]", std.Out)
	sizes := fs.String("sizes", "64KiB,1MiB,32MiB", "comma-separated block `sizes`")
	threads := fs.String("threads", "1,2", "comma-separated thread counts")
	working := fs.String("working-set", "256MiB", workingUsage)
	duration := fs.Duration("duration", 3*time.Second, "measured time per case")
	if err := cli.ParseNoArgs(fs, args); err != nil {
		return nil, 0, nil, 0, err
	}
	szs, ws, ths, err := localLists(*sizes, *working, *threads)
	return szs, ws, ths, *duration, err
}

// localLists parses the sizes, the working set and the thread counts.
func localLists(sizes, working, threads string) ([]int, int64, []int, error) {
	szs, err := bench.ParseSizes(sizes)
	if err != nil {
		return nil, 0, nil, cli.UsageErr("--sizes: %v", err)
	}
	ws, err := bench.ParseSize(working)
	if err != nil || ws <= 0 {
		return nil, 0, nil, cli.UsageErr("--working-set %q", working)
	}
	var ths []int
	for _, s := range strings.Split(threads, ",") {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 256 {
			return nil, 0, nil, cli.UsageErr("--threads: %q", s)
		}
		ths = append(ths, n)
	}
	return szs, ws, ths, nil
}

// sysProcessVMReadv is process_vm_readv(2)'s number on linux/amd64 (the
// syscall package has it as SYS_PROCESS_VM_READV on some ports only).
const sysProcessVMReadv = 310

// rawIovec is struct iovec holding another process's address.
type rawIovec struct {
	base uintptr
	len  uint64
}
