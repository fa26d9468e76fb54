//go:build e2e

package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestCurlUploadWaitsForTheUpstream: curl uploading an artifact (`curl -T`,
// the way CI jobs push to a repository) through the interception, to an
// HTTPS upstream that speaks HTTP/2. curl asks `Expect: 100-continue` for a
// large body; the proxy passes the expectation on (docs/behaviour.md §5.5),
// so an upstream that refuses the upload (401) is never sent a byte of it
// and curl uploads nothing, and one that takes it gets every byte. Before
// the fix curl was sent the proxy's own 100 at once and uploaded the file
// into the refusal.
func TestCurlUploadWaitsForTheUpstream(t *testing.T) {
	s := loadSuite(t)
	dir := scenarioDir(t, s)
	ca := newOriginCA(t, dir)
	const host = "repo.example.test"
	const size = 4 << 20
	var mu sync.Mutex
	got := map[string]string{} // path -> "proto bytes"
	f := newFront(t, host, "", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var n int64
		if !strings.HasSuffix(r.URL.Path, "/denied-1.jar") {
			n, _ = io.Copy(io.Discard, r.Body)
		}
		mu.Lock()
		got[r.URL.Path] = fmt.Sprintf("%s %d", r.Proto, n)
		mu.Unlock()
		if n == 0 {
			w.Header().Set("Www-Authenticate", `Basic realm="releases"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}), ca.serverTLS(t, host))
	n := startNora(t, s, dir, noraOpts{
		formats:    breakerTOML(3, 10*time.Second, "maven") + "[maven]\nproxies = [\"https://" + host + "/releases\"]\n",
		resolve:    map[string]string{host + ":443": f.addr},
		upstreamCA: ca.pemPath,
	})
	artifact := filepath.Join(dir, "artifact.jar")
	if err := os.WriteFile(artifact, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	var wall time.Duration
	for _, c := range []struct{ name, want string }{
		{"denied", "401 0"},
		{"taken", fmt.Sprintf("201 %d", size)},
	} {
		path := "/releases/g/a/1/" + c.name + "-1.jar"
		r := mustRun(t, dir, cleanEnv(), 60*time.Second, "curl", "-sS", "--http1.1", "--proxy", n.proxyURL,
			"--cacert", n.caPEM, "-T", artifact, "-o", "/dev/null", "-w", "%{http_code} %{size_upload}",
			"https://"+host+path)
		wall += r.wall
		if strings.TrimSpace(r.out) != c.want {
			t.Errorf("%s: curl says %q (status, bytes uploaded), want %q", c.name, strings.TrimSpace(r.out), c.want)
		}
		mu.Lock()
		seen := got[path]
		mu.Unlock()
		if want := "HTTP/2.0 " + strings.Fields(c.want)[1]; seen != want {
			t.Errorf("%s: the upstream saw %q (protocol, bytes), want %q", c.name, seen, want)
		}
	}
	summary("curl -T through the interception to an HTTP/2 upstream", "none",
		"a refused upload sent nothing, a taken one all of it", wall, f.seen())
}
