package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
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
	resp   string // the RESP address ("RESP2 endpoint listening"); "" when off
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
	respLine := regexp.MustCompile(`msg="RESP2 endpoint listening" resp_listen=(\S+)`)
	go func() {
		sc := bufio.NewScanner(stderr)
		var once sync.Once
		var tail []string
		for sc.Scan() {
			if m := respLine.FindStringSubmatch(sc.Text()); m != nil {
				d.resp = m[1] // logged before "gpucached serving", which publishes it
			}
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

// The storm of TestCrashSafetyKill9 PUTs rounds of crashRoundBlocks new
// blocks (one namespace per round) in batches of crashBatch, until the
// daemon dies. crashRounds bounds it by operations (8 GiB at crashSize), so
// that a write-behind that never publishes fails the test instead of
// hanging it; the kill comes long before, once crashPacks packs are
// published.
const (
	crashPacks       = 5
	crashRounds      = 64
	crashRoundBlocks = 4096
	crashSize        = 32 << 10
	crashBatch       = 8
)

// crashRound is one round of the storm: a chain of crashRoundBlocks blocks
// in a namespace of its own, and how many of them the daemon acknowledged.
type crashRound struct {
	ns    client.Namespace
	ids   []client.CacheIdentity
	keys  []client.BlockKey
	acked int // written by the storm goroutine; read after it ends
}

func newCrashRound(t *testing.T, r int) *crashRound {
	ns := client.Namespace{Tenant: "default", TrustDomain: "t", ModelID: "crash", ConfigRevision: fmt.Sprintf("c%d", r), TokenizerRevision: "k",
		RoPE: "rope", DType: "fp16", Quantization: "none",
		Layout: client.Layout{Format: "raw", TPSize: 1, PPSize: 1, LayerCount: 1, KVHeads: 1, HeadDim: 1, BlockTokens: 16}}
	tokens := make([]uint32, crashRoundBlocks*16)
	for i := range tokens {
		tokens[i] = uint32(i)
	}
	ids, err := client.Identities(ns, tokens)
	if err != nil {
		t.Error(err)
		return nil
	}
	c := &crashRound{ns: ns, ids: ids, keys: make([]client.BlockKey, len(ids))}
	for i := range ids {
		c.keys[i], _ = ids[i].Key()
	}
	return c
}

// TestCrashSafetyKill9: kill -9 of the daemon in the middle of a
// write-behind storm, then a restart. Every manifest visible in the cold
// directory references a complete pack whose ranges all verify, and the
// restarted daemon returns, for every block written, either the exact bytes
// or a miss.
//
// The kill waits on events, not on a time budget: the storm keeps PUTting
// new blocks through a 4 MiB hot tier (so every batch evicts blocks and
// offers them to write-behind), and after each acknowledged batch the test
// counts the manifests in the cold directory. The daemon is killed, with
// the storm still running, once crashPacks of them are visible. How many
// blocks that takes depends on the disk and the CPU; the storm is bounded
// by crashRounds, not by the clock.
func TestCrashSafetyKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills a daemon")
	}
	bin := buildDaemon(t)
	coldDir := t.TempDir()
	args := []string{"--hot-capacity", "4MiB", "--hot-max-class", "1MiB", "--hot-slab", "1MiB", "--max-frame", "8MiB",
		"--cold-dir", coldDir, "--cold-flush-interval", "5ms"}
	d := startDaemon(t, bin, args...)

	// The storm: one writer PUTs round after round in batches until the
	// daemon dies. After each acknowledged batch it wakes the watcher below.
	cl, err := client.Dial(context.Background(), client.Config{Addr: d.addr, Conns: 2, RequestTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var (
		rounds   []*crashRound // written by the storm; read after stormDone
		stormErr error         // the Put error that ended the storm; read after stormDone
		written  atomic.Int64  // blocks acknowledged
	)
	stormDone := make(chan struct{})
	acked := make(chan struct{}, 1)
	go func() {
		defer close(stormDone)
		payloads := make([][]byte, crashBatch)
		for r := range crashRounds {
			c := newCrashRound(t, r)
			if c == nil {
				return
			}
			rounds = append(rounds, c)
			for off := 0; off < crashRoundBlocks; off += crashBatch {
				for j := range payloads {
					payloads[j] = crashPayload(c.keys[off+j], crashSize)
				}
				if _, err := cl.Put(context.Background(), c.ns, client.BlocksOf(c.ids[off:off+crashBatch], payloads)); err != nil {
					stormErr = err // the daemon was killed (or died)
					return
				}
				c.acked = off + crashBatch
				written.Add(crashBatch)
				select {
				case acked <- struct{}{}:
				default: // the watcher has a wake-up pending already
				}
			}
		}
	}()

	// Kill once write-behind has published crashPacks packs. The daemon is
	// another process with no channel to wait on: its cold directory is
	// looked at after each batch the storm gets acknowledged, the event
	// that drives write-behind.
	store, err := cold.NewFS(coldDir)
	if err != nil {
		t.Fatal(err)
	}
	for countManifests(t, store) < crashPacks {
		select {
		case <-acked:
		case <-stormDone:
			if n := countManifests(t, store); n < crashPacks {
				t.Fatalf("the storm ended (Put error: %v) after %d blocks acknowledged (%d MiB through a 4 MiB hot tier) with %d packs published, want %d",
					stormErr, written.Load(), written.Load()*crashSize>>20, n, crashPacks)
			}
		}
	}
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
	hits := 0
	for _, c := range rounds {
		for off := 0; off < c.acked; off += 64 {
			for j, r := range cl2.Get(ctx, c.ns, c.keys[off:min(off+64, c.acked)]) {
				if !r.Hit {
					continue
				}
				hits++
				if !bytes.Equal(r.Data, crashPayload(c.keys[off+j], crashSize)) {
					t.Fatalf("namespace %s block %d: other bytes after the crash", c.ns.ConfigRevision, off+j)
				}
			}
		}
	}
	if hits == 0 {
		t.Fatal("nothing written behind survived the crash")
	}
	pointers := 0
	store.List(ctx, "index/", func(cold.ObjectInfo) error { pointers++; return nil })
	t.Logf("killed after %d blocks acknowledged; %d manifests (%d ranges) visible and verified, %d pointers; %d blocks served after restart, the rest misses",
		written.Load(), manifests, ranges, pointers, hits)
	d2.cmd.Process.Signal(syscall.SIGTERM)
	<-d2.exited
}
