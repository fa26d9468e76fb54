package charttest

import (
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// parentValues route everything through a corporate proxy whose password
// lives in a Secret, with hosts reached directly and an npm registry of
// the company's own dialled directly.
var parentValues = []string{
	"--set", "sidecar.parentProxy.url=http://build-bot@proxy.corp.example:3128",
	"--set", "sidecar.parentProxy.existingSecret=corp-proxy",
	"--set", "sidecar.parentProxy.passwordKey=proxy-password",
	"--set", "sidecar.parentProxy.noProxy={.corp.example,10.0.0.0/8}",
	"--set-json", `sidecar.parentProxy.perUpstream={"npm":"direct"}`,
	"--set", "upstreams.npm.proxy=https://npm.corp.example",
}

// TestParentProxyInBothModes: in both modes the parent's URL (with its
// user, never a password), parent_no_proxy and [sidecar.parents] reach
// config.toml, which the proxy accepts, and the password reaches the proxy
// container alone, from the Secret.
func TestParentProxyInBothModes(t *testing.T) {
	for _, mode := range []string{"standalone", "nora"} {
		t.Run(mode, func(t *testing.T) {
			args := append([]string{"-f", filepath.Join(chartDir, "ci", mode+"-values.yaml")}, parentValues...)
			r := render(t, args...)
			toml := configOf(r)
			for _, line := range []string{`parent_proxy = "http://build-bot@proxy.corp.example:3128"`,
				`parent_no_proxy = [".corp.example", "10.0.0.0/8"]`, "[sidecar.parents]", `"npm" = "direct"`} {
				if !strings.Contains(toml+"\n", line+"\n") {
					t.Errorf("config.toml lacks %q:\n%s", line, toml)
				}
			}
			out := checkConfig(t, toml)
			if !strings.Contains(out, "parent proxy: http://build-bot@proxy.corp.example:3128") ||
				!strings.Contains(out, "parent:http://proxy.corp.example:3128") {
				t.Errorf("check-config does not show the parent:\n%s", out)
			}
			spec := &r.theDeployment(t).Spec.Template.Spec
			_, side := findContainer(append(spec.InitContainers, spec.Containers...), sidecarName)
			checkSecretEnv(t, side, "NORA_SIDECAR_PARENT_PROXY_PASSWORD", "corp-proxy", "proxy-password")
			for _, c := range append(spec.InitContainers, spec.Containers...) {
				if _, ok := envValue(&c, "NORA_SIDECAR_PARENT_PROXY_PASSWORD"); ok && c.Name != sidecarName {
					t.Errorf("container %s is given the parent's password", c.Name)
				}
			}
		})
	}
}

// checkSecretEnv: container c has env name from Secret secret, key key.
func checkSecretEnv(t *testing.T, c *corev1.Container, name, secret, key string) {
	t.Helper()
	if c == nil {
		t.Fatal("no proxy container")
	}
	for _, e := range c.Env {
		if e.Name != name {
			continue
		}
		ref := e.ValueFrom
		if e.Value != "" || ref == nil || ref.SecretKeyRef == nil || ref.SecretKeyRef.Name != secret || ref.SecretKeyRef.Key != key {
			t.Fatalf("%s %+v, want a reference to Secret %s key %s", name, e, secret, key)
		}
		return
	}
	t.Fatalf("container %s has no %s", c.Name, name)
}

// TestParentProxyRefusals: a password in the URL (it would land in the
// ConfigMap), a per-upstream value that is neither a URL nor direct, and a
// no-proxy entry that is a URL are refused by the schema; a Secret without
// a parent, or for a parent URL naming no user, by the chart's guards.
func TestParentProxyRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"password in the URL", []string{"--set", "sidecar.parentProxy.url=http://bot:hunter2@proxy.corp:3128"}, "schema"},
		{"a path in the URL", []string{"--set", "sidecar.parentProxy.url=http://proxy.corp:3128/x"}, "schema"},
		{"per-upstream value", []string{"--set", "sidecar.parentProxy.perUpstream.npm=sometimes"}, "schema"},
		{"no-proxy URL", []string{"--set", "sidecar.parentProxy.noProxy={http://corp.example}"}, "schema"},
		{"unknown key", []string{"--set", "sidecar.parentProxy.user=bot"}, "schema"},
		{"secret without a parent", []string{"--set", "sidecar.parentProxy.existingSecret=corp-proxy"},
			"sidecar.parentProxy.existingSecret is set but sidecar.parentProxy.url is not"},
		{"secret for a URL without a user", []string{"--set", "sidecar.parentProxy.existingSecret=corp-proxy",
			"--set", "sidecar.parentProxy.url=http://proxy.corp:3128"}, "names no user"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := helmTemplate(t, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want a refusal naming %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "hunter2") && tc.want != "schema" {
				t.Fatal("the refusal shows the password")
			}
		})
	}
	for _, ok := range [][]string{
		{"--set", "sidecar.parentProxy.url=https://[fd00::1]:8443"},
		{"--set", "sidecar.parentProxy.url=http://proxy.corp:3128", "--set", "sidecar.parentProxy.noProxy={registry.corp:5000,fd00::/8}"},
	} {
		if _, err := helmTemplate(t, ok...); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
}
