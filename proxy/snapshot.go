package proxy

import (
	"net"
	"sync/atomic"

	"github.com/nora-breaker/nora-breaker/admin"
	"github.com/nora-breaker/nora-breaker/config"
	"github.com/nora-breaker/nora-breaker/destination"
	"github.com/nora-breaker/nora-breaker/dial"
	"github.com/nora-breaker/nora-breaker/fallback"
	"github.com/nora-breaker/nora-breaker/route"
)

// snapshot is one configuration and everything the request path derives
// from it, worked out once instead of on every request. A reload swaps the
// whole snapshot; every request loads it once when it arrives and decides
// everything under that one value, so a reload in the middle of a request
// never gives it two configurations.
type snapshot struct {
	cfg *config.Config
	// routes classifies the snapshot's requests: its upstream table, then
	// the proxy's learned hosts.
	routes route.Router
	// connectPorts are the ports a CONNECT may name: 443, the ports of the
	// configured upstreams' hosts (URL hosts and alias hosts, as the table
	// classifies them) and those named in allow_hosts. A learned host's
	// route is classified, which allows its own port (connectRefusal).
	connectPorts map[string]bool
	// hostOfKey names, for every breaker key, the host it admits and the
	// upstream that host belongs to (for /breakers and the status page).
	hostOfKey map[string]admin.KeyHost
	// transport holds the ways out (direct, and through each parent)
	// that carry every upstream attempt of requests decided under this
	// snapshot. It is rebuilt only when a setting it was built from
	// changes (see dial.Settings), so a reload that touches nothing of
	// the kind keeps the pooled upstream connections.
	transport *dial.Transport
	// egress picks each request's and tunnel's way out of transport
	// (directly, or through which parent) under this snapshot's routes.
	egress *dial.Egress
	// upstream holds the settings transport was built from.
	upstream dial.Settings
	// policy is the destination policy targets are checked by before any
	// dial (the dialer applies the same policy to resolved addresses).
	policy destination.Policy
	// fallback is what the fallback loop decides requests under (set by
	// buildSnapshot; zero in a snapshot built alone).
	fallback fallback.Settings
}

// newSnapshot derives a snapshot from cfg, reusing prev's transport when
// the settings it was built from are unchanged (prev may be nil).
// own names the proxy's listeners once they are bound (nil in tests that
// build a snapshot alone); deps are what a new transport reports to.
func newSnapshot(cfg *config.Config, prev *snapshot, own *atomic.Pointer[destination.Own], learned *route.Learned,
	deps dial.Deps) (*snapshot, error) {
	table := route.NewTable(cfg.Upstreams)
	s := &snapshot{cfg: cfg, routes: route.NewRouter(table, learned),
		connectPorts: map[string]bool{"443": true},
		hostOfKey:    make(map[string]admin.KeyHost)}
	for _, u := range cfg.Upstreams {
		for _, h := range u.Hosts {
			_, port, _ := net.SplitHostPort(route.HostPortOf(u, h))
			s.connectPorts[port] = true
		}
	}
	for _, b := range cfg.HostBreakers() {
		host := b.Host
		if host == b.Upstream.Hosts[0] {
			host = b.Upstream.URL.Host // the URL host is shown with its port
		}
		s.hostOfKey[b.Key] = admin.KeyHost{Host: host, Upstream: b.Upstream.Key}
	}
	for _, pp := range cfg.Parents() {
		s.hostOfKey[pp.Key()] = admin.KeyHost{Host: pp.URL.Host, Upstream: pp.Key()}
	}
	s.upstream = dial.SettingsOf(cfg, table)
	s.policy = s.upstream.Policy(own, cfg.Sidecar.DenyUnlisted)
	for a := range s.upstream.Allow {
		if _, port, err := net.SplitHostPort(a); err == nil {
			s.connectPorts[port] = true
		}
	}
	if prev != nil && prev.upstream.Equal(s.upstream) {
		s.transport = prev.transport
	} else {
		var err error
		if s.transport, err = dial.NewTransport(s.upstream, own, deps); err != nil {
			return nil, err
		}
	}
	s.egress = dial.NewEgress(s.transport, cfg, s.routes)
	return s, nil
}

// buildSnapshot is newSnapshot for p: it also fixes the settings the
// fallback loop decides the snapshot's requests under, once, instead of on
// every request.
func (p *Proxy) buildSnapshot(cfg *config.Config, prev *snapshot) (*snapshot, error) {
	s, err := newSnapshot(cfg, prev, &p.own, p.learned, dial.Deps{Breakers: p.breakers, Logger: p.log, Now: p.now})
	if err != nil {
		return nil, err
	}
	sc := cfg.Sidecar
	s.fallback = fallback.Settings{Transport: s.egress, ParentKey: s.egress.ParentKey, StaleMode: sc.StaleAuthenticated,
		CredentialHeaders: sc.CredentialHeaders,
		Routes:            s.routes, RetryAfterMax: sc.RetryAfterMax,
		ThrottleDefault: sc.ThrottleDefault}
	return s, nil
}
