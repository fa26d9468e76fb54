//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestMavenHedgesAroundASlowRepository: Maven (mvn dependency:get) whose
// mirror, repository A, answers every request 4 s late (toxiproxy latency),
// well inside its proxy_timeout, while repository B of the same chain
// answers at once. With hedge_after = 0.5 each of mvn's requests for the
// artifact is also sent to B after half a second and B's answer serves it
// (docs/behaviour.md §5.10): the jar comes from B, the hedges are counted as
// sent and won, and A, which was only slow, keeps a closed breaker with no
// failure (the given-up attempt is neutral). Run first healthy, so Maven's
// plugins are in its local repository and only the artifact is asked for.
func TestMavenHedgesAroundASlowRepository(t *testing.T) {
	s := loadSuite(t)
	dir := scenarioDir(t, s)
	repoA := mavenRepo(t, dir, "maven-a", "")
	repoB := mavenRepo(t, dir, "maven-b", repoA)
	addrA, _ := serveDir(t, dir, "maven-a-server", repoA)
	addrB, _ := serveDir(t, dir, "maven-b-server", repoB)
	frontA := newFront(t, "maven-a", "http://"+addrA, nil, nil)
	frontB := newFront(t, "maven-b", "http://"+addrB, nil, nil)
	tp := startToxiproxy(t, s, dir)
	toxA := tp.proxy(t, "maven-a", frontA.addr)
	n := startNora(t, s, dir, noraOpts{
		formats: breakerTOML(3, 30*time.Second, "maven") + `[maven]
proxies = ["http://maven-a.test:8082", "http://maven-b.test:8083"]
proxy_timeout = 20
`,
		resolve: map[string]string{"maven-a.test:8082": toxA, "maven-b.test:8083": frontB.addr},
		env:     []string{"NORA_MAVEN_HEDGE_AFTER=0.5"}, // the harness turns hedging off by default
	})
	e := &mavenEnv{dir: dir, n: n, frontA: frontA, frontB: frontB, local: filepath.Join(dir, "m2"),
		settings: filepath.Join(dir, "settings.xml")}
	writeFile(t, e.settings, fmt.Sprintf(`<settings>
  <mirrors><mirror><id>repo-a</id><mirrorOf>*</mirrorOf><url>http://maven-a.test:8082/</url></mirror></mirrors>
  <proxies><proxy><id>nora-breaker</id><active>true</active><protocol>http</protocol>
    <host>127.0.0.1</host><port>%s</port></proxy></proxies>
</settings>
`, n.proxyPort))

	// Only to fill Maven's local repository with its plugins (on a busy
	// machine a request of it may be hedged too).
	healthy := e.get(t)
	tp.addToxic(t, "maven-a", "slow", "latency", map[string]any{"latency": 4000})
	if err := os.RemoveAll(filepath.Join(e.local, "e2e")); err != nil {
		t.Fatal(err)
	}
	slow := e.get(t)
	if !contains(frontB.pathsMatching(jarGet), jarGet) {
		t.Fatalf("the jar was not fetched from repository B: %v", frontB.pathsMatching("hello"))
	}
	sent := n.metric(t, "nora_sidecar_hedges_sent_total", fmt.Sprintf("registry=%q", mavenKeyA))
	won := n.metric(t, "nora_sidecar_hedges_won_total", fmt.Sprintf("registry=%q", mavenKeyA))
	if sent < 1 || won < 1 {
		t.Fatalf("hedges for A: %v sent, %v won; want at least one of each", sent, won)
	}
	if b := n.breaker(t, mavenKeyA); b.State != "closed" || b.FailureCount != 0 {
		t.Fatalf("repository A, only slow: breaker %s with %d failures, want closed with none", b.State, b.FailureCount)
	}
	summary("mvn dependency:get", "repository A answering 4 s late (toxiproxy latency)",
		fmt.Sprintf("served by B through %v hedges (%v won); A closed, no failure; healthy run %.2fs", sent, won, healthy.wall.Seconds()),
		slow.wall, frontA.seen()+" "+frontB.seen())
}
