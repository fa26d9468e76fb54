package main

import (
	"fmt"
	"net/http"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// rateSpec is one open-loop run: requests are scheduled at fixed times,
// rate per second for duration, whatever the answers do. A request is sent
// at its time by a free worker (one keep-alive connection each), or as soon
// as one frees up; its latency counts from the time it was scheduled, so a
// target that stalls is charged for every request that waited behind the
// stall (coordinated omission counted, as wrk2 and vegeta do), not only for
// the one that was slow.
type rateSpec struct {
	client   *http.Client
	url      string
	rate     float64
	duration time.Duration
	workers  int
	want     int  // expected status
	distinct bool // a URL of its own per request (distinctURLs)
	// grace bounds how long after the schedule's end a queued request may
	// still be sent; the ones left are counted as dropped, not sent.
	grace time.Duration
}

// rateResult is what one open-loop run measured.
type rateResult struct {
	scheduled, sent, dropped, bad int64
	firstErr                      string
	// elapsed runs from the first scheduled time to the last answer.
	elapsed time.Duration
	// latency: scheduled time → whole answer read. wait: scheduled time →
	// sent (the generator's own timer lateness, plus queueing behind busy
	// workers).
	latency, wait histogram
}

// answered is the rate of expected answers over the run.
func (r rateResult) answered() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.sent-r.bad) / r.elapsed.Seconds()
}

// runRate runs spec: one goroutine keeps the schedule, spec.workers send.
func runRate(spec rateSpec) rateResult {
	n := int(spec.rate * spec.duration.Seconds())
	// The queue holds the whole schedule, so the clock never waits for a
	// worker: a slow target makes requests late, never fewer.
	queue := make(chan time.Time, n)
	start := time.Now()
	sendBy := start.Add(spec.duration + spec.grace)
	var (
		mu  sync.Mutex
		res = rateResult{scheduled: int64(n)}
		wg  sync.WaitGroup
		end time.Time
	)
	urls := &distinctURLs{base: spec.url, on: spec.distinct}
	for range spec.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var w rateResult
			var last time.Time
			for at := range queue {
				if time.Now().After(sendBy) {
					w.dropped++
					continue
				}
				w.wait.record(time.Since(at))
				status, err := fetch(spec.client, urls.next())
				last = time.Now()
				w.latency.record(last.Sub(at))
				w.sent++
				if err != nil || status != spec.want {
					w.bad++
					if w.firstErr == "" {
						w.firstErr = fmt.Sprintf("status %d, err %v", status, err)
					}
				}
			}
			mu.Lock()
			defer mu.Unlock()
			res.sent, res.dropped, res.bad = res.sent+w.sent, res.dropped+w.dropped, res.bad+w.bad
			res.latency.merge(&w.latency)
			res.wait.merge(&w.wait)
			if res.firstErr == "" {
				res.firstErr = w.firstErr
			}
			if last.After(end) {
				end = last
			}
		}()
	}
	keepSchedule(start, n, spec.rate, queue)
	wg.Wait()
	if !end.IsZero() {
		res.elapsed = end.Sub(start)
	}
	return res
}

// keepSchedule puts the times of n requests at rate per second after start
// on queue, each when it is due, then closes it. Each time is computed from
// start, so lateness never accumulates.
func keepSchedule(start time.Time, n int, rate float64, queue chan<- time.Time) {
	// The thread is the clock: it sleeps in the kernel (sleepUntil), and
	// the runtime may not give it to another goroutine meanwhile.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for i := range n {
		at := start.Add(time.Duration(float64(i) * float64(time.Second) / rate))
		sleepUntil(at)
		queue <- at
	}
	close(queue)
}

// sleepUntil blocks the calling thread in nanosleep(2) until at. The Go
// runtime's timers wake an otherwise idle process on a millisecond grid —
// about half a millisecond late at the median on the harness's 2-vCPU
// machine, which every latency from a scheduled time would include — while
// the kernel's high-resolution timer is about a tenth of a millisecond late.
func sleepUntil(at time.Time) {
	// A signal cuts a nanosleep short (EINTR); the loop sleeps the rest.
	for d := time.Until(at); d > 0; d = time.Until(at) {
		ts := syscall.NsecToTimespec(int64(d))
		_ = syscall.Nanosleep(&ts, nil)
	}
}
