package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// outageTimeout is how long a direct client waits before it gives up, and
// the npm upstream's proxy_timeout in the proxy's config (configs.go): the
// same bound on both sides of the comparison.
const outageTimeout = time.Second

// outageCost: N requests over 16 connections to an upstream that accepts
// and never answers. Direct clients give up after outageTimeout (the proxy's
// proxy_timeout too); through nora-breaker the in-flight requests
// time out once, the breaker opens, and the rest are answered at once.
// Every proxy round uses a fresh nora-breaker so its breaker starts closed.
// The first round's requests, and the proxy's breaker transitions, are
// drawn as an SVG (outageplot.go).
func outageCost(e *env, rep *report) error {
	const conns = 16
	wall, reached := series{}, series{}
	traces := map[string]*trace{"direct": {}, "nora-breaker": {}}
	var marks []outageMark
	for r := range e.opts.outageRounds {
		for _, via := range []string{"direct", "nora-breaker"} {
			var n *nora
			o := clientOpts{conns: conns, timeout: outageTimeout}
			if via == "nora-breaker" {
				var err error
				if n, err = e.startNora(fmt.Sprintf("outage-%d", r), 0); err != nil {
					return err
				}
				o.proxy, o.timeout = n.url(), 30*time.Second
			}
			before, err := e.holes()
			if err != nil {
				return err
			}
			spec := loadSpec{client: newClient(o), url: e.holeURL(), conns: conns,
				duration: 10 * time.Minute, requests: e.opts.outageRequests, want: -1}
			if r == 0 {
				spec.trace = traces[via]
			}
			res := runLoad(spec)
			after, err := e.holes()
			if err != nil {
				return err
			}
			if n != nil {
				if r == 0 {
					if marks, err = n.transitionMarks(spec.trace.start); err != nil {
						return err
					}
				}
				e.stopNora(n)
			}
			wall.add(via, res.elapsed.Seconds())
			reached.add(via, float64(after-before))
			fmt.Fprintf(os.Stderr, "bench: outage %s round %d: %d requests in %s, %d reached the dead upstream\n",
				via, r+1, res.requests, res.elapsed.Round(time.Millisecond), after-before)
		}
	}
	if err := e.drawOutage(traces["direct"], traces["nora-breaker"], marks, outageTimeout); err != nil {
		return err
	}
	sec := fmt.Sprintf("outage cost (%d req, 16 conns, black hole)", e.opts.outageRequests)
	w := row{section: sec, target: "nora-breaker", figure: "client wall time", unit: unitDur,
		value: wall.med("nora-breaker"), base: wall.med("direct"), goal: "≥ 20× less than direct"}
	w.met = verdict(w.value*20 <= w.base)
	h := row{section: sec, target: "nora-breaker", figure: "requests reaching upstream", unit: unitCount,
		value: reached.med("nora-breaker"), base: reached.med("direct"), goal: "≤ 16 (+1 probe / reset_timeout)"}
	h.met = verdict(h.value <= conns+1)
	rep.add(
		row{section: sec, target: "direct", figure: "client wall time", unit: unitDur, value: wall.med("direct")},
		row{section: sec, target: "direct", figure: "requests reaching upstream", unit: unitCount,
			value: reached.med("direct")},
		w, h)
	return outageFirst(e, rep)
}

// drawOutage writes the outage picture where the options say.
func (e *env) drawOutage(direct, proxied *trace, marks []outageMark, timeout time.Duration) error {
	path := e.opts.outageSVG
	if path == "" {
		path = filepath.Join(e.dir, "outage-cost.svg")
	}
	if err := drawOutage(path, direct, proxied, marks, timeout); err != nil {
		return fmt.Errorf("outage picture: %w", err)
	}
	fmt.Fprintf(os.Stderr, "bench: outage picture: %s\n", path)
	return nil
}

// transitionMarks reads the proxy's breaker transitions (GET
// /breakers/history) as marks relative to start, oldest first.
func (n *nora) transitionMarks(start time.Time) ([]outageMark, error) {
	resp, err := http.Get("http://" + n.admin + "/breakers/history")
	if err != nil {
		return nil, fmt.Errorf("breaker history: %w", err)
	}
	defer resp.Body.Close()
	var hist []struct {
		At       time.Time `json:"at"`
		From, To string
		Why      string `json:"why"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&hist); err != nil {
		return nil, fmt.Errorf("breaker history: %w", err)
	}
	var marks []outageMark
	for i := len(hist) - 1; i >= 0; i-- {
		h := hist[i]
		marks = append(marks, outageMark{at: h.At.Sub(start), label: fmt.Sprintf("%s → %s (%s)", h.From, h.To, h.Why)})
	}
	return marks, nil
}
