package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// syntheticOutage is what an outage run looks like: direct, every request
// waits the 1 s timeout; through the proxy the first 16 do, then the rest
// are answered in a fraction of a millisecond.
func syntheticOutage() (direct, proxied *trace, marks []outageMark) {
	direct, proxied = &trace{}, &trace{}
	for i := range 160 {
		direct.points = append(direct.points, tracePoint{at: time.Duration(i/16) * time.Second, latency: time.Second})
	}
	for i := range 16 {
		proxied.points = append(proxied.points, tracePoint{at: time.Duration(i) * time.Millisecond,
			latency: time.Second, status: 504})
	}
	for i := range 144 {
		proxied.points = append(proxied.points, tracePoint{at: time.Second + time.Duration(i)*200*time.Microsecond,
			latency: 300 * time.Microsecond, status: 503})
	}
	return direct, proxied, []outageMark{{at: time.Second, label: "closed → open (threshold reached)"},
		{at: time.Second + 10*time.Millisecond, label: "open → half_open (probe due)"}}
}

func TestDrawOutageWritesAnSVG(t *testing.T) {
	direct, proxied, marks := syntheticOutage()
	path := filepath.Join(t.TempDir(), "outage.svg")
	if err := drawOutage(path, direct, proxied, marks, time.Second); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	svg := string(b)
	for _, want := range []string{"<svg", "direct: 160 requests, done after 10.0 s", "through nora-breaker: done after 1.03 s",
		"waited out a timeout (160)", "waited out a timeout (16)", "answered at once (144)",
		"closed → open (threshold reached)", "through nora-breaker were all done here"} {
		if !strings.Contains(svg, want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
}

func TestTraceSpan(t *testing.T) {
	tr := &trace{}
	tr.add([]tracePoint{{at: time.Second, latency: 2 * time.Second}, {at: 4 * time.Second, latency: time.Millisecond}})
	if got := tr.span(); got != 4*time.Second+time.Millisecond {
		t.Fatalf("span %v", got)
	}
}
