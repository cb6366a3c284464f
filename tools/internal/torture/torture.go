// Package torture is the flash tier's kill -9 torture: a gpucached process
// started again and again on the same flash directory, written to under
// load and killed at a random moment (every third loop during the drain
// spill), and after each start every block it ever acknowledged is read
// back. The contract (issue 28, docs/FAILURES.md): every acknowledged
// block is served byte for byte or is absent (corrupt: 0), and nothing is
// served under an identity nothing stored (phantom: 0).
//
// Run drives it; `gpucache-bench torture` is its CLI, and a short run is
// part of the test suite (TestTortureShort).
package torture

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gpucache/gpucache/client"
)

// Config is one torture run.
type Config struct {
	// Daemon is the gpucached binary (required).
	Daemon string
	// Dir holds the flash directory (Dir/flash) across loops (required).
	Dir string
	// Loops is how many kill/restart loops run. Default 100.
	Loops int
	// Seed makes the kill moments and the writes repeatable. Default 1.
	Seed uint64
	// BlockSize is each block's payload size. Default 16 KiB.
	BlockSize int
	// Batch is the blocks per PUT. Default 8.
	Batch int
	// MaxBatches bounds the PUT batches of one loop before it is killed
	// anyway (the kill comes after a random number of acknowledged
	// batches, 1..MaxBatches). Default 200.
	MaxBatches int
	// Args are extra gpucached flags (after the torture's own).
	Args []string
	// Log receives one line per loop; nil: none.
	Log io.Writer
}

