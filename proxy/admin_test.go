package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/cli"
	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// ixTwoMaven is a config with two maven upstreams (a, then b) and an npm one.
func ixTwoMaven(a, b, extra string) string {
	return fmt.Sprintf(`
[circuit_breaker]
enabled = true
failure_threshold = 3
reset_timeout = 10
[circuit_breaker.overrides."maven:%s/m2"]
failure_threshold = 7
[registries]
enable = ["maven", "npm"]
[maven]
proxies = ["%s/m2", "%s/m2"]
proxy_timeout = 1
[npm]
proxy = "%s/npm"
%s`, b, a, b, a, extra)
}

func ixAdmin(t *testing.T, tp *testProxy, method, path, token string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, tp.AdminURL+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestAdminMetrics(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	tp, logs := ixStartProxy(t, ixTwoMaven(up.URL, "http://"+closedPort(t), ""))
	npm := "npm:" + up.URL + "/npm"
	_, start := ixAdmin(t, tp, "GET", "/metrics", "")
	for _, key := range []string{"maven:" + up.URL + "/m2", npm} {
		if want := fmt.Sprintf("nora_circuit_breaker_state{registry=%q} 0", key); !strings.Contains(start, want) {
			t.Errorf("/metrics at start lacks %s", want)
		}
	}
	// Traffic touches every labelled series: a forward, a rejection, a transition.
	c := proxyClient(t, tp, nil)
	request(t, c, "GET", up.URL+"/m2/a.jar", nil)
	ixAdmin(t, tp, "POST", "/breakers/force?key="+npm+"&state=open", "")
	request(t, c, "POST", up.URL+"/npm/x", nil)
	// Requests are counted when their answer is done, just after the client
	// has it, and just after their log line (emit): wait for the counts
	// themselves, not for the lines.
	logs.waitFor(t, `"result":"forwarded"`)
	logs.waitFor(t, `"result":"synthesized_503"`)
	// Poll, not PollUntil: the checks below name what is missing.
	var text string
	testkit.Poll(10*time.Second, func() bool {
		_, text = ixAdmin(t, tp, "GET", "/metrics", "")
		return strings.Contains(text, `nora_sidecar_requests_total{format="maven",result="forwarded"} 1`) &&
			strings.Contains(text, `nora_sidecar_requests_total{format="npm",result="synthesized_503"} 1`)
	})
	for _, want := range []string{
		`nora_circuit_breaker_state{registry="` + npm + `"} 1`,
		`nora_circuit_breaker_rejections_total{registry="` + npm + `"} 1`,
		`nora_circuit_breaker_transitions_total{from="closed",registry="` + npm + `",to="open"} 1`,
		`nora_upstream_request_duration_seconds_bucket{registry="maven:` + up.URL + `/m2",status="2xx"`,
		`nora_sidecar_requests_total{format="maven",result="forwarded"} 1`,
		`nora_sidecar_requests_total{format="npm",result="synthesized_503"} 1`,
		`nora_sidecar_config_reloads_total{result="error"} 0`,
		"nora_sidecar_mitm_leaves_generated_total 0",
		"go_goroutines", "process_open_fds",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// Every family the proxy registered and has a sample for is served.
	fams, err := tp.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if !strings.Contains(text, "# TYPE "+f.GetName()+" ") {
			t.Errorf("/metrics lacks family %s", f.GetName())
		}
	}
}

type ixHealth struct {
	Status         string  `json:"status"`
	Version        string  `json:"version"`
	Uptime         float64 `json:"uptime_seconds"`
	CircuitBreaker string  `json:"circuit_breaker"`
	Upstreams      map[string]struct {
		Status       string   `json:"status"`
		FailureCount int      `json:"failure_count"`
		LastFailure  *float64 `json:"last_failure_seconds_ago"`
		Breakers     map[string]struct {
			Status       string   `json:"status"`
			FailureCount int      `json:"failure_count"`
			LastFailure  *float64 `json:"last_failure_seconds_ago"`
			RetryAfter   int      `json:"retry_after_seconds"`
		} `json:"breakers"`
	} `json:"upstreams"`
}

func TestAdminHealthAndReady(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {})
	dead := "http://" + closedPort(t)
	tp := newTestProxy(t, ixTwoMaven(up.URL, dead, ""), nil)
	health := func() ixHealth {
		resp, body := ixAdmin(t, tp, "GET", "/health", "")
		var h ixHealth
		if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &h) != nil {
			t.Fatalf("/health: %d %s", resp.StatusCode, body)
		}
		return h
	}
	h := health()
	if h.Status != "healthy" || h.Version != "test" || h.CircuitBreaker != "enabled" ||
		h.Upstreams["maven"].Status != "closed" || len(h.Upstreams["maven"].Breakers) != 2 {
		t.Fatalf("fresh /health: %+v", h)
	}
	// The dead second upstream fails three times (through fallback from a
	// direct request to it) and opens; the first stays closed.
	c := proxyClient(t, tp, nil)
	for i := 0; i < 7; i++ {
		request(t, c, "GET", dead+"/m2/a.pom", nil)
	}
	tp.Clock.Advance(4 * time.Second)
	h = health()
	m := h.Upstreams["maven"]
	b := m.Breakers["maven:"+dead+"/m2"]
	if h.Status != "degraded" || m.Status != "open" || b.Status != "open" || b.FailureCount != 7 ||
		b.LastFailure == nil || *b.LastFailure != 4 || b.RetryAfter != 6 || m.Breakers["maven:"+up.URL+"/m2"].Status != "closed" {
		t.Fatalf("degraded /health: %+v", h)
	}
	if h.Uptime != 4 {
		t.Fatalf("uptime %v, want 4 (fake clock)", h.Uptime)
	}
	if resp, _ := ixAdmin(t, tp, "GET", "/ready", ""); resp.StatusCode != 200 {
		t.Fatalf("/ready: %d", resp.StatusCode)
	}
	tp.SetShuttingDown()
	if resp, _ := ixAdmin(t, tp, "GET", "/ready", ""); resp.StatusCode != 503 {
		t.Fatalf("/ready while shutting down: %d", resp.StatusCode)
	}
}

