package procs

import (
	"context"
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func TestDecider(t *testing.T) {
	cases := []struct {
		name  string
		uses  []float64
		waits []time.Duration // nil: none
		want  []int           // processors after each interval
	}{
		{"quiet goes down after the calm", []float64{0.1, 0.1, 0.1, 0.1, 0.1}, nil, []int{4, 4, 1, 1, 1}},
		{"a busy interval resets the calm", []float64{0.1, 0.1, 0.5, 0.1, 0.1, 0.1}, nil, []int{4, 4, 4, 4, 4, 1}},
		{"between the thresholds nothing moves", []float64{0.5, 0.6, 0.7, 0.45}, nil, []int{4, 4, 4, 4}},
		{"one busy interval at one goes up", []float64{0.1, 0.1, 0.1, 0.8, 0.1}, nil, []int{4, 4, 1, 4, 4}},
		{"at one, below up stays", []float64{0.1, 0.1, 0.1, 0.74, 0.5, 0.74}, nil, []int{4, 4, 1, 1, 1, 1}},
		{"at one, a long wait goes up though the CPU use is low", []float64{0.1, 0.1, 0.1, 0.3, 0.3},
			[]time.Duration{0, 0, 0, 2 * time.Millisecond, 0}, []int{4, 4, 1, 4, 4}},
		{"a long wait resets the calm", []float64{0.1, 0.1, 0.1, 0.1, 0.1},
			[]time.Duration{0, time.Millisecond, 0, 0, 0}, []int{4, 4, 4, 4, 1}},
		{"a short wait is no reason", []float64{0.1, 0.1, 0.1, 0.1},
			[]time.Duration{0, 0, 0, 999 * time.Microsecond}, []int{4, 4, 1, 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := decider{up: 0.75, down: 0.4, upWait: time.Millisecond, calmTurns: 3, procs: 4, max: 4}
			for i, u := range c.uses {
				var w time.Duration
				if c.waits != nil {
					w = c.waits[i]
				}
				got, _ := d.next(u, w)
				if got != c.want[i] {
					t.Fatalf("interval %d (use %.2f): %d processors, want %d", i, u, got, c.want[i])
				}
			}
		})
	}
}

// meter is a CPU clock the test drives: the process "uses" rate CPUs of
// the (fake) wall clock from the moment rate is set.
type meter struct {
	mu    sync.Mutex
	total time.Duration
	rate  float64
	since time.Time
}

func (m *meter) cpu() (time.Duration, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	m.total += time.Duration(m.rate * float64(now.Sub(m.since)))
	m.since = now
	return m.total, nil
}

func (m *meter) set(rate float64) {
	m.cpu()
	m.mu.Lock()
	m.rate = rate
	m.mu.Unlock()
}

// TestRunFollowsTheLoad drives Run with a scripted CPU use: it must go to
// one processor only after the calm, back to Max within one interval of a
// burst, and hand the runtime its default back when it ends.
func TestRunFollowsTheLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &meter{since: time.Now()}
		var mu sync.Mutex
		var sets []int
		cur := 4
		procs := func() int { mu.Lock(); defer mu.Unlock(); return cur }
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			Run(ctx, Options{Max: 4, CPU: m.cpu, Wait: func() time.Duration { return 0 }, Set: func(n int) {
				mu.Lock()
				defer mu.Unlock()
				sets = append(sets, n)
				cur = n
				if n == 0 {
					cur = 4
				}
			}})
		}()
		m.set(0.2)
		time.Sleep(DefaultCalm - DefaultInterval/2)
		synctest.Wait()
		if procs() != 4 {
			t.Fatalf("went down to %d before a whole calm", procs())
		}
		time.Sleep(DefaultInterval)
		synctest.Wait()
		if procs() != 1 {
			t.Fatalf("%d processors after a calm second, want 1", procs())
		}
		m.set(0.95) // a burst: one processor all but full
		time.Sleep(DefaultInterval + DefaultInterval/2)
		synctest.Wait()
		if procs() != 4 {
			t.Fatalf("%d processors one interval into a burst, want 4", procs())
		}
		m.set(0.3)
		time.Sleep(DefaultCalm + DefaultInterval)
		synctest.Wait()
		if procs() != 1 {
			t.Fatalf("%d processors after the burst calmed, want 1", procs())
		}
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		want := []int{1, 0, 1, 0}
		if len(sets) != len(want) {
			t.Fatalf("sets %v, want %v", sets, want)
		}
		for i := range want {
			if sets[i] != want[i] {
				t.Fatalf("sets %v, want %v", sets, want)
			}
		}
	})
}

func TestQuantile(t *testing.T) {
	buckets := []float64{math.Inf(-1), 0, 0.0001, 0.001, 0.01, math.Inf(1)}
	cases := []struct {
		name   string
		counts []uint64
		want   time.Duration
	}{
		{"too few to tell", []uint64{0, 5, 5, 5, 0}, 0},
		{"all short", []uint64{0, 100, 0, 0, 0}, 0},
		{"one in ten long", []uint64{0, 80, 9, 11, 0}, time.Millisecond},
		{"fewer than one in ten long", []uint64{0, 80, 11, 9, 0}, 100 * time.Microsecond},
		{"below every edge", []uint64{50, 0, 0, 0, 0}, 0},
	}
	for _, c := range cases {
		var total uint64
		for _, n := range c.counts {
			total += n
		}
		if got := quantile(c.counts, total, buckets, 0.9); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestSchedWaitsReadsTheRuntime: the real meter reads the runtime's
// histogram and reports only what happened since its last reading.
func TestSchedWaitsReadsTheRuntime(t *testing.T) {
	w := newSchedWaits()
	w.p90()
	if len(w.last) == 0 {
		t.Fatal("no /sched/latencies:seconds histogram read")
	}
	if got := w.p90(); got > time.Second {
		t.Fatalf("p90 wait %v between two back-to-back readings", got)
	}
}

// TestRunWithOneCPUDoesNothing: with nothing to choose between, Run
// returns at once and never touches the scheduler.
func TestRunWithOneCPUDoesNothing(t *testing.T) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(context.Background(), Options{Max: 1, Set: func(n int) { t.Errorf("set %d", n) }})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run with Max 1 did not return")
	}
}

// TestProcessCPUGrows: the real meter reads this process's CPU time.
func TestProcessCPUGrows(t *testing.T) {
	a, err := processCPU()
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	x := 0
	for time.Now().Before(deadline) {
		for i := range 1_000_000 {
			x += i
		}
		b, err := processCPU()
		if err != nil {
			t.Fatal(err)
		}
		if b > a {
			return
		}
	}
	t.Fatalf("CPU time did not grow past %v while spinning (%d)", a, x)
}
