package cli

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/gpucache/gpucache/api/wire"
	"github.com/gpucache/gpucache/internal/config"
)

// AdminUsage is the help text of `gpucache admin`.
const AdminUsage = `gpucache admin: cold-tier lifecycle through a node's admin listener

Usage:
  gpucache admin inventory [--tenant T]            objects and bytes per namespace
  gpucache admin purge --tenant T                  delete every cold object of tenant T
  gpucache admin expire --older-than 168h [--tenant T]
                                                   retention: drop blocks not written since
  gpucache admin backfill --budget SIZE [--tenant T]   (SIZE: bytes, or 64MiB, 1GiB, 1GB)
                                                   read cold blocks into the DRAM tier

Flags:
  --admin URL         admin listener (env GPUCACHE_ADMIN; default http://127.0.0.1:9401)
  --token-file F      file holding an admin tenant's secret, sent as a bearer token
                      (env GPUCACHE_ADMIN_TOKEN_FILE; not needed on an open node)
  --cacert F          CA bundle for an https admin listener
  --cert F, --key F   client certificate for an admin listener that demands one
  --json              print the result as JSON

Progress lines go to stderr, the result to stdout. Every operation is audited
on the node, runs one at a time per node (a second gets "busy"), and is safe
to interrupt (Ctrl-C cancels it) and to run again: a rerun of an interrupted
purge finishes it.
`

type adminFlags struct {
	admin, tokenFile, cacert, cert, key string
	tenant, olderThan                   string
	budget                              config.ByteSize
	json                                bool
}

func runAdmin(ctx context.Context, args []string, std Stdio) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(std.Out, AdminUsage)
		if len(args) == 0 {
			return UsageErr("admin needs a subcommand")
		}
		return nil
	}
	sub, rest := args[0], args[1:]
	fs := flag.NewFlagSet("admin "+sub, flag.ContinueOnError)
	fs.SetOutput(std.Err)
	fs.Usage = func() { fmt.Fprint(std.Out, AdminUsage) }
	var f adminFlags
	fs.StringVar(&f.admin, "admin", EnvOr("GPUCACHE_ADMIN", "http://127.0.0.1:9401"), "admin listener URL")
	fs.StringVar(&f.tokenFile, "token-file", os.Getenv("GPUCACHE_ADMIN_TOKEN_FILE"), "admin secret file")
	fs.StringVar(&f.cacert, "cacert", "", "CA bundle")
	fs.StringVar(&f.cert, "cert", "", "client certificate")
	fs.StringVar(&f.key, "key", "", "client key")
	fs.StringVar(&f.tenant, "tenant", "", "tenant")
	fs.StringVar(&f.olderThan, "older-than", "", "retention age")
	fs.Var(&f.budget, "budget", "backfill byte budget: bytes, or a size such as 64MiB or 1GiB")
	fs.BoolVar(&f.json, "json", false, "JSON output")
	if err := fs.Parse(rest); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return UsageErr("%v", err)
	}
	if fs.NArg() > 0 {
		return UsageErr("admin %s: unexpected argument %q", sub, fs.Arg(0))
	}
	method, path, q, err := f.request(sub)
	if err != nil {
		return err
	}
	return adminCall(ctx, f, method, path, q, std)
}

// request returns the HTTP method, path and query of admin subcommand sub.
func (f adminFlags) request(sub string) (method, path string, q url.Values, err error) {
	q = url.Values{}
	if f.tenant != "" {
		q.Set("tenant", f.tenant)
	}
	method = http.MethodPost
	switch sub {
	case "inventory":
		method, path = http.MethodGet, "/admin/inventory"
	case "purge":
		if f.tenant == "" {
			return "", "", nil, UsageErr("admin purge needs --tenant")
		}
		path = "/admin/purge"
	case "expire":
		if f.olderThan == "" {
			return "", "", nil, UsageErr("admin expire needs --older-than (e.g. 168h)")
		}
		q.Set("older_than", f.olderThan)
		path = "/admin/expire"
	case "backfill":
		if f.budget <= 0 {
			return "", "", nil, UsageErr("admin backfill needs --budget SIZE (> 0), e.g. --budget 4GiB")
		}
		q.Set("budget", strconv.FormatInt(int64(f.budget), 10))
		path = "/admin/backfill"
	default:
		return "", "", nil, UsageErr("unknown admin subcommand %q (inventory, purge, expire, backfill)", sub)
	}
	return method, path, q, nil
}

// sniffer notes whether the peer of an admin connection answered in the
// gpucache protocol (its frames start with wire.Magic): the data port
// given as --admin. An HTTP client would only see a malformed status line.
type sniffer struct{ dataPort atomic.Bool }

func (s *sniffer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &sniffConn{Conn: nc, s: s}, nil
}

// sniffConn records the first bytes read from its peer. The transport
// reads a connection from one goroutine.
type sniffConn struct {
	net.Conn
	s    *sniffer
	head []byte // the first bytes read, up to len(wire.Magic)
}

func (c *sniffConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if k := len(wire.Magic) - len(c.head); k > 0 && n > 0 {
		c.head = append(c.head, p[:min(k, n)]...)
		if string(c.head) == wire.Magic {
			c.s.dataPort.Store(true)
		}
	}
	return n, err
}

func (f adminFlags) client(sn *sniffer) (*http.Client, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.cacert != "" {
		pem, err := os.ReadFile(f.cacert)
		if err != nil {
			return nil, fmt.Errorf("--cacert: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--cacert %s: no PEM certificate", f.cacert)
		}
		tc.RootCAs = pool
	}
	if f.cert != "" || f.key != "" {
		c, err := tls.LoadX509KeyPair(f.cert, f.key)
		if err != nil {
			return nil, fmt.Errorf("--cert/--key: %w", err)
		}
		tc.Certificates = []tls.Certificate{c}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tc, Proxy: nil, DialContext: sn.dial}}, nil
}

