//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The pip scenario with two hosts, as PyPI has them: index pages on one
// host, the files they link to on another (pypi.org and
// files.pythonhosted.org), configured as an alias host of the same upstream.
const (
	pagesHost = "pypi-pages.test:8080"
	filesHost = "pypi-files.test:8082"
	pagesKey  = "pypi:http://" + pagesHost + "/simple"
	filesKey  = pagesKey + "@" + filesHost
)

// pipHostsEnv is that scenario: one index folder served by python3 -m
// http.server, reached as the page host (through toxiproxy and a counting
// front) and as the file host (through its own counting front).
type pipHostsEnv struct {
	pipEnv
	pages, files *front
}

// setupPipHosts writes an index whose links point at the file host by
// absolute URL, starts its server, the fronts, toxiproxy and nora-breaker.
func setupPipHosts(t *testing.T, s suite, reset, headerTimeout time.Duration) *pipHostsEnv {
	t.Helper()
	e := &pipHostsEnv{pipEnv: pipEnv{dir: scenarioDir(t, s)}}
	wheel := buildWheel(t)
	root := filepath.Join(e.dir, "index")
	writePyIndex(t, root, "http://"+filesHost+"/", wheel)
	origin, _ := serveDir(t, e.dir, "pypi-index", root)
	waitHTTP(t, "http://"+origin+"/simple/e2e-hello/", 200, 20*time.Second)
	e.pages = newFront(t, "pypi-pages", "http://"+origin, nil, nil)
	e.files = newFront(t, "pypi-files", "http://"+origin, nil, nil)
	e.tp = startToxiproxy(t, s, e.dir)
	tox := e.tp.proxy(t, "pypi-pages", e.pages.addr)
	e.n = startNora(t, s, e.dir, noraOpts{
		formats: breakerTOML(2, reset, "pypi") + fmt.Sprintf(`[pypi]
proxies = ["http://%s/simple"]
proxy_timeout = %d
`, pagesHost, int(headerTimeout.Seconds())),
		sidecar: fmt.Sprintf("[sidecar.aliases]\n%q = [%q]\n", pagesKey, filesHost),
		resolve: map[string]string{pagesHost: tox, filesHost: e.files.addr},
	})
	e.env = cleanEnv("HOME="+e.dir, "PIP_CONFIG_FILE=/dev/null")
	e.py = strings.TrimSpace(mustRun(t, e.dir, e.env, time.Minute, "python3", "-c", "import sys; print(sys.executable)").out)
	return e
}

// pip runs pip download of what (a requirement or a file URL) through the
// proxy into a fresh folder, without pip's own retries (its back-off would
// be what is measured, not the proxy's answer) and with -vv (pip names a
// failed index page's status only then), and reports whether the wheel
// arrived.
func (e *pipHostsEnv) pip(t *testing.T, what string) (clientRun, bool) {
	t.Helper()
	e.run++
	out := filepath.Join(e.dir, fmt.Sprintf("dl-%d", e.run))
	r := runClient(t, e.dir, e.env, 3*time.Minute, e.py, "-m", "pip", "download", "-vv", "--no-deps", "--no-cache-dir",
		"--disable-pip-version-check", "--retries", "0", "--timeout", "15",
		"--trusted-host", "pypi-pages.test", "--trusted-host", "pypi-files.test",
		"--index-url", "http://"+pagesHost+"/simple/", "--proxy", e.n.proxyURL, "-d", out, what)
	_, err := os.Stat(filepath.Join(out, wheelName))
	return r, r.err == nil && err == nil
}

// mustGet is pip that must leave the wheel.
func (e *pipHostsEnv) mustGet(t *testing.T, what string) clientRun {
	t.Helper()
	r, ok := e.pip(t, what)
	if !ok {
		t.Fatalf("pip download %s: no wheel (%v)\n%s", what, r.err, tail(r.out, 2000))
	}
	return r
}

// mustFail is pip that must fail: the index page cannot be had.
func (e *pipHostsEnv) mustFail(t *testing.T, what string) clientRun {
	t.Helper()
	r, ok := e.pip(t, what)
	if ok {
		t.Fatalf("pip download %s succeeded with the page host blackholed and no other index", what)
	}
	return r
}

