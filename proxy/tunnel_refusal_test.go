package proxy

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// TestTunnelRefusalsAreRecorded: the refusals made inside an intercepted
// tunnel before any routing (an HTTP/2 preface without ALPN, a CONNECT in
// the tunnel) get a log line and a count like every other refusal.
func TestTunnelRefusalsAreRecorded(t *testing.T) {
	e := newBiEnv(t)
	for _, tc := range []struct {
		name, payload string
		status        int
	}{
		{"PRI", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", http.StatusHTTPVersionNotSupported},
		{"CONNECT", "CONNECT other.example:443 HTTP/1.1\r\nHost: other.example:443\r\n\r\n", http.StatusMethodNotAllowed},
	} {
		before := testutil.ToFloat64(e.ix.tp.metrics.requests.WithLabelValues("none", "denied"))
		if r := biExchange(t, biTLSInTunnel(t, e), []byte(tc.payload), 5*time.Second); r.status != tc.status {
			t.Fatalf("%s in the tunnel: %d, want %d", tc.name, r.status, tc.status)
		}
		// The log line and the count follow the answer's body, so they
		// may land just after the client has read it.
		logged := func() bool {
			for _, line := range strings.Split(e.ix.tp.Logs.String(), "\n") {
				if strings.Contains(line, `"method":"`+tc.name+`"`) && strings.Contains(line, fmt.Sprintf(`"status":%d`, tc.status)) {
					return true
				}
			}
			return false
		}
		counted := func() bool {
			return testutil.ToFloat64(e.ix.tp.metrics.requests.WithLabelValues("none", "denied")) == before+1
		}
		if !testkit.Poll(5*time.Second, func() bool { return logged() && counted() }) {
			t.Fatalf("%s in the tunnel: logged %v, denied counted %v; log:\n%s", tc.name, logged(), counted(), e.ix.tp.Logs.String())
		}
	}
}
