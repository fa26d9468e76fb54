package sharedstate

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/internal/listenaddr"
)

// The process fleet's breaker settings. reset_timeout is whole seconds in
// the config, so one second is the shortest reset_timeout the fleet can
// have; the jitter is the default, written out, so each open period lasts
// between procShortest and procLongest.
const (
	procThreshold = 3
	procReset     = time.Second
	procJitter    = 0.1
	procShortest  = time.Duration(float64(procReset) * (1 - procJitter))
	procLongest   = time.Duration(float64(procReset) * (1 + procJitter))
)

// buildBinary builds nora-breaker with scripts/build.sh (the flags CI ships
// with) into the test's temporary folder. NORA_BREAKER_BIN names a binary
// built beforehand instead.
func buildBinary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("NORA_BREAKER_BIN"); bin != "" {
		return bin
	}
	bin := filepath.Join(t.TempDir(), "nora-breaker")
	cmd := exec.Command("bash", "scripts/build.sh")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "OUT="+bin, "VERSION=fleet-test")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/build.sh: %v\n%s", err, out)
	}
	return bin
}

// deadUpstream is the registry the fleet stands in front of: the shared
// fake upstream, recording the process each client request went through
// (X-Fleet-Node, passed on by the proxy).
type deadUpstream = upstream

func newDeadUpstream(t *testing.T) *deadUpstream { return newUpstreamWithNodeHeader(t, "X-Fleet-Node") }

// key is the npm breaker key of the upstream (<format>:<url>, docs/behaviour.md §3).
func (u *deadUpstream) key() string { return "npm:" + u.srv.URL }

// proxyProc is one nora-breaker process of the fleet. It binds port 0 for
// both listeners and reports the addresses it got in addrFile.
type proxyProc struct {
	name, logPath, addrFile string
	listen, admin           string // as bound, from addrFile
	cmd                     *exec.Cmd
	done                    chan struct{}
	client, adminClient     *http.Client
	up                      *deadUpstream
}

// procConfig is one process's configuration: npm with the dead upstream
// as its only registry, and the fleet's Redis when redisURL is set.
func procConfig(p *proxyProc, redisURL string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[circuit_breaker]\nenabled = true\nfailure_threshold = %d\nreset_timeout = %d\njitter = %v\n\n",
		procThreshold, int(procReset.Seconds()), procJitter)
	fmt.Fprintf(&b, "[registries]\nenable = [\"npm\"]\n\n[npm]\nproxy = %q\nproxy_timeout = 5\n\n", p.up.srv.URL)
	b.WriteString("[sidecar]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\nlog_level = \"info\"\nlog_format = \"json\"\n")
	if redisURL != "" {
		fmt.Fprintf(&b, "shared_state = %q\nshared_state_prefix = \"fleet-test\"\n", redisURL)
	}
	return b.String()
}

// startProcFleet starts count processes of bin in front of u, sharing
// redisURL ("" = each alone), and waits until each answers /ready. Each is
// stopped by its PID when the test ends; a failed test prints their logs.
func startProcFleet(t *testing.T, bin string, count int, u *deadUpstream, redisURL string) []*proxyProc {
	t.Helper()
	dir := t.TempDir()
	fleet := make([]*proxyProc, count)
	for i := range fleet {
		p := &proxyProc{name: fmt.Sprintf("proc-%d", i), up: u, done: make(chan struct{}),
			addrFile:    filepath.Join(dir, fmt.Sprintf("proc-%d.addrs.json", i)),
			adminClient: &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil}}}
		conf := filepath.Join(dir, p.name+".toml")
		if err := os.WriteFile(conf, []byte(procConfig(p, redisURL)), 0o600); err != nil {
			t.Fatal(err)
		}
		p.logPath = filepath.Join(dir, p.name+".log")
		p.start(t, bin, conf)
		fleet[i] = p
	}
	for _, p := range fleet {
		p.bound(t)
		eventually(t, 15*time.Second, p.name+" answers /ready", func() bool {
			resp, err := p.adminClient.Get("http://" + p.admin + "/ready")
			if err == nil {
				resp.Body.Close()
			}
			return err == nil && resp.StatusCode == http.StatusOK
		})
	}
	return fleet
}

