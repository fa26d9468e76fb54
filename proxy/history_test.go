package proxy

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/internal/adminapi"
)

// TestBreakersHistoryEndpoint drives one breaker through threshold, a
// failed probe, a force and a release, and reads GET /breakers/history.
func TestBreakersHistoryEndpoint(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {})
	dead := "http://" + closedPort(t)
	tp := newTestProxy(t, ixTwoMaven(up.URL, dead, ""), nil)
	deadKey, npm := "maven:"+dead+"/m2", "npm:"+up.URL+"/npm"
	c := proxyClient(t, tp, nil)
	for range 7 { // the dead upstream's threshold is 7 (ixTwoMaven's override)
		request(t, c, "GET", dead+"/m2/a.pom", nil)
	}
	tp.Clock.Advance(11 * time.Second)
	request(t, c, "GET", dead+"/m2/a.pom", nil) // the probe, refused again
	ixAdmin(t, tp, "POST", "/breakers/force?key="+npm+"&state=open", "")
	if resp, body := ixAdmin(t, tp, "POST", "/breakers/force?key="+npm+"&state=auto", ""); resp.StatusCode != 200 {
		t.Fatalf("release: %d %s", resp.StatusCode, body)
	}
	resp, body := ixAdmin(t, tp, "GET", "/breakers/history", "")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("/breakers/history: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var hist []adminapi.Transition
	if err := json.Unmarshal([]byte(body), &hist); err != nil {
		t.Fatal(err)
	}
	type step struct{ key, from, to, why string }
	want := []step{
		{npm, "open", "closed", "forced"},
		{npm, "closed", "open", "forced"},
		{deadKey, "half_open", "open", "probe failed"},
		{deadKey, "open", "half_open", "probe due"},
		{deadKey, "closed", "open", "threshold reached"},
	}
	if len(hist) != len(want) {
		t.Fatalf("history %s", body)
	}
	for i, w := range want {
		if got := (step{hist[i].Key, hist[i].From, hist[i].To, hist[i].Why}); got != w {
			t.Errorf("entry %d: %+v, want %+v", i, got, w)
		}
	}
	if !hist[4].At.Equal(tp.Clock.Now().Add(-11*time.Second)) || hist[4].FailureCount != 7 {
		t.Errorf("threshold entry: at %v count %d", hist[4].At, hist[4].FailureCount)
	}
}
