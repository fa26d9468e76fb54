//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// debianMavenRepo holds the Maven plugins Debian packages (Maven Central is
// unreachable here); both test repositories serve it beside the artifact.
const debianMavenRepo = "/usr/share/maven-repo"

// mavenRepo builds a repository folder: e2e.nora:hello:1.0 installed with
// mvn install:install-file, plus links to Debian's plugin repository.
func mavenRepo(t *testing.T, dir, name, installed string) string {
	t.Helper()
	repo := filepath.Join(dir, name)
	if installed == "" {
		jar := filepath.Join(dir, "hello.jar")
		// An empty zip is a valid jar for dependency:get.
		writeFile(t, jar, "PK\x05\x06"+string(make([]byte, 18)))
		writeFile(t, filepath.Join(dir, "global-settings.xml"), "<settings/>\n")
		local := filepath.Join(dir, "settings-debian.xml")
		writeFile(t, local, `<settings><mirrors><mirror><id>debian</id><mirrorOf>*</mirrorOf>
<url>file://`+debianMavenRepo+`</url></mirror></mirrors></settings>
`)
		mustRun(t, dir, cleanEnv("HOME="+dir), 3*time.Minute, "mvn", "-B", "-q", "-s", local,
			"-gs", filepath.Join(dir, "global-settings.xml"), "-Dmaven.repo.local="+filepath.Join(dir, "m2-install"),
			"org.apache.maven.plugins:maven-install-plugin:3.1.0:install-file", "-Dfile="+jar,
			"-DgroupId=e2e.nora", "-DartifactId=hello", "-Dversion=1.0", "-Dpackaging=jar",
			"-DlocalRepositoryPath="+repo)
	} else {
		if err := os.MkdirAll(repo, 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("cp", "-r", filepath.Join(installed, "e2e"), repo+"/").CombinedOutput(); err != nil {
			t.Fatalf("copy repository: %v %s", err, out)
		}
	}
	entries, err := os.ReadDir(debianMavenRepo)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.Symlink(filepath.Join(debianMavenRepo, e.Name()), filepath.Join(repo, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	return repo
}

// serveDir serves a folder with python3 -m http.server on a loopback port
// it picks itself, and returns the address.
func serveDir(t *testing.T, dir, name, root string) (string, *proc) {
	t.Helper()
	p := startProc(t, dir, name, cleanEnv(), "python3", "-m", "http.server", "--protocol", "HTTP/1.1",
		"--bind", "127.0.0.1", "--directory", root, "0")
	return p.listening(t, 20*time.Second), p
}

// mavenEnv is the maven scenario: two repositories served from folders,
// A behind toxiproxy; Maven's mirror names only A.
type mavenEnv struct {
	dir, settings, local string
	serverA              *proc
	n                    *nora
	frontA, frontB       *front
}

const (
	mavenKeyA = "maven:http://maven-a.test:8082"
	mavenKeyB = "maven:http://maven-b.test:8083"
	jarGet    = "GET /e2e/nora/hello/1.0/hello-1.0.jar"
)

// setupMaven builds and serves both repositories and starts toxiproxy and
// nora-breaker; settings.xml mirrors everything to A through the proxy.
func setupMaven(t *testing.T, s suite, reset time.Duration) *mavenEnv {
	t.Helper()
	e := &mavenEnv{dir: scenarioDir(t, s)}
	repoA := mavenRepo(t, e.dir, "maven-a", "")
	repoB := mavenRepo(t, e.dir, "maven-b", repoA)
	addrA, serverA := serveDir(t, e.dir, "maven-a-server", repoA)
	addrB, _ := serveDir(t, e.dir, "maven-b-server", repoB)
	e.serverA = serverA
	e.frontA = newFront(t, "maven-a", "http://"+addrA, nil, nil)
	e.frontB = newFront(t, "maven-b", "http://"+addrB, nil, nil)
	tp := startToxiproxy(t, s, e.dir)
	toxA := tp.proxy(t, "maven-a", e.frontA.addr)
	e.n = startNora(t, s, e.dir, noraOpts{
		formats: breakerTOML(3, reset, "maven") + `[maven]
proxies = ["http://maven-a.test:8082", "http://maven-b.test:8083"]
proxy_timeout = 5
`,
		resolve: map[string]string{"maven-a.test:8082": toxA, "maven-b.test:8083": e.frontB.addr},
	})
	e.settings = filepath.Join(e.dir, "settings.xml")
	writeFile(t, e.settings, fmt.Sprintf(`<settings>
  <mirrors><mirror><id>repo-a</id><mirrorOf>*</mirrorOf><url>http://maven-a.test:8082/</url></mirror></mirrors>
  <proxies><proxy><id>nora-breaker</id><active>true</active><protocol>http</protocol>
    <host>127.0.0.1</host><port>%s</port></proxy></proxies>
</settings>
`, e.n.proxyPort))
	e.local = filepath.Join(e.dir, "m2")
	return e
}

// get runs mvn dependency:get through the proxy after forgetting the
// artifact (Maven would not ask again otherwise); it must leave the jar.
func (e *mavenEnv) get(t *testing.T) clientRun {
	t.Helper()
	if err := os.RemoveAll(filepath.Join(e.local, "e2e")); err != nil {
		t.Fatal(err)
	}
	// The empty global settings drop Maven's default blocker of http:// repositories.
	r := mustRun(t, e.dir, cleanEnv("HOME="+e.dir), 5*time.Minute, "mvn", "-B", "-s", e.settings,
		"-gs", filepath.Join(e.dir, "global-settings.xml"), "-Dmaven.repo.local="+e.local,
		"org.apache.maven.plugins:maven-dependency-plugin:3.5.0:get", "-Dartifact=e2e.nora:hello:1.0", "-Dtransitive=false")
	if _, err := os.Stat(filepath.Join(e.local, "e2e", "nora", "hello", "1.0", "hello-1.0.jar")); err != nil {
		t.Fatalf("dependency:get left no jar: %v", err)
	}
	return r
}

// fetch gets the jar with curl through the proxy: quick enough to stay well
// inside one reset_timeout. It must be served by B.
func (e *mavenEnv) fetch(t *testing.T) {
	t.Helper()
	r := mustRun(t, e.dir, cleanEnv("HOME="+e.dir), 30*time.Second, "curl", "-sSf", "-o", "/dev/null", "-D", "-",
		"--noproxy", "", "-x", e.n.proxyURL, "http://maven-a.test:8082/e2e/nora/hello/1.0/hello-1.0.jar")
	if !strings.Contains(strings.ToLower(r.out), "x-nora-upstream: "+mavenKeyB) {
		t.Fatalf("jar not served by B:\n%s", r.out)
	}
}

// TestMaven: with repository A's server stopped, mvn dependency:get is
// resolved through repository B; A then sees nothing but one probe per
// reset_timeout.
func TestMaven(t *testing.T) {
	const reset = 5 * time.Second
	e := setupMaven(t, loadSuite(t), reset)
	b := breakerCheck{n: e.n, key: mavenKeyA, reset: reset, seen: reqsOf(e.frontA)}

	healthy := e.get(t)
	if !contains(e.frontA.pathsMatching(jarGet), jarGet) {
		t.Fatal("artifact was not fetched from repository A")
	}
	if r, _ := e.frontB.count(); r != 0 {
		t.Fatalf("healthy run reached repository B (%d requests)", r)
	}

	e.serverA.stop()
	aBefore := b.seen()
	down := e.get(t)
	if !contains(e.frontB.pathsMatching(jarGet), jarGet) {
		t.Fatalf("artifact not fetched from repository B: %v", e.frontB.pathsMatching("hello"))
	}
	if e.n.metric(t, "nora_sidecar_fallback_total", fmt.Sprintf("from=%q", mavenKeyA), fmt.Sprintf("to=%q", mavenKeyB)) == 0 {
		t.Fatal("no fallback A→B counted")
	}
	// Three failed attempts open the breaker. A's front may count more
	// requests than attempts: Go's transport replays a GET on the next
	// pooled keep-alive connection when a reused one is dropped unanswered.
	aDown := b.seen()
	quiet := b.quietWhileOpen(t, func() {
		for i := 0; i < 3; i++ {
			e.fetch(t)
		}
	})
	b.oneProbe(t, 1, func() { e.fetch(t) })
	summary("mvn dependency:get", "repository A's server stopped",
		fmt.Sprintf("resolved via repository B (healthy run %.2fs); A open at the threshold, 1 probe per reset_timeout", healthy.wall.Seconds()),
		down.wall, e.frontA.seen()+" "+e.frontB.seen()+fmt.Sprintf(" (A in outage: %d before open, %d while open, 1 probe)", aDown-aBefore, quiet))
}

// contains reports whether list holds s.
func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
