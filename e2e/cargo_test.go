//go:build e2e

package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The cargo scenario's crate, served the way crates.io serves crates: a
// sparse index on index.crates.io whose config.json points downloads at
// static.crates.io.
const (
	crateName    = "e2e-tiny"
	crateVersion = "0.1.0"
	crateFile    = crateName + "-" + crateVersion + ".crate"
)

// buildCrate returns a .crate file (a gzipped tar of the package folder).
func buildCrate(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	prefix := crateName + "-" + crateVersion + "/"
	for _, f := range []struct{ name, body string }{
		{"Cargo.toml", fmt.Sprintf("[package]\nname = %q\nversion = %q\nedition = \"2021\"\ndescription = \"nora-breaker e2e crate\"\nlicense = \"MIT\"\n", crateName, crateVersion)},
		{"src/lib.rs", "//! The nora-breaker e2e crate.\n\n/// Greets.\npub fn hello() -> &'static str {\n    \"hello\"\n}\n"},
	} {
		if err := tw.WriteHeader(&tar.Header{Name: prefix + f.name, Mode: 0o644, Size: int64(len(f.body)), ModTime: time.Unix(0, 0)}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(f.body))
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	zw.Close()
	return buf.Bytes()
}

// writeSparseIndex lays out the index (config.json and the crate's entry
// under its name-length prefix, e2/e-/e2e-tiny) and the download folder.
func writeSparseIndex(t *testing.T, indexRoot, staticRoot string, crate []byte) {
	t.Helper()
	sum := sha256.Sum256(crate)
	writeFile(t, filepath.Join(indexRoot, "config.json"),
		`{"dl":"https://static.crates.io/crates/{crate}/{crate}-{version}.crate","api":"https://crates.io"}`+"\n")
	writeFile(t, filepath.Join(indexRoot, crateName[:2], crateName[2:4], crateName), fmt.Sprintf(
		`{"name":%q,"vers":%q,"deps":[],"cksum":%q,"features":{},"yanked":false}`+"\n",
		crateName, crateVersion, hex.EncodeToString(sum[:])))
	writeFile(t, filepath.Join(staticRoot, "crates", crateName, crateFile), string(crate))
}

// cargoEnv is the cargo scenario: both crates.io hosts over HTTPS (test CA
// only nora-breaker trusts) behind counting fronts and toxiproxy, and
// nora-breaker intercepting them with a stale cache.
type cargoEnv struct {
	dir, rustupHome string
	crate           []byte
	n               *nora
	tp              *toxiproxy
	index, static   *front
	run             int
}

// setupCargo writes the registry, starts its fronts, toxiproxy and
// nora-breaker, and a project that depends on the crate.
func setupCargo(t *testing.T, s suite, reset time.Duration) *cargoEnv {
	t.Helper()
	e := &cargoEnv{dir: scenarioDir(t, s), crate: buildCrate(t)}
	indexRoot, staticRoot := filepath.Join(e.dir, "index"), filepath.Join(e.dir, "static")
	writeSparseIndex(t, indexRoot, staticRoot, e.crate)
	ca := newOriginCA(t, e.dir)
	e.index = newFront(t, "index.crates.io", "", http.FileServer(http.Dir(indexRoot)), ca.serverTLS(t, "index.crates.io"))
	e.static = newFront(t, "static.crates.io", "", http.FileServer(http.Dir(staticRoot)), ca.serverTLS(t, "static.crates.io"))
	e.tp = startToxiproxy(t, s, e.dir)
	toxIndex := e.tp.proxy(t, "index", e.index.addr)
	toxStatic := e.tp.proxy(t, "static", e.static.addr)
	e.n = startNora(t, s, e.dir, noraOpts{
		formats: breakerTOML(cargoThreshold, reset, "cargo") + `[cargo]
proxy = "https://crates.io"
proxy_timeout = 5
`,
		resolve:    map[string]string{"index.crates.io:443": toxIndex, "static.crates.io:443": toxStatic},
		upstreamCA: ca.pemPath,
		stale:      true,
	})
	writeFile(t, filepath.Join(e.dir, "project", "Cargo.toml"), fmt.Sprintf(
		"[package]\nname = \"e2e-app\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n%s = %q\n", crateName, crateVersion))
	writeFile(t, filepath.Join(e.dir, "project", "src", "lib.rs"), "")
	// cargo is a rustup proxy here: it finds its toolchain under RUSTUP_HOME,
	// which must not follow HOME into the scenario folder.
	e.rustupHome = os.Getenv("RUSTUP_HOME")
	if e.rustupHome == "" {
		home, _ := os.UserHomeDir()
		e.rustupHome = filepath.Join(home, ".rustup")
	}
	return e
}

// fetch runs cargo fetch of the project with a fresh CARGO_HOME (no index
// cache, no downloaded crates) and no Cargo.lock, crates.io's sparse index
// reached through the proxy ([http] proxy) trusting its CA ([http] cainfo),
// without cargo's own retries; the crate must land in the cache unchanged.
func (e *cargoEnv) fetch(t *testing.T) clientRun {
	t.Helper()
	e.run++
	home := filepath.Join(e.dir, fmt.Sprintf("cargo-home-%d", e.run))
	writeFile(t, filepath.Join(home, "config.toml"), fmt.Sprintf(`[http]
proxy = %q
cainfo = %q
timeout = 30
[net]
retry = 0
[registries.crates-io]
protocol = "sparse"
`, e.n.proxyURL, e.n.caPEM))
	project := filepath.Join(e.dir, "project")
	if err := os.Remove(filepath.Join(project, "Cargo.lock")); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	env := cleanEnv("HOME="+e.dir, "CARGO_HOME="+home, "RUSTUP_HOME="+e.rustupHome, "CARGO_TERM_COLOR=never")
	r := runClient(t, project, env, 3*time.Minute, "cargo", "fetch", "-v")
	if r.err != nil {
		t.Fatalf("cargo fetch (run %d): %v\n%s", e.run, r.err, tail(r.out, 3000))
	}
	got, _ := filepath.Glob(filepath.Join(home, "registry", "cache", "*", crateFile))
	if len(got) != 1 {
		t.Fatalf("cargo fetch (run %d) left no %s in its cache:\n%s", e.run, crateFile, tail(r.out, 2000))
	}
	if b, err := os.ReadFile(got[0]); err != nil || !bytes.Equal(b, e.crate) {
		t.Fatalf("cargo fetch (run %d): the cached crate is not the registry's (%v)", e.run, err)
	}
	return r
}

// cargoThreshold is the scenario's failure_threshold.
const cargoThreshold = 2

// TestCargo: cargo fetch of a project with one dependency from a sparse
// index (index.crates.io, downloads on static.crates.io) through the
// intercepting proxy; then, with both hosts refusing connections, a fresh
// cargo fetch succeeds from stale copies.
func TestCargo(t *testing.T) {
	const reset = 30 * time.Second
	e := setupCargo(t, loadSuite(t), reset)

	healthy := e.fetch(t)
	if len(e.index.pathsMatching("GET /config.json")) == 0 || len(e.index.pathsMatching("GET /e2/e-/"+crateName)) == 0 {
		t.Fatalf("healthy fetch: the index saw %v", e.index.pathsMatching("/"))
	}
	if len(e.static.pathsMatching("GET /crates/"+crateName+"/"+crateFile)) == 0 {
		t.Fatalf("healthy fetch: static.crates.io saw %v", e.static.pathsMatching("/"))
	}

	e.tp.setEnabled(t, "index", false)
	e.tp.setEnabled(t, "static", false)
	keys := []string{"cargo@index.crates.io", "cargo@static.crates.io"}
	before := map[string]int64{}
	for _, key := range keys {
		before[key] = attemptsOf(t, e.n, key)()
	}
	start := time.Now()
	stale := e.fetch(t)
	for _, key := range keys {
		triedAtMost(t, key, attemptsOf(t, e.n, key)()-before[key], cargoThreshold, reset, start)
	}
	for _, key := range keys {
		if e.n.metric(t, "nora_sidecar_stale_served_total", fmt.Sprintf("registry=%q", key)) == 0 {
			t.Fatalf("no stale copy counted as served for %s", key)
		}
	}
	summary("cargo fetch (sparse index, HTTPS intercepted)", "index.crates.io and static.crates.io refusing connections",
		fmt.Sprintf("healthy fetch %.2fs; fresh CARGO_HOME with both hosts down: fetch ok from stale copies (%.2fs)",
			healthy.wall.Seconds(), stale.wall.Seconds()),
		stale.wall, e.index.seen()+" "+e.static.seen())
}
