// Package dial opens every connection the proxy makes towards an upstream,
// directly or through a parent proxy: the dialer (the [sidecar.resolve]
// map and the destination policy on each address it is about to use), the
// transports built on it, and the parent proxies' hops, whose own failures
// their breakers judge apart from any upstream's.
package dial

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/nora-breaker/nora-breaker/attempt"
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
	// dnsDial is how the resolver reaches its name servers: net.Dialer's
	// when nil (a test sets another).
	dnsDial func(ctx context.Context, network, server string) (net.Conn, error)
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
	var faults resolverFaults
	nd := net.Dialer{
		Timeout:   d.timeout,
		KeepAlive: 30 * time.Second,
		Resolver:  d.resolver(&faults),
		Control: func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("dial %s: unexpected address %q: %w", addr, address, destination.ErrForbidden)
			}
			return d.policy.CheckDial(host, port, ap)
		},
	}
	conn, err := nd.DialContext(ctx, network, target)
	return conn, faults.attach(err)
}

// resolver is the resolver of one dial or lookup: Go's own (the binary is
// built without cgo, so it is the one in use anyway), reaching its name
// servers through dnsDial and keeping in faults what that dial failed with.
func (d *Dialer) resolver(faults *resolverFaults) *net.Resolver {
	dial := d.dnsDial
	if dial == nil {
		var nd net.Dialer
		dial = nd.DialContext
	}
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, server string) (net.Conn, error) {
		conn, err := dial(ctx, network, server)
		if err != nil {
			faults.note(err)
			return nil, err
		}
		return faults.watch(conn), nil
	}}
}

// resolverFaults is what the resolver's own sockets to its name servers
// failed with during one lookup (its A and AAAA queries run at once), and
// whether any name server answered. Go's resolver keeps only the text of
// such an error in the net.DNSError it returns, so an errno of this
// machine's (out of file descriptors: attempt.LocalFault), or a name server
// nothing answers at, would read as the upstream's name failing; attach
// puts it back in the error's chain.
type resolverFaults struct {
	mu       sync.Mutex
	first    error
	answered bool
}

func (f *resolverFaults) note(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.first == nil {
		f.first = err
	}
}

func (f *resolverFaults) heard() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answered = true
}

// attach returns err, a lookup's failure, with the resolver's own socket
// error in its chain, and attempt.ErrNameServer too when no name server
// answered at all and the socket's error is neither a timeout nor the
// lookup's context ending; any other err as it is. A name server's answer
// (no such name, its own failure) and its silence stay the lookup's: the
// first is the truth about the name, and a recursive server may be silent
// because the upstream's own name servers are.
func (f *resolverFaults) attach(err error) error {
	var dnsErr *net.DNSError
	if err == nil || !errors.As(err, &dnsErr) {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.first == nil {
		return err
	}
	le := &lookupError{err: err, cause: f.first}
	if !f.answered && !dnsErr.IsNotFound && !isTimeout(f.first) && !errors.Is(f.first, context.Canceled) &&
		!errors.Is(f.first, context.DeadlineExceeded) {
		le.unreachable = true
	}
	return le
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// watch wraps conn, a socket to a name server, so that what its reads and
// writes fail with is noted, and a read that returns bytes counts as an
// answer. A packet socket stays one: Go's resolver frames its queries by
// whether the connection is a net.PacketConn.
func (f *resolverFaults) watch(conn net.Conn) net.Conn {
	w := &nsConn{Conn: conn, faults: f}
	if pc, ok := conn.(net.PacketConn); ok {
		return &nsPacketConn{nsConn: w, pc: pc}
	}
	return w
}

// nsConn is a resolver's socket to a name server, watched by faults.
type nsConn struct {
	net.Conn
	faults *resolverFaults
}

func (c *nsConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.seen(n, err)
	return n, err
}

func (c *nsConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.seen(0, err)
	return n, err
}

func (c *nsConn) seen(n int, err error) {
	if err != nil {
		c.faults.note(err)
	} else if n > 0 {
		c.faults.heard()
	}
}

// nsPacketConn is an nsConn over UDP.
type nsPacketConn struct {
	*nsConn
	pc net.PacketConn
}

func (c *nsPacketConn) ReadFrom(p []byte) (int, net.Addr, error) {
	n, addr, err := c.pc.ReadFrom(p)
	c.seen(n, err)
	return n, addr, err
}

func (c *nsPacketConn) WriteTo(p []byte, addr net.Addr) (int, error) {
	n, err := c.pc.WriteTo(p, addr)
	c.seen(0, err)
	return n, err
}

// lookupError is a failed lookup together with what its resolver's socket
// to a name server failed with, and attempt.ErrNameServer when that means
// no name server could be reached. Its text is the lookup's, which names
// that cause already.
type lookupError struct {
	err, cause  error
	unreachable bool
}

func (e *lookupError) Error() string { return e.err.Error() }
func (e *lookupError) Unwrap() []error {
	if e.unreachable {
		return []error{e.err, e.cause, attempt.ErrNameServer}
	}
	return []error{e.err, e.cause}
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
	} else {
		var faults resolverFaults
		if ips, err = d.resolver(&faults).LookupNetIP(ctx, "ip", host); err != nil {
			return nil, faults.attach(err)
		}
	}
	out := make([]netip.AddrPort, len(ips))
	for i, ip := range ips {
		out[i] = netip.AddrPortFrom(ip.Unmap(), uint16(pn))
	}
	return out, nil
}
