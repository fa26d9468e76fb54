//go:build e2e

package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestClientReactions measures what each supported client does when the
// proxy answers for a registry in its own name because nothing can serve:
// its 503 with Retry-After (the upstream's breaker forced open, so the
// Retry-After is the reset_timeout) or its 429 with Retry-After (the upstream
// answered 429, so its host is throttled for the time it asked). Each client
// runs with its default retry settings and a fresh cache, against one
// upstream per format and no stale copies, and one line per client is
// printed: its version, the answer, its exit, how many requests it sent,
// how far apart its retries of one URL were, and its wall time.
//
// Timings are printed, never asserted: they are the client's business. What
// is asserted is the proxy's side: every request the client sent for the
// registry got the proxy's own answer with the status of the scenario, the
// upstream saw nothing (503) or one request per throttle window (429), the
// answer carries the Retry-After of the scenario, and the client did not
// succeed (a success would mean it reached the registry some other way).
//
// E2E_REACTIONS picks the scenarios: unset runs 503 and 429 with
// Retry-After 5 s, both in parallel, without the reactions that take a
// minute or more whatever the answer says (npm's and pnpm's own back-off,
// mvn's from a 429); "full" runs both statuses with no Retry-After (from a
// fake proxy: nora-breaker always sends one) and with 1, 5, 30 and 120 s,
// about 35 minutes with -parallel 10 (give go test -timeout 60m); a list
// such as "503:30,429:0" runs those. E2E_REACTIONS_CLIENTS, a
// comma-separated list of row names, runs only those clients.
func TestClientReactions(t *testing.T) {
	s := loadSuite(t)
	answers := reactionAnswers(t, os.Getenv("E2E_REACTIONS"))
	clients := selectClients(t, reactionClients(s), os.Getenv("E2E_REACTIONS_CLIENTS"))
	versions := clientVersions(t, s, clients)
	table := &reactionTable{}
	t.Cleanup(func() { table.print(answers) })
	for _, a := range answers {
		t.Run(a.name(), func(t *testing.T) {
			t.Parallel()
			b := startReactionBench(t, s, a)
			b.checkAnswer(t)
			for _, c := range clients {
				if slices.Contains(c.longFor, a.status) && os.Getenv("E2E_REACTIONS") == "" {
					fmt.Printf("REACTION | %s | %s | skipped in the short run (minutes of its own back-off)\n", c.name, a.label())
					continue
				}
				row := b.measure(t, c, versions[c.name])
				table.add(row)
				fmt.Println(row.line())
			}
		})
	}
}

// reactionAnswer is one way the proxy answers for a registry.
type reactionAnswer struct {
	status     int           // 503: breaker forced open; 429: upstream throttled
	retryAfter time.Duration // the Retry-After the proxy gives; 0: none (the fake)
}

func (a reactionAnswer) name() string {
	if a.retryAfter == 0 {
		return fmt.Sprintf("%d_no_retry_after", a.status)
	}
	return fmt.Sprintf("%d_retry_after_%ds", a.status, int(a.retryAfter.Seconds()))
}

func (a reactionAnswer) label() string {
	if a.retryAfter == 0 {
		return fmt.Sprintf("%d, no Retry-After", a.status)
	}
	return fmt.Sprintf("%d + Retry-After %d", a.status, int(a.retryAfter.Seconds()))
}

// reactionAnswers is the scenario list E2E_REACTIONS asks for: unset, the
// short list; "full", every scenario of the report; or a comma-separated
// list of status:seconds ("503:30,429:120"), 0 seconds meaning no
// Retry-After at all (answered by the fake).
func reactionAnswers(t *testing.T, mode string) []reactionAnswer {
	t.Helper()
	short := []reactionAnswer{{503, 5 * time.Second}, {429, 5 * time.Second}}
	switch mode {
	case "":
		return short
	case "full":
		mode = "503:0,503:1,503:5,503:30,503:120,429:0,429:1,429:5,429:30,429:120"
	}
	var out []reactionAnswer
	for _, item := range strings.Split(mode, ",") {
		var status, secs int
		if _, err := fmt.Sscanf(strings.TrimSpace(item), "%d:%d", &status, &secs); err != nil ||
			(status != 503 && status != 429) || secs < 0 {
			t.Fatalf("E2E_REACTIONS: %q is not 503:SECONDS or 429:SECONDS", item)
		}
		out = append(out, reactionAnswer{status, time.Duration(secs) * time.Second})
	}
	return out
}

