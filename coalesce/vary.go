package coalesce

import (
	"net/http"
	"strings"
)

// sameVariant reports whether an answer made for a request with headers
// asked may also answer one with headers other: every request header the
// answer's Vary names has the same values in both. An answer that varies
// by everything ("Vary: *") answers only the request it was made for. An
// answer marked private (Cache-Control: private) needs nothing more: every
// request that shares a fetch has the same credentials (Key).
func sameVariant(answer, asked, other http.Header) bool {
	for _, v := range answer.Values("Vary") {
		for name := range strings.SplitSeq(v, ",") {
			name = strings.TrimSpace(name)
			switch {
			case name == "":
			case name == "*":
				return false
			case asList(asked.Values(name)) != asList(other.Values(name)):
				return false
			}
		}
	}
	return true
}

// asList is the values of one header field as one comma-separated list, so
// a field sent as several lines compares equal to the same field sent as
// one.
func asList(vv []string) string {
	var parts []string
	for _, v := range vv {
		for p := range strings.SplitSeq(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				parts = append(parts, p)
			}
		}
	}
	return strings.Join(parts, ",")
}
