package config

import (
	"net"
	"net/textproto"
	"slices"
	"strconv"
	"strings"

	"github.com/rs/zerolog"
	"golang.org/x/net/http/httpguts"
)

// validateSidecar checks the merged [sidecar] values and normalises host
// lists to lower case. Problems point at wherever the value was set. It
// returns the parent settings parsed, which Load applies to the upstreams.
func validateSidecar(s *Sidecar, from map[string]origin, probs *problems) (parentTable, NoProxy) {
	at := func(key string) origin {
		if o, ok := from[key]; ok {
			return o
		}
		return origin{source: "default", key: "sidecar." + key}
	}
	for _, key := range []string{"listen", "admin_listen"} {
		addr := s.Listen
		if key == "admin_listen" {
			addr = s.AdminListen
		}
		if _, _, err := splitHostPort(addr, true); err != "" {
			probs.add(at(key).errorf("must be host:port: %s", err))
		}
	}
	if listenersCollide(s.Listen, s.AdminListen) {
		probs.add(at("admin_listen").errorf("must not take the port of listen (%s): the proxy could not bind both", s.Listen))
	}
	if !headerCarries(s.AdminToken) {
		probs.add(at("admin_token").errorf("no Authorization header can carry it: it begins or ends with white space (a file or Secret written with a trailing newline?) or holds a control character"))
	}
	if (s.CACert == "") != (s.CAKey == "") {
		key := "ca_cert"
		if s.CACert == "" {
			key = "ca_key"
		}
		probs.add(at(key).errorf("ca_cert and ca_key must be set together"))
	}
	for _, c := range []struct {
		key, value string
		allowed    []string
	}{
		{"stale_authenticated", s.StaleAuthenticated, []string{"off", "isolate", "share"}},
		{"log_format", s.LogFormat, []string{"json", "console"}},
	} {
		if !contains(c.allowed, c.value) {
			probs.add(at(c.key).errorf("must be one of %s (got %q)", strings.Join(c.allowed, ", "), c.value))
		}
	}
	if s.LogRefusals != "summary" && s.LogRefusals != "every" {
		probs.add(at("log_refusals").errorf("must be summary or every (got %q)", s.LogRefusals))
	}
	if _, err := zerolog.ParseLevel(s.LogLevel); err != nil || s.LogLevel == "" {
		probs.add(at("log_level").errorf("must be trace, debug, info, warn, error, fatal, panic or disabled (got %q)", s.LogLevel))
	}
	if s.StaleMaxObjectBytes > s.StaleMaxBytes {
		probs.add(at("stale_max_object_bytes").errorf("must not exceed stale_max_bytes (%d)", s.StaleMaxBytes))
	}
	for i, h := range s.AllowHosts {
		s.AllowHosts[i] = CanonicalHostSpec(h)
		if !validAllowHost(s.AllowHosts[i]) {
			probs.add(at("allow_hosts").errorf("entry %q must be a host or host:port", h))
		}
	}
	for i, h := range s.CredentialHeaders {
		name := strings.TrimSpace(h)
		if name == "" || !httpguts.ValidHeaderFieldName(name) {
			probs.add(at("credential_headers").errorf("entry %q is not a header name", h))
			continue
		}
		s.CredentialHeaders[i] = textproto.CanonicalMIMEHeaderKey(name)
	}
	s.CredentialHeaders = withDefaultCredentialHeaders(s.CredentialHeaders)
	validateHostLists("aliases", "alias", s.Aliases, at, probs)
	validateHostLists("equivalents", "equivalent host", s.Equivalents, at, probs)
	validateResolve(s.Resolve, at, probs)
	validateSharedState(s, at, probs)
	return validateParents(s, at, probs)
}

// validateHostLists checks and lower-cases the hosts of table
// ([sidecar.aliases], [sidecar.equivalents]); what names one in a problem.
func validateHostLists(table, what string, lists map[string][]string, at func(string) origin, probs *problems) {
	for k, hosts := range lists {
		for i, h := range hosts {
			hosts[i] = CanonicalHostSpec(h)
			if !validAllowHost(hosts[i]) {
				probs.add(at(table+"."+k).errorf("%s %q must be a host name or host:port, without scheme or path", what, h))
			}
		}
	}
}

