// Package hostport is the one home of host names and ports: the canonical
// form of a host (lower case, no trailing dot, no IPv6 brackets), the
// default port of a scheme, and the "host:port" and authority forms every
// table, key and dial uses (docs/behaviour.md §3).
package hostport

import (
	"net"
	"net/url"
	"strings"
)

// Host returns h in canonical form: lower case, trailing dots removed (a
// fully qualified "registry.npmjs.org." names the same host), brackets of
// an IPv6 literal removed. Every comparison of host names goes through it,
// so no spelling of a configured host slips past classification,
// interception, breakers, allow_hosts or the stale key.
func Host(h string) string {
	for {
		n := strings.TrimRight(strings.Trim(h, "[]"), ".")
		if n == h {
			return strings.ToLower(h)
		}
		h = n
	}
}

// DefaultPort is the port a URL of scheme reaches when it names none: 80
// for http, 443 for https, "" for anything else.
func DefaultPort(scheme string) string {
	switch strings.ToLower(scheme) {
	case "http":
		return "80"
	case "https":
		return "443"
	}
	return ""
}

// Of returns u's canonical host and its port, defaulted by its scheme.
func Of(u *url.URL) (host, port string) {
	port = u.Port()
	if port == "" {
		port = DefaultPort(u.Scheme)
	}
	return Host(u.Hostname()), port
}

// Join is the canonical "host:port" (an IPv6 host bracketed).
func Join(host, port string) string { return net.JoinHostPort(Host(host), port) }

// Split splits "host:port" into its canonical host and its port; def is
// the port of an address that names none ("" refuses such an address).
func Split(hp, def string) (host, port string, err error) {
	h, p, err := net.SplitHostPort(hp)
	if err != nil {
		if def == "" || strings.Contains(strings.Trim(hp, "[]"), ":") && !strings.HasPrefix(hp, "[") {
			return "", "", err
		}
		h, p = hp, def
	}
	return Host(h), p, nil
}

// Authority is how keys and logs write a host: the canonical host alone on
// its scheme's default port, else host:port.
func Authority(scheme, host, port string) string {
	if port == "" || port == DefaultPort(scheme) {
		if strings.Contains(Host(host), ":") {
			return "[" + Host(host) + "]"
		}
		return Host(host)
	}
	return Join(host, port)
}

// Origin is "scheme://authority" in canonical form: two URLs reach the same
// server exactly when their origins are equal.
func Origin(scheme, host, port string) string {
	return strings.ToLower(scheme) + "://" + Authority(scheme, host, port)
}
