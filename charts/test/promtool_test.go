package charttest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// promtoolBin finds promtool: $PROMTOOL, else on PATH (charts/test.sh
// installs Debian's prometheus package, which ships it).
func promtoolBin(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PROMTOOL"); p != "" {
		return p
	}
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("no promtool (run charts/test.sh, which installs Debian's prometheus, or set PROMTOOL): %v", err)
	}
	return p
}

// promtool runs one promtool command in dir and fails the test on a
// non-zero exit, showing what promtool said.
func promtool(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(promtoolBin(t), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// writeRenderedRules renders the chart's PrometheusRule with extra helm
// args, decodes it strictly, and writes its spec (a Prometheus rule file:
// `groups:`) to dir/rules.yml.
func writeRenderedRules(t *testing.T, dir string, args ...string) {
	t.Helper()
	r := render(t, append([]string{"-f", filepath.Join(chartDir, "ci", "standalone-values.yaml")}, args...)...)
	if len(r.PrometheusRules) != 1 {
		t.Fatalf("want one PrometheusRule, got %d", len(r.PrometheusRules))
	}
	b, err := yaml.Marshal(r.PrometheusRules[0].Spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yml"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestPrometheusRulesWithPromtool checks the rendered rules the way
// Prometheus will load them (promtool check rules) and unit-tests every
// alert against synthetic series (promtool test rules,
// testdata/alerts.test.yml): open for 5 minutes fires and 4 does not, stale
// copies served, a key served only from stale for more than 15 minutes, a
// refused reload.
func TestPrometheusRulesWithPromtool(t *testing.T) {
	dir := t.TempDir()
	writeRenderedRules(t, dir)
	out := promtool(t, dir, "check", "rules", "rules.yml")
	if !strings.Contains(out, "SUCCESS: 4 rules found") {
		t.Errorf("promtool check rules: %s", out)
	}
	tests, err := os.ReadFile(filepath.Join("testdata", "alerts.test.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts.test.yml"), tests, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Log(promtool(t, dir, "test", "rules", "alerts.test.yml"))
}

// TestPrometheusRulesShortOpenFor: the openFor the e2e Prometheus test
// renders with is valid too.
func TestPrometheusRulesShortOpenFor(t *testing.T) {
	dir := t.TempDir()
	writeRenderedRules(t, dir, "--set", "metrics.prometheusRule.openFor=3s")
	if b, _ := os.ReadFile(filepath.Join(dir, "rules.yml")); !strings.Contains(string(b), "for: 3s") {
		t.Fatalf("openFor not applied:\n%s", b)
	}
	promtool(t, dir, "check", "rules", "rules.yml")
}

// TestPrometheusRulesStaleForMinutes: staleForMinutes sets the threshold of
// NoraBreakerServingStaleTooLong, in seconds of the expression.
func TestPrometheusRulesStaleForMinutes(t *testing.T) {
	dir := t.TempDir()
	writeRenderedRules(t, dir, "--set", "metrics.prometheusRule.staleForMinutes=30")
	b, _ := os.ReadFile(filepath.Join(dir, "rules.yml"))
	if !strings.Contains(string(b), "time() - nora_sidecar_stale_serving_since_timestamp_seconds > 1800") {
		t.Fatalf("staleForMinutes not applied:\n%s", b)
	}
	promtool(t, dir, "check", "rules", "rules.yml")
}
