package proxy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/breakerstate"
)

func TestTransitionLogKeepsTheNewestInOrder(t *testing.T) {
	var l transitionLog
	if got := l.list(); len(got) != 0 {
		t.Fatalf("zero value holds %d entries", len(got))
	}
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for i := range historySize + 50 {
		l.add(historyEntry{At: t0.Add(time.Duration(i) * time.Second), Key: fmt.Sprint(i)})
	}
	got := l.list()
	if len(got) != historySize {
		t.Fatalf("%d entries, want %d", len(got), historySize)
	}
	if got[0].Key != fmt.Sprint(historySize+49) || got[historySize-1].Key != "50" {
		t.Fatalf("newest %s, oldest %s; want %d and 50", got[0].Key, got[historySize-1].Key, historySize+49)
	}
	// Transitions that reached the hook out of order are shown by time.
	l.add(historyEntry{At: t0.Add(time.Hour), Key: "late-but-newer"})
	l.add(historyEntry{At: t0.Add(time.Hour - time.Second), Key: "earlier"})
	if got := l.list(); got[0].Key != "late-but-newer" || got[1].Key != "earlier" {
		t.Fatalf("not ordered by time: %s, %s", got[0].Key, got[1].Key)
	}
}

// TestTransitionLogConcurrent runs writers and readers at once (go test
// -race): every list is a consistent copy of at most historySize entries,
// and each writer's entries stay in its own order.
func TestTransitionLogConcurrent(t *testing.T) {
	var l transitionLog
	const writers, each = 16, 500
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for range 4 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if got := l.list(); len(got) > historySize {
					t.Errorf("list returned %d entries", len(got))
					return
				}
			}
		}()
	}
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				l.add(historyEntry{At: t0.Add(time.Duration(i) * time.Millisecond), Key: fmt.Sprint(w),
					FailureCount: i})
			}
		}()
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	got := l.list()
	if len(got) != historySize {
		t.Fatalf("%d entries after %d adds", len(got), writers*each)
	}
	last := map[string]int{}
	for i := len(got) - 1; i >= 0; i-- { // oldest first
		e := got[i]
		if prev, ok := last[e.Key]; ok && e.FailureCount <= prev {
			t.Fatalf("writer %s: entry %d after %d", e.Key, e.FailureCount, prev)
		}
		last[e.Key] = e.FailureCount
	}
}

func TestTransitionWhy(t *testing.T) {
	c, o, h := breakerstate.Closed, breakerstate.Open, breakerstate.HalfOpen
	for _, tc := range []struct {
		tr   breakerstate.Transition
		want string
	}{
		{breakerstate.Transition{From: c, To: o}, "threshold reached"},
		{breakerstate.Transition{From: h, To: o}, "probe failed"},
		{breakerstate.Transition{From: h, To: c}, "probe succeeded"},
		{breakerstate.Transition{From: o, To: h}, "probe due"},
		{breakerstate.Transition{From: o, To: c}, "success of a request admitted before the opening"},
		{breakerstate.Transition{From: c, To: o, Manual: true}, "forced"},
		{breakerstate.Transition{From: o, To: c, Manual: true}, "forced"},
		{breakerstate.Transition{From: c, To: o, Remote: true}, "fleet"},
		{breakerstate.Transition{From: c, To: h}, "closed → half_open"},
	} {
		if got := transitionWhy(tc.tr); got != tc.want {
			t.Errorf("%v → %v manual=%v remote=%v: %q, want %q", tc.tr.From, tc.tr.To, tc.tr.Manual, tc.tr.Remote, got, tc.want)
		}
	}
}

// TestBreakersHistoryEndpoint drives one breaker through threshold, a
// failed probe, a force and a release, and reads GET /breakers/history.
func TestBreakersHistoryEndpoint(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {})
	dead := "http://" + closedPort(t)
	tp := newTestProxy(t, ixTwoMaven(up.URL, dead, ""), nil)
	deadKey, npm := "maven:"+dead+"/m2", "npm:"+up.URL+"/npm"
	c := proxyClient(t, tp, nil)
	for range 7 { // the dead upstream's threshold is 7 (ixTwoMaven's override)
		ixDo(t, c, "GET", dead+"/m2/a.pom", nil)
	}
	tp.Clock.Advance(11 * time.Second)
	ixDo(t, c, "GET", dead+"/m2/a.pom", nil) // the probe, refused again
	ixAdmin(t, tp, "POST", "/breakers/force?key="+npm+"&state=open", "")
	if resp, body := ixAdmin(t, tp, "POST", "/breakers/force?key="+npm+"&state=auto", ""); resp.StatusCode != 200 {
		t.Fatalf("release: %d %s", resp.StatusCode, body)
	}
	resp, body := ixAdmin(t, tp, "GET", "/breakers/history", "")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("/breakers/history: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var hist []historyEntry
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
