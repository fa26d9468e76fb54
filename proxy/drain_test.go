package proxy

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/nora-breaker/nora-breaker/internal/testkit"
	"github.com/nora-breaker/nora-breaker/relay"
)

// drainBody is 2 MiB, served in 16 pieces drainPace apart: a download that
// is in flight when the proxy is told to stop.
const (
	drainPieces = 16
	drainPiece  = 128 << 10
	drainPace   = 100 * time.Millisecond
)

func drainPayload() []byte {
	return bytes.Repeat([]byte("0123456789abcdef"), drainPieces*drainPiece/16)
}

// slowDownloads serves drainPayload slowly and counts the downloads whose
// first piece has gone out.
type slowDownloads struct {
	mu      sync.Mutex
	started int
}

func (s *slowDownloads) serve(w http.ResponseWriter, r *http.Request) {
	body := drainPayload()
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	w.WriteHeader(200)
	for i := range drainPieces {
		w.Write(body[i*drainPiece : (i+1)*drainPiece])
		w.(http.Flusher).Flush()
		if i == 0 {
			s.mu.Lock()
			s.started++
			s.mu.Unlock()
		}
		time.Sleep(drainPace)
	}
}

func (s *slowDownloads) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started
}

// drainRig is a proxy with an interception CA in front of a slow TLS maven
// upstream (intercepted) and a slow TLS host in allow_hosts (a blind
// tunnel), with the given shutdown grace.
type drainRig struct {
	tp             *testProxy
	up, blind      *upstream
	upSlow, blSlow *slowDownloads
	pool           *tlsRoots
}

type tlsRoots struct{ intercept, blind *tls.Config }

func newDrainRig(t *testing.T, grace time.Duration) *drainRig {
	r := &drainRig{upSlow: &slowDownloads{}, blSlow: &slowDownloads{}}
	r.up = newTLSUpstream(t, r.upSlow.serve)
	r.up.EnableHTTP2 = false
	r.blind = newTLSUpstream(t, r.blSlow.serve)
	lines, pool := interceptCA(t, r.up.Server)
	cfg := testkit.LoadConfig(t, ixMaven(r.up.URL, true, "[sidecar]\n"+lines+allowHostsLine(r.blind)+"\n"), nil)
	r.tp = startProxyWith(t, cfg, zerolog.Nop(), nil, grace)
	blindRoots := r.blind.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	r.pool = &tlsRoots{intercept: &tls.Config{RootCAs: pool, Time: r.tp.Clock.Now},
		blind: &tls.Config{RootCAs: blindRoots}}
	return r
}

// download is one client's download through the proxy: its path and what
// became of it.
type download struct {
	name string
	c    *http.Client
	url  string
	sum  [32]byte
	n    int
	err  error
}

func (r *drainRig) downloads(t *testing.T) []*download {
	client := func(cfg *tls.Config, h2 bool) *http.Client {
		c := proxyClient(t, r.tp, cfg.RootCAs)
		tr := c.Transport.(*http.Transport)
		tr.TLSClientConfig = cfg.Clone()
		tr.ForceAttemptHTTP2 = h2
		c.Timeout = time.Minute
		return c
	}
	return []*download{
		{name: "intercepted h1", c: client(r.pool.intercept, false), url: r.up.URL + "/maven2/g/a/1/a-1.jar"},
		{name: "intercepted h2", c: client(r.pool.intercept, true), url: r.up.URL + "/maven2/g/a/1/a-2.jar"},
		{name: "blind tunnel", c: client(r.pool.blind, false), url: r.blind.URL + "/blob"},
	}
}

// startDownloads starts every kind's download and returns once each is
// under way at the upstreams; wg ends when all have.
func (r *drainRig) startDownloads(t *testing.T) ([]*download, *sync.WaitGroup) {
	ds := r.downloads(t)
	wg := &sync.WaitGroup{}
	for _, d := range ds {
		wg.Go(d.run)
	}
	testkit.PollUntil(t, 10*time.Second, func() bool { return r.upSlow.count() == 2 && r.blSlow.count() == 1 })
	return ds, wg
}

// run downloads, then closes the client's idle connections, as a client
// that is done does: a blind tunnel ends only when its client ends it.
func (d *download) run() {
	defer d.c.CloseIdleConnections()
	resp, err := d.c.Get(d.url)
	if err != nil {
		d.err = err
		return
	}
	h := sha256.New()
	n, err := io.Copy(h, resp.Body)
	resp.Body.Close()
	d.n, d.err = int(n), err
	copy(d.sum[:], h.Sum(nil))
}

// TestShutdownDrainsEveryConnectionKind: downloads in flight through an
// intercepted HTTP/1.1 connection, an intercepted HTTP/2 connection and a
// blind tunnel all complete when the proxy is told to stop mid-download,
// and Serve returns only after the last (issue 21, point 1: every HTTPS
// download stopped at 512 KiB and the process exited after 35 ms).
func TestShutdownDrainsEveryConnectionKind(t *testing.T) {
	r := newDrainRig(t, 20*time.Second)
	ds, wg := r.startDownloads(t)
	stopped := make(chan error, 1)
	go func() { stopped <- r.tp.stop() }()
	// /ready answers 503 from the first moment of the drain.
	testkit.PollUntil(t, 5*time.Second, func() bool {
		resp, err := http.Get(r.tp.AdminURL + "/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable
	})
	wg.Wait()
	want := sha256.Sum256(drainPayload())
	for _, d := range ds {
		if d.err != nil || d.sum != want {
			t.Errorf("%s: %d bytes, %v; want the whole %d-byte download", d.name, d.n, d.err, len(drainPayload()))
		}
	}
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Serve did not return after the last download ended")
	}
}

// TestShutdownCutsWhatOutlastsTheGrace: a download longer than the grace
// period is cut when it ends, on every connection kind, and Serve returns
// then rather than when the download would have ended.
func TestShutdownCutsWhatOutlastsTheGrace(t *testing.T) {
	r := newDrainRig(t, 300*time.Millisecond)
	ds, wg := r.startDownloads(t)
	start := time.Now()
	if err := r.tp.stop(); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	took := time.Since(start)
	wg.Wait()
	for _, d := range ds {
		if d.err == nil && d.n == len(drainPayload()) {
			t.Errorf("%s: the whole download arrived, though it outlasted the grace period", d.name)
		}
	}
	// The downloads need 1.6 s; the grace is 300 ms. Serve must not have
	// waited for them.
	if took >= drainPieces*drainPace {
		t.Fatalf("Serve returned after %v, as late as the downloads' own end", took)
	}
}

// TestShutdownClosesIdleTunnels: a blind tunnel that carries no byte for
// relay.DrainIdle during a drain (a kept-alive client between requests) is
// closed then, instead of holding the process for the whole grace period.
func TestShutdownClosesIdleTunnels(t *testing.T) {
	r := newDrainRig(t, 30*time.Second)
	c := r.downloads(t)[2].c // the blind tunnel's client, which keeps its connection
	resp, err := c.Get(r.blind.URL + "/blob")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	start := time.Now()
	if err := r.tp.stop(); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if took := time.Since(start); took < relay.DrainIdle || took > relay.DrainIdle+5*time.Second {
		t.Fatalf("Serve returned after %v with an idle tunnel open, want about relay.DrainIdle (%v)", took, relay.DrainIdle)
	}
}