// The one upstream of each format, by the name and port clients address.
// Every name is mapped to a loopback front with [sidecar.resolve].
const (
	rxPypi     = "pypi-a.test:8080"
	rxNpm      = "npm-a.test:4873"
	rxMaven    = "maven-a.test:8082"
	rxGo       = "goproxy-a.test:8084"
	rxDeb      = "deb-a.test:8090"
	rxRegistry = "registry-a.test:5000"
	rxIndex    = "index.crates.io:443"
	rxStatic   = "static.crates.io:443"
)

// reactionBench is what one scenario's clients talk to: nora-breaker
// answering every format's one upstream in one way, with the upstreams
// behind it (in the 429 scenario they answer every request with 429 and
// the scenario's Retry-After; in the 503 scenario their breakers are forced
// open and nothing may reach them), or, for an answer without Retry-After,
// which nora-breaker never gives, a fake proxy that gives it.
type reactionBench struct {
	answer reactionAnswer
	dir    string
	proxy  proxyAccess
	source requestSource

	n             *nora  // nil with the fake
	plain, secure *front // nora-breaker's upstreams over HTTP and HTTPS; nil with the fake

	ctdOnce sync.Once
	ctd     *containerd // started on first use: only ctr needs a daemon
}

// proxyAccess is what a client needs to use the bench's proxy.
type proxyAccess struct {
	url, port string
	caPEM     string // interception CA certificate
	bundle    string // system roots plus the interception CA, for Go clients
}

// requestSource tells which requests the proxy saw: mark is a position in
// its record, since the requests recorded after a mark.
type requestSource interface {
	mark() int
	since(t *testing.T, mark int) []logLine
}

// startReactionBench starts the bench of answer a.
func startReactionBench(t *testing.T, s suite, a reactionAnswer) *reactionBench {
	t.Helper()
	b := &reactionBench{answer: a, dir: scenarioDir(t, s)}
	if a.retryAfter == 0 {
		f := startFakeAnswerer(t, b.dir, a.status)
		b.proxy, b.source = f.access, f
		return b
	}
	b.startNora(t, s)
	b.proxy = proxyAccess{url: b.n.proxyURL, port: b.n.proxyPort, caPEM: b.n.caPEM, bundle: b.n.bundle}
	b.source = noraLog{b.n}
	return b
}

// startNora starts the upstreams and nora-breaker and, for the 503
// scenario, forces every breaker open.
func (b *reactionBench) startNora(t *testing.T, s suite) {
	t.Helper()
	a := b.answer
	ca := newOriginCA(t, b.dir)
	throttled := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", fmt.Sprint(int(a.retryAfter.Seconds())))
		http.Error(w, "rate limited", http.StatusTooManyRequests)
	})
	b.plain = newFront(t, "upstream-http", "", throttled, nil)
	tlsCfg := ca.serverTLS(t, "registry-a.test", "index.crates.io", "static.crates.io")
	tlsCfg.NextProtos = []string{"http/1.1"}
	b.secure = newFront(t, "upstream-https", "", throttled, tlsCfg)

	// In the 503 scenario a forced-open breaker reports reset_timeout as its
	// Retry-After, moved by the jitter, which is off here: each client is
	// told the scenario's value exactly (with the default jitter a 5 s
	// reset_timeout is told as 5 or 6 s). In the 429 one the breakers stay
	// closed (a 429 is no failure) and reset_timeout does not matter.
	reset := a.retryAfter
	if a.status == http.StatusTooManyRequests {
		reset = 30 * time.Second
	}
	resolve := map[string]string{rxRegistry: b.secure.addr, rxIndex: b.secure.addr, rxStatic: b.secure.addr}
	for _, h := range []string{rxPypi, rxNpm, rxMaven, rxGo, rxDeb} {
		resolve[h] = b.plain.addr
	}
	b.n = startNora(t, s, b.dir, noraOpts{
		formats: breakerTOML(5, reset, "pypi,npm,maven,go,cargo,docker,deb", "jitter = 0") + `[pypi]
proxies = ["http://` + rxPypi + `/simple"]
proxy_timeout = 5
[npm]
proxy = "http://` + rxNpm + `"
proxy_timeout = 5
[maven]
proxies = ["http://` + rxMaven + `"]
proxy_timeout = 5
[go]
proxy = "http://` + rxGo + `"
proxy_timeout = 5
[cargo]
proxy = "https://crates.io"
proxy_timeout = 5
[docker]
proxy_timeout = 5
[[docker.upstreams]]
url = "https://` + rxRegistry + `"
[deb]
proxy_timeout = 5
[deb.proxies]
e2e = "http://` + rxDeb + `/debian"
`,
		// Every format's clients are told the scenario's Retry-After as
		// it is: what a client does with a given value is what is
		// measured (the product's own limit, retry_after_max, is then
		// read off the table). Every refusal is logged, so that each
		// request a client sends is counted (the default summarises a
		// key's refusals to one line a second).
		sidecar:    "log_refusals = \"every\"\n[sidecar.retry_after_max]\npypi = \"0\"\nnpm = \"0\"\nmaven = \"0\"\ngo = \"0\"\ncargo = \"0\"\ndocker = \"0\"\ndeb = \"0\"\n",
		resolve:    resolve,
		upstreamCA: ca.pemPath,
	})
	if a.status == http.StatusServiceUnavailable {
		for _, br := range b.n.breakers(t) {
			b.force(t, br.Key)
		}
	}
}

