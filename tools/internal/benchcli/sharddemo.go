package benchcli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpucache/gpucache/client"
	"github.com/gpucache/gpucache/internal/cli"
	"github.com/gpucache/gpucache/internal/directory"
	"github.com/gpucache/gpucache/internal/hot"
	"github.com/gpucache/gpucache/internal/server"
	"github.com/gpucache/gpucache/internal/transport"
)

// runShardDemo exercises a two-shard directory end to end on loopback: two
// in-process nodes (shard 0 and shard 1), a chain whose blocks are placed
// on them by rendezvous hashing, and a stampede of clients per shard. It
// checks that every block is computed once, that every client ends with the
// same bytes, and that the shards never share a flight; then it sends a
// stage over TCP through SubmitPreferringRDMA, which falls back because RDMA
// is not linked. It prints SHARD_OK, or SHARD_FAIL with the reason.
func runShardDemo(ctx context.Context, args []string, std cli.Stdio) error {
	fs := newFlagSet("shard-demo", "shard-demo [--clients N] [--blocks N] [--block-size SIZE]", std.Out)
	clients := fs.Int("clients", 8, "concurrent clients per shard")
	blocks := fs.Int("blocks", 32, "blocks in the chain")
	size := fs.Int("block-size", 16<<10, "bytes per block")
	err := cli.ParseNoArgs(fs, args)
	if err != nil {
		return err
	}
	if *clients < 1 || *blocks < 2 || *size < 16 || *size > 1<<20 {
		return fmt.Errorf("%w: need --clients >= 1, --blocks >= 2, 16 <= --block-size <= 1MiB", cli.ErrUsage)
	}
	err = shardDemo(ctx, std.Out, *clients, *blocks, *size)
	if err != nil {
		fmt.Fprintf(std.Out, "SHARD_FAIL: %v\n", err)
		return cli.ErrReported
	}
	fmt.Fprintln(std.Out, "SHARD_OK")
	return nil
}

// demoNode is one in-process node.
type demoNode struct {
	shard  directory.ShardID
	addr   string
	srv    *server.Server
	store  *hot.Store
	served chan error
}

func startDemoNode(shard directory.ShardID) (*demoNode, error) {
	store, err := hot.New(hot.Config{CapacityBytes: 64 << 20, SlabBytes: 4 << 20, MaxClass: 1 << 20})
	if err != nil {
		return nil, err
	}
	srv, err := server.New(server.Config{Store: store, Shard: shard, Name: fmt.Sprintf("shard-%d", shard),
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		store.Close()
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		store.Close()
		return nil, err
	}
	n := &demoNode{shard: shard, addr: ln.Addr().String(), srv: srv, store: store, served: make(chan error, 1)}
	go func() { n.served <- srv.Serve(ln) }()
	return n, nil
}

func (n *demoNode) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n.srv.Shutdown(ctx)
	<-n.served
	n.store.Close()
}

func (n *demoNode) stat(name string) uint64 {
	for _, e := range n.srv.Stats() {
		if e.Name == name {
			return e.Value
		}
	}
	return 0
}

// owner places a key on a shard by rendezvous hashing: the shard with the
// highest hash of (shard, key) wins.
func owner(key client.BlockKey, shards int) int {
	best, bestScore := 0, uint64(0)
	for s := range shards {
		var b [4 + 32]byte
		binary.LittleEndian.PutUint32(b[:4], uint32(s))
		copy(b[4:], key[:])
		h := sha256.Sum256(b[:])
		if score := binary.LittleEndian.Uint64(h[:8]); s == 0 || score > bestScore {
			best, bestScore = s, score
		}
	}
	return best
}

func demoPayload(k client.BlockKey, size int) []byte {
	b := make([]byte, size)
	seed := sha256.Sum256(k[:])
	for off := 0; off < size; off += len(seed) {
		copy(b[off:], seed[:])
		seed = sha256.Sum256(seed[:])
	}
	return b
}

