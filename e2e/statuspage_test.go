//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// chromiumPath finds Debian's chromium. run.sh installs it; a developer
// running the suite by hand without it gets a skip that says so, but CI
// (CI set) fails instead, so the browser test can never be skipped there.
func chromiumPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("chromium")
	if err == nil {
		return p
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("chromium not installed (e2e/run.sh installs Debian's chromium): %v", err)
	}
	t.Skip("chromium not installed: apt-get install -y --no-install-recommends chromium (e2e/run.sh does)")
	return ""
}

// chromium runs headless Chromium once with a fresh profile and returns its
// standard output. The background-networking flags keep it from reaching
// for Google's hosts, which this closed network refuses.
func chromium(t *testing.T, bin, dir string, args ...string) string {
	t.Helper()
	profile, err := os.MkdirTemp(dir, "chromium-profile-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(profile)
	argv := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--user-data-dir=" + profile}, args...)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, argv...)
	cmd.Env = cleanEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, tail(stderr.String(), 3000))
	}
	return stdout.String()
}

// statusUpstream answers 200, or 503 while failing, or holds the request
// until the test ends while hanging.
type statusUpstream struct {
	mode atomic.Int32 // statusUp, statusFailing, statusHanging
	hold chan struct{}
}

const (
	statusUp int32 = iota
	statusFailing
	statusHanging
	statusLimiting // 429 with Retry-After: 600
)

func (u *statusUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch u.mode.Load() {
	case statusFailing:
		http.Error(w, "down for the test", http.StatusServiceUnavailable)
	case statusHanging:
		select {
		case <-u.hold:
		case <-r.Context().Done():
		}
	case statusLimiting:
		w.Header().Set("Retry-After", "600")
		http.Error(w, "slow down", http.StatusTooManyRequests)
	default:
		fmt.Fprintln(w, "ok")
	}
}