func (c *Config) defaults() error {
	if c.Daemon == "" || c.Dir == "" {
		return errors.New("torture: Daemon and Dir are required")
	}
	if c.Loops <= 0 {
		c.Loops = 100
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.BlockSize <= 0 {
		c.BlockSize = 16 << 10
	}
	if c.Batch <= 0 {
		c.Batch = 8
	}
	if c.MaxBatches <= 0 {
		c.MaxBatches = 200
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	return nil
}

// Report is what a run found.
type Report struct {
	Loops        int   `json:"loops"`
	DrainKills   int   `json:"drain_kills"`   // loops killed during the drain spill
	Acked        int   `json:"acked"`         // blocks acknowledged over the run
	Checks       int64 `json:"checks"`        // acknowledged blocks read back, over all loops
	Served       int64 `json:"served"`        // of them, served byte for byte
	Absent       int64 `json:"absent"`        // of them, misses
	Corrupt      int64 `json:"corrupt"`       // of them, served with other bytes
	Phantom      int64 `json:"phantom"`       // blocks served under an identity never stored
	PhantomReads int64 `json:"phantom_reads"` // reads of never-stored identities
	FlashServed  int64 `json:"flash_served"`  // acknowledged blocks served right after a restart (DRAM is empty then: from flash)
}

// round is one loop's writes: a chain in a namespace of its own.
type round struct {
	ns    client.Namespace
	ids   []client.CacheIdentity
	keys  []client.BlockKey
	acked int
}

func namespace(model string, loop int) client.Namespace {
	return client.Namespace{Tenant: "default", TrustDomain: "t", ModelID: model, ConfigRevision: fmt.Sprintf("loop%d", loop), TokenizerRevision: "k",
		RoPE: "rope", DType: "fp16", Quantization: "none",
		Layout: client.Layout{Format: "raw", TPSize: 1, PPSize: 1, LayerCount: 1, KVHeads: 1, HeadDim: 1, BlockTokens: 16}}
}

func newRound(loop, blocks int) (*round, error) {
	ns := namespace("torture", loop)
	tokens := make([]uint32, blocks*16)
	for i := range tokens {
		tokens[i] = uint32(loop*7919 + i)
	}
	ids, err := client.Identities(ns, tokens)
	if err != nil {
		return nil, err
	}
	r := &round{ns: ns, ids: ids, keys: make([]client.BlockKey, len(ids))}
	for i := range ids {
		if r.keys[i], err = ids[i].Key(); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Payload is the bytes stored under key: derived from it, so any block
// can be checked without keeping its bytes.
func Payload(k client.BlockKey, n int) []byte {
	b := make([]byte, n)
	s := sha256.Sum256(k[:])
	for i := range b {
		b[i] = s[i%32] ^ byte(i>>5) ^ byte(i>>13)
	}
	return b
}

// Run runs the torture and returns what it found; an error means the run
// itself failed (a daemon that would not start), not a broken contract:
// check Report.Corrupt and Report.Phantom.
func Run(ctx context.Context, cfg Config) (Report, error) {
	if err := cfg.defaults(); err != nil {
		return Report{}, err
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x7f4a7c15))
	var rep Report
	var rounds []*round
	for loop := range cfg.Loops {
		d, err := start(ctx, cfg)
		if err != nil {
			return rep, fmt.Errorf("loop %d: %w", loop, err)
		}
		cl, err := client.Dial(ctx, client.Config{Addr: d.addr, Conns: 2, RequestTimeout: 10 * time.Second})
		if err != nil {
			d.kill()
			return rep, fmt.Errorf("loop %d: dial: %w", loop, err)
		}
		before := rep
		if err := check(ctx, cl, cfg, rounds, loop, &rep); err != nil {
			cl.Close()
			d.kill()
			return rep, fmt.Errorf("loop %d: check: %w", loop, err)
		}
		rep.FlashServed += rep.Served - before.Served
		r, err := newRound(loop, cfg.MaxBatches*cfg.Batch)
		if err != nil {
			cl.Close()
			d.kill()
			return rep, err
		}
		rounds = append(rounds, r)
		duringDrain := loop%3 == 2
		killAfter := 1 + rng.IntN(cfg.MaxBatches)
		write(ctx, cl, cfg, r, d, killAfter, duringDrain, rng)
		cl.Close()
		rep.Loops++
		if duringDrain {
			rep.DrainKills++
		}
		rep.Acked += r.acked
		fmt.Fprintf(cfg.Log, "loop %d: acked %d (total %d), checked %d: served %d absent %d corrupt %d phantom %d%s\n",
			loop, r.acked, rep.Acked, rep.Checks-before.Checks, rep.Served-before.Served, rep.Absent-before.Absent,
			rep.Corrupt-before.Corrupt, rep.Phantom-before.Phantom, map[bool]string{true: " (killed during the drain spill)"}[duringDrain])
	}
	// A last start checks the last loop's writes.
	d, err := start(ctx, cfg)
	if err != nil {
		return rep, fmt.Errorf("final start: %w", err)
	}
	defer d.kill()
	cl, err := client.Dial(ctx, client.Config{Addr: d.addr, Conns: 2, RequestTimeout: 10 * time.Second})
	if err != nil {
		return rep, err
	}
	defer cl.Close()
	return rep, check(ctx, cl, cfg, rounds, cfg.Loops, &rep)
}

// check reads back every acknowledged block, and as many never-stored
// identities: the same keys under a namespace nothing wrote to, and keys
// of this loop's namespace that no round reaches.
func check(ctx context.Context, cl *client.Client, cfg Config, rounds []*round, loop int, rep *Report) error {
	const batch = 64
	for _, r := range rounds {
		for off := 0; off < r.acked; off += batch {
			keys := r.keys[off:min(off+batch, r.acked)]
			res := cl.Get(ctx, r.ns, keys)
			for j, g := range res {
				rep.Checks++
				switch {
				case g.Hit && bytes.Equal(g.Data, Payload(keys[j], cfg.BlockSize)):
					rep.Served++
				case g.Hit:
					rep.Corrupt++
				case errors.Is(g.Reason, client.ErrNotCached):
					rep.Absent++
				default:
					return fmt.Errorf("GET failed (not a miss): %w", g.Reason)
				}
			}
			// The same keys under a namespace nothing wrote to.
			shadow := r.ns
			shadow.ModelID = "never-stored"
			for _, g := range cl.Get(ctx, shadow, keys) {
				rep.PhantomReads++
				if g.Hit {
					rep.Phantom++
				}
			}
		}
	}
	return nil
}

// write PUTs r's blocks in batches until killAfter batches are
// acknowledged, then kills the daemon: at once, or (duringDrain) with
// SIGTERM and then SIGKILL once the drain spill has started. Reads of
// earlier blocks run alongside, so refills from flash mix with evictions.
func write(ctx context.Context, cl *client.Client, cfg Config, r *round, d *proc, killAfter int, duringDrain bool, rng *rand.Rand) {
	payloads := make([][]byte, cfg.Batch)
	stop := make(chan struct{})
	var acked atomic.Int64 // r.acked while the reader runs
	var readers sync.WaitGroup
	readers.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			n := int(acked.Load())
			if n == 0 {
				runtime.Gosched()
				continue
			}
			k := i % n
			cl.Get(ctx, r.ns, r.keys[k:k+1])
		}
	})
	var spill <-chan string
	for b := range cfg.MaxBatches {
		off := b * cfg.Batch
		for j := range payloads {
			payloads[j] = Payload(r.keys[off+j], cfg.BlockSize)
		}
		st, err := cl.Put(ctx, r.ns, client.BlocksOf(r.ids[off:off+cfg.Batch], payloads))
		if err != nil {
			break
		}
		ok := true
		for _, s := range st {
			ok = ok && (s == client.StatusStored || s == client.StatusExists)
		}
		if !ok {
			break
		}
		r.acked = off + cfg.Batch
		acked.Store(int64(r.acked))
		if b+1 == killAfter {
			if duringDrain {
				spill = d.expect("drain spill")
				d.cmd.Process.Signal(syscall.SIGTERM)
			}
			break
		}
	}
	if spill != nil {
		select {
		case <-spill:
		case <-d.exited:
		}
		// A random moment within the spill, a few microseconds to a few
		// milliseconds in: the fault's timing, not a synchronisation.
		time.Sleep(time.Duration(rng.IntN(5000)) * time.Microsecond)
	}
	d.kill()
	close(stop)
	readers.Wait()
}

