package charttest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nora-breaker/nora-breaker/config"
	"github.com/nora-breaker/nora-breaker/proxy"
)

const adminTokenSecret = fullname + "-admin-token"

// prometheusPeer is the NetworkPolicy peer the defaults let onto the admin
// port: pods labelled as Prometheus servers, in any namespace.
func prometheusPeer() networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{
		NamespaceSelector: &metav1.LabelSelector{},
		PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "prometheus"}},
	}
}

// TestAdminLockedDownByDefault: with the default values, in both modes, the
// admin port is reachable only from what the NetworkPolicy allows
// (Prometheus), and the admin API the rendered configuration runs asks for
// the generated token on every route but /metrics, /health and /ready.
func TestAdminLockedDownByDefault(t *testing.T) {
	for _, mode := range []string{"standalone", "nora"} {
		t.Run(mode, func(t *testing.T) {
			r := render(t, "--set", "mode="+mode)
			d := r.theDeployment(t)
			np := theNetworkPolicy(t, r)
			checkSelectsPods(t, np, d.Spec.Template.Labels)
			admin := adminRules(t, np)
			if len(admin) != 1 || !reflect.DeepEqual(admin[0].From, []networkingv1.NetworkPolicyPeer{prometheusPeer()}) {
				t.Fatalf("admin port rules %+v, want one letting in only Prometheus", admin)
			}

			token := generatedToken(t, r)
			spec := &d.Spec.Template.Spec
			_, side := findContainer(append(slices.Clone(spec.InitContainers), spec.Containers...), sidecarName)
			checkTokenEnv(t, side, adminTokenSecret, "token")
			for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
				if c.Name != sidecarName {
					if _, ok := envValue(&c, "NORA_SIDECAR_ADMIN_TOKEN"); ok {
						t.Errorf("container %s gets the admin token", c.Name)
					}
				}
			}
			toml := r.ConfigMaps[configMap].Data["config.toml"]
			if strings.Contains(toml, token) || strings.Contains(toml, "admin_token") {
				t.Error("the admin token is in the ConfigMap")
			}
			checkAdminAPI(t, toml, token)
		})
	}
}

// TestAdminTokenChoices: the token given inline, an existing Secret, or no
// token at all when switched off.
func TestAdminTokenChoices(t *testing.T) {
	t.Run("inline token", func(t *testing.T) {
		r := render(t, "--set", "sidecar.adminToken.token=s3cret-admin-token")
		if got := string(r.Secrets[adminTokenSecret].Data["token"]); got != "s3cret-admin-token" {
			t.Fatalf("Secret token %q, want the one given", got)
		}
		checkTokenEnv(t, &r.theDeployment(t).Spec.Template.Spec.Containers[0], adminTokenSecret, "token")
	})
	t.Run("existing Secret", func(t *testing.T) {
		r := render(t, "--set", "sidecar.adminToken.existingSecret=corp-admin", "--set", "sidecar.adminToken.key=bearer")
		if _, ok := r.Secrets[adminTokenSecret]; ok {
			t.Fatal("the chart renders its own token Secret beside an existing one")
		}
		checkTokenEnv(t, &r.theDeployment(t).Spec.Template.Spec.Containers[0], "corp-admin", "bearer")
	})
	t.Run("switched off", func(t *testing.T) {
		r := render(t, "--set", "sidecar.adminToken.enabled=false")
		if _, ok := r.Secrets[adminTokenSecret]; ok {
			t.Fatal("a token Secret although the token is off")
		}
		if _, ok := envValue(&r.theDeployment(t).Spec.Template.Spec.Containers[0], "NORA_SIDECAR_ADMIN_TOKEN"); ok {
			t.Fatal("NORA_SIDECAR_ADMIN_TOKEN set although the token is off")
		}
	})
}

// TestNetworkPolicyAdminPeers: who may reach the admin port follows the
// values; with nobody named there is no rule for it at all.
func TestNetworkPolicyAdminPeers(t *testing.T) {
	monitoring := networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{
		MatchLabels: map[string]string{"kubernetes.io/metadata.name": "monitoring"}}}
	tests := []struct {
		name string
		args []string
		want []networkingv1.NetworkPolicyPeer // nil: no admin rule
	}{
		{"no scraper", []string{"--set", "networkPolicy.prometheus.enabled=false"}, nil},
		{"Prometheus and more", []string{"--set-json",
			`networkPolicy.metricsFrom=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}]`},
			[]networkingv1.NetworkPolicyPeer{prometheusPeer(), monitoring}},
		{"Prometheus in one namespace", []string{"--set-json",
			`networkPolicy.prometheus.namespaceSelector={"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}`},
			[]networkingv1.NetworkPolicyPeer{{NamespaceSelector: monitoring.NamespaceSelector, PodSelector: prometheusPeer().PodSelector}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			admin := adminRules(t, theNetworkPolicy(t, render(t, tc.args...)))
			switch {
			case tc.want == nil && len(admin) != 0:
				t.Fatalf("admin port rules %+v, want none", admin)
			case tc.want != nil && (len(admin) != 1 || !reflect.DeepEqual(admin[0].From, tc.want)):
				t.Fatalf("admin port rules %+v, want peers %+v", admin, tc.want)
			}
		})
	}
	if r := render(t, "--set", "networkPolicy.enabled=false"); len(r.NetworkPolicies) != 0 {
		t.Fatal("a NetworkPolicy although it is switched off")
	}
}

