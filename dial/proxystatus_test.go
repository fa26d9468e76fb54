package dial

import (
	"net/http"
	"testing"
)

// TestProxyStatusError: the error type is read from the list's last member
// (the parent itself), past quoted strings holding commas and semicolons.
func TestProxyStatusError(t *testing.T) {
	for _, tc := range []struct {
		values []string
		want   string
	}{
		{nil, ""},
		{[]string{"squid"}, ""},
		{[]string{"squid; error=connection_refused"}, "connection_refused"},
		{[]string{`squid; details="a, b; error=fake"; error=dns_error; rcode=NXDOMAIN`}, "dns_error"},
		{[]string{"origin-cdn; error=http_response_timeout, corp; error=proxy_internal_error"}, "proxy_internal_error"},
		{[]string{"origin-cdn; error=destination_unavailable", "corp; error=connection_timeout"}, "connection_timeout"},
		{[]string{"corp; error=\"proxy_loop_detected\""}, "proxy_loop_detected"},
		{[]string{"corp; received-status=503"}, ""},
		{[]string{"corp; error=connection_refused, "}, "connection_refused"},
	} {
		h := http.Header{"Proxy-Status": tc.values}
		if got := proxyStatusError(h); got != tc.want {
			t.Errorf("%q: %q, want %q", tc.values, got, tc.want)
		}
	}
	for errType, want := range map[string]Fault{"proxy_internal_error": FaultInternal,
		"proxy_configuration_error": FaultConfig, "proxy_loop_detected": FaultConfig, "connection_refused": ""} {
		if got, _ := parentsOwn(errType); got != want {
			t.Errorf("parentsOwn(%s) = %q, want %q", errType, got, want)
		}
	}
}
