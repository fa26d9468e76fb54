package proxy

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/breakerstate"
)

// mavenConfig is a two-upstream maven chain: A, then B with Basic
// credentials u:p.
func mavenConfig(a, b string) string {
	return fmt.Sprintf(`
[circuit_breaker]
enabled = true
failure_threshold = 3
reset_timeout = 30
[registries]
enable = "maven"
[maven]
proxies = ["%s/maven2", {url = "%s/repo", auth = "u:p"}]
`, a, b)
}

// TestFallbackMavenRefusingPrimary: A refuses connections. The first request
// is already served by B, A's failure is counted, and after
// failure_threshold of them A's breaker is open.
func TestFallbackMavenRefusingPrimary(t *testing.T) {
	b := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "jar from B")
	})
	a := "http://" + closedPort(t)
	tp := newTestProxy(t, mavenConfig(a, b.URL), nil)
	keys := fbKeys(t, tp, "maven")
	c := proxyClient(t, tp, nil)
	for i := 1; i <= 3; i++ {
		resp, body := getURL(t, c, a+"/maven2/g/a/1/a-1.jar")
		if resp.StatusCode != 200 || body != "jar from B" || resp.Header.Get("X-Nora-Upstream") != keys[1] {
			t.Fatalf("request %d: %d %q %v", i, resp.StatusCode, body, resp.Header)
		}
		s := breakerOf(t, tp, keys[0])
		if s.FailureCount != i {
			t.Fatalf("request %d: A's failure count %d", i, s.FailureCount)
		}
		wantState := breakerstate.Closed
		if i == 3 {
			wantState = breakerstate.Open
		}
		if s.State != wantState {
			t.Fatalf("request %d: A is %v, want %v", i, s.State, wantState)
		}
	}
	// Now rejected at once, and still served by B.
	resp, body := getURL(t, c, a+"/maven2/g/a/1/a-1.jar")
	if resp.StatusCode != 200 || body != "jar from B" || breakerOf(t, tp, keys[0]).Rejections != 1 {
		t.Fatalf("after opening: %d %q rejections %d", resp.StatusCode, body, breakerOf(t, tp, keys[0]).Rejections)
	}
	if b.hits.Load() != 4 {
		t.Fatalf("B hits %d, want 4", b.hits.Load())
	}
}

// TestFallbackMavenOpenPrimaryServedByB: the request addressed to an open A
// is served by B with B's own credentials and none of the client's.
func TestFallbackMavenOpenPrimaryServedByB(t *testing.T) {
	a := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("A is open but was asked for %s", r.URL)
	})
	b := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/repo/g/a/1/a-1.jar" || r.URL.RawQuery != "x=1" {
			t.Errorf("B asked for %s", r.URL)
		}
		if u, p, ok := r.BasicAuth(); !ok || u != "u" || p != "p" {
			t.Errorf("B got Authorization %q, want its own Basic u:p", r.Header.Get("Authorization"))
		}
		if r.Header.Get("Cookie") != "" || r.Header.Get("Proxy-Authorization") != "" {
			t.Errorf("client credentials reached B: %v", r.Header)
		}
		w.Header().Set("Content-Type", "application/java-archive")
		fmt.Fprint(w, "jar from B")
	})
	tp := newTestProxy(t, mavenConfig(a.URL, b.URL), nil)
	keys := fbKeys(t, tp, "maven")
	fbForceOpen(t, tp, keys[0])
	resp, body := request(t, proxyClient(t, tp, nil), http.MethodGet, a.URL+"/maven2/g/a/1/a-1.jar?x=1",
		fbHeader("Authorization", "Bearer client-secret", "Cookie", "session=client"))
	if resp.StatusCode != 200 || body != "jar from B" || resp.Header.Get("X-Nora-Upstream") != keys[1] ||
		resp.Header.Get("Content-Type") != "application/java-archive" {
		t.Fatalf("got %d %q %v", resp.StatusCode, body, resp.Header)
	}
	if a.hits.Load() != 0 || b.hits.Load() != 1 {
		t.Fatalf("hits A=%d B=%d", a.hits.Load(), b.hits.Load())
	}
}

func TestFallbackMavenCandidateNotFound(t *testing.T) {
	b := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) })
	a := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { t.Error("A is open") })
	tp := newTestProxy(t, mavenConfig(a.URL, b.URL), nil)
	keys := fbKeys(t, tp, "maven")
	fbForceOpen(t, tp, keys[0])
	resp, _ := getURL(t, proxyClient(t, tp, nil), a.URL+"/maven2/g/a/1/a-1.pom")
	if resp.StatusCode != 404 || resp.Header.Get("X-Nora-Breaker-Key") != keys[0] {
		t.Fatalf("got %d %v", resp.StatusCode, resp.Header)
	}
}