func TestAdminBreakersAndForce(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	tp := newTestProxy(t, ixTwoMaven(up.URL, "http://"+closedPort(t), "[sidecar]\nadmin_token = \"s3cret-admin\"\n"), nil)
	key := "maven:" + up.URL + "/m2"
	_, body := ixAdmin(t, tp, "GET", "/breakers", "s3cret-admin")
	var views []map[string]any
	if err := json.Unmarshal([]byte(body), &views); err != nil || len(views) != 3 {
		t.Fatalf("/breakers: %v %s", err, body)
	}
	for _, f := range []string{"key", "format", "state", "failure_count", "threshold", "threshold_source",
		"reset_timeout_seconds", "reset_timeout_source", "last_failure_seconds_ago", "retry_after_seconds",
		"rejections", "forced", "host", "upstream", "throttled", "throttled_seconds"} {
		if _, ok := views[0][f]; !ok {
			t.Errorf("/breakers entry lacks %q: %v", f, views[0])
		}
	}
	if views[0]["host"] != strings.TrimPrefix(up.URL, "http://") || views[0]["upstream"] != key {
		t.Errorf("host/upstream of %s: %v", key, views[0])
	}
	if views[1]["threshold"] != float64(7) || !strings.Contains(fmt.Sprint(views[1]["threshold_source"]), "maven:") {
		t.Errorf("override not shown: %v", views[1])
	}

	force := func(q, token string) (int, string) {
		resp, body := ixAdmin(t, tp, "POST", "/breakers/force?"+q, token)
		return resp.StatusCode, body
	}
	if code, _ := force("key="+key+"&state=open", ""); code != 401 {
		t.Fatalf("force without token: %d", code)
	}
	if code, _ := force("key="+key+"&state=open", "wrong"); code != 401 {
		t.Fatalf("force with a wrong token: %d", code)
	}
	if code, body := force("key=maven:nope&state=open", "s3cret-admin"); code != 404 || !strings.Contains(body, `"error"`) {
		t.Fatalf("unknown key: %d %s", code, body)
	}
	if code, _ := force("key="+key+"&state=sideways", "s3cret-admin"); code != 400 {
		t.Fatalf("bad state: %d", code)
	}
	if code, body := force("key="+key+"&state=open", "s3cret-admin"); code != 200 || !strings.Contains(body, `"forced": "open"`) {
		t.Fatalf("force open: %d %s", code, body)
	}
	c := proxyClient(t, tp, nil)
	resp, _ := request(t, c, "POST", up.URL+"/m2/x", nil)
	ixWant503(t, resp, key, "open", "10")
	if up.hits.Load() != 0 {
		t.Fatal("forced-open breaker let a request through")
	}

	var out, errOut bytes.Buffer
	if rc := cli.Status(context.Background(), cli.StatusOptions{Admin: tp.AdminURL, Token: "s3cret-admin"}, &out, &errOut); rc != 0 {
		t.Fatalf("cli.Status = %d: %s", rc, errOut.String())
	}
	for _, want := range []string{"KEY", "FORCED", key, "npm:" + up.URL + "/npm", "open", "LAST TRANSITIONS", "forced"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status table lacks %q:\n%s", want, out.String())
		}
	}

	for _, state := range []string{"closed", "auto"} {
		if code, _ := force("key="+key+"&state="+state, "s3cret-admin"); code != 200 {
			t.Fatalf("force %s: %d", state, code)
		}
		if resp, _ := request(t, c, "GET", up.URL+"/m2/x", nil); resp.StatusCode != 200 {
			t.Fatalf("after force %s: %d", state, resp.StatusCode)
		}
	}
	if !strings.Contains(tp.Logs.String(), "breaker forced") || strings.Contains(tp.Logs.String(), "s3cret-admin") {
		t.Fatal("force not logged, or the admin token was")
	}
}

