package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Slack over the idle baseline that the process may keep after the load.
const (
	goroutineSlack = 10
	fdSlack        = 5
)

func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
}

func run(ctx context.Context, o options) error {
	if err := os.MkdirAll(o.work, 0o755); err != nil {
		return err
	}
	if _, err := os.Stat(o.bin); err != nil {
		// build.sh works in the repository root, one level up from soak/,
		// so the output path it is given must not be relative.
		out, err := filepath.Abs(o.bin)
		if err != nil {
			return err
		}
		build := exec.Command("../scripts/build.sh")
		build.Env = append(os.Environ(), "OUT="+out)
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("build: %w", err)
		}
	}
	_ = os.RemoveAll(o.work + "/stale")
	e, err := setup(ctx, o)
	defer e.close()
	if err != nil {
		return err
	}
	metricsClient := &http.Client{Timeout: 2 * time.Second}
	base, err := idleBaseline(ctx, e, metricsClient)
	if err != nil {
		return err
	}
	fmt.Printf("idle: %v goroutines, %v fds, RSS %.1f MiB\n", base.goroutines, base.fds, base.rss/(1<<20))

	rec := &recorder{}
	recCtx, stopRec := context.WithCancel(ctx)
	defer stopRec()
	recDone := make(chan struct{})
	go func() { rec.run(recCtx, metricsClient, e.admin, 200*time.Millisecond); close(recDone) }()

	loadCtx, stopLoad := context.WithTimeout(ctx, o.duration)
	defer stopLoad()
	st := newStats()
	cfg := loadConfig{proxy: e.proxyURL, conns: o.conns, targets: e.targets, secondaries: e.secNames,
		hangLimit: 5 * time.Second, think: o.think}
	schedDone := make(chan []window, 1)
	go func() { schedDone <- cycleFaults(loadCtx, e, o) }()
	started := time.Now()
	tr := runLoad(loadCtx, cfg, st)
	elapsed := time.Since(started)
	windows := <-schedDone
	tr.CloseIdleConnections()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	after, settle := settleDown(ctx, e, metricsClient, base)
	stopRec()
	<-recDone
	return report(o, e, st, rec, windows, base, after, settle, elapsed)
}

// idleBaseline warms every path up, then waits until the proxy is quiet
// (idle upstream connections closed by the fakes) and reads its footprint.
func idleBaseline(ctx context.Context, e *env, c *http.Client) (sample, error) {
	tr := &http.Transport{Proxy: http.ProxyURL(e.proxyURL)}
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	for i := 0; i < 3; i++ {
		for _, t := range e.targets {
			req, _ := http.NewRequestWithContext(ctx, t.method, t.url, strings.NewReader("warm"))
			if resp, err := client.Do(req); err == nil {
				resp.Body.Close()
			}
		}
	}
	tr.CloseIdleConnections()
	return waitStable(ctx, c, e.admin, 15*time.Second)
}

// waitStable scrapes until goroutines and fds hold still for 2 s.
func waitStable(ctx context.Context, c *http.Client, admin string, limit time.Duration) (sample, error) {
	deadline := time.Now().Add(limit)
	var last sample
	steady := 0
	for time.Now().Before(deadline) {
		s, err := scrape(ctx, c, admin)
		if err != nil {
			return s, err
		}
		if s.goroutines == last.goroutines && s.fds == last.fds {
			steady++
		} else {
			steady = 0
		}
		last = s
		if steady >= 8 {
			return s, nil
		}
		time.Sleep(250 * time.Millisecond)
	}
	return last, nil
}

