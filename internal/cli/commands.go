package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/gpucache/gpucache/client"
	"github.com/gpucache/gpucache/internal/config"
)

func runPut(ctx context.Context, args []string, std Stdio) error {
	var b blockCmd
	fs := newFlagSet("put", "put [flags] (--key-text TEXT | --tokens IDS) FILE|-", std.Out)
	b.Register(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return UsageErr("want one FILE to store (- for stdin), got %d arguments", len(pos))
	}
	if _, _, _, err := b.resolve(b.common.provisionalTenant()); err != nil {
		return err
	}
	var data []byte
	if pos[0] == "-" {
		data, err = io.ReadAll(std.In)
	} else {
		data, err = os.ReadFile(pos[0])
	}
	if err != nil {
		return err
	}
	c, err := b.common.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	ns, key, tokens, err := b.resolve(c.Tenant())
	if err != nil {
		return err
	}
	// The block's full identity (position 0, no parent, its token ids): the
	// server derives the key from it and refuses a mismatch.
	st, err := c.Put(ctx, ns, []client.PutBlock{{Key: key, TokenIDs: tokens, Data: data}})
	if err != nil {
		return wrongEpochHint(err)
	}
	switch st[0] {
	case client.StatusStored:
		fmt.Fprintf(std.Out, "stored %s as %s\n", fmtBytes(len(data)), key)
	case client.StatusExists:
		// Blocks are immutable: the server keeps what it has and drops
		// these bytes, whether or not they are equal.
		fmt.Fprintf(std.Out, "exists: %s is already cached; the server kept the bytes already stored and discarded these %s (blocks are immutable: delete it first to replace it)\n", key, fmtBytes(len(data)))
	case client.StatusKeyMismatch:
		return fmt.Errorf("%w: not stored: the server derives another key from the block's tokens (%s)", errRefused, st[0])
	case client.StatusTooLarge:
		return fmt.Errorf("%w: not stored: %s exceed the server's largest block (%d bytes)", errRefused, fmtBytes(len(data)), c.Limits().MaxPayload)
	case client.StatusNoSpace:
		return fmt.Errorf("%w: not stored: the server has no space it may evict for it (NO_SPACE)", errRefused)
	case client.StatusReadOnly:
		// Not a refusal of this block: the node takes no writes until its
		// control plane is back, so a retry (or another node) may succeed.
		return fmt.Errorf("%w: not stored: node is read-only (control plane unreachable); retry later or write to another node (READ_ONLY)", errUnavailable)
	default:
		return fmt.Errorf("%w: not stored: %s", errRefused, st[0])
	}
	return nil
}

