// Command bench is nora-breaker's benchmark harness: it starts, as separate
// processes on 127.0.0.1, a fake registry upstream, nora-breaker and the peer
// proxies tinyproxy and squid, drives every target with the same in-process
// load generator, and prints one table in which every figure is the median of
// several rounds and is compared with direct access measured in the same run.
//
// The harness is a module of its own (so its plotting library stays out of
// the product's go.mod); run it from the repository root with go -C:
//
//	go -C bench run .            # full run (the table in BENCHMARKS.md)
//	go -C bench run . --quick    # smoke run for CI, well under two minutes
//	go -C bench run . --only openloop --rounds 3 --duration 5s
//	go -C bench run . --only coalesce
//	go -C bench run . upstream --http 127.0.0.1:8080   # the upstream alone
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// options are the harness's knobs; --quick swaps in smaller ones.
type options struct {
	repo           string
	quick, noPeers bool
	keep           bool
	only           []string
	logLevel       string
	rounds         int
	duration, warm time.Duration
	outageRounds   int
	outageRequests int
	memRounds      int
	idleConns      int
	streamMiB      int
	hosts          int
	// rates are the open-loop section's request rates, per second.
	rates []int
	// outageSVG is where the outage-cost picture goes; "" means the work
	// folder (the --quick default, so CI draws it too).
	outageSVG string
}

func main() {
	// The harness starts its servers as separate processes of its own
	// binary, so that each one's CPU time can be read from /proc.
	if len(os.Args) > 1 {
		if serve := subcommand(os.Args[1]); serve != nil {
			if err := serve(os.Args[2:]); err != nil {
				fmt.Fprintf(os.Stderr, "%s: %v\n", os.Args[1], err)
				os.Exit(1)
			}
			return
		}
	}
	o, err := parseOptions(os.Args[1:], os.Stderr)
	if err != nil {
		os.Exit(2)
	}
	if err := run(o, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

// subcommand is the server mode of the bench binary called name (the fake
// registry, or one of the two floors the open-loop section compares
// against), or nil.
func subcommand(name string) func([]string) error {
	switch name {
	case "upstream":
		return runUpstream
	case "bare":
		return runBare
	case "miniproxy":
		return runMiniProxy
	}
	return nil
}

func parseOptions(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	var only string
	fs.StringVar(&o.repo, "repo", "", "nora-breaker repository root, built with go build (default: found above the working directory)")
	fs.BoolVar(&o.quick, "quick", false, "smoke run: one round, small counts, peers skipped if not installed")
	fs.BoolVar(&o.noPeers, "no-peers", false, "do not start tinyproxy and squid")
	fs.BoolVar(&o.keep, "keep", false, "keep the work folder (configs, logs) after the run")
	fs.StringVar(&only, "only", "", "comma-separated sections: closed,fastfail,fallback,streaming,openloop,outage,fleet,memory,interception,coalesce")
	fs.StringVar(&o.logLevel, "log-level", "info", "nora-breaker log_level (info writes one line per request)")
	rounds := fs.Int("rounds", 0, "rounds per figure (default 5, quick 1)")
	duration := fs.Duration("duration", 0, "length of each measured load run (default 3s, quick 1s)")
	rates := fs.String("rates", "500,2000", "open-loop request rates per second, comma-separated")
	fs.StringVar(&o.outageSVG, "outage-svg", "", "where to draw the outage-cost SVG (default: docs/img/outage-cost.svg; --quick: the work folder)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "bench: unexpected argument %q\n", fs.Arg(0))
		return o, errors.New("usage")
	}
	if only != "" {
		o.only = strings.Split(only, ",")
	}
	for _, f := range strings.Split(*rates, ",") {
		r, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || r <= 0 {
			fmt.Fprintf(stderr, "bench: --rates: %q is not a positive whole number\n", f)
			return o, errors.New("usage")
		}
		o.rates = append(o.rates, r)
	}
	if o.repo == "" {
		var err error
		if o.repo, err = findRepo("."); err != nil {
			fmt.Fprintf(stderr, "bench: %v\n", err)
			return o, err
		}
	}
	if o.quick {
		o.rounds, o.duration, o.warm = 1, time.Second, 300*time.Millisecond
		o.outageRounds, o.outageRequests = 1, 160
		o.memRounds, o.idleConns, o.streamMiB, o.hosts = 1, 1000, 128, 100
	} else {
		o.rounds, o.duration, o.warm = 5, 3*time.Second, time.Second
		o.outageRounds, o.outageRequests = 3, 1000
		o.memRounds, o.idleConns, o.streamMiB, o.hosts = 3, 5000, bigBody>>20, 1000
	}
	if o.outageSVG == "" && !o.quick {
		o.outageSVG = filepath.Join(o.repo, "docs", "img", "outage-cost.svg")
	}
	if *duration > 0 {
		o.duration = *duration
	}
	if *rounds > 0 {
		o.rounds, o.outageRounds, o.memRounds = *rounds, min(*rounds, o.outageRounds), min(*rounds, o.memRounds)
	}
	return o, nil
}

func (o options) want(section string) bool {
	return len(o.only) == 0 || slices.Contains(o.only, section)
}

// loadAvg is the 1-minute load average: other work on the machine skews
// every figure, so the table says how busy the machine was.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

// settle waits, at most max, for the 1-minute load average to drop below
// 1, checking every few seconds, and returns it. The open loop's figures
// are CPU per request, which the sections before it skew: their load is
// still in the average (and in the machine's caches and frequencies) when
// it starts. A settle that runs out says so; the run goes on.
func settle(max time.Duration) string {
	deadline := time.Now().Add(max)
	for {
		l := loadAvg()
		v, err := strconv.ParseFloat(l, 64)
		if err != nil || v < 1 {
			return l
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(os.Stderr, "bench: load average still %s after %s: the open loop runs on a busy machine\n", l, max)
			return l
		}
		time.Sleep(5 * time.Second)
	}
}

// report collects the table's rows in order, and the sections' own
// tables, printed after the main one.
type report struct {
	rows   []row
	tables []string
}

func (r *report) add(rows ...row) { r.rows = append(r.rows, rows...) }

// get returns a figure already measured, or 0.
func (r *report) get(section, target, figure string) float64 {
	for _, x := range r.rows {
		if x.section == section && x.target == target && x.figure == figure {
			return x.value
		}
	}
	return 0
}

func run(o options, stdout io.Writer) error {
	start := time.Now()
	// Read before the build below, which would raise it.
	loadBefore := loadAvg()
	if l, err := strconv.ParseFloat(loadBefore, 64); err == nil && l >= 1 {
		fmt.Fprintf(os.Stderr, "bench: load average %s at the start: other work will skew the figures "+
			"(a run for BENCHMARKS.md should start below 1)\n", loadBefore)
	}
	if lim, err := raiseNoFile(); err != nil || lim < uint64(o.idleConns*2+1000) {
		return fmt.Errorf("open files limit %d (%v): need %d for %d idle connections", lim, err,
			o.idleConns*2+1000, o.idleConns)
	}
	e, err := setup(o)
	if err != nil {
		return err
	}
	defer e.close()
	// Ctrl-C still stops every process we started.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sig
		e.close()
		os.Exit(130)
	}()
	rep := &report{}
	if err := runSections(e, rep); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nnora-breaker benchmarks — %s, %d CPUs, %s, rounds %d, took %s, load average %s → %s\n\n",
		runtime.GOOS+"/"+runtime.GOARCH, runtime.NumCPU(), runtime.Version(), o.rounds,
		time.Since(start).Round(time.Second), loadBefore, loadAvg())
	printTable(stdout, rep.rows)
	for _, t := range rep.tables {
		fmt.Fprintf(stdout, "\n%s", t)
	}
	if o.keep {
		fmt.Fprintf(stdout, "\nwork folder kept: %s\n", e.dir)
	}
	return nil
}

