package clienttest_test

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"time"

	"github.com/gpucache/gpucache/client"
)

// The examples run against servers that TestMain starts: nodeAddr is one
// node, clusterSeeds a seed of a three-node cluster (main_test.go).

// exampleNamespace is the identity every block of the examples shares:
// the tenant, the model and its revisions, and the KV layout.
func exampleNamespace(model string) client.Namespace {
	return client.Namespace{
		Tenant: "acme", TrustDomain: "prod", ModelID: model,
		ConfigRevision: "r1", TokenizerRevision: "t1", RoPE: "rope-theta-500000",
		DType: "fp16", Quantization: "none",
		Layout: client.Layout{Format: "vllm-nhd", TPSize: 1, PPSize: 1,
			LayerCount: 2, KVHeads: 1, HeadDim: 8, BlockTokens: 16},
	}
}

// examplePrompt returns n blocks' worth of token ids.
func examplePrompt(n int, seed uint32) []uint32 {
	tokens := make([]uint32, 16*n)
	for i := range tokens {
		tokens[i] = seed*100000 + uint32(i)
	}
	return tokens
}

// kv stands for the KV cache an engine computed for block i.
func kv(i int) []byte { return bytes.Repeat([]byte{byte(i)}, 4096) }

func ExampleClient_Get() {
	ctx := context.Background()
	c, err := client.Dial(ctx, client.Config{Addr: nodeAddr, Tenant: "acme"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ns := exampleNamespace("example-get")
	ids, err := client.Identities(ns, examplePrompt(4, 1))
	if err != nil {
		log.Fatal(err)
	}
	// Store the first three blocks with their identities; the server
	// derives each key from its identity and refuses a mismatch.
	statuses, err := c.Put(ctx, ns, client.BlocksOf(ids[:3], [][]byte{kv(0), kv(1), kv(2)}))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("put:", statuses)

	keys, err := client.Chain(ns, examplePrompt(4, 1))
	if err != nil {
		log.Fatal(err)
	}
	for i, r := range c.Get(ctx, ns, keys) {
		if !r.Hit {
			fmt.Printf("block %d: miss (%v)\n", i, r.Reason)
			continue
		}
		fmt.Printf("block %d: %d bytes, intact %v\n", i, len(r.Data), bytes.Equal(r.Data, kv(i)))
	}
	// Output:
	// put: [STORED STORED STORED]
	// block 0: 4096 bytes, intact true
	// block 1: 4096 bytes, intact true
	// block 2: 4096 bytes, intact true
	// block 3: miss (gpucache/client: not cached)
}

// Lookup finds the leading run of cached blocks and pins it with a lease;
// a Get WithLease reads the run and releases the lease.
func ExampleClient_Lookup() {
	ctx := context.Background()
	c, err := client.Dial(ctx, client.Config{Addr: nodeAddr, Tenant: "acme"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ns := exampleNamespace("example-lookup")
	tokens := examplePrompt(5, 2)
	ids, _ := client.Identities(ns, tokens)
	if _, err := c.Put(ctx, ns, client.BlocksOf(ids[:2], [][]byte{kv(0), kv(1)})); err != nil {
		log.Fatal(err)
	}

	keys, _ := client.Chain(ns, tokens)
	hits, lease, err := c.Lookup(ctx, ns, keys, 2*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d of %d blocks cached, leased %v\n", hits, len(keys), lease != 0)
	loaded := 0
	for _, r := range c.Get(ctx, ns, keys[:hits], client.WithLease(lease)) {
		if r.Hit {
			loaded++
		}
	}
	fmt.Println("loaded", loaded, "blocks; recompute", len(keys)-loaded)
	// Output:
	// 2 of 5 blocks cached, leased true
	// loaded 2 blocks; recompute 3
}

// GetOrFill reads what is cached and computes the rest, once across every
// caller that asks for the same blocks at the same time.
func ExampleClient_GetOrFill() {
	ctx := context.Background()
	c, err := client.Dial(ctx, client.Config{Addr: nodeAddr, Tenant: "acme"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ns := exampleNamespace("example-fill")
	tokens := examplePrompt(3, 3)
	compute := func(_ context.Context, idx []int) ([][]byte, error) {
		fmt.Println("computing blocks", idx)
		out := make([][]byte, len(idx))
		for k, i := range idx {
			out[k] = kv(i)
		}
		return out, nil
	}
	for range 2 {
		blocks, rep, err := c.GetOrFill(ctx, ns, tokens, compute)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%d blocks: %d cached, %d computed\n", len(blocks), rep.Hits, rep.Led+rep.Local)
	}
	// Output:
	// computing blocks [0 1 2]
	// 3 blocks: 0 cached, 3 computed
	// 3 blocks: 3 cached, 0 computed
}

// A Cluster routes each key to its owner under the cluster's view; its
// calls are a Client's.
func ExampleCluster() {
	ctx := context.Background()
	cl, err := client.DialCluster(ctx, client.ClusterConfig{
		Seeds: clusterSeeds,
		Node:  client.Config{Tenant: "acme"},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	v := cl.View()
	fmt.Printf("epoch %d, %d members\n", v.Epoch, len(v.Members))

	ns := exampleNamespace("example-cluster")
	tokens := examplePrompt(12, 4)
	ids, _ := client.Identities(ns, tokens)
	payloads := make([][]byte, len(ids))
	for i := range payloads {
		payloads[i] = kv(i)
	}
	if _, err := cl.Put(ctx, ns, client.BlocksOf(ids, payloads)); err != nil {
		log.Fatal(err)
	}
	keys, _ := client.Chain(ns, tokens)
	owners := map[string]bool{}
	for _, k := range keys {
		m, _ := cl.Owner(k)
		owners[m.ID] = true
	}
	hits, lease, _ := cl.Lookup(ctx, ns, keys, time.Second)
	intact := 0
	for i, r := range cl.Get(ctx, ns, keys[:hits], client.WithLease(lease)) {
		if r.Hit && bytes.Equal(r.Data, kv(i)) {
			intact++
		}
	}
	fmt.Printf("%d blocks on %d owners: %d cached, %d read back intact\n", len(keys), len(owners), hits, intact)
	// Output:
	// epoch 1, 3 members
	// 12 blocks on 3 owners: 12 cached, 12 read back intact
}

// warm is code that works against one node or a cluster alike: it takes a
// Cache.
func warm(ctx context.Context, c client.Cache, ns client.Namespace, tokens []uint32) (cached int, err error) {
	keys, err := client.Chain(ns, tokens)
	if err != nil {
		return 0, err
	}
	hits, _, err := c.Lookup(ctx, ns, keys, 0)
	if err != nil || hits == len(keys) {
		return hits, err
	}
	ids, err := client.Identities(ns, tokens)
	if err != nil {
		return hits, err
	}
	missing := make([][]byte, len(ids)-hits)
	for i := range missing {
		missing[i] = kv(hits + i)
	}
	_, err = c.Put(ctx, ns, client.BlocksOf(ids[hits:], missing))
	return hits, err
}

func ExampleCache() {
	ctx := context.Background()
	node, err := client.Dial(ctx, client.Config{Addr: nodeAddr, Tenant: "acme"})
	if err != nil {
		log.Fatal(err)
	}
	cluster, err := client.DialCluster(ctx, client.ClusterConfig{Seeds: clusterSeeds, Node: client.Config{Tenant: "acme"}})
	if err != nil {
		log.Fatal(err)
	}
	ns := exampleNamespace("example-cache")
	for _, c := range []struct {
		name  string
		cache client.Cache
	}{{"node", node}, {"cluster", cluster}} {
		for range 2 {
			cached, err := warm(ctx, c.cache, ns, examplePrompt(6, 5))
			if err != nil {
				log.Fatal(err)
			}
			fmt.Printf("%s: %d of 6 blocks were cached\n", c.name, cached)
		}
		c.cache.Close()
	}
	// Output:
	// node: 0 of 6 blocks were cached
	// node: 6 of 6 blocks were cached
	// cluster: 0 of 6 blocks were cached
	// cluster: 6 of 6 blocks were cached
}
