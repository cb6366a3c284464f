package check

import (
	"fmt"
	"regexp"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
)

// Manifests are the objects of one rendering, by kind and name.
type Manifests struct {
	ConfigMaps      map[string]*corev1.ConfigMap
	Secrets         map[string]*corev1.Secret
	Services        map[string]*corev1.Service
	DaemonSets      map[string]*appsv1.DaemonSet
	StatefulSets    map[string]*appsv1.StatefulSet
	PDBs            map[string]*policyv1.PodDisruptionBudget
	ServiceMonitors map[string]*monitoringv1.ServiceMonitor
	// Count is the number of objects decoded.
	Count int
}

// scheme knows every kind the chart may render; any other kind is an
// error.
func scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme, monitoringv1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

var docSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

// Decode decodes every document of a rendering (helm template's output)
// strictly, with apimachinery's strict YAML serializer: a field the
// kind's k8s.io/api type does not have, a duplicate field or a value of
// the wrong type is an error, as is a kind the chart is not expected to
// render. Empty documents (comments only) are skipped.
func Decode(out string) (*Manifests, error) {
	s, err := scheme()
	if err != nil {
		return nil, err
	}
	ser := json.NewSerializerWithOptions(json.DefaultMetaFactory, s, s, json.SerializerOptions{Yaml: true, Strict: true})
	m := &Manifests{
		ConfigMaps: map[string]*corev1.ConfigMap{}, Secrets: map[string]*corev1.Secret{},
		Services: map[string]*corev1.Service{}, DaemonSets: map[string]*appsv1.DaemonSet{},
		StatefulSets: map[string]*appsv1.StatefulSet{}, PDBs: map[string]*policyv1.PodDisruptionBudget{},
		ServiceMonitors: map[string]*monitoringv1.ServiceMonitor{},
	}
	for i, doc := range docSep.Split(out, -1) {
		if isEmptyDoc(doc) {
			continue
		}
		obj, gvk, err := ser.Decode([]byte(doc), nil, nil)
		if err != nil {
			return nil, fmt.Errorf("document %d (%s): %w", i, source(doc), err)
		}
		name := ""
		var dup bool
		switch o := obj.(type) {
		case *corev1.ConfigMap:
			name, dup = o.Name, put(m.ConfigMaps, o.Name, o)
		case *corev1.Secret:
			name, dup = o.Name, put(m.Secrets, o.Name, o)
		case *corev1.Service:
			name, dup = o.Name, put(m.Services, o.Name, o)
		case *appsv1.DaemonSet:
			name, dup = o.Name, put(m.DaemonSets, o.Name, o)
		case *appsv1.StatefulSet:
			name, dup = o.Name, put(m.StatefulSets, o.Name, o)
		case *policyv1.PodDisruptionBudget:
			name, dup = o.Name, put(m.PDBs, o.Name, o)
		case *monitoringv1.ServiceMonitor:
			name, dup = o.Name, put(m.ServiceMonitors, o.Name, o)
		default:
			return nil, fmt.Errorf("document %d (%s): kind %s is not one the chart should render", i, source(doc), gvk)
		}
		if name == "" {
			return nil, fmt.Errorf("document %d (%s): %s without a name", i, source(doc), gvk.Kind)
		}
		if dup {
			return nil, fmt.Errorf("document %d (%s): a second %s %q", i, source(doc), gvk.Kind, name)
		}
		m.Count++
	}
	return m, nil
}

func put[T any](m map[string]T, name string, v T) (dup bool) {
	_, dup = m[name]
	m[name] = v
	return dup
}

func isEmptyDoc(doc string) bool {
	for l := range strings.SplitSeq(doc, "\n") {
		if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "#") {
			return false
		}
	}
	return true
}

// source is the template a document came from (helm's "# Source:" line).
func source(doc string) string {
	for l := range strings.SplitSeq(doc, "\n") {
		if s, ok := strings.CutPrefix(strings.TrimSpace(l), "# Source: "); ok {
			return s
		}
	}
	return "no source line"
}
