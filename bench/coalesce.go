package main

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nora-breaker/nora-breaker/internal/listenaddr"
)

// coalesceClients is how many clients ask for one artifact at once: a CI
// fleet's jobs starting together.
const coalesceClients = 20

// coalesceBodies are the section's two artifacts: an image layer's worth
// and a metadata file's.
var coalesceBodies = []struct {
	name string
	size int
}{{"50 MB", 50_000_000}, {"10 KiB", 10 << 10}}

// coalesceTarget is one way of fetching the artifact.
type coalesceTarget struct {
	name    string
	clients int
	client  *http.Client
	pid     int // the proxy's, whose RSS is watched; 0 for direct
}

// coalesceSection: coalesceClients identical GETs at once, through each
// target, of a paced upstream artifact (paced.go) under a fresh URL per
// target and round, so no target ever answers from what it kept: how many
// requests reach the upstream, the wall time until the last client has
// its whole body (compared with one client fetching it directly), and the
// proxy's peak RSS growth meanwhile. squid runs with collapsed_forwarding
// and a memory cache, which it needs to collapse at all.
func coalesceSection(e *env, rep *report) error {
	n, err := e.startNora("coalesce", 0)
	if err != nil {
		return err
	}
	defer e.stopNora(n)
	targets := []coalesceTarget{
		{name: "direct, 1 client", clients: 1, client: newClient(clientOpts{conns: 1})},
		{name: "direct", clients: coalesceClients, client: newClient(clientOpts{conns: coalesceClients})},
		{name: "nora-breaker", clients: coalesceClients, pid: n.proc.pid(),
			client: newClient(clientOpts{conns: coalesceClients, proxy: n.url()})},
	}
	if !e.opts.noPeers {
		sq, err := e.startCollapsingSquid()
		switch {
		case err == nil:
			defer e.stopProc(sq.proc)
			targets = append(targets, coalesceTarget{name: "squid collapsed_forwarding", clients: coalesceClients,
				pid: sq.proc.pid(), client: newClient(clientOpts{conns: coalesceClients, proxy: sq.url})})
		case e.opts.quick:
			fmt.Fprintf(os.Stderr, "bench: coalesce: squid skipped (%v)\n", err)
		default:
			return fmt.Errorf("squid: %w (run bash bench/setup.sh, or pass --no-peers)", err)
		}
	}
	for _, body := range coalesceBodies {
		if err := coalesceRows(e, rep, targets, body.name, body.size); err != nil {
			return err
		}
	}
	return nil
}

// coalesceRows measures one artifact through every target and adds its rows.
func coalesceRows(e *env, rep *report, targets []coalesceTarget, name string, size int) error {
	wall, hits, growth := series{}, series{}, series{}
	for r := range e.opts.rounds {
		for _, t := range targets {
			path := fmt.Sprintf("/secondary%s%d-%s/%d", pacedMarker, r, strings.ReplaceAll(t.name, " ", "-"), size)
			var watch *rssWatch
			if t.pid != 0 {
				watch = startRSSWatch(t.pid)
			}
			took, err := fetchAtOnce(t.client, "http://"+loop(e.upHTTP)+path, t.clients, size)
			if watch != nil {
				growth.add(t.name, float64(watch.stop()))
			}
			if err != nil {
				return fmt.Errorf("%s, %s: %w", name, t.name, err)
			}
			got, err := e.pacedHits(path)
			if err != nil {
				return err
			}
			wall.add(t.name, took.Seconds())
			hits.add(t.name, float64(got))
		}
	}
	sec := fmt.Sprintf("coalesce (%d × %s)", coalesceClients, name)
	one := wall.med("direct, 1 client")
	for _, t := range targets {
		logRounds(t.name, name+" wall", wall, unitDur)
		logRounds(t.name, name+" upstream requests", hits, unitCount)
		if t.pid != 0 {
			logRounds(t.name, name+" peak RSS growth", growth, unitBytes)
		}
		h := row{section: sec, target: t.name, figure: "upstream requests", unit: unitCount, value: hits.med(t.name)}
		w := row{section: sec, target: t.name, figure: "wall time", unit: unitDur, value: wall.med(t.name)}
		ratio := row{section: sec, target: t.name, figure: "wall ÷ one direct fetch", unit: unitRatio,
			value: w.value / one}
		if t.name == "nora-breaker" {
			h.goal, h.met = "1", verdict(h.value == 1)
			ratio.goal, ratio.met = "≤ 1.2×", verdict(ratio.value <= 1.2)
		}
		rows := []row{h, w}
		if t.clients > 1 {
			rows = append(rows, ratio)
		}
		if t.pid != 0 {
			g := row{section: sec, target: t.name, figure: "peak RSS growth", unit: unitBytes, value: growth.med(t.name)}
			if t.name == "nora-breaker" {
				g.goal, g.met = "≤ 16 MiB", verdict(g.value <= 16<<20)
			}
			rows = append(rows, g)
		}
		rep.add(rows...)
	}
	return nil
}

// fetchAtOnce starts n GETs of url at the same instant and returns how long
// until the last one had its whole body of size bytes.
func fetchAtOnce(c *http.Client, target string, n, size int) (time.Duration, error) {
	start := make(chan struct{})
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			got, err := download(c, target)
			if err == nil && got != int64(size) {
				err = fmt.Errorf("got %d of %d bytes", got, size)
			}
			errs[i] = err
		})
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	return time.Since(t0), errors.Join(errs...)
}

// pacedHits asks the upstream how many requests path has had.
func (e *env) pacedHits(path string) (int64, error) {
	return e.upstreamCount("/_bench/hits?path=" + url.QueryEscape(path))
}

// startCollapsingSquid starts a squid of the section's own that caches in
// memory and collapses identical requests, on a port a Hold keeps for it.
func (e *env) startCollapsingSquid() (peer, error) {
	bin, err := findPeer("squid")
	if err != nil {
		return peer{}, err
	}
	hold, err := listenaddr.NewHold()
	if err != nil {
		return peer{}, err
	}
	e.holds = append(e.holds, hold)
	dir := filepath.Join(e.dir, "squid-collapsed")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return peer{}, err
	}
	conf := filepath.Join(dir, "squid.conf")
	if err := os.WriteFile(conf, []byte(collapsingSquidConf(dir, hold.Port())), 0o644); err != nil {
		return peer{}, err
	}
	p, err := startProc("squid-collapsed", filepath.Join(dir, "squid.out"), bin, "-N", "-f", conf)
	if err != nil {
		return peer{}, err
	}
	e.procs = append(e.procs, p)
	if err := waitListening(p, "tcp", loop(hold.Port()), 30*time.Second); err != nil {
		return peer{}, err
	}
	return peer{name: "squid collapsed_forwarding", url: "http://" + hold.Addr(), proc: p}, nil
}

// collapsingSquidConf: squidConf's loopback-only instance, but with a
// memory cache large enough for the 50 MB artifact and
// collapsed_forwarding on.
func collapsingSquidConf(dir string, port int) string {
	return strings.Replace(squidConf(dir, port), "cache deny all\ncache_mem 8 MB\n",
		"collapsed_forwarding on\ncache_mem 256 MB\nmaximum_object_size_in_memory 64 MB\nmaximum_object_size 64 MB\n", 1)
}
