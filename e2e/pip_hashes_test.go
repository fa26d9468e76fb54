//go:build e2e

package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPipRequireHashes: pip download --require-hashes (a lock file's
// hashes) through the proxy, pypi chain A → B, with a stale cache: healthy
// from A, with A refusing connections from B (the page served by B, its
// relative link made absolute against B), with B refusing too from stale
// copies. pip checks the wheel against the requirement's hash each time, so
// each run proves the bytes are the origin's.
func TestPipRequireHashes(t *testing.T) {
	s := loadSuite(t)
	dir := scenarioDir(t, s)
	wheel := buildWheel(t)
	sum := sha256.Sum256(wheel)
	frontA := newFront(t, "pypi-a", "http://"+startPyIndex(t, dir, "pypi-a", wheel), nil, nil)
	frontB := newFront(t, "pypi-b", "http://"+startPyIndex(t, dir, "pypi-b", wheel), nil, nil)
	tp := startToxiproxy(t, s, dir)
	toxA := tp.proxy(t, "pypi-a", frontA.addr)
	toxB := tp.proxy(t, "pypi-b", frontB.addr)
	n := startNora(t, s, filepath.Join(dir, "nora"), noraOpts{
		formats: breakerTOML(2, 60*time.Second, "pypi") + `[pypi]
proxies = ["http://pypi-a.test:8080/simple", "http://pypi-b.test:8081/simple"]
proxy_timeout = 5
`,
		resolve: map[string]string{"pypi-a.test:8080": toxA, "pypi-b.test:8081": toxB},
		stale:   true,
	})
	env := cleanEnv("HOME="+dir, "PIP_CONFIG_FILE=/dev/null")
	py := strings.TrimSpace(mustRun(t, dir, env, time.Minute, "python3", "-c", "import sys; print(sys.executable)").out)
	req := filepath.Join(dir, "requirements.txt")
	writeFile(t, req, fmt.Sprintf("e2e-hello==0.1.0 --hash=sha256:%s\n", hex.EncodeToString(sum[:])))
	var wall time.Duration
	runs := 0
	download := func(t *testing.T, what string) {
		t.Helper()
		runs++
		out := filepath.Join(dir, fmt.Sprintf("dl-%d", runs))
		r := runClient(t, dir, env, 3*time.Minute, py, "-m", "pip", "download", "--no-deps", "--no-cache-dir",
			"--disable-pip-version-check", "--retries", "0", "--trusted-host", "pypi-a.test", "--trusted-host", "pypi-b.test",
			"--index-url", "http://pypi-a.test:8080/simple/", "--proxy", n.proxyURL, "-d", out, "--require-hashes", "-r", req)
		wall += r.wall
		if r.err != nil {
			t.Fatalf("%s: pip download --require-hashes: %v\n%s", what, r.err, tail(r.out, 2000))
		}
		if _, err := os.Stat(filepath.Join(out, wheelName)); err != nil {
			t.Fatalf("%s: no wheel: %v", what, err)
		}
	}
	download(t, "healthy")
	n.waitStaleCommitted(t)
	tp.setEnabled(t, "pypi-a", false)
	b0, _ := frontB.count()
	download(t, "A refusing connections")
	if b1, _ := frontB.count(); b1 == b0 {
		t.Fatal("A refusing connections: B served nothing")
	}
	n.waitStaleCommitted(t)
	tp.setEnabled(t, "pypi-b", false)
	stale0 := n.metric(t, "nora_sidecar_stale_served_total")
	download(t, "both refusing connections")
	if n.metric(t, "nora_sidecar_stale_served_total") == stale0 {
		t.Fatal("both refusing connections: nothing served from stale")
	}
	summary("pip download --require-hashes", "index A refusing connections, then B too",
		"the wheel's hash matched each time: from A, from B, from stale copies", wall, frontA.seen()+" "+frontB.seen())
}
