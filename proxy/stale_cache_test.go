package proxy

import (
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// flakyOrigin serves body for every path until it is switched to another
// status (500 = down, 404 = gone).
type flakyOrigin struct {
	*upstream
	status atomic.Int32
}

func newFlakyOrigin(t *testing.T, body func(path string) string) *flakyOrigin {
	o := &flakyOrigin{}
	o.status.Store(200)
	o.upstream = newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		st := int(o.status.Load())
		if st != 200 {
			http.Error(w, "origin says "+strconv.Itoa(st), st)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("X-Origin", "yes")
		io.WriteString(w, body(r.URL.Path))
	})
	return o
}

func staleConfig(origin, dir, extra string) string {
	return fmt.Sprintf(`
[circuit_breaker]
enabled = true
failure_threshold = 100
[registries]
enable = "maven"
[maven]
proxies = ["%s/maven2"]
[sidecar]
stale_dir = %q
%s
`, origin, dir, extra)
}

func jarBody(path string) string { return "jar bytes of " + path }

// TestStaleServedWhenUpstreamDown: a stored 200 is served with
// x-nora-stale and Age when the upstream fails (5xx or refusing), or is open.
func TestStaleServedWhenUpstreamDown(t *testing.T) {
	tests := []struct {
		name string
		down func(t *testing.T, o *flakyOrigin, tp *testProxy)
	}{
		{"upstream 500", func(t *testing.T, o *flakyOrigin, _ *testProxy) { o.status.Store(500) }},
		{"upstream refusing", func(t *testing.T, o *flakyOrigin, _ *testProxy) { o.Close() }},
		{"breaker open", func(t *testing.T, o *flakyOrigin, tp *testProxy) {
			o.status.Store(500)
			fbForceOpen(t, tp, fbKeys(t, tp, "maven")[0])
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := newFlakyOrigin(t, jarBody)
			tp := newTestProxy(t, staleConfig(o.URL, t.TempDir(), ""), nil)
			c := proxyClient(t, tp, nil)
			url := o.URL + "/maven2/g/a/1/a-1.jar"
			if resp, body := getURL(t, c, url); resp.StatusCode != 200 || resp.Header.Get("X-Nora-Stale") != "" {
				t.Fatalf("warm-up: %d %q %v", resp.StatusCode, body, resp.Header)
			}
			fbWaitStored(t, tp, "maven", url, nil)
			tc.down(t, o, tp)
			tp.Clock.Advance(42 * time.Second)
			resp, body := getURL(t, c, url)
			if resp.StatusCode != 200 || body != jarBody("/maven2/g/a/1/a-1.jar") ||
				resp.Header.Get("X-Nora-Stale") != "true" || resp.Header.Get("Age") != "42" ||
				resp.Header.Get("X-Origin") != "yes" || resp.ContentLength != int64(len(body)) {
				t.Fatalf("got %d %q %v", resp.StatusCode, body, resp.Header)
			}
		})
	}
}

// TestStaleNeverReplacesUpstream404: the upstream's own 404 is the truth.
func TestStaleNeverReplacesUpstream404(t *testing.T) {
	o := newFlakyOrigin(t, jarBody)
	tp := newTestProxy(t, staleConfig(o.URL, t.TempDir(), ""), nil)
	c := proxyClient(t, tp, nil)
	url := o.URL + "/maven2/g/a/1/a-1.jar"
	getURL(t, c, url)
	fbWaitStored(t, tp, "maven", url, nil)
	o.status.Store(404)
	resp, body := getURL(t, c, url)
	if resp.StatusCode != 404 || resp.Header.Get("X-Nora-Stale") != "" || !strings.Contains(body, "origin says 404") {
		t.Fatalf("got %d %q %v", resp.StatusCode, body, resp.Header)
	}
}

// TestStaleIsolatedByCredential: in isolate mode a copy stored for one
// Authorization is served to that credential only.
func TestStaleIsolatedByCredential(t *testing.T) {
	o := newFlakyOrigin(t, jarBody)
	tp := newTestProxy(t, staleConfig(o.URL, t.TempDir(), `stale_authenticated = "isolate"`), nil)
	c := proxyClient(t, tp, nil)
	url := o.URL + "/maven2/private/a/1/a-1.jar"
	alice := fbHeader("Authorization", "Basic YWxpY2U6cHc=")
	bob := fbHeader("Authorization", "Basic Ym9iOnB3")
	if resp, _ := request(t, c, http.MethodGet, url, alice); resp.StatusCode != 200 {
		t.Fatalf("warm-up %d", resp.StatusCode)
	}
	fbWaitStored(t, tp, "maven", url, alice)
	o.status.Store(500)

	for _, tc := range []struct {
		name      string
		hdr       http.Header
		wantStale bool
	}{
		{"other credential", bob, false},
		{"no credential", nil, false},
		{"same credential", alice, true},
	} {
		resp, body := request(t, c, http.MethodGet, url, tc.hdr)
		gotStale := resp.Header.Get("X-Nora-Stale") == "true"
		if gotStale != tc.wantStale {
			t.Fatalf("%s: stale=%v, want %v (%d %q)", tc.name, gotStale, tc.wantStale, resp.StatusCode, body)
		}
		if !tc.wantStale && (resp.StatusCode != 500 || strings.Contains(body, "jar bytes")) {
			t.Fatalf("%s: %d %q, want the upstream's own 500", tc.name, resp.StatusCode, body)
		}
	}
}

