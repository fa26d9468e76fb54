package stale

import (
	"net/http"
	"strings"
)

// What a stale answer of a docker registry needs to read and write: the
// parameters of an authentication challenge, and whether an Accept list
// admits a media type.

// withScope is a WWW-Authenticate challenge with its scope replaced by
// scope (removed when scope is ""). Only a Bearer challenge has a scope;
// any other (Basic) is returned as it is.
func withScope(challenge, scope string) string {
	scheme, params, _ := strings.Cut(strings.TrimSpace(challenge), " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return challenge
	}
	var b strings.Builder
	b.WriteString(scheme)
	sep := " "
	for _, p := range splitParams(params) {
		if strings.EqualFold(p.name, "scope") {
			continue
		}
		b.WriteString(sep + p.name + "=" + quote(p.value))
		sep = ","
	}
	if scope != "" {
		b.WriteString(sep + "scope=" + quote(scope))
	}
	return b.String()
}

// authParam is one name=value of a challenge.
type authParam struct{ name, value string }

// splitParams splits a challenge's parameters (RFC 9110 §11.2): names,
// and values that are tokens or quoted strings (which may hold commas).
func splitParams(s string) []authParam {
	var out []authParam
	for {
		s = strings.TrimLeft(s, " \t,")
		eq := strings.IndexByte(s, '=')
		if eq <= 0 {
			return out
		}
		p := authParam{name: strings.TrimSpace(s[:eq])}
		s = strings.TrimLeft(s[eq+1:], " \t")
		if strings.HasPrefix(s, `"`) {
			var v strings.Builder
			i := 1
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				v.WriteByte(s[i])
			}
			p.value, s = v.String(), s[min(i+1, len(s)):]
		} else {
			end := strings.IndexByte(s, ',')
			if end < 0 {
				end = len(s)
			}
			p.value, s = strings.TrimSpace(s[:end]), s[end:]
		}
		out = append(out, p)
	}
}

// quote makes v a quoted string.
func quote(v string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(v) + `"`
}

// acceptsMedia reports whether an Accept header in h admits the media type
// of contentType: named exactly, by "type/*" or by "*/*", with a q-value
// above zero. A request without Accept admits any.
func acceptsMedia(h http.Header, contentType string) bool {
	values := h.Values("Accept")
	if len(values) == 0 {
		return true
	}
	mt, _, _ := strings.Cut(contentType, ";")
	mt = strings.ToLower(strings.TrimSpace(mt))
	typ, _, _ := strings.Cut(mt, "/")
	for _, v := range values {
		for item := range strings.SplitSeq(v, ",") {
			name, params, _ := strings.Cut(strings.TrimSpace(item), ";")
			name = strings.ToLower(strings.TrimSpace(name))
			if qIsZero(params) || mt == "" && name != "*/*" {
				continue
			}
			if name == mt || name == "*/*" || name == typ+"/*" {
				return true
			}
		}
	}
	return false
}