// validateResolve checks both sides of each dial override and lower-cases
// the host side, because requests are matched case-insensitively.
func validateResolve(resolve map[string]string, at func(string) origin, probs *problems) {
	for k, addr := range resolve {
		host, _, err := splitHostPort(k, false)
		if err == "" && !validHostname(host) {
			err = "bad host"
		}
		if err != "" {
			probs.add(at("resolve."+k).errorf("key %q must be host:port: %s", k, err))
			continue
		}
		ip, _, err := splitHostPort(addr, false)
		if err == "" && net.ParseIP(ip) == nil {
			err = "not an IP address"
		}
		if err != "" {
			probs.add(at("resolve."+k).errorf("target %q must be ip:port: %s", addr, err))
			continue
		}
		if canon := CanonicalHostSpec(k); canon != k {
			delete(resolve, k)
			resolve[canon] = addr
		}
	}
}

// splitHostPort splits addr and checks the port; a listener may use port 0
// and an empty host (all interfaces), a dial target may not.
func splitHostPort(addr string, listen bool) (host string, port int, problem string) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, strings.TrimPrefix(err.Error(), "address "+addr+": ")
	}
	n, err := strconv.Atoi(p)
	min := 1
	if listen {
		min = 0
	}
	if err != nil || n < min || n > 65535 {
		return "", 0, "bad port " + strconv.Quote(p)
	}
	if h == "" && !listen {
		return "", 0, "missing host"
	}
	return h, n, ""
}

// listenersCollide reports whether two listen addresses would fight over
// one socket: the same fixed port on the same host, or on a wildcard host
// (empty, 0.0.0.0, ::), which takes the port on every address. Port 0
// twice is fine: the kernel gives each listener its own port. Invalid
// addresses are reported elsewhere.
func listenersCollide(a, b string) bool {
	ha, pa, errA := splitHostPort(a, true)
	hb, pb, errB := splitHostPort(b, true)
	if errA != "" || errB != "" || pa == 0 || pa != pb {
		return false
	}
	return strings.EqualFold(ha, hb) || isWildcardHost(ha) || isWildcardHost(hb)
}

func isWildcardHost(h string) bool {
	ip := net.ParseIP(h)
	return h == "" || (ip != nil && ip.IsUnspecified())
}

func validAllowHost(h string) bool {
	if strings.Contains(h, ":") && !strings.HasPrefix(h, "[") && net.ParseIP(h) == nil {
		host, _, err := splitHostPort(h, false)
		return err == "" && validHostname(host)
	}
	if strings.HasPrefix(h, "[") {
		host, _, err := splitHostPort(h, false)
		return err == "" && net.ParseIP(host) != nil
	}
	return validHostname(h)
}

// validHostname accepts DNS names and IP literals; nothing with a scheme,
// port, path, space or credentials.
func validHostname(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	if net.ParseIP(h) != nil {
		return true
	}
	for _, r := range h {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '_') {
			return false
		}
	}
	return true
}

// isLoopbackListen reports whether a listener only accepts local clients.
func isLoopbackListen(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return true // invalid; reported elsewhere
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func contains(list []string, v string) bool {
	for _, s := range list {
		if s == v {
			return true
		}
	}
	return false
}

// defaultCredentialHeaders are the headers that carry credentials besides
// Authorization and Cookie whatever credential_headers says
// (docs/behaviour.md §10).
func defaultCredentialHeaders() []string {
	return []string{"Private-Token", "Job-Token", "Deploy-Token", "X-Api-Key", "X-Jfrog-Art-Api",
		"X-Nuget-Apikey", "X-Auth-Token"}
}

// withDefaultCredentialHeaders is the configured credential_headers after
// the defaults, each name once: a list an operator sets adds to the
// defaults, so naming a registry's own token header never makes the proxy
// hand a GitLab Private-Token to the next upstream.
func withDefaultCredentialHeaders(configured []string) []string {
	out := defaultCredentialHeaders()
	for _, h := range configured {
		if !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	return out
}

// headerCarries reports whether a client can send token in a header and
// have it arrive as it is: header values lose white space at either end
// and cannot hold control characters other than a tab (RFC 9110 §5.5).
func headerCarries(token string) bool {
	if strings.Trim(token, " \t\r\n") != token {
		return false
	}
	for i := 0; i < len(token); i++ {
		if c := token[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}
