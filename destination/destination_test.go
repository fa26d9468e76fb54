package destination

import (
	"net/netip"
	"net/url"
	"testing"
)

// TestRefusedHost lists every spelling of every refused destination, and
// the neighbours that must stay reachable. Each host is judged as it comes
// out of a URL (url.URL.Hostname) or a CONNECT target (net.SplitHostPort).
func TestRefusedHost(t *testing.T) {
	tests := []struct {
		host    string
		refused bool
	}{
		// 169.254.0.0/16: AWS, Azure, GCP, OpenStack, DigitalOcean metadata.
		{"169.254.169.254", true},
		{"169.254.0.1", true},
		{"169.254.255.255", true},
		{"169.254.169.254.", true},
		{"169.254.169.254..", true},
		{"[169.254.169.254]", true},
		{"169.254.169.254%eth0", true},
		{"::ffff:169.254.169.254", true},   // IPv4-mapped, dotted
		{"::ffff:a9fe:a9fe", true},         // IPv4-mapped, hex
		{"[::ffff:a9fe:a9fe]", true},       // bracketed
		{"::FFFF:A9FE:A9FE", true},         // upper case
		{"::ffff:0:a9fe:a9fe", true},       // IPv4-translated
		{"::a9fe:a9fe", true},              // IPv4-compatible
		{"::169.254.169.254", true},        // IPv4-compatible, dotted
		{"64:ff9b::a9fe:a9fe", true},       // NAT64
		{"64:ff9b::169.254.169.254", true}, // NAT64, dotted
		{"[64:ff9b::a9fe:a9fe]", true},
		{"0:0:0:0:0:ffff:a9fe:a9fe", true},
		// Numeric IPv4 shorthand (inet_aton, WHATWG URL parsers).
		{"2852039166", true},          // one decimal number
		{"0xa9fea9fe", true},          // one hexadecimal number
		{"0XA9FEA9FE", true},          // upper case prefix
		{"0251.0376.0251.0376", true}, // octal parts
		{"0xa9.0xfe.0xa9.0xfe", true}, // hexadecimal parts
		{"169.254.43518", true},       // three parts, last fills two bytes
		{"169.16689662", true},        // two parts, last fills three bytes
		{"0xa9.254.0251.254.", true},  // mixed, trailing dot
		// fe80::/10, with and without zones.
		{"fe80::1", true},
		{"fe80::a9fe:a9fe", true},
		{"febf:ffff::1", true},
		{"[fe80::1]", true},
		{"fe80::1%eth0", true},
		{"fe80::1%25eth0", true}, // a URL-escaped zone taken raw from a CONNECT line
		{"[fe80::1%25eth0]", true},
		{"FE80::1", true},
		// AWS and Google Cloud IPv6 metadata.
		{"fd00:ec2::254", true},
		{"[fd00:ec2::254]", true},
		{"fd00:ec2::254%eth0", true},
		{"[fd00:ec2::254%25eth0]", true},
		{"fd00:0ec2:0000:0000:0000:0000:0000:0254", true},
		{"FD00:EC2::254", true},
		{"fd20:ce::254", true},
		{"[fd20:ce::254%25eth0]", true},
		// Alibaba Cloud metadata, in every form.
		{"100.100.100.200", true},
		{"100.100.100.200.", true},
		{"::ffff:100.100.100.200", true},
		{"::ffff:6464:64c8", true},
		{"::6464:64c8", true},
		{"64:ff9b::6464:64c8", true},
		{"1684301000", true},
		{"0x64.0x64.0x64.0xc8", true},
		// Unspecified addresses reach the local host.
		{"0.0.0.0", true},
		{"0", true},
		{"0x0", true},
		{"::", true},
		{"[::]", true},
		{"::ffff:0.0.0.0", true},
		{"64:ff9b::", true},
		{"0.0.0.0%eth0", true},

		// Neighbours that stay reachable: private ranges are normal homes
		// of internal registries.
		{"169.253.255.255", false},
		{"169.255.0.0", false},
		{"100.100.100.201", false},
		{"100.64.0.1", false},
		{"10.0.0.1", false},
		{"172.16.0.1", false},
		{"192.168.1.1", false},
		{"127.0.0.1", false}, // loopback is a different rule
		{"::1", false},
		{"fec0::1", false},
		{"fd00:ec2::253", false},
		{"fd00:ec2::1:254", false},
		{"fd20:ce::255", false},
		{"fd12:3456::1", false},
		{"2001:db8::a9fe:a9fe", false},
		{"64:ff9b::a01:101", false},     // NAT64 of 10.1.1.1
		{"64:ff9b:1::a9fe:a9fe", false}, // the local-use NAT64 prefix embeds differently
		{"::ffff:10.0.0.1", false},
		{"1.2.3.4", false},
		{"0.0.0.1", false},
		// Names are not addresses: the dialer judges what they resolve to.
		{"metadata.google.internal", false},
		{"169.254.169.254.nip.io", false},
		{"registry-1.docker.io", false},
		{"example.1", false},
		{"0xa9fea9fe.example", false},
		{"169.254.169.254.0x1g", false},
		{"1.2.3.4.5", false},
		{"256.1.1.1", false},
		{"169.254.65536", false},
		{"", false},
		{"[]", false},
		{"%eth0", false},
		{"fe80::zz", false},
	}
	for _, tc := range tests {
		if got := RefusedHost(tc.host); got != tc.refused {
			a, ok := parseHost(tc.host)
			t.Errorf("RefusedHost(%q) = %v, want %v (parsed %v %v)", tc.host, got, tc.refused, a, ok)
		}
	}
}

