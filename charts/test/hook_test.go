package charttest

import (
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"

	"github.com/nora-breaker/nora-breaker/config"
	"github.com/nora-breaker/nora-breaker/proxy"
)

// testPod returns the release's helm test pod after checking it is one:
// a test hook, hardened like the release's pods, and matching neither the
// Deployment's selector nor the Service's, so it never receives traffic.
func testPod(t *testing.T, r *rendered) *corev1.Pod {
	t.Helper()
	pod, ok := r.Pods[fullname+"-test"]
	if !ok || len(r.Pods) != 1 {
		t.Fatalf("want the one test pod %s-test, got %d pods", fullname, len(r.Pods))
	}
	if pod.Annotations["helm.sh/hook"] != "test" || pod.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("pod %s is not a helm test hook: %v, restartPolicy %s", pod.Name, pod.Annotations, pod.Spec.RestartPolicy)
	}
	checkPodHardening(t, &pod.Spec)
	if selects(r.theDeployment(t).Spec.Selector.MatchLabels, pod.Labels) || selects(r.Services[fullname].Spec.Selector, pod.Labels) {
		t.Errorf("the test pod's labels %v match the release's pods", pod.Labels)
	}
	return pod
}

func selects(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// checkTestPolicy: the hook's NetworkPolicy lets exactly the test pod onto
// the ports it probes of the release's pods.
func checkTestPolicy(t *testing.T, r *rendered, pod *corev1.Pod, clientPort string) {
	t.Helper()
	if len(r.TestNetworkPolicies) != 1 {
		t.Fatalf("want one test NetworkPolicy, got %d", len(r.TestNetworkPolicies))
	}
	np := r.TestNetworkPolicies[0]
	checkSelectsPods(t, np, r.theDeployment(t).Spec.Template.Labels)
	if len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].From) != 1 {
		t.Fatalf("test policy ingress %+v, want one rule from one peer", np.Spec.Ingress)
	}
	rule := np.Spec.Ingress[0]
	peer := rule.From[0]
	if peer.NamespaceSelector != nil || peer.PodSelector == nil || !selects(peer.PodSelector.MatchLabels, pod.Labels) {
		t.Errorf("test policy peer %+v does not pick the test pod (labels %v) in the release's namespace", peer, pod.Labels)
	}
	var ports []string
	for _, p := range rule.Ports {
		ports = append(ports, p.Port.String())
	}
	if !slices.Equal(ports, []string{clientPort, "metrics"}) {
		t.Errorf("test policy opens %v, want %s and metrics", ports, clientPort)
	}
	if r.TestNetworkPolicies[0].Annotations["helm.sh/hook-delete-policy"] == "" {
		t.Error("the test policy is never deleted")
	}
}

// TestHelmTestHookProbesTheProxy runs the standalone test pod's own command
// line against a proxy built from the rendered config.toml, with the
// Service addresses replaced by loopback listeners: the probe passes
// against the real proxy, so `helm test` checks what it claims to.
func TestHelmTestHookProbesTheProxy(t *testing.T) {
	r := render(t)
	pod := testPod(t, r)
	checkTestPolicy(t, r, pod, "proxy")
	c := pod.Spec.Containers[0]
	if c.Image != r.theDeployment(t).Spec.Template.Spec.Containers[0].Image {
		t.Errorf("test image %s is not the proxy's", c.Image)
	}
	svc := "http://" + fullname + "." + namespace + ".svc:"
	want := []string{"probe", "--ready", svc + "9128/ready", "--proxy", svc + "3128"}
	if !slices.Equal(c.Args, want) {
		t.Fatalf("test args %q, want %q", c.Args, want)
	}

	dir := t.TempDir()
	path := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(path, []byte(r.ConfigMaps[configMap].Data["config.toml"]), 0o644); err != nil {
		t.Fatal(err)
	}
	// The CA and the stale directory exist only in the pod.
	env := map[string]string{"NORA_SIDECAR_CA_CERT": "", "NORA_SIDECAR_CA_KEY": "", "NORA_SIDECAR_STALE_DIR": ""}
	cfg, err := config.Load(config.Options{Flags: config.Flags{ConfigPath: path},
		LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err != nil {
		t.Fatal(err)
	}
	p, err := proxy.New(cfg, proxy.Deps{Registry: prometheus.NewRegistry(), Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	admin := httptest.NewUnstartedServer(nil)
	admin.Config.Handler = p.AdminHandler(admin.Listener.Addr())
	admin.Start()
	t.Cleanup(admin.Close)
	proxySrv := httptest.NewServer(p.Handler())
	t.Cleanup(proxySrv.Close)

	args := strings.NewReplacer(svc+"9128", admin.URL, svc+"3128", proxySrv.URL).Replace(strings.Join(c.Args, " "))
	cmd := exec.Command("go", append([]string{"run", "."}, append(strings.Fields(args), "--timeout", "20s")...)...)
	cmd.Dir = repoRoot
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the test pod's probe failed against the rendered proxy: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "answered a proxy request itself") {
		t.Errorf("probe output:\n%s", out)
	}
}

// TestHelmTestHookInNoraMode: the sidecar listens on loopback only, so the
// test asks the sidecar's and NORA's /ready through the Service.
func TestHelmTestHookInNoraMode(t *testing.T) {
	r := render(t, "--set", "mode=nora")
	pod := testPod(t, r)
	checkTestPolicy(t, r, pod, "http")
	svc := "http://" + fullname + "." + namespace + ".svc:"
	want := []string{"probe", "--ready", svc + "9128/ready", "--ready", svc + "4000/ready"}
	if got := pod.Spec.Containers[0].Args; !slices.Equal(got, want) {
		t.Fatalf("test args %q, want %q", got, want)
	}
	for _, name := range []string{"http", "metrics"} {
		if !slices.Contains(portNames(r.Services[fullname]), name) {
			t.Errorf("the Service has no %s port for the test to reach", name)
		}
	}
}

// TestHelmTestHookSwitches: tests.enabled=false renders no hook; without a
// NetworkPolicy there is nothing to open for the test.
func TestHelmTestHookSwitches(t *testing.T) {
	if r := render(t, "--set", "tests.enabled=false"); len(r.Pods) != 0 || len(r.TestNetworkPolicies) != 0 {
		t.Errorf("tests off: %d pods, %d test policies", len(r.Pods), len(r.TestNetworkPolicies))
	}
	r := render(t, "--set", "networkPolicy.enabled=false")
	if len(r.Pods) != 1 || len(r.TestNetworkPolicies) != 0 {
		t.Errorf("no NetworkPolicy: %d pods, %d test policies; want 1 and 0", len(r.Pods), len(r.TestNetworkPolicies))
	}
}
