package proxy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/breakerstate"
	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// The end-to-end tests of coalescing (docs/behaviour.md §5.9): identical
// GETs through a real proxy over loopback. An upstream that holds its body
// back after the first bytes keeps the fetch in flight, so every client
// sent meanwhile joins it; the test releases the body once each client
// has its answer's headers.

// heldBody serves size bytes of a pattern that depends on the URL: the
// first 16 KiB at once, the rest once release is closed. 16 KiB is within
// the join window (the first 32 KiB, §5.9): a client alone that has read
// more closes its fetch to later ones.
func heldBody(size int, release <-chan struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body := patternFor(r.URL.Path, size)
		w.Header().Set("Content-Length", strconv.Itoa(size))
		w.Header().Set("Content-Type", "application/java-archive")
		first := min(size, 16<<10)
		w.Write(body[:first])
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		w.Write(body[first:])
	}
}

// patternFor is the body served for path.
func patternFor(path string, size int) []byte {
	seed := sha256.Sum256([]byte(path))
	b := make([]byte, size)
	for i := range b {
		b[i] = seed[i%len(seed)] ^ byte(i/251)
	}
	return b
}

func digest(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// coalesceConfig is two maven upstreams, a and b.
func coalesceConfig(a, b string) string {
	return fmt.Sprintf(`
[circuit_breaker]
enabled = true
failure_threshold = 3
[registries]
enable = "maven"
[maven]
proxies = ["%s/maven2", "%s/repo"]
# No hedging (behaviour.md §5.10): the second upstream here serves other
# bytes than the first, and these tests are about one upstream's fetch
# shared; a request that waits past twice the host's recent p99 on a busy
# machine would otherwise be answered by the second one.
hedge_after = 0
`, a, b)
}

// heldJar is a jar of one size through a proxy whose maven upstream holds
// the body back after its first bytes until release is closed (heldBody).
type heldJar struct {
	release chan struct{}
	up      *upstream
	tp      *testProxy
	c       *http.Client
	url     string
	want    string // the digest of the whole body
}

const heldJarPath = "/maven2/g/a/1/a-1.jar"

func newHeldJar(t *testing.T, size int) *heldJar {
	return newHeldJarAfter(t, size, nil)
}

// newHeldJarAfter is newHeldJar whose upstream sends nothing, not even its
// headers, before answer is closed (nil: at once).
func newHeldJarAfter(t *testing.T, size int, answer <-chan struct{}) *heldJar {
	j := &heldJar{release: make(chan struct{})}
	body := heldBody(size, j.release)
	j.up = newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if answer != nil {
			select {
			case <-answer:
			case <-r.Context().Done():
				return
			}
		}
		body(w, r)
	})
	j.tp = newTestProxy(t, coalesceConfig(j.up.URL, j.up.URL), nil)
	j.c = proxyClient(t, j.tp, nil)
	j.url = j.up.URL + heldJarPath
	j.want = digest(patternFor(heldJarPath, size))
	return j
}

// wantWhole fails for every client whose body is not the whole jar.
func (j *heldJar) wantWhole(t *testing.T, digests []string) {
	t.Helper()
	for i, d := range digests {
		if d != j.want {
			t.Errorf("client %d: %s", i, d)
		}
	}
}

// wantHits fails unless the upstream was asked n times.
func (j *heldJar) wantHits(t *testing.T, n int64) {
	t.Helper()
	if got := j.up.hits.Load(); got != n {
		t.Errorf("the upstream was asked %d times, want %d", got, n)
	}
}

// started is a request sent and its answer's headers.
type started struct {
	resp   *http.Response
	cancel context.CancelFunc
	err    error
}

// startGets sends n GETs of url through c at once, with hdr, and returns
// once each has its answer's headers (or failed).
func startGets(t *testing.T, c *http.Client, url string, n int, hdr func(i int) http.Header) []started {
	t.Helper()
	out := make([]started, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithCancel(context.Background())
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if hdr != nil {
				req.Header = hdr(i)
			}
			resp, err := c.Do(req)
			out[i] = started{resp: resp, cancel: cancel, err: err}
		})
	}
	wg.Wait()
	for i, s := range out {
		if s.err != nil {
			t.Fatalf("client %d: %v", i, s.err)
		}
		t.Cleanup(s.cancel)
	}
	return out
}

