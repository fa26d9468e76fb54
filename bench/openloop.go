package main

import (
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"time"
)

// olConns is the open-loop section's connection count per target: far more
// than 2000 req/s needs at loopback latencies, so that a slow answer delays
// only the requests it really holds up.
const olConns = 32

// olTarget is one row of the open-loop section.
type olTarget struct {
	name   string
	client *http.Client
	url    string
	want   int // expected status
	// pid is the process under test, whose CPU per request is the row's
	// figure; upPID is the upstream behind it (0 when pid is the upstream).
	pid, upPID int
	// base is the row whose p50 this one's added latency is measured over.
	base string
}

// openLoop: constant-rate load (opts.rates, each for opts.duration per
// round) against every target in turn, round after round, with the CPU time
// of the process under test and of the upstream read from /proc around each
// run. Targets: the two floors (a bare net/http server, a minimal
// httputil forward proxy), direct to the upstream, nora-breaker plain,
// intercepted and refusing, the plain and refusing rows again on a
// nora-breaker whose scheduler is fixed at every processor (procs = NumCPU,
// Go's own default) to show what sizing it to the load saves, and the
// peers.
func openLoop(e *env, rep *report) error {
	o := e.opts
	loadStart := loadAvg()
	if !o.quick {
		loadStart = settle(3 * time.Minute)
	}
	ts, cleanup, err := e.openLoopTargets()
	defer cleanup()
	if err != nil {
		return err
	}
	for _, t := range ts {
		runRate(olSpec(t, o.rates[0], o.warm))
	}
	m := newOLMeasures()
	for r := range o.rounds {
		for _, rate := range o.rates {
			// Each round starts at another target, so none is always the
			// one measured right after a rate change.
			for i := range ts {
				t := ts[(i+r)%len(ts)]
				m.record(rate, t, r, olRun(t, rate, o.duration))
			}
		}
	}
	rep.add(olRows(o.rates, m)...)
	rep.tables = append(rep.tables, olTable(e, ts, m, loadStart, loadAvg()))
	return nil
}

// openLoopTargets starts what the section needs beyond the shared upstream
// and peers — its own nora-breaker with the go breaker forced open, the bare
// server and the mini proxy — and returns the rows in run order. cleanup
// stops what it started; it is valid whatever the error.
func (e *env) openLoopTargets() (ts []olTarget, cleanup func(), err error) {
	var stops []func()
	cleanup = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	n, err := e.startNora("openloop", 0)
	if err != nil {
		return nil, cleanup, err
	}
	stops = append(stops, func() { e.stopNora(n) })
	// The same proxy with the scheduler fixed at every processor (the Go
	// runtime's default), to show what procs = 0 saves.
	fixed, err := e.startNoraWith("openloop-fixed", 0, noraExtra{sidecar: fmt.Sprintf("procs = %d\n", runtime.NumCPU())})
	if err != nil {
		return nil, cleanup, err
	}
	stops = append(stops, func() { e.stopNora(fixed) })
	bare, bareAddr, err := e.startSelf("bare", "bare")
	if err != nil {
		return nil, cleanup, err
	}
	stops = append(stops, func() { e.stopProc(bare) })
	mini, miniAddr, err := e.startSelf("miniproxy", "miniproxy")
	if err != nil {
		return nil, cleanup, err
	}
	stops = append(stops, func() { e.stopProc(mini) })
	for _, p := range []*nora{n, fixed} {
		if err := p.force(keyFastFail, "open"); err != nil {
			return nil, cleanup, err
		}
	}
	c := func(proxy string, roots *x509.CertPool) *http.Client {
		return newClient(clientOpts{conns: olConns, proxy: proxy, roots: roots, timeout: 10 * time.Second})
	}
	up, nb := e.up.pid(), n.proc.pid()
	httpsURL := e.tlsURL(benchDomain, "/crates/a/1.0.0/download")
	refusal := olTarget{olRefusal, c(n.url(), nil), e.fastFailURL(), http.StatusServiceUnavailable, nb, up, olBare}
	if err := expectRefusal(refusal.client, refusal.url); err != nil {
		return nil, cleanup, fmt.Errorf("refusal check: %w", err)
	}
	ts = []olTarget{
		{olBare, c("", nil), "http://" + bareAddr["listen"] + "/g/a/1/a-1.jar", http.StatusOK, bare.pid(), 0, ""},
		{"direct", c("", nil), e.smallURL(), http.StatusOK, up, 0, ""},
		{"direct HTTPS", c("", e.upRoots), httpsURL, http.StatusOK, up, 0, ""},
		{olPlain, c(n.url(), nil), e.smallURL(), http.StatusOK, nb, up, "direct"},
		{"nora-breaker intercepted", c(n.url(), e.caRoots), httpsURL, http.StatusOK, nb, up, "direct HTTPS"},
		refusal,
		{olFixed, c(fixed.url(), nil), e.smallURL(), http.StatusOK, fixed.proc.pid(), up, "direct"},
		{olRefusalFixed, c(fixed.url(), nil), e.fastFailURL(), http.StatusServiceUnavailable, fixed.proc.pid(), up, olBare},
		{olMini, c("http://"+miniAddr["listen"], nil), e.smallURL(), http.StatusOK, mini.pid(), up, "direct"},
	}
	for _, p := range e.peers {
		ts = append(ts, olTarget{p.name, c(p.url, nil), e.smallURL(), http.StatusOK, p.proc.pid(), up, "direct"})
	}
	return ts, cleanup, nil
}

// Row names the section's targets are compared by.
const (
	olBare    = "bare Go server"
	olPlain   = "nora-breaker plain"
	olRefusal = "nora-breaker refusal (503)"
	// The same two with the scheduler on every processor (procs fixed).
	olFixed        = "nora-breaker plain, procs fixed"
	olRefusalFixed = "nora-breaker refusal (503), procs fixed"
	olMini         = "minimal Go proxy"
	olSquid        = "squid"
)

// olSpec is the open-loop run of t at rate for d.
func olSpec(t olTarget, rate int, d time.Duration) rateSpec {
	return rateSpec{client: t.client, url: t.url, rate: float64(rate), duration: d, workers: olConns,
		want: t.want, grace: max(2*time.Second, d), distinct: true}
}

// olResult is one run of one target with the CPU its processes spent on it.
type olResult struct {
	rateResult
	cpu, upCPU time.Duration
}

// olRun runs t at rate for d and reads the CPU time of t's processes
// before and after (after the last answer, so queued requests count).
func olRun(t olTarget, rate int, d time.Duration) olResult {
	c0, err0 := cpuTime(t.pid)
	var u0 time.Duration
	if t.upPID != 0 {
		u0, _ = cpuTime(t.upPID)
	}
	res := olResult{rateResult: runRate(olSpec(t, rate, d))}
	c1, err1 := cpuTime(t.pid)
	if err0 != nil || err1 != nil {
		fmt.Fprintf(os.Stderr, "bench: %s: CPU time unreadable (%v, %v)\n", t.name, err0, err1)
	}
	res.cpu = c1 - c0
	if t.upPID != 0 {
		u1, _ := cpuTime(t.upPID)
		res.upCPU = u1 - u0
	}
	return res
}
