package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// Answer classes. Everything else is a violation.
const (
	classUpstream   = "upstream" // the addressed upstream's own answer
	classFallback   = "fallback" // another upstream of the format (X-Nora-Upstream)
	classStale      = "stale"    // a stale copy (x-nora-stale)
	classSynth503   = "synthesized_503"
	classSynth404   = "synthesized_404"
	classGateway    = "gateway_error" // 502/504 for a non-GET whose upstream failed (docs/behaviour.md §5.3)
	classTruncated  = "truncated"     // a body cut by a fault after the headers went out
	classViolation  = "violation"
	maxViolationLog = 20
)

// classify decides what an answer is. t is the request sent; origin names
// the fakes that are secondaries (allowed to answer only as a fallback).
func classify(t target, resp *http.Response, secondaries map[string]bool) (string, string) {
	h := resp.Header
	origin := h.Get(originHeader)
	switch {
	case resp.StatusCode >= 500 && resp.StatusCode != 502 && resp.StatusCode != 503 && resp.StatusCode != 504:
		return classViolation, fmt.Sprintf("%d from the proxy", resp.StatusCode)
	case resp.StatusCode == http.StatusServiceUnavailable && h.Get("X-Nora-Breaker-Key") != "" &&
		h.Get("Retry-After") != "":
		return classSynth503, ""
	case resp.StatusCode == 502 || resp.StatusCode == 504:
		if t.method == http.MethodGet || t.method == http.MethodHead {
			return classViolation, fmt.Sprintf("%d for a %s although a healthy fallback exists", resp.StatusCode, t.method)
		}
		return classGateway, ""
	case resp.StatusCode >= 500:
		return classViolation, fmt.Sprintf("%d without breaker headers", resp.StatusCode)
	case strings.EqualFold(h.Get("X-Nora-Stale"), "true"):
		return classStale, ""
	case h.Get("X-Nora-Upstream") != "":
		if !secondaries[origin] {
			return classViolation, "fallback answer from " + origin
		}
		return classFallback, ""
	case origin == "" && resp.StatusCode == http.StatusNotFound && (t.format == "maven" || t.format == "docker"):
		return classSynth404, ""
	case origin == "":
		return classViolation, fmt.Sprintf("%d with no upstream origin", resp.StatusCode)
	case origin != t.primary:
		return classViolation, "answer from " + origin + " without X-Nora-Upstream"
	}
	return classUpstream, ""
}

// stats collects what the load saw.
type stats struct {
	mu         sync.Mutex
	counts     map[string]int
	rejected   []time.Duration // latencies of synthesized 503s
	all        []time.Duration
	violations []string
	maxLatency time.Duration
}

func newStats() *stats { return &stats{counts: make(map[string]int)} }

func (s *stats) add(class, why string, lat time.Duration, t target) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.counts[class]++
	s.all = append(s.all, lat)
	s.maxLatency = max(s.maxLatency, lat)
	if class == classSynth503 {
		s.rejected = append(s.rejected, lat)
	}
	if class == classViolation && len(s.violations) < maxViolationLog {
		s.violations = append(s.violations, fmt.Sprintf("%s %s: %s (%v)", t.method, t.url, why, lat))
	}
}

// percentile of sorted durations, q in [0,1].
func percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(q * float64(len(s)-1))
	return s[i]
}

// loadConfig is what the workers need.
type loadConfig struct {
	proxy       *url.URL
	conns       int
	targets     []target
	secondaries map[string]bool
	hangLimit   time.Duration // an answer slower than this is a hang
	think       time.Duration // mean pause between a worker's requests
}

// runLoad keeps cfg.conns workers busy until ctx ends.
func runLoad(ctx context.Context, cfg loadConfig, st *stats) *http.Transport {
	tr := &http.Transport{Proxy: http.ProxyURL(cfg.proxy), MaxIdleConnsPerHost: cfg.conns,
		MaxConnsPerHost: cfg.conns, DisableCompression: true}
	client := &http.Client{Transport: tr, Timeout: 2 * cfg.hangLimit,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	var wg sync.WaitGroup
	for i := 0; i < cfg.conns; i++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 7))
			for ctx.Err() == nil {
				t := cfg.targets[rng.IntN(len(cfg.targets))]
				one(client, t, cfg, st)
				// Pauses spread over [think/2, 3·think/2) keep the workers out of step.
				time.Sleep(cfg.think/2 + time.Duration(rng.Int64N(int64(cfg.think)+1)))
			}
		}(uint64(i))
	}
	wg.Wait()
	return tr
}

// one sends a request and records its class and latency.
func one(client *http.Client, t target, cfg loadConfig, st *stats) {
	var body io.Reader
	if t.method == http.MethodPut {
		body = strings.NewReader("soak upload")
	}
	req, err := http.NewRequest(t.method, t.url, body)
	if err != nil {
		st.add(classViolation, err.Error(), 0, t)
		return
	}
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		st.add(classViolation, "no answer: "+err.Error(), time.Since(start), t)
		return
	}
	_, rerr := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	lat := time.Since(start)
	class, why := classify(t, resp, cfg.secondaries)
	switch {
	case rerr != nil && errors.Is(rerr, context.DeadlineExceeded):
		class, why = classViolation, "body hung: "+rerr.Error()
	case rerr != nil && class != classViolation:
		class = classTruncated
	case lat > cfg.hangLimit && class != classViolation:
		class, why = classViolation, fmt.Sprintf("answered %d after %v (limit %v)", resp.StatusCode, lat, cfg.hangLimit)
	}
	st.add(class, why, lat, t)
}