// TestStaleInterruptedBodyNotStored: an upstream that closes mid-body leaves
// no cache entry and no file behind.
func TestStaleInterruptedBodyNotStored(t *testing.T) {
	var broken atomic.Bool
	broken.Store(true)
	o := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if !broken.Load() {
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Length", "1000")
		io.WriteString(w, strings.Repeat("h", 500))
		w.(http.Flusher).Flush()
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
	})
	dir := t.TempDir()
	tp := newTestProxy(t, staleConfig(o.URL, dir, ""), nil)
	c := proxyClient(t, tp, nil)
	url := o.URL + "/maven2/g/a/1/a-1.jar"
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil {
		t.Fatalf("client got a clean end after %d of 1000 bytes: a truncated body must not look complete", len(body))
	}
	broken.Store(false)
	resp2, _ := getURL(t, c, url)
	if resp2.StatusCode != 500 || resp2.Header.Get("X-Nora-Stale") != "" {
		t.Fatalf("after interrupted body: %d %v", resp2.StatusCode, resp2.Header)
	}
	if _, objects := tp.stale.Stats(); objects != 0 {
		t.Fatalf("%d cache entries", objects)
	}
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			t.Errorf("file left in the cache: %s", path)
		}
		return nil
	})
}

// TestStaleCacheStaysUnderMaxBytes: the least recently used copies go.
// stale_max_bytes counts what the files take on disk (a 1000-byte copy
// takes a block for its body and one for its metadata, 4 KiB each on the
// usual file systems, and its directory may take another): 44 KiB holds the
// three newest copies whatever directories they land in, and never all six.
func TestStaleCacheStaysUnderMaxBytes(t *testing.T) {
	const bound = 44 << 10
	body := func(string) string { return strings.Repeat("b", 1000) }
	o := newFlakyOrigin(t, body)
	tp := newTestProxy(t, staleConfig(o.URL, t.TempDir(), fmt.Sprintf("stale_max_bytes = %d\nstale_max_object_bytes = 1500", bound)), nil)
	c := proxyClient(t, tp, nil)
	url := func(i int) string { return fmt.Sprintf("%s/maven2/g/a/%d/a-%d.jar", o.URL, i, i) }
	for i := range 6 {
		getURL(t, c, url(i))
		fbWaitStored(t, tp, "maven", url(i), nil)
		if bytes, objects := tp.stale.Stats(); bytes > bound {
			t.Fatalf("after %d objects: %d bytes in %d entries", i+1, bytes, objects)
		}
	}
	o.status.Store(500)
	for i := range 6 {
		resp, _ := getURL(t, c, url(i))
		got := resp.Header.Get("X-Nora-Stale") == "true"
		switch {
		case i == 0 && got:
			t.Errorf("object 0, the least recently used, was kept")
		case i >= 3 && !got:
			t.Errorf("object %d, one of the three newest, was not kept (status %d)", i, resp.StatusCode)
		}
	}
}

// TestStaleSurvivesRestart: a new proxy on the same stale_dir serves what
// the old one stored.
func TestStaleSurvivesRestart(t *testing.T) {
	o := newFlakyOrigin(t, jarBody)
	cfg := staleConfig(o.URL, t.TempDir(), "")
	first := newTestProxy(t, cfg, nil)
	url := o.URL + "/maven2/g/a/1/a-1.jar"
	getURL(t, proxyClient(t, first, nil), url)
	fbWaitStored(t, first, "maven", url, nil)

	o.status.Store(500)
	second := newTestProxy(t, cfg, nil)
	resp, body := getURL(t, proxyClient(t, second, nil), url)
	if resp.StatusCode != 200 || resp.Header.Get("X-Nora-Stale") != "true" || body != jarBody("/maven2/g/a/1/a-1.jar") {
		t.Fatalf("after restart: %d %q %v", resp.StatusCode, body, resp.Header)
	}
}
