package main

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/security/antireplay"
)

// Settings of the node under attack, and what the attack sends.
const (
	attackConns       = 1000
	attackMaxConns    = 1100
	attackMaxInFlight = 4
	attackHot         = 64 << 20
	attackReqBufs     = 16 << 20
	attackNonces      = 4096
	attackTable       = 4 << 20 // declared by every attacker
	attackSent        = 1 << 20 // table bytes each attacker sends before it stalls
)

// memoryBound is the bound of docs/OPERATIONS.md ("Memory bound") for a
// node with cold_store off, the admin listener off and the default
// hot_policy (adaptive):
//
//	base + hot_capacity + index + 2 × policy + 2 × (request_buffers
//	  + max_conns × (144 KiB + max_in_flight × 5 KiB) + replay_max_nonces × 128 B)
func memoryBound(hot, minClass, reqBufs int64, maxConns, maxInFlight, nonces int) int64 {
	const base = 64 << 20
	index := hot / minClass * 256
	policy := hot / minClass * 530 // M_policy
	perConn := int64(144<<10 + maxInFlight*(5<<10))
	heap := reqBufs + int64(maxConns)*perConn + int64(nonces)*128
	return base + hot + index + 2*policy + 2*heap
}

// TestMemoryBoundUnderAttack runs gpucached with tenants and opens 1,000
// connections that misbehave: a read-only tenant's PUTs and a writer's PUTs
// and FILL_COMMITs, each declaring a 4 MiB table, sending 1 MiB of it and
// stalling. Once the daemon holds every connection and has read every byte
// sent, its peak RSS (VmHWM) must stay under the memory bound of its
// settings; it is checked all along, so a daemon that grows past it fails
// as soon as it does.
func TestMemoryBoundUnderAttack(t *testing.T) {
	if testing.Short() {
		t.Skip("builds binaries and opens 1,000 connections")
	}
	raiseNOFILE(t, 2*attackConns+512)
	bin := buildDaemon(t)
	d, writerSecret, readerSecret, opsSecret := startAttackNode(t, bin, "reader", "*=r")
	pid := d.cmd.Process.Pid
	bound := memoryBound(attackHot, 16<<10, attackReqBufs, attackMaxConns, attackMaxInFlight, attackNonces)
	_, port, _ := net.SplitHostPort(d.addr)

	ops := authDial(t, d.addr, opsSecret)
	startRSS := procStatus(t, pid, "VmRSS")

	type attacker struct {
		nc     net.Conn
		prefix []byte
	}
	var attackers []attacker
	for i := range attackConns {
		var sec []byte
		tenant, op := "writer", wire.OpPut
		switch i % 10 {
		case 0, 1, 2, 3:
			sec, tenant = readerSecret, "reader" // no write right
		case 4, 5, 6:
			sec = writerSecret
		default:
			sec, op = writerSecret, wire.OpFillCommit
		}
		nc := authDial(t, d.addr, sec)
		attackers = append(attackers, attacker{nc: nc, prefix: attackPrefix(t, tenant, op)})
	}
	idleRSS := procStatus(t, pid, "VmRSS")
	t.Logf("RSS: %d MiB at start, %d MiB with %d idle sessions (%d KiB each)",
		startRSS>>20, idleRSS>>20, attackConns, (idleRSS-startRSS)/attackConns>>10)

	filler := make([]byte, attackSent)
	var sent sync.WaitGroup
	for _, a := range attackers {
		sent.Add(1)
		go func() {
			defer sent.Done()
			// Blocks while the daemon does not read; errors end the attack
			// on that connection only.
			if _, err := a.nc.Write(a.prefix); err == nil {
				a.nc.Write(filler[:attackSent-(len(a.prefix)-wire.HeaderSize-wire.StampSize-4)])
			}
		}()
	}
	allSent := make(chan struct{})
	go func() { sent.Wait(); close(allSent) }()

	// Poll until the daemon holds every connection, has read every byte
	// sent and has refused every read-only tenant's request (a refusal is
	// counted after its bytes leave the socket, so "drained" alone can
	// come first); fail as soon as its peak RSS passes the bound.
	wantDenied := uint64(attackConns * 4 / 10)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if hwm := procStatus(t, pid, "VmHWM"); hwm > bound {
			t.Fatalf("daemon peak RSS %d MiB exceeds the memory bound %d MiB of its settings", hwm>>20, bound>>20)
		}
		select {
		case <-allSent:
		default:
			<-tick.C
			continue
		}
		st := stat(t, ops)
		if st["replays_rejected"] > 0 {
			// The attack was meant to reach the table; a stamp refused by
			// the replay window never does, and the read-only tenant's
			// denials would never all come.
			t.Fatalf("%d attackers refused by the replay window before their tables: raise replay_tenant_nonces", st["replays_rejected"])
		}
		if st["conns_open"] == attackConns+1 && st["acl_denied"] >= wantDenied && drained(t, port) {
			break
		}
		<-tick.C
	}
	hwm, rss := procStatus(t, pid, "VmHWM"), procStatus(t, pid, "VmRSS")
	st := stat(t, ops)
	t.Logf("under attack: VmRSS %d MiB, VmHWM %d MiB, bound %d MiB; request buffers %d MiB in use (limit %d MiB), %d requests refused, %d denied",
		rss>>20, hwm>>20, bound>>20, st["request_buffer_bytes"]>>20, st["request_buffer_limit_bytes"]>>20, st["request_buffer_refused"], st["acl_denied"])
	if hwm > bound {
		t.Fatalf("daemon peak RSS %d MiB exceeds the memory bound %d MiB of its settings", hwm>>20, bound>>20)
	}
	if st["request_buffer_bytes"] > attackReqBufs {
		t.Fatalf("request buffers hold %d bytes, over the %d budget", st["request_buffer_bytes"], attackReqBufs)
	}
	if st["acl_denied"] < wantDenied {
		t.Fatalf("acl_denied %d: the read-only tenant's %d requests were not refused on their namespace", st["acl_denied"], wantDenied)
	}
	for _, a := range attackers {
		a.nc.Close()
	}
}