// force opens key's breaker through the admin API.
func (b *reactionBench) force(t *testing.T, key string) {
	t.Helper()
	resp, err := b.n.c.Post(b.n.admin+"/breakers/force?key="+key+"&state=open", "", nil)
	if err != nil {
		t.Fatalf("force %s open: %v", key, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("force %s open: %s %s", key, resp.Status, body)
	}
}

// checkAnswer asks the proxy once, as a plain client would, and checks the
// answer is the scenario's: its status, the breaker key, and a Retry-After
// of the scenario's value (503: reset_timeout exactly; 429: the time left,
// at most what the upstream asked; none from the fake when it omits it).
func (b *reactionBench) checkAnswer(t *testing.T) {
	t.Helper()
	from := b.source.mark()
	c := plainGoClient(b.proxy.url)
	resp, err := c.Get("http://" + rxPypi + "/simple/e2e-hello/")
	if err != nil {
		t.Fatalf("plain GET through the proxy: %v", err)
	}
	resp.Body.Close()
	// Its record must be in before the first client's window opens.
	waitFor(t, "the plain GET's record", 10*time.Second, func() bool { return len(b.source.since(t, from)) > 0 })
	ra := resp.Header.Get("Retry-After")
	want := int(b.answer.retryAfter.Seconds())
	var got int
	if want == 0 {
		if resp.StatusCode != b.answer.status || ra != "" {
			t.Fatalf("the fake answered %s with Retry-After %q; want %d without one", resp.Status, ra, b.answer.status)
		}
		return
	}
	if _, err := fmt.Sscan(ra, &got); err != nil || resp.StatusCode != b.answer.status ||
		resp.Header.Get("X-Nora-Breaker-Key") == "" || got < 1 || got > want ||
		(b.answer.status == http.StatusServiceUnavailable && got != want) {
		t.Fatalf("the proxy answered %s with Retry-After %q, key %q; want %d with Retry-After %d",
			resp.Status, ra, resp.Header.Get("X-Nora-Breaker-Key"), b.answer.status, want)
	}
}

// noraLog reads nora-breaker's request log lines.
type noraLog struct{ n *nora }

func (l noraLog) mark() int { return len(l.n.proc.logText()) }

// since returns the request lines logged after offset from, once no new
// line has come for half a second (a line is written when its answer's body
// has been sent, which can trail the client's exit a little); it waits at
// most five seconds for that.
func (l noraLog) since(t *testing.T, from int) []logLine {
	t.Helper()
	read := func() []logLine {
		text := l.n.proc.logText()
		if len(text) < from {
			return nil
		}
		var out []logLine
		for _, raw := range strings.Split(text[from:], "\n") {
			var ll logLine
			if json.Unmarshal([]byte(raw), &ll) == nil && ll.Message == "request" {
				out = append(out, ll)
			}
		}
		return out
	}
	lines := read()
	stableSince := time.Now()
	deadline := time.Now().Add(5 * time.Second)
	for time.Since(stableSince) < 500*time.Millisecond && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		if next := read(); len(next) != len(lines) {
			lines, stableSince = next, time.Now()
		}
	}
	return lines
}

// reactionRow is one client's measured reaction to one answer.
type reactionRow struct {
	client, version string
	answer          reactionAnswer
	exit            string
	requests        int           // requests it sent for the registry's hosts
	urls            int           // distinct URLs among them
	urlHosts        int           // distinct hosts among them
	perURL          int           // most requests for one URL (1 = no retry)
	gaps            []int         // seconds between the requests for that URL (log time, 1 s resolution)
	upstream        int64         // requests that reached the upstream meanwhile
	wall            time.Duration // the client's wall time
	said            string        // the client's last words about it
}

