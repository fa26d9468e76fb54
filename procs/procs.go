// Package procs sizes the Go scheduler to the proxy's load
// (docs/behaviour.md §2.2, `procs`): one processor while the process uses
// well under one CPU, the runtime's default (every CPU, or the container's
// CPU limit) above. A forward proxy at a few thousand requests a second
// spends more of its CPU on waking goroutines on other threads than on
// the requests: with a second processor idle, every answer the network
// readies wakes another thread to look for work, and that thread goes back
// to sleep with nothing found. On one processor the goroutine simply runs.
package procs

import (
	"context"
	"math"
	"runtime"
	"runtime/metrics"
	"syscall"
	"time"
)

// Defaults of Options.
const (
	// DefaultInterval is how often the process's CPU use is sampled.
	DefaultInterval = 250 * time.Millisecond
	// DefaultUp is the CPU use (in CPUs) over one interval that gives the
	// scheduler every processor back: one processor that busy already
	// queues requests behind each other.
	DefaultUp = 0.75
	// DefaultDown is the CPU use below which, held for DefaultCalm, one
	// processor is enough: on one, the same load costs less (about 0.45 of
	// a CPU at 2,000 forwarded requests a second on the machine
	// BENCHMARKS.md describes, where two used 0.5), and half of one
	// processor busy keeps the wait for it near one request's time.
	DefaultDown = 0.55
	// DefaultUpWait is the scheduler wait that gives every processor back
	// whatever the CPU use: when one goroutine in ten waits this long for
	// the one processor, the load needs more than one, even if the
	// machine's other work keeps the process from showing it in CPU time.
	DefaultUpWait = time.Millisecond
	// DefaultCalm is how long the use must stay below Down before the
	// scheduler goes down to one processor: a lull between bursts is no
	// reason to.
	DefaultCalm = time.Second
)

// Options say how Run samples and decides. Zero values take the defaults.
type Options struct {
	Interval time.Duration
	Up, Down float64
	UpWait   time.Duration
	Calm     time.Duration
	// Max is the processor count above one: the runtime's default when
	// Run starts (GOMAXPROCS(0)). Run does nothing when it is 1.
	Max int
	// CPU is the process's CPU time so far (default: getrusage).
	CPU func() (time.Duration, error)
	// Wait is how long one goroutine in ten that became runnable since
	// the last call waited for a processor (default: the runtime's
	// /sched/latencies:seconds), 0 when too few did to tell.
	Wait func() time.Duration
	// Set makes the scheduler use n processors; n == 0 is the runtime's
	// default, with its own updates to a changing container limit
	// (runtime.SetDefaultGOMAXPROCS).
	Set func(n int)
	// Changed, when set, is told every change: the processors now in use,
	// and the CPU use and scheduler wait that made it.
	Changed func(procs int, use float64, wait time.Duration)
}

func (o *Options) defaults() {
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Up <= 0 {
		o.Up = DefaultUp
	}
	if o.Down <= 0 {
		o.Down = DefaultDown
	}
	if o.UpWait <= 0 {
		o.UpWait = DefaultUpWait
	}
	if o.Calm <= 0 {
		o.Calm = DefaultCalm
	}
	if o.Wait == nil {
		o.Wait = newSchedWaits().p90
	}
	if o.Max <= 0 {
		o.Max = runtime.GOMAXPROCS(0)
	}
	if o.CPU == nil {
		o.CPU = processCPU
	}
	if o.Set == nil {
		o.Set = setProcs
	}
}

