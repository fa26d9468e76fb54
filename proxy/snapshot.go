package proxy

import (
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"

	"github.com/nora-breaker/nora-breaker/config"
	"github.com/nora-breaker/nora-breaker/fallback"
)

// snapshot is one configuration and everything the request path derives
// from it, worked out once instead of on every request. A reload swaps the
// whole snapshot; every request loads it once when it arrives and decides
// everything under that one value, so a reload in the middle of a request
// never gives it two configurations.
type snapshot struct {
	cfg   *config.Config
	table *upstreamTable
	// connectPorts are the ports a CONNECT may name: 443, the ports of the
	// configured upstreams' hosts (URL hosts and alias hosts, as the table
	// classifies them) and those named in allow_hosts. A learned host's
	// route is classified, which allows its own port (connectRefusal).
	connectPorts map[string]bool
	// hostOfKey names, for every breaker key, the host it admits and the
	// upstream that host belongs to (for /breakers and the status page).
	hostOfKey map[string]keyHost
	// transport carries every upstream attempt of requests decided under
	// this snapshot. It is rebuilt only when a setting it was built from
	// changes (see upstreamSettings), so a reload that touches nothing of
	// the kind keeps the pooled upstream connections.
	transport *http.Transport
	dial      *dialer // the transport's dialer, also used for tunnels
	// upstream holds the settings transport was built from, allow_hosts
	// among them (hostAllowed reads it).
	upstream upstreamSettings
	// fallback is what the fallback loop decides requests under (set by
	// buildSnapshot; zero in a snapshot built alone).
	fallback fallback.Settings
}

// keyHost is what a breaker key stands for.
type keyHost struct{ host, upstream string }

// newSnapshot derives a snapshot from cfg, reusing prev's transport when
// the settings it was built from are unchanged (prev may be nil).
// own names the proxy's listeners once they are bound (nil in tests that
// build a snapshot alone).
func newSnapshot(cfg *config.Config, prev *snapshot, own *atomic.Pointer[ownListeners]) (*snapshot, error) {
	s := &snapshot{cfg: cfg, table: newTable(cfg.Upstreams),
		connectPorts: map[string]bool{"443": true},
		hostOfKey:    make(map[string]keyHost)}
	for _, u := range cfg.Upstreams {
		for _, h := range u.Hosts {
			_, port, _ := net.SplitHostPort(hostPortOf(u, h))
			s.connectPorts[port] = true
		}
	}
	for _, b := range cfg.HostBreakers() {
		host := b.Host
		if host == b.Upstream.Hosts[0] {
			host = b.Upstream.URL.Host // the URL host is shown with its port
		}
		s.hostOfKey[b.Key] = keyHost{host: host, upstream: b.Upstream.Key}
	}
	s.upstream = upstreamSettingsOf(cfg, s.table)
	for a := range s.upstream.allow {
		if _, port, err := net.SplitHostPort(a); err == nil {
			s.connectPorts[port] = true
		}
	}
	if prev != nil && prev.upstream.equal(s.upstream) {
		s.transport, s.dial = prev.transport, prev.dial
		return s, nil
	}
	var err error
	s.transport, s.dial, err = newTransport(s.upstream, own)
	return s, err
}

// hostAllowed reports whether host (and port) is listed in allow_hosts.
func (s *snapshot) hostAllowed(host, port string) bool {
	return allowListed(s.upstream.allow, strings.ToLower(host), port)
}

// buildSnapshot is newSnapshot for p: it also fixes the settings the
// fallback loop decides the snapshot's requests under, once, instead of on
// every request.
func (p *Proxy) buildSnapshot(cfg *config.Config, prev *snapshot) (*snapshot, error) {
	s, err := newSnapshot(cfg, prev, &p.own)
	if err != nil {
		return nil, err
	}
	sc := cfg.Sidecar
	s.fallback = fallback.Settings{Transport: s.transport, StaleMode: sc.StaleAuthenticated,
		CredentialHeaders: sc.CredentialHeaders,
		Routes:            snapshotRoutes{p, s}, ThrottleDefault: sc.ThrottleDefault}
	return s, nil
}

// snapshotRoutes names breaker keys by URL under one snapshot, for the
// fallback loop (format.Routes).
type snapshotRoutes struct {
	p *Proxy
	s *snapshot
}

// KeyOf is the breaker key of the host u goes to, "" for no upstream's.
func (r snapshotRoutes) KeyOf(u *url.URL) string { return r.p.routeOf(r.s, u).Key }