// readAll reads every started body at once and returns the digests (or
// the errors) in order.
func readAll(ss []started) []string {
	out := make([]string, len(ss))
	var wg sync.WaitGroup
	for i, s := range ss {
		wg.Go(func() {
			b, err := io.ReadAll(s.resp.Body)
			s.resp.Body.Close()
			if err != nil {
				out[i] = "error: " + err.Error()
				return
			}
			out[i] = digest(b)
		})
	}
	wg.Wait()
	return out
}

// coalesceWaiting is nora_sidecar_coalesce_waiting.
func coalesceWaiting(t *testing.T, tp *testProxy) int {
	t.Helper()
	mfs, err := tp.Registry.Gather()
	if err != nil {
		t.Error(err)
		return 0
	}
	for _, mf := range mfs {
		if mf.GetName() == "nora_sidecar_coalesce_waiting" {
			return int(mf.GetMetric()[0].GetGauge().GetValue())
		}
	}
	return 0
}

// coalescedCount is nora_sidecar_coalesced_total for format.
func coalescedCount(t *testing.T, tp *testProxy, format string) int {
	t.Helper()
	mfs, err := tp.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "nora_sidecar_coalesced_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "format" && l.GetValue() == format {
					return int(m.GetCounter().GetValue())
				}
			}
		}
	}
	return 0
}

func TestCoalescedGets(t *testing.T) {
	j := newHeldJar(t, 4<<20)
	tp := j.tp
	ss := startGets(t, j.c, j.url, 20, nil)
	close(j.release)
	j.wantWhole(t, readAll(ss))
	j.wantHits(t, 1)
	testkit.PollUntil(t, 5*time.Second, func() bool { return requestsOfFormat(t, tp.Registry, "maven") == 20 })
	if n := coalescedCount(t, tp, "maven"); n != 19 {
		t.Errorf("coalesced: %d, want 19", n)
	}
	if n := strings.Count(tp.Logs.String(), `"coalesced":true`); n != 19 {
		t.Errorf("%d log lines say coalesced, want 19", n)
	}
	if _, page := ixAdmin(t, tp, "GET", "/", ""); !strings.Contains(page, "19 joined an identical fetch") {
		t.Error("the status page does not show the coalesced requests")
	}
}

// TestCoalescedFirstClientLeaves: the client whose request started the
// fetch goes away in the middle of the body; the others' bodies are whole.
func TestCoalescedFirstClientLeaves(t *testing.T) {
	j := newHeldJar(t, 4<<20)
	tp := j.tp
	first := startGets(t, j.c, j.url, 1, nil)[0]
	if _, err := io.ReadFull(first.resp.Body, make([]byte, 16<<10)); err != nil {
		t.Fatal(err)
	}
	others := startGets(t, j.c, j.url, 5, nil)
	first.cancel()
	first.resp.Body.Close()
	close(j.release)
	j.wantWhole(t, readAll(others))
	j.wantHits(t, 1)
	key := fbKeys(t, tp, "maven")[0]
	testkit.PollUntil(t, 5*time.Second, func() bool { return requestsOfFormat(t, tp.Registry, "maven") == 6 })
	if s := breakerOf(t, tp, key); s.FailureCount != 0 {
		t.Errorf("%d failures counted for a client that left", s.FailureCount)
	}
}

// TestCoalescedStoppedClient: a client that stops reading does not hold
// up the others.
func TestCoalescedStoppedClient(t *testing.T) {
	j := newHeldJar(t, 16<<20)
	stopped := startGets(t, j.c, j.url, 1, nil)[0] // never reads its body
	others := startGets(t, j.c, j.url, 5, nil)
	close(j.release)
	done := make(chan []string, 1)
	go func() { done <- readAll(others) }()
	select {
	case got := <-done:
		j.wantWhole(t, got)
	case <-time.After(20 * time.Second):
		t.Fatal("the other clients were held up by the one that stopped reading")
	}
	stopped.resp.Body.Close()
	j.wantHits(t, 1)
}