// proc is a gpucached process.
type proc struct {
	cmd    *exec.Cmd
	addr   string
	exited chan struct{}

	mu       sync.Mutex
	watchers map[string]chan string
}

// expect returns a channel that gets the first log line, from now on,
// containing substr.
func (p *proc) expect(substr string) <-chan string {
	ch := make(chan string, 1)
	p.mu.Lock()
	p.watchers[substr] = ch
	p.mu.Unlock()
	return ch
}

func (p *proc) kill() {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

var servingLine = regexp.MustCompile(`msg="gpucached serving" data=(\S+)`)

func start(ctx context.Context, cfg Config) (*proc, error) {
	args := append([]string{"--listen", "127.0.0.1:0", "--admin-listen", "off", "--cold-store", "off",
		"--hot-capacity", "4MiB", "--hot-max-class", "1MiB", "--hot-slab", "1MiB", "--max-frame", "8MiB",
		"--flash-dir", filepath.Join(cfg.Dir, "flash"), "--flash-capacity", "32MiB", "--flash-segment", "4MiB",
		"--flash-write-buffer", "4MiB", "--drain-timeout", "10s"}, cfg.Args...)
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "flash"), 0o755); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, cfg.Daemon, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{cmd: cmd, exited: make(chan struct{}), watchers: map[string]chan string{}}
	addr := make(chan string, 1)
	var tail []string
	go func() {
		sc := bufio.NewScanner(stderr)
		var once sync.Once
		for sc.Scan() {
			line := sc.Text()
			if m := servingLine.FindStringSubmatch(line); m != nil {
				once.Do(func() { addr <- m[1] })
			}
			p.mu.Lock()
			for s, ch := range p.watchers {
				if strings.Contains(line, s) {
					ch <- line
					delete(p.watchers, s)
				}
			}
			p.mu.Unlock()
			tail = append(tail[max(0, len(tail)-20):], line)
		}
		once.Do(func() { close(addr) })
		cmd.Wait()
		close(p.exited)
	}()
	a, ok := <-addr
	if !ok {
		<-p.exited
		return nil, fmt.Errorf("gpucached exited before serving:\n%s", strings.Join(tail, "\n"))
	}
	p.addr = a
	return p, nil
}
