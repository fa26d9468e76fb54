//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The OCI clients scenario: two registries (docker-registry, HTTPS through
// fronts, each behind a toxiproxy listener) holding the same three objects,
// copied from A to B so their digests are equal: an image, an artifact of
// one file pushed with oras, and a Helm chart pushed with helm.
const (
	ociKeyA = "docker:https://registry-a.test:5000"
	ociKeyB = "docker:https://registry-b.test:5001"

	// ociThreshold and ociReset are every OCI nora's breaker settings: no
	// probe falls inside a case.
	ociThreshold = 2
	ociReset     = 60 * time.Second

	notesFile  = "notes.txt"
	notesBody  = "release notes of the nora-breaker e2e artifact\n"
	chartName  = "e2e-chart"
	chartVer   = "0.1.0"
	imageRepo  = "e2e/hello:1"
	notesRepo  = "e2e/notes:1"
	chartsRepo = "charts/" + chartName + ":" + chartVer
)

// ociEnv is the scenario's registries and what they hold.
type ociEnv struct {
	s                        suite
	dir, crane, oras, helm   string
	ca                       *originCA
	tp                       *toxiproxy
	toxA, toxB               string
	frontA, frontB           *front
	imageDigest, notesDigest string
	chartDigest, chartTgz    string // the chart's manifest digest; the packaged chart helm pushed
	runs                     int
	registryA, registryB     string // docker-registry host:port, plain HTTP
}

// setupOCI starts both registries, pushes the three objects to A, copies
// them to B, checks B's digests equal A's, and starts fronts and toxiproxy.
func setupOCI(t *testing.T, s suite) *ociEnv {
	t.Helper()
	e := &ociEnv{s: s, dir: scenarioDir(t, s), crane: filepath.Join(s.tools, "crane"),
		oras: filepath.Join(s.tools, "oras"), helm: filepath.Join(s.tools, "helm")}
	e.registryA = startDockerRegistry(t, e.dir, "registry-a")
	e.registryB = startDockerRegistry(t, e.dir, "registry-b")
	plain := cleanEnv("HOME=" + e.dir)
	fileLayer(t, filepath.Join(e.dir, "layer.tar"), helloFile, helloBody)
	pushImage(t, e.dir, e.crane, plain, "layer.tar", e.registryA+"/"+imageRepo)

	writeFile(t, filepath.Join(e.dir, "notes", notesFile), notesBody)
	mustRun(t, filepath.Join(e.dir, "notes"), plain, time.Minute, e.oras, "push", "--plain-http",
		"--artifact-type", "application/vnd.nora-breaker.e2e.notes.v1", e.registryA+"/"+notesRepo, notesFile+":text/plain")

	helmEnv := slices.Concat(plain, helmDirs(filepath.Join(e.dir, "helm-push")))
	e.chartTgz = packageChart(t, e.dir, e.helm, helmEnv)
	mustRun(t, e.dir, helmEnv, time.Minute, e.helm, "push", e.chartTgz, "oci://"+e.registryA+"/charts", "--plain-http")

	for _, repo := range []string{imageRepo, notesRepo, chartsRepo} {
		mustRun(t, e.dir, plain, time.Minute, e.oras, "cp", "--from-plain-http", "--to-plain-http",
			e.registryA+"/"+repo, e.registryB+"/"+repo)
		a := registryDigest(t, e.dir, e.crane, plain, e.registryA+"/"+repo)
		if b := registryDigest(t, e.dir, e.crane, plain, e.registryB+"/"+repo); a != b {
			t.Fatalf("%s: registry B has digest %s, A %s", repo, b, a)
		}
		switch repo {
		case imageRepo:
			e.imageDigest = a
		case notesRepo:
			e.notesDigest = a
		default:
			e.chartDigest = a
		}
	}

	e.ca = newOriginCA(t, e.dir)
	e.frontA = newFront(t, "registry-a", "http://"+e.registryA, nil, e.ca.serverTLS(t, "registry-a.test"))
	e.frontB = newFront(t, "registry-b", "http://"+e.registryB, nil, e.ca.serverTLS(t, "registry-b.test"))
	e.tp = startToxiproxy(t, s, e.dir)
	e.toxA = e.tp.proxy(t, "registry-a", e.frontA.addr)
	e.toxB = e.tp.proxy(t, "registry-b", e.frontB.addr)
	return e
}

