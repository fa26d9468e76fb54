//go:build e2e

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/internal/listenaddr"
)

// nora is one nora-breaker process started from the built binary. It binds
// port 0 for both listeners and reports what it got with --addr-file.
type nora struct {
	proc      *proc
	proxyURL  string // http://127.0.0.1:P, what clients get as HTTP(S)_PROXY
	proxyPort string // P
	admin     string
	caPEM     string // interception CA certificate (from `ca init`)
	bundle    string // system roots + interception CA, for Go clients' SSL_CERT_FILE
	staleDir  string // its stale_dir, "" without one
	c         *http.Client
}

// noraOpts is what differs between scenarios' configurations.
type noraOpts struct {
	formats    string            // TOML for [circuit_breaker], [registries] (breakerTOML) and the format tables
	resolve    map[string]string // [sidecar.resolve]
	upstreamCA string            // origin CA for HTTPS upstreams, or ""
	stale      bool              // give it a stale_dir
	// allowUnlisted sets deny_unlisted = false (hosts of no upstream are
	// tunnelled or forwarded as they are); by default they are refused.
	allowUnlisted bool
	// sidecar is more TOML for the [sidecar] table: keys first, then any of
	// its sub-tables ([sidecar.aliases]); [sidecar.resolve] comes from resolve.
	sidecar string
	// env is more environment for the proxy ("NAME=value"), as a Secret
	// would give it.
	env []string
}

// breakerTOML is the start of a scenario's config: breakers on with the
// given threshold and reset_timeout (whole seconds), any more lines of
// [circuit_breaker] (such as "jitter = 0"), and the formats enabled.
func breakerTOML(threshold int, reset time.Duration, enable string, more ...string) string {
	var extra strings.Builder
	for _, l := range more {
		extra.WriteString(l + "\n")
	}
	return fmt.Sprintf("[circuit_breaker]\nenabled = true\nfailure_threshold = %d\nreset_timeout = %d\n%s"+
		"[registries]\nenable = %q\n", threshold, int(reset.Seconds()), extra.String(), enable)
}

// startNora makes an interception CA with `nora-breaker ca init`, writes the
// config, starts the proxy, reads the addresses it bound from its address
// file and waits until /ready answers 200.
func startNora(t *testing.T, s suite, dir string, o noraOpts) *nora {
	t.Helper()
	caDir := filepath.Join(dir, "nora-ca")
	if out, err := exec.Command(s.binary, "ca", "init", "--out", caDir).CombinedOutput(); err != nil {
		t.Fatalf("ca init: %v\n%s", err, out)
	}
	n := &nora{caPEM: filepath.Join(caDir, "ca.pem"),
		c: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil}}}
	n.bundle = filepath.Join(dir, "roots-plus-nora-ca.pem")
	system, _ := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	ca, err := os.ReadFile(n.caPEM)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, n.bundle, string(system)+"\n"+string(ca))

	var b strings.Builder
	b.WriteString(o.formats)
	b.WriteString("\n[sidecar]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n")
	fmt.Fprintf(&b, "ca_cert = %q\nca_key = %q\n", n.caPEM, filepath.Join(caDir, "ca-key.pem"))
	if o.upstreamCA != "" {
		fmt.Fprintf(&b, "upstream_ca = %q\n", o.upstreamCA)
	}
	if o.stale {
		n.staleDir = filepath.Join(dir, "stale")
		fmt.Fprintf(&b, "stale_dir = %q\n", n.staleDir)
	}
	// deny_unlisted: a client reaching for any host but the test upstreams
	// gets 403 instead of a connection off this machine.
	fmt.Fprintf(&b, "deny_unlisted = %t\n", !o.allowUnlisted)
	b.WriteString("dial_timeout = \"2s\"\ntls_handshake_timeout = \"3s\"\nlog_level = \"info\"\n")
	b.WriteString(o.sidecar)
	b.WriteString("\n[sidecar.resolve]\n")
	keys := make([]string, 0, len(o.resolve))
	for k := range o.resolve {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "%q = %q\n", k, o.resolve[k])
	}
	cfg := filepath.Join(dir, "nora-breaker.toml")
	writeFile(t, cfg, b.String())
	if out, err := exec.Command(s.binary, "check-config", "--config", cfg).CombinedOutput(); err != nil {
		t.Fatalf("check-config: %v\n%s\n%s", err, out, b.String())
	}
	addrFile := filepath.Join(dir, "nora-breaker.addrs.json")
	if err := os.Remove(addrFile); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	// Maven's and docker's hedging off (docs/behaviour.md §5.10): the
	// scenarios count what each upstream of a chain sees, and on this busy
	// machine a loopback upstream's answer is now and then late enough for
	// a hedge to ask the next one (TestMaven's healthy run once reached its
	// second repository 7 times). Hedging has its own tests (proxy,
	// fallback, bench); a scenario's own env comes after and wins.
	env := append([]string{"NORA_MAVEN_HEDGE_AFTER=0", "NORA_DOCKER_HEDGE_AFTER=0"}, o.env...)
	n.proc = startProc(t, dir, "nora-breaker", cleanEnv(env...), s.binary, "serve", "--config", cfg, "--addr-file", addrFile)
	bound, err := listenaddr.WaitFile(addrFile, n.proc.cmd.Process.Pid, 20*time.Second)
	if err != nil {
		t.Fatalf("nora-breaker: %v\n%s", err, tail(n.proc.logText(), 3000))
	}
	n.proxyURL, n.admin = "http://"+bound["listen"], "http://"+bound["admin"]
	_, n.proxyPort, _ = net.SplitHostPort(bound["listen"])
	waitHTTP(t, n.admin+"/ready", 200, 20*time.Second)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("nora-breaker log tail:\n%s", tail(n.proc.logText(), 6000))
		}
	})
	return n
}

