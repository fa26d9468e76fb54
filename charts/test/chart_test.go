package charttest

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/nora-breaker/nora-breaker/certs"
)

const (
	fullname    = "ci-nora-breaker"
	configMap   = fullname + "-config"
	configPath  = "/etc/nora/config.toml"
	caCertPath  = "/etc/nora-breaker/ca/ca.pem"
	caKeyPath   = "/etc/nora-breaker/key/ca-key.pem"
	sidecarName = "nora-breaker"
)

// checkConfig runs `go run . check-config --skip-files` at the repository
// root on the rendered config.toml and returns its output; exit status must
// be 0. The files the configuration names (the CA, the stale directory)
// exist only in the pod: TestRenderedPodStarts runs the full check on them.
func checkConfig(t *testing.T, toml string, env ...string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(f, []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"run", ".", "check-config", "--config", f}
	if env == nil {
		args = append(args, "--skip-files")
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("check-config rejected the rendered config.toml: %v\n%s\n--- config.toml:\n%s", err, out, toml)
	}
	return string(out)
}

// TestCIValues renders every example values file, decodes every object
// strictly and runs the proxy's own validation on the rendered config.
func TestCIValues(t *testing.T) {
	for _, file := range ciValues(t) {
		t.Run(filepath.Base(file), func(t *testing.T) {
			r := render(t, "-f", file)
			cm, ok := r.ConfigMaps[configMap]
			if !ok {
				t.Fatalf("no ConfigMap %s", configMap)
			}
			checkConfig(t, cm.Data["config.toml"])
			d := r.theDeployment(t)
			checkPodHardening(t, &d.Spec.Template.Spec)
			checkConfigWiring(t, d)
			if len(r.Services) != 1 {
				t.Errorf("want 1 Service, got %d", len(r.Services))
			}
		})
	}
}

// checkPodHardening: every container runs as non-root on a read-only root
// filesystem without privilege escalation.
func checkPodHardening(t *testing.T, spec *corev1.PodSpec) {
	t.Helper()
	all := append(slices.Clone(spec.InitContainers), spec.Containers...)
	for _, c := range all {
		sc := c.SecurityContext
		switch {
		case sc == nil:
			t.Errorf("container %s has no securityContext", c.Name)
		case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot:
			t.Errorf("container %s may run as root", c.Name)
		case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
			t.Errorf("container %s has a writable root filesystem", c.Name)
		case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
			t.Errorf("container %s allows privilege escalation", c.Name)
		}
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("pod mounts a service account token it never uses")
	}
}

// checkConfigWiring: every container that reads config.toml finds it at
// NORA_CONFIG_PATH, mounted from the chart's ConfigMap as a directory (a
// subPath mount would never see updates, so the proxy could not reload).
func checkConfigWiring(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	spec := &d.Spec.Template.Spec
	v := volume(spec, "config")
	if v == nil || v.ConfigMap == nil || v.ConfigMap.Name != configMap {
		t.Fatalf("config volume does not point at ConfigMap %s: %+v", configMap, v)
	}
	readers := 0
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		p, ok := envValue(&c, "NORA_CONFIG_PATH")
		if !ok {
			continue
		}
		readers++
		m, ok := mountFor(&c, p)
		if p != configPath || !ok || m.Name != "config" || m.SubPath != "" || !m.ReadOnly {
			t.Errorf("container %s: NORA_CONFIG_PATH=%s not served by a read-only config mount (%+v)", c.Name, p, m)
		}
	}
	if readers == 0 {
		t.Error("no container reads config.toml")
	}
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(d.Spec.Template.Annotations["checksum/config"]) {
		t.Errorf("pod template lacks a checksum/config annotation: %v", d.Spec.Template.Annotations)
	}
}

