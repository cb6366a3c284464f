package check

import (
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/gpucache/gpucache/internal/security/tlsconf/tlstest"
	"github.com/gpucache/gpucache/internal/version"
)

const chartDir = "../helm/gpucache"

// helmBin is the Helm CLI: $GPUCACHE_HELM (scripts/test sets it from
// scripts/helm install), else the one scripts/helm caches. Without one
// the chart tests skip, or fail under CI=true.
func helmBin(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("GPUCACHE_HELM"); p != "" {
		return p
	}
	if p, err := filepath.Abs("../../.cache/bin/helm"); err == nil {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no helm: run scripts/helm install (or set GPUCACHE_HELM)")
	}
	t.Skip("no helm: run scripts/helm install (or set GPUCACHE_HELM); scripts/test does")
	return ""
}

// helmTemplate renders the chart as release gc in namespace cache.
func helmTemplate(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(helmBin(t), append([]string{"template", "gc", chartDir, "--namespace", "cache"}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	if err := cmd.Run(); err != nil {
		return "", errors.New(strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// tlsFiles writes a CA, a server certificate for the pool's names and a
// client certificate (gpucached's, for etcd).
func tlsFiles(t *testing.T) (cert, key, ca, clientCert, clientKey string) {
	dir := t.TempDir()
	c := tlstest.NewCA(t, "gpucache-ca")
	cert, key = c.IssueFiles(t, dir, "server", "gc-gpucache", tlstest.ServerAuth(),
		tlstest.DNS("gc-gpucache", "*.gc-gpucache-headless.cache.svc"), tlstest.IP(net.IPv4(10, 0, 0, 7)))
	clientCert, clientKey = c.IssueFiles(t, dir, "client", "gpucached", tlstest.ClientAuth())
	ca = filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, c.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	return cert, key, ca, clientCert, clientKey
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// existing stands for a Secret already in the cluster (existingSecret).
func existing(name string, typ corev1.SecretType, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{Type: typ, Data: map[string][]byte{}}
	s.Name = name
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

// chartCase is one set of values; want says what the rendering must hold.
type chartCase struct {
	name string
	args []string
	// secrets exist in the cluster already (existingSecret, S3
	// credentials).
	secrets []*corev1.Secret
	want    want
}

type want struct {
	kind           string // DaemonSet or StatefulSet
	tls            bool
	readyz         string
	flash          string // "", hostPath or localPV
	serviceMonitor bool
	overhead       int64
}

func cases(t *testing.T) []chartCase {
	cert, key, ca, clientCert, clientKey := tlsFiles(t)
	const overhead = 3584 * mib // values.yaml resources.memoryOverhead
	return []chartCase{
		{
			name: "daemonset defaults",
			want: want{kind: "DaemonSet", readyz: "/readyz", overhead: overhead},
		},
		{
			// hot_policy builtin keeps no per-block policy state: the
			// sizing rule leaves out M_policy (the bound does too).
			name: "daemonset builtin policy",
			args: []string{"--set", "config.hot_policy=builtin"},
			want: want{kind: "DaemonSet", readyz: "/readyz", overhead: overhead},
		},
		{
			// A per-host cache with flash on a host directory, TLS and
			// mTLS from Secrets the chart makes, sealed manifests, and
			// a ServiceMonitor scraping over TLS.
			name: "daemonset flash tls seal",
			args: []string{"--set", "flash.enabled=true", "--set", "flash.capacity=8GiB",
				"--set", "tls.enabled=true", "--set", "tls.clientCA=true",
				"--set-file", "tls.cert=" + cert, "--set-file", "tls.key=" + key, "--set-file", "tls.ca=" + ca,
				"--set", "sealKeys.ids={k1,k2}", "--set", "serviceMonitor.enabled=true",
				"--set", "probes.readinessRequiresWrites=true",
				"--set", "config.hot_capacity=2GiB", "--set", "config.flash_segment=128MiB"},
			want: want{kind: "DaemonSet", tls: true, readyz: "/readyz?write=1", flash: "hostPath", serviceMonitor: true, overhead: overhead},
		},
		{
			// The defaults with TLS, an S3 cold tier and a cluster: the
			// default memoryOverhead must cover their bound
			// (docs/OPERATIONS.md, "Kubernetes").
			name: "daemonset cluster s3 tls",
			args: []string{"--set", "etcd.endpoints={https://etcd:2379}",
				"--set", "etcd.tls.existingSecret=etcd-client", "--set", "etcd.tls.clientCert=true",
				"--set", "etcd.username=gpucache", "--set", "etcd.passwordSecret=etcd-auth",
				"--set", "coldStore=s3", "--set", "s3.endpoint=http://minio:9000", "--set", "s3.bucket=kv",
				"--set", "tls.enabled=true", "--set", "tls.existingSecret=gpucache-tls",
				"--set", "serviceMonitor.enabled=true", "--set-json", `serviceMonitor.tlsConfig={"insecureSkipVerify":true}`},
			secrets: []*corev1.Secret{
				existing("gpucache-tls", corev1.SecretTypeTLS, map[string]string{"tls.crt": string(readFile(t, cert)), "tls.key": string(readFile(t, key))}),
				existing("etcd-client", corev1.SecretTypeTLS, map[string]string{"tls.crt": string(readFile(t, clientCert)), "tls.key": string(readFile(t, clientKey)), "ca.crt": string(readFile(t, ca))}),
				existing("etcd-auth", corev1.SecretTypeOpaque, map[string]string{"password": "etcd-password-0123"}),
			},
			want: want{kind: "DaemonSet", tls: true, readyz: "/readyz", serviceMonitor: true, overhead: overhead},
		},
		{
			// The shared pool: etcd, S3 with credentials, tenants, TLS,
			// seal and cold keys from existing Secrets, cold keys the
			// chart makes, flash on a local PV per pod.
			name: "statefulset pool",
			args: []string{"--set", "workload=statefulset", "--set", "replicas=4",
				"--set", "etcd.endpoints={http://etcd-0.etcd:2379,http://etcd-1.etcd:2379}",
				"--set", "coldStore=s3", "--set", "s3.endpoint=http://minio.storage:9000", "--set", "s3.bucket=kv",
				"--set", "s3.prefix=prod/", "--set", "s3.credentialsSecret=s3-creds",
				"--set", "tenants.existingSecret=gpucache-tenants",
				"--set", "tls.enabled=true", "--set", "tls.existingSecret=gpucache-tls",
				"--set", "sealKeys.ids={k1}", "--set", "sealKeys.existingSecret=gpucache-seal",
				"--set", "coldEncryptionKeys.ids={c1}", "--set", "coldEncryptionKeys.values.c1=0123456789abcdef0123456789abcdef",
				"--set", "flash.enabled=true", "--set", "flash.volume=localPV", "--set", "flash.capacity=16GiB",
				"--set", "flash.localPV.size=17Gi",
				"--set", "serviceMonitor.enabled=true",
				"--set", "config.hot_capacity=2GiB", "--set", "config.hot_min_class=64KiB"},
			secrets: []*corev1.Secret{
				existing("s3-creds", corev1.SecretTypeOpaque, map[string]string{"AWS_ACCESS_KEY_ID": "AKIAEXAMPLE0KEY", "AWS_SECRET_ACCESS_KEY": "s3-secret-0123456789"}),
				existing("gpucache-tenants", corev1.SecretTypeOpaque, map[string]string{"ops.s1": "ops-secret-0123456789", "engine.s1": "engine-secret-0123456789"}),
				existing("gpucache-tls", corev1.SecretTypeTLS, map[string]string{"tls.crt": string(readFile(t, cert)), "tls.key": string(readFile(t, key)), "ca.crt": string(readFile(t, ca))}),
				existing("gpucache-seal", corev1.SecretTypeOpaque, map[string]string{"k1": "seal-key-0123456789abcdef0123456789abcdef"}),
			},
			want: want{kind: "StatefulSet", tls: true, readyz: "/readyz", flash: "localPV", serviceMonitor: true, overhead: overhead},
		},
		{
			// A pool on host directories, S3 from the node's own
			// credentials, a larger overhead for more connections.
			name: "statefulset hostpath flash",
			args: []string{"--set", "workload=statefulset", "--set", "etcd.endpoints={http://etcd:2379}",
				"--set", "coldStore=s3", "--set", "s3.endpoint=https://s3.us-east-1.amazonaws.com", "--set", "s3.bucket=kv",
				"--set", "s3.pathStyle=false",
				"--set", "flash.enabled=true", "--set", "flash.capacity=4GiB",
				"--set", "config.max_conns=4096", "--set", "resources.memoryOverhead=6Gi",
				"--set", "tenants.secretValues.ops\\.s1=ops-secret-from-values-0123"},
			want: want{kind: "StatefulSet", readyz: "/readyz", flash: "hostPath", overhead: 6 << 30},
		},
	}
}

// TestChart renders the chart with each set of values, decodes every
// manifest strictly with the k8s.io/api types, starts gpucached's own
// config and secret checks on the pod as the kubelet would lay it out, and
// checks what the pod must be: probes, non-root, sizing, flash volume,
// secrets mounted and never in the ConfigMap.
func TestChart(t *testing.T) {
	for _, c := range cases(t) {
		t.Run(c.name, func(t *testing.T) {
			out, err := helmTemplate(t, c.args...)
			if err != nil {
				t.Fatalf("helm template: %v", err)
			}
			m, err := Decode(out)
			if err != nil {
				t.Fatalf("strict decode: %v", err)
			}
			checkRendering(t, c, m)
		})
	}
}

func checkRendering(t *testing.T, c chartCase, m *Manifests) {
	var tmpl corev1.PodTemplateSpec
	var sts *appsv1.StatefulSet
	switch c.want.kind {
	case "DaemonSet":
		if len(m.DaemonSets) != 1 || len(m.StatefulSets) != 0 {
			t.Fatalf("want one DaemonSet, got %d DaemonSets and %d StatefulSets", len(m.DaemonSets), len(m.StatefulSets))
		}
		for _, d := range m.DaemonSets {
			tmpl = d.Spec.Template
			checkSelector(t, "DaemonSet", d.Spec.Selector.MatchLabels, tmpl.Labels)
		}
	case "StatefulSet":
		if len(m.StatefulSets) != 1 || len(m.DaemonSets) != 0 {
			t.Fatalf("want one StatefulSet, got %d StatefulSets and %d DaemonSets", len(m.StatefulSets), len(m.DaemonSets))
		}
		for _, s := range m.StatefulSets {
			sts, tmpl = s, s.Spec.Template
			checkSelector(t, "StatefulSet", s.Spec.Selector.MatchLabels, tmpl.Labels)
		}
		h, ok := m.Services[sts.Spec.ServiceName]
		if !ok || h.Spec.ClusterIP != corev1.ClusterIPNone || !h.Spec.PublishNotReadyAddresses {
			t.Errorf("StatefulSet serviceName %q: want a rendered headless Service that publishes not-ready pods", sts.Spec.ServiceName)
		}
		if len(m.PDBs) != 1 {
			t.Errorf("a pool wants a PodDisruptionBudget, got %d", len(m.PDBs))
		}
	}

	secrets := map[string]*corev1.Secret{}
	for k, v := range m.Secrets {
		secrets[k] = v
	}
	for _, s := range c.secrets {
		if _, dup := secrets[s.Name]; dup {
			t.Fatalf("Secret %s is both rendered and existing", s.Name)
		}
		secrets[s.Name] = s
	}
	pod, err := Layout(t.TempDir(), tmpl, secrets, m.ConfigMaps)
	if err != nil {
		t.Fatalf("laying out the pod: %v", err)
	}
	cfg, err := pod.Start()
	if err != nil {
		t.Fatalf("gpucached refuses the rendered config: %v", err)
	}
	ctr := pod.Container

	// Listeners and ports.
	portOf := func(addr string) int32 {
		_, p, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatalf("%q: %v", addr, err)
		}
		n, _ := strconv.Atoi(p)
		return int32(n)
	}
	named := map[string]int32{}
	for _, p := range ctr.Ports {
		named[p.Name] = p.ContainerPort
	}
	if named["data"] != portOf(cfg.Listen) || named["admin"] != portOf(cfg.AdminListen) {
		t.Errorf("container ports %v; want data %s, admin %s", named, cfg.Listen, cfg.AdminListen)
	}

	// Probes: /healthz and /readyz on the admin port, HTTPS with TLS.
	scheme := corev1.URISchemeHTTP
	if cfg.TLSEnabled() {
		scheme = corev1.URISchemeHTTPS
	}
	if cfg.TLSEnabled() != c.want.tls {
		t.Errorf("TLS %v, want %v", cfg.TLSEnabled(), c.want.tls)
	}
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"startup", ctr.StartupProbe, "/healthz"}, {"liveness", ctr.LivenessProbe, "/healthz"}, {"readiness", ctr.ReadinessProbe, c.want.readyz}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("%s probe: want an HTTP GET", p.name)
			continue
		}
		g := p.probe.HTTPGet
		if g.Path != p.path || g.Port.String() != "admin" || g.Scheme != scheme {
			t.Errorf("%s probe: %s %s port %s; want %s %s on admin (%d)", p.name, g.Scheme, g.Path, g.Port.String(), scheme, p.path, named["admin"])
		}
	}

	// Non-root, read-only root file system, no privileges.
	ps, cs := tmpl.Spec.SecurityContext, ctr.SecurityContext
	if ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot || ps.RunAsUser == nil || *ps.RunAsUser == 0 {
		t.Errorf("pod securityContext %+v: want runAsNonRoot and a non-zero runAsUser", ps)
	}
	if cs == nil || cs.ReadOnlyRootFilesystem == nil || !*cs.ReadOnlyRootFilesystem ||
		cs.AllowPrivilegeEscalation == nil || *cs.AllowPrivilegeEscalation ||
		cs.Capabilities == nil || len(cs.Capabilities.Drop) != 1 || cs.Capabilities.Drop[0] != "ALL" {
		t.Errorf("container securityContext %+v: want a read-only root file system, no privilege escalation, every capability dropped", cs)
	}
	if tmpl.Spec.AutomountServiceAccountToken == nil || *tmpl.Spec.AutomountServiceAccountToken {
		t.Error("the pod needs no Kubernetes API token: want automountServiceAccountToken false")
	}

	// Memory: request = limit = the sizing rule, and at least the bound.
	req, lim := ctr.Resources.Requests[corev1.ResourceMemory], ctr.Resources.Limits[corev1.ResourceMemory]
	if req.Cmp(lim) != 0 {
		t.Errorf("memory request %s != limit %s", req.String(), lim.String())
	}
	if rule := ChartMemory(cfg, c.want.overhead); lim.Value() != rule {
		t.Errorf("memory limit %s (%d B); the rule gives %d B for hot_capacity %s", lim.String(), lim.Value(), rule, cfg.HotCapacity)
	}
	if bound := MemoryBound(cfg); lim.Value() < bound {
		t.Errorf("memory limit %s (%d MiB) is below the daemon's memory bound %d MiB: raise resources.memoryOverhead", lim.String(), lim.Value()>>20, bound>>20)
	} else {
		t.Logf("memory limit %d MiB, bound %d MiB (hot_capacity %s)", lim.Value()>>20, bound>>20, cfg.HotCapacity)
	}

	// Flash: flash_dir on a hostPath or a local PV.
	if (c.want.flash != "") != cfg.FlashEnabled() {
		t.Fatalf("flash enabled %v, want %q", cfg.FlashEnabled(), c.want.flash)
	}
	if cfg.FlashEnabled() {
		fm, ok := pod.MountOf(cfg.FlashDir)
		if !ok || fm.ReadOnly {
			t.Fatalf("flash_dir %s: no writable mount", pod.Unroot(cfg.FlashDir))
		}
		var hp *corev1.HostPathVolumeSource
		for _, v := range tmpl.Spec.Volumes {
			if v.Name == fm.Name {
				hp = v.HostPath
			}
		}
		switch c.want.flash {
		case "hostPath":
			if hp == nil || hp.Type == nil || *hp.Type != corev1.HostPathDirectory {
				t.Errorf("flash volume %s: want a hostPath of type Directory, got %+v", fm.Name, hp)
			}
		case "localPV":
			var claim *corev1.PersistentVolumeClaim
			if sts != nil {
				for i := range sts.Spec.VolumeClaimTemplates {
					if sts.Spec.VolumeClaimTemplates[i].Name == fm.Name {
						claim = &sts.Spec.VolumeClaimTemplates[i]
					}
				}
			}
			if claim == nil || hp != nil {
				t.Fatalf("flash volume %s: want a volume claim template", fm.Name)
			}
			size := claim.Spec.Resources.Requests[corev1.ResourceStorage]
			if claim.Spec.StorageClassName == nil || *claim.Spec.StorageClassName == "" || size.Cmp(*resource.NewQuantity(int64(cfg.FlashCapacity), resource.BinarySI)) < 0 {
				t.Errorf("flash claim: storage class %v, size %s; want a local class and at least flash_capacity %s", claim.Spec.StorageClassName, size.String(), cfg.FlashCapacity)
			}
		}
	}

	// Secrets: every one a file from a mounted Secret (or an env
	// secretKeyRef), none in the ConfigMap.
	var files []string
	for _, tc := range cfg.Tenants {
		for _, s := range tc.Secrets {
			files = append(files, s.File)
		}
	}
	for _, s := range append(cfg.SealKeys, cfg.ColdEncryptionKeys...) {
		files = append(files, s.File)
	}
	files = append(files, cfg.TLSCert, cfg.TLSKey, cfg.TLSClientCA)
	vols := map[string]corev1.Volume{}
	for _, v := range tmpl.Spec.Volumes {
		vols[v.Name] = v
	}
	for _, f := range files {
		if f == "" {
			continue
		}
		mt, ok := pod.MountOf(filepath.Dir(f))
		if !ok || vols[mt.Name].Secret == nil || !mt.ReadOnly {
			t.Errorf("%s: not in a read-only Secret mount", pod.Unroot(f))
		}
	}
	if len(cfg.Tenants) == 0 {
		t.Error("no tenants: gpucached would listen beyond loopback without authentication")
	}
	for name, cm := range m.ConfigMaps {
		for _, s := range secrets {
			for k, v := range secretData(s) {
				if len(v) >= 8 && strings.Contains(strings.Join(mapValues(cm.Data), "\n"), string(v)) {
					t.Errorf("ConfigMap %s holds the value of Secret %s key %s", name, s.Name, k)
				}
			}
		}
	}
	if cfg.ColdStore == "s3" && cfg.S3SecretKey != "" {
		if _, ok := pod.Env["AWS_SECRET_ACCESS_KEY"]; !ok {
			t.Error("the S3 secret key came from elsewhere than the credentials Secret")
		}
	}

	// Services select the pods; the ServiceMonitor scrapes the main one.
	var main *corev1.Service
	for _, s := range m.Services {
		if !labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(tmpl.Labels)) {
			t.Errorf("Service %s does not select the pods", s.Name)
		}
		if s.Labels["gpucache.io/service"] == "main" {
			main = s
		}
	}
	if main == nil {
		t.Fatal("no main Service")
	}
	if c.want.kind == "DaemonSet" && (main.Spec.InternalTrafficPolicy == nil || *main.Spec.InternalTrafficPolicy != corev1.ServiceInternalTrafficPolicyLocal) {
		t.Error("a per-host cache's Service wants internalTrafficPolicy Local")
	}
	if (len(m.ServiceMonitors) == 1) != c.want.serviceMonitor {
		t.Errorf("%d ServiceMonitors, want one: %v", len(m.ServiceMonitors), c.want.serviceMonitor)
	}
	for _, sm := range m.ServiceMonitors {
		sel := labels.SelectorFromSet(sm.Spec.Selector.MatchLabels)
		for _, s := range m.Services {
			if got, want := sel.Matches(labels.Set(s.Labels)), s == main; got != want {
				t.Errorf("ServiceMonitor selects Service %s: %v, want %v", s.Name, got, want)
			}
		}
		if len(sm.Spec.Endpoints) != 1 {
			t.Fatalf("ServiceMonitor endpoints: %d", len(sm.Spec.Endpoints))
		}
		e := sm.Spec.Endpoints[0]
		wantScheme := "http"
		if cfg.TLSEnabled() {
			wantScheme = "https"
		}
		gotScheme := "http"
		if e.Scheme != nil {
			gotScheme = strings.ToLower(string(*e.Scheme))
		}
		if e.Port != "admin" || e.Path != "/metrics" || gotScheme != wantScheme {
			t.Errorf("ServiceMonitor endpoint %s %s %s; want admin /metrics %s", e.Port, e.Path, gotScheme, wantScheme)
		}
	}

	// Identity in a cluster: node_id, advertise_addr, fault_domain.
	if cfg.Clustered() {
		id, addr, domain, _ := cfg.Member(cfg.Listen)
		if domain != Downward["spec.nodeName"] {
			t.Errorf("fault_domain %q, want the host name", domain)
		}
		if sts != nil && (id != Downward["metadata.name"] || !strings.HasPrefix(addr, id+"."+sts.Spec.ServiceName+".")) {
			t.Errorf("a pool member is %q at %q: want the pod name at its stable name under %s", id, addr, sts.Spec.ServiceName)
		}
	}
}

func checkSelector(t *testing.T, kind string, sel, podLabels map[string]string) {
	t.Helper()
	if len(sel) == 0 || !labels.SelectorFromSet(sel).Matches(labels.Set(podLabels)) {
		t.Errorf("%s selector %v does not select its pods %v", kind, sel, podLabels)
	}
}

func mapValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// TestChartRefusesBadValues: values the chart cannot turn into a working
// pod stop helm template with a message that says what to set.
func TestChartRefusesBadValues(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--set", "workload=statefulset"}, "set etcd.endpoints"},
		{[]string{"--set", "workload=deployment"}, "want daemonset"},
		{[]string{"--set", "config.listen=0.0.0.0:1"}, "config.listen is set by the chart"},
		{[]string{"--set", "config.hot_capacity=4GB"}, "binary unit"},
		{[]string{"--set", "tenants.list=null"}, "tenants.list is empty"},
		{[]string{"--set", "tenants.list[0].name=ops", "--set", "tenants.list[0].secrets[0].id=s1", "--set", "tenants.list[0].secrets[0].file=/x"}, "give only its id"},
		{[]string{"--set", "tls.enabled=true"}, "tls.existingSecret"},
		{[]string{"--set", "coldStore=fs"}, "want off or s3"},
		{[]string{"--set", "etcd.endpoints={http://e:2379}", "--set", "etcd.username=u"}, "etcd.passwordSecret"},
		{[]string{"--set", "coldStore=s3"}, "s3.endpoint and s3.bucket"},
		{[]string{"--set", "flash.enabled=true", "--set", "flash.volume=localPV"}, "needs workload statefulset"},
		{[]string{"--set", "workload=statefulset", "--set", "etcd.endpoints={http://e:2379}", "--set", "flash.enabled=true",
			"--set", "flash.volume=localPV", "--set", "flash.localPV.size=10Gi"}, "smaller than flash.capacity"},
	} {
		_, err := helmTemplate(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v; want an error saying %q", c.args, err, c.want)
		}
	}
}

// TestCheckCatchesRefusedConfigs: a rendering gpucached would refuse at
// start fails the check with gpucached's own error, whether the config
// does not validate or a secret it names does not pass nodesec.
func TestCheckCatchesRefusedConfigs(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--set", "config.hot_max_class=3MiB"}, "must be powers of two"},
		{[]string{"--set", "config.no_such_setting=1"}, "no_such_setting"},
		{[]string{"--set", "tenants.secretValues.ops\\.s1=short"}, "tenant \"ops\""},
		{[]string{"--set", "sealKeys.ids={k1}", "--set", "sealKeys.values.k1=short"}, "seal_keys"},
		{[]string{"--set", "etcd.endpoints={https://e:2379}"}, "set etcd_ca"},
	} {
		out, err := helmTemplate(t, c.args...)
		if err != nil {
			t.Fatalf("%v: helm template: %v", c.args, err)
		}
		m, err := Decode(out)
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		var tmpl corev1.PodTemplateSpec
		for _, d := range m.DaemonSets {
			tmpl = d.Spec.Template
		}
		pod, err := Layout(t.TempDir(), tmpl, m.Secrets, m.ConfigMaps)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pod.Start(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: gpucached's checks say %v; want a refusal mentioning %q", c.args, err, c.want)
		}
	}
}

// TestDecodeIsStrict: a field the type lacks, a duplicate field and an
// unexpected kind are errors, so the chart tests would catch them.
func TestDecodeIsStrict(t *testing.T) {
	for _, doc := range []string{
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata: {}\nbogus: 1\n",
		"apiVersion: v1\nkind: Service\nmetadata:\n  name: a\nspec:\n  clusterIp: None\n",
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  name: b\n",
		"apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: a\n",
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n",
	} {
		if _, err := Decode(doc); err == nil {
			t.Errorf("accepted:\n%s", doc)
		}
	}
	if m, err := Decode("---\n# Source: x\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n"); err != nil || m.Count != 1 {
		t.Errorf("a plain document: %v, %d objects", err, m.Count)
	}
}

// TestChartAppVersion: the chart runs the gpucached release it names.
func TestChartAppVersion(t *testing.T) {
	var chart struct {
		AppVersion string `yaml:"appVersion"`
	}
	if err := yaml.Unmarshal(readFile(t, filepath.Join(chartDir, "Chart.yaml")), &chart); err != nil {
		t.Fatal(err)
	}
	if chart.AppVersion != version.Number {
		t.Errorf("Chart.yaml appVersion %q, gpucached is %s", chart.AppVersion, version.Number)
	}
}
