package proxy

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nora-breaker/nora-breaker/breakerstate"
	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// Reload: breakers of surviving keys keep their state and take
// the new thresholds; keys that left are dropped, new keys start closed;
// connections and in-flight requests survive.

// biMavenChain is a config with the given maven upstreams (URLs, in order).
func biMavenChain(threshold, resetSeconds int, urls ...string) string {
	list := ""
	for i, u := range urls {
		if i > 0 {
			list += ", "
		}
		list += fmt.Sprintf("%q", u)
	}
	return fmt.Sprintf(`
[circuit_breaker]
enabled = true
failure_threshold = %d
reset_timeout = %d
[registries]
enable = "maven"
[maven]
proxies = [%s]
proxy_timeout = 1
`, threshold, resetSeconds, list)
}

func TestReloadKeepsBreakerStateAndAppliesNewThresholds(t *testing.T) {
	failing := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusBadGateway)
	})
	healthy := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	added := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	a, b, c := failing.URL+"/m2", healthy.URL+"/m2", added.URL+"/m2"
	keyA, keyB, keyC := "maven:"+a, "maven:"+b, "maven:"+c
	tp := newTestProxy(t, biMavenChain(3, 10, a, b), nil)
	client := proxyClient(t, tp, nil)
	put := func() *http.Response {
		resp, _ := request(t, client, "PUT", a+"/g/x.jar", nil)
		return resp
	}
	for i := 0; i < 2; i++ {
		put()
	}
	if s := breakerOf(t, tp, keyA); s.FailureCount != 2 || s.State != breakerstate.Closed {
		t.Fatalf("before reload: %+v", s)
	}

	reload := func(text string) {
		t.Helper()
		if restart, err := tp.Reload(testkit.LoadConfig(t, text, nil)); err != nil || len(restart) != 0 {
			t.Fatalf("reload asks for a restart of %v", restart)
		}
	}
	// Threshold 3 → 5, reset 10 → 20; B leaves, C arrives.
	reload(biMavenChain(5, 20, a, c))
	s := breakerOf(t, tp, keyA)
	if s.FailureCount != 2 || s.State != breakerstate.Closed || s.Threshold != 5 || s.ResetTimeout != 20*time.Second {
		t.Fatalf("after reload the surviving breaker is %+v, want count 2, closed, threshold 5, reset 20s", s)
	}
	if s := breakerOf(t, tp, keyC); s.State != breakerstate.Closed || s.FailureCount != 0 {
		t.Fatalf("new key: %+v", s)
	}
	for _, snap := range tp.Breakers().Snapshot() {
		if snap.Key == keyB {
			t.Fatalf("key %s left the config but its breaker stayed", keyB)
		}
	}
	// The old threshold (3) would open now; the new one (5) needs two more.
	put()
	put()
	if s := breakerOf(t, tp, keyA); s.State != breakerstate.Closed || s.FailureCount != 4 {
		t.Fatalf("after 4 failures under threshold 5: %+v", s)
	}
	put()
	ixWant503(t, put(), keyA, "open", "20")

	// An open breaker stays open through a reload and takes the new reset.
	reload(biMavenChain(5, 30, a, c))
	if s := breakerOf(t, tp, keyA); s.State != breakerstate.Open {
		t.Fatalf("reload closed an open breaker: %+v", s)
	}
	ixWant503(t, put(), keyA, "open", "30")
	tp.Clock.Advance(30 * time.Second)
	if resp := put(); resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("after the new reset timeout the probe got %d, want the upstream's 502", resp.StatusCode)
	}
	if got := testutil.ToFloat64(tp.metrics.reloads.WithLabelValues("ok")); got != 2 {
		t.Fatalf("reloads ok = %v, want 2", got)
	}
}

// TestReloadDropsNoConnection: a request in flight while the config is
// swapped completes, and the client's kept-alive connection is reused
// afterwards.
func TestReloadDropsNoConnection(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/m2/slow.jar" {
			close(arrived)
			<-release
		}
		io.WriteString(w, "artifact")
	})
	text := biMavenChain(3, 10, up.URL+"/m2")
	tp := newTestProxy(t, text, nil)
	client := proxyClient(t, tp, nil)
	type result struct {
		status int
		body   string
		err    error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := client.Get(up.URL + "/m2/slow.jar")
		if err != nil {
			done <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		done <- result{status: resp.StatusCode, body: string(b), err: err}
	}()
	<-arrived
	if _, err := tp.Reload(testkit.LoadConfig(t, biMavenChain(9, 60, up.URL+"/m2"), nil)); err != nil {
		t.Fatal(err)
	}
	close(release)
	if r := <-done; r.err != nil || r.status != 200 || r.body != "artifact" {
		t.Fatalf("in-flight request across a reload: %d %q %v", r.status, r.body, r.err)
	}

	reused := false
	req, _ := http.NewRequest("GET", up.URL+"/m2/next.jar", nil)
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) { reused = info.Reused },
	}))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !reused {
		t.Fatalf("after the reload: %d, connection reused %v", resp.StatusCode, reused)
	}
	if s := breakerOf(t, tp, "maven:"+up.URL+"/m2"); s.Threshold != 9 {
		t.Fatalf("threshold %d after reload, want 9", s.Threshold)
	}
}

