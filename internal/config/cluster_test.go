package config

import (
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

func TestClusterFlags(t *testing.T) {
	c, err := Load([]string{"--etcd-endpoints", "http://10.0.0.5:2379, http://10.0.0.6:2379", "--node-id", "gpu-7",
		"--fault-domain", "rack-3", "--advertise-addr", "10.1.0.7:9400", "--member-lease-ttl", "5s", "--protocol-max", "1"},
		env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Clustered() || len(c.Endpoints()) != 2 || c.Endpoints()[1] != "http://10.0.0.6:2379" {
		t.Fatalf("endpoints %q", c.Endpoints())
	}
	id, addr, domain, err := c.Member("127.0.0.1:9400")
	if err != nil || id != "gpu-7" || addr != "10.1.0.7:9400" || domain != "rack-3" {
		t.Fatalf("member %q %q %q %v", id, addr, domain, err)
	}
	if c.MemberLeaseTTL != 5*time.Second || c.ProtocolMax != 1 || c.EtcdPrefix != "/gpucache/" {
		t.Fatalf("cluster settings %+v", c)
	}
	// Defaults: the id is the advertise address, which is listen.
	d := Default()
	d.EtcdEndpoints = "http://127.0.0.1:2379"
	id, addr, _, err = d.Member("127.0.0.1:9400")
	if err != nil || id != "127.0.0.1:9400" || addr != id {
		t.Fatalf("default member %q %q %v", id, addr, err)
	}
	// A wildcard listen needs advertise_addr.
	if _, _, _, err := d.Member("0.0.0.0:9400"); err == nil || !strings.Contains(err.Error(), "advertise_addr") {
		t.Fatalf("wildcard listen: %v", err)
	}
	if Default().Clustered() {
		t.Fatal("the embedded default is clustered")
	}
}

func TestClusterValidation(t *testing.T) {
	for flagv, want := range map[string]string{
		"--protocol-max=6":           "protocol_max",
		"--etcd-endpoints=etcd:2379": "needs a scheme",
		"--member-lease-ttl=1s":      "member_lease_ttl",
		"--control-grace=0s":         "control_grace",
		"--node-id=a/b":              "node_id",
		"--etcd-prefix=gpucache":     "etcd_prefix",
		"--advertise-addr=nohost":    "advertise_addr",
	} {
		args := []string{flagv}
		if !strings.HasPrefix(flagv, "--etcd-endpoints") && flagv != "--protocol-max=6" {
			args = append(args, "--etcd-endpoints=http://127.0.0.1:2379")
		}
		_, err := Load(args, env(nil), io.Discard)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error naming %s", flagv, err, want)
		}
	}
}

func TestEtcdSecurityValidation(t *testing.T) {
	base := []string{"--etcd-endpoints=https://10.0.0.5:2379"}
	if _, err := Load(base, env(nil), io.Discard); err == nil || !strings.Contains(err.Error(), "etcd_ca") {
		t.Fatalf("https endpoint without etcd_ca: %v", err)
	}
	if _, err := Load(append(base, "--etcd-ca=ca.pem", "--etcd-cert=c.pem"), env(nil), io.Discard); err == nil {
		t.Fatal("etcd_cert without etcd_key accepted")
	}
	c, err := Load(append(base, "--etcd-ca=ca.pem", "--etcd-cert=c.pem", "--etcd-key=k.pem"), env(nil), io.Discard)
	if err != nil || c.EtcdCA != "ca.pem" {
		t.Fatalf("full TLS settings: %v", err)
	}
	pw := t.TempDir() + "/pw"
	os.WriteFile(pw, []byte("  hunter2 \n"), 0o600)
	c.EtcdUsername, c.EtcdPasswordFile = "gpucache", pw
	if p, err := c.EtcdPassword(); err != nil || p != "hunter2" {
		t.Fatalf("password %q, %v", p, err)
	}
	os.WriteFile(pw, []byte("\n"), 0o600)
	if _, err := c.EtcdPassword(); err == nil {
		t.Fatal("empty password file accepted")
	}
}
