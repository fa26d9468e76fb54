//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// The npm registry as the other npm clients meet it: registry.npmjs.org
// (also reached as registry.yarnpkg.com, the same registry under yarn's
// name) and a mirror, npm-mirror.test, each a verdaccio behind an HTTPS
// front and a toxiproxy listener. Both verdaccios hold the same tarballs,
// packed once, so every integrity and every file can be compared with the
// origin's.
const (
	npmjsHost     = "registry.npmjs.org"
	yarnpkgHost   = "registry.yarnpkg.com"
	npmMirrorHost = "npm-mirror.test"

	npmjsKey     = "npm:https://" + npmjsHost
	npmMirrorKey = "npm:https://" + npmMirrorHost

	// npmThreshold and npmReset are every npm-client nora's breaker
	// settings: the reset is long enough that no probe falls inside a case.
	npmThreshold = 2
	npmReset     = 60 * time.Second
)

// npmPkg is one package both registries serve.
type npmPkg struct {
	name, body string // index.js holds body
	tgz        string // the tarball npm pack made
	integrity  string // dist.integrity as registry.npmjs.org's origin lists it
}

// npmRequest is one request an npm origin saw, as the client spelled it.
type npmRequest struct {
	host, path, accept string
}

// npmOrigin is the handler behind an npm front: a reverse proxy to a
// verdaccio that keeps the client's Host and says the scheme was https, so
// the tarball URLs verdaccio writes into packuments name the host and
// scheme the client used. It records every request's escaped path and
// Accept: the clients differ in both.
type npmOrigin struct {
	rp   *httputil.ReverseProxy
	mu   sync.Mutex
	seen []npmRequest
}

func newNpmOrigin(verdaccio string) *npmOrigin {
	target := &url.URL{Scheme: "http", Host: verdaccio}
	return &npmOrigin{rp: &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(target)
		pr.Out.Host = pr.In.Host
		pr.Out.Header.Set("X-Forwarded-Proto", "https")
	}}}
}

func (o *npmOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	o.seen = append(o.seen, npmRequest{host: r.Host, path: r.URL.EscapedPath(), accept: r.Header.Get("Accept")})
	o.mu.Unlock()
	o.rp.ServeHTTP(w, r)
}

// requests returns what the origin saw from index from on.
func (o *npmOrigin) requests(from int) []npmRequest {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]npmRequest(nil), o.seen[min(from, len(o.seen)):]...)
}

// count is how many requests the origin has seen.
func (o *npmOrigin) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.seen)
}

// npmRegistriesEnv is the scenario: the two registries (a is
// registry.npmjs.org, b the mirror), their fronts and toxiproxy listeners,
// and the packages both serve.
type npmRegistriesEnv struct {
	s              suite
	dir            string
	ca             *originCA
	tp             *toxiproxy
	toxA, toxB     string
	originA        *npmOrigin
	originB        *npmOrigin
	frontA, frontB *front
	pkgs           []npmPkg
	runs           int
}

// setupNpmRegistries starts both verdaccios, packs the packages once and
// publishes the same tarballs to both, and starts the fronts and toxiproxy.
func setupNpmRegistries(t *testing.T, s suite) *npmRegistriesEnv {
	t.Helper()
	checkNpmClients(t, s.work)
	e := &npmRegistriesEnv{s: s, dir: scenarioDir(t, s)}
	_, vA := startVerdaccio(t, s, filepath.Join(e.dir, "verdaccio-a"))
	_, vB := startVerdaccio(t, s, filepath.Join(e.dir, "verdaccio-b"))
	tokA, tokB := verdaccioToken(t, vA), verdaccioToken(t, vB)
	for _, name := range []string{"e2e-hello", "@e2e/scoped"} {
		p := packNpm(t, e.dir, name)
		publishTarball(t, e.dir, vA, tokA, p.tgz)
		publishTarball(t, e.dir, vB, tokB, p.tgz)
		p.integrity = originIntegrity(t, vA, name)
		if other := originIntegrity(t, vB, name); other != p.integrity {
			t.Fatalf("%s: the mirror lists integrity %s, the registry %s", name, other, p.integrity)
		}
		e.pkgs = append(e.pkgs, p)
	}
	e.ca = newOriginCA(t, e.dir)
	e.originA, e.originB = newNpmOrigin(vA), newNpmOrigin(vB)
	e.frontA = newFront(t, npmjsHost, "", e.originA, e.ca.serverTLS(t, npmjsHost, yarnpkgHost))
	e.frontB = newFront(t, npmMirrorHost, "", e.originB, e.ca.serverTLS(t, npmMirrorHost))
	e.tp = startToxiproxy(t, s, e.dir)
	e.toxA = e.tp.proxy(t, "npmjs", e.frontA.addr)
	e.toxB = e.tp.proxy(t, "npm-mirror", e.frontB.addr)
	return e
}

