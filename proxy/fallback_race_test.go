package proxy

import (
	"fmt"
	"io"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestFallbackConcurrentFlappingCandidate runs many fallback requests at
// once against a candidate that alternates 200/500, with a stale copy of
// one of the paths. Every answer must be B's 200, a stale copy or a 503, the
// race detector must stay quiet, and no goroutine may outlive the requests.
func TestFallbackConcurrentFlappingCandidate(t *testing.T) {
	const cachedBody = "cached jar from A"
	a := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, cachedBody) })
	var flip atomic.Int64
	b := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if flip.Add(1)%2 == 0 {
			http.Error(w, "B flapped", http.StatusInternalServerError)
			return
		}
		io.WriteString(w, "jar from B")
	})
	tp := newTestProxy(t, fmt.Sprintf(`
[circuit_breaker]
enabled = true
[registries]
enable = "maven"
[maven]
proxies = ["%s/maven2", "%s/repo"]
[sidecar]
stale_dir = %q
`, a.URL, b.URL, t.TempDir()), nil)
	keys := fbKeys(t, tp, "maven")
	c := proxyClient(t, tp, nil)
	cached := a.URL + "/maven2/g/a/1/cached.jar"
	fresh := a.URL + "/maven2/g/a/1/fresh.jar"
	getURL(t, c, cached)
	fbWaitStored(t, tp, "maven", cached, nil)
	fbForceOpen(t, tp, keys[0])

	idle := func() {
		c.Transport.(*http.Transport).CloseIdleConnections()
		tp.state.Load().transport.CloseIdleConnections()
	}
	idle()
	before := fbWaitGoroutines(t, -1, time.Second)

	const workers, perWorker = 64, 4
	var wg sync.WaitGroup
	var served, stale, unavailable atomic.Int64
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWorker {
				url := fresh
				if (w+i)%2 == 0 {
					url = cached
				}
				resp, err := c.Get(url)
				if err != nil {
					t.Errorf("%s: %v", url, err)
					return
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				switch {
				case err != nil:
					t.Errorf("%s: body: %v", url, err)
				case resp.StatusCode == 200 && resp.Header.Get("X-Nora-Upstream") == keys[1] && string(body) == "jar from B":
					served.Add(1)
				case resp.StatusCode == 200 && resp.Header.Get("X-Nora-Stale") == "true" && url == cached &&
					string(body) == cachedBody:
					stale.Add(1)
				case resp.StatusCode == 503 && resp.Header.Get("Retry-After") != "":
					unavailable.Add(1)
				default:
					t.Errorf("%s: unexpected answer %d %v %q", url, resp.StatusCode, resp.Header, body)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("served by B %d, stale %d, 503 %d", served.Load(), stale.Load(), unavailable.Load())
	if served.Load() == 0 || served.Load()+stale.Load()+unavailable.Load() != workers*perWorker {
		t.Fatalf("served %d stale %d 503 %d of %d", served.Load(), stale.Load(), unavailable.Load(), workers*perWorker)
	}
	if a.hits.Load() != 1 {
		t.Fatalf("open A was asked %d times", a.hits.Load()-1)
	}
	idle()
	fbWaitGoroutines(t, before+4, 10*time.Second)
}

// fbWaitGoroutines polls until at most max goroutines run (max < 0: until the
// count stops changing) and returns the count; connections close
// asynchronously, so a single reading would be flaky.
func fbWaitGoroutines(t *testing.T, max int, within time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(within)
	last, stable := runtime.NumGoroutine(), 0
	for {
		time.Sleep(5 * time.Millisecond)
		n := runtime.NumGoroutine()
		if max >= 0 && n <= max {
			return n
		}
		if max < 0 {
			if n == last {
				if stable++; stable >= 5 {
					return n
				}
			} else {
				stable = 0
			}
		}
		last = n
		if time.Now().After(deadline) {
			if max < 0 {
				return n
			}
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("%d goroutines still running, want <= %d:\n%s", n, max, buf)
		}
	}
}