// TestCoalescedFailover: while the addressed upstream fails, twenty
// identical GETs cost it one request and one failure, and the candidate
// one request.
func TestCoalescedFailover(t *testing.T) {
	release := make(chan struct{})
	a := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "broken", http.StatusBadGateway)
	})
	b := newUpstream(t, heldBody(1<<20, release))
	tp := newTestProxy(t, coalesceConfig(a.URL, b.URL), nil)
	c := proxyClient(t, tp, nil)
	ss := startGets(t, c, a.URL+"/maven2/g/a/1/a-1.jar", 20, nil)
	close(release)
	want := digest(patternFor("/repo/g/a/1/a-1.jar", 1<<20))
	for i, d := range readAll(ss) {
		if d != want || ss[i].resp.StatusCode != 200 {
			t.Errorf("client %d: %d %s", i, ss[i].resp.StatusCode, d)
		}
	}
	if na, nb := a.hits.Load(), b.hits.Load(); na != 1 || nb != 1 {
		t.Errorf("a asked %d times, b %d; want once each", na, nb)
	}
	keys := fbKeys(t, tp, "maven")
	if s := breakerOf(t, tp, keys[0]); s.FailureCount != 1 || s.State != breakerstate.Closed {
		t.Errorf("a's breaker: %s, %d failures; want closed with 1", s.State, s.FailureCount)
	}
}

// TestCoalescedCredentialsApart: clients with other credentials never
// share a fetch.
func TestCoalescedCredentialsApart(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	seen := map[string]int{}
	held := heldBody(1<<20, release)
	a := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Header.Get("Authorization")]++
		mu.Unlock()
		held(w, r)
	})
	tp := newTestProxy(t, coalesceConfig(a.URL, a.URL), nil)
	c := proxyClient(t, tp, nil)
	users := []string{"Basic YWxpY2U6YQ==", "Basic Ym9iOmI="}
	ss := startGets(t, c, a.URL+"/maven2/g/a/1/a-1.jar", 8, func(i int) http.Header {
		return http.Header{"Authorization": {users[i%2]}}
	})
	close(release)
	readAll(ss)
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || seen[users[0]] != 1 || seen[users[1]] != 1 {
		t.Errorf("the upstream saw %v; want one request per set of credentials", seen)
	}
}

// TestCoalescedManyURLs: 200 concurrent requests over 20 URLs (run under
// -race): every client gets its URL's whole body, and each URL costs the
// upstream at least one request and far fewer than its clients.
func TestCoalescedManyURLs(t *testing.T) {
	a := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		var n int
		fmt.Sscan(strings.TrimPrefix(r.URL.Path, "/maven2/g/"), &n)
		size := 1000 + n*23<<10
		w.Header().Set("Content-Length", strconv.Itoa(size))
		w.Write(patternFor(r.URL.Path, size))
	})
	tp := newTestProxy(t, coalesceConfig(a.URL, a.URL), nil)
	c := proxyClient(t, tp, nil)
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			n := i % 20
			path := fmt.Sprintf("/maven2/g/%d", n)
			resp, err := c.Get(a.URL + path)
			if err != nil {
				t.Error(err)
				return
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || digest(b) != digest(patternFor(path, 1000+n*23<<10)) {
				t.Errorf("%s: %d bytes, %v", path, len(b), err)
			}
		})
	}
	wg.Wait()
	if n := a.hits.Load(); n < 20 || n > 200 {
		t.Errorf("the upstream was asked %d times", n)
	}
	t.Logf("200 requests over 20 URLs reached the upstream %d times", a.hits.Load())
}

