//go:build e2e

package e2e

import (
	"archive/tar"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// scenarioDir is a fresh scratch folder for one scenario under E2E_WORK, kept
// after the run so its logs can be read.
func scenarioDir(t *testing.T, s suite) string {
	t.Helper()
	dir := filepath.Join(s.work, "run", t.Name())
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// startDockerRegistry runs CNCF distribution on a loopback port, plain HTTP.
func startDockerRegistry(t *testing.T, dir, name string) string {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cfg := filepath.Join(dir, name+".yml")
	writeFile(t, cfg, fmt.Sprintf(`version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: %s
http:
  addr: %s
`, filepath.Join(dir, name+"-data"), addr))
	startProc(t, dir, name, cleanEnv(), "docker-registry", "serve", cfg)
	waitHTTP(t, "http://"+addr+"/v2/", 200, 20*time.Second)
	return addr
}

// layerTar is a one-file layer for the test image.
func layerTar(t *testing.T, path string) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	body := []byte("hello from the nora-breaker e2e image\n")
	if err := tw.WriteHeader(&tar.Header{Name: "hello.txt", Mode: 0o644, Size: int64(len(body)), ModTime: time.Unix(0, 0)}); err != nil {
		t.Fatal(err)
	}
	tw.Write(body)
	tw.Close()
	writeFile(t, path, buf.String())
}

// TestDocker: two registries with the same image; crane and skopeo pull
// through the proxy; registry A is cut by toxiproxy (reset_peer), pulls go
// on from B, A sees nothing but one probe per reset_timeout, and when A is
// back one probe closes its breaker.
func TestDocker(t *testing.T) {
	s := loadSuite(t)
	dir := scenarioDir(t, s)
	const reset = 5 * time.Second
	keyA := "docker:https://registry-a.test:5000"

	regA := startDockerRegistry(t, dir, "registry-a")
	regB := startDockerRegistry(t, dir, "registry-b")
	crane := filepath.Join(s.tools, "crane")
	plain := cleanEnv("HOME=" + dir)
	layerTar(t, filepath.Join(dir, "layer.tar"))
	mustRun(t, dir, plain, time.Minute, crane, "append", "--insecure", "-f", "layer.tar", "-t", regA+"/e2e/hello:1")
	mustRun(t, dir, plain, time.Minute, crane, "copy", "--insecure", regA+"/e2e/hello:1", regB+"/e2e/hello:1")

	ca := newOriginCA(t, dir)
	frontA := newFront(t, "registry-a", "http://"+regA, nil, ca.serverTLS(t, "registry-a.test"))
	frontB := newFront(t, "registry-b", "http://"+regB, nil, ca.serverTLS(t, "registry-b.test"))
	tp := startToxiproxy(t, s, dir)
	toxA := tp.proxy(t, "registry-a", frontA.addr)

	n := startNora(t, s, dir, noraOpts{
		formats: fmt.Sprintf(`[circuit_breaker]
enabled = true
failure_threshold = 3
reset_timeout = %d
[registries]
enable = "docker"
[docker]
proxy_timeout = 5
read_timeout = 5
[[docker.upstreams]]
url = "https://registry-a.test:5000"
[[docker.upstreams]]
url = "https://registry-b.test:5001"
`, int(reset.Seconds())),
		resolve:    map[string]string{"registry-a.test:5000": toxA, "registry-b.test:5001": frontB.addr},
		upstreamCA: ca.pemPath,
	})
	certDir := filepath.Join(dir, "skopeo-certs")
	caPEM, _ := os.ReadFile(n.caPEM)
	writeFile(t, filepath.Join(certDir, "nora-ca.crt"), string(caPEM))
	env := cleanEnv("HOME="+dir, "HTTPS_PROXY="+n.proxyURL, "HTTP_PROXY="+n.proxyURL, "SSL_CERT_FILE="+n.bundle)
	image := "registry-a.test:5000/e2e/hello:1"
	pull := func() clientRun {
		os.Remove(filepath.Join(dir, "pulled.tar"))
		return mustRun(t, dir, env, 2*time.Minute, crane, "pull", image, "pulled.tar")
	}
	inspect := func() clientRun {
		return mustRun(t, dir, env, 2*time.Minute, "skopeo", "--insecure-policy", "inspect", "--cert-dir", certDir, "docker://"+image)
	}

	// Healthy: everything comes from A.
	pull()
	if out := inspect().out; !strings.Contains(out, `"Digest"`) {
		t.Fatalf("skopeo inspect printed no digest:\n%s", out)
	}
	if r, _ := frontA.count(); r == 0 {
		t.Fatal("healthy pull did not reach registry A")
	}
	if r, _ := frontB.count(); r != 0 {
		t.Fatalf("healthy pull reached registry B (%d requests)", r)
	}

	// Cut A: every connection toxiproxy accepts for it is reset.
	tp.addToxic(t, "registry-a", "cut", "reset_peer", map[string]any{"timeout": 0})
	var outage time.Duration
	for i := 0; n.state(t, keyA) != 1; i++ {
		if i == 5 {
			t.Fatalf("breaker %s not open after 5 pulls", keyA)
		}
		outage += pull().wall
	}
	openedAt := time.Now()
	_, connsAtOpen := frontA.count()
	bBefore, _ := frontB.count()
	for i := 0; i < 3; i++ {
		outage += pull().wall
	}
	outage += inspect().wall
	_, connsOpen := frontA.count()
	allowed := int64(time.Since(openedAt) / reset)
	if connsOpen-connsAtOpen > allowed {
		t.Fatalf("open breaker let %d connections reach A in %v (allowed %d probes)", connsOpen-connsAtOpen, time.Since(openedAt), allowed)
	}
	if bAfter, _ := frontB.count(); bAfter <= bBefore {
		t.Fatal("pulls during the outage were not served by registry B")
	}
	if n.metric(t, "nora_sidecar_fallback_total", fmt.Sprintf("from=%q", keyA)) == 0 {
		t.Fatal("no fallback counted from A")
	}
	if n.metric(t, "nora_circuit_breaker_rejections_total", fmt.Sprintf("registry=%q", keyA)) == 0 {
		t.Fatal("no rejection counted for A while open")
	}

	// Still cut after reset_timeout: exactly one probe reaches A, fails, and
	// the pull is still served by B.
	n.waitProbeDue(t, keyA, reset)
	_, c0 := frontA.count()
	reopen0 := n.transitions(t, keyA, "half_open", "open")
	pull()
	_, c1 := frontA.count()
	if c1-c0 != 1 {
		t.Fatalf("probe while cut: A saw %d connections, want exactly 1", c1-c0)
	}
	if n.transitions(t, keyA, "half_open", "open") != reopen0+1 || n.state(t, keyA) != 1 {
		t.Fatal("failed probe did not reopen the breaker")
	}

	// A back: one probe closes the breaker and traffic returns to A.
	tp.removeToxic(t, "registry-a", "cut")
	n.waitProbeDue(t, keyA, reset)
	aReq0, _ := frontA.count()
	bReq0, _ := frontB.count()
	rec := pull()
	aReq1, _ := frontA.count()
	bReq1, _ := frontB.count()
	if n.state(t, keyA) != 0 || n.transitions(t, keyA, "half_open", "closed") != 1 {
		t.Fatalf("breaker did not close after A came back (state %v)", n.state(t, keyA))
	}
	if aReq1 == aReq0 || bReq1 != bReq0 {
		t.Fatalf("after recovery A saw %d and B %d new requests; want A>0, B=0", aReq1-aReq0, bReq1-bReq0)
	}
	summary("crane pull + skopeo inspect", "registry A reset_peer (toxiproxy), then restored",
		fmt.Sprintf("all pulls ok; A open after threshold, %d probe(s) while cut, closed on 1st probe after restore (%.2fs)", c1-c0, rec.wall.Seconds()),
		outage, frontA.seen()+" "+frontB.seen())
}