// TestStatusCommandShowsEveryColumn goes from the real admin handler through
// the status command's decoding to its tables, and checks every column of
// every row: a field the proxy fills but the command drops (or the reverse)
// shows up as a wrong cell.
func TestStatusCommandShowsEveryColumn(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/npm/") {
			w.Header().Set("Retry-After", "120")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		io.WriteString(w, "ok")
	})
	dead := "http://" + closedPort(t)
	tp := newTestProxy(t, ixTwoMaven(up.URL, dead, ""), nil)
	keyA, keyB, keyN := "maven:"+up.URL+"/m2", "maven:"+dead+"/m2", "npm:"+up.URL+"/npm"
	hostA, hostB := strings.TrimPrefix(up.URL, "http://"), strings.TrimPrefix(dead, "http://")
	c := proxyClient(t, tp, nil)
	// b (threshold 7) opens on its seventh failure; two more are refused.
	for range 9 {
		request(t, c, "GET", dead+"/m2/a.pom", nil)
	}
	request(t, c, "GET", up.URL+"/npm/left-pad", nil) // npm is throttled for 120 s
	tp.Clock.Advance(4 * time.Second)
	if resp, body := ixAdmin(t, tp, "POST", "/breakers/force?key="+keyA+"&state=open", ""); resp.StatusCode != 200 {
		t.Fatalf("force: %d %s", resp.StatusCode, body)
	}

	var out, errOut bytes.Buffer
	if rc := cli.Status(context.Background(), cli.StatusOptions{Admin: tp.AdminURL}, &out, &errOut); rc != 0 {
		t.Fatalf("cli.Status = %d: %s", rc, errOut.String())
	}
	tables := statusTables(out.String())
	if len(tables) != 2 {
		t.Fatalf("want the breakers and the transitions tables, got %d:\n%s", len(tables), out.String())
	}
	wantTables := [][][]string{{
		{"FORMAT", "KEY", "HOST", "STATE", "FAILURES", "RESET", "LAST FAILURE", "RETRY AFTER", "REJECTIONS", "THROTTLED", "FORCED"},
		{"maven", keyA, hostA, "open", "0/3", "10s", "-", "10s", "0", "-", "open"},
		{"maven", keyB, hostB, "open", "7/7", "10s", "4s ago", "6s", "2", "-", "-"},
		{"npm", keyN, hostA, "closed", "0/3", "10s", "-", "0s", "0", "116s left", "-"},
	}, {
		{"TIME (UTC)", "KEY", "FROM → TO", "WHY", "FAILURES"},
		{"2026-11-30 12:00:04", keyA, "closed → open", "forced", "0"},
		{"2026-11-30 12:00:00", keyB, "closed → open", "threshold reached", "7"},
	}}
	for i, want := range wantTables {
		if got := tables[i]; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("table %d:\n got %q\nwant %q\n%s", i, got, want, out.String())
		}
	}
}

// statusTables splits the status command's output into its tables: runs of
// lines whose cells are separated by two spaces or more, a table's first
// line its header.
func statusTables(out string) [][][]string {
	gap := regexp.MustCompile(`\s{2,}`)
	var tables [][][]string
	var cur [][]string
	for line := range strings.SplitSeq(out, "\n") {
		cells := gap.Split(strings.TrimSpace(line), -1)
		if len(cells) < 2 {
			if cur != nil {
				tables = append(tables, cur)
			}
			cur = nil
			continue
		}
		cur = append(cur, cells)
	}
	if cur != nil {
		tables = append(tables, cur)
	}
	return tables
}

// TestSummarize: /health and the status page sum the breakers up alike:
// each format's worst state, degraded while any breaker is not closed, and
// a disabled set healthy.
