package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gpucache/gpucache/client"
	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/cold/pack"
)

// daemonProc is a gpucached process started by a test.
type daemonProc struct {
	cmd    *exec.Cmd
	addr   string
	admin  string // "off" when the admin listener is off
	exited chan error

	mu       sync.Mutex
	watchers []logWatch // guarded by mu
}

type logWatch struct {
	substr string
	hit    chan string
}

// expect returns a channel that receives the first log line, from now on,
// containing substr. Register it before causing the line.
func (d *daemonProc) expect(substr string) <-chan string {
	w := logWatch{substr: substr, hit: make(chan string, 1)}
	d.mu.Lock()
	d.watchers = append(d.watchers, w)
	d.mu.Unlock()
	return w.hit
}

func (d *daemonProc) seeLine(line string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	kept := d.watchers[:0]
	for _, w := range d.watchers {
		if strings.Contains(line, w.substr) {
			w.hit <- line
			continue
		}
		kept = append(kept, w)
	}
	d.watchers = kept
}

func buildDaemon(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "gpucached")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/gpucache/gpucache/cmd/gpucached").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// startDaemon runs bin with args and returns once it serves. Its log is
// drained in the background so the process never blocks on stderr.
func startDaemon(t *testing.T, bin string, args ...string) *daemonProc {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"--listen", "127.0.0.1:0", "--admin-listen", "off"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &daemonProc{cmd: cmd, exited: make(chan error, 1)}
	addr := make(chan [2]string, 1)
	serving := regexp.MustCompile(`msg="gpucached serving" data=(\S+) admin=(\S*)`)
	go func() {
		sc := bufio.NewScanner(stderr)
		var once sync.Once
		var tail []string
		for sc.Scan() {
			if m := serving.FindStringSubmatch(sc.Text()); m != nil {
				once.Do(func() { addr <- [2]string{m[1], m[2]} })
			}
			d.seeLine(sc.Text())
			tail = append(tail[max(0, len(tail)-20):], sc.Text())
		}
		once.Do(func() { close(addr) })
		err := cmd.Wait()
		if err != nil && !strings.Contains(err.Error(), "killed") {
			t.Logf("daemon log tail:\n%s", strings.Join(tail, "\n"))
		}
		d.exited <- err
	}()
	t.Cleanup(func() { cmd.Process.Kill() })
	a, ok := <-addr
	if !ok {
		t.Fatalf("daemon exited before serving: %v", <-d.exited)
	}
	d.addr, d.admin = a[0], a[1]
	return d
}

func crashPayload(k client.BlockKey, n int) []byte {
	b := make([]byte, n)
	s := sha256.Sum256(k[:])
	for i := range b {
		b[i] = s[i%32] ^ byte(i>>5)
	}
	return b
}