// adminCall sends one lifecycle request and relays its NDJSON answer:
// progress to stderr, the result to stdout.
func adminCall(ctx context.Context, f adminFlags, method, path string, q url.Values, std Stdio) error {
	base := f.admin
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	u := strings.TrimSuffix(base, "/") + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return UsageErr("--admin %q: %v", f.admin, err)
	}
	if f.tokenFile != "" {
		tok, err := os.ReadFile(f.tokenFile)
		if err != nil {
			return fmt.Errorf("--token-file: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	}
	var sn sniffer
	hc, err := f.client(&sn)
	if err != nil {
		return err
	}
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	switch {
	case err == nil:
	case sn.dataPort.Load():
		return fmt.Errorf("%w: %s is a gpucache data port, not the admin port (admin is usually :9401; data commands take it as --addr)", errUnavailable, req.URL.Host)
	case untrustedCert(err):
		return fmt.Errorf("%w: admin listener %s: its certificate is not trusted by --cacert %q: pass the CA that signed it (%w)", errRefused, base, f.cacert, err)
	default:
		return fmt.Errorf("%w: admin listener %s: %w", errUnavailable, base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return statusErr(resp, path)
	}
	return readAnswer(resp.Body, path, f.json, std)
}

// statusErr explains an admin answer that is not 200 OK.
func statusErr(resp *http.Response, path string) error {
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	text := strings.TrimSpace(string(msg))
	switch resp.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden:
		return fmt.Errorf("%w: admin %s (HTTP %d): %s", errRefused, path, resp.StatusCode, text)
	case http.StatusConflict, http.StatusServiceUnavailable:
		return fmt.Errorf("%w: admin %s busy or not ready (HTTP %d): %s", errUnavailable, path, resp.StatusCode, text)
	}
	return fmt.Errorf("admin %s failed (HTTP %d): %s", path, resp.StatusCode, text)
}

// readAnswer reads an admin answer, one JSON line at a time: progress
// lines go to std.Err, then a result is printed or an error returned.
func readAnswer(body io.Reader, path string, asJSON bool, std Stdio) error {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		var line struct {
			Progress string          `json:"progress"`
			Result   json.RawMessage `json:"result"`
			Error    string          `json:"error"`
			Partial  json.RawMessage `json:"partial"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			return fmt.Errorf("admin %s: bad answer line %q: %w", path, sc.Text(), err)
		}
		switch {
		case line.Progress != "":
			fmt.Fprintln(std.Err, line.Progress)
		case line.Error != "":
			if len(line.Partial) > 0 {
				fmt.Fprintf(std.Out, "partial: %s\n", line.Partial)
			}
			return fmt.Errorf("admin %s failed: %s (safe to run again)", path, line.Error)
		case line.Result != nil:
			return printResult(std.Out, line.Result, asJSON)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("admin %s: answer cut off: %w (safe to run again)", path, err)
	}
	return fmt.Errorf("admin %s: the node closed the answer before a result (safe to run again)", path)
}

// printResult prints an admin result as text (or, with asJSON, as sent).
// Numbers are decoded as json.Number, so byte counts print as integers,
// with binary units beside them ("268435716 B (256.0 MiB)").
func printResult(w io.Writer, raw json.RawMessage, asJSON bool) error {
	if asJSON {
		_, err := fmt.Fprintf(w, "%s\n", raw)
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return err
	}
	switch v := v.(type) {
	case nil:
		fmt.Fprintln(w, "no cold objects")
	case []any:
		if len(v) == 0 {
			fmt.Fprintln(w, "no cold objects")
		}
		for _, e := range v {
			m, _ := e.(map[string]any)
			fmt.Fprintf(w, "tenant=%q namespace=%v model=%q packs=%s; manifests=%s; pointers=%s\n",
				m["tenant"], m["namespace"], m["model_id"], kind(m["packs"]), kind(m["manifests"]), kind(m["pointers"]))
		}
	case map[string]any:
		for _, k := range sortedKeys(v) {
			fmt.Fprintf(w, "%s: %s\n", k, fmtValue(k, v[k]))
		}
	default:
		fmt.Fprintf(w, "%s\n", raw)
	}
	return nil
}

// kind prints an inventory count: "3 objects, 268435716 B (256.0 MiB)".
func kind(v any) string {
	m, _ := v.(map[string]any)
	noun := "objects"
	if fmt.Sprint(m["objects"]) == "1" {
		noun = "object"
	}
	return fmt.Sprintf("%v %s, %s", m["objects"], noun, humanBytes(m["bytes"]))
}

// fmtValue prints one result field; a field named for bytes gets binary
// units too, and an object its fields as {k=v ...}.
func fmtValue(key string, v any) string {
	switch v := v.(type) {
	case map[string]any:
		parts := make([]string, 0, len(v))
		for _, k := range sortedKeys(v) {
			parts = append(parts, k+"="+fmtValue(k, v[k]))
		}
		return "{" + strings.Join(parts, " ") + "}"
	case json.Number:
		if strings.Contains(key, "bytes") {
			return humanBytes(v)
		}
	}
	return fmt.Sprint(v)
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// humanBytes prints a byte count exactly, then in the largest binary unit
// it reaches when that is KiB or more: "268435716 B (256.0 MiB)".
func humanBytes(v any) string {
	num, _ := v.(json.Number)
	n, err := num.Int64()
	if err != nil {
		return fmt.Sprintf("%v B", v)
	}
	if n < 1<<10 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%d B (%s)", n, config.IEC(uint64(n)))
}
