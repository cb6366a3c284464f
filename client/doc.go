// Package client is the Go client of gpucache, the shared KV-cache store for
// LLM inference engines. It speaks the binary wire protocol of package
// api/wire over a small pool of TCP connections.
//
// # Usage
//
//	c, err := client.Dial(ctx, client.Config{Addr: "127.0.0.1:9400", Tenant: "acme"})
//	if err != nil { ... }
//	defer c.Close()
//
//	ns := client.Namespace{
//		Tenant: "acme", TrustDomain: "prod", ModelID: "llama-3-8b",
//		ConfigRevision: "r1", TokenizerRevision: "t1", RoPE: "rope-theta-500000",
//		DType: "fp16", Quantization: "none",
//		Layout: client.Layout{Format: "vllm-nhd", TPSize: 1, PPSize: 1,
//			LayerCount: 32, KVHeads: 8, HeadDim: 128, BlockTokens: 16},
//	}
//	keys, err := client.Chain(ns, promptTokens) // one key per 16-token block
//
//	// Which leading blocks are cached? Pin them for 2s.
//	hits, lease, err := c.Lookup(ctx, ns, keys, 2*time.Second)
//
//	// Read them (this releases the lease). Any failure is a miss.
//	for i, r := range c.Get(ctx, ns, keys[:hits], client.WithLease(lease)) {
//		if !r.Hit { recompute(i, r.Reason); continue }
//		load(i, r.Data)
//	}
//
//	// Store freshly computed blocks with their identities: the server
//	// derives each key from them and refuses a mismatch (KEY_MISMATCH).
//	ids, err := client.Identities(ns, promptTokens)
//	statuses, err := c.Put(ctx, ns, client.BlocksOf(ids[5:6], [][]byte{kv5}))
//
//	// Or let single-flight fills do it: read what is cached, compute (once
//	// across callers) what is not.
//	blocks, report, err := c.GetOrFill(ctx, ns, promptTokens, computeBlocks)
//
// GetInto reads into caller-provided buffers (for example pinned staging
// memory) and allocates no payload memory.
//
// # Failure model
//
// A read never fails as a whole and never hangs: every block of Get and
// GetInto is either a hit with its complete payload or a miss with a
// Reason. ErrNotCached is a plain miss; ErrTimeout (the context
// expired), ErrUnavailable (no connection, or it broke), ErrProtocol (a
// malformed answer) and ErrServer (an error answer, wrapping *wire.Error)
// explain failed reads. A payload cut short by a dropped connection is a
// miss, not data. Writes and control calls return the same errors.
//
// Every call takes a context; a context without a deadline gets
// Config.RequestTimeout. When the context expires the call returns at once:
// an answer that arrives later is drained and discarded, and the client
// never writes into the caller's buffers after the call has returned.
//
// # Connections
//
// The client holds Config.Conns connections and sends each call on the
// least-loaded one. Each connection performs HELLO on connect, after which
// many requests are pipelined on it, up to the smaller of Config.MaxInFlight
// and the server's limit: callers write frames under a write lock (PUT
// payloads go out by vectored writes straight from the caller's slices) and
// one reader goroutine matches answers to calls by request id, reading GET
// payloads straight into their destination buffers. A connection that fails
// fails the calls pending on it and is redialed lazily by the next call;
// calls that lost their connection before any answer are sent once more.
// Batches larger than the server's MaxBatch or MaxFrame are split into
// several pipelined requests (a GET is split so that its answer fits
// MaxFrame even if every block is as large as allowed: MaxPayload, or for
// GetInto the buffer's capacity). A lease belongs to the connection that
// took it, so a Get WithLease is sent on the connection Lookup used.
//
// # Clusters
//
// A Client talks to one server. Cluster talks to a cluster of them: it
// fetches the cluster's view (Client.Members: an epoch and the members,
// protocol version 2), computes the owner of each key with the cluster's
// placement, and sends each owner its part of every batch, in parallel,
// over one Client per member. A node refuses a key it does not own under
// its current view with WRONG_EPOCH (WrongEpoch reads the epoch from the
// error); Cluster then refreshes the view and re-routes the refused keys
// once, and degrades past that: misses, StatusNoSpace, a shorter Lookup
// run, locally computed fills. Against a single node (epoch 0) or servers
// of protocol version 1 it routes everything to one seed.
//
//	cl, err := client.DialCluster(ctx, client.ClusterConfig{
//		Seeds: []string{"10.0.0.1:9400", "10.0.0.2:9400"},
//		Node:  client.Config{Tenant: "acme"},
//	})
//	blocks, report, err := cl.GetOrFill(ctx, ns, promptTokens, computeBlocks)
//
// Client and Cluster both implement Cache (Get, Put, PutOpaque, Delete,
// Lookup, GetOrFill, Close) with the same signatures and the same lease
// rule: Lookup returns a lease, a Get WithLease spends it. Code that works
// against either takes a Cache.
//
// The HELLO of every connection offers protocol versions 1 and 2; the
// server picks the highest it speaks (Client.ProtocolVersion).
//
// The package re-exports the identity types and helpers (Namespace,
// BlockKey, CacheIdentity, Chain, Identities, KeyFor) so that users need
// import only this package.
package client
