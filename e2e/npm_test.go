//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// startVerdaccio runs verdaccio 6 (installed by run.sh) with no uplinks, so
// it only serves what was published to it, on a loopback port it picks
// itself; it returns the process and the address it got.
func startVerdaccio(t *testing.T, s suite, dir string) (*proc, string) {
	t.Helper()
	cfg := filepath.Join(dir, "verdaccio.yaml")
	writeFile(t, cfg, fmt.Sprintf(`storage: %s
auth:
  htpasswd:
    file: %s
    max_users: 10
uplinks: {}
packages:
  '**':
    access: $all
    publish: $authenticated
web:
  enable: false
listen: 127.0.0.1:0
log: { type: stdout, format: pretty, level: http }
`, filepath.Join(dir, "verdaccio-storage"), filepath.Join(dir, "htpasswd")))
	p := startProc(t, dir, "verdaccio", cleanEnv("HOME="+dir),
		filepath.Join(s.work, "verdaccio", "node_modules", ".bin", "verdaccio"), "--config", cfg)
	addr := p.listening(t, 60*time.Second)
	waitHTTP(t, "http://"+addr+"/-/ping", 200, 60*time.Second)
	return p, addr
}

// verdaccioToken adds a user through the CouchDB user API and returns its token.
func verdaccioToken(t *testing.T, addr string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"name": "e2e", "password": "e2e-password-1", "type": "user", "roles": []string{}})
	req, _ := http.NewRequest("PUT", "http://"+addr+"/-/user/org.couchdb.user:e2e", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}).Do(req)
	if err != nil {
		t.Fatalf("verdaccio add user: %v", err)
	}
	defer resp.Body.Close()
	var out struct{ Token string }
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.Token == "" {
		t.Fatalf("verdaccio add user: status %d, no token (%v)", resp.StatusCode, err)
	}
	return out.Token
}

// publishNpm publishes name@1.0.0 straight to verdaccio (not through the proxy).
func publishNpm(t *testing.T, dir, addr, token, name string) {
	t.Helper()
	pkg := filepath.Join(dir, "pkg-"+name)
	writeFile(t, filepath.Join(pkg, "package.json"), fmt.Sprintf(`{"name":%q,"version":"1.0.0","main":"index.js"}`, name))
	writeFile(t, filepath.Join(pkg, "index.js"), "module.exports = 'hello from "+name+"';\n")
	rc := filepath.Join(dir, "publish.npmrc")
	writeFile(t, rc, fmt.Sprintf("//%s/:_authToken=%s\n", addr, token))
	mustRun(t, pkg, cleanEnv("HOME="+dir, "NPM_CONFIG_USERCONFIG="+rc), 2*time.Minute,
		"npm", "publish", "--registry", "http://"+addr+"/")
}

// npmEnv is the npm scenario: one verdaccio behind a counting front and
// toxiproxy, nora-breaker with a stale cache.
type npmEnv struct {
	s          suite
	dir, vAddr string
	env        []string
	verdaccio  *proc
	n          *nora
	fr         *front
	run        int
}

// setupNpm starts verdaccio, publishes two packages straight to it, and
// starts toxiproxy and nora-breaker.
func setupNpm(t *testing.T, s suite, reset time.Duration) *npmEnv {
	t.Helper()
	e := &npmEnv{s: s, dir: scenarioDir(t, s)}
	e.verdaccio, e.vAddr = startVerdaccio(t, s, e.dir)
	token := verdaccioToken(t, e.vAddr)
	publishNpm(t, e.dir, e.vAddr, token, "e2e-hello")
	publishNpm(t, e.dir, e.vAddr, token, "e2e-never-fetched")
	e.fr = newFront(t, "verdaccio", "http://"+e.vAddr, nil, nil)
	tp := startToxiproxy(t, s, e.dir)
	tox := tp.proxy(t, "verdaccio", e.fr.addr)
	e.n = startNora(t, s, e.dir, noraOpts{
		formats: breakerTOML(2, reset, "npm") + `[npm]
proxy = "http://npm-a.test:4873"
proxy_timeout = 5
`,
		resolve: map[string]string{"npm-a.test:4873": tox},
		stale:   true,
	})
	rc := filepath.Join(e.dir, "empty.npmrc")
	writeFile(t, rc, "")
	e.env = cleanEnv("HOME="+e.dir, "NPM_CONFIG_USERCONFIG="+rc)
	return e
}

