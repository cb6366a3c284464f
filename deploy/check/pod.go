package check

import (
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"

	"github.com/gpucache/gpucache/internal/config"
	"github.com/gpucache/gpucache/internal/security/nodesec"
	"github.com/gpucache/gpucache/internal/security/tlsconf"
)

// Downward is what the downward API gives the pod in this check
// (fieldRef paths); a cluster gives real values.
var Downward = map[string]string{
	"metadata.name":      "gc-gpucache-0",
	"metadata.namespace": "cache",
	"status.podIP":       "10.0.0.7",
	"spec.nodeName":      "gpu-node-1",
}

// Pod is a rendered pod laid out on this machine as the kubelet would
// lay it out: every volume the gpucached container mounts is a directory
// under Root (Root + mountPath), a ConfigMap's or Secret's keys files in
// it (a Secret's as symbolic links into ..data, as Kubernetes mounts
// them); hostPath and volume-claim mounts are empty directories.
type Pod struct {
	Root      string
	Container corev1.Container
	// Env is the container's environment as the kubelet would build it:
	// downward API values from Downward, secretKeyRef values from the
	// Secrets, $(VAR) references expanded.
	Env map[string]string
	// Args are the container's args with every path under a mount moved
	// under Root.
	Args []string
}

// Layout lays out tmpl's gpucached container under root. secrets are the
// Secrets the pod may use (rendered by the chart, or existing in the
// cluster); configMaps likewise. A volume that names a Secret or
// ConfigMap not given, or a key not in it, is an error, as it would keep
// the pod from starting.
func Layout(root string, tmpl corev1.PodTemplateSpec, secrets map[string]*corev1.Secret, configMaps map[string]*corev1.ConfigMap) (*Pod, error) {
	var c *corev1.Container
	for i := range tmpl.Spec.Containers {
		if tmpl.Spec.Containers[i].Name == "gpucached" {
			c = &tmpl.Spec.Containers[i]
		}
	}
	if c == nil {
		return nil, fmt.Errorf("no container named gpucached")
	}
	vols := map[string]corev1.Volume{}
	for _, v := range tmpl.Spec.Volumes {
		vols[v.Name] = v
	}
	p := &Pod{Root: root, Container: *c, Env: map[string]string{}}
	for _, m := range c.VolumeMounts {
		dir := filepath.Join(root, m.MountPath)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		v, ok := vols[m.Name]
		switch {
		case !ok:
			// A volume claim template's volume (StatefulSet) is not
			// in spec.volumes: the caller checks it exists.
		case v.ConfigMap != nil:
			cm, ok := configMaps[v.ConfigMap.Name]
			if !ok {
				return nil, fmt.Errorf("volume %s: ConfigMap %s is not rendered", v.Name, v.ConfigMap.Name)
			}
			for k, val := range cm.Data {
				if err := os.WriteFile(filepath.Join(dir, k), []byte(val), 0o644); err != nil {
					return nil, err
				}
			}
		case v.Secret != nil:
			s, ok := secrets[v.Secret.SecretName]
			if !ok {
				return nil, fmt.Errorf("volume %s: Secret %s is neither rendered nor given", v.Name, v.Secret.SecretName)
			}
			data := filepath.Join(dir, "..data")
			if err := os.MkdirAll(data, 0o755); err != nil {
				return nil, err
			}
			mode := os.FileMode(0o644)
			if v.Secret.DefaultMode != nil {
				mode = os.FileMode(*v.Secret.DefaultMode)
			}
			for k, val := range secretData(s) {
				if err := os.WriteFile(filepath.Join(data, k), val, mode); err != nil {
					return nil, err
				}
				if err := fsGroupOwn(tmpl, filepath.Join(data, k), mode); err != nil {
					return nil, err
				}
				if err := os.Symlink(filepath.Join("..data", k), filepath.Join(dir, k)); err != nil {
					return nil, err
				}
			}
		case v.HostPath != nil, v.EmptyDir != nil, v.PersistentVolumeClaim != nil:
			// an empty directory
		default:
			return nil, fmt.Errorf("volume %s: a kind this check does not lay out", v.Name)
		}
	}
	mounts := slices.Collect(func(yield func(string) bool) {
		for _, m := range c.VolumeMounts {
			if !yield(m.MountPath) {
				return
			}
		}
	})
	for _, a := range c.Args {
		p.Args = append(p.Args, p.under(mounts, a))
	}
	for _, e := range c.Env {
		val, err := p.envValue(e, secrets)
		if err != nil {
			return nil, err
		}
		p.Env[e.Name] = val
	}
	// The config file names paths under the mounts: move them under Root.
	for _, m := range c.VolumeMounts {
		v, ok := vols[m.Name]
		if !ok || v.ConfigMap == nil {
			continue
		}
		for k := range configMaps[v.ConfigMap.Name].Data {
			f := filepath.Join(root, m.MountPath, k)
			b, err := os.ReadFile(f)
			if err != nil {
				return nil, err
			}
			var doc yaml.Node
			if err := yaml.Unmarshal(b, &doc); err != nil {
				return nil, fmt.Errorf("ConfigMap %s key %s: %w", v.ConfigMap.Name, k, err)
			}
			p.rewrite(&doc, mounts)
			out, err := yaml.Marshal(&doc)
			if err != nil {
				return nil, err
			}
			if err := os.WriteFile(f, out, 0o644); err != nil {
				return nil, err
			}
		}
	}
	return p, nil
}