func (p *proxyProc) start(t *testing.T, bin, conf string) {
	t.Helper()
	f, err := os.Create(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(bin, "serve", "--config", conf, "--addr-file", p.addrFile)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	// The generated file is the whole configuration.
	p.cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		k := strings.ToUpper(kv[:max(strings.IndexByte(kv, '='), 0)])
		return strings.HasPrefix(k, "NORA_") || strings.HasSuffix(k, "_PROXY")
	})
	if err := p.cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("start %s: %v", p.name, err)
	}
	go func() { _ = p.cmd.Wait(); f.Close(); close(p.done) }()
	t.Cleanup(func() {
		// By PID: SIGTERM, then SIGKILL if it does not stop.
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			log, _ := os.ReadFile(p.logPath)
			t.Logf("%s log (last 3000 bytes):\n%s", p.name, log[max(len(log)-3000, 0):])
		}
	})
}

// bound waits for the process's address file and points the clients at
// the addresses it names.
func (p *proxyProc) bound(t *testing.T) {
	t.Helper()
	addrs, err := listenaddr.WaitFile(p.addrFile, p.cmd.Process.Pid, 15*time.Second)
	if err != nil {
		t.Fatalf("%s: %v", p.name, err)
	}
	p.listen, p.admin = addrs["listen"], addrs["admin"]
	proxyURL := &url.URL{Scheme: "http", Host: p.listen}
	p.client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}}
}

// answer is what one request through a process met.
type answer struct {
	proc     int
	at       time.Time
	status   int
	rejected bool // the proxy's own 503: the upstream was not asked
	err      error
	took     time.Duration
}

// get sends one npm request through p as a client would.
func (p *proxyProc) get(i int) answer {
	start := time.Now()
	req, _ := http.NewRequest(http.MethodGet, p.up.srv.URL+"/left-pad", nil)
	req.Header.Set("X-Fleet-Node", p.name)
	resp, err := p.client.Do(req)
	a := answer{proc: i, at: start, err: err}
	if err == nil {
		resp.Body.Close()
		a.status = resp.StatusCode
		a.rejected = resp.Header.Get("X-Nora-Breaker-Key") != "" && resp.Header.Get("X-Dead-Upstream") == ""
	}
	a.took = time.Since(start)
	return a
}

// adminJSON decodes one admin API answer.
func (p *proxyProc) adminJSON(t *testing.T, path string, v any) {
	t.Helper()
	resp, err := p.adminClient.Get("http://" + p.admin + path)
	if err != nil {
		t.Fatalf("%s %s: %v", p.name, path, err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("%s %s: %v", p.name, path, err)
	}
}

// state is the breaker state GET /breakers reports for the upstream's key.
func (p *proxyProc) state(t *testing.T) string {
	t.Helper()
	var views []struct{ Key, State string }
	p.adminJSON(t, "/breakers", &views)
	for _, v := range views {
		if v.Key == p.up.key() {
			return v.State
		}
	}
	t.Fatalf("%s: /breakers has no key %s", p.name, p.up.key())
	return ""
}

// shared is /health's shared_state.
func (p *proxyProc) shared(t *testing.T) string {
	t.Helper()
	var h struct {
		SharedState string `json:"shared_state"`
	}
	p.adminJSON(t, "/health", &h)
	return h.SharedState
}

// waitAll polls every process until check(p) holds for each.
func waitAll(t *testing.T, fleet []*proxyProc, within time.Duration, what string, check func(*proxyProc) bool) {
	t.Helper()
	eventually(t, within, what, func() bool {
		for _, p := range fleet {
			if !check(p) {
				return false
			}
		}
		return true
	})
}

// openAlone sends requests through p until one is rejected, and returns how
// many were admitted.
func openAlone(t *testing.T, p *proxyProc, i int) int {
	t.Helper()
	for n := range 3 * procThreshold {
		a := p.get(i)
		if a.err != nil {
			t.Fatalf("%s: %v", p.name, a.err)
		}
		if a.rejected {
			return n
		}
	}
	t.Fatalf("%s never rejected a request", p.name)
	return 0
}

// traffic sends requests through every process, each every 10ms, until
// stopped: the load a fleet sees, spread across all its processes.
type traffic struct {
	stop chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	out  []answer
	sent atomic.Int64
}

func spread(fleet []*proxyProc) *traffic {
	tr := &traffic{stop: make(chan struct{})}
	for i, p := range fleet {
		tr.wg.Go(func() {
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-tr.stop:
					return
				case <-tick.C:
					a := p.get(i)
					tr.mu.Lock()
					tr.out = append(tr.out, a)
					tr.mu.Unlock()
					tr.sent.Add(1)
				}
			}
		})
	}
	return tr
}

// end stops the traffic and returns every answer.
func (tr *traffic) end() []answer {
	close(tr.stop)
	tr.wg.Wait()
	return tr.out
}