// countManifests lists the fs cold tier's visible manifests.
func countManifests(t *testing.T, store cold.Store) int {
	n := 0
	if err := store.List(context.Background(), "manifests/", func(cold.ObjectInfo) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCrashSafetyKill9: kill -9 of the daemon in the middle of a
// write-behind storm, then a restart. Every manifest visible in the cold
// directory references a complete pack whose ranges all verify, and the
// restarted daemon returns, for every block written, either the exact bytes
// or a miss.
func TestCrashSafetyKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills a daemon")
	}
	bin := buildDaemon(t)
	coldDir := t.TempDir()
	args := []string{"--hot-capacity", "4MiB", "--hot-max-class", "1MiB", "--hot-slab", "1MiB", "--max-frame", "8MiB",
		"--cold-dir", coldDir, "--cold-flush-interval", "5ms"}
	d := startDaemon(t, bin, args...)

	ns := client.Namespace{Tenant: "default", TrustDomain: "t", ModelID: "crash", ConfigRevision: "c", TokenizerRevision: "k",
		RoPE: "rope", DType: "fp16", Quantization: "none",
		Layout: client.Layout{Format: "raw", TPSize: 1, PPSize: 1, LayerCount: 1, KVHeads: 1, HeadDim: 1, BlockTokens: 16}}
	const blocks, size = 4000, 32 << 10 // 125 MiB through a 4 MiB hot tier
	tokens := make([]uint32, blocks*16)
	for i := range tokens {
		tokens[i] = uint32(i)
	}
	ids, err := client.Identities(ns, tokens)
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]client.BlockKey, blocks)
	for i := range ids {
		keys[i], _ = ids[i].Key()
	}

	// The storm: one writer PUTs the chain in batches until the daemon dies.
	cl, err := client.Dial(context.Background(), client.Config{Addr: d.addr, Conns: 2, RequestTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var written atomic.Int64
	stormDone := make(chan struct{})
	go func() {
		defer close(stormDone)
		for off := 0; off < blocks; off += 8 {
			payloads := make([][]byte, 8)
			for j := range payloads {
				payloads[j] = crashPayload(keys[off+j], size)
			}
			if _, err := cl.Put(context.Background(), ns, client.BlocksOf(ids[off:off+8], payloads)); err != nil {
				return // the daemon was killed
			}
			written.Store(int64(off + 8))
		}
	}()

	// Kill once write-behind has published some packs. Waiting on another
	// process's side effects has no channel to wait on: poll the directory,
	// bounded, and give up if the storm ends first.
	store, err := cold.NewFS(coldDir)
	if err != nil {
		t.Fatal(err)
	}
	tick := time.NewTicker(2 * time.Millisecond)
	deadline := time.After(60 * time.Second)
	for countManifests(t, store) < 5 {
		select {
		case <-tick.C:
		case <-stormDone:
			t.Fatal("the storm ended before write-behind published 5 packs")
		case <-deadline:
			t.Fatal("no packs published within 60s")
		}
	}
	tick.Stop()
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-d.exited
	<-stormDone

	// Every visible manifest references a complete pack whose ranges verify.
	ctx := context.Background()
	manifests, ranges := 0, 0
	err = store.List(ctx, "manifests/", func(oi cold.ObjectInfo) error {
		body := make([]byte, oi.Size)
		if err := store.RangeGet(ctx, oi.Key, 0, body); err != nil {
			t.Fatalf("manifest %s: %v", oi.Key, err)
		}
		m, err := pack.OpenManifest(oi.Key, body)
		if err != nil {
			t.Fatalf("visible manifest %s does not verify: %v", oi.Key, err)
		}
		info, err := store.Head(ctx, m.PackKey)
		if err != nil || uint64(info.Size) != m.PackSize {
			t.Fatalf("manifest %s references pack %s: %+v %v", oi.Key, m.PackKey, info, err)
		}
		for _, r := range m.Ranges {
			b := make([]byte, r.Length)
			if err := store.RangeGet(ctx, m.PackKey, int64(r.Offset), b); err != nil || pack.Sum(b) != r.Sum {
				t.Fatalf("pack %s range of block %s does not verify: %v", m.PackKey, r.Key, err)
			}
			ranges++
		}
		manifests++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// Restart on the same directory: exact bytes or a miss, block by block.
	d2 := startDaemon(t, bin, args...)
	cl2, err := client.Dial(ctx, client.Config{Addr: d2.addr})
	if err != nil {
		t.Fatal(err)
	}
	defer cl2.Close()
	n := int(written.Load())
	hits := 0
	for off := 0; off < n; off += 64 {
		for j, r := range cl2.Get(ctx, ns, keys[off:min(off+64, n)]) {
			if !r.Hit {
				continue
			}
			hits++
			if !bytes.Equal(r.Data, crashPayload(keys[off+j], size)) {
				t.Fatalf("block %d: other bytes after the crash", off+j)
			}
		}
	}
	if hits == 0 {
		t.Fatal("nothing written behind survived the crash")
	}
	pointers := 0
	store.List(ctx, "index/", func(cold.ObjectInfo) error { pointers++; return nil })
	t.Logf("killed after %d blocks acknowledged; %d manifests (%d ranges) visible and verified, %d pointers; %d blocks served after restart, the rest misses",
		n, manifests, ranges, pointers, hits)
	d2.cmd.Process.Signal(syscall.SIGTERM)
	<-d2.exited
}
