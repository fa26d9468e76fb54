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

// startVerdaccio runs verdaccio 6 (installed by run.sh) on addr with no
// uplinks, so it only serves what was published to it.
func startVerdaccio(t *testing.T, s suite, dir, addr string) *proc {
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
listen: %s
log: { type: stdout, format: pretty, level: http }
`, filepath.Join(dir, "verdaccio-storage"), filepath.Join(dir, "htpasswd"), addr))
	p := startProc(t, dir, "verdaccio", cleanEnv("HOME="+dir),
		filepath.Join(s.work, "verdaccio", "node_modules", ".bin", "verdaccio"), "--config", cfg)
	waitHTTP(t, "http://"+addr+"/-/ping", 200, 60*time.Second)
	return p
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

// TestNpm: npm installs through the proxy; with verdaccio stopped a fresh
// install (empty npm cache) is served from stale copies, a package with no
// stale copy fails in seconds, and the dead registry sees one probe per
// reset_timeout; verdaccio restarted → one probe closes the breaker.
func TestNpm(t *testing.T) {
	s := loadSuite(t)
	dir := scenarioDir(t, s)
	const reset = 4 * time.Second
	key := "npm:http://npm-a.test:4873"

	vAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	verdaccio := startVerdaccio(t, s, dir, vAddr)
	token := verdaccioToken(t, vAddr)
	publishNpm(t, dir, vAddr, token, "e2e-hello")
	publishNpm(t, dir, vAddr, token, "e2e-never-fetched")

	fr := newFront(t, "verdaccio", "http://"+vAddr, nil, nil)
	tp := startToxiproxy(t, s, dir)
	tox := tp.proxy(t, "verdaccio", fr.addr)
	n := startNora(t, s, dir, noraOpts{
		formats: fmt.Sprintf(`[circuit_breaker]
enabled = true
failure_threshold = 2
reset_timeout = %d
[registries]
enable = "npm"
[npm]
proxy = "http://npm-a.test:4873"
proxy_timeout = 5
`, int(reset.Seconds())),
		resolve: map[string]string{"npm-a.test:4873": tox},
		stale:   true,
	})
	rc := filepath.Join(dir, "empty.npmrc")
	writeFile(t, rc, "")
	env := cleanEnv("HOME="+dir, "NPM_CONFIG_USERCONFIG="+rc)
	app := filepath.Join(dir, "app")
	install := func(run int, pkg string) clientRun {
		// A fresh project and cache per run: nothing may come from an earlier install.
		if err := os.RemoveAll(app); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(app, "package.json"), `{"name":"app","version":"1.0.0","private":true}`)
		return runClient(t, app, env, 3*time.Minute, "npm", "install", pkg,
			"--registry", "http://npm-a.test:4873/", "--proxy", n.proxyURL, "--https-proxy", n.proxyURL,
			"--cache", filepath.Join(dir, fmt.Sprintf("npm-cache-%d", run)), "--no-audit", "--no-fund",
			"--no-package-lock", "--no-update-notifier", "--fetch-retries", "0")
	}

	if r := install(1, "e2e-hello"); r.err != nil {
		t.Fatalf("healthy install: %v\n%s", r.err, tail(r.out, 3000))
	}
	healthyReqs, _ := fr.count()
	if healthyReqs == 0 {
		t.Fatal("healthy install did not reach verdaccio")
	}

	// Verdaccio stopped: fresh install from stale copies.
	verdaccio.stop()
	stale := install(2, "e2e-hello")
	if stale.err != nil {
		t.Fatalf("install with verdaccio down: %v\n%s", stale.err, tail(stale.out, 3000))
	}
	if n.metric(t, "nora_sidecar_stale_served_total", fmt.Sprintf("registry=%q", key)) < 2 {
		t.Fatal("stale copies were not counted as served")
	}
	curl := runClient(t, dir, env, 30*time.Second, "curl", "-sS", "-D", "-", "-o", "/dev/null", "--noproxy", "",
		"-x", n.proxyURL, "http://npm-a.test:4873/e2e-hello/-/e2e-hello-1.0.0.tgz")
	if !strings.Contains(strings.ToLower(curl.out), "x-nora-stale: true") {
		t.Fatalf("tarball from stale copy lacks x-nora-stale: true:\n%s", curl.out)
	}
	if n.state(t, key) != 1 {
		t.Fatalf("breaker %s not open after the failures (state %v)", key, n.state(t, key))
	}

	// No stale copy: fails at once with the proxy's 503.
	r0, _ := fr.count()
	openedAt := time.Now()
	fail := install(3, "e2e-never-fetched")
	if fail.err == nil {
		t.Fatal("install of a package with no stale copy succeeded with verdaccio down")
	}
	if !strings.Contains(fail.out, "503") {
		t.Fatalf("npm did not see a 503:\n%s", tail(fail.out, 2000))
	}
	if fail.wall > 10*time.Second {
		t.Fatalf("failing install took %v; want seconds", fail.wall)
	}
	r1, _ := fr.count()
	if allowed := int64(time.Since(openedAt) / reset); r1-r0 > allowed {
		t.Fatalf("open breaker sent %d requests to dead verdaccio (allowed %d)", r1-r0, allowed)
	}

	// Verdaccio back: after reset_timeout one probe closes the breaker.
	startVerdaccio(t, s, dir, vAddr)
	n.waitProbeDue(t, key, reset)
	back := install(4, "e2e-never-fetched")
	if back.err != nil {
		t.Fatalf("install after verdaccio came back: %v\n%s", back.err, tail(back.out, 3000))
	}
	if n.state(t, key) != 0 || n.transitions(t, key, "half_open", "closed") != 1 {
		t.Fatal("breaker did not close on the first probe after verdaccio came back")
	}
	summary("npm install", "verdaccio stopped, then restarted",
		fmt.Sprintf("fresh install from stale copies ok (%.2fs); no-stale install failed with 503 in %.2fs; closed after restart",
			stale.wall.Seconds(), fail.wall.Seconds()),
		stale.wall+fail.wall, fr.seen()+fmt.Sprintf(" (during outage while open: %d)", r1-r0))
}
