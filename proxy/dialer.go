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
)

// metadataV6 is the IPv6 address of the EC2 instance metadata service.
var metadataV6 = netip.MustParseAddr("fd00:ec2::254")

// forbiddenAddr reports whether an address is a link-local/metadata address
// that a forward proxy must not reach on a client's behalf.
func forbiddenAddr(a netip.Addr) bool {
	a = a.Unmap()
	if a.Is4() {
		b := a.As4()
		return b[0] == 169 && b[1] == 254
	}
	return a == metadataV6
}

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
			if err == nil && forbiddenAddr(ap.Addr()) {
				return fmt.Errorf("%s resolves to %s: %w", host, ap.Addr(), attempt.ErrForbiddenDestination)
			}
			return nil
		},
	}
	return nd.DialContext(ctx, network, target)
}

// literalForbidden reports whether host is an IP literal the policy refuses,
// so the request can be answered 403 before any dial.
func literalForbidden(host string) bool {
	a, err := netip.ParseAddr(strings.Trim(host, "[]"))
	return err == nil && forbiddenAddr(a)
}