// attackPrefix is the start of a stamped op of tenant whose table declares
// attackTable bytes: header, stamp, table length and the namespace blob.
func attackPrefix(t *testing.T, tenant string, op wire.Opcode) []byte {
	t.Helper()
	ns := identity.Namespace{Tenant: tenant, TrustDomain: "attack", ModelID: "m", ConfigRevision: "1", TokenizerRevision: "1",
		RoPE: "r", DType: "fp16", Quantization: "none", Layout: identity.Layout{Format: "f", TPSize: 1, PPSize: 1,
			LayerCount: 1, KVHeads: 1, HeadDim: 1, BlockTokens: 4}}
	blob, err := ns.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	var nonce [16]byte
	rand.Read(nonce[:])
	h := wire.Header{Version: wire.FrameVersion, Op: op, Flags: wire.FlagStamped, RequestID: 1,
		BodyLen: wire.StampSize + 4 + attackTable + 4096}
	b := h.Append(nil)
	b = antireplay.NewStamp(time.Now(), nonce).Append(b)
	b = binary.LittleEndian.AppendUint32(b, attackTable)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(blob)))
	return append(b, blob...)
}

// authDial opens a session with a bearer secret.
func authDial(t *testing.T, addr string, secret []byte) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	req := wire.HelloRequest{MinVersion: 1, MaxVersion: 1, Client: "attack", HasAuth: true, Auth: wire.AuthBearer, Credential: secret}
	if h, body := roundTrip(t, nc, wire.OpHello, req.AppendTo(nil)); h.Flags&wire.FlagError != 0 {
		e, _ := wire.DecodeError(body)
		t.Fatalf("hello: %v", e)
	}
	return nc
}

func roundTrip(t *testing.T, nc net.Conn, op wire.Opcode, body []byte) (wire.Header, []byte) {
	t.Helper()
	h := wire.Header{Version: wire.FrameVersion, Op: op, RequestID: 1, BodyLen: uint32(len(body))}
	if _, err := nc.Write(append(h.Append(nil), body...)); err != nil {
		t.Fatal(err)
	}
	var hb [wire.HeaderSize]byte
	if _, err := io.ReadFull(nc, hb[:]); err != nil {
		t.Fatal(err)
	}
	rh, err := wire.DecodeHeader(hb[:])
	if err != nil {
		t.Fatal(err)
	}
	rb := make([]byte, rh.BodyLen)
	if _, err := io.ReadFull(nc, rb); err != nil {
		t.Fatal(err)
	}
	return rh, rb
}

