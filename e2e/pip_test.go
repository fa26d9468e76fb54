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
	"strconv"
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

// startPyIndex lays out a PEP 503 index in dir/name and serves it with
// python3 -m http.server; it returns the server's address.
func startPyIndex(t *testing.T, dir, name string, wheel []byte) string {
	t.Helper()
	root := filepath.Join(dir, name)
	sum := sha256.Sum256(wheel)
	writeFile(t, filepath.Join(root, "packages", wheelName), string(wheel))
	writeFile(t, filepath.Join(root, "simple", "e2e-hello", "index.html"), fmt.Sprintf(
		"<!DOCTYPE html>\n<html><body>\n<a href=\"../../packages/%s#sha256=%s\">%s</a>\n</body></html>\n",
		wheelName, hex.EncodeToString(sum[:]), wheelName))
	port := freePort(t)
	startProc(t, dir, name, cleanEnv(), "python3", "-m", "http.server", "--protocol", "HTTP/1.1",
		"--bind", "127.0.0.1", "--directory", root, strconv.Itoa(port))
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	waitHTTP(t, "http://"+addr+"/simple/e2e-hello/", 200, 20*time.Second)
	return addr
}

// TestPip: two PEP 503 indexes; index A is blackholed by a toxiproxy timeout
// toxic; pip download still succeeds via index B, and once A's breaker is
// open the run takes a fraction of pip's own timeout.
func TestPip(t *testing.T) {
	s := loadSuite(t)
	dir := scenarioDir(t, s)
	const reset = 5 * time.Second
	const headerTimeout = 2 * time.Second
	keyA := "pypi:http://pypi-a.test:8080/simple"

	wheel := buildWheel(t)
	frontA := newFront(t, "pypi-a", "http://"+startPyIndex(t, dir, "pypi-a", wheel), nil, nil)
	frontB := newFront(t, "pypi-b", "http://"+startPyIndex(t, dir, "pypi-b", wheel), nil, nil)
	tp := startToxiproxy(t, s, dir)
	toxA := tp.proxy(t, "pypi-a", frontA.addr)
	n := startNora(t, s, dir, noraOpts{
		formats: fmt.Sprintf(`[circuit_breaker]
enabled = true
failure_threshold = 2
reset_timeout = %d
[registries]
enable = "pypi"
[pypi]
proxies = ["http://pypi-a.test:8080/simple", "http://pypi-b.test:8081/simple"]
proxy_timeout = %d
`, int(reset.Seconds()), int(headerTimeout.Seconds())),
		resolve: map[string]string{"pypi-a.test:8080": toxA, "pypi-b.test:8081": frontB.addr},
	})
	env := cleanEnv("HOME="+dir, "PIP_CONFIG_FILE=/dev/null")
	run := 0
	download := func() clientRun {
		run++
		out := filepath.Join(dir, fmt.Sprintf("dl-%d", run))
		r := mustRun(t, dir, env, 5*time.Minute, "pip", "download", "--no-deps", "--no-cache-dir",
			"--disable-pip-version-check", "--trusted-host", "pypi-a.test", "--trusted-host", "pypi-b.test", "--index-url", "http://pypi-a.test:8080/simple/",
			"--proxy", n.proxyURL, "-d", out, "e2e-hello==0.1.0")
		if _, err := os.Stat(filepath.Join(out, wheelName)); err != nil {
			t.Fatalf("pip run %d downloaded no wheel: %v\n%s", run, err, tail(r.out, 2000))
		}
		return r
	}

	download()
	if r, _ := frontA.count(); r < 2 {
		t.Fatalf("healthy download: index A saw %d requests, want page + file", r)
	}
	if r, _ := frontB.count(); r != 0 {
		t.Fatalf("healthy download reached index B (%d requests)", r)
	}

	// Blackhole A: connections are accepted, nothing ever comes back.
	tp.addToxic(t, "pypi-a", "blackhole", "timeout", map[string]any{"timeout": 0})
	var slow []time.Duration
	for i := 0; n.state(t, keyA) != 1; i++ {
		if i == 4 {
			t.Fatal("breaker for index A did not open")
		}
		slow = append(slow, download().wall)
	}
	_, c0 := frontA.count()
	openedAt := time.Now()
	fast := download()
	_, c1 := frontA.count()
	if allowed := int64(time.Since(openedAt) / reset); c1-c0 > allowed {
		t.Fatalf("open breaker let %d connections reach index A (allowed %d)", c1-c0, allowed)
	}
	// pip's own timeout is 15 s per attempt with retries; open, it is the proxy's answer.
	if fast.wall > 5*time.Second {
		t.Fatalf("pip download with A's breaker open took %v", fast.wall)
	}
	if len(frontB.pathsMatching(wheelName)) == 0 {
		t.Fatal("wheel was not fetched from index B")
	}

	// One probe per reset_timeout while A is still blackholed.
	n.waitProbeDue(t, keyA, reset)
	probe := download()
	_, c2 := frontA.count()
	if c2-c1 != 1 {
		t.Fatalf("probe while blackholed: A saw %d connections, want 1", c2-c1)
	}

	// A back: one probe closes the breaker.
	tp.removeToxic(t, "pypi-a", "blackhole")
	n.waitProbeDue(t, keyA, reset)
	download()
	if n.state(t, keyA) != 0 || n.transitions(t, keyA, "half_open", "closed") != 1 {
		t.Fatal("breaker did not close on the first probe after A came back")
	}
	summary("pip download", "index A blackholed (toxiproxy timeout toxic), then restored",
		fmt.Sprintf("ok via index B; before open %v each (proxy_timeout %v), open %.2fs, probe run %.2fs; closed after restore",
			roundAll(slow), headerTimeout, fast.wall.Seconds(), probe.wall.Seconds()),
		fast.wall, frontA.seen()+" "+frontB.seen())
}

// roundAll rounds durations to 10 ms for printing.
func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(10 * time.Millisecond)
	}
	return out
}