// metrics scrapes /metrics into "name{labels}" → value.
func (n *nora) metrics(t *testing.T) map[string]float64 {
	t.Helper()
	resp, err := n.c.Get(n.admin + "/metrics")
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			m[line[:i]] = v
		}
	}
	return m
}

// metric sums the series of name whose labels include every given
// label="value" pair.
func (n *nora) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	var sum float64
	for series, v := range n.metrics(t) {
		if series != name && !strings.HasPrefix(series, name+"{") {
			continue
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(series, l) {
				ok = false
				break
			}
		}
		if ok {
			sum += v
		}
	}
	return sum
}

// breaker is one entry of GET /breakers.
type breaker struct {
	Key            string   `json:"key"`
	State          string   `json:"state"`
	FailureCount   int      `json:"failure_count"`
	LastFailureAgo *float64 `json:"last_failure_seconds_ago"`
	RetryAfter     int      `json:"retry_after_seconds"`
	Rejections     uint64   `json:"rejections"`
	Throttled      bool     `json:"throttled"`
	// OpenTime is the current open period: reset_timeout moved by the
	// jitter (and grown by failed probes, when configured).
	OpenTime float64 `json:"open_time_seconds"`
}

// breakers returns the admin view of every breaker key.
func (n *nora) breakers(t *testing.T) []breaker {
	t.Helper()
	resp, err := n.c.Get(n.admin + "/breakers")
	if err != nil {
		t.Fatalf("/breakers: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var list []breaker
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatalf("/breakers: %v: %s", err, body)
	}
	return list
}

// breaker returns the admin view of one breaker key.
func (n *nora) breaker(t *testing.T, key string) breaker {
	t.Helper()
	list := n.breakers(t)
	for _, b := range list {
		if b.Key == key {
			return b
		}
	}
	t.Fatalf("/breakers has no key %q: %+v", key, list)
	return breaker{}
}

// waitProbeDue waits (polling the admin API) until the open breaker's
// open period (reset_timeout, jittered) has passed since its last failure,
// so the next request is the probe.
func (n *nora) waitProbeDue(t *testing.T, key string, reset time.Duration) {
	t.Helper()
	waitFor(t, key+" probe due", 2*reset+10*time.Second, func() bool {
		b := n.breaker(t, key)
		return b.State != "open" ||
			(b.LastFailureAgo != nil && *b.LastFailureAgo >= max(reset.Seconds(), b.OpenTime)+0.05)
	})
}

// state is the nora_circuit_breaker_state gauge of a key.
func (n *nora) state(t *testing.T, key string) float64 {
	return n.metric(t, "nora_circuit_breaker_state", fmt.Sprintf("registry=%q", key))
}

// transitions counts breaker transitions of key from → to.
func (n *nora) transitions(t *testing.T, key, from, to string) float64 {
	return n.metric(t, "nora_circuit_breaker_transitions_total",
		fmt.Sprintf("registry=%q", key), fmt.Sprintf("from=%q", from), fmt.Sprintf("to=%q", to))
}

// lastLog returns the last request log line containing frag, decoded.
func (n *nora) lastLog(t *testing.T, frag string) map[string]any {
	t.Helper()
	lines := strings.Split(n.proc.logText(), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if !strings.Contains(lines[i], frag) || !strings.Contains(lines[i], `"message":"request"`) {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(lines[i]), &m); err == nil {
			return m
		}
	}
	t.Fatalf("no request log line contains %s", frag)
	return nil
}

// waitStaleCommitted waits until every stale copy being written has been
// committed and is in the cache's index: no temp file is left in the
// stale folder and the objects gauge counts every metadata file. A copy is
// committed in the background after its client got the last byte (the
// client never waits for the disk), so a case that takes the upstreams
// down right after a client finished must wait for this first; a real
// outage does not start within the milliseconds an fsync takes.
func (n *nora) waitStaleCommitted(t *testing.T) {
	t.Helper()
	waitFor(t, "stale copies committed", 30*time.Second, func() bool {
		var metas int
		pending := false
		_ = filepath.WalkDir(n.staleDir, func(path string, d os.DirEntry, err error) error {
			switch {
			case err != nil || d.IsDir():
			case strings.HasSuffix(path, ".tmp"):
				pending = true
			case strings.HasSuffix(path, ".meta"):
				metas++
			}
			return nil
		})
		return !pending && n.metric(t, "nora_sidecar_stale_cache_objects") == float64(metas)
	})
}
