package admin

import (
	_ "embed"
	"html/template"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/nora-breaker/nora-breaker/answer"
)

// The status page (GET / on the admin listener) is one server-rendered HTML
// document with its CSS inline and no external assets. A few lines of
// script count the probe timers down and reload it; without script it
// still reads, and a <noscript> refresh reloads it.
//
//go:embed statuspage.html
var statusPageHTML string

// statusPageTemplate is the page's template, parsed once. It is no mutable
// state: nothing changes it after parsing, and executing it is safe for
// concurrent use. A page that does not parse panics when the package is
// initialised, so every test of this package catches it and GET / needs no
// error answer of its own.
var statusPageTemplate = template.Must(template.New("status").Parse(statusPageHTML))

// pageView is everything the status page shows. It is built from the same
// data as GET /breakers (views) and /health, plus counters read from the
// private registry; nothing in it comes from request data but counts.
type pageView struct {
	Version, Status, CircuitBreaker, Uptime, Now string
	Formats                                      []pageFormat
	Fallbacks                                    []fallbackCount
	History                                      []pageTransition
	HistorySize                                  int
}

// pageFormat is one format's box: its worst state, counts and upstreams.
type pageFormat struct {
	Name, Status                                      string
	Requests, Forwarded, Fallback, Stale, Synthesized uint64
	// Coalesced counts the requests that joined an identical request's
	// fetch in flight instead of making their own.
	Coalesced uint64
	Upstreams []pageUpstream
}

// pageUpstream groups the breakers of one upstream: its own key's row and
// one row per alias host (breakerView.Upstream).
type pageUpstream struct {
	Key         string
	StaleServed uint64
	Hosts       []pageHost
}

// pageHost is one breaker's row.
type pageHost struct {
	breakerView
	// ProbeIn is the seconds until the next probe may go, when one is
	// scheduled (open, automatic); -1 otherwise, and Probe says why.
	ProbeIn int
	Probe   string
	// StaleFor is how long the key has been served only from stale
	// copies, StaleAge how old the last copy served was; both "" while its
	// last answer was fresh. StaleSince is the run's start, Unix seconds.
	StaleFor, StaleAge string
	StaleSince         int64
	// Open is the open time for people ("2m 0s"), Grown says how it grew
	// ("after 2 failed probes"; "" when it did not).
	Open, Grown string
}

// pageTransition is one timeline row.
type pageTransition struct {
	historyEntry
	Time string
	Ago  string
}

// handleStatusPage serves GET /.
func (s *Server) handleStatusPage(w http.ResponseWriter, _ *http.Request) {
	v := s.statusPage()
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	// The page has no business loading anything from elsewhere.
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'")
	if err := statusPageTemplate.Execute(w, v); err != nil {
		s.o.Logger.Warn().Err(err).Msg("status page")
	}
}

// statusPage builds the page's view model at this instant.
func (s *Server) statusPage() pageView {
	now := s.o.Now()
	counts := gatherCounts(s.o.Registry)
	views := s.views()
	sum := summarize(views, s.o.Breakers.Enabled())
	v := pageView{Version: s.o.Version, Status: sum.status, CircuitBreaker: sum.circuitBreaker,
		Uptime: formatAge(now.Sub(s.o.Started)), Now: now.UTC().Format(time.RFC3339),
		Formats: groupFormats(views, sum.worst, counts, now), Fallbacks: counts.fallbacks, HistorySize: historySize}
	for _, e := range s.o.History.list() {
		v.History = append(v.History, pageTransition{historyEntry: e, Time: e.At.UTC().Format("2006-01-02 15:04:05"),
			Ago: formatAge(now.Sub(e.At))})
	}
	return v
}

// groupFormats orders the rows per format and, within a format, per
// upstream, both in configuration order (the order views lists keys in).
// worst is each format's worst state (summary.worst); an upstream's stale
// copies served add up its hosts' keys.
func groupFormats(views []breakerView, worst map[string]string, counts pageCounts, now time.Time) []pageFormat {
	var out []pageFormat
	formatAt := map[string]int{}
	upstreamAt := map[string][2]int{}
	for _, bv := range views {
		fi, ok := formatAt[bv.Format]
		if !ok {
			fi = len(out)
			formatAt[bv.Format] = fi
			res := counts.results[bv.Format]
			out = append(out, pageFormat{Name: bv.Format, Status: worst[bv.Format], Requests: counts.total(bv.Format),
				Forwarded: res[string(answer.Forwarded)], Fallback: res[string(answer.Fallback)],
				Stale: res[string(answer.Stale)],
				Synthesized: res[string(answer.Synthesized503)] + res[string(answer.Synthesized404)] +
					res[string(answer.Throttled)],
				Coalesced: counts.coalesced[bv.Format]})
		}
		f := &out[fi]
		up := bv.Upstream
		if up == "" {
			up = bv.Key
		}
		at, ok := upstreamAt[up]
		if !ok {
			at = [2]int{fi, len(f.Upstreams)}
			upstreamAt[up] = at
			f.Upstreams = append(f.Upstreams, pageUpstream{Key: up})
		}
		u := &out[at[0]].Upstreams[at[1]]
		u.StaleServed += counts.staleServed[bv.Key]
		u.Hosts = append(u.Hosts, hostRow(bv, counts, now))
	}
	return out
}

// hostRow says when the breaker will next probe its upstream, how long it
// stays open and how that grew, and since when its key has been served
// only from stale copies.
func hostRow(bv breakerView, counts pageCounts, now time.Time) pageHost {
	h := pageHost{breakerView: bv, ProbeIn: -1,
		Open: formatAge(time.Duration(math.Round(bv.OpenTime)) * time.Second)}
	switch bv.FailedProbes {
	case 0:
	case 1:
		h.Grown = "after 1 failed probe"
	default:
		h.Grown = "after " + strconv.Itoa(bv.FailedProbes) + " failed probes"
	}
	if since, ok := counts.staleSince[bv.Key]; ok {
		start := time.Unix(int64(since), 0)
		h.StaleSince = start.Unix()
		h.StaleFor = formatAge(now.Sub(start))
		h.StaleAge = formatAge(time.Duration(counts.staleAge[bv.Key] * float64(time.Second)))
	}
	switch {
	case bv.Forced == "open":
		h.Probe = "none while forced open"
	case bv.State == "open":
		h.ProbeIn = bv.RetryAfter
	case bv.State == "half_open":
		h.Probe = "probe in flight"
	default:
		h.Probe = "—"
	}
	return h
}

// formatAge renders a duration for people: "42s", "7m 3s", "2h 5m", "3d 4h".
func formatAge(d time.Duration) string {
	s := int64(math.Max(0, math.Floor(d.Seconds())))
	switch {
	case s < 60:
		return strconv.FormatInt(s, 10) + "s"
	case s < 3600:
		return strconv.FormatInt(s/60, 10) + "m " + strconv.FormatInt(s%60, 10) + "s"
	case s < 86400:
		return strconv.FormatInt(s/3600, 10) + "h " + strconv.FormatInt(s%3600/60, 10) + "m"
	}
	return strconv.FormatInt(s/86400, 10) + "d " + strconv.FormatInt(s%86400/3600, 10) + "h"
}
