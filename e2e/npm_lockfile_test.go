//go:build e2e

package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha1"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// lockfileRegistry is a minimal npm registry holding one package: its
// packument names tarballs at its own public name (as every registry does),
// it may want a bearer token, and while down it drops every connection
// without an answer, as a dead server would.
type lockfileRegistry struct {
	name, token string
	tgz         []byte
	down        atomic.Bool
	authSeen    atomic.Int64 // requests that carried an Authorization
	tarballs    atomic.Int64 // tarball GETs answered
}

func (g *lockfileRegistry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if g.down.Load() {
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				c.Close()
				return
			}
		}
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	if r.Header.Get("Authorization") != "" {
		g.authSeen.Add(1)
	}
	if g.token != "" && r.Header.Get("Authorization") != "Bearer "+g.token {
		w.Header().Set("WWW-Authenticate", `Bearer realm="npm"`)
		http.Error(w, `{"error":"unauthorized"}`, http.StatusUnauthorized)
		return
	}
	switch r.URL.Path {
	case "/lfpkg":
		sum512 := sha512.Sum512(g.tgz)
		sum1 := sha1.Sum(g.tgz)
		doc, _ := json.Marshal(map[string]any{
			"name": "lfpkg", "dist-tags": map[string]string{"latest": "1.0.0"},
			"versions": map[string]any{"1.0.0": map[string]any{
				"name": "lfpkg", "version": "1.0.0", "main": "index.js",
				"dist": map[string]string{
					"tarball":   "http://" + g.name + "/lfpkg/-/lfpkg-1.0.0.tgz",
					"integrity": "sha512-" + base64.StdEncoding.EncodeToString(sum512[:]),
					"shasum":    hex.EncodeToString(sum1[:]),
				},
			}},
		})
		w.Header().Set("Content-Type", "application/json")
		w.Write(doc)
	case "/lfpkg/-/lfpkg-1.0.0.tgz":
		g.tarballs.Add(1)
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(g.tgz)
	default:
		http.NotFound(w, r)
	}
}

// npmTarball packs a package/ folder with the given files, as npm pack does.
func npmTarball(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, name := range []string{"package/package.json", "package/index.js"} {
		body := files[name]
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), ModTime: time.Unix(0, 0)}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body))
	}
	tw.Close()
	gz.Close()
	return buf.Bytes()
}

// TestNpmLockfileWrittenDuringAnOutage: npm copies a version's
// dist.tarball into package-lock.json (resolved), and moves only
// registry.npmjs.org's URLs back to the configured registry. With the npm
// chain A → B, A wanting a token the client has (host-scoped in .npmrc) and
// A down, npm install is served by B; the lockfile it writes must name A, so
// that once A is back and B is gone npm ci installs from A alone, with
// the token. On the code before the fix the lockfile named B and npm ci
// failed on B's unavailability. B never sees a credential.
func TestNpmLockfileWrittenDuringAnOutage(t *testing.T) {
	s := loadSuite(t)
	dir := filepath.Join(s.work, "run", t.Name())
	os.RemoveAll(dir)
	tgz := npmTarball(t, map[string]string{
		"package/package.json": `{"name":"lfpkg","version":"1.0.0","main":"index.js"}`,
		"package/index.js":     "module.exports = 'origin';\n",
	})
	const tokenA = "token-for-a-only"
	regA := &lockfileRegistry{name: "npm-a.test:4873", token: tokenA, tgz: tgz}
	regB := &lockfileRegistry{name: "npm-b.test:4874", tgz: tgz}
	frontA := newFront(t, "npm-a", "", regA, nil)
	frontB := newFront(t, "npm-b", "", regB, nil)
	rc := filepath.Join(dir, "user.npmrc")
	writeFile(t, rc, fmt.Sprintf("//npm-a.test:4873/:_authToken=%s\n", tokenA))
	env := cleanEnv("HOME="+dir, "NPM_CONFIG_USERCONFIG="+rc)
	startChain := func(name string) *nora {
		return startNora(t, s, filepath.Join(dir, name), noraOpts{
			formats: breakerTOML(1, 60*time.Second, "npm") + `[npm]
proxies = ["http://npm-a.test:4873", "http://npm-b.test:4874"]
proxy_timeout = 5
`,
			resolve: map[string]string{"npm-a.test:4873": frontA.addr, "npm-b.test:4874": frontB.addr},
		})
	}
	npm := func(n *nora, project, cache string, args ...string) clientRun {
		argv := append([]string{"npm"}, args...)
		argv = append(argv, "--registry", "http://npm-a.test:4873/", "--proxy", n.proxyURL,
			"--cache", filepath.Join(dir, cache), "--no-update-notifier", "--no-audit", "--no-fund",
			"--fetch-retries", "0", "--omit-lockfile-registry-resolved=false", "--replace-registry-host=npmjs")
		return runClient(t, project, env, 2*time.Minute, argv...)
	}
	project := filepath.Join(dir, "project")
	writeFile(t, filepath.Join(project, "package.json"), `{"name":"project","version":"1.0.0"}`)

	// The outage: A drops every connection, npm is served by B.
	regA.down.Store(true)
	n1 := startChain("nora-outage")
	if r := npm(n1, project, "cache-outage", "install", "lfpkg"); r.err != nil {
		t.Fatalf("npm install while A is down: %v\n%s", r.err, tail(r.out, 2000))
	}
	if regB.tarballs.Load() == 0 {
		t.Fatalf("B served no tarball")
	}
	lock, err := os.ReadFile(filepath.Join(project, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	var pl struct {
		Packages map[string]struct{ Resolved, Integrity string } `json:"packages"`
	}
	if err := json.Unmarshal(lock, &pl); err != nil {
		t.Fatal(err)
	}
	got := pl.Packages["node_modules/lfpkg"]
	sum := sha512.Sum512(tgz)
	if want := "sha512-" + base64.StdEncoding.EncodeToString(sum[:]); got.Integrity != want {
		t.Errorf("integrity %q, want the origin's %q", got.Integrity, want)
	}
	if want := "http://npm-a.test:4873/lfpkg/-/lfpkg-1.0.0.tgz"; got.Resolved != want {
		t.Errorf("package-lock.json resolved %q, want A's %q", got.Resolved, want)
	}

	// A is back, B is gone: the lockfile installs from A alone.
	regA.down.Store(false)
	regB.down.Store(true)
	aTarballs := regA.tarballs.Load()
	os.RemoveAll(filepath.Join(project, "node_modules"))
	n2 := startChain("nora-after")
	start := time.Now()
	r := npm(n2, project, "cache-after", "ci")
	if r.err != nil {
		t.Errorf("npm ci after the outage: %v\n%s", r.err, tail(r.out, 2000))
	} else if idx, err := os.ReadFile(filepath.Join(project, "node_modules", "lfpkg", "index.js")); err != nil ||
		!strings.Contains(string(idx), "origin") || regA.tarballs.Load() == aTarballs {
		t.Errorf("npm ci installed %q (err %v), A served %d tarballs", idx, err, regA.tarballs.Load()-aTarballs)
	}
	if regB.authSeen.Load() != 0 {
		t.Errorf("B saw %d requests with an Authorization", regB.authSeen.Load())
	}
	summary("npm install, npm ci", "npm A down (B serves), then A back and B down",
		fmt.Sprintf("resolved=%s ci_err=%v", got.Resolved, r.err), time.Since(start),
		fmt.Sprintf("A %d reqs, B %d reqs", frontA.reqs.Load(), frontB.reqs.Load()))
}
