package main

import (
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
)

// olMeasures are the open-loop section's figures, one value per round,
// keyed by olKey(rate, target).
type olMeasures struct {
	cpu, upCPU, p50, p99, answered, wait50, wait99 series
	failed, dropped                                map[string]int64
}

func newOLMeasures() *olMeasures {
	return &olMeasures{cpu: series{}, upCPU: series{}, p50: series{}, p99: series{}, answered: series{},
		wait50: series{}, wait99: series{}, failed: map[string]int64{}, dropped: map[string]int64{}}
}

func olKey(rate int, target string) string { return fmt.Sprintf("%d %s", rate, target) }

// record adds one round of t at rate, and logs it so the spread behind a
// median can be seen.
func (m *olMeasures) record(rate int, t olTarget, round int, r olResult) {
	k := olKey(rate, t.name)
	var cpu, upCPU float64
	if r.sent > 0 {
		cpu, upCPU = r.cpu.Seconds()/float64(r.sent), r.upCPU.Seconds()/float64(r.sent)
		m.cpu.add(k, cpu)
		if t.upPID != 0 {
			m.upCPU.add(k, upCPU)
		}
	}
	m.p50.add(k, r.latency.quantile(0.50).Seconds())
	m.p99.add(k, r.latency.quantile(0.99).Seconds())
	m.wait50.add(k, r.wait.quantile(0.50).Seconds())
	m.wait99.add(k, r.wait.quantile(0.99).Seconds())
	m.answered.add(k, r.answered())
	m.failed[k] += r.bad
	m.dropped[k] += r.dropped
	up := ""
	if t.upPID != 0 {
		up = " (upstream " + format(unitDur, upCPU) + ")"
	}
	fmt.Fprintf(os.Stderr, "bench: openloop %d/s %s round %d: %d sent, %d not %d, %d dropped, CPU %s/req%s, "+
		"p50 %s, p99 %s\n", rate, t.name, round+1, r.sent, r.bad, t.want, r.dropped, format(unitDur, cpu), up,
		format(unitDur, r.latency.quantile(0.50).Seconds()), format(unitDur, r.latency.quantile(0.99).Seconds()))
	if r.firstErr != "" {
		fmt.Fprintf(os.Stderr, "bench: openloop %d/s %s: first unexpected answer: %s\n", rate, t.name, r.firstErr)
	}
}

// olRatio is one ratio of median CPU per request the issue sets a target for.
type olRatio struct {
	target, figure, of string // target's CPU ÷ of's CPU
	goal               string
	met                func(float64) bool
}

// olRatios are the section's targets: a forwarded request cheaper than
// squid's and than the minimal Go proxy's, and a refusal about as cheap as
// the bare server's 200.
func olRatios() []olRatio {
	return []olRatio{
		{olPlain, "CPU per request ÷ squid's", olSquid, "≤ 0.9×", func(v float64) bool { return v <= 0.9 }},
		{olPlain, "CPU per request ÷ minimal Go proxy's", olMini, "< 1×", func(v float64) bool { return v < 1 }},
		{olRefusal, "CPU per request ÷ bare Go server's 200", olBare, "≤ 1.1×", func(v float64) bool { return v <= 1.1 }},
		// What sizing the scheduler to the load buys (procs = 0, the
		// default) against the runtime's own default: no target.
		{olPlain, "CPU per request ÷ with every processor (procs fixed)", olFixed, "", nil},
		{olRefusal, "CPU per request ÷ with every processor (procs fixed)", olRefusalFixed, "", nil},
	}
}

// olRows are the main table's rows of the section: each ratio with its
// target, per rate. A ratio whose comparison row did not run (squid under
// --no-peers) is left out.
func olRows(rates []int, m *olMeasures) []row {
	var rows []row
	for _, rate := range rates {
		sec := fmt.Sprintf("open loop %d req/s (1 KiB, %d conns)", rate, olConns)
		for _, q := range olRatios() {
			num, den := m.cpu.med(olKey(rate, q.target)), m.cpu.med(olKey(rate, q.of))
			if num == 0 || den == 0 {
				fmt.Fprintf(os.Stderr, "bench: openloop %d/s: %s has no %s to compare with\n", rate, q.target, q.of)
				continue
			}
			v := num / den
			r := row{section: sec, target: q.target, figure: q.figure, unit: unitRatio, value: v, goal: q.goal}
			if q.met != nil {
				r.met = verdict(q.met(v))
			}
			rows = append(rows, r)
		}
	}
	return rows
}

// olTable is the section's own table: every target's figures at every rate.
func olTable(e *env, ts []olTarget, m *olMeasures, loadStart, loadEnd string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "open loop: 1 KiB GETs at a fixed rate over %d keep-alive connections; latency from each "+
		"request's scheduled send time; CPU = user+system time of the process under test per answer (direct and "+
		"bare rows: that server's own); medians over %d round(s) of %s per rate and target; load average %s → %s\n\n",
		olConns, e.opts.rounds, e.opts.duration, loadStart, loadEnd)
	tw := tabwriter.NewWriter(&b, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "| rate\t target\t answered\t CPU per request\t upstream CPU per request\t p50\t p50 added\t p99\t send wait p50 / p99\t failed\t dropped\t")
	fmt.Fprintln(tw, "|---:\t---\t---:\t---:\t---:\t---:\t---:\t---:\t---:\t---:\t---:\t")
	for _, rate := range e.opts.rates {
		for _, t := range ts {
			k := olKey(rate, t.name)
			up, added := "—", "—"
			if t.upPID != 0 {
				up = format(unitDur, m.upCPU.med(k))
			}
			if t.base != "" {
				added = signedDur(m.p50.med(k) - m.p50.med(olKey(rate, t.base)))
			}
			fmt.Fprintf(tw, "| %d/s\t %s\t %s\t %s\t %s\t %s\t %s\t %s\t %s\t %d\t %d\t\n", rate, t.name,
				format(unitRate, m.answered.med(k)), format(unitDur, m.cpu.med(k)), up,
				format(unitDur, m.p50.med(k)), added, format(unitDur, m.p99.med(k)),
				format(unitDur, m.wait50.med(k))+" / "+format(unitDur, m.wait99.med(k)), m.failed[k], m.dropped[k])
		}
	}
	tw.Flush()
	return b.String()
}

// signedDur is a duration difference in seconds with its sign.
func signedDur(v float64) string {
	if v < 0 {
		return "−" + format(unitDur, -v)
	}
	return "+" + format(unitDur, v)
}
