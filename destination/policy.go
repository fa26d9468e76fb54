package destination

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync/atomic"

	"github.com/nora-breaker/nora-breaker/internal/hostport"
)

// Where the proxy refuses to connect (docs/behaviour.md §10). Two moments
// decide it: a request or CONNECT target is checked before anything is
// dialed (RefuseTarget), and every address a dial is about to use is
// checked after resolution (CheckDial), so a name that resolves somewhere
// forbidden is caught like a literal:
//   - the proxy's own listeners, whatever address reaches them (a loopback
//     address, 0.0.0.0, the pod's own IP): the admin API must not be
//     reachable through the proxy, and a request to the proxy port is a
//     loop;
//   - cloud metadata and link-local destinations (Refused), unless
//     allow_hosts names the host;
//   - loopback, unless the host is one an upstream, allow_hosts or
//     [sidecar.resolve] names: a client must not reach the services of the
//     proxy's own machine through it;
//   - under deny_unlisted, any host no upstream owns, unless allow_hosts
//     names it.

// Own holds the proxy's bound listener ports and the machine's own
// addresses.
type Own struct {
	ports map[uint16]bool
	// local holds the machine's interface addresses (the pod IP among
	// them); loopback and unspecified addresses count as local too.
	local map[netip.Addr]bool
}

// NewOwn records addrs (the listeners' bound addresses) and ifaceAddrs,
// the machine's interface addresses (InterfaceAddrs).
func NewOwn(ifaceAddrs []netip.Addr, addrs ...net.Addr) *Own {
	o := &Own{ports: map[uint16]bool{}, local: map[netip.Addr]bool{}}
	for _, a := range addrs {
		if _, port, err := net.SplitHostPort(a.String()); err == nil {
			if n, err := strconv.ParseUint(port, 10, 16); err == nil {
				o.ports[uint16(n)] = true
			}
		}
	}
	for _, a := range ifaceAddrs {
		o.local[a.Unmap().WithZone("")] = true
	}
	return o
}

// Reaches reports whether a connection to to would reach one of the
// listeners. A nil Own (listeners not bound yet) reaches nothing.
func (o *Own) Reaches(to netip.AddrPort) bool {
	if o == nil || !o.ports[to.Port()] {
		return false
	}
	a := to.Addr().Unmap().WithZone("")
	return a.IsLoopback() || a.IsUnspecified() || o.local[a]
}

// InterfaceAddrs lists the machine's own addresses; an error leaves only
// loopback and unspecified as local, which Reaches covers anyway.
func InterfaceAddrs() []netip.Addr {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr())
		}
	}
	return out
}

// Policy is the destination policy of one configuration. Its maps are
// read-only once built; a Policy is a small value safe for any number of
// goroutines.
type Policy struct {
	// Allow holds the allow_hosts entries: "host" (any port) or
	// "host:port", lower-case.
	Allow map[string]bool
	// Named holds "host:port" of every configured upstream and alias host
	// and every [sidecar.resolve] key: hosts the operator put there, which
	// may resolve to loopback.
	Named map[string]bool
	// DenyUnlisted refuses hosts no upstream owns (deny_unlisted).
	DenyUnlisted bool
	// Own names the listeners once they are bound (nil: none to avoid).
	Own *atomic.Pointer[Own]
}

// Allowed reports whether allow_hosts names host, on any port or on port.
func (p Policy) Allowed(host, port string) bool {
	host = hostport.Host(host)
	return p.Allow[host] || p.Allow[net.JoinHostPort(host, port)]
}

// RefuseTarget is why a request or a CONNECT to host:port is refused before
// anything is dialed, or "": an IP literal Refused refuses, or under
// deny_unlisted a host of no upstream (classified false), unless
// allow_hosts names it. The plain path and the CONNECT path both ask here,
// so the two cannot drift apart.
func (p Policy) RefuseTarget(host, port string, classified bool) string {
	allowed := p.Allowed(host, port)
	switch {
	case RefusedHost(host) && !allowed:
		return "destination address is not allowed"
	case !classified && p.DenyUnlisted && !allowed:
		return "host is not a configured upstream"
	}
	return ""
}

// CheckDial returns nil, or why the dial of host:port may not use address
// to (wrapping ErrForbidden: policy, neutral for any breaker).
func (p Policy) CheckDial(host, port string, to netip.AddrPort) error {
	if p.Own != nil && p.Own.Load().Reaches(to) {
		return fmt.Errorf("%s is one of the proxy's own listeners: %w", to, ErrForbidden)
	}
	host = hostport.Host(host)
	a := to.Addr().Unmap()
	switch {
	case p.Allowed(host, port):
		return nil
	case Refused(a):
		return fmt.Errorf("%s resolves to %s: %w", host, a, ErrForbidden)
	case a.IsLoopback() && !p.Named[net.JoinHostPort(host, port)]:
		return fmt.Errorf("%s resolves to the proxy's own machine (%s) and no upstream names it: %w",
			host, a, ErrForbidden)
	}
	return nil
}
