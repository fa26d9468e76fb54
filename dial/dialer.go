// Package dial opens every connection the proxy makes towards an upstream,
// directly or through a parent proxy: the dialer (the [sidecar.resolve]
// map and the destination policy on each address it is about to use), the
// transports built on it, and the parent proxies' hops, whose own failures
// their breakers judge apart from any upstream's.
package dial

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"time"

	"github.com/nora-breaker/nora-breaker/destination"
	"github.com/nora-breaker/nora-breaker/internal/hostport"
)

// Dialer opens every upstream and tunnel connection. It applies the
// [sidecar.resolve] map (like curl --resolve) and the destination policy to
// every address it is about to use, after resolution, so a DNS name
// pointing at 169.254.169.254 or at the proxy itself is caught too.
type Dialer struct {
	timeout time.Duration
	resolve map[string]string // "host:port" (lower-case host) → "ip:port"
	policy  destination.Policy
}

// DialContext dials addr ("host:port") with the resolve map and address policy.
func (d *Dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := hostport.Split(addr, "")
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	target := hostport.Join(host, port)
	if to, ok := d.resolve[target]; ok {
		target = to
	}
	nd := net.Dialer{
		Timeout:   d.timeout,
		KeepAlive: 30 * time.Second,
		Control: func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("dial %s: unexpected address %q: %w", addr, address, destination.ErrForbidden)
			}
			return d.policy.CheckDial(host, port, ap)
		},
	}
	return nd.DialContext(ctx, network, target)
}

// addrsOf is where DialContext would connect for host:port: the
// [sidecar.resolve] entry, else host itself when it is an address, else
// what the resolver answers for it. The addresses are unmapped (an IPv4
// address written in IPv6 is the IPv4 one).
func (d *Dialer) addrsOf(ctx context.Context, host, port string) ([]netip.AddrPort, error) {
	if to, ok := d.resolve[hostport.Join(host, port)]; ok {
		ap, err := netip.ParseAddrPort(to)
		if err != nil {
			return nil, err
		}
		return []netip.AddrPort{netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())}, nil
	}
	pn, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil, err
	}
	var ips []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		ips = []netip.Addr{ip}
	} else if ips, err = net.DefaultResolver.LookupNetIP(ctx, "ip", host); err != nil {
		return nil, err
	}
	out := make([]netip.AddrPort, len(ips))
	for i, ip := range ips {
		out[i] = netip.AddrPortFrom(ip.Unmap(), uint16(pn))
	}
	return out, nil
}
