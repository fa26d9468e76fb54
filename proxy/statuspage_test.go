package proxy

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// statusPageConfig: maven dead then a (healthy, its fallback), npm on a,
// pypi on a host that fails and can be made to hang.
func statusPageConfig(a, dead, hang string) string {
	return fmt.Sprintf(`
[circuit_breaker]
enabled = true
failure_threshold = 2
reset_timeout = 10
[registries]
enable = ["maven", "npm", "pypi"]
[maven]
proxies = ["%s/m2", "%s/m2"]
[npm]
proxy = "%s/npm"
[pypi]
proxy = "%s/simple"
proxy_timeout = 60
`, dead, a, a, hang)
}

// breakerRow finds the status page's table row of one key.
func breakerRow(t *testing.T, page, key string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)<tr class="breaker" data-key="` + regexp.QuoteMeta(key) + `".*?</tr>`).FindString(page)
	if m == "" {
		t.Fatalf("page has no row for %s:\n%s", key, page)
	}
	return m
}

func TestStatusPageShowsEveryState(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {})
	dead := "http://" + closedPort(t)
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	var hanging atomic.Bool
	hang := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if !hanging.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		arrived <- struct{}{}
		<-release
	})
	tp := newTestProxy(t, statusPageConfig(up.URL, dead, hang.URL), nil)
	t.Cleanup(func() { close(release) }) // before the proxy's shutdown, which waits for it
	c := proxyClient(t, tp, nil)
	maven, deadKey := "maven:"+up.URL+"/m2", "maven:"+dead+"/m2"
	npm, pypi := "npm:"+up.URL+"/npm", "pypi:"+hang.URL+"/simple"

	request(t, c, "GET", up.URL+"/m2/a.pom", nil) // forwarded
	ixAdmin(t, tp, "POST", "/breakers/force?key="+npm+"&state=open", "")
	for range 2 {
		request(t, c, "GET", hang.URL+"/simple/x/", nil)
	}
	tp.Clock.Advance(10 * time.Second)
	// pypi's probe hangs: its breaker stays half-open while the page is read.
	hanging.Store(true)
	go func() { _, _ = c.Get(hang.URL + "/simple/x/") }()
	<-arrived
	for range 2 {
		request(t, c, "GET", dead+"/m2/a.pom", nil) // fails, then served by a: two fallbacks
	}
	tp.Clock.Advance(3 * time.Second) // the page is read 3 s after the maven breaker opened
	// A request is counted just after its client has the answer.
	testkit.PollUntil(t, 5*time.Second, func() bool { return requestsOfFormat(t, tp.Registry, "maven") == 3 })

	resp, page := ixAdmin(t, tp, "GET", "/", "")
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") ||
		!strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Fatalf("GET /: %d %v", resp.StatusCode, resp.Header)
	}
	rows := map[string][]string{
		maven:   {`data-state="closed"`, `0 / 2`, `s-closed">closed<`, `<code>` + strings.TrimPrefix(up.URL, "http://") + `</code>`},
		deadKey: {`data-state="open"`, `2 / 2`, `s-open">open<`, `in <span class="countdown" data-seconds="7">7 s</span>`, `>auto<`},
		npm:     {`data-state="open"`, `data-forced="open"`, `forced open`, `none while forced open`},
		pypi:    {`data-state="half_open"`, `s-half_open">half-open<`, `probe in flight`},
	}
	for key, wants := range rows {
		row := breakerRow(t, page, key)
		for _, w := range wants {
			if !strings.Contains(row, w) {
				t.Errorf("row %s lacks %s:\n%s", key, w, row)
			}
		}
	}
	for _, want := range []string{
		`id="overall" data-status="degraded"`,
		`data-format="maven" data-status="open"`, `data-format="pypi" data-status="half_open"`,
		`data-upstream="` + maven + `"`, `data-upstream="` + deadKey + `"`,
		"3 requests · 1 forwarded · 2 by fallback", // maven, since start
		"<td><code>" + deadKey + "</code></td><td><code>" + maven + "</code></td><td class=\"num\">2</td>",
		"threshold reached", "forced", "probe due",
		`data-key="` + pypi + `" data-to="half_open"`,
		"version test",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	if t.Failed() {
		t.Log(page)
	}
	// No external assets: nothing is fetched from anywhere.
	if regexp.MustCompile(`(?i)(src|href)\s*=|@import|url\(`).MatchString(page) {
		t.Error("page refers to an external asset")
	}
}

func TestStatusPageWithoutTransitionsOrFallbacks(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {})
	tp := newTestProxy(t, statusPageConfig(up.URL, up.URL+"/b", up.URL), nil)
	_, page := ixAdmin(t, tp, "GET", "/", "")
	for _, want := range []string{`data-status="healthy"`, "No transition since start.", "None yet."} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
}

func TestStatusPageDisabledBreakers(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {})
	tp := newTestProxy(t, strings.Replace(statusPageConfig(up.URL, up.URL+"/b", up.URL), "enabled = true", "enabled = false", 1), nil)
	_, page := ixAdmin(t, tp, "GET", "/", "")
	for _, want := range []string{"circuit breaker disabled", `data-state="disabled"`, `data-status="healthy"`} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
}

// requestsOfFormat sums nora_sidecar_requests_total over results for one
// format, as the status page's request count does.
func requestsOfFormat(t *testing.T, g prometheus.Gatherer, format string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != "nora_sidecar_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "format" && l.GetValue() == format {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}
