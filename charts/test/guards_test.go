package charttest

import (
	"strings"
	"testing"
)

// TestGuards: value combinations the schema cannot see across, each refused
// by templates/validate.yaml with a message that says what to do, and the
// neighbouring combinations that are fine.
func TestGuards(t *testing.T) {
	nora := []string{"--set", "mode=nora"}
	tests := []struct {
		name string
		args []string
		want string // "" = renders
	}{
		{"equal ports", []string{"--set", "sidecar.adminPort=3128"},
			"sidecar.proxyPort and sidecar.adminPort are both 3128"},
		{"equal ports in nora mode", append(nora, "--set", "sidecar.proxyPort=9128"),
			"sidecar.proxyPort and sidecar.adminPort are both 9128"},
		{"NORA on the admin port", append(nora, "--set", "nora.config.server.port=9128"),
			"nora.config.server.port and sidecar.adminPort are both 9128"},
		{"replicas on one ReadWriteOnce claim", append(nora, "--set", "nora.replicaCount=2"),
			"nora.replicaCount is 2 but nora.persistence is one ReadWriteOnce claim"},
		{"replicas on one ReadWriteOncePod claim", append(nora, "--set", "nora.replicaCount=3", "--set", "nora.persistence.accessModes={ReadWriteOncePod}"),
			"nora.replicaCount is 3 but nora.persistence is one ReadWriteOncePod claim"},
		{"replicas on a ReadWriteMany claim", append(nora, "--set", "nora.replicaCount=2", "--set", "nora.persistence.accessModes={ReadWriteMany}"), ""},
		{"replicas without persistence", append(nora, "--set", "nora.replicaCount=2", "--set", "nora.persistence.enabled=false"), ""},
		{"reload in nora mode", append(nora, "--set", "configChange=reload"), "configChange reload is for mode standalone"},
		{"grace shorter than preStop and drain", []string{"--set", "terminationGracePeriodSeconds=30"},
			"terminationGracePeriodSeconds is 30, but the pod needs sidecar.preStopSleepSeconds (5) plus the proxy's 25 s drain plus 1 s to exit: set it to at least 31"},
		{"grace enough for a longer preStop", []string{"--set", "sidecar.preStopSleepSeconds=10", "--set", "terminationGracePeriodSeconds=36"}, ""},
		{"grace with an own lifecycle", []string{"--set", "terminationGracePeriodSeconds=26", "--set-json", `sidecar.lifecycle={"preStop":{"sleep":{"seconds":1}}}`}, ""},
		{"both PDB bounds", []string{"--set", "pdb.maxUnavailable=1"}, "pdb: set exactly one of minAvailable and maxUnavailable"},
		{"maxUnavailable alone", []string{"--set", "pdb.maxUnavailable=1", "--set", "pdb.minAvailable=null"}, ""},
		{"memory limit GOMEMLIMIT cannot read", []string{"--set", "sidecar.resources.limits.memory=1e9"},
			`sidecar.resources.limits.memory "1e9": cannot derive GOMEMLIMIT from it`},
		{"memory limit GOMEMLIMIT is off for", []string{"--set", "sidecar.resources.limits.memory=1e9", "--set", "sidecar.goMemLimitPercent=0"}, ""},
		{"nora mode before native sidecars", append(nora, "--kube-version", "1.28.9"),
			"mode nora needs Kubernetes 1.29 or later, for native sidecars"},
		{"nora mode on a provider's 1.29", append(nora, "--kube-version", "v1.29.1-gke.1589018"), ""},
		{"standalone on an older cluster", []string{"--kube-version", "1.25.0"}, ""},
		{"older than the chart's kubeVersion", []string{"--kube-version", "1.20.15"}, "chart requires kubeVersion: >=1.21.0-0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := helmTemplate(t, tc.args...)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("rendered, want a refusal naming %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("refused with\n%v\nwant %q", err, tc.want)
			}
		})
	}
}

// TestModeSwitchGuard: an upgrade that changes mode would change the
// Deployment's selector, which Kubernetes refuses half-way through the
// upgrade; the chart looks the Deployment up and stops first, saying how to
// switch. A render against the same mode goes through.
func TestModeSwitchGuard(t *testing.T) {
	deployment := "/apis/apps/v1/namespaces/" + namespace + "/deployments/" + fullname
	for _, tc := range []struct {
		existing, mode string
		want           string
	}{
		{"proxy", "nora", "mode nora: the existing Deployment build/ci-nora-breaker runs mode standalone (component proxy)"},
		{"nora", "standalone", "mode standalone: the existing Deployment build/ci-nora-breaker runs mode nora (component nora)"},
		{"proxy", "standalone", ""},
		{"nora", "nora", ""},
	} {
		t.Run(tc.existing+" to "+tc.mode, func(t *testing.T) {
			c := newFakeCluster(t)
			c.put(deployment, map[string]any{"apiVersion": "apps/v1", "kind": "Deployment",
				"metadata": map[string]any{"name": fullname, "namespace": namespace},
				"spec": map[string]any{"selector": map[string]any{"matchLabels": map[string]string{
					"app.kubernetes.io/name": "nora-breaker", "app.kubernetes.io/instance": release,
					"app.kubernetes.io/component": tc.existing}}}})
			_, err := helm(t, c.env(t), "template", release, chartDir, "--namespace", namespace,
				"--dry-run=server", "--kube-version", kubeVersion, "--set", "mode="+tc.mode)
			if !c.asked(deployment) {
				t.Fatal("the chart never looked the Deployment up")
			}
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want a refusal naming %q", err, tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), "uninstalling the release first"):
				t.Fatalf("the refusal does not say how to switch: %v", err)
			}
		})
	}
}
