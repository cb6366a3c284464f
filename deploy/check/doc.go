// Package check tests the deployment files: the Helm chart under
// deploy/helm/gpucache and the container image's build script under
// deploy/docker. It is a module of its own so that the Kubernetes API
// types it decodes the chart's manifests with (k8s.io/api,
// prometheus-operator's ServiceMonitor) never enter the root module's
// dependencies; it requires the root module through a replace directive
// and calls gpucached's own config loading and secret checks
// (internal/config, internal/security/nodesec).
//
// Run it as scripts/test's deploy stage does:
//
//	scripts/helm install
//	cd deploy/check && GOWORK=off go test -race ./...
//
// GOWORK=off: the module is on purpose not in a go.work, so the
// Kubernetes modules stay out of the workspace's builds; it resolves this
// repository's modules through its own replace directives.
package check
