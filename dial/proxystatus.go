package dial

import (
	"net/http"
	"strings"
)

// proxyStatusError is the error type a parent proxy named in its
// Proxy-Status header (RFC 9209), or "". The header is a list with one
// member per intermediary, the one nearest the client last: that is the
// parent itself, since nothing stands between it and us.
func proxyStatusError(h http.Header) string {
	values := h.Values("Proxy-Status")
	if len(values) == 0 {
		return ""
	}
	members := splitOutsideQuotes(strings.Join(values, ","), ',')
	last := ""
	for i := len(members) - 1; i >= 0; i-- {
		if last = strings.TrimSpace(members[i]); last != "" {
			break
		}
	}
	params := splitOutsideQuotes(last, ';')
	for _, p := range params[min(1, len(params)):] {
		name, value, ok := strings.Cut(strings.TrimSpace(p), "=")
		if ok && strings.TrimSpace(name) == "error" {
			return strings.Trim(strings.TrimSpace(value), `"`)
		}
	}
	return ""
}

// parentsOwn sorts the error types of RFC 9209 §2.3 that name the
// intermediary itself rather than the next hop: the parent's internal
// error is its failure, and its configuration or a loop is an operator's
// to fix. Every other type (DNS, connection, TLS, HTTP errors of the next
// hop) is about the upstream.
func parentsOwn(errType string) (Fault, bool) {
	switch errType {
	case "proxy_internal_error":
		return FaultInternal, true
	case "proxy_configuration_error", "proxy_loop_detected":
		return FaultConfig, true
	}
	return "", false
}

// splitOutsideQuotes splits s at each sep that is not inside a
// double-quoted string (a structured field's sf-string, with \" escapes).
func splitOutsideQuotes(s string, sep byte) []string {
	var out []string
	start, quoted := 0, false
	for i := 0; i < len(s); i++ {
		switch {
		case quoted && s[i] == '\\':
			i++
		case s[i] == '"':
			quoted = !quoted
		case !quoted && s[i] == sep:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}