// install runs npm install of pkg through the proxy in a fresh project with
// a fresh npm cache, so nothing can come from an earlier install.
func (e *npmEnv) install(t *testing.T, pkg string) clientRun {
	t.Helper()
	e.run++
	app := filepath.Join(e.dir, "app")
	if err := os.RemoveAll(app); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(app, "package.json"), `{"name":"app","version":"1.0.0","private":true}`)
	// --fetch-retries 0: npm's own retry back-off (10 s, then 60 s) would
	// otherwise be what is measured, not the proxy's answer.
	return runClient(t, app, e.env, 3*time.Minute, "npm", "install", pkg,
		"--registry", "http://npm-a.test:4873/", "--proxy", e.n.proxyURL, "--https-proxy", e.n.proxyURL,
		"--cache", filepath.Join(e.dir, fmt.Sprintf("npm-cache-%d", e.run)), "--no-audit", "--no-fund",
		"--no-package-lock", "--no-update-notifier", "--fetch-retries", "0")
}

// mustInstall is install that must succeed.
func (e *npmEnv) mustInstall(t *testing.T, pkg string) clientRun {
	t.Helper()
	r := e.install(t, pkg)
	if r.err != nil {
		t.Fatalf("npm install %s: %v\n%s", pkg, r.err, tail(r.out, 3000))
	}
	return r
}

// TestNpm: with verdaccio stopped a fresh npm install (empty cache) is
// served from stale copies, a package with no stale copy fails in seconds,
// the dead registry sees nothing while open; verdaccio restarted → the
// first probe closes the breaker.
func TestNpm(t *testing.T) {
	// Long enough that a whole npm install made while open meets it open.
	const reset = 12 * time.Second
	e := setupNpm(t, loadSuite(t), reset)
	b := breakerCheck{n: e.n, key: "npm:http://npm-a.test:4873", reset: reset, seen: reqsOf(e.fr)}

	e.mustInstall(t, "e2e-hello")
	if r, _ := e.fr.count(); r == 0 {
		t.Fatal("healthy install did not reach verdaccio")
	}

	e.verdaccio.stop()
	stale := e.mustInstall(t, "e2e-hello")
	if e.n.metric(t, "nora_sidecar_stale_served_total", fmt.Sprintf("registry=%q", b.key)) < 2 {
		t.Fatal("stale packument and tarball were not counted as served")
	}
	curl := runClient(t, e.dir, e.env, 30*time.Second, "curl", "-sS", "-D", "-", "-o", "/dev/null", "--noproxy", "",
		"-x", e.n.proxyURL, "http://npm-a.test:4873/e2e-hello/-/e2e-hello-1.0.0.tgz")
	if !strings.Contains(strings.ToLower(curl.out), "x-nora-stale: true") {
		t.Fatalf("tarball from stale copy lacks x-nora-stale: true:\n%s", curl.out)
	}

	var fail clientRun
	quiet := b.quietWhileOpen(t, func() { fail = e.install(t, "e2e-never-fetched") })
	if fail.err == nil || !strings.Contains(fail.out, "503") {
		t.Fatalf("install with no stale copy: want npm to fail on a 503, got %v:\n%s", fail.err, tail(fail.out, 2000))
	}
	if fail.wall > 10*time.Second {
		t.Fatalf("failing install took %v; want seconds", fail.wall)
	}

	// Back on whatever port it got this time; the front follows it.
	_, e.vAddr = startVerdaccio(t, e.s, e.dir)
	e.fr.retarget(e.vAddr)
	b.oneProbe(t, 0, func() { e.mustInstall(t, "e2e-never-fetched") })
	summary("npm install", "verdaccio stopped, then restarted",
		fmt.Sprintf("fresh install from stale copies ok (%.2fs); no stale copy: 503 in %.2fs; back after 1 probe",
			stale.wall.Seconds(), fail.wall.Seconds()),
		stale.wall+fail.wall, e.fr.seen()+fmt.Sprintf(" (while open: %d)", quiet))
}
