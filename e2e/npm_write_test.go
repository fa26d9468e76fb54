//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"sort"
	"sync/atomic"
	"testing"
	"time"
)

// publishNpmVersion publishes name@version straight to verdaccio (not
// through the proxy).
func publishNpmVersion(t *testing.T, dir, addr, token, name, version string) {
	t.Helper()
	pkg := filepath.Join(dir, "pkg-"+name+"-"+version)
	writeFile(t, filepath.Join(pkg, "package.json"), fmt.Sprintf(`{"name":%q,"version":%q,"main":"index.js"}`, name, version))
	writeFile(t, filepath.Join(pkg, "index.js"), fmt.Sprintf("module.exports = %q;\n", version))
	rc := filepath.Join(dir, "publish-"+version+".npmrc")
	writeFile(t, rc, fmt.Sprintf("//%s/:_authToken=%s\n", addr, token))
	mustRun(t, pkg, cleanEnv("HOME="+dir, "NPM_CONFIG_USERCONFIG="+rc), 2*time.Minute,
		"npm", "publish", "--registry", "http://"+addr+"/")
}

// npmVersions is what verdaccio at addr holds of name: version → its
// deprecation message ("" for none).
func npmVersions(t *testing.T, addr, name string) map[string]string {
	t.Helper()
	resp, err := (&http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}).Get("http://" + addr + "/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc struct {
		Versions map[string]struct {
			Deprecated string `json:"deprecated"`
		} `json:"versions"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatalf("%s from %s: %d, %v", name, addr, resp.StatusCode, err)
	}
	out := map[string]string{}
	for v, m := range doc.Versions {
		out[v] = m.Deprecated
	}
	return out
}

// TestNpmDeprecateWritesBackTheAddressedRegistrysDocument: npm deprecate
// through the proxy, npm chain A → B, with B a registry that has not got
// the package's latest version (a lagging mirror). npm reads the package
// for writing (GET /<pkg>?write=true), marks the version deprecated and PUTs
// the whole document back to A. A answers that read once with a 503 (a
// passing fault; npm retries it). The document npm writes back must be
// A's: B's, written over A's package, unpublishes the version B lacks
// (verdaccio, like the npm registry, takes the versions the document
// leaves out as removed).
func TestNpmDeprecateWritesBackTheAddressedRegistrysDocument(t *testing.T) {
	s := loadSuite(t)
	dir := scenarioDir(t, s)
	const pkg = "e2e-writeback"
	_, addrA := startVerdaccio(t, s, filepath.Join(dir, "a"))
	_, addrB := startVerdaccio(t, s, filepath.Join(dir, "b"))
	tokenA := verdaccioToken(t, addrA)
	tokenB := verdaccioToken(t, addrB)
	publishNpmVersion(t, dir, addrA, tokenA, pkg, "1.0.0")
	publishNpmVersion(t, dir, addrA, tokenA, pkg, "1.1.0")
	publishNpmVersion(t, dir, addrB, tokenB, pkg, "1.0.0")

	target, _ := url.Parse("http://" + addrA)
	rp := httputil.NewSingleHostReverseProxy(target)
	var flaked atomic.Bool
	frontA := newFront(t, "verdaccio-a", "", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Query().Has("write") && flaked.CompareAndSwap(false, true) {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		rp.ServeHTTP(w, r)
	}), nil)
	frontB := newFront(t, "verdaccio-b", "http://"+addrB, nil, nil)
	n := startNora(t, s, filepath.Join(dir, "nora"), noraOpts{
		formats: breakerTOML(5, 60*time.Second, "npm") + `[npm]
proxies = ["http://npm-a.test:4873", "http://npm-b.test:4874"]
proxy_timeout = 10
`,
		resolve: map[string]string{"npm-a.test:4873": frontA.addr, "npm-b.test:4874": frontB.addr},
		stale:   true,
	})
	rc := filepath.Join(dir, "user.npmrc")
	writeFile(t, rc, fmt.Sprintf("//npm-a.test:4873/:_authToken=%s\n", tokenA))
	r := runClient(t, dir, cleanEnv("HOME="+dir, "NPM_CONFIG_USERCONFIG="+rc), 2*time.Minute,
		"npm", "deprecate", pkg+"@1.0.0", "use 1.1.0", "--registry", "http://npm-a.test:4873/",
		"--proxy", n.proxyURL, "--cache", filepath.Join(dir, "npm-cache"), "--no-update-notifier",
		"--fetch-retry-mintimeout", "100", "--fetch-retry-maxtimeout", "500")
	if r.err != nil {
		t.Errorf("npm deprecate: %v\n%s", r.err, tail(r.out, 2000))
	}
	got := npmVersions(t, addrA, pkg)
	var versions []string
	for v := range got {
		versions = append(versions, v)
	}
	sort.Strings(versions)
	if got["1.0.0"] != "use 1.1.0" || len(got) != 2 {
		t.Errorf("after npm deprecate through the proxy registry A holds %v (deprecations %v), want 1.0.0 (deprecated) and 1.1.0;"+
			" B was asked %v", versions, got, frontB.requestsMatching(pkg))
	}
	summary("npm deprecate (GET ?write=true, PUT the document back)", "A answering the read for writing 503 once; B lacking 1.1.0",
		fmt.Sprintf("A holds %v", versions), r.wall, frontA.seen()+" "+frontB.seen())
}

// TestNpmPublishGoesOnlyToTheAddressedRegistry: npm publish through the
// proxy to registry A of the npm chain A → B, with A's token in .npmrc.
// Healthy, the version lands in A. With A refusing connections, each
// publish fails (the dial error's 502, then, once A's breaker is open, the
// proxy's 503 at once), and A's token and the upload never reach B. (npm 11
// reads the package before its PUT, an ordinary GET: that read goes on to
// B without the token and is answered by A's stale 404, as an install's.)
func TestNpmPublishGoesOnlyToTheAddressedRegistry(t *testing.T) {
	s := loadSuite(t)
	dir := scenarioDir(t, s)
	const pkg = "e2e-published"
	_, addrA := startVerdaccio(t, s, filepath.Join(dir, "a"))
	tokenA := verdaccioToken(t, addrA)
	frontA := newFront(t, "verdaccio-a", "http://"+addrA, nil, nil)
	var bSaw atomic.Int64
	frontB := newFront(t, "npm-b", "", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.Header.Get("Authorization") != "" {
			bSaw.Add(1)
		}
		http.NotFound(w, r)
	}), nil)
	tp := startToxiproxy(t, s, dir)
	toxA := tp.proxy(t, "verdaccio-a", frontA.addr)
	const keyA = "npm:http://npm-a.test:4873"
	n := startNora(t, s, filepath.Join(dir, "nora"), noraOpts{
		formats: breakerTOML(2, 60*time.Second, "npm") + `[npm]
proxies = ["http://npm-a.test:4873", "http://npm-b.test:4874"]
proxy_timeout = 5
`,
		resolve: map[string]string{"npm-a.test:4873": toxA, "npm-b.test:4874": frontB.addr},
		stale:   true,
	})
	rc := filepath.Join(dir, "user.npmrc")
	writeFile(t, rc, fmt.Sprintf("//npm-a.test:4873/:_authToken=%s\n", tokenA))
	publish := func(version string) clientRun {
		p := filepath.Join(dir, "pkg-"+version)
		writeFile(t, filepath.Join(p, "package.json"), fmt.Sprintf(`{"name":%q,"version":%q,"main":"index.js"}`, pkg, version))
		writeFile(t, filepath.Join(p, "index.js"), fmt.Sprintf("module.exports = %q;\n", version))
		return runClient(t, p, cleanEnv("HOME="+dir, "NPM_CONFIG_USERCONFIG="+rc), 2*time.Minute,
			"npm", "publish", "--registry", "http://npm-a.test:4873/", "--proxy", n.proxyURL,
			"--cache", filepath.Join(dir, "npm-cache"), "--no-update-notifier", "--fetch-retries", "0")
	}
	var wall time.Duration
	if r := publish("1.0.0"); r.err != nil {
		t.Fatalf("healthy npm publish: %v\n%s", r.err, tail(r.out, 2000))
	} else {
		wall += r.wall
	}
	if v := npmVersions(t, addrA, pkg); len(v) != 1 {
		t.Fatalf("healthy npm publish: A holds %v", v)
	}
	tp.setEnabled(t, "verdaccio-a", false)
	for i, v := range []string{"1.1.0", "1.2.0", "1.3.0"} {
		r := publish(v)
		wall += r.wall
		if r.err == nil {
			t.Errorf("npm publish %s with A refusing connections succeeded", v)
		}
		if i == 2 && r.wall > 5*time.Second {
			t.Errorf("npm publish %s with A's breaker open took %s", v, r.wall)
		}
	}
	if b := n.breaker(t, keyA); b.State != "open" {
		t.Errorf("A's breaker is %s after failed publishes, want open", b.State)
	}
	if k := bSaw.Load(); k != 0 {
		t.Errorf("registry B saw %d uploads or requests with A's token", k)
	}
	tp.setEnabled(t, "verdaccio-a", true)
	if v := npmVersions(t, addrA, pkg); len(v) != 1 {
		t.Errorf("after the failed publishes A holds %v", v)
	}
	summary("npm publish to A of the npm chain A → B", "A refusing connections",
		"healthy publish lands; while A is down each fails (503 once open), B sees no upload and no token", wall,
		frontA.seen()+" "+frontB.seen())
}