func runGet(ctx context.Context, args []string, std Stdio) error {
	var b blockCmd
	fs := newFlagSet("get", "get [flags] (--key-text TEXT | --tokens IDS) [-o FILE]", std.Out)
	b.Register(fs)
	out := fs.String("o", "-", "write the block to `file` (- for stdout)")
	if err := ParseNoArgs(fs, args); err != nil {
		return err
	}
	if _, _, _, err := b.resolve(b.common.provisionalTenant()); err != nil {
		return err
	}
	c, err := b.common.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	ns, key, _, err := b.resolve(c.Tenant())
	if err != nil {
		return err
	}
	r := c.Get(ctx, ns, []client.BlockKey{key})[0]
	if !r.Hit {
		if errors.Is(r.Reason, client.ErrNotCached) {
			return fmt.Errorf("%w: %w", errMiss, r.Reason)
		}
		// A refusal or an unavailable server is not a miss: its own code.
		return wrongEpochHint(r.Reason)
	}
	if *out == "-" {
		_, err = std.Out.Write(r.Data)
		return err
	}
	if err := os.WriteFile(*out, r.Data, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(std.Err, "wrote %s to %s\n", fmtBytes(len(r.Data)), *out)
	return nil
}

func runDelete(ctx context.Context, args []string, std Stdio) error {
	var b blockCmd
	fs := newFlagSet("delete", "delete [flags] (--key-text TEXT | --tokens IDS)", std.Out)
	b.Register(fs)
	if err := ParseNoArgs(fs, args); err != nil {
		return err
	}
	if _, _, _, err := b.resolve(b.common.provisionalTenant()); err != nil {
		return err
	}
	c, err := b.common.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	ns, key, _, err := b.resolve(c.Tenant())
	if err != nil {
		return err
	}
	st, err := c.Delete(ctx, ns, []client.BlockKey{key})
	if err != nil {
		return wrongEpochHint(err)
	}
	switch st[0] {
	case client.StatusDeleted:
		fmt.Fprintf(std.Out, "deleted %s\n", key)
		return nil
	case client.StatusMiss:
		return fmt.Errorf("%w: not cached: %s", errMiss, key)
	case client.StatusBusy:
		return fmt.Errorf("%w: not deleted: %s is leased or being filled (BUSY); retry later", errUnavailable, key)
	}
	return fmt.Errorf("not deleted: %s", st[0])
}

func runLookup(ctx context.Context, args []string, std Stdio) error {
	var common ConnFlags
	var nsf NSFlags
	var kf keyFlags
	fs := newFlagSet("lookup", "lookup [flags] (--key-text TEXT | --tokens IDS)", std.Out)
	common.Register(fs)
	nsf.Register(fs, "cli")
	kf.Register(fs)
	ttl := fs.Duration("lease-ttl", 0, "lease the cached run for this long (0: no lease)")
	if err := ParseNoArgs(fs, args); err != nil {
		return err
	}
	if _, err := nsf.Namespace(common.provisionalTenant()); err != nil {
		return err
	}
	toks, err := kf.parseTokens()
	if err != nil {
		return err
	}
	if *ttl != 0 && common.cluster != "" {
		return UsageErr("--lease-ttl needs one node (--addr), not --cluster: a lease is held by the node that grants it")
	}
	c, err := common.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	ns, err := nsf.Namespace(c.Tenant())
	if err != nil {
		return err
	}
	keys, err := client.Chain(ns, toks)
	if err != nil {
		return UsageErr("%v", err)
	}
	hits, lease, err := c.Lookup(ctx, ns, keys, *ttl)
	if err != nil {
		return wrongEpochHint(err)
	}
	fmt.Fprintf(std.Out, "%d of %d blocks cached (%d of %d tokens)\n", hits, len(keys), min(hits*int(ns.Layout.BlockTokens), len(toks)), len(toks))
	if lease != 0 {
		fmt.Fprintf(std.Out, "lease %d\n", lease)
	}
	return nil
}

// parseQuery parses the flags of a query command that takes no arguments
// (stat, members): the connection flags and --json.
func parseQuery(name string, args []string, std Stdio) (common ConnFlags, asJSON bool, err error) {
	fs := newFlagSet(name, name+" [flags]", std.Out)
	common.Register(fs)
	fs.BoolVar(&asJSON, "json", false, "print a JSON object")
	err = ParseNoArgs(fs, args)
	return common, asJSON, err
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// seedView asks for the view of the cluster: with --cluster, each seed in
// turn until one answers MEMBERS; without it, the node of --addr. It
// returns the view, the address that answered and its open client (the
// caller closes it).
func (c *ConnFlags) seedView(ctx context.Context) (client.View, string, *client.Client, error) {
	addrs := c.Seeds()
	if len(addrs) == 0 {
		addrs = []string{c.addr}
	}
	var errs []error
	for _, a := range addrs {
		v, cl, err := c.viewOf(ctx, a)
		if err == nil {
			return v, a, cl, nil
		}
		errs = append(errs, err)
	}
	if len(addrs) == 1 {
		return client.View{}, "", nil, errs[0] // as one node's command says it
	}
	for i, err := range errs {
		errs[i] = fmt.Errorf("seed %s: %w", addrs[i], err)
	}
	return client.View{}, "", nil, fmt.Errorf("no seed of --cluster answered MEMBERS: %w", errors.Join(errs...))
}

// viewOf asks the node at addr for its view; the client is open when the
// error is nil.
func (c *ConnFlags) viewOf(ctx context.Context, addr string) (client.View, *client.Client, error) {
	cl, err := c.dialTarget(ctx, target{Addr: addr})
	if err != nil {
		return client.View{}, nil, err
	}
	v, err := cl.Members(ctx)
	if errors.Is(err, client.ErrUnsupported) {
		err = fmt.Errorf("%s speaks protocol version %d, which has no MEMBERS (it predates cluster mode or runs --protocol-max 1)", addr, cl.ProtocolVersion())
	}
	if err != nil {
		cl.Close()
		return client.View{}, nil, err
	}
	return v, cl, nil
}

// target is one node a per-member command (stat, ping with --cluster)
// talks to.
type target struct {
	ID   string `json:"id,omitempty"` // "" for a single node
	Addr string `json:"addr"`
}

// targets are the nodes stat and ping talk to: the node of --addr; with
// --cluster, every member of the view a seed gives (the seed alone when it
// is a single node, not a cluster).
func (c *ConnFlags) targets(ctx context.Context) ([]target, error) {
	if len(c.Seeds()) == 0 {
		return []target{{Addr: c.addr}}, nil
	}
	v, seed, cl, err := c.seedView(ctx)
	if err != nil {
		return nil, err
	}
	cl.Close()
	if v.Epoch == 0 {
		return []target{{Addr: seed}}, nil
	}
	ts := make([]target, len(v.Members))
	for i, m := range v.Members {
		ts[i] = target{ID: m.ID, Addr: m.Addr}
	}
	return ts, nil
}

// dialTarget connects to one target with the common flags.
func (c *ConnFlags) dialTarget(ctx context.Context, t target) (*client.Client, error) {
	one := *c
	one.addr, one.cluster = t.Addr, ""
	return one.dial(ctx)
}

func (t target) String() string {
	if t.ID == "" {
		return t.Addr
	}
	return t.ID + " " + t.Addr
}

// memberStat is one node's answer to `stat --cluster --json`.
type memberStat struct {
	target
	Stat  map[string]uint64 `json:"stat,omitempty"`
	Error string            `json:"error,omitempty"`
}

// runStat prints a node's counters; with --cluster, every member's, one
// section per member (--json: {"members":[{"id","addr","stat"|"error"}]}).
// A member that does not answer is reported and the command exits 4
// after the others are printed.
func runStat(ctx context.Context, args []string, std Stdio) error {
	common, asJSON, err := parseQuery("stat", args, std)
	if err != nil {
		return err
	}
	if len(common.Seeds()) == 0 {
		c, err := common.dial(ctx)
		if err != nil {
			return err
		}
		defer c.Close()
		stat, err := c.Stat(ctx)
		if err != nil {
			return err
		}
		if asJSON {
			return printJSON(std.Out, stat) // encoding/json sorts map keys
		}
		return printStat(std.Out, stat)
	}
	ts, err := common.targets(ctx)
	if err != nil {
		return err
	}
	out := make([]memberStat, len(ts))
	failed := 0
	for i, t := range ts {
		out[i].target = t
		stat, err := statOf(ctx, &common, t)
		if err != nil {
			out[i].Error, failed = OneLine(err), failed+1
			continue
		}
		out[i].Stat = stat
	}
	if asJSON {
		err = printJSON(std.Out, struct {
			Members []memberStat `json:"members"`
		}{out})
	} else {
		for i, m := range out {
			if i > 0 {
				fmt.Fprintln(std.Out)
			}
			fmt.Fprintf(std.Out, "== %s\n", m.target)
			if m.Error != "" {
				fmt.Fprintf(std.Out, "error: %s\n", m.Error)
				continue
			}
			if err = printStat(std.Out, m.Stat); err != nil {
				return err
			}
		}
	}
	if err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("%w: %d of %d members did not answer STAT (see their sections)", errUnavailable, failed, len(ts))
	}
	return nil
}

func statOf(ctx context.Context, common *ConnFlags, t target) (map[string]uint64, error) {
	c, err := common.dialTarget(ctx, t)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Stat(ctx)
}

// printStat prints counters as a name-sorted table.
func printStat(w io.Writer, stat map[string]uint64) error {
	names := make([]string, 0, len(stat))
	for n := range stat {
		names = append(names, n)
	}
	slices.Sort(names)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, n := range names {
		fmt.Fprintf(tw, "%s\t%d\n", n, stat[n])
	}
	return tw.Flush()
}

// controlModes are STAT control_mode's values.
var controlModes = []string{"live", "read-only", "unknown"}

// runMembers prints a node's view of the cluster (MEMBERS, protocol v2):
// the epoch and every member with its owner share. A single node (not in a
// cluster) answers epoch 0 and no members. With --cluster the first seed
// that answers gives the view. The view comes from etcd and says nothing of
// a member's control mode; the answering node's own mode (its STAT
// control_mode, when the session may see it) is printed when it is not
// live, because its view may then be stale.
func runMembers(ctx context.Context, args []string, std Stdio) error {
	common, asJSON, err := parseQuery("members", args, std)
	if err != nil {
		return err
	}
	v, from, c, err := common.seedView(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	note := ""
	if stat, err := c.Stat(ctx); err == nil {
		if m, ok := stat["control_mode"]; ok && m != 0 && v.Epoch != 0 {
			mode := "invalid"
			if m < uint64(len(controlModes)) {
				mode = controlModes[m]
			}
			note = fmt.Sprintf("note: %s is in control mode %s (its etcd is unreachable): this view may be stale, and it stores nothing (read-only) or serves nothing (unknown)", from, mode)
		}
	}
	if asJSON {
		if note != "" {
			fmt.Fprintln(std.Err, note)
		}
		return printJSON(std.Out, v)
	}
	if v.Epoch == 0 {
		fmt.Fprintf(std.Out, "%s is a single node (not in a cluster): it owns every key\n", from)
		return nil
	}
	var total uint64
	for _, m := range v.Members {
		if !m.Draining {
			total += m.CapacityBytes
		}
	}
	fmt.Fprintf(std.Out, "epoch %d, %d members (view of %s)\n", v.Epoch, len(v.Members), from)
	if note != "" {
		fmt.Fprintln(std.Out, note)
	}
	tw := tabwriter.NewWriter(std.Out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tADDRESS\tDOMAIN\tPROTO\tCAPACITY\tSHARE\tSTATE")
	for _, m := range v.Members {
		state, share := "active", "0%"
		if m.Draining {
			state = "draining"
		} else if total > 0 {
			share = fmt.Sprintf("%.1f%%", 100*float64(m.CapacityBytes)/float64(total))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\tv%d\t%s\t%s\t%s\n", m.ID, m.Addr, m.FaultDomain, m.ProtoVersion, config.ByteSize(m.CapacityBytes), share, state)
	}
	return tw.Flush()
}

// runPing measures the round trip to the node of --addr; with --cluster,
// to every member of the view a seed gives. A member that does not answer
// is reported and the command exits 4 after the others are pinged.
func runPing(ctx context.Context, args []string, std Stdio) error {
	var common ConnFlags
	fs := newFlagSet("ping", "ping [flags]", std.Out)
	common.Register(fs)
	count := fs.Int("count", 1, "number of pings (per member with --cluster)")
	if err := ParseNoArgs(fs, args); err != nil {
		return err
	}
	if *count < 1 {
		return UsageErr("--count must be at least 1")
	}
	ts, err := common.targets(ctx)
	if err != nil {
		return err
	}
	if len(common.Seeds()) == 0 {
		return pingOne(ctx, &common, ts[0], *count, std)
	}
	failed := 0
	for _, t := range ts {
		if err := pingOne(ctx, &common, t, *count, std); err != nil {
			fmt.Fprintf(std.Out, "%s: %s\n", t, OneLine(err))
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("%w: %d of %d members did not answer", errUnavailable, failed, len(ts))
	}
	return nil
}

func pingOne(ctx context.Context, common *ConnFlags, t target, count int, std Stdio) error {
	start := time.Now()
	c, err := common.dialTarget(ctx, t)
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Fprintf(std.Out, "connected to %s (server %q) in %v\n", t, c.ServerName(), time.Since(start).Round(time.Microsecond))
	for i := range count {
		rtt, err := c.Ping(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(std.Out, "pong %d from %s: time=%v\n", i+1, t, rtt.Round(time.Microsecond))
	}
	return nil
}
