package benchcli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/cli"
	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/cold/pack"
	"github.com/gpucache/gpucache/internal/cold/refill"
	"github.com/gpucache/gpucache/internal/cold/sink"
)

// runColdDemo publishes a pack to a local-directory cold tier through the
// sink and reads it back through refill, checking the cold tier's
// contracts on the way: exact bytes for the right identity; a miss with no
// payload read for a wrong one; no bytes from a corrupt pack; a forged job
// rejected before any write. It prints COLD_CONTRACT_OK, or
// COLD_CONTRACT_FAIL with the reason.
func runColdDemo(ctx context.Context, args []string, std cli.Stdio) error {
	fs := newFlagSet("cold-demo", "cold-demo [--dir DIR] [--blocks N]", std.Out)
	dir := fs.String("dir", "", "directory for the fs store (default: a temporary directory, removed afterwards)")
	blocks := fs.Int("blocks", 8, "blocks in the pack")
	err := cli.ParseNoArgs(fs, args)
	if err != nil {
		return err
	}
	if *blocks < 2 || *blocks > 1000 {
		return fmt.Errorf("%w: --blocks must be 2..1000", cli.ErrUsage)
	}
	root := *dir
	if root == "" {
		if root, err = os.MkdirTemp("", "gpucache-cold-demo-"); err != nil {
			return err
		}
		defer os.RemoveAll(root)
	}
	if err := coldDemo(ctx, std.Out, root, *blocks); err != nil {
		fmt.Fprintf(std.Out, "COLD_CONTRACT_FAIL: %v\n", err)
		return cli.ErrReported
	}
	fmt.Fprintln(std.Out, "gds=NOT_RUN_HARDWARE (GPUDirect Storage is not linked in this build; refill reads through host memory)")
	fmt.Fprintln(std.Out, "COLD_CONTRACT_OK")
	return nil
}

// countingStore counts payload-range reads (RangeGet of pack objects) and
// writes, so the demo can show what a check did not do.
type countingStore struct {
	cold.Store
	packReads, puts atomic.Int64
}

func (c *countingStore) RangeGet(ctx context.Context, key string, off int64, dst []byte) error {
	if strings.HasPrefix(key, "packs/") {
		c.packReads.Add(1)
	}
	return c.Store.RangeGet(ctx, key, off, dst)
}

func (c *countingStore) Put(ctx context.Context, key string, body []byte, o cold.PutOptions) error {
	c.puts.Add(1)
	return c.Store.Put(ctx, key, body, o)
}

// jobFor turns a built pack into a sink job: pack, manifest, pointers.
func jobFor(p *pack.Pack, nsName string) *sink.Job {
	j := &sink.Job{Namespace: nsName}
	add := func(k sink.ObjectKind, o pack.Object) {
		j.Objects = append(j.Objects, sink.Object{Kind: k, Key: o.Key, Body: o.Body, Digest: sha256.Sum256(o.Body)})
		j.Bytes += int64(len(o.Body))
	}
	add(sink.KindPack, p.Object)
	add(sink.KindManifest, p.Manifest)
	for _, ptr := range p.Pointers {
		add(sink.KindPointer, ptr)
	}
	return j
}

// packVerifier rebuilds the pack a job carries and verifies it under the
// namespace the caller is authenticated for (never one read from the job).
func packVerifier(ns identity.Namespace) sink.Verifier {
	return func(j *sink.Job) error {
		p := &pack.Pack{Namespace: ns}
		for _, o := range j.Objects {
			po := pack.Object{Key: o.Key, Body: o.Body}
			switch o.Kind {
			case sink.KindPack:
				p.Object = po
			case sink.KindManifest:
				p.Manifest = po
			default:
				p.Pointers = append(p.Pointers, po)
			}
		}
		return pack.Verify(p)
	}
}

func coldDemo(ctx context.Context, out io.Writer, root string, n int) error {
	fsStore, err := cold.NewFS(root)
	if err != nil {
		return err
	}
	store := &countingStore{Store: fsStore}
	ns, ids, blocks, p, err := coldDemoPack(n)
	if err != nil {
		return err
	}
	if err := coldDemoSink(ctx, out, store, ns, p, root, n); err != nil {
		return err
	}
	rf, err := refill.New(store, refill.Default())
	if err != nil {
		return err
	}
	if err := coldDemoRefill(ctx, out, store, rf, ids, blocks); err != nil {
		return err
	}
	return coldDemoCorrupt(ctx, out, rf, root, p, ids[n-1])
}