// runSections runs the selected scenarios; closed path, fast-fail, fallback
// and streaming share one nora-breaker, the others start their own.
func runSections(e *env, rep *report) error {
	o := e.opts
	if o.want("closed") || o.want("fastfail") || o.want("fallback") || o.want("streaming") {
		n, err := e.startNora("main", 0)
		if err != nil {
			return err
		}
		defer e.stopNora(n)
		steps := []struct {
			name string
			fn   func() error
		}{
			{"closed", func() error { closedPath(e, n, rep); return nil }},
			{"fastfail", func() error { return fastFail(e, n, rep) }},
			{"fallback", func() error { return fallbackPath(e, n, rep) }},
			{"streaming", func() error { return streaming(e, n, rep) }},
		}
		for _, s := range steps {
			if !o.want(s.name) {
				continue
			}
			fmt.Fprintf(os.Stderr, "bench: %s …\n", s.name)
			if err := s.fn(); err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
		}
	}
	for _, s := range []struct {
		name string
		fn   func(*env, *report) error
	}{{"openloop", openLoop}, {"outage", outageCost}, {"fleet", fleetCost}, {"memory", memory},
		{"interception", interception}, {"coalesce", coalesceSection}} {
		if !o.want(s.name) {
			continue
		}
		// The fleet rows take minutes (several probe periods per run):
		// full runs only, unless asked for by name.
		if s.name == "fleet" && o.quick && !slices.Contains(o.only, "fleet") {
			fmt.Fprintln(os.Stderr, "bench: fleet skipped in --quick (--only fleet runs it)")
			continue
		}
		fmt.Fprintf(os.Stderr, "bench: %s …\n", s.name)
		if err := s.fn(e, rep); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	return nil
}
