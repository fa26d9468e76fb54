//go:build e2e

package e2e

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// wheelName is the distribution both test indexes list.
const wheelName = "e2e_hello-0.1.0-py3-none-any.whl"

// buildWheel writes a minimal pure-Python wheel (with a correct RECORD) and
// returns its bytes.
func buildWheel(t *testing.T) []byte {
	t.Helper()
	files := []struct{ name, body string }{
		{"e2e_hello/__init__.py", "GREETING = 'hello from the nora-breaker e2e wheel'\n"},
		{"e2e_hello-0.1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: e2e-hello\nVersion: 0.1.0\n"},
		{"e2e_hello-0.1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: nora-breaker-e2e\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var buf, record bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, f := range files {
		w, err := zw.Create(f.name)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(f.body))
		sum := sha256.Sum256([]byte(f.body))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.name, base64.RawURLEncoding.EncodeToString(sum[:]), len(f.body))
	}
	record.WriteString("e2e_hello-0.1.0.dist-info/RECORD,,\n")
	w, _ := zw.Create("e2e_hello-0.1.0.dist-info/RECORD")
	w.Write(record.Bytes())
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// writePyIndex lays out a PEP 503 index of the one wheel in root; its link
// to the wheel is linkBase + "packages/<wheel>#sha256=…".
func writePyIndex(t *testing.T, root, linkBase string, wheel []byte) {
	t.Helper()
	sum := sha256.Sum256(wheel)
	writeFile(t, filepath.Join(root, "packages", wheelName), string(wheel))
	writeFile(t, filepath.Join(root, "simple", "e2e-hello", "index.html"), fmt.Sprintf(
		"<!DOCTYPE html>\n<html><body>\n<a href=\"%spackages/%s#sha256=%s\">%s</a>\n</body></html>\n",
		linkBase, wheelName, hex.EncodeToString(sum[:]), wheelName))
}

// startPyIndex lays out a PEP 503 index in dir/name, with a relative link
// to the wheel, and serves it (serveDir); it returns the address.
func startPyIndex(t *testing.T, dir, name string, wheel []byte) string {
	t.Helper()
	root := filepath.Join(dir, name)
	writePyIndex(t, root, "../../", wheel)
	addr, _ := serveDir(t, dir, name, root)
	waitHTTP(t, "http://"+addr+"/simple/e2e-hello/", 200, 20*time.Second)
	return addr
}

// pipEnv is the pip scenario: two PEP 503 indexes, A behind toxiproxy.
type pipEnv struct {
	dir, py        string
	env            []string
	n              *nora
	tp             *toxiproxy
	frontA, frontB *front
	run            int
}

// setupPip starts both indexes, toxiproxy and nora-breaker.
func setupPip(t *testing.T, s suite, reset, headerTimeout time.Duration) *pipEnv {
	t.Helper()
	e := &pipEnv{dir: scenarioDir(t, s)}
	wheel := buildWheel(t)
	e.frontA = newFront(t, "pypi-a", "http://"+startPyIndex(t, e.dir, "pypi-a", wheel), nil, nil)
	e.frontB = newFront(t, "pypi-b", "http://"+startPyIndex(t, e.dir, "pypi-b", wheel), nil, nil)
	e.tp = startToxiproxy(t, s, e.dir)
	toxA := e.tp.proxy(t, "pypi-a", e.frontA.addr)
	e.n = startNora(t, s, e.dir, noraOpts{
		formats: breakerTOML(2, reset, "pypi") + fmt.Sprintf(`[pypi]
proxies = ["http://pypi-a.test:8080/simple", "http://pypi-b.test:8081/simple"]
proxy_timeout = %d
`, int(headerTimeout.Seconds())),
		resolve: map[string]string{"pypi-a.test:8080": toxA, "pypi-b.test:8081": e.frontB.addr},
	})
	e.env = cleanEnv("HOME="+e.dir, "PIP_CONFIG_FILE=/dev/null")
	// The real interpreter, not a pyenv shim: the shim alone can cost seconds.
	e.py = strings.TrimSpace(mustRun(t, e.dir, e.env, time.Minute, "python3", "-c", "import sys; print(sys.executable)").out)
	return e
}

