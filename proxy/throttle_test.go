package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/answer"
	"github.com/nora-breaker/nora-breaker/internal/adminapi"
)

// Rate limits (docs/behaviour.md §5.6): a 429 to a GET or HEAD leaves its
// host alone for as long as it asks; its requests go to the next upstream,
// then a stale copy, else get a 429 with the time left. No failure is
// counted and no probe is made.

// limiter answers 429 (with retryAfter when not "") until released, then
// serves; it counts every request it sees.
type limiter struct {
	up         *upstream
	released   atomic.Bool
	retryAfter func() string
}

func newLimiter(t *testing.T, retryAfter func() string) *limiter {
	l := &limiter{retryAfter: retryAfter}
	l.up = newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if l.released.Load() {
			io.WriteString(w, "from the limited one")
			return
		}
		if ra := l.retryAfter(); ra != "" {
			w.Header().Set("Retry-After", ra)
		}
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, "slow down")
	})
	return l
}

func TestThrottledHostIsLeftAloneUntilItsTimeIsUp(t *testing.T) {
	var clock func() time.Time // set once the proxy (and its clock) exist
	tests := []struct {
		name       string
		retryAfter func() string
		wait       time.Duration
	}{
		{"Retry-After in seconds", func() string { return "120" }, 120 * time.Second},
		{"Retry-After as an HTTP date", func() string { return clock().Add(90 * time.Second).Format(http.TimeFormat) }, 90 * time.Second},
		{"no Retry-After: throttle_default", func() string { return "" }, 45 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := newLimiter(t, tc.retryAfter)
			b := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "from B") })
			tp := newTestProxy(t, biMavenChain(2, 10, a.up.URL+"/m2", b.URL+"/m2")+
				"[sidecar]\nthrottle_default = \"45s\"\n", nil)
			clock = tp.Clock.Now
			keys := fbKeys(t, tp, "maven")
			c := proxyClient(t, tp, nil)
			url := a.up.URL + "/m2/g/a/1/a-1.jar"
			for i := range 4 {
				resp, body := getURL(t, c, url)
				if resp.StatusCode != 200 || body != "from B" || resp.Header.Get("X-Nora-Upstream") != keys[1] {
					t.Fatalf("GET %d: %d %q from %q, want B's answer", i, resp.StatusCode, body, resp.Header.Get("X-Nora-Upstream"))
				}
			}
			if n := a.up.hits.Load(); n != 1 {
				t.Fatalf("the throttled host saw %d requests, want only the one that met the 429", n)
			}
			if s := breakerOf(t, tp, keys[0]); s.FailureCount != 0 || s.State.String() != "closed" {
				t.Fatalf("a 429 counted against the upstream: %+v", s)
			}
			v := breakerViewOf(t, tp, keys[0])
			if !v.Throttled || v.ThrottledSeconds != int(tc.wait/time.Second) {
				t.Fatalf("/breakers: throttled %v for %ds, want %v", v.Throttled, v.ThrottledSeconds, tc.wait)
			}
			_, metrics := ixAdmin(t, tp, "GET", "/metrics", "")
			for _, want := range []string{fmt.Sprintf("nora_upstream_throttled{registry=%q} 1", keys[0]),
				fmt.Sprintf("nora_upstream_throttled{registry=%q} 0", keys[1])} {
				if !strings.Contains(metrics, want) {
					t.Fatalf("/metrics lacks %s", want)
				}
			}
			tp.Clock.Advance(tc.wait - time.Second)
			if resp, body := getURL(t, c, url); resp.StatusCode != 200 || body != "from B" || resp.Header.Get("X-Nora-Upstream") != keys[1] {
				t.Fatalf("with a second still to wait: %d %q from %q, want B's answer", resp.StatusCode, body,
					resp.Header.Get("X-Nora-Upstream"))
			}
			if n := a.up.hits.Load(); n != 1 {
				t.Fatalf("asked %d times with a second still to wait", n)
			}
			tp.Clock.Advance(time.Second)
			a.released.Store(true)
			if resp, body := getURL(t, c, url); resp.StatusCode != 200 || body != "from the limited one" {
				t.Fatalf("once the time is up: %d %q, want the host asked again", resp.StatusCode, body)
			}
		})
	}
}

// TestThrottledSingleUpstreamServesStaleElse429: with nobody else to ask,
// a throttled upstream's GET gets its stale copy, else a 429 saying how
// long is left; a PUT gets the upstream's own 429.
func TestThrottledSingleUpstreamServesStaleElse429(t *testing.T) {
	var limited atomic.Bool
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if limited.Load() {
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, "registry says slow down")
			return
		}
		io.WriteString(w, `{"name":"left-pad"}`)
	})
	tp, logs := ixStartProxy(t, fmt.Sprintf(`
[circuit_breaker]
enabled = true
[registries]
enable = "npm"
[npm]
proxy = %q
[sidecar]
stale_dir = %q
`, up.URL, filepath.Join(t.TempDir(), "stale")))
	c := proxyClient(t, tp, nil)
	if resp, _ := getURL(t, c, up.URL+"/left-pad"); resp.StatusCode != 200 {
		t.Fatalf("priming: %d", resp.StatusCode)
	}
	fbWaitStored(t, tp, "npm", up.URL+"/left-pad", nil)
	limited.Store(true)
	resp, body := getURL(t, c, up.URL+"/left-pad")
	if resp.StatusCode != 200 || resp.Header.Get("X-Nora-Stale") != "true" || body != `{"name":"left-pad"}` {
		t.Fatalf("stored packument while throttled: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	tp.Clock.Advance(12 * time.Second)
	resp, body = getURL(t, c, up.URL+"/never-fetched")
	var npmErr struct{ Error string }
	// The 18 s left is in the body; the header says 1 s, npm's
	// retry_after_max (answer.RetryAfter).
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" ||
		json.Unmarshal([]byte(body), &npmErr) != nil || !strings.Contains(npmErr.Error, "rate limiting") ||
		!strings.Contains(npmErr.Error, "18 s") {
		t.Fatalf("nothing stored: %d Retry-After %q %q, want the proxy's 429 with 18 s left in its body",
			resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	hits := up.hits.Load()
	if resp, body := request(t, c, "PUT", up.URL+"/left-pad", nil); resp.StatusCode != http.StatusTooManyRequests || body != "registry says slow down" {
		t.Fatalf("PUT: %d %q, want the upstream's own 429", resp.StatusCode, body)
	}
	if up.hits.Load() != hits+1 {
		t.Fatal("the PUT did not reach the upstream")
	}
	logs.waitFor(t, `"result":"`+string(answer.Throttled)+`"`)
	if s := breakerOf(t, tp, "npm:"+up.URL); s.FailureCount != 0 {
		t.Fatalf("429s counted as failures: %d", s.FailureCount)
	}
}

// breakerViewOf returns key's entry of GET /breakers.
func breakerViewOf(t *testing.T, tp *testProxy, key string) adminapi.Breaker {
	t.Helper()
	_, body := ixAdmin(t, tp, "GET", "/breakers", "")
	var views []adminapi.Breaker
	if err := json.Unmarshal([]byte(body), &views); err != nil {
		t.Fatal(err)
	}
	for _, v := range views {
		if v.Key == key {
			return v
		}
	}
	t.Fatalf("/breakers has no %s", key)
	return adminapi.Breaker{}
}
