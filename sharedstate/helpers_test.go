package sharedstate

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/nora-breaker/nora-breaker/breakerstate"
	"github.com/nora-breaker/nora-breaker/internal/listenaddr"
)

// redisServer is a real redis-server owned by one test, reached through a
// unix socket in the test's folder (no TCP port at all), or on a loopback
// port that a listenaddr.Hold keeps for the whole test, so a restart comes
// back on the same address without anyone else taking it in between.
type redisServer struct {
	t    *testing.T
	bin  string
	sock string           // unix socket path, or ""
	hold *listenaddr.Hold // held TCP port when sock is ""
	cmd  *exec.Cmd
}

// startRedis starts redis-server on a unix socket. Without the binary the
// test is skipped, unless CI is set: CI must run these tests.
func startRedis(t *testing.T) *redisServer {
	t.Helper()
	r := &redisServer{t: t, bin: redisBinary(t), sock: socketPath(t, "redis.sock")}
	r.start()
	t.Cleanup(r.kill)
	return r
}

// startRedisTCP starts redis-server on a held loopback port, so that the
// redis:// path (TCP dial, config validation) is exercised too. redis-server
// cannot bind port 0 itself (--port 0 turns TCP off).
func startRedisTCP(t *testing.T) *redisServer {
	t.Helper()
	bin := redisBinary(t)
	h, err := listenaddr.NewHold()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	r := &redisServer{t: t, bin: bin, hold: h}
	r.start()
	t.Cleanup(r.kill) // runs before the hold is let go
	return r
}

func redisBinary(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("redis-server not installed and CI is set: run sharedstate/install-redis.sh")
		}
		t.Skip("redis-server not installed (sharedstate/install-redis.sh installs it); skipping the fleet tests")
	}
	return bin
}

// socketPath is a path for a unix socket in a fresh folder of the test.
// Socket paths are limited to 107 bytes; a long TMPDIR gets a short folder.
func socketPath(t *testing.T, name string) string {
	t.Helper()
	if p := filepath.Join(t.TempDir(), name); len(p) < 100 {
		return p
	}
	dir, err := os.MkdirTemp("/tmp", "nb-sock-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return filepath.Join(dir, name)
}

func (r *redisServer) url() string {
	if r.sock != "" {
		return "unix://" + r.sock + "?db=0"
	}
	return "redis://" + r.hold.Addr() + "/0"
}

// start launches the server (again, on the same socket or port) and waits
// until it accepts connections.
func (r *redisServer) start() {
	r.t.Helper()
	network, addr := "unix", r.sock
	args := []string{"--save", "", "--appendonly", "no", "--logfile", ""}
	if r.sock != "" {
		args = append(args, "--port", "0", "--unixsocket", r.sock, "--unixsocketperm", "700")
	} else {
		network, addr = "tcp", r.hold.Addr()
		args = append(args, "--port", strconv.Itoa(r.hold.Port()), "--bind", "127.0.0.1")
	}
	r.cmd = exec.Command(r.bin, args...)
	r.cmd.Stdout, r.cmd.Stderr = nil, nil
	if err := r.cmd.Start(); err != nil {
		r.t.Fatalf("start redis-server: %v", err)
	}
	eventually(r.t, 10*time.Second, "redis-server accepts connections", func() bool {
		c, err := net.DialTimeout(network, addr, 100*time.Millisecond)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	})
}

// kill stops the server by its PID, as a crash would.
func (r *redisServer) kill() {
	if r.cmd == nil || r.cmd.Process == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
	r.cmd = nil
}

// eventually polls cond until it holds or the deadline passes. It waits for
// a condition, never for a fixed time.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

const (
	fleetKey   = "docker:https://registry-1.docker.io"
	threshold  = 3
	resetAfter = 400 * time.Millisecond
)

// upstream is a fake registry that is either dead (503) or healthy, and
// records when each request reached it and from which node (named by the
// nodeHeader the client sets). Every answer carries X-Dead-Upstream, so a
// client can tell the upstream's 503 from a proxy's synthesized one.
type upstream struct {
	srv     *httptest.Server
	healthy atomic.Bool
	mu      sync.Mutex
	hits    []hit
}

type hit struct {
	at   time.Time
	node string
	ok   bool
}

func newUpstream(t *testing.T) *upstream { return newUpstreamWithNodeHeader(t, "X-Node") }

func newUpstreamWithNodeHeader(t *testing.T, nodeHeader string) *upstream {
	u := &upstream{}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ok := u.healthy.Load()
		u.mu.Lock()
		u.hits = append(u.hits, hit{at: time.Now(), node: r.Header.Get(nodeHeader), ok: ok})
		u.mu.Unlock()
		w.Header().Set("X-Dead-Upstream", "reached")
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) all() []hit {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]hit(nil), u.hits...)
}

