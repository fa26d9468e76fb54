package destination

import (
	"errors"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
)

// TestOwnReachedByThePodAddress: the listeners are reached through any of
// the machine's own addresses when they listen on all of them.
func TestOwnReachedByThePodAddress(t *testing.T) {
	pod := netip.MustParseAddr("10.42.0.17")
	o := NewOwn([]netip.Addr{pod, netip.MustParseAddr("fe80::1%eth0")},
		&net.TCPAddr{IP: net.IPv4zero, Port: 9128}, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 3128})
	tests := []struct {
		to   string
		want bool
	}{
		{"10.42.0.17:9128", true},
		{"10.42.0.17:3128", true},
		{"127.0.0.1:9128", true},
		{"127.1.2.3:3128", true},
		{"0.0.0.0:9128", true},
		{"[::1]:9128", true},
		{"[::ffff:10.42.0.17]:9128", true},
		{"[fe80::1]:9128", true},
		{"10.42.0.18:9128", false},
		{"10.42.0.17:8080", false},
		{"192.0.2.1:9128", false},
	}
	for _, tc := range tests {
		if got := o.Reaches(netip.MustParseAddrPort(tc.to)); got != tc.want {
			t.Errorf("Reaches(%s) = %v, want %v", tc.to, got, tc.want)
		}
	}
}

// TestPolicy walks every rule of both moments of the policy.
func TestPolicy(t *testing.T) {
	var own atomic.Pointer[Own]
	own.Store(NewOwn(nil, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 3128}))
	p := Policy{Allow: map[string]bool{"metadata.internal": true, "objects.example:8443": true},
		Named: map[string]bool{"registry.test:5000": true}, DenyUnlisted: true, Own: &own}
	targets := []struct {
		host, port string
		classified bool
		refused    bool
	}{
		{"169.254.169.254", "80", true, true},
		{"0xa9fea9fe", "80", true, true},
		{"registry.test", "5000", true, false},
		{"example.net", "443", false, true}, // deny_unlisted
		{"objects.example", "8443", false, false},
		{"objects.example", "443", false, true}, // host:port allows only that port
		{"METADATA.internal", "1", false, false},
	}
	for _, tc := range targets {
		if got := p.RefuseTarget(tc.host, tc.port, tc.classified) != ""; got != tc.refused {
			t.Errorf("RefuseTarget(%s:%s, %v) refused = %v, want %v", tc.host, tc.port, tc.classified, got, tc.refused)
		}
	}
	dials := []struct {
		host, port, to string
		refused        bool
	}{
		{"registry.test", "5000", "127.0.0.1:5000", false},       // named: loopback allowed
		{"other.test", "5000", "127.0.0.1:5000", true},           // loopback, not named
		{"registry.test", "3128", "127.0.0.1:3128", true},        // the proxy's own port
		{"cdn.test", "443", "169.254.169.254:443", true},         // metadata by resolution
		{"metadata.internal", "80", "169.254.169.254:80", false}, // allow_hosts
		{"cdn.test", "443", "192.0.2.10:443", false},
	}
	for _, tc := range dials {
		err := p.CheckDial(tc.host, tc.port, netip.MustParseAddrPort(tc.to))
		if (err != nil) != tc.refused || (err != nil && !errors.Is(err, ErrForbidden)) {
			t.Errorf("CheckDial(%s:%s → %s) = %v, want refused %v", tc.host, tc.port, tc.to, err, tc.refused)
		}
	}
}
