package admin

import (
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestOnLoopback(t *testing.T) {
	for _, c := range []struct {
		addr net.Addr
		want bool
	}{
		{&net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 9128}, true},
		{&net.TCPAddr{IP: net.ParseIP("127.8.9.10"), Port: 9128}, true},
		{&net.TCPAddr{IP: net.ParseIP("::1"), Port: 9128}, true},
		{&net.TCPAddr{IP: net.ParseIP("::ffff:127.0.0.1"), Port: 9128}, true},
		{&net.TCPAddr{IP: net.IPv4zero, Port: 9128}, false},
		{&net.TCPAddr{IP: net.IPv6unspecified, Port: 9128}, false},
		{&net.TCPAddr{Port: 9128}, false}, // ":9128", every interface
		{&net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 9128}, false},
		{&net.TCPAddr{IP: net.ParseIP("fe80::1"), Port: 9128, Zone: "eth0"}, false},
		{&net.UnixAddr{Name: "/run/admin.sock", Net: "unix"}, false},
		{nil, false},
	} {
		if got := OnLoopback(c.addr); got != c.want {
			t.Errorf("OnLoopback(%v) = %v, want %v", c.addr, got, c.want)
		}
	}
}

// TestGuardBrowsers is both rules of docs/behaviour.md §7 at the handler:
// the cross-origin rule on every listener, the Host rule only on a
// loopback one.
func TestGuardBrowsers(t *testing.T) {
	const (
		allowed = http.StatusTeapot // what the wrapped handler answers
		refused = http.StatusForbidden
	)
	inner := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(allowed) })
	for _, c := range []struct {
		name     string
		loopback bool
		method   string
		host     string
		hdr      map[string]string
		want     int
	}{
		{"curl POST", true, "POST", "127.0.0.1:9128", nil, allowed},
		{"cross-site POST", true, "POST", "127.0.0.1:9128", map[string]string{"Sec-Fetch-Site": "cross-site"}, refused},
		{"same-site POST", true, "POST", "127.0.0.1:9128", map[string]string{"Sec-Fetch-Site": "same-site"}, refused},
		{"same-origin POST", true, "POST", "127.0.0.1:9128", map[string]string{"Sec-Fetch-Site": "same-origin"}, allowed},
		{"typed into the address bar", true, "POST", "127.0.0.1:9128", map[string]string{"Sec-Fetch-Site": "none"}, allowed},
		{"foreign Origin POST", true, "POST", "127.0.0.1:9128", map[string]string{"Origin": "https://evil.example"}, refused},
		{"own Origin POST", true, "POST", "127.0.0.1:9128", map[string]string{"Origin": "http://127.0.0.1:9128"}, allowed},
		{"null Origin POST", true, "POST", "127.0.0.1:9128", map[string]string{"Origin": "null"}, refused},
		{"cross-site GET", true, "GET", "127.0.0.1:9128", map[string]string{"Sec-Fetch-Site": "cross-site"}, allowed},
		{"cross-site POST off loopback", false, "POST", "nora.ns.svc:9128", map[string]string{"Sec-Fetch-Site": "cross-site"}, refused},
		{"foreign Origin POST off loopback", false, "POST", "10.1.2.3:9128", map[string]string{"Origin": "https://evil.example"}, refused},

		{"rebound name", true, "GET", "evil.example:9128", nil, refused},
		{"rebound name, no port", true, "GET", "evil.example", nil, refused},
		{"rebound name, same-origin POST", true, "POST", "evil.example:9128", map[string]string{"Sec-Fetch-Site": "same-origin"}, refused},
		{"subdomain of localhost", true, "GET", "evil.localhost:9128", nil, refused},
		{"no Host", true, "GET", "", nil, refused},
		{"localhost", true, "GET", "localhost:9128", nil, allowed},
		{"localhost, fully qualified", true, "GET", "LOCALHOST.:9128", nil, allowed},
		{"IPv4 literal", true, "GET", "127.0.0.1:9128", nil, allowed},
		{"IPv6 literal", true, "GET", "[::1]:9128", nil, allowed},
		{"IPv6 literal, no port", true, "GET", "[::1]", nil, allowed},
		{"another IP literal", true, "GET", "192.0.2.7", nil, allowed},
		{"service name off loopback", false, "GET", "nora-breaker.default.svc:9128", nil, allowed},
		{"pod IP off loopback", false, "GET", "10.1.2.3:9128", nil, allowed},
	} {
		r := httptest.NewRequest(c.method, "/breakers", nil)
		r.Host = c.host
		for k, v := range c.hdr {
			r.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		guardBrowsers(inner, c.loopback).ServeHTTP(w, r)
		if w.Code != c.want {
			t.Errorf("%s: %d, want %d", c.name, w.Code, c.want)
		}
		if w.Code == refused && w.Header().Get("Content-Type") != "application/json" {
			t.Errorf("%s: a refusal of Content-Type %q, want the admin API's JSON", c.name, w.Header().Get("Content-Type"))
		}
	}
}