// packageChart writes a chart of one ConfigMap and packages it with helm;
// it returns the packaged chart's path.
func packageChart(t *testing.T, dir, helm string, env []string) string {
	t.Helper()
	src := filepath.Join(dir, "chart-src", chartName)
	writeFile(t, filepath.Join(src, "Chart.yaml"), fmt.Sprintf("apiVersion: v2\nname: %s\nversion: %s\ndescription: nora-breaker e2e chart\n", chartName, chartVer))
	writeFile(t, filepath.Join(src, "templates", "configmap.yaml"),
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: e2e\ndata:\n  hello: world\n")
	mustRun(t, dir, env, time.Minute, helm, "package", src, "-d", dir)
	return filepath.Join(dir, chartName+"-"+chartVer+".tgz")
}

// helmDirs points every folder helm reads or writes into root.
func helmDirs(root string) []string {
	return []string{"HELM_CACHE_HOME=" + filepath.Join(root, "cache"), "HELM_CONFIG_HOME=" + filepath.Join(root, "config"),
		"HELM_DATA_HOME=" + filepath.Join(root, "data"), "HELM_REGISTRY_CONFIG=" + filepath.Join(root, "registry.json")}
}

// startOCINora starts a nora-breaker with a stale cache of its own and
// the docker chain A, then B.
func (e *ociEnv) startOCINora(t *testing.T, name string) *nora {
	t.Helper()
	return startNora(t, e.s, filepath.Join(e.dir, name), noraOpts{
		formats: breakerTOML(ociThreshold, ociReset, "docker") + `[docker]
proxy_timeout = 5
read_timeout = 5
[[docker.upstreams]]
url = "https://registry-a.test:5000"
[[docker.upstreams]]
url = "https://registry-b.test:5001"
`,
		resolve:    map[string]string{"registry-a.test:5000": e.toxA, "registry-b.test:5001": e.toxB},
		upstreamCA: e.ca.pemPath,
		stale:      true,
	})
}

// setDown makes registry "a" or "b" refuse connections, or accept them again.
func (e *ociEnv) setDown(t *testing.T, down bool, which ...string) {
	t.Helper()
	for _, w := range which {
		e.tp.setEnabled(t, "registry-"+w, !down)
	}
}

// runDir is a fresh folder for one client run.
func (e *ociEnv) runDir(t *testing.T, client string) string {
	t.Helper()
	e.runs++
	dir := filepath.Join(e.dir, fmt.Sprintf("%s-%d", client, e.runs))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestOCIClients: skopeo copies the image, oras pulls the artifact and
// helm pulls the chart (oci://), each through a nora of its own: healthy
// (from A), with A refusing connections (from B) and with both refusing
// (from stale copies), each time into a fresh folder; the digests and the
// files are the origin's. Then a manifest one client stored served from
// stale to another (skopeo → containerd, containerd → skopeo).
func TestOCIClients(t *testing.T) {
	e := setupOCI(t, loadSuite(t))
	for _, c := range e.clients() {
		t.Run(c.id, func(t *testing.T) { ociClientCases(t, e, c) })
	}
	t.Run("stale-across-clients", func(t *testing.T) { ociStaleAcrossClients(t, e) })
}

// ociClientCases is one client's three cases on a nora of its own.
func ociClientCases(t *testing.T, e *ociEnv, c ociClient) {
	n := e.startOCINora(t, "nora-"+c.id)
	defer n.proc.stop()
	defer e.setDown(t, false, "a", "b")

	marks := []frontMark{markFront(e.frontA), markFront(e.frontB)}
	a0, _ := e.frontA.count()
	b0, _ := e.frontB.count()
	healthy := c.mustFetch(t, n, "healthy")
	if a1, _ := e.frontA.count(); a1 == a0 {
		t.Fatal("healthy: registry A saw no request")
	}
	if b1, _ := e.frontB.count(); b1 != b0 {
		t.Fatalf("healthy: registry B saw %d requests", b1-b0)
	}
	untouched(t, n, ociKeyA, "healthy")
	n.waitStaleCommitted(t)

	e.setDown(t, true, "a")
	b1, _ := e.frontB.count()
	down := c.mustFetch(t, n, "registry A refusing connections")
	if b2, _ := e.frontB.count(); b2 == b1 {
		t.Fatal("registry A refusing connections: nothing was served by registry B")
	}
	if n.metric(t, "nora_sidecar_fallback_total", fmt.Sprintf("from=%q", ociKeyA), fmt.Sprintf("to=%q", ociKeyB)) == 0 {
		t.Fatal("registry A refusing connections: no fallback to B counted")
	}
	n.waitStaleCommitted(t)

	e.setDown(t, true, "b")
	stale0 := n.metric(t, "nora_sidecar_stale_served_total")
	stale := c.mustFetch(t, n, "both registries refusing connections")
	if n.metric(t, "nora_sidecar_stale_served_total") == stale0 {
		t.Fatal("both registries refusing connections: no answer counted as stale")
	}
	summary(c.name, "registry A refusing connections, then B too",
		fmt.Sprintf("healthy %.2fs; from B %.2fs; from stale copies %.2fs; %s", healthy.wall.Seconds(), down.wall.Seconds(),
			stale.wall.Seconds(), c.compared),
		healthy.wall+down.wall+stale.wall, seenSince(marks...))
}

// ociStaleAcrossClients: with both registries down, a pull by containerd
// (a HEAD of the tag, then GETs with its Accept list) is served from the
// copies skopeo stored (GETs with another Accept list), and the reverse.
// Each direction is a case of its own; the second needs a /v2/ ping
// answered from stale too, which no containerd pull stores: it is made from
// the registry's answers to containerd's tokenless requests.
func ociStaleAcrossClients(t *testing.T, e *ociEnv) {
	skopeo := e.clients()[0]
	ref := "registry-a.test:5000/" + imageRepo
	ctrPull := func(t *testing.T, n *nora) (clientRun, string) {
		c := startContainerd(t, e.runDir(t, "containerd"), containerdTrust{proxyURL: n.proxyURL, noraCA: n.caPEM,
			hosts: []string{"registry-a.test:5000"}})
		defer c.proc.stop()
		r := c.pull(t, ref, "")
		if r.err != nil {
			return r, ""
		}
		return r, c.digest(t, ref)
	}
	var wall time.Duration
	var served []string
	marks := []frontMark{markFront(e.frontA), markFront(e.frontB)}

	t.Run("skopeo-then-containerd", func(t *testing.T) {
		n := e.startOCINora(t, "nora-skopeo-then-ctr")
		defer n.proc.stop()
		defer e.setDown(t, false, "a", "b")
		skopeo.mustFetch(t, n, "healthy, skopeo")
		n.waitStaleCommitted(t)
		e.setDown(t, true, "a", "b")
		r, d := ctrPull(t, n)
		wall += r.wall
		if d != e.imageDigest {
			t.Fatalf("both registries down: containerd pull of %s after skopeo stored it: digest %q, want %s (%v)\n%s",
				ref, d, e.imageDigest, r.err, tail(r.out, 2000))
		}
		served = append(served, "containerd from skopeo's copies")
	})
	t.Run("containerd-then-skopeo", func(t *testing.T) {
		// skopeo pings /v2/ before anything else; containerd never does:
		// the stale ping is the registry's answer to containerd's
		// tokenless requests (docs/behaviour.md §6.1).
		n := e.startOCINora(t, "nora-ctr-then-skopeo")
		defer n.proc.stop()
		defer e.setDown(t, false, "a", "b")
		if r, d := ctrPull(t, n); d != e.imageDigest {
			t.Fatalf("healthy containerd pull: digest %q, want %s (%v)\n%s", d, e.imageDigest, r.err, tail(r.out, 2000))
		}
		n.waitStaleCommitted(t)
		e.setDown(t, true, "a", "b")
		r, err := skopeo.fetch(t, n)
		wall += r.wall
		if err != nil {
			t.Fatalf("both registries down: skopeo copy of %s after containerd stored it: %v\n%s", ref, err, tail(r.out, 2000))
		}
		served = append(served, "skopeo from containerd's copies")
	})
	if len(served) > 0 {
		summary("containerd and skopeo, each after the other", "both registries refusing connections",
			strings.Join(served, ", ")+": the image with the origin's digest", wall, seenSince(marks...))
	}
}

// manifestDigest is "sha256:<hex>" of a manifest file a client wrote.
func manifestDigest(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("manifest: %v", err)
	}
	return sha256Hex(b)
}

// lineAfter returns the rest of the first output line that starts with
// prefix ("Digest: "), trimmed.
func lineAfter(out, prefix string) string {
	for _, l := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(l), prefix); ok {
			return strings.TrimSpace(rest)
		}
	}
	return ""
}
