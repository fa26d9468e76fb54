// Package destination is the destination policy: every rule that decides
// whether the proxy may connect somewhere on a client's behalf (cloud
// metadata and link-local addresses in every spelling an address can take,
// the proxy's own listeners, loopback hosts no configuration names, and
// deny_unlisted), checked on a target before any dial and on every address
// a dial resolves to.
package destination

import (
	"errors"
	"net/netip"
)

// metadata6 reports the IPv6 metadata endpoints outside fe80::/10: AWS's
// fd00:ec2::254 and Google Cloud's fd20:ce::254.
func metadata6(a netip.Addr) bool {
	return a == netip.AddrFrom16([16]byte{0xfd, 0x00, 0x0e, 0xc2, 14: 0x02, 15: 0x54}) ||
		a == netip.AddrFrom16([16]byte{0xfd, 0x20, 0x00, 0xce, 14: 0x02, 15: 0x54})
}

// refused4 reports 169.254.0.0/16 and Alibaba Cloud's metadata service
// 100.100.100.200, which lies outside it.
func refused4(a netip.Addr) bool {
	b := a.As4()
	return (b[0] == 169 && b[1] == 254) || b == [4]byte{100, 100, 100, 200}
}

// refused6 reports fe80::/10 and the IPv6 metadata endpoints.
func refused6(a netip.Addr) bool {
	b := a.As16()
	return (b[0] == 0xfe && b[1]&0xc0 == 0x80) || metadata6(a)
}

// Refused reports whether a is an address the proxy must never connect to
// for a client: 169.254.0.0/16 and fe80::/10 (link-local, where AWS, Azure,
// GCP, OpenStack and others serve instance metadata and credentials),
// fd00:ec2::254, fd20:ce::254, 100.100.100.200, and the unspecified
// addresses 0.0.0.0 and ::. Any zone is ignored. An IPv4 address hidden in
// an IPv6 one (::ffff:a.b.c.d, ::a.b.c.d, ::ffff:0:a.b.c.d and the NAT64
// prefix 64:ff9b::/96) is judged as the IPv4 address it reaches.
//
// The unspecified addresses are refused because connecting to them reaches
// the local host (Linux treats 0.0.0.0 and :: as "this machine"), which is
// never a registry and would sidestep a check for loopback; no client has a
// legitimate reason to ask a proxy for them.
func Refused(a netip.Addr) bool {
	if !a.IsValid() {
		return false
	}
	a = a.WithZone("")
	if a.IsUnspecified() {
		return true
	}
	if v4, ok := embedded4(a); ok {
		a = v4
	}
	if a.Is4() {
		return refused4(a) || a.IsUnspecified()
	}
	return refused6(a)
}

// embedded4 returns the IPv4 address that a carries in one of the IPv6
// forms that reach it: IPv4-mapped ::ffff:0:0/96, IPv4-translated
// ::ffff:0:0:0/96, IPv4-compatible ::/96 (deprecated, but still parsed and
// routed by some stacks) and the well-known NAT64 prefix 64:ff9b::/96.
func embedded4(a netip.Addr) (netip.Addr, bool) {
	if a.Is4() {
		return a, false
	}
	b := a.As16()
	var v4 [4]byte
	copy(v4[:], b[12:])
	switch {
	case allZero(b[:10]) && b[10] == 0xff && b[11] == 0xff: // ::ffff:a.b.c.d
	case allZero(b[:8]) && b[8] == 0xff && b[9] == 0xff && b[10] == 0 && b[11] == 0: // ::ffff:0:a.b.c.d
	case allZero(b[:12]): // ::a.b.c.d
	case b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b && allZero(b[4:12]): // 64:ff9b::a.b.c.d
	default:
		return a, false
	}
	return netip.AddrFrom4(v4), true
}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// ErrForbidden is wrapped by every refusal of the destination policy (an
// address the dialer will not use, an IP literal refused before any dial).
// Refusing is policy, never the upstream's fault, so an attempt ending in it
// is neutral for every breaker.
var ErrForbidden = errors.New("destination address is not allowed")
