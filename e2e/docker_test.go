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

// startDockerRegistry runs CNCF distribution on a loopback port it picks
// itself (port 0), plain HTTP, and returns the address it got.
func startDockerRegistry(t *testing.T, dir, name string) string {
	t.Helper()
	cfg := filepath.Join(dir, name+".yml")
	writeFile(t, cfg, fmt.Sprintf(`version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: %s
http:
  addr: 127.0.0.1:0
`, filepath.Join(dir, name+"-data")))
	addr := startProc(t, dir, name, cleanEnv(), "docker-registry", "serve", cfg).listening(t, 20*time.Second)
	waitHTTP(t, "http://"+addr+"/v2/", 200, 20*time.Second)
	return addr
}

// dockerEnv is the docker scenario: two registries with the same image,
// A behind toxiproxy, both behind counting fronts, nora-breaker in front.
type dockerEnv struct {
	dir, crane, certDir string
	env                 []string
	n                   *nora
	tp                  *toxiproxy
	frontA, frontB      *front
	digest              string // the test image's manifest digest, as registry A has it
}

const dockerImage = "registry-a.test:5000/e2e/hello:1"

// setupDocker starts the registries, pushes the image to A and copies it to
// B with crane, and starts toxiproxy and nora-breaker.
func setupDocker(t *testing.T, s suite, reset time.Duration) *dockerEnv {
	t.Helper()
	e := &dockerEnv{dir: scenarioDir(t, s), crane: filepath.Join(s.tools, "crane")}
	regA := startDockerRegistry(t, e.dir, "registry-a")
	regB := startDockerRegistry(t, e.dir, "registry-b")
	plain := cleanEnv("HOME=" + e.dir)
	fileLayer(t, filepath.Join(e.dir, "layer.tar"), helloFile, helloBody)
	pushImage(t, e.dir, e.crane, plain, "layer.tar", regA+"/e2e/hello:1")
	mustRun(t, e.dir, plain, time.Minute, e.crane, "copy", "--insecure", regA+"/e2e/hello:1", regB+"/e2e/hello:1")
	e.digest = registryDigest(t, e.dir, e.crane, plain, regA+"/e2e/hello:1")

	ca := newOriginCA(t, e.dir)
	e.frontA = newFront(t, "registry-a", "http://"+regA, nil, ca.serverTLS(t, "registry-a.test"))
	e.frontB = newFront(t, "registry-b", "http://"+regB, nil, ca.serverTLS(t, "registry-b.test"))
	e.tp = startToxiproxy(t, s, e.dir)
	toxA := e.tp.proxy(t, "registry-a", e.frontA.addr)
	e.n = startNora(t, s, e.dir, noraOpts{
		formats: breakerTOML(3, reset, "docker") + `[docker]
proxy_timeout = 5
read_timeout = 5
[[docker.upstreams]]
url = "https://registry-a.test:5000"
[[docker.upstreams]]
url = "https://registry-b.test:5001"
`,
		resolve:    map[string]string{"registry-a.test:5000": toxA, "registry-b.test:5001": e.frontB.addr},
		upstreamCA: ca.pemPath,
	})
	// skopeo takes CAs from a folder of *.crt files; crane from SSL_CERT_FILE.
	e.certDir = filepath.Join(e.dir, "skopeo-certs")
	caPEM, _ := os.ReadFile(e.n.caPEM)
	writeFile(t, filepath.Join(e.certDir, "nora-ca.crt"), string(caPEM))
	e.env = cleanEnv("HOME="+e.dir, "HTTPS_PROXY="+e.n.proxyURL, "HTTP_PROXY="+e.n.proxyURL, "SSL_CERT_FILE="+e.n.bundle)
	return e
}

// pull runs crane pull through the proxy; it must succeed.
func (e *dockerEnv) pull(t *testing.T) clientRun {
	t.Helper()
	os.Remove(filepath.Join(e.dir, "pulled.tar"))
	return mustRun(t, e.dir, e.env, 2*time.Minute, e.crane, "pull", dockerImage, "pulled.tar")
}

// inspect runs skopeo inspect through the proxy; it must print a digest.
func (e *dockerEnv) inspect(t *testing.T) clientRun {
	t.Helper()
	r := mustRun(t, e.dir, e.env, 2*time.Minute, "skopeo", "--insecure-policy", "inspect", "--cert-dir", e.certDir, "docker://"+dockerImage)
	if !strings.Contains(r.out, `"Digest"`) {
		t.Fatalf("skopeo inspect printed no digest:\n%s", r.out)
	}
	return r
}

// TestDocker: crane and skopeo pull through the proxy; registry A is cut by
// toxiproxy (reset_peer), pulls go on from B, A sees nothing but one probe
// per reset_timeout, and when A is back one probe closes its breaker.
func TestDocker(t *testing.T) {
	const reset = 5 * time.Second
	e := setupDocker(t, loadSuite(t), reset)
	b := breakerCheck{n: e.n, key: "docker:https://registry-a.test:5000", reset: reset, seen: connsOf(e.frontA)}

	e.pull(t)
	e.inspect(t)
	if r, _ := e.frontA.count(); r == 0 {
		t.Fatal("healthy pull did not reach registry A")
	}
	if r, _ := e.frontB.count(); r != 0 {
		t.Fatalf("healthy pull reached registry B (%d requests)", r)
	}

	// Cut A: every connection toxiproxy accepts for it is reset.
	e.tp.addToxic(t, "registry-a", "cut", "reset_peer", map[string]any{"timeout": 0})
	var outage time.Duration
	for _, w := range b.openUntil(t, 5, func() clientRun { return e.pull(t) }) {
		outage += w
	}
	bBefore, _ := e.frontB.count()
	b.quietWhileOpen(t, func() {
		for i := 0; i < 3; i++ {
			outage += e.pull(t).wall
		}
		outage += e.inspect(t).wall
	})
	if bAfter, _ := e.frontB.count(); bAfter <= bBefore {
		t.Fatal("pulls during the outage were not served by registry B")
	}
	if e.n.metric(t, "nora_sidecar_fallback_total", fmt.Sprintf("from=%q", b.key)) == 0 {
		t.Fatal("no fallback counted from A")
	}
	b.oneProbe(t, 1, func() { e.pull(t) })

	// A back: one probe closes the breaker and traffic returns to A.
	e.tp.removeToxic(t, "registry-a", "cut")
	bReq0, _ := e.frontB.count()
	var rec clientRun
	b.oneProbe(t, 0, func() { rec = e.pull(t) })
	if bReq1, _ := e.frontB.count(); bReq1 != bReq0 {
		t.Fatalf("after recovery registry B still saw %d requests", bReq1-bReq0)
	}
	summary("crane pull + skopeo inspect", "registry A connections reset (toxiproxy reset_peer), then restored",
		fmt.Sprintf("every pull ok (from B while A open; 1 probe per reset_timeout); back on A after 1 probe (%.2fs)", rec.wall.Seconds()),
		outage, e.frontA.seen()+" "+e.frontB.seen())
}
