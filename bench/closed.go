package main

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"
)

// target is one way of reaching the upstream, driven by the load generator.
type target struct {
	name   string
	client *http.Client
	url    string
	base   string // the direct target it is compared with
	// pid is the process whose CPU time per request is reported (the proxy,
	// or the upstream for direct targets); 0 = not measured.
	pid int
}

// measure runs warm-up, then rounds × targets (interleaved, so drift hits
// every target alike), and returns req/s, p50 and p99 per target.
func measure(ts []target, conns int, dur, warm time.Duration, rounds int, want int) (rps, p50, p99, cpu series) {
	rps, p50, p99, cpu = series{}, series{}, series{}, series{}
	for _, t := range ts {
		runLoad(loadSpec{client: t.client, url: t.url, conns: conns, duration: warm, want: want, distinct: true})
	}
	for r := range rounds {
		for _, t := range ts {
			var c0 time.Duration
			if t.pid != 0 {
				c0, _ = cpuTime(t.pid)
			}
			res := runLoad(loadSpec{client: t.client, url: t.url, conns: conns, duration: dur, want: want, distinct: true})
			if t.pid != 0 && res.requests > 0 {
				c1, _ := cpuTime(t.pid)
				cpu.add(t.name, (c1-c0).Seconds()/float64(res.requests))
			}
			if res.bad > 0 {
				fmt.Fprintf(os.Stderr, "bench: %s round %d: %d of %d unexpected answers (first: %s)\n",
					t.name, r+1, res.bad, res.requests, res.firstErr)
			}
			rps.add(t.name, res.rps())
			p50.add(t.name, res.hist.quantile(0.50).Seconds())
			p99.add(t.name, res.hist.quantile(0.99).Seconds())
		}
	}
	return rps, p50, p99, cpu
}

// closedPath: 1 KiB GET over 32 keep-alive connections, every target.
func closedPath(e *env, n *nora, rep *report) {
	const conns = 32
	c := func(proxy string, tls bool) *http.Client {
		o := clientOpts{conns: conns, proxy: proxy, timeout: 30 * time.Second}
		if tls && proxy == "" {
			o.roots = e.upRoots
		} else if tls {
			o.roots = e.caRoots
		}
		return newClient(o)
	}
	httpsURL := e.tlsURL(benchDomain, "/crates/a/1.0.0/download")
	up, nb := e.up.pid(), n.proc.pid()
	ts := []target{
		{"direct", c("", false), e.smallURL(), "", up},
		{"nora-breaker plain", c(n.url(), false), e.smallURL(), "direct", nb},
		{"direct HTTPS", c("", true), httpsURL, "", up},
		{"nora-breaker intercepted", c(n.url(), true), httpsURL, "direct HTTPS", nb},
	}
	for _, p := range e.peers {
		ts = append(ts, target{p.name, c(p.url, false), e.smallURL(), "direct", p.proc.pid()})
	}
	rps, p50, p99, cpu := measure(ts, conns, e.opts.duration, e.opts.warm, e.opts.rounds, http.StatusOK)
	for _, t := range ts {
		logRounds(t.name, "req/s", rps, unitRate)
		logRounds(t.name, "p99", p99, unitDur)
		rep.add(closedRows(t, e.peers, rps, p50, p99, cpu)...)
	}
}

// closedRows are one closed-path target's rows, with its goals.
func closedRows(t target, peers []peer, rps, p50, p99, cpu series) []row {
	const sec = "closed path (1 KiB, 32 conns)"
	rr := row{section: sec, target: t.name, figure: "req/s", unit: unitRate, value: rps.med(t.name)}
	pr := row{section: sec, target: t.name, figure: "p50", unit: unitDur, value: p50.med(t.name)}
	qr := row{section: sec, target: t.name, figure: "p99", unit: unitDur, value: p99.med(t.name)}
	// CPU per request: the proxy's own CPU time; for direct targets the
	// upstream's, which every proxied request costs on top of the proxy's.
	cr := row{section: sec, target: t.name, figure: "proxy CPU per request", unit: unitDur, value: cpu.med(t.name)}
	if strings.HasPrefix(t.name, "direct") {
		cr.figure = "upstream CPU per request"
	}
	if t.base != "" {
		rr.base, pr.base, qr.base, cr.base = rps.med(t.base), p50.med(t.base), p99.med(t.base), cpu.med(t.base)
	}
	if strings.HasPrefix(t.name, "nora-breaker") {
		qr.goal, qr.met = "≤ 2 ms", verdict(qr.value <= 0.002)
	}
	if t.name == "nora-breaker plain" && len(peers) > 0 {
		ok := true
		var names []string
		for _, p := range peers {
			ok = ok && rr.value >= rps.med(p.name)
			names = append(names, p.name)
		}
		rr.goal, rr.met = "≥ "+strings.Join(names, ", "), verdict(ok)
	}
	return []row{rr, pr, qr, cr}
}