// TestRefusedHostThroughURL: the hosts a URL yields, escaped zone included,
// are judged like the raw spellings.
func TestRefusedHostThroughURL(t *testing.T) {
	for _, raw := range []string{
		"http://169.254.169.254/latest/meta-data/",
		"http://169.254.169.254.:80/",
		"http://[fd00:ec2::254%25eth0]/latest",
		"http://[fe80::1%25en0]:8080/",
		"http://[::ffff:a9fe:a9fe]/",
		"http://[64:ff9b::a9fe:a9fe]/",
		"http://[::a9fe:a9fe]/",
		"http://0xa9fea9fe/",
		"http://[fd20:ce::254]/computeMetadata/v1/",
		"http://100.100.100.200/latest/meta-data/",
		"http://0.0.0.0:9128/breakers",
		"http://[::]:9128/breakers",
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		if !RefusedHost(u.Hostname()) {
			t.Errorf("%s: host %q not refused", raw, u.Hostname())
		}
	}
}

func TestParseHostShorthand(t *testing.T) {
	tests := []struct {
		host string
		want string // "" = not an address
	}{
		{"1.2.3.4", "1.2.3.4"},
		{"0x7f.1", "127.0.0.1"},
		{"017700000001", "127.0.0.1"},
		{"4294967295", "255.255.255.255"},
		{"4294967296", ""},
		{"0x", "0.0.0.0"},
		{"1.0x", "1.0.0.0"},
		{"08", ""}, // not octal
		{"1..2", ""},
		{"+1", ""},
		{"1_0", ""},
		{"[::1]", "::1"},
		{"fe80::1%25eth0", "fe80::1"},
	}
	for _, tc := range tests {
		a, ok := parseHost(tc.host)
		if got := a.String(); (tc.want == "") == ok || (ok && got != tc.want) {
			t.Errorf("parseHost(%q) = %v %v, want %q", tc.host, a, ok, tc.want)
		}
	}
}

// FuzzParseHost checks parseHost on any input: it never panics, agrees
// with netip on standard literals, ignores the decorations it promises to
// ignore (brackets, trailing dots, zones), and its answer survives a round
// trip through the address's canonical form.
func FuzzParseHost(f *testing.F) {
	for _, s := range []string{"169.254.169.254", "[fd00:ec2::254%25eth0]", "::ffff:a9fe:a9fe",
		"64:ff9b::a9fe:a9fe", "0xa9fea9fe", "0251.0376.0251.0376", "169.254.43518", "example.com",
		"fe80::1%eth0", "0", "1.2.3.4.", "::", "4294967296", "0x.0x.0x.0x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		a, ok := parseHost(host)
		if ok != a.IsValid() {
			t.Fatalf("parseHost(%q) = %v, %v: validity disagrees", host, a, ok)
		}
		if std, err := netip.ParseAddr(host); err == nil {
			if !ok || a != std.WithZone("") && a != std {
				t.Fatalf("parseHost(%q) = %v %v, netip says %v", host, a, ok, std)
			}
		}
		if !ok {
			return
		}
		refused := Refused(a)
		if RefusedHost(host) != refused {
			t.Fatalf("RefusedHost(%q) disagrees with Refused(%v)", host, a)
		}
		for _, v := range []string{"[" + host + "]", host + ".", a.String(), "[" + a.String() + "]"} {
			b, ok2 := parseHost(v)
			if !ok2 || b.WithZone("") != a.WithZone("") || Refused(b) != refused {
				t.Fatalf("parseHost(%q) = %v %v, but parseHost(%q) = %v", v, b, ok2, host, a)
			}
		}
		if a.Is6() && !a.Is4In6() {
			z := a.WithZone("").String() + "%25eth0"
			if b, ok2 := parseHost(z); !ok2 || b.WithZone("") != a.WithZone("") {
				t.Fatalf("zone changed the address: %q → %v", z, b)
			}
		}
	})
}