func theNetworkPolicy(t *testing.T, r *rendered) *networkingv1.NetworkPolicy {
	t.Helper()
	if len(r.NetworkPolicies) != 1 {
		t.Fatalf("want one NetworkPolicy by default, got %d", len(r.NetworkPolicies))
	}
	np := r.NetworkPolicies[0]
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
		t.Errorf("policy types %v, want Ingress only", np.Spec.PolicyTypes)
	}
	return np
}

// checkSelectsPods: the policy's selector matches the pods it protects.
func checkSelectsPods(t *testing.T, np *networkingv1.NetworkPolicy, podLabels map[string]string) {
	t.Helper()
	sel := np.Spec.PodSelector
	if len(sel.MatchLabels) == 0 || len(sel.MatchExpressions) != 0 {
		t.Fatalf("pod selector %+v must name the chart's pods", sel)
	}
	for k, v := range sel.MatchLabels {
		if podLabels[k] != v {
			t.Fatalf("pod selector %v does not select the pods (labels %v)", sel.MatchLabels, podLabels)
		}
	}
}

// adminRules returns the ingress rules that open the admin port, failing on
// a rule that opens every port: that one would open the admin port too.
func adminRules(t *testing.T, np *networkingv1.NetworkPolicy) []networkingv1.NetworkPolicyIngressRule {
	t.Helper()
	var out []networkingv1.NetworkPolicyIngressRule
	for _, rule := range np.Spec.Ingress {
		if len(rule.Ports) == 0 {
			t.Fatalf("an ingress rule opens every port: %+v", rule)
		}
		for _, p := range rule.Ports {
			if p.Port != nil && (p.Port.String() == "metrics" || p.Port.IntValue() == 9128) {
				out = append(out, rule)
				break
			}
		}
	}
	return out
}

// generatedToken returns the chart's generated admin token after checking
// that it looks random enough to stand alone.
func generatedToken(t *testing.T, r *rendered) string {
	t.Helper()
	sec, ok := r.Secrets[adminTokenSecret]
	if !ok || sec.Type != corev1.SecretTypeOpaque {
		t.Fatalf("no generated admin token Secret %s", adminTokenSecret)
	}
	token := string(sec.Data["token"])
	if !regexp.MustCompile(`^[A-Za-z0-9]{32,}$`).MatchString(token) {
		t.Fatalf("generated admin token %q is not a long random string", token)
	}
	return token
}

func checkTokenEnv(t *testing.T, c *corev1.Container, secret, key string) {
	t.Helper()
	if c == nil {
		t.Fatal("no proxy container")
	}
	for _, e := range c.Env {
		if e.Name != "NORA_SIDECAR_ADMIN_TOKEN" {
			continue
		}
		ref := e.ValueFrom
		if e.Value != "" || ref == nil || ref.SecretKeyRef == nil || ref.SecretKeyRef.Name != secret || ref.SecretKeyRef.Key != key {
			t.Fatalf("NORA_SIDECAR_ADMIN_TOKEN %+v, want a reference to Secret %s key %s", e, secret, key)
		}
		return
	}
	t.Fatalf("container %s has no NORA_SIDECAR_ADMIN_TOKEN", c.Name)
}

// checkAdminAPI serves the admin API of a proxy built from the rendered
// config.toml and the token as the pod's environment gives it, and checks
// what needs the token. The CA and stale paths of the pod are emptied, as an
// environment may: they name files that exist only in the pod.
func checkAdminAPI(t *testing.T, toml, token string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(path, []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"NORA_SIDECAR_ADMIN_TOKEN": token,
		"NORA_SIDECAR_CA_CERT": "", "NORA_SIDECAR_CA_KEY": "", "NORA_SIDECAR_STALE_DIR": ""}
	cfg, err := config.Load(config.Options{Flags: config.Flags{ConfigPath: path},
		LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err != nil {
		t.Fatalf("the rendered config with the pod's environment: %v", err)
	}
	p, err := proxy.New(cfg, proxy.Deps{Registry: prometheus.NewRegistry(), Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	srv := httptest.NewUnstartedServer(nil)
	srv.Config.Handler = p.AdminHandler(srv.Listener.Addr())
	srv.Start()
	t.Cleanup(srv.Close)
	call := func(method, path, bearer string) int {
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		method, path string
		open         bool
	}{
		{"GET", "/metrics", true}, {"GET", "/health", true}, {"GET", "/ready", true},
		{"GET", "/breakers", false}, {"GET", "/breakers/history", false}, {"GET", "/", false},
		{"POST", "/breakers/force?key=npm:https://registry.npmjs.org&state=open", false},
	} {
		if got := call(tc.method, tc.path, ""); tc.open != (got < 400) {
			t.Errorf("%s %s without a token: %d", tc.method, tc.path, got)
		}
		if got := call(tc.method, tc.path, "not-the-token"); !tc.open && got != http.StatusUnauthorized {
			t.Errorf("%s %s with a wrong token: %d, want 401", tc.method, tc.path, got)
		}
		if got := call(tc.method, tc.path, token); got >= 400 {
			t.Errorf("%s %s with the token: %d", tc.method, tc.path, got)
		}
	}
}