func shardDemo(ctx context.Context, out io.Writer, clients, blocks, size int) error {
	nodes := make([]*demoNode, 2)
	for s := range nodes {
		n, err := startDemoNode(directory.ShardID(s))
		if err != nil {
			return fmt.Errorf("start shard %d: %w", s, err)
		}
		defer n.stop()
		nodes[s] = n
	}
	ns := client.Namespace{Tenant: "demo", TrustDomain: "loopback", ModelID: "shard-demo", ConfigRevision: "r1",
		TokenizerRevision: "t1", RoPE: "rope:theta=500000", DType: "fp16", Quantization: "none",
		Layout: client.Layout{Format: "vllm-nhd", TPSize: 1, PPSize: 1, LayerCount: 1, KVHeads: 1, HeadDim: 1, BlockTokens: 16}}
	tokens := make([]uint32, blocks*16)
	for i := range tokens {
		tokens[i] = uint32(i*31 + 7)
	}
	chain, err := client.Chain(ns, tokens)
	if err != nil {
		return err
	}
	ids, err := client.Identities(ns, tokens)
	if err != nil {
		return err
	}
	perShard := make([][]client.BlockKey, len(nodes))
	idsPerShard := make([][]client.CacheIdentity, len(nodes))
	for i, k := range chain {
		s := owner(k, len(nodes))
		perShard[s] = append(perShard[s], k)
		idsPerShard[s] = append(idsPerShard[s], ids[i])
	}
	calls := make(map[client.BlockKey]*atomic.Int32, len(chain))
	for _, k := range chain {
		calls[k] = new(atomic.Int32)
	}
	fmt.Fprintf(out, "chain: %d blocks of %d bytes, placed by rendezvous hashing: shard 0 owns %d, shard 1 owns %d\n",
		blocks, size, len(perShard[0]), len(perShard[1]))

	// A stampede per shard, all at once.
	type result struct {
		shard int
		data  [][]byte
		rep   client.FillReport
		err   error
	}
	results := make(chan result, clients*len(nodes))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for s, n := range nodes {
		keys, shardIDs := perShard[s], idsPerShard[s]
		if len(keys) == 0 {
			continue
		}
		for range clients {
			c, err := client.Dial(ctx, client.Config{Addr: n.addr, Tenant: ns.Tenant, Conns: 1})
			if err != nil {
				return fmt.Errorf("dial shard %d: %w", s, err)
			}
			defer c.Close()
			wg.Go(func() {
				<-start
				data, rep, err := c.GetOrFillIdentities(ctx, ns, shardIDs, func(_ context.Context, idx []int) ([][]byte, error) {
					p := make([][]byte, len(idx))
					for j, i := range idx {
						calls[keys[i]].Add(1)
						p[j] = demoPayload(keys[i], size)
					}
					return p, nil
				})
				results <- result{s, data, rep, err}
			})
		}
	}
	began := time.Now()
	close(start)
	wg.Wait()
	elapsed := time.Since(began)
	close(results)
	for r := range results {
		if r.err != nil {
			return fmt.Errorf("shard %d client: %w", r.shard, r.err)
		}
		for i, b := range r.data {
			if !bytes.Equal(b, demoPayload(perShard[r.shard][i], size)) {
				return fmt.Errorf("shard %d: a client read different bytes for block %d", r.shard, i)
			}
		}
	}
	for _, k := range chain {
		if n := calls[k].Load(); n != 1 {
			return fmt.Errorf("block %s computed %d times, want 1", k, n)
		}
	}
	var leads uint64
	for s, n := range nodes {
		l, j := n.stat("fill_leads"), n.stat("fill_joins")
		fmt.Fprintf(out, "shard %d: %d blocks, %d fills led, %d joins, %d promotions, %d bytes in\n",
			s, len(perShard[s]), l, j, n.stat("fill_promotions"), n.stat("bytes_in"))
		if l != uint64(len(perShard[s])) {
			return fmt.Errorf("shard %d led %d fills for %d blocks: flights leaked across shards", s, l, len(perShard[s]))
		}
		leads += l
	}
	fmt.Fprintf(out, "stampede: %d clients per shard, %d fills for %d blocks (without coordination: %d), all complete in %v\n",
		clients, leads, blocks, clients*blocks, elapsed.Round(time.Microsecond))
	fmt.Fprintln(out, "flights shared across shards: 0 (a token is only valid on its own shard)")

	return transportDemo(ctx, out)
}

// transportDemo sends a two-slot stage between two registries over a real
// loopback TCP connection through SubmitPreferringRDMA.
func transportDemo(ctx context.Context, out io.Writer) error {
	rd, rerr := transport.OpenNIXL(transport.NIXLConfig{})
	if rerr == nil || !errors.Is(rerr, transport.ErrNotLinked) {
		return fmt.Errorf("OpenNIXL did not refuse: %v", rerr)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	cc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return err
	}
	sc, ok := <-accepted
	if !ok {
		cc.Close()
		return errors.New("accept failed")
	}
	send, err := transport.NewTCP(cc, transport.TCPConfig{})
	if err != nil {
		return err
	}
	defer send.Close()
	recv, err := transport.NewTCP(sc, transport.TCPConfig{})
	if err != nil {
		return err
	}
	defer recv.Close()
	regA, err := transport.NewRegistry(transport.RegistryConfig{Slots: 4, SlotSize: 64 << 10})
	if err != nil {
		return err
	}
	defer regA.Close()
	regB, err := transport.NewRegistry(transport.RegistryConfig{Slots: 4, SlotSize: 64 << 10})
	if err != nil {
		return err
	}
	defer regB.Close()
	st, err := regA.Checkout("peer-b", 2, regA.Epoch())
	if err != nil {
		return err
	}
	defer regA.Release(st)
	for i := range st.Len() {
		n := 20000 + 9000*i
		b := st.Slot(i)[:n]
		for j := range b {
			b[j] = byte(i*7 + j)
		}
		st.SetLen(i, n)
	}
	in, err := regB.Checkout("peer-a", 2, regB.Epoch())
	if err != nil {
		return err
	}
	defer regB.Release(in)
	got := make(chan error, 1)
	go func() { _, err := recv.Receive(ctx, in); got <- err }()
	// The shard transfer goes through the degrade boundary, as a peer
	// transfer in a node would: bounded, and any failure a clean miss.
	rc, err := transport.SubmitPreferringRDMA(ctx, rd, transport.Bounded(send, 0), st)
	if err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	if err := <-got; err != nil {
		return fmt.Errorf("receive: %w", err)
	}
	for i := range st.Len() {
		if !bytes.Equal(st.Payload(i), in.Payload(i)) {
			return fmt.Errorf("slot %d arrived different", i)
		}
	}
	if rc.DMAPosted || rc.Fallback != transport.FallbackRdmaNotLinked {
		return fmt.Errorf("receipt %+v: want dma_posted=false fallback=RdmaNotLinked", rc)
	}
	fmt.Fprintf(out, "transport: %s bytes=%d host_copies=%d dma_posted=%v fallback=%s\n",
		rc.Transport, rc.Bytes, rc.HostCopies, rc.DMAPosted, rc.Fallback)
	fmt.Fprintf(out, "rdma=%s (%v)\n", transport.NotRunHardware, rerr)
	return nil
}