// fsGroupOwn does to a Secret's file what the kubelet does under the
// pod's fsGroup: the file's group becomes fsGroup and its mode gains
// group read (r--r----- OR'd in), so a non-root runAsUser reads it
// through the group. Only root can give a file away; otherwise the files
// stay this user's.
func fsGroupOwn(tmpl corev1.PodTemplateSpec, f string, mode os.FileMode) error {
	sc := tmpl.Spec.SecurityContext
	if sc == nil || sc.FSGroup == nil || os.Geteuid() != 0 {
		return nil
	}
	if err := os.Chown(f, 0, int(*sc.FSGroup)); err != nil {
		return err
	}
	return os.Chmod(f, mode|0o440)
}

// secretData is a Secret's data as the kubelet writes it: data, with
// stringData over it.
func secretData(s *corev1.Secret) map[string][]byte {
	out := maps.Clone(s.Data)
	if out == nil {
		out = map[string][]byte{}
	}
	for k, v := range s.StringData {
		out[k] = []byte(v)
	}
	return out
}

// under moves path under Root when it lies under one of mounts.
func (p *Pod) under(mounts []string, path string) string {
	for _, m := range mounts {
		if path == m || strings.HasPrefix(path, m+"/") {
			return filepath.Join(p.Root, path)
		}
	}
	return path
}

func (p *Pod) rewrite(n *yaml.Node, mounts []string) {
	if n.Kind == yaml.ScalarNode {
		n.Value = p.under(mounts, n.Value)
	}
	for _, c := range n.Content {
		p.rewrite(c, mounts)
	}
}

var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// envValue is one env entry's value as the kubelet computes it: $(VAR)
// expands a variable defined before it.
func (p *Pod) envValue(e corev1.EnvVar, secrets map[string]*corev1.Secret) (string, error) {
	if e.ValueFrom == nil {
		return envRef.ReplaceAllStringFunc(e.Value, func(ref string) string {
			if v, ok := p.Env[envRef.FindStringSubmatch(ref)[1]]; ok {
				return v
			}
			return ref
		}), nil
	}
	switch vf := e.ValueFrom; {
	case vf.FieldRef != nil:
		v, ok := Downward[vf.FieldRef.FieldPath]
		if !ok {
			return "", fmt.Errorf("env %s: fieldRef %s: not a field this check knows", e.Name, vf.FieldRef.FieldPath)
		}
		return v, nil
	case vf.SecretKeyRef != nil:
		s, ok := secrets[vf.SecretKeyRef.Name]
		if !ok {
			return "", fmt.Errorf("env %s: Secret %s is neither rendered nor given", e.Name, vf.SecretKeyRef.Name)
		}
		v, ok := secretData(s)[vf.SecretKeyRef.Key]
		if !ok {
			return "", fmt.Errorf("env %s: Secret %s has no key %s", e.Name, vf.SecretKeyRef.Name, vf.SecretKeyRef.Key)
		}
		return string(v), nil
	}
	return "", fmt.Errorf("env %s: a valueFrom this check does not resolve", e.Name)
}

// Getenv looks a variable up in the pod's environment only.
func (p *Pod) Getenv(k string) (string, bool) {
	v, ok := p.Env[k]
	return v, ok
}

// Start runs what gpucached runs at start before it opens anything, on
// the pod's args and environment: config.Load (the file, GPUCACHE_*
// variables, flags; then Validate), nodesec.Load (every tenant secret,
// seal key, cold encryption key and TLS file read and checked) and, in a
// cluster, config.Member (the member identity) and the etcd client's TLS
// files and password file. Its error is gpucached's own.
func (p *Pod) Start() (config.Config, error) {
	cfg, err := config.Load(p.Args, p.Getenv, io.Discard)
	if err != nil {
		return cfg, err
	}
	if _, err := nodesec.Load(cfg, p.Getenv); err != nil {
		return cfg, err
	}
	if cfg.Clustered() {
		if _, _, _, err := cfg.Member(cfg.Listen); err != nil {
			return cfg, err
		}
		// What internal/daemon's etcdClientConfig reads before it dials
		// etcd: the TLS files and the password file.
		if cfg.EtcdCA != "" {
			if _, err := tlsconf.NewClient(tlsconf.ClientFiles{CAFile: cfg.EtcdCA, CertFile: cfg.EtcdCert, KeyFile: cfg.EtcdKey}); err != nil {
				return cfg, fmt.Errorf("etcd TLS: %w", err)
			}
		}
		if _, err := cfg.EtcdPassword(); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// MountOf returns the mount whose path is dir (as the config names it).
func (p *Pod) MountOf(dir string) (corev1.VolumeMount, bool) {
	for _, m := range p.Container.VolumeMounts {
		if filepath.Join(p.Root, m.MountPath) == dir || m.MountPath == dir {
			return m, true
		}
	}
	return corev1.VolumeMount{}, false
}

// Unroot gives a path the loaded config names as the pod sees it.
func (p *Pod) Unroot(path string) string {
	if rest, ok := strings.CutPrefix(path, p.Root); ok {
		return rest
	}
	return path
}
