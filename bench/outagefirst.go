package main

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The outage rows of issue 25: what the first failure_threshold requests
// of an outage wait, which the breaker cannot spare since it learns the
// outage from them. Two outages, each measured with hedging and early
// opening on and with both off (the proxy as it was, whose first requests
// waited out proxy_timeout):
//   - a black hole with a healthy mirror: npm's proxies are the black-holed
//     listener and the upstream under /npm-mirror; goal: hedge_after plus
//     the mirror's own latency;
//   - a black hole that is the only upstream, with a stale copy of what is
//     asked: npm's proxy is the upstream under /switched, which answers
//     while the copy is kept and is then switched into a black hole; goal:
//     suspect_after plus a stale read.
//
// The mirror's own latency and the stale read are measured the same way,
// on a fresh proxy with the same 16 connections starting at once: the
// first requests' wait when the mirror is the upstream asked, and when the
// breaker is open from the start so that every request gets the copy.
// First requests pay for new connections, the second half of a run does
// not, so only first requests are compared with first requests.

const (
	firstThreshold    = 5 // failure_threshold of the bench's configuration
	benchHedgeAfter   = 250 * time.Millisecond
	benchSuspectAfter = 500 * time.Millisecond
	firstConns        = 16
)

// firstWaits is what one run measured: the first requests' waits, p50 and
// max, in seconds.
type firstWaits struct{ p50, max float64 }

// firstVariant is one way of running a scenario.
type firstVariant int

const (
	variantOff      firstVariant = iota // hedging and early opening off: as before
	variantOn                           // both on
	variantBaseline                     // the mirror alone, or the copy at once
)

// firstScenario is one outage of the rows.
type firstScenario struct {
	name, section, baseName, goalName string
	goalBase                          time.Duration
	// setup is the configuration of a variant, how to prepare the proxy
	// (nil: nothing) and the URL asked.
	setup func(v firstVariant, tag string) (noraExtra, func(*nora) error, string)
}

// outageFirst measures both outages and adds their rows.
func outageFirst(e *env, rep *report) error {
	requests := max(e.opts.outageRequests/5, 4*firstConns)
	timeout := int(outageTimeout / time.Second)
	mirror := firstScenario{name: "mirror", section: "outage: black hole + healthy mirror",
		baseName: "the mirror's own latency", goalName: "hedge_after", goalBase: benchHedgeAfter,
		setup: func(v firstVariant, _ string) (noraExtra, func(*nora) error, string) {
			if v == variantBaseline {
				return noraExtra{npm: fmt.Sprintf("proxy = \"http://%s/npm-mirror\"\nproxy_timeout = %d\n",
					loop(e.upHTTP), timeout)}, nil, "http://" + loop(e.upHTTP) + "/npm-mirror/left-pad"
			}
			hedge := 0.0
			if v == variantOn {
				hedge = benchHedgeAfter.Seconds()
			}
			return noraExtra{breaker: suspectLine(v == variantOn), npm: fmt.Sprintf(
				"proxies = [\"http://%s\", \"http://%s/npm-mirror\"]\nproxy_timeout = %d\nhedge_after = %g\n",
				loop(e.upHole), loop(e.upHTTP), timeout, hedge)}, nil, e.holeURL()
		}}
	stale := firstScenario{name: "stale", section: "outage: single upstream black hole + stale copies",
		baseName: "a stale read", goalName: "suspect_after", goalBase: benchSuspectAfter,
		setup: func(v firstVariant, tag string) (noraExtra, func(*nora) error, string) {
			base := "http://" + loop(e.upHTTP) + "/switched"
			x := noraExtra{breaker: suspectLine(v == variantOn),
				sidecar: fmt.Sprintf("stale_dir = %q\n", filepath.Join(e.dir, "stale-"+tag)),
				npm:     fmt.Sprintf("proxy = %q\nproxy_timeout = %d\n", base, timeout)}
			prepare := e.keepCopyThenSwitch
			if v == variantBaseline {
				prepare = func(n *nora) error {
					if err := e.keepCopyThenSwitch(n); err != nil {
						return err
					}
					return n.force("npm:"+base, "open")
				}
			}
			return x, prepare, base + "/left-pad"
		}}
	for _, sc := range []firstScenario{mirror, stale} {
		if err := e.firstRows(sc, requests, rep); err != nil {
			return err
		}
	}
	return nil
}

