package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// interception: the cost of a first connection through the intercepting
// proxy — CONNECT, TLS with a leaf for the host, one GET — for distinct host
// names (a leaf is generated for each) and for a host already seen (leaf
// cached), against a first TLS connection straight to the upstream. One
// request at a time; a fresh nora-breaker per round so every name is new.
// Then the same repeat host and direct connections from a client that keeps
// its TLS sessions, as curl does, each connection after the first resuming
// the last one's session.
func interception(e *env, rep *report) error {
	hosts := e.opts.hosts
	p50 := series{}
	for r := range e.opts.rounds {
		n, err := e.startNora(fmt.Sprintf("intercept-%d", r), hosts)
		if err != nil {
			return err
		}
		var direct, fresh, repeat histogram
		for i := range hosts {
			u := e.tlsURL(aliasHost(i), "/crates/a/1.0.0/download")
			if err := firstConn(&direct, clientOpts{conns: 1, roots: e.upRoots}, u, false); err != nil {
				e.stopNora(n)
				return fmt.Errorf("direct %s: %w", u, err)
			}
			if err := firstConn(&fresh, clientOpts{conns: 1, roots: e.caRoots, proxy: n.url()}, u, false); err != nil {
				e.stopNora(n)
				return fmt.Errorf("intercepted %s: %w", u, err)
			}
		}
		u := e.tlsURL(aliasHost(0), "/crates/a/1.0.0/download")
		// Each resuming client's first connection only gets it the session
		// the others resume, so it is not recorded.
		directOpts := clientOpts{conns: 1, roots: e.upRoots, sessions: tls.NewLRUClientSessionCache(4)}
		proxyOpts := clientOpts{conns: 1, roots: e.caRoots, proxy: n.url(), sessions: tls.NewLRUClientSessionCache(4)}
		var directResumed, repeatResumed histogram
		if err := errors.Join(firstConn(&histogram{}, directOpts, u, false), firstConn(&histogram{}, proxyOpts, u, false)); err != nil {
			e.stopNora(n)
			return fmt.Errorf("a first connection of the resuming clients to %s: %w", u, err)
		}
		for range hosts {
			if err := firstConn(&repeat, clientOpts{conns: 1, roots: e.caRoots, proxy: n.url()}, u, false); err != nil {
				e.stopNora(n)
				return fmt.Errorf("intercepted repeat %s: %w", u, err)
			}
			if err := firstConn(&directResumed, directOpts, u, true); err != nil {
				e.stopNora(n)
				return fmt.Errorf("direct, resumed %s: %w", u, err)
			}
			if err := firstConn(&repeatResumed, proxyOpts, u, true); err != nil {
				e.stopNora(n)
				return fmt.Errorf("intercepted repeat, resumed %s: %w", u, err)
			}
		}
		e.stopNora(n)
		p50.add("direct", direct.quantile(0.5).Seconds())
		p50.add("new", fresh.quantile(0.5).Seconds())
		p50.add("repeat", repeat.quantile(0.5).Seconds())
		p50.add("direct resumed", directResumed.quantile(0.5).Seconds())
		p50.add("repeat resumed", repeatResumed.quantile(0.5).Seconds())
	}
	leaf, err := leafSigning(e, hosts)
	if err != nil {
		return err
	}
	rep.add(interceptionRows(fmt.Sprintf("interception (first connection, %d hosts)", hosts), p50, leaf)...)
	return nil
}

// interceptionRows: the first-connection p50s against a new direct TLS
// connection, each with its absolute target and its target as a ratio, and
// what the new-host figure adds over the repeat host — a new upstream TLS +
// HTTP/2 connection for the name as well as its leaf, which is why the
// leaf's own signing time is a row of its own.
func interceptionRows(sec string, p50 series, leaf float64) []row {
	direct := p50.med("direct")
	nr := row{section: sec, target: "nora-breaker new host", figure: "p50", unit: unitDur, value: p50.med("new"),
		base: direct, goal: "≤ 2 ms"}
	nr.met = verdict(nr.value <= 0.002)
	rr := row{section: sec, target: "nora-breaker repeat host", figure: "p50", unit: unitDur,
		value: p50.med("repeat"), base: direct, goal: "≤ 0.2 ms"}
	rr.met = verdict(rr.value <= 0.0002)
	rows := []row{{section: sec, target: "direct HTTPS new connection", figure: "p50", unit: unitDur, value: direct},
		nr, rr}
	if direct > 0 {
		nq := row{section: sec, target: "nora-breaker new host", figure: "p50 ÷ direct new TLS connection",
			unit: unitRatio, value: nr.value / direct, goal: "≤ 2×"}
		nq.met = verdict(nq.value <= 2)
		rq := row{section: sec, target: "nora-breaker repeat host", figure: "p50 ÷ direct new TLS connection",
			unit: unitRatio, value: rr.value / direct, goal: "≤ 1.3×"}
		rq.met = verdict(rq.value <= 1.3)
		rows = append(rows, nq, rq)
	}
	if dr := p50.med("direct resumed"); dr > 0 {
		// No target: the are for clients that keep no sessions.
		rows = append(rows,
			row{section: sec, target: "direct HTTPS, session resumed", figure: "p50", unit: unitDur, value: dr},
			row{section: sec, target: "nora-breaker repeat host, session resumed", figure: "p50", unit: unitDur,
				value: p50.med("repeat resumed")},
			row{section: sec, target: "nora-breaker repeat host, session resumed", figure: "p50 ÷ direct, session resumed",
				unit: unitRatio, value: p50.med("repeat resumed") / dr},
			row{section: sec, target: "nora-breaker repeat host, session resumed", figure: "p50 ÷ direct new TLS connection",
				unit: unitRatio, value: p50.med("repeat resumed") / direct})
	}
	return append(rows,
		row{section: sec, target: "nora-breaker", figure: "new − repeat host (upstream TLS + HTTP/2 connection, leaf)",
			unit: unitDur, value: nr.value - rr.value},
		row{section: sec, target: "certs package, in the harness", figure: "leaf signing alone (p50)", unit: unitDur,
			value: leaf})
}

// firstConn times one GET on a brand-new client (so a new connection and a
// TLS handshake) and records it. With resume, the connection must have
// resumed its client's session: a row of resumed connections that were
// full handshakes would be a false figure.
func firstConn(h *histogram, o clientOpts, u string, resume bool) error {
	o.timeout = 30 * time.Second
	c := newClient(o)
	defer c.CloseIdleConnections()
	t0 := time.Now()
	resp, err := c.Get(u)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	h.record(time.Since(t0))
	switch {
	case err != nil:
		return err
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("status %d", resp.StatusCode)
	case resume && (resp.TLS == nil || !resp.TLS.DidResume):
		return fmt.Errorf("the connection did not resume its client's session")
	}
	return nil
}