// TestReloadAppliesMaxUpstreamConnsPerHost: the per-host bound is one of
// the settings the upstream transport is built from, so a reload that
// changes it gives the requests after it a transport with the new bound.
func TestReloadAppliesMaxUpstreamConnsPerHost(t *testing.T) {
	tp := newTestProxy(t, "", nil)
	if got := tp.state.Load().transport.MaxConnsPerHost(); got != 256 {
		t.Fatalf("MaxConnsPerHost %d at start, want the default 256", got)
	}
	restart, err := tp.Reload(testkit.LoadConfig(t, "[sidecar]\nmax_upstream_conns_per_host = 8\n", nil))
	if err != nil || len(restart) != 0 {
		t.Fatalf("reload: needs restart %q, %v", restart, err)
	}
	if got := tp.state.Load().transport.MaxConnsPerHost(); got != 8 {
		t.Fatalf("MaxConnsPerHost %d after the reload, want 8", got)
	}
}

// TestReloadNamesWhatStillNeedsARestart: a restart-only setting is compared
// with what the process started with, not with the reload before. A file
// that moved listen keeps being named on every reload while the proxy still
// listens where it started, and a file that puts the address in use back
// needs no restart (on main the second reload said none and the third said
// listen).
func TestReloadNamesWhatStillNeedsARestart(t *testing.T) {
	base := testkit.LoadConfig(t, biMavenChain(3, 10, "http://repo.test/m2"), nil)
	tp := startProxy(t, base)
	for i, step := range []struct {
		threshold int
		listen    string
		want      []string
	}{
		{3, "127.0.0.1:1", []string{"listen"}},
		{4, "127.0.0.1:1", []string{"listen"}}, // another edit, the move still in the file
		{4, base.Sidecar.Listen, nil},          // back to the address in use
	} {
		cfg := testkit.LoadConfig(t, biMavenChain(step.threshold, 10, "http://repo.test/m2"), nil)
		cfg.Sidecar.Listen = step.listen
		got, err := tp.Reload(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, step.want) {
			t.Errorf("reload %d (listen %s): needs restart %v, want %v", i+1, step.listen, got, step.want)
		}
	}
}

// An upstream a reload removes takes its attempt series with it; the one
// that stays keeps its own (docs/behaviour.md §7).
func TestReloadForgetsTheSeriesOfRemovedUpstreams(t *testing.T) {
	a := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "a") })
	b := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "b") })
	tp := newTestProxy(t, biMavenChain(3, 10, a.URL+"/m2", b.URL+"/m2"), nil)
	c := proxyClient(t, tp, nil)
	for _, u := range []string{a.URL, b.URL} {
		if resp, _ := getURL(t, c, u+"/m2/x.jar"); resp.StatusCode != 200 {
			t.Fatalf("%s: %d", u, resp.StatusCode)
		}
	}
	keyA, keyB := "maven:"+a.URL+"/m2", "maven:"+b.URL+"/m2"
	if seriesOf(t, tp, keyA) == 0 || seriesOf(t, tp, keyB) == 0 {
		t.Fatalf("attempts not measured: %d %d", seriesOf(t, tp, keyA), seriesOf(t, tp, keyB))
	}
	if _, err := tp.Reload(testkit.LoadConfig(t, biMavenChain(3, 10, a.URL+"/m2"), nil)); err != nil {
		t.Fatal(err)
	}
	if n := seriesOf(t, tp, keyB); n != 0 {
		t.Errorf("%d series of the removed upstream remain", n)
	}
	if seriesOf(t, tp, keyA) == 0 {
		t.Errorf("the upstream that stayed lost its series")
	}
}

// seriesOf counts the samples on /metrics labelled registry=key.
func seriesOf(t *testing.T, tp *testProxy, key string) int {
	t.Helper()
	_, text := ixAdmin(t, tp, "GET", "/metrics", "")
	return strings.Count(text, `registry="`+key+`"`)
}
