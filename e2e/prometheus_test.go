//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// chartDir is the Helm chart, relative to this package's folder (where go
// test runs).
const chartDir = "../charts/nora-breaker"

// promServer is a real Prometheus (Debian's package) started for one test:
// its own data folder, a port it picks itself on loopback, stopped by PID.
type promServer struct {
	url string
	c   *http.Client
}

// startPrometheus writes a configuration that scrapes target every second
// (with the namespace and pod labels a Prometheus Operator would add) and
// evaluates rules.yml in dir every second, then starts Prometheus.
func startPrometheus(t *testing.T, dir, target string) *promServer {
	t.Helper()
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files: [rules.yml]
scrape_configs:
  - job_name: nora-breaker
    static_configs:
      - targets: [%q]
        labels: {namespace: e2e, pod: nora-breaker-0}
`, target)
	writeFile(t, filepath.Join(dir, "prometheus.yml"), cfg)
	p := startProc(t, dir, "prometheus", cleanEnv(), "prometheus", "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "prometheus-data"), "--web.listen-address=127.0.0.1:0")
	addr := p.listening(t, 60*time.Second)
	ps := &promServer{url: "http://" + addr, c: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}}
	waitHTTP(t, ps.url+"/-/ready", 200, 60*time.Second)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("prometheus log tail:\n%s", tail(p.logText(), 4000))
		}
	})
	return ps
}

// promSeries is one series of a query answer: an instant vector has one
// value, a range query many.
type promSeries struct {
	Metric map[string]string `json:"metric"`
	Value  []any             `json:"value"`
	Values [][]any           `json:"values"`
}

// api calls one Prometheus HTTP API endpoint and decodes its data.
func (ps *promServer) api(t *testing.T, path string, q url.Values, into any) {
	t.Helper()
	resp, err := ps.c.Get(ps.url + path + "?" + q.Encode())
	if err != nil {
		t.Fatalf("prometheus %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil || env.Status != "success" {
		t.Fatalf("prometheus %s %v: %d %s %s", path, q, resp.StatusCode, env.Error, tail(string(body), 500))
	}
	if err := json.Unmarshal(env.Data, into); err != nil {
		t.Fatalf("prometheus %s: %v", path, err)
	}
}

// query runs an instant query.
func (ps *promServer) query(t *testing.T, q string) []promSeries {
	t.Helper()
	var d struct{ Result []promSeries }
	ps.api(t, "/api/v1/query", url.Values{"query": {q}}, &d)
	return d.Result
}

// queryRange runs a range query at one-second steps.
func (ps *promServer) queryRange(t *testing.T, q string, from, to time.Time) []promSeries {
	t.Helper()
	var d struct{ Result []promSeries }
	ps.api(t, "/api/v1/query_range", url.Values{"query": {q}, "start": {unix(from)}, "end": {unix(to)}, "step": {"1"}}, &d)
	return d.Result
}

func unix(t time.Time) string { return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64) }

// value is the number of an instant query's only series, or -1 if there is
// none.
func (ps *promServer) value(t *testing.T, q string) float64 {
	t.Helper()
	r := ps.query(t, q)
	if len(r) != 1 || len(r[0].Value) != 2 {
		return -1
	}
	v, _ := strconv.ParseFloat(fmt.Sprint(r[0].Value[1]), 64)
	return v
}

// alertState is the state ("pending", "firing") of the named alert for one
// registry in /api/v1/alerts, or "" when it is not active.
func (ps *promServer) alertState(t *testing.T, name, registry string) string {
	t.Helper()
	var d struct {
		Alerts []struct {
			Labels map[string]string `json:"labels"`
			State  string            `json:"state"`
		} `json:"alerts"`
	}
	ps.api(t, "/api/v1/alerts", nil, &d)
	for _, a := range d.Alerts {
		if a.Labels["alertname"] == name && a.Labels["registry"] == registry {
			return a.State
		}
	}
	return ""
}

// renderRules renders the chart's PrometheusRule with a short openFor and
// writes its spec, a Prometheus rule file, to dir/rules.yml. The spec is
// the rendered document's last key, so it is everything below "spec:",
// indented one level less (charts/test decodes the same object strictly).
// The render is for a cluster that serves PrometheusRule (the chart leaves
// it out elsewhere) and is recent enough for the chart's kubeVersion.
func renderRules(t *testing.T, s suite, dir, openFor string) {
	t.Helper()
	out, err := exec.Command(filepath.Join(s.tools, "helm"), "template", "ci", chartDir,
		"--kube-version", "1.31.0", "--api-versions", "monitoring.coreos.com/v1/PrometheusRule",
		"--set", "metrics.prometheusRule.enabled=true", "--set", "metrics.prometheusRule.openFor="+openFor,
		"--show-only", "templates/prometheusrule.yaml").CombinedOutput()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	_, spec, ok := strings.Cut(string(out), "\nspec:\n")
	if !ok {
		t.Fatalf("no spec in the rendered PrometheusRule:\n%s", out)
	}
	var b strings.Builder
	for _, l := range strings.Split(spec, "\n") {
		b.WriteString(strings.TrimPrefix(l, "  ") + "\n")
	}
	// charts/test (TestPrometheusRulesShortOpenFor) checks this very
	// rendering with promtool; Prometheus refuses to start on a bad file.
	writeFile(t, filepath.Join(dir, "rules.yml"), b.String())
}

// dashboardPanel is one Grafana panel and its queries.
type dashboardPanel struct {
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []dashboardPanel `json:"panels"` // rows nest panels
}

// dashboardQueries lists the dashboard's panels that have queries.
func dashboardQueries(t *testing.T) []dashboardPanel {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir, "dashboards", "nora-breaker.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct{ Panels []dashboardPanel }
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	var out []dashboardPanel
	var walk func([]dashboardPanel)
	walk = func(ps []dashboardPanel) {
		for _, p := range ps {
			if len(p.Targets) > 0 {
				out = append(out, p)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// grafanaVars replaces the dashboard's variables the way Grafana would for
// this Prometheus: the namespace label the scrape adds, and a rate window
// of four scrape intervals.
func grafanaVars(expr string) string {
	return strings.NewReplacer(`$namespace`, "e2e", `$__rate_interval`, "4s").Replace(expr)
}

// flapUpstream is maven A: it serves every path while up and drops each
// connection without an answer while down (a failure for its breaker).
type flapUpstream struct{ down atomic.Bool }

func (u *flapUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if u.down.Load() {
		if c, _, err := w.(http.Hijacker).Hijack(); err == nil {
			c.Close()
		}
		return
	}
	fmt.Fprintf(w, "from A: %s\n", r.URL.Path)
}

// TestPrometheusSeesTheOutage: a real Prometheus scrapes nora-breaker while
// maven A goes down and comes back. In Prometheus itself the breaker's
// gauge goes 0 → 1 → 0, the chart's NoraCircuitBreakerOpen alert (rendered
// with openFor 3s) fires while A is down and is gone after; every Grafana
// panel's query returns a series; and promtool finds /metrics clean.
func TestPrometheusSeesTheOutage(t *testing.T) {
	s := loadSuite(t)
	if _, err := exec.LookPath("prometheus"); err != nil {
		t.Fatalf("prometheus not installed (e2e/run.sh installs Debian's prometheus): %v", err)
	}
	dir := scenarioDir(t, s)
	start := time.Now()
	a := &flapUpstream{}
	frontA := newFront(t, "maven-a", "", a, nil)
	// B has the shared artifacts only: for anything else it says 404, and
	// a stale copy from A beats that (docs/behaviour.md §5.4).
	frontB := newFront(t, "maven-b", "", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.URL.Path, "/shared/") {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(w, "from B: %s\n", r.URL.Path)
	}), nil)
	keyA := "maven:http://maven-a.test:8081/maven2"
	n := startNora(t, s, dir, noraOpts{stale: true,
		resolve: map[string]string{"maven-a.test:8081": frontA.addr, "maven-b.test:8082": frontB.addr},
		formats: breakerTOML(3, 10*time.Second, "maven") + `[maven]
proxies = ["http://maven-a.test:8081/maven2", "http://maven-b.test:8082/maven2"]
proxy_timeout = 2
`})
	renderRules(t, s, dir, "3s")
	ps := startPrometheus(t, dir, strings.TrimPrefix(n.admin, "http://"))

	// Client traffic through the proxy for the whole scenario: one artifact
	// B also has, one only A has.
	pu, _ := url.Parse(n.proxyURL)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}
	ctx, stop := context.WithCancel(context.Background())
	var traffic sync.WaitGroup
	traffic.Add(1)
	go func() {
		defer traffic.Done()
		for i := 0; ctx.Err() == nil; i++ {
			path := []string{"/shared/s/1/s-1.jar", "/only-a/o/1/o-1.jar"}[i%2]
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://maven-a.test:8081/maven2"+path, nil)
			if resp, err := client.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { stop(); traffic.Wait() })

	state := `nora_circuit_breaker_state{registry="` + keyA + `"}`
	waitFor(t, "Prometheus to scrape A closed and some forwarded requests", 60*time.Second, func() bool {
		return ps.value(t, state) == 0 &&
			ps.value(t, `sum(nora_sidecar_requests_total{format="maven",result="forwarded"})`) >= 6
	})
	a.down.Store(true)
	downAt := time.Now()
	waitFor(t, "Prometheus to see A's breaker open", 30*time.Second, func() bool { return ps.value(t, state) == 1 })
	waitFor(t, "NoraCircuitBreakerOpen to fire", 30*time.Second, func() bool {
		return ps.alertState(t, "NoraCircuitBreakerOpen", keyA) == "firing"
	})
	firedAfter := time.Since(downAt)
	if r := n.breaker(t, keyA); r.State != "open" {
		t.Fatalf("alert firing, but the proxy says %s is %s", keyA, r.State)
	}
	a.down.Store(false)
	upAt := time.Now()
	waitFor(t, "Prometheus to see A's breaker closed again", 45*time.Second, func() bool { return ps.value(t, state) == 0 })
	waitFor(t, "NoraCircuitBreakerOpen to resolve", 30*time.Second, func() bool {
		return ps.alertState(t, "NoraCircuitBreakerOpen", keyA) == ""
	})
	resolvedAfter := time.Since(upAt)
	stop()
	traffic.Wait()
	// Let one more scrape take the last counts in, and only then end the
	// range: a range query samples at whole steps from start, so its last
	// step can fall up to a second before end; ending it a scrape after the
	// 0 was stored makes sure a step sees that 0.
	lastScrape := ps.value(t, `timestamp(up{job="nora-breaker"})`)
	waitFor(t, "a scrape after the traffic stopped", 10*time.Second, func() bool {
		return ps.value(t, `timestamp(up{job="nora-breaker"})`) > lastScrape
	})
	end := time.Now()

	// The gauge, as Prometheus stored it: 0, then 1, then 0 (a half-open
	// probe, 2, may show between).
	got := ps.queryRange(t, state, start, end)
	if len(got) != 1 {
		t.Fatalf("range query of %s: %d series", state, len(got))
	}
	var seq []string
	for _, v := range got[0].Values {
		if x := fmt.Sprint(v[1]); x != "2" && (len(seq) == 0 || seq[len(seq)-1] != x) {
			seq = append(seq, x)
		}
	}
	if strings.Join(seq, " ") != "0 1 0" {
		t.Errorf("%s in Prometheus went %v, want 0 1 0", state, seq)
	}

	// Every Grafana panel's query, run against this Prometheus over the
	// scenario, must return at least one series.
	var table strings.Builder
	for _, p := range dashboardQueries(t) {
		for _, tg := range p.Targets {
			q := grafanaVars(tg.Expr)
			res := ps.queryRange(t, q, start, end)
			points := 0
			for _, r := range res {
				points += len(r.Values)
			}
			fmt.Fprintf(&table, "  %-28s %2d series %4d points  %s\n", p.Title, len(res), points, q)
			if len(res) == 0 || points == 0 {
				t.Errorf("panel %q: %s returned nothing", p.Title, q)
			}
		}
	}
	t.Logf("Grafana panels against Prometheus:\n%s", table.String())

	// promtool's lint of what the proxy exposes.
	resp, err := n.c.Get(n.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	check := exec.Command("promtool", "check", "metrics")
	check.Stdin = bytes.NewReader(body)
	if out, err := check.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
	for _, want := range []string{"nora_sidecar_stale_served_total", "nora_sidecar_fallback_total", "nora_circuit_breaker_rejections_total"} {
		if ps.value(t, "sum("+want+")") <= 0 {
			t.Errorf("%s stayed 0: the scenario did not exercise it", want)
		}
	}
	summary("prometheus "+ps.url, "maven A drops connections, then comes back", fmt.Sprintf(
		"state 0→1→0 in Prometheus; NoraCircuitBreakerOpen fired %.1fs after the outage began, resolved %.1fs after it ended",
		firedAfter.Seconds(), resolvedAfter.Seconds()), time.Since(start), frontA.seen()+" "+frontB.seen())
}
