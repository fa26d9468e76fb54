//go:build e2e

package e2e

import (
	"archive/zip"
	"bytes"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeModuleProxy lays out example.test/mod v0.1.0 as a file-based GOPROXY.
func writeModuleProxy(t *testing.T, root string) {
	t.Helper()
	const mod = "module example.test/mod\n\ngo 1.21\n"
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for name, body := range map[string]string{
		"go.mod":   mod,
		"hello.go": "// Package mod is the e2e test module.\npackage mod\n\n// Hello greets.\nconst Hello = \"hello\"\n",
	} {
		w, err := zw.Create("example.test/mod@v0.1.0/" + name)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(body))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	v := filepath.Join(root, "example.test", "mod", "@v")
	writeFile(t, filepath.Join(v, "list"), "v0.1.0\n")
	writeFile(t, filepath.Join(v, "v0.1.0.info"), `{"Version":"v0.1.0","Time":"2024-01-01T00:00:00Z"}`)
	writeFile(t, filepath.Join(v, "v0.1.0.mod"), mod)
	writeFile(t, filepath.Join(v, "v0.1.0.zip"), buf.String())
}

// goEnv is the go scenario: one file-based module proxy over HTTPS behind
// toxiproxy, reached through the intercepting proxy.
type goEnv struct {
	dir string
	n   *nora
	tp  *toxiproxy
	fr  *front
	run int
}

// setupGo writes the module proxy folder and starts its TLS front,
// toxiproxy and nora-breaker.
func setupGo(t *testing.T, s suite, reset, headerTimeout time.Duration) *goEnv {
	t.Helper()
	e := &goEnv{dir: scenarioDir(t, s)}
	root := filepath.Join(e.dir, "goproxy")
	writeModuleProxy(t, root)
	ca := newOriginCA(t, e.dir)
	// HTTP/1.1 only: over HTTP/2 the proxy keeps multiplexing its attempts
	// on one blackholed connection, and the front could not count them.
	tlsCfg := ca.serverTLS(t, "goproxy-a.test")
	tlsCfg.NextProtos = []string{"http/1.1"}
	e.fr = newFront(t, "goproxy-a", "", http.FileServer(http.Dir(root)), tlsCfg)
	e.tp = startToxiproxy(t, s, e.dir)
	tox := e.tp.proxy(t, "goproxy-a", e.fr.addr)
	e.n = startNora(t, s, e.dir, noraOpts{
		formats: breakerTOML(2, reset, "go") + fmt.Sprintf(`[go]
proxy = "https://goproxy-a.test"
proxy_timeout = %d
`, int(headerTimeout.Seconds())),
		resolve:    map[string]string{"goproxy-a.test:443": tox},
		upstreamCA: ca.pemPath,
	})
	return e
}

// download runs go mod download through the proxy with an empty module cache.
func (e *goEnv) download(t *testing.T) clientRun {
	t.Helper()
	e.run++
	env := cleanEnv("HOME="+e.dir, "GOPROXY=https://goproxy-a.test", "GOSUMDB=off", "GONOSUMDB=*",
		"GOFLAGS=-mod=mod -modcacherw", "GOTOOLCHAIN=local",
		fmt.Sprintf("GOMODCACHE=%s/modcache-%d", e.dir, e.run), "GOPATH="+filepath.Join(e.dir, "gopath"),
		"HTTPS_PROXY="+e.n.proxyURL, "HTTP_PROXY="+e.n.proxyURL, "SSL_CERT_FILE="+e.n.bundle)
	return runClient(t, e.dir, env, 3*time.Minute, "go", "mod", "download", "-json", "example.test/mod@v0.1.0")
}

// mustDownload is download that must succeed.
func (e *goEnv) mustDownload(t *testing.T) {
	t.Helper()
	if r := e.download(t); r.err != nil || !strings.Contains(r.out, `"Zip"`) {
		t.Fatalf("go mod download: %v\n%s", r.err, tail(r.out, 2000))
	}
}

// mustFail is download that must fail (no stale cache is configured).
func (e *goEnv) mustFail(t *testing.T) clientRun {
	t.Helper()
	r := e.download(t)
	if r.err == nil {
		t.Fatal("go mod download succeeded with the module proxy blackholed")
	}
	return r
}

// TestGoModules: go mod download through the intercepting proxy; module
// proxy blackholed → once the breaker is open the go command fails at once
// with the proxy's 503 instead of waiting on the dead upstream.
func TestGoModules(t *testing.T) {
	const reset, headerTimeout = 5 * time.Second, 2 * time.Second
	e := setupGo(t, loadSuite(t), reset, headerTimeout)
	b := breakerCheck{n: e.n, key: "go", reset: reset, seen: connsOf(e.fr)}

	e.mustDownload(t)
	if len(e.fr.pathsMatching("v0.1.0.zip")) != 1 {
		t.Fatalf("module zip not fetched from the module proxy: %v", e.fr.pathsMatching("@v"))
	}

	e.tp.addToxic(t, "goproxy-a", "blackhole", "timeout", map[string]any{"timeout": 0})
	before := b.openUntil(t, 4, func() clientRun { return e.mustFail(t) })
	var fast clientRun
	b.quietWhileOpen(t, func() { fast = e.mustFail(t) })
	if !strings.Contains(fast.out, "503") {
		t.Fatalf("with the breaker open go mod download should fail with 503:\n%s", tail(fast.out, 2000))
	}
	if fast.wall > 10*time.Second {
		t.Fatalf("go mod download with the breaker open took %v", fast.wall)
	}
	if e.n.metric(t, "nora_sidecar_requests_total", `format="go"`, `result="synthesized_503"`) == 0 {
		t.Fatal("no synthesized 503 counted for go")
	}
	b.oneProbe(t, 1, func() { e.mustFail(t) })

	e.tp.removeToxic(t, "goproxy-a", "blackhole")
	b.oneProbe(t, 0, func() { e.mustDownload(t) })
	summary("go mod download (HTTPS, intercepted)", "module proxy blackholed (toxiproxy timeout toxic), then restored",
		fmt.Sprintf("before open failed after %v each (proxy_timeout %v); open: 503 in %.2fs; back after 1 probe",
			roundAll(before), headerTimeout, fast.wall.Seconds()),
		fast.wall, e.fr.seen())
}