// TestFallbackMavenCandidateFailingRetryAfter: A opened by failures, then B
// fails too: 503 with Retry-After = A's remaining open time, rounded up.
func TestFallbackMavenCandidateFailingRetryAfter(t *testing.T) {
	var bDown = make(chan struct{})
	b := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-bDown:
			http.Error(w, "B broke", http.StatusInternalServerError)
		default:
			fmt.Fprint(w, "jar from B")
		}
	})
	a := "http://" + closedPort(t)
	tp := newTestProxy(t, mavenConfig(a, b.URL), nil)
	keys := fbKeys(t, tp, "maven")
	c := proxyClient(t, tp, nil)
	for range 3 {
		getURL(t, c, a+"/maven2/g/a/1/a-1.jar")
	}
	if s := breakerOf(t, tp, keys[0]); s.State != breakerstate.Open {
		t.Fatalf("A is %v", s.State)
	}
	close(bDown)
	tests := []struct {
		advance time.Duration
		want    string
	}{
		{0, "30"},
		{10500 * time.Millisecond, "20"}, // 19.5 s left
		{18700 * time.Millisecond, "1"},  // 0.8 s left
	}
	for _, tc := range tests {
		tp.Clock.Advance(tc.advance)
		resp, body := getURL(t, c, a+"/maven2/g/a/1/a-1.jar")
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != tc.want ||
			resp.Header.Get("X-Nora-Breaker-Key") != keys[0] || resp.Header.Get("X-Nora-Breaker-State") != "open" {
			t.Fatalf("after +%v: %d Retry-After %q %v %q", tc.advance, resp.StatusCode,
				resp.Header.Get("Retry-After"), resp.Header, body)
		}
	}
}

// TestFallbackMavenNonGetNotSubstituted: only GET and HEAD go elsewhere.
func TestFallbackMavenNonGetNotSubstituted(t *testing.T) {
	b := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { t.Errorf("B got %s", r.Method) })
	a := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { t.Error("A is open") })
	tp := newTestProxy(t, mavenConfig(a.URL, b.URL), nil)
	fbForceOpen(t, tp, fbKeys(t, tp, "maven")[0])
	resp, err := proxyClient(t, tp, nil).Post(a.URL+"/maven2/g/a/1/a-1.jar", "application/octet-stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("got %d %v", resp.StatusCode, resp.Header)
	}
}

// TestFallbackSearchBoundIsNotTheCandidates: the search for a candidate
// that answers has 60 s for headers in all (docs/behaviour.md §5.4). When
// the upstreams before it have used up all but 0.1 s of that, the last
// candidate is waited on only for what is left; a healthy one that would
// answer in 0.4 s, well inside its own 5 s proxy_timeout, is cut short by
// the proxy, which is neutral (§5.1): its breaker stays closed with no
// failure, and the log line names the search's bound, not proxy_timeout.
func TestFallbackSearchBoundIsNotTheCandidates(t *testing.T) {
	var tp *testProxy
	first := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusBadGateway) })
	second := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		// Its own failure takes all but 0.1 s of the search's bound.
		tp.Clock.Advance(59*time.Second + 900*time.Millisecond)
		w.WriteHeader(http.StatusBadGateway)
	})
	third := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done(): // the proxy gave up first
			return
		case <-time.After(400 * time.Millisecond): // a healthy registry's time
		}
		io.WriteString(w, "jar")
	})
	tp, _ = ixStartProxy(t, fmt.Sprintf(`
[circuit_breaker]
enabled = true
failure_threshold = 1
reset_timeout = 30
[registries]
enable = "maven"
[maven]
proxies = ["%s/maven2", "%s/maven2", "%s/maven2"]
proxy_timeout = 5
hedge_after = 0
`, first.URL, second.URL, third.URL))
	resp, _ := request(t, proxyClient(t, tp, nil), http.MethodGet, first.URL+"/maven2/g/a/1/a-1.jar", nil)
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("answer %d, want the addressed upstream's own 502 replayed", resp.StatusCode)
	}
	line := logLine(t, tp, func(l string) bool { return strings.Contains(l, `"attempts"`) })
	if s := breakerOf(t, tp, ixKey(third.URL)); s.State != breakerstate.Closed || s.FailureCount != 0 {
		t.Errorf("the third upstream, cut short by the search's bound, is %s with %d failures; log: %s",
			s.State, s.FailureCount, line)
	}
	if strings.Contains(line, "proxy_timeout") || !strings.Contains(line, "search") {
		t.Errorf("the log line should name the search's bound, not proxy_timeout: %s", line)
	}
}