// fastFail: the breaker of a single-upstream format forced open, 64
// connections, every answer a synthesized 503.
func fastFail(e *env, n *nora, rep *report) error {
	if err := n.force(keyFastFail, "open"); err != nil {
		return err
	}
	defer n.force(keyFastFail, "auto")
	client := newClient(clientOpts{conns: 64, proxy: n.url(), timeout: 30 * time.Second})
	if err := expectRefusal(client, e.fastFailURL()); err != nil {
		return fmt.Errorf("fast-fail check: %w", err)
	}
	ts := []target{{"nora-breaker 503", client, e.fastFailURL(), "", n.proc.pid()}}
	rps, _, p99, cpu := measure(ts, 64, e.opts.duration, e.opts.warm, e.opts.rounds, http.StatusServiceUnavailable)
	logRounds("nora-breaker 503", "req/s", rps, unitRate)
	const sec = "fast-fail (breaker open, 64 conns)"
	closed := rep.get("closed path (1 KiB, 32 conns)", "nora-breaker plain", "req/s")
	r := row{section: sec, target: "nora-breaker 503", figure: "req/s", unit: unitRate,
		value: rps.med("nora-breaker 503"), base: rep.get("closed path (1 KiB, 32 conns)", "direct", "req/s"),
		goal: fmt.Sprintf("≥ 2× own closed path (%s)", format(unitRate, 2*closed))}
	r.met = verdict(r.value >= 2*closed)
	q := row{section: sec, target: "nora-breaker 503", figure: "p99", unit: unitDur, value: p99.med("nora-breaker 503"),
		base: rep.get("closed path (1 KiB, 32 conns)", "direct", "p99"), goal: "≤ 1 ms"}
	q.met = verdict(q.value <= 0.001)
	rep.add(r, q, row{section: sec, target: "nora-breaker 503", figure: "proxy CPU per request", unit: unitDur,
		value: cpu.med("nora-breaker 503")})
	// With a closed loop of 64 connections, latency is mostly queueing
	// (Little's law: mean latency = connections / throughput); one connection
	// shows what a single synthesized 503 costs.
	one := []target{{"nora-breaker 503, 1 conn", newClient(clientOpts{conns: 1, proxy: n.url()}), e.fastFailURL(), "", 0}}
	_, p50one, p99one, _ := measure(one, 1, e.opts.duration, e.opts.warm, e.opts.rounds, http.StatusServiceUnavailable)
	rep.add(row{section: sec, target: one[0].name, figure: "p50", unit: unitDur, value: p50one.med(one[0].name)},
		row{section: sec, target: one[0].name, figure: "p99", unit: unitDur, value: p99one.med(one[0].name)})
	return nil
}

// expectRefusal checks that a GET of u with c is answered by the proxy's
// synthesized 503 (it names the breaker key), not by an upstream.
func expectRefusal(c *http.Client, u string) error {
	resp, err := c.Get(u)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("X-Nora-Breaker-Key") == "" {
		return fmt.Errorf("want a synthesized 503, got %d %v", resp.StatusCode, resp.Header)
	}
	return nil
}

// fallbackPath: the primary maven upstream forced open, so every request is
// served by the secondary; one connection, so the figure is latency, not
// queueing.
func fallbackPath(e *env, n *nora, rep *report) error {
	if err := n.force(e.primaryKey(), "open"); err != nil {
		return err
	}
	defer n.force(e.primaryKey(), "auto")
	proxied := newClient(clientOpts{conns: 1, proxy: n.url(), timeout: 30 * time.Second})
	resp, err := proxied.Get(e.primaryURL())
	if err != nil {
		return fmt.Errorf("fallback check: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("X-Nora-Upstream"), "/secondary") {
		return fmt.Errorf("fallback check: want 200 from the secondary, got %d %v", resp.StatusCode, resp.Header)
	}
	ts := []target{
		{"direct to secondary", newClient(clientOpts{conns: 1, timeout: 30 * time.Second}), e.smallURL(), "", 0},
		{"nora-breaker to secondary", proxied, e.smallURL(), "direct to secondary", 0},
		{"nora-breaker fallback", proxied, e.primaryURL(), "direct to secondary", 0},
	}
	_, p50, _, _ := measure(ts, 1, e.opts.duration, e.opts.warm, e.opts.rounds, http.StatusOK)
	const sec = "fallback (primary open, 1 conn)"
	for _, t := range ts {
		r := row{section: sec, target: t.name, figure: "p50", unit: unitDur, value: p50.med(t.name)}
		if t.base != "" {
			r.base = p50.med(t.base)
		}
		rep.add(r)
	}
	added := p50.med("nora-breaker fallback") - p50.med("direct to secondary")
	overClosed := p50.med("nora-breaker fallback") - p50.med("nora-breaker to secondary")
	rep.add(row{section: sec, target: "nora-breaker fallback", figure: "p50 added over direct", unit: unitDur,
		value: added, goal: "≤ 0.5 ms", met: verdict(added <= 0.0005)},
		row{section: sec, target: "nora-breaker fallback", figure: "p50 added over own closed path",
			unit: unitDur, value: overClosed})
	return nil
}

// logRounds prints every round's value of one target's figure to stderr,
// so the spread behind a median can be seen.
func logRounds(targetName, figure string, s series, u unit) {
	fmt.Fprintf(os.Stderr, "bench: %s %s rounds: %s\n", targetName, figure, s.summary(targetName, u))
}