// settleDown waits (bounded) for goroutines, fds and RSS to come back.
func settleDown(ctx context.Context, e *env, c *http.Client, base sample) (sample, time.Duration) {
	start := time.Now()
	deadline := start.Add(60 * time.Second)
	var s sample
	for time.Now().Before(deadline) && ctx.Err() == nil {
		var err error
		if s, err = scrape(ctx, c, e.admin); err == nil &&
			s.goroutines <= base.goroutines+goroutineSlack && s.fds <= base.fds+fdSlack && s.rss < 2*base.rss {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	return s, time.Since(start)
}

// cycleFaults runs the schedule until ctx ends: healthy, then each fault in
// turn followed by a healthy window. It returns the windows as they ran.
func cycleFaults(ctx context.Context, e *env, o options) []window {
	order := []fault{faultRefused, faultBlackhole, faultReset, faultSlow}
	var ws []window
	cur := window{f: faultNone, start: time.Now()}
	wait := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	apiCtx := context.Background() // heal even after the load context ends
	for i := 0; ; i++ {
		if !wait(o.healthy) {
			break
		}
		f := order[i%len(order)]
		// A window ends before the next one's change is made, so nothing
		// the change causes is judged against the window before it.
		cur.end = time.Now()
		ws = append(ws, cur)
		for _, n := range e.toxNames {
			if err := e.toxi.apply(apiCtx, n, f); err != nil {
				fmt.Fprintln(os.Stderr, "soak:", err)
			}
		}
		cur = window{f: f, start: time.Now()}
		ok := wait(o.faultLen)
		cur.end = time.Now()
		ws = append(ws, cur)
		for _, n := range e.toxNames {
			if err := e.toxi.heal(apiCtx, n, f); err != nil {
				fmt.Fprintln(os.Stderr, "soak:", err)
			}
		}
		cur = window{f: faultNone, start: time.Now()}
		if !ok {
			break
		}
	}
	cur.end = time.Now()
	return append(ws, cur)
}

// report prints the figures and returns an error naming every failed check.
func report(o options, e *env, st *stats, rec *recorder, ws []window, base, after sample,
	settle time.Duration, elapsed time.Duration) error {
	var problems []string
	total := 0
	for _, n := range st.counts {
		total += n
	}
	fmt.Printf("load: %d requests in %v at %d connections (%.0f req/s)\n", total, elapsed.Round(time.Second),
		o.conns, float64(total)/elapsed.Seconds())
	for _, c := range []string{classUpstream, classFallback, classStale, classSynth503, classSynth404,
		classGateway, classTruncated, classViolation} {
		fmt.Printf("  %-16s %d\n", c, st.counts[c])
	}
	fmt.Printf("latency: p50 %v p99 %v max %v\n", percentile(st.all, 0.5), percentile(st.all, 0.99), st.maxLatency)
	p99 := percentile(st.rejected, 0.99)
	fmt.Printf("rejections (synthesized 503): %d, p50 %v p99 %v max %v\n", len(st.rejected),
		percentile(st.rejected, 0.5), p99, percentile(st.rejected, 1))
	for _, v := range st.violations {
		fmt.Println("  violation:", v)
	}
	if st.counts[classViolation] > 0 {
		problems = append(problems, fmt.Sprintf("%d answers outside docs/behaviour.md", st.counts[classViolation]))
	}
	if len(st.rejected) == 0 {
		problems = append(problems, "no request was rejected: the faults did not open any breaker")
	} else if p99 >= o.rejectP99 {
		problems = append(problems, fmt.Sprintf("rejection p99 %v ≥ %v (the upstream timeout it spares is %v)",
			p99, o.rejectP99, upstreamTimeout))
	}
	bp, summary := checkBreakers(rec.all(), ws, e.primaries, e.secondary)
	for _, l := range summary {
		fmt.Println(l)
	}
	problems = append(problems, bp...)
	peak := sample{}
	for _, s := range rec.all() {
		peak.goroutines, peak.fds, peak.rss = max(peak.goroutines, s.goroutines), max(peak.fds, s.fds), max(peak.rss, s.rss)
	}
	fmt.Printf("resources: goroutines idle %v peak %v after %v; fds idle %v peak %v after %v; "+
		"RSS idle %.1f peak %.1f after %.1f MiB (settled in %v)\n",
		base.goroutines, peak.goroutines, after.goroutines, base.fds, peak.fds, after.fds,
		base.rss/(1<<20), peak.rss/(1<<20), after.rss/(1<<20), settle.Round(100*time.Millisecond))
	if after.goroutines > base.goroutines+goroutineSlack {
		problems = append(problems, fmt.Sprintf("goroutines %v after the load, idle %v", after.goroutines, base.goroutines))
	}
	if after.fds > base.fds+fdSlack {
		problems = append(problems, fmt.Sprintf("open fds %v after the load, idle %v", after.fds, base.fds))
	}
	if after.rss >= 2*base.rss {
		problems = append(problems, fmt.Sprintf("RSS %.1f MiB after the load, idle %.1f", after.rss/(1<<20), base.rss/(1<<20)))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}
