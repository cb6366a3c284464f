package soak

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// netns is a network namespace holding one node, joined to the host by a
// veth pair, built and torn down with ip(8) (iproute2) alone.
//
//	host side  hostIF  10.213.K.1/24  (clients and the S3 server are reached here)
//	                   10.214.K.1/32  (etcd, only for the node in the namespace)
//	namespace  nsIF    10.213.K.2/24, route 10.214.K.1/32 via 10.213.K.1
//
// A partition replaces the route to etcd's address by one through a
// gateway that does not exist, whose neighbour entry is a static, bogus MAC:
// packets to etcd leave the namespace and are dropped by the host (not
// addressed to it), so connections stall as on a real partition (no reset,
// no ICMP), while clients, the S3 server and the admin scrapes still reach
// the node on 10.213.K.2. Heal puts the route back.
type netns struct {
	name           string
	hostIF, nsIF   string
	hostIP, nodeIP string // 10.213.K.1, 10.213.K.2
	etcdIP         string // 10.214.K.1
	blackhole      string // 10.213.K.254
}

// ipCmd runs ip(8) with args.
func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// netnsUnavailable says why a namespace cannot be built here, or "".
func netnsUnavailable() string {
	if os.Geteuid() != 0 {
		return "not root: network namespaces need CAP_NET_ADMIN and CAP_SYS_ADMIN"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return "ip(8) (iproute2) not found"
	}
	return ""
}

// newNetns builds a namespace on the first subnet index, from a seed, that
// no host address uses.
func newNetns(seed int) (*netns, error) {
	out, err := exec.Command("ip", "-o", "addr").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("ip -o addr: %v: %s", err, out)
	}
	links, _ := exec.Command("ip", "-o", "link").CombinedOutput()
	nss, _ := exec.Command("ip", "netns", "list").CombinedOutput()
	for i := range 250 {
		k := (seed+i)%250 + 1
		n := &netns{
			name:   fmt.Sprintf("gpcsoak%d", k),
			hostIF: fmt.Sprintf("gpcsoak%dh", k), nsIF: fmt.Sprintf("gpcsoak%dn", k),
			hostIP: fmt.Sprintf("10.213.%d.1", k), nodeIP: fmt.Sprintf("10.213.%d.2", k),
			etcdIP: fmt.Sprintf("10.214.%d.1", k), blackhole: fmt.Sprintf("10.213.%d.254", k),
		}
		if bytes.Contains(out, []byte(fmt.Sprintf(" 10.213.%d.", k))) || bytes.Contains(out, []byte(fmt.Sprintf(" 10.214.%d.", k))) ||
			bytes.Contains(links, []byte(n.hostIF)) || bytes.Contains(nss, []byte(n.name)) {
			continue
		}
		if err := n.setup(); err != nil {
			n.teardown()
			return nil, err
		}
		return n, nil
	}
	return nil, errors.New("gpucache/soak: no free 10.213.K.0/24 subnet for the network namespace")
}

func (n *netns) exec(args ...string) error {
	return ipCmd(append([]string{"netns", "exec", n.name, "ip"}, args...)...)
}

func (n *netns) setup() error {
	steps := [][]string{
		{"netns", "add", n.name},
		{"link", "add", n.hostIF, "type", "veth", "peer", "name", n.nsIF},
		{"link", "set", n.nsIF, "netns", n.name},
		{"addr", "add", n.hostIP + "/24", "dev", n.hostIF},
		{"addr", "add", n.etcdIP + "/32", "dev", n.hostIF},
		{"link", "set", n.hostIF, "up"},
	}
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			return err
		}
	}
	for _, s := range [][]string{
		{"link", "set", "lo", "up"},
		{"addr", "add", n.nodeIP + "/24", "dev", n.nsIF},
		{"link", "set", n.nsIF, "up"},
		{"route", "add", n.etcdIP + "/32", "via", n.hostIP},
		{"neigh", "replace", n.blackhole, "lladdr", "02:00:00:00:00:fe", "dev", n.nsIF, "nud", "permanent"},
	} {
		if err := n.exec(s...); err != nil {
			return err
		}
	}
	return nil
}

// prefix returns the command prefix that runs a program in the namespace.
func (n *netns) prefix() []string { return []string{"ip", "netns", "exec", n.name} }

// partition cuts the namespace from etcd's address.
func (n *netns) partition() error {
	return n.exec("route", "replace", n.etcdIP+"/32", "via", n.blackhole)
}

// heal restores the route to etcd.
func (n *netns) heal() error {
	return n.exec("route", "replace", n.etcdIP+"/32", "via", n.hostIP)
}

// teardown removes the veth pair (both ends) and the namespace; errors are
// ignored, so it can clean up a half-built namespace.
func (n *netns) teardown() {
	ipCmd("link", "del", n.hostIF)
	ipCmd("netns", "del", n.name)
}