// slept says how the client spaced its retries of one URL: "Retry-After"
// when every gap is the answer's Retry-After (give or take the log's whole
// second; a gap of 0 never counts), "own back-off" otherwise. A throttled
// host's 429 says the time left, so the first one a client meets may say
// less than the scenario's value (an earlier client opened the window): the
// first gap of a 429 run is left out when later ones can tell.
func (r reactionRow) slept() string {
	if r.perURL <= 1 {
		return "no retry"
	}
	gaps := r.gaps
	if r.answer.status == http.StatusTooManyRequests && len(gaps) > 1 {
		gaps = gaps[1:]
	}
	ra := int(r.answer.retryAfter.Seconds())
	for _, g := range gaps {
		if ra == 0 || g < max(ra-1, 1) || g > ra+1 {
			return "own back-off"
		}
	}
	return "Retry-After"
}

func (r reactionRow) line() string {
	return fmt.Sprintf("REACTION | %s %s | %s | exit=%s | requests=%d (urls=%d, max %d per url, gaps %vs) | "+
		"wall=%.1fs | waits: %s | upstream saw %d | said: %s",
		r.client, r.version, r.answer.label(), r.exit, r.requests, r.urls, r.perURL, r.gaps,
		r.wall.Seconds(), r.slept(), r.upstream, r.said)
}

// reactionTable collects the rows of every scenario for the closing table.
type reactionTable struct {
	mu   sync.Mutex
	rows []reactionRow
}

func (tb *reactionTable) add(r reactionRow) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.rows = append(tb.rows, r)
}

// print writes every row as a Markdown table, clients in their order and
// one column per answer.
func (tb *reactionTable) print(answers []reactionAnswer) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	var order []string
	cells := map[string]map[string]string{}
	versions := map[string]string{}
	for _, r := range tb.rows {
		if cells[r.client] == nil {
			cells[r.client] = map[string]string{}
			order = append(order, r.client)
		}
		versions[r.client] = r.version
		cells[r.client][r.answer.name()] = fmt.Sprintf("%d req (%d/url), %.1fs, exit %s, waits: %s",
			r.requests, r.perURL, r.wall.Seconds(), r.exit, r.slept())
	}
	var b strings.Builder
	b.WriteString("REACTIONS TABLE\n| client | version |")
	for _, a := range answers {
		b.WriteString(" " + a.label() + " |")
	}
	b.WriteString("\n|---|---|" + strings.Repeat("---|", len(answers)) + "\n")
	for _, c := range order {
		fmt.Fprintf(&b, "| %s | %s |", c, versions[c])
		for _, a := range answers {
			b.WriteString(" " + cells[c][a.name()] + " |")
		}
		b.WriteString("\n")
	}
	fmt.Print(b.String())
}

// measure runs one client in a fresh folder and reads, from the proxy's
// request log, what it sent meanwhile.
func (b *reactionBench) measure(t *testing.T, c reactionClient, version string) reactionRow {
	t.Helper()
	dir := filepath.Join(b.dir, slug(c.name))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	from := b.source.mark()
	upFrom := b.upstreamRequests()
	// Room for a client that waits out Retry-After five times, and for its
	// own start-up and back-off (Maven's for a 429 is over five minutes); a
	// client still running then is reported, not waited for.
	limit := 6*b.answer.retryAfter + 8*time.Minute
	r := c.run(t, b, dir, limit)
	writeFile(t, filepath.Join(dir, "output.txt"), r.out)
	lines := b.source.since(t, from)
	row := reactionRow{client: c.name, version: version, answer: b.answer, wall: r.wall,
		exit: exitOf(r), said: lastWords(r.out), upstream: b.upstreamRequests() - upFrom}
	row.analyse(lines, c.hosts)

	// The proxy's side of it, which the project promises.
	if row.requests == 0 {
		t.Errorf("%s: no request for %v reached the proxy (is the client pointed at it?)\n%s", c.name, c.hosts, tail(r.out, 2000))
	}
	for _, l := range lines {
		if !hostIn(l.Host, c.hosts) || l.Result == "intercepted" || l.Result == "tunnel" {
			continue
		}
		if l.Status != answeredStatus(b.answer.status, l.Format) || (l.Result != "synthesized_503" && l.Result != "throttled") {
			t.Errorf("%s: %s %s%s was answered %d (%s), want the proxy's own %d",
				c.name, l.Method, l.Host, l.Path, l.Status, l.Result, b.answer.status)
		}
	}
	if failed := c.failed; (failed == nil && r.err == nil) || (failed != nil && !failed(r)) {
		t.Errorf("%s succeeded although nothing could serve:\n%s", c.name, tail(r.out, 2000))
	}
	b.checkUpstream(t, c.name, row)
	return row
}

