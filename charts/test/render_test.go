// Package charttest renders the nora-breaker Helm chart with every example
// values file and checks the output the way a cluster would: each object is
// decoded strictly into its Kubernetes API type (an unknown or misspelt field
// fails), the rendered config.toml must pass `nora-breaker check-config`, the
// generated CA must load in the proxy, and the NORA-mode pod must start the
// proxy before NORA with the CA wired in. It needs a helm binary: $HELM, else
// .tools/helm at the repository root (charts/test.sh installs it).
package charttest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

const (
	repoRoot  = "../.."
	chartDir  = "../nora-breaker"
	release   = "ci"
	namespace = "build"
)

// rendered is one helm template run, decoded.
type rendered struct {
	Deployments     map[string]*appsv1.Deployment
	ConfigMaps      map[string]*corev1.ConfigMap
	Secrets         map[string]*corev1.Secret
	Services        map[string]*corev1.Service
	ServiceAccounts map[string]*corev1.ServiceAccount
	Pods            map[string]*corev1.Pod // helm test hooks
	NetworkPolicies []*networkingv1.NetworkPolicy
	// TestNetworkPolicies are helm test hooks, alive only during a test.
	TestNetworkPolicies []*networkingv1.NetworkPolicy
	PDBs                []*policyv1.PodDisruptionBudget
	PVCs                []*corev1.PersistentVolumeClaim
	ServiceMonitors     []*monitoringv1.ServiceMonitor
	PrometheusRules     []*monitoringv1.PrometheusRule
}