// TestNoraModeSidecar: the proxy is a native sidecar that starts before
// NORA, NORA sends its traffic through it, and trusts its CA.
func TestNoraModeSidecar(t *testing.T) {
	r := render(t, "-f", filepath.Join(chartDir, "ci", "nora-values.yaml"))
	spec := &r.theDeployment(t).Spec.Template.Spec

	keyIdx, _ := findContainer(spec.InitContainers, "ca-key")
	sideIdx, side := findContainer(spec.InitContainers, sidecarName)
	if side == nil {
		t.Fatalf("no %s init container: %v", sidecarName, spec.InitContainers)
	}
	if side.RestartPolicy == nil || *side.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Error("the sidecar is not a native sidecar (restartPolicy: Always)")
	}
	if side.StartupProbe == nil || side.StartupProbe.HTTPGet == nil || side.StartupProbe.HTTPGet.Path != "/ready" {
		t.Error("the sidecar needs a startupProbe on /ready so NORA waits for it")
	}
	if keyIdx < 0 || keyIdx > sideIdx {
		t.Errorf("the CA key copier (index %d) must run before the sidecar (index %d)", keyIdx, sideIdx)
	}
	if len(spec.Containers) != 1 || spec.Containers[0].Name != "nora" {
		t.Fatalf("want the single main container nora, got %v", spec.Containers)
	}
	nora := &spec.Containers[0]
	if !strings.HasPrefix(nora.Image, "ghcr.io/getnora-io/nora:") {
		t.Errorf("NORA image %q", nora.Image)
	}
	for name, want := range map[string]string{
		"HTTP_PROXY": "http://127.0.0.1:3128", "HTTPS_PROXY": "http://127.0.0.1:3128",
		"NORA_TLS_CA_CERT": caCertPath, "NORA_CONFIG_PATH": configPath,
	} {
		if got, _ := envValue(nora, name); got != want {
			t.Errorf("NORA env %s = %q, want %q", name, got, want)
		}
	}
	noProxy, _ := envValue(nora, "NO_PROXY")
	for _, h := range []string{"localhost", "127.0.0.1", "nora-oidc.example.internal"} {
		if !slices.Contains(strings.Split(noProxy, ","), h) {
			t.Errorf("NO_PROXY %q lacks %s", noProxy, h)
		}
	}
	if m, ok := mountFor(nora, caCertPath); !ok || m.Name != "ca-cert" {
		t.Errorf("NORA_TLS_CA_CERT is not on the ca-cert volume: %+v", m)
	}
	for _, m := range nora.VolumeMounts {
		if m.Name == "ca-key" || m.Name == "ca-secret" {
			t.Errorf("NORA mounts the CA key volume %s", m.Name)
		}
	}
	toml := r.ConfigMaps[configMap].Data["config.toml"]
	for _, line := range []string{`listen = "127.0.0.1:3128"`, "[server]", "port = 4000", `ca_key = "` + caKeyPath + `"`} {
		if !strings.Contains(toml, line+"\n") {
			t.Errorf("config.toml lacks %q:\n%s", line, toml)
		}
	}
}

// TestCAKeyReadableOnlyByProxy follows the key from Secret to the proxy: the
// Secret is mounted 0400 into the copier only, the copier runs as the
// proxy's user and writes the pair into memory volumes, the key into one
// only the proxy mounts, and the proxy's ca_cert and ca_key (and NORA's
// trust) point into those copies, never at the Secret, which a renewal
// changes under a running pod.
func TestCAKeyReadableOnlyByProxy(t *testing.T) {
	for _, mode := range []string{"standalone", "nora"} {
		t.Run(mode, func(t *testing.T) {
			r := render(t, "--set", "mode="+mode)
			spec := &r.theDeployment(t).Spec.Template.Spec
			src := volume(spec, "ca-secret")
			if src == nil || src.Secret == nil || src.Secret.DefaultMode == nil || *src.Secret.DefaultMode != 0o400 {
				t.Fatalf("ca-secret volume must be a Secret with defaultMode 0400: %+v", src)
			}
			for _, name := range []string{"ca-key", "ca-cert"} {
				dst := volume(spec, name)
				if dst == nil || dst.EmptyDir == nil || dst.EmptyDir.Medium != corev1.StorageMediumMemory {
					t.Fatalf("%s volume must be a memory emptyDir: %+v", name, dst)
				}
			}
			_, copier := findContainer(spec.InitContainers, "ca-key")
			all := append(slices.Clone(spec.InitContainers), spec.Containers...)
			_, proxy := findContainer(all, sidecarName)
			if copier == nil || proxy == nil {
				t.Fatal("missing the key copier or the proxy")
			}
			if *copier.SecurityContext.RunAsUser != *proxy.SecurityContext.RunAsUser {
				t.Error("the copier must run as the proxy's user, so the copy belongs to it")
			}
			if args := strings.Join(copier.Args, " "); args != "ca install-key --from /ca-secret/ca-key.pem --to /ca-key/ca-key.pem "+
				"--cert-from /ca-secret/ca.pem --cert-to /ca-cert/ca.pem" {
				t.Errorf("copier args %q do not install the key with nora-breaker ca install-key", args)
			}
			if copier.Image != proxy.Image {
				t.Errorf("copier image %q is not the proxy's image %q", copier.Image, proxy.Image)
			}
			if m, ok := mountFor(proxy, caKeyPath); !ok || m.Name != "ca-key" {
				t.Errorf("proxy ca_key %s is not on the ca-key volume", caKeyPath)
			}
			for _, c := range all {
				if m, ok := mountFor(&c, caCertPath); ok && m.Name != "ca-cert" {
					t.Errorf("container %s reads the CA certificate from volume %s, not the copier's ca-cert", c.Name, m.Name)
				}
			}
			for _, c := range all {
				for _, m := range c.VolumeMounts {
					if m.Name == "ca-secret" && c.Name != "ca-key" {
						t.Errorf("container %s mounts the raw CA Secret", c.Name)
					}
				}
			}
		})
	}
}