// checkUpstream fails when the upstream saw more than the scenario allows:
// nothing while its breaker is forced open; while throttled, one request
// per host per Retry-After window the run spanned.
func (b *reactionBench) checkUpstream(t *testing.T, client string, row reactionRow) {
	t.Helper()
	if b.plain == nil {
		return // the fake has no upstream
	}
	allowed := int64(0)
	if b.answer.status == http.StatusTooManyRequests {
		allowed = int64(row.urlHosts) * (1 + int64(row.wall/b.answer.retryAfter))
	}
	if row.upstream > allowed {
		t.Errorf("%s: the upstream saw %d requests during the run, at most %d allowed", client, row.upstream, allowed)
	}
}

// upstreamRequests is what both upstream fronts have seen so far (none
// behind the fake).
func (b *reactionBench) upstreamRequests() int64 {
	if b.plain == nil {
		return 0
	}
	p, _ := b.plain.count()
	s, _ := b.secure.count()
	return p + s
}

// logLine is the part of a request log line the table needs.
type logLine struct {
	Time    time.Time `json:"time"`
	Format  string    `json:"format"`
	Message string    `json:"message"`
	Method  string    `json:"method"`
	Host    string    `json:"host"`
	Path    string    `json:"path"`
	Result  string    `json:"result"`
	Status  int       `json:"status"`
}

// analyse counts the client's requests for hosts, and the spacing of its
// retries of the URL it asked for most often.
func (r *reactionRow) analyse(lines []logLine, hosts []string) {
	byURL := map[string][]time.Time{}
	seenHosts := map[string]bool{}
	for _, l := range lines {
		if !hostIn(l.Host, hosts) || l.Result == "intercepted" || l.Result == "tunnel" {
			continue
		}
		r.requests++
		u := l.Method + " " + l.Host + l.Path
		byURL[u] = append(byURL[u], l.Time)
		seenHosts[l.Host] = true
	}
	r.urls, r.urlHosts = len(byURL), len(seenHosts)
	keys := make([]string, 0, len(byURL))
	for u := range byURL {
		keys = append(keys, u)
	}
	sort.Strings(keys)
	most := ""
	for _, u := range keys {
		if len(byURL[u]) > r.perURL {
			r.perURL, most = len(byURL[u]), u
		}
	}
	times := byURL[most]
	for i := 1; i < len(times); i++ {
		r.gaps = append(r.gaps, int(times[i].Sub(times[i-1]).Round(time.Second).Seconds()))
	}
}

// hostIn reports whether host (as logged: host or host:port) is one of
// hosts (host:port), a default port being optional.
func hostIn(host string, hosts []string) bool {
	for _, h := range hosts {
		if host == h || host+":443" == h || host+":80" == h {
			return true
		}
	}
	return false
}

// exitOf names how a client run ended.
func exitOf(r clientRun) string {
	var ee *exec.ExitError
	switch {
	case r.err == nil:
		return "0"
	case strings.Contains(r.err.Error(), "still running after"):
		return "killed at limit"
	case errors.As(r.err, &ee):
		return fmt.Sprint(ee.ExitCode())
	}
	return r.err.Error()
}

// lastWords is the client's last line that mentions the failure, else its
// last non-empty line, shortened.
func lastWords(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	// A line about the proxy's answer: its status as a word (not inside a
	// folder name such as 503_retry_after_5s), or its wording.
	failureWords := regexp.MustCompile(`(?i)\b(503|429)\b|service unavailable|too many requests|unavailable|rate limit`)
	pick := ""
	for i := len(lines) - 1; i >= 0 && pick == ""; i-- {
		if l := strings.TrimSpace(lines[i]); failureWords.MatchString(l) {
			pick = l
		}
	}
	if pick == "" && len(lines) > 0 {
		pick = strings.TrimSpace(lines[len(lines)-1])
	}
	if len(pick) > 200 {
		pick = pick[:200] + "…"
	}
	return pick
}

// slug makes a client's row name a folder name: build tools do not all
// take spaces or parentheses in paths.
func slug(name string) string {
	return strings.Trim(strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, name), "-")
}

// answeredStatus is the status the proxy answers a scenario's request of
// format with: a throttled host's answer is a 503 for maven and docker,
// whose clients back a 429 off for minutes (docs/behaviour.md §5.6).
func answeredStatus(scenario int, format string) int {
	if scenario == http.StatusTooManyRequests && (format == "maven" || format == "docker") {
		return http.StatusServiceUnavailable
	}
	return scenario
}
