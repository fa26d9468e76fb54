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

// TestSlowClientUploadIsNotTheUpstreamsFault: curl uploading 3 MiB at
// 512 KiB/s (`--limit-rate`: a CI runner on a slow link), so the upload
// takes about six times the repository's proxy_timeout of 1 s, through the
// interception to an HTTPS repository on HTTP/2. The header wait is paused
// while the proxy waits for the client's body (docs/behaviour.md §5.1), so
// the upload reaches the repository whole, is answered 201, and the
// repository's breaker counts no failure; done three times, past the
// threshold of 2, the breaker stays closed.
func TestSlowClientUploadIsNotTheUpstreamsFault(t *testing.T) {
	s := loadSuite(t)
	dir := scenarioDir(t, s)
	ca := newOriginCA(t, dir)
	const host = "repo.example.test"
	const size = 3 << 20
	var mu sync.Mutex
	got := map[string]int64{}
	f := newFront(t, host, "", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		mu.Lock()
		got[r.URL.Path] = n
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}), ca.serverTLS(t, host))
	const key = "maven:https://" + host + "/releases"
	n := startNora(t, s, dir, noraOpts{
		formats:    breakerTOML(2, 60*time.Second, "maven") + "[maven]\nproxy_timeout = 1\nproxies = [\"https://" + host + "/releases\"]\n",
		resolve:    map[string]string{host + ":443": f.addr},
		upstreamCA: ca.pemPath,
	})
	artifact := filepath.Join(dir, "artifact.jar")
	if err := os.WriteFile(artifact, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	var wall time.Duration
	for i := range 3 {
		path := fmt.Sprintf("/releases/g/a/1/slow-%d.jar", i)
		r := mustRun(t, dir, cleanEnv(), 60*time.Second, "curl", "-sS", "--proxy", n.proxyURL, "--limit-rate", "512k",
			"--cacert", n.caPEM, "-T", artifact, "-o", "/dev/null", "-w", "%{http_code} %{size_upload}", "https://"+host+path)
		wall += r.wall
		if want := fmt.Sprintf("201 %d", size); strings.TrimSpace(r.out) != want {
			t.Errorf("upload %d: curl says %q (status, bytes uploaded) after %s, want %q", i, strings.TrimSpace(r.out), r.wall, want)
		}
		mu.Lock()
		seen := got[path]
		mu.Unlock()
		if seen != size {
			t.Errorf("upload %d: the repository read %d bytes, want %d", i, seen, size)
		}
	}
	if b := n.breaker(t, key); b.State != "closed" || b.FailureCount != 0 {
		t.Errorf("after three slow uploads the repository's breaker is %s with %d failures, want closed with none", b.State, b.FailureCount)
	}
	summary("curl -T --limit-rate 512k (3 MiB, about 6 s) through the interception, proxy_timeout 1 s", "a slow client",
		"every upload taken whole, the breaker closed with no failure", wall, f.seen())
}
