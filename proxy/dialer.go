package proxy

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"time"

	"github.com/nora-breaker/nora-breaker/attempt"
	"github.com/nora-breaker/nora-breaker/destination"
)

// dialer opens every upstream and tunnel connection. It applies the
// [sidecar.resolve] map (like curl --resolve) and refuses metadata addresses
// after resolution, so a DNS name pointing at 169.254.169.254 is caught too.
type dialer struct {
	timeout time.Duration
	resolve map[string]string // "host:port" (lower-case host) → "ip:port"
	allowed func(host, port string) bool
}

// DialContext dials addr ("host:port") with the resolve map and address policy.
func (d *dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	target := addr
	if to, ok := d.resolve[net.JoinHostPort(host, port)]; ok {
		target = to
	}
	exempt := d.allowed != nil && d.allowed(host, port)
	nd := net.Dialer{
		Timeout:   d.timeout,
		KeepAlive: 30 * time.Second,
		Control: func(_, address string, _ syscall.RawConn) error {
			if exempt {
				return nil
			}
			ap, err := netip.ParseAddrPort(address)
			if err == nil && destination.Refused(ap.Addr()) {
				return fmt.Errorf("%s resolves to %s: %w", host, ap.Addr(), attempt.ErrForbiddenDestination)
			}
			return nil
		},
	}
	return nd.DialContext(ctx, network, target)
}

// literalForbidden reports whether host is an IP literal, in any spelling,
// that the destination policy refuses, so the request can be answered 403
// before any dial.
func literalForbidden(host string) bool { return destination.RefusedHost(host) }