// download runs pip download through the proxy into a fresh folder (no pip
// cache); it must succeed and leave the wheel.
func (e *pipEnv) download(t *testing.T) clientRun {
	t.Helper()
	e.run++
	out := filepath.Join(e.dir, fmt.Sprintf("dl-%d", e.run))
	r := mustRun(t, e.dir, e.env, 5*time.Minute, e.py, "-m", "pip", "download", "--no-deps", "--no-cache-dir",
		"--disable-pip-version-check", "--trusted-host", "pypi-a.test", "--trusted-host", "pypi-b.test",
		"--index-url", "http://pypi-a.test:8080/simple/", "--proxy", e.n.proxyURL, "-d", out, "e2e-hello==0.1.0")
	if _, err := os.Stat(filepath.Join(out, wheelName)); err != nil {
		t.Fatalf("pip run %d downloaded no wheel: %v\n%s", e.run, err, tail(r.out, 2000))
	}
	return r
}

// TestPip: index A is blackholed by a toxiproxy timeout toxic; pip download
// still succeeds via index B, and once A's breaker is open the run no longer
// waits on A at all.
func TestPip(t *testing.T) {
	// reset_timeout must outlast one whole pip run (interpreter start-up
	// included, seconds on a busy machine): a run made while the breaker is
	// open has to meet it still open.
	const reset, headerTimeout = 15 * time.Second, 2 * time.Second
	e := setupPip(t, loadSuite(t), reset, headerTimeout)
	b := breakerCheck{n: e.n, key: "pypi:http://pypi-a.test:8080/simple", reset: reset, seen: connsOf(e.frontA)}

	e.download(t)
	if r, _ := e.frontA.count(); r < 2 {
		t.Fatalf("healthy download: index A saw %d requests, want page + file", r)
	}
	if r, _ := e.frontB.count(); r != 0 {
		t.Fatalf("healthy download reached index B (%d requests)", r)
	}

	// Blackhole A: connections are accepted, nothing ever comes back.
	e.tp.addToxic(t, "pypi-a", "blackhole", "timeout", map[string]any{"timeout": 0})
	slow := b.openUntil(t, 4, func() clientRun { return e.download(t) })
	var fast clientRun
	b.quietWhileOpen(t, func() { fast = e.download(t) })
	// pip's own timeout is 15 s per attempt, with retries; with the breaker
	// open the index page comes from B without waiting on A at all.
	if fast.wall > 10*time.Second {
		t.Fatalf("pip download with A's breaker open took %v", fast.wall)
	}
	page := e.n.lastLog(t, `"path":"/simple/e2e-hello/"`)
	if page["result"] != "fallback" || page["duration_ms"].(float64) > 1000 {
		t.Fatalf("index page with A open: want a fallback well under a second, got %v", page)
	}
	if len(e.frontB.pathsMatching(wheelName)) == 0 {
		t.Fatal("wheel was not fetched from index B")
	}
	var probe clientRun
	b.oneProbe(t, 1, func() { probe = e.download(t) })

	e.tp.removeToxic(t, "pypi-a", "blackhole")
	b.oneProbe(t, 0, func() { e.download(t) })
	summary("pip download", "index A blackholed (toxiproxy timeout toxic), then restored",
		fmt.Sprintf("every run ok via index B; before open %v each (proxy_timeout %v), open %.2fs, probe run %.2fs; back on A after 1 probe",
			roundAll(slow), headerTimeout, fast.wall.Seconds(), probe.wall.Seconds()),
		fast.wall, e.frontA.seen()+" "+e.frontB.seen())
}

// roundAll rounds durations to 10 ms for printing.
func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(10 * time.Millisecond)
	}
	return out
}