// coldDemoPack builds the demo's pack: n chained 32 KiB blocks.
func coldDemoPack(n int) (identity.Namespace, []identity.CacheIdentity, []pack.Block, *pack.Pack, error) {
	ns := identity.Namespace{Tenant: "demo", TrustDomain: "local", ModelID: "cold-demo", ConfigRevision: "r1",
		TokenizerRevision: "t1", RoPE: "rope:theta=500000", DType: "fp16", Quantization: "none",
		Layout: identity.Layout{Format: "vllm-nhd", TPSize: 1, PPSize: 1, LayerCount: 1, KVHeads: 1, HeadDim: 1, BlockTokens: 16}}
	tokens := make([]uint32, n*16)
	for i := range tokens {
		tokens[i] = uint32(i)
	}
	ids, err := identity.Identities(ns, tokens)
	if err != nil {
		return ns, nil, nil, nil, err
	}
	blocks := make([]pack.Block, n)
	for i, id := range ids {
		k, err := id.Key()
		if err != nil {
			return ns, nil, nil, nil, err
		}
		blocks[i] = pack.Block{Identity: id, Payload: demoPayload(k, 32<<10)}
	}
	p, err := pack.Build(ns, blocks)
	return ns, ids, blocks, p, err
}

// coldDemoSink shows the sink refusing a forged job before any write, then
// publishing the pack under root.
func coldDemoSink(ctx context.Context, out io.Writer, store *countingStore, ns identity.Namespace, p *pack.Pack, root string, n int) error {
	dig, _ := ns.Digest()
	sk, err := sink.New(store, sink.Config{Verify: packVerifier(ns)})
	if err != nil {
		return err
	}
	defer sk.Close()

	// A forged job (a pack body that does not match its key) is refused
	// before any write.
	forged := jobFor(p, dig.String())
	forged.Objects[0].Body = append(bytes.Clone(forged.Objects[0].Body), 0)
	forged.Objects[0].Digest = sha256.Sum256(forged.Objects[0].Body)
	forged.Bytes++
	if _, err := sk.Enqueue(forged); !errors.Is(err, sink.ErrInvalidJob) || store.puts.Load() != 0 {
		return fmt.Errorf("forged job: %v after %d writes; want ErrInvalidJob and none", err, store.puts.Load())
	}
	fmt.Fprintln(out, "sink: forged pack rejected at admission, 0 store writes")

	if _, err := sk.Enqueue(jobFor(p, dig.String())); err != nil {
		return fmt.Errorf("enqueue: %w", err)
	}
	rep := sk.DrainReport(ctx)
	if rep.Err != nil || rep.Completed != 1 {
		return fmt.Errorf("drain: %+v", rep)
	}
	fmt.Fprintf(out, "sink: 1 pack of %d blocks published to %s (%d objects: pack, manifest, %d pointers)\n",
		n, root, 2+len(p.Pointers), len(p.Pointers))
	return nil
}

// coldDemoRefill refills every block byte-identical, and shows that
// another model or tenant misses without reading a payload.
func coldDemoRefill(ctx context.Context, out io.Writer, store *countingStore, rf *refill.Refiller, ids []identity.CacheIdentity, blocks []pack.Block) error {
	n := len(ids)
	dst := make([]byte, 32<<10)
	for i, id := range ids {
		got, res, err := rf.RefillBlock(ctx, id, dst)
		if !res.Hit || err != nil || !bytes.Equal(dst[:got], blocks[i].Payload) {
			return fmt.Errorf("refill block %d: %v %v", i, res, err)
		}
	}
	fmt.Fprintf(out, "refill: %d/%d blocks byte-identical under the full expected identity\n", n, n)

	reads := store.packReads.Load()
	wrong := ids[n/2]
	wrong.ModelID = "another-model"
	wrong.Parent = ids[n/2].Parent
	if _, res, _ := rf.RefillBlock(ctx, wrong, dst); res.Hit || store.packReads.Load() != reads {
		return fmt.Errorf("wrong identity: %v with %d payload reads", res, store.packReads.Load()-reads)
	}
	other := ids[n/2]
	other.Tenant = "someone-else"
	if _, res, _ := rf.RefillForTenant(ctx, "demo", other, dst); res.Hit || store.packReads.Load() != reads {
		return fmt.Errorf("another tenant: %v", res)
	}
	fmt.Fprintln(out, "refill: another model or tenant: miss, 0 payload reads")
	return nil
}

// coldDemoCorrupt flips a byte of the pack on disk: refilling last then
// misses as corrupt and returns no bytes.
func coldDemoCorrupt(ctx context.Context, out io.Writer, rf *refill.Refiller, root string, p *pack.Pack, last identity.CacheIdentity) error {
	dst := make([]byte, 32<<10)
	packPath := filepath.Join(root, "objects", filepath.FromSlash(p.Object.Key))
	body, err := os.ReadFile(packPath)
	if err != nil {
		return err
	}
	body[len(body)-1] ^= 0xff
	if err := os.WriteFile(packPath, body, 0o600); err != nil {
		return err
	}
	got, res, _ := rf.RefillBlock(ctx, last, dst)
	if res.Hit || got != 0 || res.Reason != refill.Corrupt {
		return fmt.Errorf("corrupt pack: %v with %d bytes", res, got)
	}
	fmt.Fprintln(out, "refill: a flipped byte in the pack: miss (corrupt), 0 bytes returned")
	return nil
}
