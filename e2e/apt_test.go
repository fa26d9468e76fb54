//go:build e2e

package e2e

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The apt scenario's repository: one suite, one component, one package.
const (
	aptHost    = "deb-a.test:8090"
	aptBase    = "http://" + aptHost + "/debian"
	aptPackage = "e2e-hello"
	aptDeb     = "e2e-hello_1.0_all.deb"
)

// buildAptRepo builds an unsigned repository under root/debian: the
// package with dpkg-deb, its Packages index with dpkg-scanpackages (and
// gzipped), and a Release file listing both, but no InRelease and no
// Release.gpg. It returns the .deb's bytes.
func buildAptRepo(t *testing.T, dir, root string) []byte {
	t.Helper()
	pkg := filepath.Join(dir, "pkg")
	writeFile(t, filepath.Join(pkg, "DEBIAN", "control"), `Package: e2e-hello
Version: 1.0
Architecture: all
Maintainer: nora-breaker e2e <e2e@example.invalid>
Description: nora-breaker end-to-end test package
 It holds one text file.
`)
	writeFile(t, filepath.Join(pkg, "usr", "share", "doc", "e2e-hello", "hello.txt"), "hello from the nora-breaker e2e package\n")
	repo := filepath.Join(root, "debian")
	deb := filepath.Join(repo, "pool", "main", aptDeb)
	if err := os.MkdirAll(filepath.Dir(deb), 0o755); err != nil {
		t.Fatal(err)
	}
	mustRun(t, dir, cleanEnv(), time.Minute, "dpkg-deb", "--root-owner-group", "-Zgzip", "--build", pkg, deb)
	scan := exec.Command("dpkg-scanpackages", "--multiversion", "pool", "/dev/null")
	scan.Dir, scan.Env = repo, cleanEnv()
	var stderr bytes.Buffer
	scan.Stderr = &stderr
	packages, err := scan.Output()
	if err != nil || !bytes.Contains(packages, []byte("Filename: pool/main/"+aptDeb)) {
		t.Fatalf("dpkg-scanpackages: %v\n%s\n%s", err, packages, stderr.String())
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(packages)
	zw.Close()
	index := map[string][]byte{
		"main/binary-amd64/Packages":    packages,
		"main/binary-amd64/Packages.gz": gz.Bytes(),
	}
	var release strings.Builder
	fmt.Fprintf(&release, "Origin: nora-breaker-e2e\nLabel: nora-breaker-e2e\nSuite: stable\nCodename: stable\n"+
		"Date: %s\nArchitectures: amd64\nComponents: main\nDescription: nora-breaker e2e repository (unsigned)\nSHA256:\n",
		time.Now().UTC().Format("Mon, 02 Jan 2006 15:04:05 UTC"))
	for _, name := range []string{"main/binary-amd64/Packages", "main/binary-amd64/Packages.gz"} {
		sum := sha256.Sum256(index[name])
		fmt.Fprintf(&release, " %s %d %s\n", hex.EncodeToString(sum[:]), len(index[name]), name)
		writeFile(t, filepath.Join(repo, "dists", "stable", name), string(index[name]))
	}
	writeFile(t, filepath.Join(repo, "dists", "stable", "Release"), release.String())
	b, err := os.ReadFile(deb)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// aptEnv is the apt scenario: the repository served by python3 -m
// http.server behind a counting front, nora-breaker with a stale cache, and
// apt-get with its own configuration, state and cache.
type aptEnv struct {
	dir, aptConf, sources string
	origin                *proc
	fr                    *front
	n                     *nora
	deb                   []byte
	run                   int
}

// setupApt builds and serves the repository and starts nora-breaker.
func setupApt(t *testing.T, s suite, reset time.Duration) *aptEnv {
	t.Helper()
	e := &aptEnv{dir: scenarioDir(t, s)}
	root := filepath.Join(e.dir, "repo")
	e.deb = buildAptRepo(t, e.dir, root)
	addr, origin := serveDir(t, e.dir, "apt-repo", root)
	e.origin = origin
	waitHTTP(t, "http://"+addr+"/debian/dists/stable/Release", 200, 20*time.Second)
	e.fr = newFront(t, "apt-repo", "http://"+addr, nil, nil)
	e.n = startNora(t, s, e.dir, noraOpts{
		formats: breakerTOML(2, reset, "deb") + fmt.Sprintf(`[deb]
proxy_timeout = 5
[deb.proxies]
e2e = %q
`, aptBase),
		resolve: map[string]string{aptHost: e.fr.addr},
		stale:   true,
	})
	// APT_CONFIG is read before anything else, so the machine's own
	// apt.conf.d (which may name a proxy) and sources are never read.
	e.aptConf = filepath.Join(e.dir, "apt.conf")
	e.sources = filepath.Join(e.dir, "sources.list")
	empty := filepath.Join(e.dir, "apt-empty.d")
	if err := os.MkdirAll(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(e.dir, "dpkg-status"), "")
	writeFile(t, e.aptConf, fmt.Sprintf(`Dir::Etc::Parts %[1]q;
Dir::Etc::SourceParts %[1]q;
Dir::Etc::PreferencesParts %[1]q;
Dir::Etc::TrustedParts %[1]q;
Dir::State::status %[2]q;
Acquire::Languages "none";
Acquire::Retries "0";
Acquire::http::Timeout "30";
APT::Sandbox::User "root";
`, empty, filepath.Join(e.dir, "dpkg-status")))
	writeFile(t, e.sources, "deb [trusted=yes] "+aptBase+" stable main\n")
	return e
}

// aptRound is one update + download: fresh state and cache folders (no
// lists from an earlier update) and a fresh folder to download into.
type aptRound struct {
	state, cache, cwd string
}

// round makes the folders of one update + download.
func (e *aptEnv) round(t *testing.T) aptRound {
	t.Helper()
	e.run++
	base := filepath.Join(e.dir, fmt.Sprintf("apt-%d", e.run))
	r := aptRound{state: filepath.Join(base, "state"), cache: filepath.Join(base, "cache"), cwd: filepath.Join(base, "download")}
	for _, d := range []string{filepath.Join(r.state, "lists", "partial"), filepath.Join(r.cache, "archives", "partial"), r.cwd} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// aptGet runs one apt-get command of the round, with its folders and the
// proxy named on the command line.
func (e *aptEnv) aptGet(t *testing.T, r aptRound, args ...string) clientRun {
	t.Helper()
	argv := append([]string{"apt-get", "-q",
		"-o", "Dir::State=" + r.state, "-o", "Dir::Cache=" + r.cache,
		"-o", "Dir::Etc::SourceList=" + e.sources,
		"-o", "Acquire::http::Proxy=" + e.n.proxyURL}, args...)
	return runClient(t, r.cwd, cleanEnv("APT_CONFIG="+e.aptConf, "DEBIAN_FRONTEND=noninteractive"), 3*time.Minute, argv...)
}

// updateAndDownload runs apt-get update and apt-get download in a fresh
// round; both must succeed, the update without a failed fetch, and the
// package must be the repository's bytes.
func (e *aptEnv) updateAndDownload(t *testing.T) (update, download clientRun) {
	t.Helper()
	r := e.round(t)
	update = e.aptGet(t, r, "update")
	if update.err != nil || strings.Contains(update.out, "Err:") || strings.Contains(update.out, "Failed to fetch") {
		t.Fatalf("apt-get update (round %d): %v\n%s", e.run, update.err, tail(update.out, 3000))
	}
	download = e.aptGet(t, r, "download", aptPackage)
	got, err := os.ReadFile(filepath.Join(r.cwd, aptDeb))
	if download.err != nil || err != nil {
		t.Fatalf("apt-get download %s (round %d): %v %v\n%s", aptPackage, e.run, download.err, err, tail(download.out, 3000))
	}
	if !bytes.Equal(got, e.deb) {
		t.Fatalf("apt-get download (round %d): %d bytes, not the repository's %d", e.run, len(got), len(e.deb))
	}
	return update, download
}

// TestApt: apt-get update and apt-get download of an unsigned repository
// (no InRelease: 404) through the proxy; then, with the repository's server
// stopped, a fresh apt-get update and download succeed from stale copies —
// the stale 404 for InRelease lets apt go on to Release.
func TestApt(t *testing.T) {
	const reset = 30 * time.Second
	e := setupApt(t, loadSuite(t), reset)

	healthy, _ := e.updateAndDownload(t)
	for _, p := range []string{"GET /debian/dists/stable/InRelease", "GET /debian/dists/stable/Release",
		"GET /debian/pool/main/" + aptDeb} {
		if len(e.fr.pathsMatching(p)) == 0 {
			t.Fatalf("healthy round: the repository never saw %s; it saw %v", p, e.fr.pathsMatching("/"))
		}
	}
	if !strings.Contains(healthy.out, "InRelease") {
		t.Fatalf("apt-get update did not ask for InRelease:\n%s", healthy.out)
	}

	e.origin.stop()
	before, _ := e.fr.count()
	update, download := e.updateAndDownload(t)
	during, _ := e.fr.count()
	if e.n.state(t, "deb") != 1 {
		t.Fatal("the deb breaker did not open while the repository was down")
	}
	if n := e.n.metric(t, "nora_sidecar_stale_served_total", `registry="deb"`); n < 3 {
		t.Fatalf("%v stale copies served during the outage, want at least 3 of InRelease (404), Release, Packages and the .deb", n)
	}
	curl := runClient(t, e.dir, cleanEnv(), 30*time.Second, "curl", "-sS", "-D", "-", "-o", "/dev/null", "--noproxy", "",
		"-x", e.n.proxyURL, aptBase+"/dists/stable/InRelease")
	if head := strings.ToLower(curl.out); !strings.HasPrefix(head, "http/1.1 404") || !strings.Contains(head, "x-nora-stale: true") {
		t.Fatalf("InRelease during the outage: want the stale 404 (x-nora-stale: true), got:\n%s", curl.out)
	}
	summary("apt-get update + apt-get download (unsigned repository, no InRelease)", "repository server stopped",
		fmt.Sprintf("healthy round ok; with the repository down a fresh update (%.2fs) and download (%.2fs) ok from stale copies (InRelease a stale 404)",
			update.wall.Seconds(), download.wall.Seconds()),
		update.wall+download.wall, e.fr.seen()+fmt.Sprintf(" (during the outage: %d)", during-before))
}