// packNpm makes name@1.0.0 (one index.js) and packs it with npm pack.
func packNpm(t *testing.T, dir, name string) npmPkg {
	t.Helper()
	src := filepath.Join(dir, "src-"+strings.NewReplacer("@", "", "/", "-").Replace(name))
	p := npmPkg{name: name, body: "module.exports = 'hello from " + name + "';\n"}
	writeFile(t, filepath.Join(src, "package.json"), fmt.Sprintf(`{"name":%q,"version":"1.0.0","main":"index.js"}`, name))
	writeFile(t, filepath.Join(src, "index.js"), p.body)
	r := mustRun(t, src, cleanEnv("HOME="+dir), time.Minute, "npm", "pack", "--json", "--no-update-notifier",
		"--pack-destination", dir)
	// The JSON document is the output's one top-level array; npm's notices
	// (stderr, in the same capture) stand around it.
	var packed []struct{ Filename string }
	start, end := strings.Index(r.out, "[\n"), strings.LastIndex(r.out, "\n]")
	if start < 0 || end < start {
		t.Fatalf("npm pack %s printed no JSON:\n%s", name, r.out)
	}
	if err := json.Unmarshal([]byte(r.out[start:end+2]), &packed); err != nil || len(packed) != 1 {
		t.Fatalf("npm pack %s: %v:\n%s", name, err, r.out)
	}
	p.tgz = filepath.Join(dir, packed[0].Filename)
	return p
}

// publishTarball publishes a packed tarball straight to a verdaccio.
func publishTarball(t *testing.T, dir, addr, token, tgz string) {
	t.Helper()
	rc := filepath.Join(dir, "publish-"+strings.ReplaceAll(addr, ":", "_")+".npmrc")
	writeFile(t, rc, fmt.Sprintf("//%s/:_authToken=%s\n", addr, token))
	mustRun(t, dir, cleanEnv("HOME="+dir, "NPM_CONFIG_USERCONFIG="+rc), 2*time.Minute,
		"npm", "publish", tgz, "--registry", "http://"+addr+"/", "--access", "public")
}

