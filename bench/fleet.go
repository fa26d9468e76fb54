package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// The fleet workload: fleetRequests GETs for the black-holed npm upstream,
// issued at fleetRate per second whatever the answers (CI jobs arrive on
// their own schedule), request i through process i mod N. The npm key's
// reset_timeout is cut to fleetReset so that the run spans several probe
// periods: sharing changes the learning and the probes. The breakers keep
// their defaults otherwise: failure_threshold fleetThreshold (configs.go),
// jitter 10 %, a fixed open time.
const (
	fleetRequests  = 200
	fleetRate      = 20
	fleetReset     = 2 * time.Second
	fleetThreshold = 5
	fleetJitter    = 0.1
	// fleetGrace is how long after the fleet learned an outage a request
	// may still find a process that has not heard of it (Redis's publish
	// and the loop's handling take a few milliseconds here).
	fleetGrace = 50 * time.Millisecond
)

// fleetCost: N nora-breaker processes in front of one black-holed upstream,
// alone and sharing breaker state through a redis-server the harness starts
// on loopback. Without redis-server the shared rows are skipped with a note.
// Each shared row is checked against issue 25's bound: failure_threshold +
// the requests in flight when the fleet learned the outage + one probe per
// open period.
func fleetCost(e *env, rep *report) error {
	redisURL, err := e.startRedis()
	if err != nil {
		return err
	}
	sizes := []int{3, 5}
	reached, waited, inFlight, probes, periods := series{}, series{}, series{}, series{}, series{}
	over := map[string]bool{}       // some round exceeded the bound
	overProbes := map[string]bool{} // some round probed more than once per period
	for r := range e.opts.outageRounds {
		for _, size := range sizes {
			for _, shared := range []bool{false, true} {
				if shared && redisURL == "" {
					continue
				}
				name := fleetName(size, shared)
				run, err := e.fleetRound(fmt.Sprintf("fleet-%d-%d-%t", r, size, shared), size, redisURL, shared)
				if err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
				sp := run.split
				reached.add(name, float64(run.hits))
				waited.add(name, run.wait.Seconds())
				inFlight.add(name, float64(sp.inFlight))
				probes.add(name, float64(sp.probes))
				periods.add(name, float64(sp.periods))
				over[name] = over[name] || run.hits > int64(sp.bound(fleetThreshold))
				overProbes[name] = overProbes[name] || sp.probes > sp.periods
				fmt.Fprintf(os.Stderr, "bench: fleet %s round %d: %d reached the dead upstream (clients saw %d: "+
					"threshold %d + %d in flight + %d probes in %d open periods; bound %d), clients waited %s\n",
					name, r+1, run.hits, sp.reached, fleetThreshold, sp.inFlight, sp.probes, sp.periods,
					sp.bound(fleetThreshold), run.wait.Round(time.Millisecond))
			}
		}
	}
	sec := fmt.Sprintf("fleet outage cost (%d req at %d/s round-robin, black hole)", fleetRequests, fleetRate)
	for _, size := range sizes {
		alone, shared := fleetName(size, false), fleetName(size, true)
		rep.add(row{section: sec, target: alone, figure: "requests reaching upstream", unit: unitCount,
			value: reached.med(alone)},
			row{section: sec, target: alone, figure: "client wait (sum)", unit: unitDur, value: waited.med(alone)})
		if redisURL == "" {
			rep.add(row{section: sec, target: shared + " (skipped: redis-server not installed)",
				figure: "requests reaching upstream", unit: unitCount})
			continue
		}
		bound := fleetThreshold + inFlight.med(shared) + periods.med(shared)
		h := row{section: sec, target: shared, figure: "requests reaching upstream", unit: unitCount,
			value: reached.med(shared), base: reached.med(alone),
			goal: fmt.Sprintf("≤ threshold + in flight + 1 probe per open period (%.0f)", bound)}
		h.met = verdict(!over[shared])
		w := row{section: sec, target: shared, figure: "client wait (sum)", unit: unitDur,
			value: waited.med(shared), base: waited.med(alone), goal: "< alone"}
		w.met = verdict(w.value < w.base)
		rep.add(h, w,
			row{section: sec, target: shared, figure: "in flight when the fleet learned", unit: unitCount,
				value: inFlight.med(shared)},
			row{section: sec, target: shared, figure: "probes after that", unit: unitCount, value: probes.med(shared),
				goal: fmt.Sprintf("≤ open periods (%.0f)", periods.med(shared)), met: verdict(!overProbes[shared])})
	}
	return nil
}

func fleetName(size int, shared bool) string {
	if shared {
		return fmt.Sprintf("%d processes, shared state", size)
	}
	return fmt.Sprintf("%d processes, alone", size)
}