// TestGeneratedCA: the generated pair loads in the proxy (with a 0600 key,
// as the copier leaves it) and only the certificate is published.
func TestGeneratedCA(t *testing.T) {
	r := render(t)
	sec, ok := r.Secrets[fullname+"-ca"]
	if !ok || sec.Type != corev1.SecretTypeTLS {
		t.Fatalf("no generated TLS Secret %s-ca", fullname)
	}
	if sec.Annotations["helm.sh/resource-policy"] != "keep" {
		t.Error("the generated CA must survive uninstall (helm.sh/resource-policy: keep)")
	}
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem")
	if err := os.WriteFile(cert, sec.Data["tls.crt"], 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, sec.Data["tls.key"], 0o400); err != nil {
		t.Fatal(err)
	}
	if _, err := certs.Load(cert, key, time.Now); err != nil {
		t.Fatalf("the proxy refuses the generated CA: %v", err)
	}
	pub := r.ConfigMaps[fullname+"-ca-cert"]
	if pub == nil {
		t.Fatal("no CA certificate ConfigMap")
	}
	if strings.TrimSpace(pub.Data["ca.pem"]) != strings.TrimSpace(string(sec.Data["tls.crt"])) {
		t.Error("published ca.pem differs from the Secret's certificate")
	}
	for k, v := range pub.Data {
		if strings.Contains(v, "PRIVATE KEY") {
			t.Errorf("the CA key is published in ConfigMap key %s", k)
		}
	}
}

// TestStandaloneDefaults: what `helm install` without values gives runners.
func TestStandaloneDefaults(t *testing.T) {
	r := render(t)
	toml := r.ConfigMaps[configMap].Data["config.toml"]
	out := checkConfig(t, toml)
	for _, line := range []string{`listen = "0.0.0.0:3128"`, `admin_listen = "0.0.0.0:9128"`, "deny_unlisted = true"} {
		if !strings.Contains(toml, line+"\n") {
			t.Errorf("config.toml lacks %q", line)
		}
	}
	if !strings.Contains(out, "pypi:https://pypi.org/simple") {
		t.Errorf("check-config does not list NORA's default upstreams:\n%s", out)
	}
	d := r.theDeployment(t)
	c := &d.Spec.Template.Spec.Containers[0]
	if c.Name != sidecarName || c.RestartPolicy != nil {
		t.Errorf("standalone container %s must be a plain container", c.Name)
	}
	probes := map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe}
	wantPath := map[string]string{"readiness": "/ready", "liveness": "/health"}
	for kind, p := range probes {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != wantPath[kind] || p.HTTPGet.Port.String() != "metrics" {
			t.Errorf("%s probe must GET %s on the admin port: %+v", kind, wantPath[kind], p)
		}
	}
	ports := map[string]int32{}
	for _, p := range r.Services[fullname].Spec.Ports {
		ports[p.Name] = p.Port
	}
	if ports["proxy"] != 3128 || ports["metrics"] != 9128 {
		t.Errorf("Service ports %v, want proxy 3128 and metrics 9128", ports)
	}
	if len(r.PDBs) != 1 {
		t.Errorf("two replicas by default need a PodDisruptionBudget, got %d", len(r.PDBs))
	}
}