// TestPipPageHostBlackholed: the page host is blackholed (toxiproxy timeout
// toxic) while the file host is healthy. Each run before the page host's
// breaker opens waits proxy_timeout for the page and fails; once open, a
// run fails at once on the proxy's 503; the file host has its own breaker,
// stays closed and still serves a file asked for by URL; restore → the
// page host's breaker closes after one probe.
func TestPipPageHostBlackholed(t *testing.T) {
	const reset, headerTimeout = 15 * time.Second, 2 * time.Second
	e := setupPipHosts(t, loadSuite(t), reset, headerTimeout)
	b := breakerCheck{n: e.n, key: pagesKey, reset: reset, seen: connsOf(e.pages)}
	const req = "e2e-hello==0.1.0"
	fileURL := "http://" + filesHost + "/packages/" + wheelName

	e.mustGet(t, req)
	if len(e.pages.pathsMatching("/simple/e2e-hello/")) != 1 || len(e.pages.pathsMatching(wheelName)) != 0 {
		t.Fatalf("healthy run: the page host saw %v, want the index page only", e.pages.pathsMatching("/"))
	}
	if len(e.files.pathsMatching(wheelName)) != 1 {
		t.Fatalf("healthy run: the file host saw %v, want the wheel", e.files.pathsMatching("/"))
	}
	if st := e.n.breaker(t, filesKey); st.State != "closed" || st.FailureCount != 0 {
		t.Fatalf("file host breaker after a healthy run: %+v", st)
	}

	e.tp.addToxic(t, "pypi-pages", "blackhole", "timeout", map[string]any{"timeout": 0})
	slow := b.openUntil(t, 4, func() clientRun { return e.mustFail(t, req) })
	for i, w := range slow {
		if w < headerTimeout {
			t.Fatalf("run %d before the page host's breaker opened took %v, less than proxy_timeout %v", i+1, w, headerTimeout)
		}
	}
	filesBefore := len(e.files.pathsMatching(wheelName))
	var fast, file clientRun
	b.quietWhileOpen(t, func() {
		fast = e.mustFail(t, req)
		// pip asked for the file itself (a URL requirement) while the page
		// host is open: its host has its own breaker and is healthy.
		file = e.mustGet(t, fileURL)
	})
	if !strings.Contains(fast.out, "503") {
		t.Fatalf("with the page host open pip should fail on the proxy's 503:\n%s", tail(fast.out, 2000))
	}
	page := e.n.lastLog(t, `"path":"/simple/e2e-hello/"`)
	if page["result"] != "synthesized_503" || page["status"] != float64(503) || page["duration_ms"].(float64) >= 1000 {
		t.Fatalf("index page with the page host open: want a synthesized 503 well under a second, got %v", page)
	}
	if fast.wall > 10*time.Second {
		t.Fatalf("pip run with the page host open took %v", fast.wall)
	}
	if got := len(e.files.pathsMatching(wheelName)); got != filesBefore+1 {
		t.Fatalf("the file host saw %d wheel requests while the page host was open, want 1", got-filesBefore)
	}
	if st := e.n.breaker(t, filesKey); st.State != "closed" || st.FailureCount != 0 {
		t.Fatalf("file host breaker while the page host is open: %+v", st)
	}
	if e.n.state(t, pagesKey) != 1 {
		t.Fatal("page host breaker closed by the file host's success")
	}

	e.tp.removeToxic(t, "pypi-pages", "blackhole")
	b.oneProbe(t, 0, func() { e.mustGet(t, req) })
	summary("pip download (pages and files on two hosts)", "page host blackholed (toxiproxy timeout toxic), file host healthy, then restored",
		fmt.Sprintf("before open failed after %v each (proxy_timeout %v); open: 503 in %.2fs (page %.1f ms); file by URL from the file host %.2fs, its breaker closed; page host back after 1 probe",
			roundAll(slow), headerTimeout, fast.wall.Seconds(), page["duration_ms"].(float64), file.wall.Seconds()),
		fast.wall+file.wall, e.pages.seen()+" "+e.files.seen())
}
