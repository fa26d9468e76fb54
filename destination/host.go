package destination

import (
	"net/netip"
	"strconv"
	"strings"
)

// RefusedHost reports whether host, the host part of a request URL or a
// CONNECT target, is an IP literal that Refused refuses, so the request can
// be answered before anything is dialed. A host name is not resolved here
// and reports false: the dialer judges the addresses it resolves to.
func RefusedHost(host string) bool {
	a, ok := parseHost(host)
	return ok && Refused(a)
}

// parseHost returns the IP address host spells, if it spells one. It
// accepts every spelling some client, URL parser or resolver turns into an
// address, so that none of them slips past the policy:
//
//   - brackets, as in a URL or a host:port ("[fd00:ec2::254]");
//   - a zone id, raw or URL-escaped ("fe80::1%eth0", "fe80::1%25eth0"),
//     which is dropped: the zone picks an interface, not another address;
//   - trailing dots ("169.254.169.254."), which resolvers ignore;
//   - the IPv4 shorthand that inet_aton and WHATWG URL parsers (browsers,
//     Node) read as an address: hexadecimal and octal parts and fewer than
//     four parts ("0xa9fea9fe", "2852039166", "0251.0376.0251.0376",
//     "169.254.43518").
func parseHost(host string) (netip.Addr, bool) {
	// Stray brackets and dots are shed too: being lenient here can only
	// refuse more.
	h := strings.TrimRight(strings.TrimLeft(host, "["), "].")
	if i := strings.IndexByte(h, '%'); i >= 0 {
		h = strings.TrimRight(h[:i], ".")
	}
	if h == "" {
		return netip.Addr{}, false
	}
	if a, err := netip.ParseAddr(h); err == nil {
		return a, true
	}
	if strings.Contains(h, ":") {
		return netip.Addr{}, false
	}
	return parse4(h)
}

// parse4 reads an IPv4 address the way the WHATWG URL standard's IPv4
// parser does: one to four dot-separated numbers, each decimal, octal
// (leading 0) or hexadecimal (leading 0x); every number but the last is one
// byte, the last fills the remaining bytes. Anything else is a host name.
func parse4(h string) (netip.Addr, bool) {
	parts := strings.Split(h, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	var v uint64
	last := len(parts) - 1
	for i, p := range parts {
		n, ok := parseNumber(p)
		if !ok {
			return netip.Addr{}, false
		}
		if i < last {
			if n > 255 {
				return netip.Addr{}, false
			}
			v |= n << (8 * (3 - i))
			continue
		}
		if n >= 1<<(8*(4-last)) {
			return netip.Addr{}, false
		}
		v |= n
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true
}

// parseNumber reads one part of an IPv4 shorthand: "0x…" hexadecimal (a
// bare "0x" is zero), "0…" octal, otherwise decimal.
func parseNumber(p string) (uint64, bool) {
	base := 10
	switch {
	case len(p) >= 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X'):
		p, base = p[2:], 16
		if p == "" {
			return 0, true
		}
	case len(p) >= 2 && p[0] == '0':
		p, base = p[1:], 8
	}
	n, err := strconv.ParseUint(p, base, 64) // no sign, no underscores with an explicit base
	return n, err == nil
}