// TestStatusPageInChromium puts one breaker in each state, loads the admin
// listener's status page in headless Chromium, checks the rendered DOM
// shows every state and writes a screenshot next to the scenario's logs.
func TestStatusPageInChromium(t *testing.T) {
	s := loadSuite(t)
	bin := chromiumPath(t)
	dir := scenarioDir(t, s)
	start := time.Now()
	hold := make(chan struct{})
	ups := map[string]*statusUpstream{}
	resolve := map[string]string{}
	for i, name := range []string{"maven-a", "maven-b", "npm", "pypi", "crates", "files"} {
		u := &statusUpstream{hold: hold}
		ups[name] = u
		f := newFront(t, name, "", u, nil)
		resolve[fmt.Sprintf("%s.test:%d", name, 8081+i)] = f.addr
	}
	n := startNora(t, s, dir, noraOpts{resolve: resolve, sidecar: `[sidecar.aliases]
pypi = ["files.test:8086"]
`, formats: `[circuit_breaker]
enabled = true
failure_threshold = 2
reset_timeout = 60
[circuit_breaker.overrides.cargo]
reset_timeout = 1
[registries]
enable = ["maven", "npm", "pypi", "cargo"]
[maven]
proxies = ["http://maven-a.test:8081/maven2", "http://maven-b.test:8082/maven2"]
[npm]
proxy = "http://npm.test:8083"
[pypi]
proxy = "http://pypi.test:8084/simple"
[cargo]
proxy = "http://crates.test:8085"
proxy_timeout = 300
`})
	t.Cleanup(func() { close(hold) }) // runs before the proxy is stopped
	pu, _ := url.Parse(n.proxyURL)
	client := &http.Client{Timeout: 5 * time.Minute, Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}
	// Each answer is read to its end, so that the proxy has finished it
	// (and its shared fetch, docs/behaviour.md §5.9) before the next
	// request: one left unread ends as a client gone, and an identical
	// request sent meanwhile would join its fetch and share its one
	// verdict.
	get := func(u string) {
		resp, err := client.Get(u)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	mavenA, mavenB := "maven:http://maven-a.test:8081/maven2", "maven:http://maven-b.test:8082/maven2"
	npm, pypi := "npm:http://npm.test:8083", "pypi:http://pypi.test:8084/simple"
	files := pypi + "@files.test:8086" // the file host's own breaker

	// npm stays closed but asks to be left alone (429, throttled); maven A
	// fails until its breaker opens (each failure served by B); pypi's index
	// host is forced open while its file host's own breaker stays closed;
	// cargo's probe hangs, so its breaker is half-open while the page is
	// read.
	get("http://npm.test:8083/left-pad")
	ups["npm"].mode.Store(statusLimiting)
	get("http://npm.test:8083/left-pad")
	get("http://files.test:8086/packages/x.whl")
	ups["maven-a"].mode.Store(statusFailing)
	for range 3 {
		get("http://maven-a.test:8081/maven2/g/a/1/a-1.jar")
	}
	force, _ := http.NewRequest(http.MethodPost, n.admin+"/breakers/force?key="+url.QueryEscape(pypi)+"&state=open", nil)
	resp, err := n.c.Do(force)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("force pypi open: %v %v", resp, err)
	}
	resp.Body.Close()
	ups["crates"].mode.Store(statusFailing)
	for _, name := range []string{"serde", "tokio"} { // two failures, never one shared
		get("http://crates.test:8085/api/v1/crates/" + name)
	}
	n.waitProbeDue(t, "cargo", time.Second)
	ups["crates"].mode.Store(statusHanging)
	go get("http://crates.test:8085/api/v1/crates/serde")
	waitFor(t, "cargo probe in flight", 10*time.Second, func() bool { return n.breaker(t, "cargo").State == "half_open" })

	dom := chromium(t, bin, dir, "--dump-dom", n.admin+"/")
	writeFile(t, filepath.Join(dir, "status-page.dom.html"), dom)
	want := map[string]string{mavenA: `data-state="open" data-forced=""`, mavenB: `data-state="closed"`,
		npm: `data-state="closed" data-forced="" data-throttled="true"`, pypi: `data-state="open" data-forced="open"`,
		files: `data-state="closed"`, "cargo": `data-state="half_open"`}
	for key, attrs := range want {
		re := regexp.MustCompile(`<tr class="breaker" data-key="` + regexp.QuoteMeta(key) + `"([^>]*)>`)
		m := re.FindStringSubmatch(dom)
		if m == nil || !strings.Contains(m[1], attrs) {
			t.Errorf("%s: the page's row %q lacks %s", key, m, attrs)
		}
	}
	for _, frag := range []string{`id="overall" data-status="degraded"`, `data-format="maven" data-status="open"`,
		`data-format="cargo" data-status="half_open"`, "threshold reached", "probe due", "forced open",
		"probe in flight", `class="countdown"`, "throttled, ", "files.test:8086",
		"<td><code>" + mavenA + "</code></td><td><code>" + mavenB + "</code></td>"} {
		if !strings.Contains(dom, frag) {
			t.Errorf("rendered page lacks %s", frag)
		}
	}

	shot := filepath.Join(dir, "status-page.png")
	chromium(t, bin, dir, "--hide-scrollbars", "--window-size=1200,1000", "--screenshot="+shot, n.admin+"/")
	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil || img.Bounds().Dx() != 1200 {
		t.Fatalf("screenshot %s: %v %v", shot, err, img)
	}
	t.Logf("screenshot: %s (maven A open by threshold with its probe counting down, maven B closed, npm closed "+
		"but throttled with its seconds left, pypi's index host forced open and its file host's own breaker closed, "+
		"cargo half-open with its probe in flight, fallbacks A → B, the transition timeline)", shot)
	summary("chromium --dump-dom/--screenshot", "maven A 503s, npm 429s, pypi forced, cargo probe hanging",
		"every state on the page; screenshot "+shot, time.Since(start), "")
}
