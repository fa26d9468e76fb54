package proxy

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// TestRefusalLinesAreSummarised: during an outage the refusals of one key
// are logged as the first in full, then one line a second saying how many
// were left out, while the metric counts every one (issue 23, point 3: 2,000
// lines a second at warn, even with log_level = "warn"); log_refusals =
// "every" logs each.
func TestRefusalLinesAreSummarised(t *testing.T) {
	for _, every := range []bool{false, true} {
		t.Run(fmt.Sprintf("every=%v", every), func(t *testing.T) {
			up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {})
			extra := ""
			if every {
				extra = "[sidecar]\nlog_refusals = \"every\"\n"
			}
			tp := newTestProxy(t, ixMaven(up.URL, true, extra), nil)
			fbForceOpen(t, tp, ixKey(up.URL))
			c := proxyClient(t, tp, nil)
			// A request is logged just after its answer was sent, and
			// counted just after it was logged: the clock moves on once the
			// 50 are counted, and the lines are read once all 51 are.
			counted := func(n float64) func() bool {
				return func() bool {
					return testutil.ToFloat64(tp.metrics.requests.WithLabelValues("maven", "synthesized_503")) >= n
				}
			}
			for range 50 {
				request(t, c, "GET", up.URL+"/maven2/g/a/1/a-1.jar", nil)
			}
			testkit.PollUntil(t, 5*time.Second, counted(50))
			tp.Clock.Advance(time.Second)
			request(t, c, "GET", up.URL+"/maven2/g/a/1/a-1.jar", nil)
			testkit.PollUntil(t, 5*time.Second, counted(51))
			var lines []map[string]any
			for _, l := range ixRequestLines(t, tp.Logs.String()) {
				if l["result"] == "synthesized_503" {
					lines = append(lines, l)
				}
			}
			if every {
				if len(lines) != 51 {
					t.Fatalf("%d lines for 51 refusals with log_refusals = every", len(lines))
				}
			} else {
				if len(lines) != 2 || lines[0]["suppressed_before"] != nil || lines[1]["suppressed_before"] != float64(49) {
					t.Fatalf("lines %v, want the first in full and one a second later saying 49 were left out", lines)
				}
			}
			if n := testutil.ToFloat64(tp.metrics.requests.WithLabelValues("maven", "synthesized_503")); n != 51 {
				t.Fatalf("metric counted %v refusals, want every one (51)", n)
			}
		})
	}
}
