//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/internal/squidtest"
)

// TestCorporateParent: pip downloads through nora-breaker, which reaches
// the index only through squid (basic authentication, the password given
// as a Secret would: NORA_SIDECAR_PARENT_PROXY_PASSWORD), as behind a
// corporate egress proxy. Healthy: squid carries every request, with the
// credentials. The index down: squid answers for it, the index's breaker
// opens, pip is served from stale copies and the parent's breaker counts
// nothing. The index back (its breaker's probe closes it), then squid
// down: the parent's breaker opens, the index's count stays at 0, and pip
// is still served from stale copies.
func TestCorporateParent(t *testing.T) {
	const reset = 3 * time.Second
	s := loadSuite(t)
	e := &pipEnv{dir: scenarioDir(t, s)}
	wheel := buildWheel(t)
	indexAddr, index := serveDir(t, e.dir, "pypi-corp", startPyIndexRoot(t, e.dir, "pypi-corp", wheel))
	front := newFront(t, "pypi-corp", "http://"+indexAddr, nil, nil)
	_, frontPort, _ := strings.Cut(front.addr, ":")
	sq := squidtest.Start(t, squidtest.Options{Users: map[string]string{"build-bot": "corp-s3cret"},
		Hosts: map[string]string{"pypi-corp.test": "127.0.0.1"}, OnStart: func(pid int) { recordPID(pid, "squid") }})
	indexURL := "http://pypi-corp.test:" + frontPort + "/simple"
	e.n = startNora(t, s, e.dir, noraOpts{
		formats: breakerTOML(2, reset, "pypi") + fmt.Sprintf(`[pypi]
proxies = [%q]
proxy_timeout = 5
[circuit_breaker.overrides.parent]
reset_timeout = 600
`, indexURL),
		stale:   true,
		sidecar: fmt.Sprintf("parent_proxy = \"http://build-bot@%s\"\n", sq.Addr),
		env:     []string{"NORA_SIDECAR_PARENT_PROXY_PASSWORD=corp-s3cret"},
	})
	e.env = cleanEnv("HOME="+e.dir, "PIP_CONFIG_FILE=/dev/null")
	e.py = strings.TrimSpace(mustRun(t, e.dir, e.env, time.Minute, "python3", "-c", "import sys; print(sys.executable)").out)
	indexKey, parentKey := "pypi:"+indexURL, "parent:"+sq.URL
	download := func() clientRun {
		t.Helper()
		e.run++
		out := fmt.Sprintf("%s/dl-%d", e.dir, e.run)
		return mustRun(t, e.dir, e.env, 3*time.Minute, e.py, "-m", "pip", "download", "--no-deps", "--no-cache-dir",
			"--disable-pip-version-check", "--retries", "0", "--trusted-host", "pypi-corp.test",
			"--index-url", indexURL+"/", "--proxy", e.n.proxyURL, "-d", out, "e2e-hello==0.1.0")
	}

	// Healthy: every request goes through squid, with the credentials.
	healthy := download()
	waitFor(t, "squid's access log of the page and the wheel", 10*time.Second, func() bool {
		log := sq.AccessLog()
		return strings.Contains(log, "GET "+indexURL+"/e2e-hello/ build-bot") &&
			strings.Contains(log, wheelName+" build-bot")
	})
	if e.n.state(t, indexKey) != 0 || e.n.state(t, parentKey) != 0 {
		t.Fatalf("healthy: breakers index %v parent %v", e.n.state(t, indexKey), e.n.state(t, parentKey))
	}
	e.n.waitStaleCommitted(t)

	// The index down: squid answers for it; its breaker opens, the
	// parent's counts nothing, pip gets stale copies.
	index.stop()
	down := download()
	if page := e.n.lastLog(t, `"path":"/simple/e2e-hello/"`); page["result"] != "stale" {
		t.Fatalf("index down: the page was %v, want a stale copy", page)
	}
	if e.n.state(t, indexKey) != 1 {
		t.Fatalf("index down: its breaker %+v, want open", e.n.breaker(t, indexKey))
	}
	if b := e.n.breaker(t, parentKey); b.State != "closed" || b.FailureCount != 0 {
		t.Fatalf("index down: the parent's breaker %+v, want nothing counted", b)
	}

	// The index back on a new port: its probe closes its breaker.
	indexAddr, _ = serveDir(t, e.dir, "pypi-corp-2", e.dir+"/pypi-corp")
	front.retarget(indexAddr)
	e.n.waitProbeDue(t, indexKey, reset)
	download()
	if e.n.state(t, indexKey) != 0 {
		t.Fatalf("index back: its breaker %+v, want closed by the probe", e.n.breaker(t, indexKey))
	}
	e.n.waitStaleCommitted(t)

	// squid down: the parent's breaker opens; the index's count stays 0.
	sq.Stop()
	before := front.reqs.Load()
	parentDown := download()
	if page := e.n.lastLog(t, `"path":"/simple/e2e-hello/"`); page["result"] != "stale" {
		t.Fatalf("squid down: the page was %v, want a stale copy", page)
	}
	if e.n.state(t, parentKey) != 1 {
		t.Fatalf("squid down: the parent's breaker %+v, want open", e.n.breaker(t, parentKey))
	}
	if b := e.n.breaker(t, indexKey); b.State != "closed" || b.FailureCount != 0 {
		t.Fatalf("squid down: the index's breaker %+v moved", b)
	}
	if front.reqs.Load() != before {
		t.Fatal("squid down: a request reached the index")
	}
	if strings.Contains(e.n.proc.logText(), "corp-s3cret") {
		t.Fatal("nora-breaker logged the parent's password")
	}
	summary("pip download through squid (basic auth)", "index stopped, then back; then squid stopped",
		fmt.Sprintf("healthy %.2fs; index down: stale, index breaker open, parent untouched (%.2fs); squid down: stale, parent breaker open, index untouched (%.2fs)",
			healthy.wall.Seconds(), down.wall.Seconds(), parentDown.wall.Seconds()),
		parentDown.wall, front.seen())
}

// startPyIndexRoot lays out the index of startPyIndex in dir/name and
// returns the folder, for serveDir (the scenario serves it twice).
func startPyIndexRoot(t *testing.T, dir, name string, wheel []byte) string {
	t.Helper()
	root := dir + "/" + name
	writePyIndex(t, root, "../../", wheel)
	return root
}