// stat returns the STAT entries of an admin session.
func stat(t *testing.T, nc net.Conn) map[string]uint64 {
	t.Helper()
	h, body := roundTrip(t, nc, wire.OpStat, nil)
	if h.Flags&wire.FlagError != 0 {
		e, _ := wire.DecodeError(body)
		t.Fatalf("stat: %v", e)
	}
	var resp wire.StatResponse
	if err := resp.Decode(body); err != nil {
		t.Fatal(err)
	}
	m := make(map[string]uint64, len(resp.Entries))
	for _, e := range resp.Entries {
		m[e.Name] = e.Value
	}
	return m
}

// procStatus returns a "kB" field of /proc/pid/status in bytes.
func procStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("%s: %v", field, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// drained reports whether every byte sent on a loopback TCP connection to
// or from port has been read: no established socket on port has bytes in
// its receive queue, and none towards port has bytes in its send queue
// (/proc/net/tcp).
func drained(t *testing.T, port string) bool {
	t.Helper()
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	hexPort := fmt.Sprintf(":%04X", p)
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 5 || f[3] != "01" { // ESTABLISHED
			continue
		}
		tx, rx, _ := strings.Cut(f[4], ":")
		switch {
		case strings.HasSuffix(f[1], hexPort) && strings.Trim(rx, "0") != "":
			return false // the daemon has not read it yet
		case strings.HasSuffix(f[2], hexPort) && strings.Trim(tx, "0") != "":
			return false // still on its way to the daemon
		}
	}
	return true
}

// raiseNOFILE raises the test's own soft RLIMIT_NOFILE to at least n, or
// skips when the hard limit does not allow it.
func raiseNOFILE(t *testing.T, n uint64) {
	t.Helper()
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		t.Fatal(err)
	}
	if r.Cur >= n {
		return
	}
	if r.Max < n {
		t.Skipf("RLIMIT_NOFILE hard limit %d is below the %d descriptors this test needs", r.Max, n)
	}
	r.Cur = r.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		t.Fatal(err)
	}
}

// startAttackNode starts bin with the attack settings (a third of the
// replay window per tenant, so that every attacker's stamp is remembered)
// and three tenants: writer (rw), other with otherRights, and ops (admin).
// It returns the node and the three tenants' secrets.
func startAttackNode(t *testing.T, bin, other, otherRights string) (d *daemonProc, writer, otherSecret, ops []byte) {
	t.Helper()
	dir := t.TempDir()
	secret := func(name string) []byte { return randomSecret(t, filepath.Join(dir, name+".secret")) }
	writer, otherSecret, ops = secret("writer"), secret(other), secret("ops")
	cfgPath := filepath.Join(dir, "gpucached.yaml")
	if err := os.WriteFile(cfgPath, fmt.Appendf(nil, `cold_store: off
hot_capacity: %d
hot_min_class: 16KiB
hot_max_class: 1MiB
hot_slab: 8MiB
max_conns: %d
max_in_flight: %d
max_batch: 64
read_timeout: 10m
idle_timeout: 10m
replay_max_nonces: %d
replay_tenant_nonces: %d
audit_log: "off"
tenants:
  - name: writer
    secrets: [{id: w, file: %[6]s/writer.secret}]
    rights: ["*=rw"]
  - name: %[7]s
    secrets: [{id: x, file: %[6]s/%[7]s.secret}]
    rights: ["%[8]s"]
  - name: ops
    secrets: [{id: o, file: %[6]s/ops.secret}]
    rights: ["*=a"]
`, attackHot, attackMaxConns, attackMaxInFlight, attackNonces, attackNonces/3, dir, other, otherRights), 0o600); err != nil {
		t.Fatal(err)
	}
	// The budget goes through the environment, which a daemon without the
	// setting ignores: the same test runs against one.
	t.Setenv("GPUCACHE_REQUEST_BUFFERS", strconv.Itoa(attackReqBufs))
	return startDaemon(t, bin, "--config", cfgPath), writer, otherSecret, ops
}