// originIntegrity is dist.integrity of name@1.0.0, asked of a verdaccio itself.
func originIntegrity(t *testing.T, addr, name string) string {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}
	resp, err := c.Get("http://" + addr + "/" + strings.Replace(name, "/", "%2f", 1))
	if err != nil {
		t.Fatalf("packument of %s: %v", name, err)
	}
	defer resp.Body.Close()
	var doc struct {
		Versions map[string]struct {
			Dist struct{ Integrity string }
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil || doc.Versions["1.0.0"].Dist.Integrity == "" {
		t.Fatalf("packument of %s: status %d, %v", name, resp.StatusCode, err)
	}
	return doc.Versions["1.0.0"].Dist.Integrity
}

// startNpmNora starts a nora-breaker with its own stale cache whose npm
// chain is registry.npmjs.org, then the mirror. registry.yarnpkg.com
// resolves to registry.npmjs.org's listener: it is the same registry.
func (e *npmRegistriesEnv) startNpmNora(t *testing.T, name string) *nora {
	t.Helper()
	return startNora(t, e.s, filepath.Join(e.dir, name), noraOpts{
		formats: breakerTOML(npmThreshold, npmReset, "npm") + `[npm]
proxies = ["https://registry.npmjs.org", "https://npm-mirror.test"]
proxy_timeout = 5
`,
		resolve:    map[string]string{npmjsHost + ":443": e.toxA, yarnpkgHost + ":443": e.toxA, npmMirrorHost + ":443": e.toxB},
		upstreamCA: e.ca.pemPath,
		stale:      true,
	})
}

// setDown makes registry.npmjs.org ("a") or the mirror ("b") refuse
// connections, or accept them again.
func (e *npmRegistriesEnv) setDown(t *testing.T, down bool, which ...string) {
	t.Helper()
	for _, w := range which {
		e.tp.setEnabled(t, map[string]string{"a": "npmjs", "b": "npm-mirror"}[w], !down)
	}
}

// install runs client c in a fresh project (and fresh caches, store and
// HOME) that depends on pkgs at 1.0.0, through n; registry is the one the
// client is configured with, "" for the client's own default. It returns
// the run and the project folder.
func (e *npmRegistriesEnv) install(t *testing.T, n *nora, c npmClient, registry string, pkgs []npmPkg) (clientRun, string) {
	t.Helper()
	e.runs++
	run := filepath.Join(e.dir, fmt.Sprintf("%s-%d", c.id, e.runs))
	app := filepath.Join(run, "app")
	deps := map[string]string{}
	for _, p := range pkgs {
		deps[p.name] = "1.0.0"
	}
	manifest, _ := json.Marshal(map[string]any{"name": "app", "version": "1.0.0", "private": true, "dependencies": deps})
	writeFile(t, filepath.Join(app, "package.json"), string(manifest)+"\n")
	argv, env := c.prepare(t, clientSetup{tools: e.s.work, run: run, app: app, proxy: n.proxyURL, ca: n.caPEM, registry: registry})
	return runClient(t, app, env, 3*time.Minute, argv...), app
}

// mustInstall is install that must succeed and leave every package's
// files, and (where the lockfile records it) the origin's integrity, in
// the project.
func (e *npmRegistriesEnv) mustInstall(t *testing.T, n *nora, c npmClient, registry string, pkgs []npmPkg, what string) clientRun {
	t.Helper()
	r, app := e.install(t, n, c, registry, pkgs)
	if r.err != nil {
		t.Fatalf("%s: %s install: %v\n%s", what, c.name, r.err, tail(r.out, 3000))
	}
	var lock []byte
	if c.lockfile != "" {
		var err error
		if lock, err = os.ReadFile(filepath.Join(app, c.lockfile)); err != nil {
			t.Fatalf("%s: %s wrote no %s: %v", what, c.name, c.lockfile, err)
		}
	}
	for _, p := range pkgs {
		got, err := os.ReadFile(filepath.Join(app, "node_modules", p.name, "index.js"))
		if err != nil || string(got) != p.body {
			t.Fatalf("%s: %s installed %s/index.js as %q (%v), the origin's is %q", what, c.name, p.name, got, err, p.body)
		}
		if c.lockfile != "" && !strings.Contains(string(lock), p.integrity) {
			t.Fatalf("%s: %s's %s does not record the origin's integrity of %s (%s):\n%s",
				what, c.name, c.lockfile, p.name, p.integrity, tail(string(lock), 2000))
		}
	}
	return r
}

// packumentAccepts is the Accept of each packument request in reqs.
func packumentAccepts(reqs []npmRequest) map[string]string {
	out := map[string]string{}
	for _, r := range reqs {
		if !strings.Contains(r.path, "/-/") {
			out[r.path] = r.accept
		}
	}
	return out
}

// TestNpmClients: pnpm, yarn 1 and yarn 4, each with a nora of its own,
// install an unscoped and a scoped package healthy (from
// registry.npmjs.org), with registry.npmjs.org refusing connections (from
// the mirror) and with both refusing (from stale copies), fresh caches
// every time; the installed files and lockfile integrities are the
// origin's. Then the cases the known bugs block: yarn with its own default
// registry, and a scoped package stored by yarn served to pnpm.
func TestNpmClients(t *testing.T) {
	e := setupNpmRegistries(t, loadSuite(t))
	for _, c := range npmClients() {
		t.Run(c.id, func(t *testing.T) { npmClientCases(t, e, c, "https://"+npmjsHost+"/") })
	}
	// yarn 1 and 4 ask registry.yarnpkg.com when no registry is set.
	for _, c := range npmClients()[1:] {
		t.Run(c.id+"-default-registry", func(t *testing.T) {
			knownProductBug(t, "issue 22.3")
			npmClientCases(t, e, c, "")
		})
	}
	t.Run("scoped-stale-across-clients", func(t *testing.T) {
		knownProductBug(t, "issue 22.4")
		scopedStaleAcrossClients(t, e)
	})
}

// npmClientCases is one client's three cases on a nora of its own.
func npmClientCases(t *testing.T, e *npmRegistriesEnv, c npmClient, registry string) {
	n := e.startNpmNora(t, "nora-"+t.Name()[strings.LastIndex(t.Name(), "/")+1:])
	defer n.proc.stop()
	defer e.setDown(t, false, "a", "b")
	// With its registry set, a client asks registry.npmjs.org alone; yarn
	// left to its default asks registry.yarnpkg.com, and the proxy may ask
	// the origin under either name: they are one registry.
	addressed, origins := npmjsHost, []string{npmjsHost}
	if registry == "" {
		addressed, origins = yarnpkgHost, []string{yarnpkgHost, npmjsHost}
	}

	marks := []frontMark{markFront(e.frontA), markFront(e.frontB)}
	a0, b0 := e.originA.count(), e.originB.count()
	healthy := e.mustInstall(t, n, c, registry, e.pkgs, "healthy")
	seenA := e.originA.requests(a0)
	if len(seenA) < 2*len(e.pkgs) || e.originB.count() != b0 {
		t.Fatalf("healthy: registry.npmjs.org saw %d requests (want a packument and a tarball per package), the mirror %d",
			len(seenA), e.originB.count()-b0)
	}
	for _, r := range seenA {
		if !slices.Contains(origins, r.host) {
			t.Fatalf("healthy: the origin was asked for %s on host %s, the client addresses %s", r.path, r.host, addressed)
		}
	}
	t.Logf("%s packument requests (path → Accept): %v", c.name, packumentAccepts(seenA))
	untouched(t, n, npmjsKey, "healthy")
	n.waitStaleCommitted(t)

	e.setDown(t, true, "a")
	b1 := e.originB.count()
	down := e.mustInstall(t, n, c, registry, e.pkgs, "registry.npmjs.org refusing connections")
	if e.originB.count() == b1 {
		t.Fatal("registry.npmjs.org refusing connections: the install was not served by the mirror")
	}
	// From whichever key the addressed host has: yarn's host may get a
	// breaker of its own.
	if n.metric(t, "nora_sidecar_fallback_total", fmt.Sprintf("to=%q", npmMirrorKey)) == 0 {
		t.Fatal("registry.npmjs.org refusing connections: no fallback to the mirror counted")
	}
	n.waitStaleCommitted(t)

	e.setDown(t, true, "b")
	stale0 := n.metric(t, "nora_sidecar_stale_served_total")
	stale := e.mustInstall(t, n, c, registry, e.pkgs, "both registries refusing connections")
	if got := n.metric(t, "nora_sidecar_stale_served_total") - stale0; got < float64(2*len(e.pkgs)) {
		t.Fatalf("both registries refusing connections: %v answers counted as stale, want at least a packument and a tarball per package", got)
	}
	compared := "installed files"
	if c.lockfile != "" {
		compared += " and " + c.lockfile + " integrities"
	}
	summary(c.name+" install (unscoped + scoped, fresh cache each run, registry "+addressed+")",
		"registry.npmjs.org refusing connections, then the mirror too",
		fmt.Sprintf("healthy %.2fs; from the mirror %.2fs; from stale copies %.2fs; %s the origin's",
			healthy.wall.Seconds(), down.wall.Seconds(), stale.wall.Seconds(), compared),
		healthy.wall+down.wall+stale.wall, seenSince(marks...))
}

// scopedStaleAcrossClients: a scoped package installed by yarn 1 is stored
// once; with both registries down pnpm, which spells the packument's path
// /@e2e%2Fscoped where yarn spells /@e2e%2fscoped, must be served the same
// copy (RFC 3986 §6.2.2.1: the two spellings are one URL).
func scopedStaleAcrossClients(t *testing.T, e *npmRegistriesEnv) {
	clients := npmClients()
	pnpm, yarn1 := clients[0], clients[1]
	registry := "https://" + npmjsHost + "/"
	scoped := e.pkgs[1:]
	n := e.startNpmNora(t, "nora-scoped-across")
	defer n.proc.stop()
	defer e.setDown(t, false, "a", "b")

	marks := []frontMark{markFront(e.frontA), markFront(e.frontB)}
	a0 := e.originA.count()
	e.mustInstall(t, n, yarn1, registry, scoped, "healthy, yarn 1")
	a1 := e.originA.count()
	// pnpm installs the unscoped package healthy, so its Accept is known:
	// the copy yarn stored must be one pnpm's request could be served.
	e.mustInstall(t, n, pnpm, registry, e.pkgs[:1], "healthy, pnpm")
	yarnAccept, pnpmAccept := packumentAccepts(e.originA.requests(a0)[:a1-a0]), packumentAccepts(e.originA.requests(a1))
	if yarnAccept["/@e2e%2fscoped"] == "" || pnpmAccept["/e2e-hello"] != yarnAccept["/@e2e%2fscoped"] {
		t.Fatalf("the packument requests differ in more than the path's spelling: yarn 1 %v, pnpm %v", yarnAccept, pnpmAccept)
	}
	n.waitStaleCommitted(t)

	e.setDown(t, true, "a", "b")
	r := e.mustInstall(t, n, pnpm, registry, scoped, "both registries down, @e2e/scoped stored by yarn 1 as /@e2e%2fscoped")
	summary("pnpm after yarn 1 (scoped package)", "both registries refusing connections",
		"pnpm's /@e2e%2Fscoped served from the copy yarn 1 stored as /@e2e%2fscoped", r.wall, seenSince(marks...))
}