// firstRows measures every variant of sc over the rounds and adds its rows.
func (e *env) firstRows(sc firstScenario, requests int, rep *report) error {
	p50, mx := map[firstVariant][]float64{}, map[firstVariant][]float64{}
	names := map[firstVariant]string{variantOff: "off", variantOn: "on", variantBaseline: "baseline"}
	for r := range e.opts.outageRounds {
		for _, v := range []firstVariant{variantOff, variantOn, variantBaseline} {
			tag := fmt.Sprintf("first-%s-%s-%d", sc.name, names[v], r)
			extra, prepare, url := sc.setup(v, tag)
			w, err := e.firstRun(tag, extra, prepare, url, requests)
			if err != nil {
				return err
			}
			p50[v], mx[v] = append(p50[v], w.p50), append(mx[v], w.max)
			fmt.Fprintf(os.Stderr, "bench: outage %s, %s, round %d: the first %d requests waited p50 %s, max %s\n",
				sc.name, names[v], r+1, firstThreshold, format(unitDur, w.p50), format(unitDur, w.max))
		}
	}
	before := "nora-breaker, hedging and early opening off (as before)"
	if sc.name == "stale" {
		before = "nora-breaker, early opening off (as before)"
	}
	for _, f := range []struct {
		name string
		vals map[firstVariant][]float64
	}{{"p50", p50}, {"max", mx}} {
		figure := fmt.Sprintf("first %d requests' wait, %s", firstThreshold, f.name)
		base := median(f.vals[variantBaseline])
		goal := sc.goalBase.Seconds() + base
		on := median(f.vals[variantOn])
		rep.add(
			row{section: sc.section, target: before, figure: figure, unit: unitDur, value: median(f.vals[variantOff])},
			row{section: sc.section, target: "nora-breaker", figure: figure, unit: unitDur, value: on,
				goal: fmt.Sprintf("≤ %s + %s (%s) = %s", sc.goalName, sc.baseName, format(unitDur, base), format(unitDur, goal)),
				met:  verdict(on <= goal)})
	}
	return nil
}

// suspectLine is the [circuit_breaker] line that turns early opening on
// (the bench's suspect_after) or off.
func suspectLine(on bool) string {
	if on {
		return fmt.Sprintf("suspect_after = %g\n", benchSuspectAfter.Seconds())
	}
	return "suspect_after = 0\n"
}

// firstRun starts a fresh proxy (its breaker closed, no history), lets
// prepare set the outage up, sends requests over firstConns connections,
// and reads the waits off the run's trace.
func (e *env) firstRun(tag string, extra noraExtra, prepare func(*nora) error, url string, requests int) (firstWaits, error) {
	n, err := e.startNoraWith(tag, 0, extra)
	if err != nil {
		return firstWaits{}, err
	}
	defer e.stopNora(n)
	if prepare != nil {
		if err := prepare(n); err != nil {
			return firstWaits{}, err
		}
		defer e.switchHole(false)
	}
	tr := &trace{}
	res := runLoad(loadSpec{client: newClient(clientOpts{conns: firstConns, proxy: n.url(), timeout: 30 * time.Second}),
		url: url, conns: firstConns, duration: 5 * time.Minute, requests: requests, want: 200, trace: tr})
	if res.bad > 0 {
		return firstWaits{}, fmt.Errorf("outage %s: %d of %d requests failed (first: %s)", tag, res.bad, res.requests, res.firstErr)
	}
	pts := append([]tracePoint(nil), tr.points...)
	sort.Slice(pts, func(i, j int) bool { return pts[i].at < pts[j].at })
	first := make([]float64, 0, firstThreshold)
	for _, p := range pts[:firstThreshold] {
		first = append(first, p.latency.Seconds())
	}
	sort.Float64s(first)
	return firstWaits{p50: median(first), max: first[len(first)-1]}, nil
}

// keepCopyThenSwitch has the proxy keep a stale copy of the stale
// scenario's URL while the upstream still answers, then switches the
// upstream into a black hole.
func (e *env) keepCopyThenSwitch(n *nora) error {
	if err := e.switchHole(false); err != nil {
		return err
	}
	c := newClient(clientOpts{conns: 1, proxy: n.url(), timeout: 10 * time.Second})
	if status, err := fetch(c, "http://"+loop(e.upHTTP)+"/switched/left-pad"); err != nil || status != 200 {
		return fmt.Errorf("keeping the stale copy: status %d, %v", status, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		v, err := n.metric("nora_sidecar_stale_cache_objects")
		if err != nil {
			return err
		}
		if v >= 1 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the stale copy was never kept")
		}
		time.Sleep(20 * time.Millisecond) // polling the proxy's metrics for the commit
	}
	return e.switchHole(true)
}

// metric reads one unlabelled figure off the proxy's /metrics.
func (n *nora) metric(name string) (float64, error) {
	resp, err := http.Get("http://" + n.admin + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, sc.Err()
}