// TestChecksumFollowsConfig: a values change that alters config.toml
// changes the pod template, so pods roll.
func TestChecksumFollowsConfig(t *testing.T) {
	sum := func(args ...string) string {
		return render(t, args...).theDeployment(t).Spec.Template.Annotations["checksum/config"]
	}
	base := sum()
	if again := sum(); again != base {
		t.Fatalf("checksum is not stable: %s vs %s", base, again)
	}
	if changed := sum("--set", "circuitBreaker.failureThreshold=9"); changed == base {
		t.Error("changing failureThreshold left the checksum unchanged")
	}
}

// TestSchemaRejects: values.schema.json stops bad values before rendering.
func TestSchemaRejects(t *testing.T) {
	tests := []struct {
		name string
		set  string
		ok   bool
	}{
		{"negative threshold", "circuitBreaker.failureThreshold=-1", false},
		{"zero threshold", "circuitBreaker.failureThreshold=0", false},
		{"negative reset timeout", "circuitBreaker.resetTimeout=-5", false},
		{"unknown mode", "mode=daemonset", false},
		{"unknown top-level key", "replicas=3", false},
		{"stale policy", "sidecar.stale.authenticated=sometimes", false},
		{"override threshold", `circuitBreaker.overrides.pypi.failureThreshold=-2`, false},
		{"bad upstream url", "upstreams.npm.proxy=registry.npmjs.org", false},
		{"unknown format", "upstreams.cobol.proxy=https://x.example", false},
		{"zero upstream connections per host", "sidecar.maxUpstreamConnsPerHost=0", false},
		{"unknown admin token key", "sidecar.adminToken.secret=x", false},
		{"unknown network policy key", "networkPolicy.prometheus.namespace=monitoring", false},
		{"typo in a NORA key", "upstreams.maven.proxy_timout=60", false},
		{"typo in docker's table", "upstreams.docker.read_timout=60", false},
		{"proxy on docker, which has upstreams", "upstreams.docker.proxy=https://r.example", false},
		{"NORA's own cache key", "upstreams.npm.serve_stale=false", true},
		{"nuget search service", "upstreams.nuget.search_service=https://search.example/query", true},
		{"unknown access mode", "nora.persistence.accessModes={ReadWriteSometimes}", false},
		{"GOMEMLIMIT above the limit", "sidecar.goMemLimitPercent=101", false},
		{"unknown config change", "configChange=restart", false},
		{"unknown test key", "tests.image=busybox", false},
		{"unknown service account key", "serviceAccount.automount=true", false},
		{"source range without a mask", "service.loadBalancerSourceRanges={10.0.0.1}", false},
		{"threshold 1 is fine", "circuitBreaker.failureThreshold=1", true},
		{"nora mode is fine", "mode=nora", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := helmTemplate(t, "--set", tc.set)
			switch {
			case tc.ok && err != nil:
				t.Fatalf("valid values refused: %v", err)
			case !tc.ok && err == nil:
				t.Fatalf("--set %s was accepted", tc.set)
			case !tc.ok && !strings.Contains(err.Error(), "schema"):
				t.Fatalf("refused, but not by the schema: %v", err)
			}
		})
	}
}

