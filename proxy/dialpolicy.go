package proxy

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"

	"github.com/nora-breaker/nora-breaker/destination"
)

// Where the proxy refuses to connect, checked on every address a dial is
// about to use, so a name that resolves there is caught like a literal
// (docs/behaviour.md §10):
//   - its own listeners, whatever address reaches them (a loopback address,
//     0.0.0.0, the pod's own IP): the admin API must not be reachable
//     through the proxy, and a request to the proxy port is a loop;
//   - cloud metadata and link-local destinations, unless allow_hosts names
//     the host;
//   - loopback, unless the host is one an upstream, allow_hosts or
//     [sidecar.resolve] names: a client must not reach the services of the
//     proxy's own machine through it.

// ownListeners are the proxy's bound listener ports and the machine's own
// addresses.
type ownListeners struct {
	ports map[string]bool
	// local holds the machine's interface addresses (the pod IP among
	// them); loopback and unspecified addresses count as local too.
	local map[netip.Addr]bool
}

// newOwnListeners records addrs (the listeners' bound addresses) and the
// machine's interface addresses.
func newOwnListeners(ifaceAddrs []netip.Addr, addrs ...net.Addr) *ownListeners {
	o := &ownListeners{ports: map[string]bool{}, local: map[netip.Addr]bool{}}
	for _, a := range addrs {
		if _, port, err := net.SplitHostPort(a.String()); err == nil {
			o.ports[port] = true
		}
	}
	for _, a := range ifaceAddrs {
		o.local[a.Unmap().WithZone("")] = true
	}
	return o
}

// reaches reports whether a connection to to would reach one of the
// listeners.
func (o *ownListeners) reaches(to netip.AddrPort) bool {
	if o == nil || !o.ports[fmt.Sprint(to.Port())] {
		return false
	}
	a := to.Addr().Unmap().WithZone("")
	return a.IsLoopback() || a.IsUnspecified() || o.local[a]
}

// interfaceAddrs lists the machine's own addresses; an error leaves only
// loopback and unspecified as local, which the check covers anyway.
func interfaceAddrs() []netip.Addr {
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

// dialPolicy decides whether the dial of host:port may use address to.
type dialPolicy struct {
	own *atomic.Pointer[ownListeners] // set once the listeners are bound
	// named holds "host:port" of every configured upstream and alias host
	// and every [sidecar.resolve] key: hosts the operator put there.
	named map[string]bool
	// allow holds the allow_hosts entries: "host" (any port) or "host:port".
	allow map[string]bool
}

// allowListed reports whether allow (allow_hosts entries) names host, a
// lower-case name, on any port or on port.
func allowListed(allow map[string]bool, host, port string) bool {
	return allow[host] || allow[net.JoinHostPort(host, port)]
}

// check returns nil, or why the dial is refused (wrapping
// destination.ErrForbidden: policy, neutral for any breaker).
func (dp dialPolicy) check(host, port string, to netip.AddrPort) error {
	if dp.own != nil && dp.own.Load().reaches(to) {
		return fmt.Errorf("%s is one of the proxy's own listeners: %w", to, destination.ErrForbidden)
	}
	host = strings.ToLower(host)
	a := to.Addr().Unmap()
	switch {
	case allowListed(dp.allow, host, port):
		return nil
	case destination.Refused(a):
		return fmt.Errorf("%s resolves to %s: %w", host, a, destination.ErrForbidden)
	case a.IsLoopback() && !dp.named[net.JoinHostPort(host, port)]:
		return fmt.Errorf("%s resolves to the proxy's own machine (%s) and no upstream names it: %w",
			host, a, destination.ErrForbidden)
	}
	return nil
}
