package charttest

import (
	"strings"
	"testing"
)

// installNotes runs `helm install --dry-run=server` against a fake cluster
// (NOTES.txt is rendered only by install and upgrade) and returns the notes.
func installNotes(t *testing.T, args ...string) string {
	t.Helper()
	c := newFakeCluster(t)
	full := append([]string{"install", release, chartDir, "--namespace", namespace, "--dry-run=server",
		"--disable-openapi-validation"}, args...)
	out, err := helm(t, c.env(t), full...)
	if err != nil {
		t.Fatal(err)
	}
	_, notes, ok := strings.Cut(out, "\nNOTES:\n")
	if !ok {
		t.Fatalf("no NOTES in the install output:\n%s", out)
	}
	return notes
}

// TestNotesCommands: every command NOTES prints can be pasted as it is. A
// port-forward never returns, so nothing may follow it on its line; the
// status commands name the admin port the values chose; the proxy
// variables come in both spellings.
func TestNotesCommands(t *testing.T) {
	for _, mode := range []string{"standalone", "nora"} {
		t.Run(mode, func(t *testing.T) {
			notes := installNotes(t, "--set", "mode="+mode, "--set", "sidecar.adminPort=9200")
			var forwards, statuses int
			for _, line := range strings.Split(notes, "\n") {
				if strings.Contains(line, "port-forward") {
					forwards++
					if !strings.HasSuffix(strings.TrimSpace(line), "port-forward svc/"+fullname+" 9200") {
						t.Errorf("port-forward line %q must end at the forward (it never returns)", line)
					}
				}
				if strings.Contains(line, "nora-breaker status") {
					statuses++
					if !strings.HasSuffix(strings.TrimSpace(line), "status --admin http://127.0.0.1:9200") {
						t.Errorf("status line %q does not name the admin port 9200", line)
					}
				}
			}
			if forwards != 1 || statuses != 2 {
				t.Errorf("%d port-forward and %d status commands, want 1 and 2:\n%s", forwards, statuses, notes)
			}
			if mode == "standalone" {
				for _, v := range []string{"HTTP_PROXY=", "http_proxy=", "HTTPS_PROXY=", "https_proxy=", "NO_PROXY=", "no_proxy="} {
					if !strings.Contains(notes, v) {
						t.Errorf("NOTES lack %s:\n%s", v, notes)
					}
				}
			}
			if !strings.Contains(notes, "helm test -n "+namespace+" "+release) {
				t.Errorf("NOTES do not mention helm test:\n%s", notes)
			}
		})
	}
}

// TestNotesWarnAboutMissingCRDs: a ServiceMonitor or PrometheusRule asked
// for on a cluster without the Prometheus Operator's kinds is left out (it
// could not be applied), and NOTES says so instead of staying silent.
func TestNotesWarnAboutMissingCRDs(t *testing.T) {
	notes := installNotes(t, "--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.prometheusRule.enabled=true")
	for _, want := range []string{
		"WARNING: metrics.serviceMonitor.enabled is true, but the cluster serves no monitoring.coreos.com/v1 ServiceMonitor",
		"WARNING: metrics.prometheusRule.enabled is true, but the cluster serves no monitoring.coreos.com/v1 PrometheusRule",
	} {
		if !strings.Contains(notes, want) {
			t.Errorf("NOTES lack %q:\n%s", want, notes)
		}
	}
	if notes := installNotes(t); strings.Contains(notes, "WARNING") {
		t.Errorf("a warning without monitoring switched on:\n%s", notes)
	}
}

// TestMonitoringNeedsItsKinds: the ServiceMonitor and PrometheusRule are
// rendered only where the cluster serves their kinds.
func TestMonitoringNeedsItsKinds(t *testing.T) {
	on := []string{"--kube-version", kubeVersion, "--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.prometheusRule.enabled=true"}
	if r := renderBare(t, on...); len(r.ServiceMonitors) != 0 || len(r.PrometheusRules) != 0 {
		t.Errorf("rendered %d ServiceMonitors and %d PrometheusRules for a cluster without their CRDs",
			len(r.ServiceMonitors), len(r.PrometheusRules))
	}
	if r := renderBare(t, append(on, monitoringAPIs...)...); len(r.ServiceMonitors) != 1 || len(r.PrometheusRules) != 1 {
		t.Errorf("rendered %d ServiceMonitors and %d PrometheusRules where the cluster serves them, want 1 and 1",
			len(r.ServiceMonitors), len(r.PrometheusRules))
	}
}
