package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// streaming: one large body through each path, one connection; for the
// proxy also its peak RSS growth while streaming.
func streaming(e *env, n *nora, rep *report) error {
	path := "/big"
	if e.opts.streamMiB > 0 && e.opts.streamMiB != bigBody>>20 {
		path = fmt.Sprintf("/%d/big", e.opts.streamMiB)
	}
	plain := "http://" + loop(e.upHTTP) + "/secondary" + path
	tlsURL := e.tlsURL(benchDomain, "/crates"+path)
	// The floor of a Go proxy (floors.go): what copying the body through
	// net/http's server and transport costs at the least, so the plain
	// row's distance from direct splits into what any Go proxy pays and
	// what nora-breaker adds.
	mini, miniAddr, err := e.startSelf("miniproxy-stream", "miniproxy")
	if err != nil {
		return err
	}
	defer e.stopProc(mini)
	ts := []struct {
		name, url, base string
		client          *http.Client
		proxied         bool
	}{
		{"direct", plain, "", newClient(clientOpts{conns: 1}), false},
		{olMini, plain, "direct", newClient(clientOpts{conns: 1, proxy: "http://" + miniAddr["listen"]}), false},
		{"nora-breaker plain", plain, "direct", newClient(clientOpts{conns: 1, proxy: n.url()}), true},
		{"direct HTTPS", tlsURL, "", newClient(clientOpts{conns: 1, roots: e.upRoots}), false},
		{"nora-breaker intercepted", tlsURL, "direct HTTPS",
			newClient(clientOpts{conns: 1, proxy: n.url(), roots: e.caRoots}), true},
	}
	mbps, growth := series{}, series{}
	for range e.opts.rounds {
		for _, t := range ts {
			var watch *rssWatch
			if t.proxied {
				watch = startRSSWatch(n.proc.pid())
			}
			t0 := time.Now()
			got, err := download(t.client, t.url)
			el := time.Since(t0)
			if watch != nil {
				growth.add(t.name, float64(watch.stop()))
			}
			if err != nil {
				return fmt.Errorf("streaming %s: %w", t.name, err)
			}
			mbps.add(t.name, float64(got)/el.Seconds()/1e6)
		}
	}
	sec := fmt.Sprintf("streaming (%d MiB, 1 conn)", e.opts.streamMiB)
	for _, t := range ts {
		logRounds(t.name, "MB/s", mbps, unitMBps)
		r := row{section: sec, target: t.name, figure: "throughput", unit: unitMBps, value: mbps.med(t.name)}
		if t.base != "" {
			r.base = mbps.med(t.base)
		}
		switch t.name {
		case "nora-breaker plain":
			r.goal, r.met = "≥ 500 MB/s", verdict(r.value >= 500)
		case "nora-breaker intercepted":
			r.goal, r.met = "≥ 200 MB/s", verdict(r.value >= 200)
		}
		rep.add(r)
		// The relative target: forwarding a plain body should cost at most a
		// quarter of the throughput of fetching it directly.
		if t.name == "nora-breaker plain" && r.base > 0 {
			q := row{section: sec, target: t.name, figure: "throughput ÷ direct", unit: unitRatio,
				value: r.value / r.base, goal: "≥ 0.75×"}
			q.met = verdict(q.value >= 0.75)
			rep.add(q)
			if m := mbps.med(olMini); m > 0 {
				rep.add(row{section: sec, target: t.name, figure: "throughput ÷ " + olMini, unit: unitRatio,
					value: r.value / m})
			}
		}
		if t.proxied {
			g := row{section: sec, target: t.name, figure: "peak RSS growth", unit: unitBytes,
				value: growth.med(t.name), goal: "≤ 64 MiB"}
			g.met = verdict(g.value <= 64<<20)
			rep.add(g)
		}
	}
	return nil
}

func download(c *http.Client, u string) (int64, error) {
	resp, err := c.Get(u)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("status %d", resp.StatusCode)
	}
	// writerOnly hides io.Discard's ReadFrom, whose 8 KiB reads would make
	// the client, not the proxy, the bottleneck.
	n, err := io.CopyBuffer(writerOnly{io.Discard}, resp.Body, make([]byte, 256<<10))
	if err == nil && resp.ContentLength >= 0 && n != resp.ContentLength {
		err = fmt.Errorf("got %d of %d bytes", n, resp.ContentLength)
	}
	return n, err
}

// rssWatch samples a process's VmRSS every 10 ms and, where the kernel
// allows, resets VmHWM first, so its growth is the peak over the start.
type rssWatch struct {
	pid  int
	base int64
	// hwmValid: VmHWM was reset, so it covers only this watch.
	hwmValid bool
	peak     atomic.Int64
	quit     chan struct{}
	wg       sync.WaitGroup
}

func startRSSWatch(pid int) *rssWatch {
	w := &rssWatch{pid: pid, quit: make(chan struct{})}
	if err := resetPeak(pid); err != nil {
		fmt.Fprintf(os.Stderr, "bench: cannot reset VmHWM (%v); using 10 ms samples only\n", err)
	} else {
		w.hwmValid = true
	}
	m, _ := readMem(pid)
	w.base = m.rss
	w.peak.Store(m.rss)
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-w.quit:
				return
			case <-t.C:
				if m, err := readMem(pid); err == nil && m.rss > w.peak.Load() {
					w.peak.Store(m.rss)
				}
			}
		}
	}()
	return w
}

// stop ends sampling and returns the peak growth in bytes.
func (w *rssWatch) stop() int64 {
	close(w.quit)
	w.wg.Wait()
	peak := w.peak.Load()
	if m, err := readMem(w.pid); err == nil && w.hwmValid && m.hwm > peak {
		peak = m.hwm
	}
	return max(0, peak-w.base)
}

// writerOnly exposes only Write, so io.CopyBuffer uses the given buffer.
type writerOnly struct{ io.Writer }