func helmBin(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("HELM"); h != "" {
		return h
	}
	h, err := filepath.Abs(filepath.Join(repoRoot, ".tools", "helm"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(h); err != nil {
		t.Fatalf("no helm at %s (run charts/test.sh, or set HELM): %v", h, err)
	}
	return h
}

// kubeVersion is the cluster version renders assume unless a test says
// otherwise: helm's own default (1.20 in a binary built with go install) is
// below the chart's kubeVersion.
const kubeVersion = "1.31.0"

// monitoringAPIs are the Prometheus Operator's kinds, which a cluster with
// its CRDs serves; renders assume them unless a test says otherwise.
var monitoringAPIs = []string{"--api-versions", "monitoring.coreos.com/v1/ServiceMonitor",
	"--api-versions", "monitoring.coreos.com/v1/PrometheusRule"}

// helmTemplate runs helm template against a cluster of kubeVersion with
// the Prometheus Operator's CRDs and returns stdout, or the combined output
// as an error.
func helmTemplate(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return helmTemplateBare(t, append(append([]string{"--kube-version", kubeVersion}, monitoringAPIs...), args...)...)
}

// helmTemplateBare is helmTemplate with only the arguments given.
func helmTemplateBare(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return helm(t, nil, append([]string{"template", release, chartDir, "--namespace", namespace}, args...)...)
}

// helm runs a helm command with extra environment and returns stdout, or
// the combined output as an error.
func helm(t *testing.T, env []string, full ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(helmBin(t), full...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("helm %s: %w\n%s", strings.Join(full, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// render runs helm template and decodes every document strictly.
func render(t *testing.T, args ...string) *rendered {
	t.Helper()
	out, err := helmTemplate(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, out)
}

// renderBare is render with only the arguments given.
func renderBare(t *testing.T, args ...string) *rendered {
	t.Helper()
	out, err := helmTemplateBare(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, out)
}

func decode(t *testing.T, out string) *rendered {
	t.Helper()
	r, err := decodeAll(out)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// decodeAll splits a multi-document stream and decodes each object into its
// API type with unknown fields rejected.
func decodeAll(stream string) (*rendered, error) {
	r := &rendered{
		Deployments: map[string]*appsv1.Deployment{}, ConfigMaps: map[string]*corev1.ConfigMap{},
		Secrets: map[string]*corev1.Secret{}, Services: map[string]*corev1.Service{},
		ServiceAccounts: map[string]*corev1.ServiceAccount{}, Pods: map[string]*corev1.Pod{},
	}
	for i, doc := range strings.Split(stream, "\n---") {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		if err := r.add([]byte(doc)); err != nil {
			return nil, fmt.Errorf("document %d: %w\n%s", i, err, doc)
		}
	}
	return r, nil
}

func stripComments(doc string) string {
	var b strings.Builder
	for l := range strings.SplitSeq(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

func (r *rendered) add(doc []byte) error {
	var head struct{ APIVersion, Kind string }
	if err := yaml.Unmarshal(doc, &head); err != nil {
		return err
	}
	strict := func(into any) error { return yaml.UnmarshalStrict(doc, into) }
	switch head.APIVersion + "/" + head.Kind {
	case "apps/v1/Deployment":
		var o appsv1.Deployment
		return decodeInto(strict, &o, func() { r.Deployments[o.Name] = &o })
	case "v1/ConfigMap":
		var o corev1.ConfigMap
		return decodeInto(strict, &o, func() { r.ConfigMaps[o.Name] = &o })
	case "v1/Secret":
		var o corev1.Secret
		return decodeInto(strict, &o, func() { r.Secrets[o.Name] = &o })
	case "v1/Service":
		var o corev1.Service
		return decodeInto(strict, &o, func() { r.Services[o.Name] = &o })
	case "v1/ServiceAccount":
		var o corev1.ServiceAccount
		return decodeInto(strict, &o, func() { r.ServiceAccounts[o.Name] = &o })
	case "v1/Pod":
		var o corev1.Pod
		return decodeInto(strict, &o, func() { r.Pods[o.Name] = &o })
	case "networking.k8s.io/v1/NetworkPolicy":
		var o networkingv1.NetworkPolicy
		return decodeInto(strict, &o, func() {
			if o.Annotations["helm.sh/hook"] == "test" {
				r.TestNetworkPolicies = append(r.TestNetworkPolicies, &o)
			} else {
				r.NetworkPolicies = append(r.NetworkPolicies, &o)
			}
		})
	case "policy/v1/PodDisruptionBudget":
		var o policyv1.PodDisruptionBudget
		return decodeInto(strict, &o, func() { r.PDBs = append(r.PDBs, &o) })
	case "v1/PersistentVolumeClaim":
		var o corev1.PersistentVolumeClaim
		return decodeInto(strict, &o, func() { r.PVCs = append(r.PVCs, &o) })
	case "monitoring.coreos.com/v1/ServiceMonitor":
		var o monitoringv1.ServiceMonitor
		return decodeInto(strict, &o, func() { r.ServiceMonitors = append(r.ServiceMonitors, &o) })
	case "monitoring.coreos.com/v1/PrometheusRule":
		var o monitoringv1.PrometheusRule
		return decodeInto(strict, &o, func() { r.PrometheusRules = append(r.PrometheusRules, &o) })
	}
	return fmt.Errorf("unexpected object %s %s", head.APIVersion, head.Kind)
}

func decodeInto(strict func(any) error, o any, keep func()) error {
	if err := strict(o); err != nil {
		return fmt.Errorf("strict decode: %w", err)
	}
	keep()
	return nil
}

// ciValues lists the example values files, each rendered by the tests.
func ciValues(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chartDir, "ci", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no ci values files: %v", err)
	}
	return files
}

// theDeployment returns the chart's single Deployment.
func (r *rendered) theDeployment(t *testing.T) *appsv1.Deployment {
	t.Helper()
	if len(r.Deployments) != 1 {
		t.Fatalf("want 1 Deployment, got %d", len(r.Deployments))
	}
	for _, d := range r.Deployments {
		return d
	}
	return nil
}

func findContainer(cs []corev1.Container, name string) (int, *corev1.Container) {
	for i := range cs {
		if cs[i].Name == name {
			return i, &cs[i]
		}
	}
	return -1, nil
}

func envValue(c *corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

// mountFor returns the volume mounted at the directory holding path.
func mountFor(c *corev1.Container, path string) (corev1.VolumeMount, bool) {
	for _, m := range c.VolumeMounts {
		if strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/") {
			return m, true
		}
	}
	return corev1.VolumeMount{}, false
}

func volume(spec *corev1.PodSpec, name string) *corev1.Volume {
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == name {
			return &spec.Volumes[i]
		}
	}
	return nil
}