// TestCoalescedMavenResolverHeaders: Maven 3.9's resolver sends
// Cache-Control: no-cache, no-store and Pragma: no-cache on every request;
// twenty such pulls that arrive while the fetch waits for its answer share
// it (the answer is made after each of them was sent), and one arriving
// after the answer came fetches for itself. The upstream holds even its
// headers until all twenty wait on the fetch (nora_sidecar_coalesce_waiting):
// on a busy machine a pull read after the answer's headers came would
// rightly fetch for itself.
func TestCoalescedMavenResolverHeaders(t *testing.T) {
	answer := make(chan struct{})
	j := newHeldJarAfter(t, 4<<20, answer)
	resolver := func(int) http.Header {
		return http.Header{"Cache-Control": {"no-cache, no-store"}, "Pragma": {"no-cache"}}
	}
	var ss []started
	got := make(chan struct{})
	go func() { defer close(got); ss = startGets(t, j.c, j.url, 20, resolver) }()
	testkit.PollUntil(t, 10*time.Second, func() bool { return coalesceWaiting(t, j.tp) == 20 })
	close(answer)
	<-got
	close(j.release)
	j.wantWhole(t, readAll(ss))
	j.wantHits(t, 1) // twenty no-cache pulls in flight together
	// After the answer came, a no-cache pull fetches for itself.
	j.wantWhole(t, readAll(startGets(t, j.c, j.url, 1, resolver)))
	j.wantHits(t, 2)
}

// TestCoalescedTrailersLoseTheProxysNamespace: the trailers of a shared
// answer are replayed to every client that joined it, and like the first
// client's they lose the upstream's x-nora-* (docs/behaviour.md §5.5) and
// keep the rest.
func TestCoalescedTrailersLoseTheProxysNamespace(t *testing.T) {
	release := make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		// heldBody's, chunked: an answer of announced length has no trailers.
		body := patternFor(r.URL.Path, 64<<10)
		w.Header().Set("Trailer", "X-Nora-Stale, X-Sum")
		w.Write(body[:16<<10])
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		w.Write(body[16<<10:])
		w.Header().Set("X-Nora-Stale", "true")
		w.Header().Set("X-Sum", "1")
		w.Header().Set(http.TrailerPrefix+"X-Nora-Upstream", "maven:https://elsewhere")
	})
	tp := newTestProxy(t, coalesceConfig(up.URL, up.URL), nil)
	ss := startGets(t, proxyClient(t, tp, nil), up.URL+heldJarPath, 4, nil)
	close(release)
	want := digest(patternFor(heldJarPath, 64<<10))
	for i, d := range readAll(ss) {
		if d != want {
			t.Errorf("client %d: %s", i, d)
		}
		tr := ss[i].resp.Trailer
		for k, v := range tr {
			if strings.HasPrefix(strings.ToLower(k), "x-nora-") {
				t.Errorf("client %d got the upstream's trailer %s: %q", i, k, v)
			}
		}
		if tr.Get("X-Sum") != "1" {
			t.Errorf("client %d: the upstream's other trailer did not pass: %v", i, tr)
		}
	}
	if n := up.hits.Load(); n != 1 {
		t.Errorf("the upstream was asked %d times, want 1", n)
	}
}

// TestCoalescedSetCookieOnlyToTheLeader: a session the upstream opens
// (Set-Cookie) answers the one request it was sent, so of the anonymous
// clients sharing that fetch only the one whose request it was gets it;
// the others get the same answer without it (docs/behaviour.md §5.9), as
// the stale cache keeps none (§6) and another upstream's is dropped (§5.4).
func TestCoalescedSetCookieOnlyToTheLeader(t *testing.T) {
	release := make(chan struct{})
	held := heldBody(64<<10, release)
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Set-Cookie", "SESSION=s1; Path=/; HttpOnly")
		held(w, r)
	})
	tp := newTestProxy(t, coalesceConfig(up.URL, up.URL), nil)
	ss := startGets(t, proxyClient(t, tp, nil), up.URL+heldJarPath, 4, nil)
	close(release)
	want := digest(patternFor(heldJarPath, 64<<10))
	with := 0
	for i, d := range readAll(ss) {
		if d != want {
			t.Errorf("client %d: %s", i, d)
		}
		if len(ss[i].resp.Header.Values("Set-Cookie")) > 0 {
			with++
		}
	}
	if n := up.hits.Load(); n != 1 {
		t.Fatalf("the upstream was asked %d times, want 1", n)
	}
	if with != 1 {
		t.Errorf("the upstream's one Set-Cookie reached %d of the 4 clients, want 1 (its own)", with)
	}
}