// Run samples the process's CPU use every interval and moves the
// scheduler between one processor and Max until ctx ends, when it gives
// the runtime its default back. It starts at Max: starting up (signing
// leaves ahead, loading the stale index) is the busiest moment.
func Run(ctx context.Context, o Options) {
	o.defaults()
	if o.Max <= 1 {
		return
	}
	d := decider{up: o.Up, down: o.Down, upWait: o.UpWait, calmTurns: max(1, int(o.Calm/o.Interval)), procs: o.Max, max: o.Max}
	tick := time.NewTicker(o.Interval)
	defer tick.Stop()
	last, err := o.CPU()
	lastAt := time.Now()
	for {
		select {
		case <-ctx.Done():
			if d.procs != d.max {
				o.Set(0)
			}
			return
		case <-tick.C:
		}
		now, cerr := o.CPU()
		at := time.Now()
		wait := o.Wait()
		if err != nil || cerr != nil || !at.After(lastAt) {
			// No reading to compare: try again next time, at whatever
			// size the scheduler is now.
			last, lastAt, err = now, at, cerr
			continue
		}
		use := float64(now-last) / float64(at.Sub(lastAt))
		last, lastAt = now, at
		if n, changed := d.next(use, wait); changed {
			if n == d.max {
				o.Set(0)
			} else {
				o.Set(n)
			}
			if o.Changed != nil {
				o.Changed(n, use, wait)
			}
		}
	}
}

// decider is Run's rule, apart from its clock and its meters: up to max at
// once on one busy interval (CPU use or scheduler wait), down to one after
// calmTurns quiet ones in a row.
type decider struct {
	up, down  float64
	upWait    time.Duration
	calmTurns int
	procs     int
	max       int
	calm      int // quiet intervals in a row
}

// next takes one interval's CPU use (in CPUs) and scheduler wait and
// returns the processors to use from now on, and whether that is a change.
func (d *decider) next(use float64, wait time.Duration) (int, bool) {
	busy := use >= d.up || wait >= d.upWait
	if use >= d.down || busy {
		d.calm = 0
	} else {
		d.calm++
	}
	switch {
	case d.procs == 1 && busy:
		d.procs = d.max
		return d.procs, true
	case d.procs > 1 && d.calm >= d.calmTurns:
		d.procs = 1
		return d.procs, true
	}
	return d.procs, false
}

// processCPU is the CPU time the process has spent, user and system.
func processCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

func setProcs(n int) {
	if n == 0 {
		runtime.SetDefaultGOMAXPROCS()
		return
	}
	runtime.GOMAXPROCS(n)
}

// schedWaits reads the runtime's histogram of how long runnable goroutines
// waited for a processor, one interval at a time.
type schedWaits struct {
	sample []metrics.Sample
	last   []uint64
}

// minWaits is how many goroutines must have become runnable in an interval
// for its wait to say anything.
const minWaits = 20

func newSchedWaits() *schedWaits {
	return &schedWaits{sample: []metrics.Sample{{Name: "/sched/latencies:seconds"}}}
}

// p90 is the wait one goroutine in ten exceeded since the last call (the
// lower edge of its bucket), or 0.
func (w *schedWaits) p90() time.Duration {
	metrics.Read(w.sample)
	if w.sample[0].Value.Kind() != metrics.KindFloat64Histogram {
		return 0
	}
	h := w.sample[0].Value.Float64Histogram()
	delta := make([]uint64, len(h.Counts))
	var total uint64
	for i, c := range h.Counts {
		if i < len(w.last) {
			delta[i] = c - w.last[i]
		} else {
			delta[i] = c
		}
		total += delta[i]
	}
	w.last = append(w.last[:0], h.Counts...)
	return quantile(delta, total, h.Buckets, 0.9)
}

// quantile is the lower edge of the bucket holding the q-quantile of counts
// (bucket i spans buckets[i] to buckets[i+1]), or 0 with fewer than
// minWaits counts.
func quantile(counts []uint64, total uint64, buckets []float64, q float64) time.Duration {
	if total < minWaits {
		return 0
	}
	want := uint64(math.Ceil(q * float64(total)))
	var seen uint64
	for i, c := range counts {
		seen += c
		if seen >= want {
			edge := buckets[i]
			if math.IsInf(edge, -1) || edge < 0 {
				return 0
			}
			return time.Duration(edge * float64(time.Second))
		}
	}
	return 0
}