// TestObservability: the alerts the issue names, and a dashboard that is
// valid JSON over the proxy's metrics.
func TestObservability(t *testing.T) {
	r := render(t, "-f", filepath.Join(chartDir, "ci", "standalone-values.yaml"))
	if len(r.ServiceMonitors) != 1 || r.ServiceMonitors[0].Spec.Endpoints[0].Port != "metrics" {
		t.Error("want one ServiceMonitor scraping the metrics port")
	}
	if len(r.PrometheusRules) != 1 {
		t.Fatal("want one PrometheusRule")
	}
	alerts := map[string]string{}
	for _, g := range r.PrometheusRules[0].Spec.Groups {
		for _, rule := range g.Rules {
			alerts[rule.Alert] = rule.Expr.String()
			if rule.Alert == "NoraCircuitBreakerOpen" &&
				(rule.For == nil || string(*rule.For) != "5m" || rule.Labels["severity"] != "warning") {
				t.Errorf("NoraCircuitBreakerOpen must fire after 5m with severity warning: %+v", rule)
			}
		}
	}
	want := map[string]string{
		"NoraCircuitBreakerOpen":        "nora_circuit_breaker_state == 1",
		"NoraBreakerServingStale":       "rate(nora_sidecar_stale_served_total[5m])",
		"NoraBreakerConfigReloadFailed": `increase(nora_sidecar_config_reloads_total{result="error"}[10m]) > 0`,
	}
	for name, expr := range want {
		if !strings.Contains(alerts[name], expr) {
			t.Errorf("alert %s expr %q lacks %q", name, alerts[name], expr)
		}
	}
	dash := r.ConfigMaps[fullname+"-dashboard"]
	if dash == nil || dash.Labels["grafana_dashboard"] != "1" {
		t.Fatal("no dashboard ConfigMap labelled for the Grafana sidecar")
	}
	var parsed map[string]any
	body := dash.Data["nora-breaker.json"]
	if err := json.Unmarshal([]byte(body), &parsed); err != nil {
		t.Fatalf("dashboard is not JSON: %v", err)
	}
	for _, m := range []string{"nora_circuit_breaker_state", "nora_circuit_breaker_rejections_total",
		"nora_sidecar_fallback_total", "nora_sidecar_stale_served_total", "nora_upstream_request_duration_seconds_bucket"} {
		if !strings.Contains(body, m) {
			t.Errorf("dashboard does not chart %s", m)
		}
	}
}

// TestKustomizePatch: the documented patch for the official NORA chart is a
// valid Deployment fragment that adds the same native sidecar.
func TestKustomizePatch(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chartDir, "examples", "kustomize", "sidecar-patch.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	if err := yaml.UnmarshalStrict(b, &d); err != nil {
		t.Fatalf("patch is not a valid Deployment: %v", err)
	}
	spec := &d.Spec.Template.Spec
	_, side := findContainer(spec.InitContainers, sidecarName)
	if side == nil || side.RestartPolicy == nil || *side.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Fatal("patch lacks the native sidecar")
	}
	_, nora := findContainer(spec.Containers, "nora")
	if nora == nil {
		t.Fatal("patch does not touch the nora container")
	}
	for _, name := range []string{"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "NORA_TLS_CA_CERT"} {
		if _, ok := envValue(nora, name); !ok {
			t.Errorf("patch does not set %s on NORA", name)
		}
	}
	checkTokenEnv(t, side, "nora-breaker-admin-token", "token")
	if v := volume(spec, "nora-breaker-ca-secret"); v == nil || v.Secret == nil || *v.Secret.DefaultMode != 0o400 {
		t.Error("patch must mount the CA Secret with defaultMode 0400")
	}
	_, copier := findContainer(spec.InitContainers, "nora-breaker-ca-key")
	if copier == nil || !slices.Contains(copier.Args, "--cert-from") {
		t.Error("patch's copier must copy the certificate with the key")
	}
	if v := volume(spec, "nora-breaker-ca-cert"); v == nil || v.EmptyDir == nil {
		t.Error("the CA certificate must come from the copier's snapshot, not the live Secret")
	}
}

// TestKustomizePostRenderer runs post-render.sh with a stand-in kubectl
// that prints the nora.yaml of the kustomization it is given: the rendered
// manifests pass through, and a nora.yaml next to the script (rendered by
// hand, README step 2a) is left as it was.
func TestKustomizePostRenderer(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"post-render.sh", "kustomization.yaml", "sidecar-patch.yaml"} {
		b, err := os.ReadFile(filepath.Join(chartDir, "examples", "kustomize", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mine := "# rendered by hand\n"
	if err := os.WriteFile(filepath.Join(dir, "nora.yaml"), []byte(mine), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	fake := "#!/bin/sh\n[ \"$1\" = kustomize ] && cat \"$2/nora.yaml\"\n"
	if err := os.WriteFile(filepath.Join(bin, "kubectl"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", filepath.Join(dir, "post-render.sh"))
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
	cmd.Stdin = strings.NewReader("kind: Deployment\n")
	out, err := cmd.Output()
	if err != nil || string(out) != "kind: Deployment\n" {
		t.Fatalf("post-render.sh: %v, output %q", err, out)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "nora.yaml")); string(got) != mine {
		t.Errorf("post-render.sh overwrote the nora.yaml next to it: %q", got)
	}
}