func (u *upstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.hits)
}

// node is one process of the fleet: its own breaker set, registry and
// shared-state client (nil for a lone process).
type node struct {
	name   string
	set    *breakerstate.Set
	client *Client
	reg    *prometheus.Registry
	http   *http.Client
	up     *upstream
}

func newNode(t *testing.T, name string, u *upstream, redisURL string) *node {
	t.Helper()
	return newNodeWith(t, name, u, redisURL, breakerstate.KeySettings{Key: fleetKey, Format: "docker",
		FailureThreshold: threshold, ResetTimeout: resetAfter})
}

// newNodeWith is newNode with the fleet key's settings given.
func newNodeWith(t *testing.T, name string, u *upstream, redisURL string, ks breakerstate.KeySettings) *node {
	t.Helper()
	n := &node{name: name, reg: prometheus.NewRegistry(), up: u,
		http: &http.Client{Transport: &http.Transport{}, Timeout: time.Second}}
	var err error
	n.set, err = breakerstate.New(breakerstate.Options{Enabled: true, Registerer: n.reg,
		Keys: []breakerstate.KeySettings{ks}})
	if err != nil {
		t.Fatal(err)
	}
	if redisURL != "" {
		n.client, err = New(Options{URL: redisURL, Breakers: n.set, Registerer: n.reg, Pod: name,
			Timeout: 200 * time.Millisecond, PingInterval: 100 * time.Millisecond,
			Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = n.client.Close() })
	}
	return n
}

// result is what one request through a node met.
type result struct {
	admitted, probe bool
	status          int
	err             error
	took            time.Duration
}

// request sends one request the way the proxy does: ask the breaker, go to
// the upstream if admitted, report the outcome.
func (n *node) request() result {
	start := time.Now()
	tk, err := n.set.Allow(fleetKey)
	if errors.Is(err, breakerstate.ErrOpen) {
		return result{took: time.Since(start)}
	}
	if err != nil {
		return result{err: err, took: time.Since(start)}
	}
	res := result{admitted: true, probe: tk.Probe()}
	req, _ := http.NewRequest(http.MethodGet, n.up.srv.URL+"/v2/", nil)
	req.Header.Set("X-Node", n.name)
	resp, err := n.http.Do(req)
	switch {
	case err != nil:
		res.err = err
		tk.Done(breakerstate.Failure)
	case resp.StatusCode >= 500:
		res.status = resp.StatusCode
		tk.Done(breakerstate.Failure)
	default:
		res.status = resp.StatusCode
		tk.Done(breakerstate.Success)
	}
	if resp != nil {
		_ = resp.Body.Close()
	}
	res.took = time.Since(start)
	return res
}

// state is the node's local state of the fleet key.
func (n *node) state() breakerstate.State {
	st, _, _ := n.set.RetryAfter(fleetKey)
	return st
}

func (n *node) openUntil() time.Time {
	for _, s := range n.set.Statuses() {
		if s.Key == fleetKey {
			return s.OpenUntil
		}
	}
	return time.Time{}
}

// fleet builds count nodes sharing redisURL ("" = no shared state).
func fleet(t *testing.T, count int, u *upstream, redisURL string) []*node {
	nodes := make([]*node, count)
	for i := range nodes {
		nodes[i] = newNode(t, fmt.Sprintf("pod-%d", i), u, redisURL)
	}
	return nodes
}

// hammer sends requests through every node, one every 2ms per node, until
// stop is closed, and returns every result per node.
func hammer(nodes []*node, stop <-chan struct{}) func() [][]result {
	out := make([][]result, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() {
			tick := time.NewTicker(2 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					out[i] = append(out[i], n.request())
				}
			}
		})
	}
	return func() [][]result { wg.Wait(); return out }
}

// learn sends requests to each node in turn until it rejects one (the way
// an outage reaches a fleet: one pod first), waiting between nodes for the
// fleet to hear of it when shared. It returns the upstream hits it caused.
func learn(t *testing.T, nodes []*node, u *upstream, shared bool) int {
	t.Helper()
	before := len(u.all())
	for i, n := range nodes {
		for range 2 * threshold {
			if !n.request().admitted {
				break
			}
		}
		if shared && i == 0 {
			eventually(t, 2*time.Second, "every node hears of the open", func() bool {
				for _, m := range nodes {
					if m.state() != breakerstate.Open {
						return false
					}
				}
				return true
			})
		}
	}
	return len(u.all()) - before
}
