package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// sample is one scrape of the proxy's /metrics.
type sample struct {
	at         time.Time
	state      map[string]float64 // nora_circuit_breaker_state by registry
	opened     map[string]float64 // transitions to open, by registry
	goroutines float64
	fds        float64
	rss        float64
}

var (
	seriesRe = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$`)
	labelRe  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
)

// scrape reads the admin /metrics once.
func scrape(ctx context.Context, client *http.Client, admin string) (sample, error) {
	s := sample{at: time.Now(), state: map[string]float64{}, opened: map[string]float64{}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, admin+"/metrics", nil)
	if err != nil {
		return s, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return s, fmt.Errorf("scrape: %w", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := seriesRe.FindStringSubmatch(sc.Text())
		if m == nil || strings.HasPrefix(m[1], "#") {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			continue
		}
		labels := map[string]string{}
		for _, l := range labelRe.FindAllStringSubmatch(m[2], -1) {
			labels[l[1]] = l[2]
		}
		switch m[1] {
		case "nora_circuit_breaker_state":
			s.state[labels["registry"]] = v
		case "nora_circuit_breaker_transitions_total":
			if labels["to"] == "open" {
				s.opened[labels["registry"]] += v
			}
		case "go_goroutines":
			s.goroutines = v
		case "process_open_fds":
			s.fds = v
		case "process_resident_memory_bytes":
			s.rss = v
		}
	}
	return s, sc.Err()
}

// recorder scrapes every interval until ctx ends.
type recorder struct {
	mu      sync.Mutex
	samples []sample
	errors  int
}

func (r *recorder) run(ctx context.Context, client *http.Client, admin string, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		s, err := scrape(ctx, client, admin)
		r.mu.Lock()
		if err == nil {
			r.samples = append(r.samples, s)
		} else if ctx.Err() == nil {
			r.errors++
		}
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (r *recorder) all() []sample {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]sample(nil), r.samples...)
}

// window is one period of the fault schedule.
type window struct {
	f          fault
	start, end time.Time
}

// checkBreakers compares the breakers' states with the schedule: during a
// hard fault every primary's breaker opens; at the end of each healthy
// window every breaker is closed again; a slow upstream opens nothing; a
// secondary never opens. It returns the problems found and a per-window
// summary line.
func checkBreakers(samples []sample, windows []window, primaries, secondaries []string) (problems, summary []string) {
	in := func(from, to time.Time) []sample {
		var out []sample
		for _, s := range samples {
			if !s.at.Before(from) && !s.at.After(to) {
				out = append(out, s)
			}
		}
		return out
	}
	for i, w := range windows {
		ss := in(w.start, w.end.Add(500*time.Millisecond))
		if len(ss) == 0 {
			problems = append(problems, fmt.Sprintf("window %d (%s): no metrics samples", i, w.f))
			continue
		}
		last := in(w.start, w.end)
		peak := 0.0
		for _, s := range ss {
			peak = max(peak, s.goroutines)
		}
		long := w.end.Sub(w.start) >= 3*time.Second // a window cut short by the end of the load is not judged
		line := fmt.Sprintf("window %2d %-10s %5.1fs goroutines<=%-6v", i, w.f, w.end.Sub(w.start).Seconds(), peak)
		for _, k := range primaries {
			opened := false
			for _, s := range ss {
				opened = opened || s.state[k] != 0
			}
			first, end := ss[0], ss[len(ss)-1]
			if len(last) > 0 {
				end = last[len(last)-1]
			}
			newOpens := end.opened[k] - first.opened[k]
			switch {
			case !long:
			case w.f.hard() && !opened:
				problems = append(problems, fmt.Sprintf("window %d (%s): %s never opened", i, w.f, k))
			case w.f == faultSlow && newOpens > 0:
				problems = append(problems, fmt.Sprintf("window %d (slow): %s opened %v times", i, k, newOpens))
			case w.f == faultNone && i > 0 && end.state[k] != 0:
				problems = append(problems, fmt.Sprintf("window %d (healthy): %s still %v at the end", i, k, end.state[k]))
			}
			line += fmt.Sprintf(" %s=%s", shortKey(k), stateWord(opened, end.state[k]))
		}
		summary = append(summary, line)
	}
	for _, s := range samples {
		for _, k := range secondaries {
			if s.state[k] != 0 {
				problems = append(problems, fmt.Sprintf("secondary %s left closed (state %v)", k, s.state[k]))
				return problems, summary
			}
		}
	}
	return problems, summary
}

func shortKey(k string) string {
	f, _, _ := strings.Cut(k, ":")
	return f
}

func stateWord(opened bool, end float64) string {
	w := "closed"
	if opened {
		w = "opened"
	}
	return fmt.Sprintf("%s/end=%v", w, end)
}