// startRedis starts redis-server on a unix socket in the work folder (no
// TCP port: redis-server cannot bind port 0, and a port reserved for it and
// released could be taken first) without persistence, and returns its URL,
// or "" when it is not installed.
func (e *env) startRedis() (string, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: redis-server not installed, shared-state fleet rows skipped "+
			"(bash sharedstate/install-redis.sh installs it)")
		return "", nil
	}
	sock := filepath.Join(e.dir, "redis.sock")
	p, err := startProc("redis-server", filepath.Join(e.dir, "redis.log"), bin, "--port", "0",
		"--unixsocket", sock, "--unixsocketperm", "700", "--save", "", "--appendonly", "no")
	if err != nil {
		return "", err
	}
	e.procs = append(e.procs, p)
	if err := waitListening(p, "unix", sock, 10*time.Second); err != nil {
		return "", err
	}
	return "unix://" + sock + "?db=0", nil
}

// fleetRun is what one round measured: the requests the black hole saw,
// the summed client latency, and the split of the requests that reached it.
type fleetRun struct {
	hits  int64
	wait  time.Duration
	split fleetSplit
}

// fleetRound starts a fresh fleet (its own Redis prefix, so no state from
// an earlier round), runs the workload and stops the fleet.
func (e *env) fleetRound(tag string, size int, redisURL string, shared bool) (fleetRun, error) {
	extra := noraExtra{tables: fmt.Sprintf("\n[circuit_breaker.overrides.npm]\nreset_timeout = %d\n",
		int(fleetReset.Seconds()))}
	if shared {
		extra.sidecar = fmt.Sprintf("shared_state = %q\nshared_state_prefix = %q\n", redisURL, "bench-"+tag)
	}
	fleet := make([]*nora, 0, size)
	defer func() {
		for _, n := range fleet {
			e.stopNora(n)
		}
	}()
	for i := range size {
		n, err := e.startNoraWith(fmt.Sprintf("%s-%d", tag, i), 0, extra)
		if err != nil {
			return fleetRun{}, err
		}
		fleet = append(fleet, n)
	}
	if shared {
		for _, n := range fleet {
			if err := n.waitShared(10 * time.Second); err != nil {
				return fleetRun{}, err
			}
		}
	}
	before, err := e.holes()
	if err != nil {
		return fleetRun{}, err
	}
	answers, bad, firstErr := fleetLoad(fleet, e.holeURL())
	after, err := e.holes()
	if err != nil {
		return fleetRun{}, err
	}
	if bad > 0 {
		fmt.Fprintf(os.Stderr, "bench: fleet %s: %d of %d requests failed at the client (first: %s)\n",
			tag, bad, fleetRequests, firstErr)
	}
	run := fleetRun{hits: after - before,
		split: splitFleet(answers, fleetThreshold, fleetGrace,
			time.Duration(float64(fleetReset)*(1-fleetJitter)), outageTimeout)}
	for _, a := range answers {
		run.wait += a.took
	}
	return run, nil
}

// fleetLoad issues the workload and returns every answer, the requests
// that got no HTTP answer, and the first such error. The proxy's answers
// for a dead upstream (504 after proxy_timeout, or 503 at once once the
// breaker is open) are expected.
func fleetLoad(fleet []*nora, url string) ([]fleetAnswer, int64, string) {
	clients := make([]*http.Client, len(fleet))
	for i, n := range fleet {
		clients[i] = newClient(clientOpts{conns: fleetRequests, proxy: n.url(), timeout: 30 * time.Second})
	}
	var (
		bad      atomic.Int64
		once     sync.Once
		firstErr string
		wg       sync.WaitGroup
	)
	answers := make([]fleetAnswer, fleetRequests)
	tick := time.NewTicker(time.Second / fleetRate)
	defer tick.Stop()
	for i := range fleetRequests {
		if i > 0 {
			<-tick.C
		}
		c := clients[i%len(fleet)]
		wg.Go(func() {
			t0 := time.Now()
			// A URL of its own per request: identical requests in
			// flight share one fetch (coalescing), and a shared
			// fetch's answer reaches several clients, which would
			// count it several times here; the fleet rows measure
			// the breakers' counting, request by request.
			status, err := fetch(c, fmt.Sprintf("%s-%d", url, i))
			answers[i] = fleetAnswer{sent: t0, took: time.Since(t0), reached: status == http.StatusGatewayTimeout}
			if err != nil || (status != http.StatusServiceUnavailable && status != http.StatusGatewayTimeout) {
				bad.Add(1)
				once.Do(func() { firstErr = fmt.Sprintf("status %d, err %v", status, err) })
			}
		})
	}
	wg.Wait()
	return answers, bad.Load(), firstErr
}

// waitShared polls /health until the process shares state with the fleet.
func (n *nora) waitShared(limit time.Duration) error {
	c := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		var h struct {
			SharedState string `json:"shared_state"`
		}
		resp, err := c.Get("http://" + n.admin + "/health")
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&h)
			resp.Body.Close()
		}
		if err == nil && h.SharedState == "up" {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("%s: shared_state not up after %s", n.listen, limit)
}
