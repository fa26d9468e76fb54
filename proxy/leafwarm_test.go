package proxy

import (
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// TestUpstreamLeavesAreSignedAhead: the leaves of the configured upstream
// hosts are cut at start, so the first intercepted client of each pays no
// signature (issue 23, point 4).
func TestUpstreamLeavesAreSignedAhead(t *testing.T) {
	ix := newIxIntercept(t, func(w http.ResponseWriter, r *http.Request) {})
	// The maven upstream's one host (127.0.0.1:port).
	testkit.PollUntil(t, 10*time.Second, func() bool { return testutil.ToFloat64(ix.tp.metrics.leaves) == 1 })
	if n := ix.tp.interceptor.Leaves.Len(); n != 1 {
		t.Fatalf("%d leaves cached, want the upstream host's", n)
	}
	c := ix.client(t, false)
	if resp, _ := request(t, c, "GET", ix.up.URL+"/maven2/x", nil); resp == nil {
		t.Fatal("no answer")
	}
	if n := testutil.ToFloat64(ix.tp.metrics.leaves); n != 1 {
		t.Fatalf("the first client of a configured host made the CA sign again (%v leaves)", n)
	}
}
